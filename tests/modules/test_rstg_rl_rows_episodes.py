"""RSTG's per-episode statistics and sharded guidance passes with one row per user turn (``model.rl_rows``).

An episode laid out in several rows counts once in a per-episode statistic: ``train/truncated_frac`` and
``teacher_weight_mean`` counted rows before session 50, so an unfinished 30-row episode weighed 30 times.
Under a sharded student or teacher (FSDP, ZeRO-3) each forward is a collective: the teacher's pass and the
student's entropy pass ran only on ranks with guided rows, so a rank without any left the others waiting.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.modules.rstg import RSTGModule
from tests.modules.rstg_two_ranks import run_two_ranks
from tests.modules.test_rstg_rl_rows import _AsksTwice, _module, _records, _with_task


def test_truncated_frac_counts_an_episode_once_however_many_rows_it_took(tmp_path):
    task = _AsksTwice(split="val", n=2)
    module = _with_task(_module(tmp_path, guidance=False, teacher=None, rl_rows="per_user_turn"), task)
    rollout = module.collect(_records(task, 2))
    ep = rollout.info["row_episode"]
    episodes = len(rollout.info["episode_rewards"])
    long = next(e for e in ep.tolist() if ep.tolist().count(e) > 1)
    # one unfinished episode, every row of it marked as run_agent_rl marks an unanswered episode's rows
    rollout.out.truncated[:] = ep == long
    rows = int((ep == long).sum()) / len(ep)
    assert rows != pytest.approx(1 / episodes), "the row count would give the same answer"
    metrics = module._rollout_metrics([rollout])
    assert metrics["train/truncated_frac"] == pytest.approx(1 / episodes)
    # a layout of one row per episode (no row index) counts its rows, which are its episodes
    del rollout.info["row_episode"]
    assert module._rollout_metrics([rollout])["train/truncated_frac"] == pytest.approx(rows)


def test_teacher_weight_mean_counts_each_guided_episode_once(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    # 2 problems x G=2 episodes, all wrong (every group guided): problem 0's episodes took 3 rows each,
    # problem 1's one each; the teacher passes problem 0 half the time and problem 1 always
    row_episode = torch.tensor([0, 0, 0, 1, 1, 1, 2, 3])
    rows, width = len(row_episode), 4
    out = SimpleNamespace(
        action_mask=torch.ones(rows, width),
        truncated=torch.zeros(rows, dtype=torch.bool),
        logprobs=torch.full((rows, width), -1.0),
        entropies=torch.rand(rows, width),
    )
    rates = {"p0": 0.5, "p1": 1.0}
    monkeypatch.setattr(
        module, "teacher_info", lambda recs: [{"pass_rate": rates[r["id"]], "answer": None} for r in recs]
    )
    monkeypatch.setattr(module, "_frozen_logprobs", lambda model, out, rows, **kw: torch.full((rows.numel(), 4), -0.5))
    records = [{"id": "p0", "prompt": []}, {"id": "p1", "prompt": []}]
    _, info = module.compute_token_advantages(out, torch.zeros(4), records, row_episode)
    assert bool(info["opd_rows"].all())
    # episodes: (0.5 + 0.5 + 1 + 1) / 4; rows would give (6 * 0.5 + 2 * 1) / 8 = 0.625
    assert info["teacher_weight_mean"] == pytest.approx(0.75)


@pytest.mark.parametrize("guided", [False, True], ids=["no_guided_row", "guided_rows"])
def test_a_sharded_teacher_and_student_entropy_pass_run_as_often_on_every_rank(tmp_path, monkeypatch, guided):
    """The other rank makes two teacher passes and two student entropy passes more than this one
    (vLLM gives no entropies, ``soft_or``): this rank joins them, with guided rows of its own or none."""
    from lightning_agents.modules import rstg

    task = _AsksTwice(split="val", n=2)
    module = _with_task(_module(tmp_path, rl_rows="per_user_turn", micro_batch_size=2), task)
    records = _records(task, 2)
    rollout = module.collect(records)
    episodes = len(rollout.info["episode_rewards"])
    out = dataclasses.replace(rollout.out, entropies=None)  # as from vLLM: the entropy pass runs
    passes = {"teacher": 0, "student": 0}
    forward = rstg.completion_logprobs

    def counted(model, *args, **kwargs):
        passes["teacher" if model is module.teacher else "student"] += 1
        return forward(model, *args, **kwargs)

    monkeypatch.setattr(rstg, "completion_logprobs", counted)
    monkeypatch.setattr(rstg, "sharding_kind", lambda model, root=None: "fsdp2")
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)
    monkeypatch.setattr(RSTGModule, "_global_max", lambda self, local: float(local + 2))
    # all wrong: every group negative, every row guided; all right: no group is
    rewards = torch.full((episodes,), 0.0 if guided else 1.0)
    _, info = module.compute_token_advantages(out, rewards, records, rollout.info["row_episode"])
    own = -(-int(info["opd_rows"].sum()) // 2)
    assert (own > 0) == guided
    assert passes == {"teacher": own + 2, "student": own + 2}


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp2_ranks_with_and_without_guided_rows_finish_the_guidance_passes(tmp_path):
    """Two ranks of an FSDP2-sharded student and teacher: rank 0's groups are all wrong (guided, several
    rows per episode), rank 1's all right (no guided row). Both finish the advantages (no collective left
    waiting) and agree on a sum over ranks taken afterwards."""
    import json
    from pathlib import Path

    run_two_ranks(Path(__file__).with_name("rstg_fsdp_guidance_worker.py"), tmp_path, timeout=150)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["guided"] > 0 and r1["guided"] == 0, (r0, r1)
    assert r0["total"] == r1["total"] == r0["guided"]
