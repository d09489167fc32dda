"""Finding F1 of the review of 39ac4ea (RL rows): the guidance metrics of a step with several generation
batches (``generation_batches_per_step`` > 1) are a mean of per-batch means.

39ac4ea's docs say ``teacher_weight_mean`` is "the mean weight of the episodes with a guided row", each
episode once, and that the token statistics (``opd_adv_mean``, ``opd_adv_pos_frac``, ``teacher_kl``)
count tokens. ``_rollout_metrics`` averaged each rollout's value with equal weight, so a generation
batch with one guided episode weighed as much as one with eight.

"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.modules.test_rstg_rl_rows import _module


def _guided_rollout(module, monkeypatch, problems: int, pass_rate: float, width: int, student_logp: float):
    """One generation batch whose groups are all wrong (every row guided), the teacher passing each
    prompt at ``pass_rate`` and scoring every token at log-prob -0.5."""
    g = module.hparams.num_generations
    rows = problems * g
    out = SimpleNamespace(
        action_mask=torch.ones(rows, width),
        truncated=torch.zeros(rows, dtype=torch.bool),
        logprobs=torch.full((rows, width), student_logp),
        entropies=torch.rand(rows, width),
    )
    monkeypatch.setattr(module, "teacher_info", lambda recs: [{"pass_rate": pass_rate, "answer": None} for _ in recs])
    monkeypatch.setattr(
        module, "_frozen_logprobs", lambda model, out, rows, **kw: torch.full((rows.numel(), width), -0.5)
    )
    records = [{"id": f"p{i}", "prompt": []} for i in range(problems)]
    rewards = torch.zeros(rows)
    _, info = module.compute_token_advantages(out, rewards, records)
    assert bool(info["opd_rows"].all())
    info["scored"] = SimpleNamespace(num_errors=0)
    return SimpleNamespace(out=out, rewards=rewards, info=info)


def test_guidance_metrics_of_several_generation_batches_count_episodes_and_tokens(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    # batch A: 1 prompt x G=2 episodes of 2 tokens, teacher pass rate 0, A_opd = -0.5 - -1 = 0.5
    # batch B: 3 prompts x 2 episodes of 4 tokens, teacher pass rate 1, A_opd = -0.5 - -2 = 1.5
    a = _guided_rollout(module, monkeypatch, problems=1, pass_rate=0.0, width=2, student_logp=-1.0)
    b = _guided_rollout(module, monkeypatch, problems=3, pass_rate=1.0, width=4, student_logp=-2.0)
    metrics = module._rollout_metrics([a, b])
    # episodes: (2 * 0 + 6 * 1) / 8; the mean of the two batches' means gave (0 + 1) / 2 = 0.5
    assert metrics["train/teacher_weight_mean"] == pytest.approx(0.75)
    # tokens: (4 * 0.5 + 24 * 1.5) / 28; the mean of means gave (0.5 + 1.5) / 2 = 1.0
    assert metrics["train/opd_adv_mean"] == pytest.approx(38 / 28)
    assert metrics["train/teacher_kl"] == pytest.approx(-38 / 28)
    assert metrics["train/opd_adv_pos_frac"] == pytest.approx(1.0)
    # one batch alone is unchanged
    alone = module._rollout_metrics([b])
    assert alone["train/teacher_weight_mean"] == pytest.approx(1.0)
    assert alone["train/opd_adv_mean"] == pytest.approx(1.5)


def test_entropy_is_not_logged_as_zero_where_the_sampler_reports_none(tmp_path, monkeypatch):
    """F3: vLLM reports no entropies (since 39ac4ea its agent batches too, instead of zeros); the step's
    ``train/entropy`` then read 0.0, a deterministic policy, where it was not measured at all."""
    import math

    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    rollout = _guided_rollout(module, monkeypatch, problems=1, pass_rate=1.0, width=2, student_logp=-1.0)
    measured = module._rollout_metrics([rollout])["train/entropy"]
    assert measured == pytest.approx(float(rollout.out.entropies.mean()))
    rollout.out.entropies = None
    assert math.isnan(module._rollout_metrics([rollout])["train/entropy"])


def _rollout(module, monkeypatch, rewards: list[float], width: int, truncated: list[bool] | None = None):
    """One generation batch of one prompt (G rows of ``width`` tokens) with the given rewards; the
    teacher scores every token at log-prob -0.5 (``token_selection: all``: every guided token is
    distilled)."""
    rows = len(rewards)
    out = SimpleNamespace(
        action_mask=torch.ones(rows, width),
        truncated=torch.tensor(truncated or [False] * rows),
        logprobs=torch.full((rows, width), -1.0),
        entropies=torch.rand(rows, width),
    )
    monkeypatch.setattr(module, "teacher_info", lambda recs: [{"pass_rate": 1.0, "answer": None} for _ in recs])
    monkeypatch.setattr(
        module, "_frozen_logprobs", lambda model, out, rows, **kw: torch.full((rows.numel(), width), -0.5)
    )
    rewards_t = torch.tensor(rewards)
    _, info = module.compute_token_advantages(out, rewards_t, [{"id": "p0", "prompt": []}])
    info["scored"] = SimpleNamespace(num_errors=0)
    return SimpleNamespace(out=out, rewards=rewards_t, info=info)


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_frac_tokens_distilled_is_the_steps_distilled_tokens_over_its_eligible_tokens(
    tmp_path, monkeypatch, mask_truncated
):
    """Session 51: ``train/frac_tokens_distilled`` was the mean of each generation batch's fraction, so a
    batch of short completions weighed as much as one of long ones."""
    module = _module(tmp_path, token_selection="all", mask_truncated=mask_truncated)
    # batch A: all wrong (guided), 2 rows of 2 tokens, every token distilled: 4 of 4
    short = _rollout(module, monkeypatch, [0.0, 0.0], width=2)
    # batch B: mixed (no guidance), 2 rows of 8 tokens, one truncated: 0 distilled of 16, or of 8
    # where mask_truncated drops the truncated row from the loss (and from what could be distilled)
    long = _rollout(module, monkeypatch, [1.0, 0.0], width=8, truncated=[False, True])
    metrics = module._rollout_metrics([short, long])
    eligible = 4 + (8 if mask_truncated else 16)
    # the mean of the two batches' fractions gave (1 + 0) / 2 = 0.5
    assert metrics["train/frac_tokens_distilled"] == pytest.approx(4 / eligible)
    assert module._rollout_metrics([short])["train/frac_tokens_distilled"] == pytest.approx(1.0)
    assert module._rollout_metrics([long])["train/frac_tokens_distilled"] == 0.0
