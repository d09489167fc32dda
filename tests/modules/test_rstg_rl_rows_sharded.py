"""A sharded policy (FSDP, ZeRO-3) with one row per user turn (review of session 49's ``rl_rows``).

Each forward and backward of a sharded policy is a collective, so every rank must run as many policy
passes as the others. Before, every rank held ``records x G`` rows; with ``rl_rows`` the ranks' rollouts
hold different numbers of rows (the episodes' user turns), and a rank with fewer micro-batches left the
others waiting in a collective (a hang). Multi-turn episodes with a sharded policy are allowed with the
vLLM engines (only the HF engine's synced generation refuses them).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_agents.modules.rstg import RSTGModule
from tests.modules.rstg_two_ranks import run_two_ranks
from tests.modules.test_rstg_rl_rows import _AsksTwice, _module, _records, _with_task

_BACKWARD = RSTGModule._policy_backward


def _learn(module, rollout, monkeypatch, sharded: bool, others: int):
    """``learn`` on ``rollout``, as if sharded with another rank holding ``others`` more policy
    micro-batches; returns (policy passes run, metrics)."""
    opt = torch.optim.SGD(module.model.parameters(), lr=0.0)  # the weights stay: both runs see the same model
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    monkeypatch.setattr(RSTGModule, "_policy_sharded", lambda self: sharded)
    monkeypatch.setattr(RSTGModule, "_global_max", lambda self, local: float(local + others))
    passes = []

    def counted(self, r, sl, n_tokens, n_seqs):
        passes.append(sl)
        return _BACKWARD(self, r, sl, n_tokens, n_seqs)

    monkeypatch.setattr(RSTGModule, "_policy_backward", counted)
    metrics = module.learn([rollout])
    return passes, metrics


def test_a_sharded_policy_runs_as_many_policy_passes_as_the_rank_with_most_rows(tmp_path, monkeypatch):
    task = _AsksTwice(split="val", n=2)
    module = _with_task(
        _module(tmp_path, guidance=False, teacher=None, rl_rows="per_user_turn", micro_batch_size=2), task
    )
    rollout = module.collect(_records(task, 2))
    assert len(rollout.rewards) > len(rollout.info["episode_rewards"]), "no episode reached a second user turn"
    alone, plain = _learn(module, rollout, monkeypatch, sharded=False, others=0)
    padded, sharded = _learn(module, rollout, monkeypatch, sharded=True, others=2)
    # the rank with fewer rows joins the other rank's two further passes; they add nothing to the loss
    assert len(padded) == len(alone) + 2
    assert sharded["train/policy_loss"] == pytest.approx(plain["train/policy_loss"], abs=1e-7)
    assert sharded["train/clip_low_frac"] == plain["train/clip_low_frac"]


def test_a_sharded_reference_runs_as_many_passes_as_the_rank_with_most_rows(tmp_path, monkeypatch):
    """The KL reference's pass over every row (a sharded student's own base under adapters, or a
    reference the strategy sharded) is a collective per micro-batch too."""
    from lightning_agents.modules import rstg

    task = _AsksTwice(split="val", n=2)
    module = _with_task(
        _module(tmp_path, guidance=False, teacher=None, rl_rows="per_user_turn", micro_batch_size=2, beta_kl=0.1),
        task,
    )
    passes = []
    forward = rstg.completion_logprobs

    def counted(model, *args, **kwargs):
        if model is module.ref_model:
            passes.append(args[0].shape[0])
        return forward(model, *args, **kwargs)

    monkeypatch.setattr(rstg, "completion_logprobs", counted)
    monkeypatch.setattr(rstg, "sharding_kind", lambda model, root=None: "fsdp2")
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)
    monkeypatch.setattr(RSTGModule, "_global_max", lambda self, local: float(local + 2))
    rollout = module.collect(_records(task, 2))
    rows = len(rollout.rewards)
    assert rows > len(rollout.info["episode_rewards"]), "no episode reached a second user turn"
    assert len(passes) == -(-rows // 2) + 2  # its own micro-batches and the other rank's two more
    assert rollout.ref_logprobs.shape[0] == rows


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp2_ranks_with_different_row_counts_finish_one_step_with_identical_weights(tmp_path):
    """Two ranks of an FSDP2-sharded student, one with several rows per episode and one with one: the
    optimizer step finishes on both (no collective left waiting) with the same weights."""
    import json
    from pathlib import Path

    run_two_ranks(Path(__file__).with_name("rstg_fsdp_rows_worker.py"), tmp_path, timeout=180)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r1["rows"] == 4 and r0["rows"] > 4 + 1, (r0, r1)  # different numbers of micro-batches of 2
    assert r0["checksum"] == r1["checksum"]
