"""Review of 39ac4ea (RL rows), finding F2 on one process: a sharded teacher's sampling for cache misses.

Sharding is faked (``_sharded`` true, world 2, ``_global_max`` adds whether the other rank misses the
teacher cache). A rank whose own groups are all right (no guided row, no teacher statistics of its
own) must still join the teacher sampling the other rank runs for its misses: on 39ac4ea it returned
and went on to the idle passes (the 2-rank run hangs there); session 50 refused such a step on every
rank; since session 51 it makes one idle teacher ``generate`` call. With every prompt in the cache,
or with no rank missing it, no rank samples.

"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
from lightning_agents.rollout.hf_engine import HFGenerationEngine
from tests.modules.test_rstg_rl_rows import _module


def _batch(problems: int, g: int, width: int = 3):
    rows = problems * g
    out = SimpleNamespace(
        action_mask=torch.ones(rows, width),
        truncated=torch.zeros(rows, dtype=torch.bool),
        logprobs=torch.full((rows, width), -1.0),
        entropies=torch.rand(rows, width),
    )
    records = [
        {
            "id": f"p{i}",
            "prompt": [{"role": "user", "content": f"q{i}"}],
            "reference": "1",
        }
        for i in range(2)
    ]
    return out, records[:problems]


def _sharded(monkeypatch, module, other_rank_misses: int) -> None:
    """``other_rank_misses``: what the other rank puts in the all-reduce (1: it misses the cache, 2: it
    misses it for records of a task with tools)."""
    monkeypatch.setattr(RSTGModule, "_sharded", lambda self, model: True)
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)
    monkeypatch.setattr(
        RSTGModule,
        "_global_max",
        lambda self, local: float(max(local, other_rank_misses)),
    )
    monkeypatch.setattr(
        module,
        "_frozen_logprobs",
        lambda model, out, rows, **kw: torch.full(out.action_mask.shape, -0.5),
    )


def _count_teacher_generate(monkeypatch, module) -> list[int]:
    """Number of prompts of each ``generate`` call on the teacher (the real call still runs)."""
    calls: list[int] = []
    real = HFGenerationEngine.generate

    def counted(engine, prompts, *args, **kwargs):
        if engine.model is module.teacher:
            calls.append(len(prompts))
        return real(engine, prompts, *args, **{**kwargs, "synced_gpus": None})  # one process here

    monkeypatch.setattr(HFGenerationEngine, "generate", counted)
    return calls


def test_a_rank_without_guided_rows_joins_another_ranks_sampling_of_a_sharded_teacher(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    _sharded(monkeypatch, module, other_rank_misses=1)
    calls = _count_teacher_generate(monkeypatch, module)
    out, records = _batch(2, module.hparams.num_generations)
    rewards = torch.ones(len(out.truncated))  # all right: no group guided here
    _, info = module.compute_token_advantages(out, rewards, records)
    assert calls == [1] and not bool(info["opd_rows"].any())  # one idle call, on one prompt
    assert len(module.teacher_cache) == 0  # its samples are dropped


def test_a_rank_that_misses_the_cache_samples_once_and_no_rank_missing_samples_nothing(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    _sharded(monkeypatch, module, other_rank_misses=0)
    calls = _count_teacher_generate(monkeypatch, module)
    out, records = _batch(2, module.hparams.num_generations)
    module.compute_token_advantages(out, torch.ones(len(out.truncated)), records)
    assert calls == []  # nobody misses: no teacher call, idle or not
    _, info = module.compute_token_advantages(out, torch.zeros(len(out.truncated)), records)
    assert calls == [2] and bool(info["opd_rows"].all())  # its own 2 misses, in one call, no idle one
    assert len(module.teacher_cache) == 2


def test_a_sharded_teachers_cache_misses_for_episodes_are_still_refused_naming_the_cache(tmp_path, monkeypatch):
    """Episodes (a task with tools) would make different numbers of teacher generate calls per rank."""
    from tests.modules.test_rstg_rl_rows import _AsksTwice, _records, _with_task

    task = _AsksTwice(split="val", n=2)
    module = _with_task(_module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all"), task)
    _sharded(monkeypatch, module, other_rank_misses=2)
    out, _ = _batch(2, module.hparams.num_generations)
    with pytest.raises(RSTGSettingError, match="teacher cache"):
        module.compute_token_advantages(out, torch.ones(len(out.truncated)), _records(task, 2))


@pytest.mark.parametrize(
    ("this_rank_misses", "other_rank", "refused"),
    [(False, 1, False), (True, 0, True)],
)
def test_the_episode_refusal_is_decided_alike_on_every_rank_whatever_its_own_records(
    tmp_path, monkeypatch, this_rank_misses, other_rank, refused
):
    """Review of 6c1806d: the refusal was decided from each rank's own first record, so where the
    ranks' records were of different tasks (one with tools, one without) one rank raised while the
    other went into the sharded teacher's ``generate`` (a hang). Now it follows the misses' own task,
    reduced over the ranks: a rank of tool records with no miss joins another rank's one-shot sampling
    (1: the other rank misses, not for episodes), and a rank that misses for episodes refuses even
    where the other rank (0) misses nothing, as that rank then does too (it receives 2)."""
    from tests.modules.test_rstg_rl_rows import _AsksTwice, _records, _with_task

    task = _AsksTwice(split="val", n=2)
    module = _with_task(_module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all"), task)
    _sharded(monkeypatch, module, other_rank_misses=other_rank)
    calls = _count_teacher_generate(monkeypatch, module)
    seen: list[float] = []
    reduce = module._global_max
    monkeypatch.setattr(module, "_global_max", lambda local: seen.append(local) or reduce(local))
    out, _ = _batch(2, module.hparams.num_generations)
    rewards = torch.zeros(len(out.truncated)) if this_rank_misses else torch.ones(len(out.truncated))
    if refused:
        with pytest.raises(RSTGSettingError, match="teacher cache"):
            module.compute_token_advantages(out, rewards, _records(task, 2))
        assert seen == [2.0]  # what the other rank receives: it refuses too
        return
    module.compute_token_advantages(out, rewards, _records(task, 2))
    assert calls == [1] and seen == [0.0, 0.0]  # the idle join of the other rank's one generate call


def test_a_filled_cache_lets_a_sharded_teacher_guide(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    _sharded(monkeypatch, module, other_rank_misses=0)
    out, records = _batch(2, module.hparams.num_generations)
    for r in records:
        module.teacher_cache.put(module.teacher_key(r), 0.5, None, module.hparams.teacher_k, verified=2)
    rewards = torch.zeros(len(out.truncated))  # all wrong: every group guided, from the cache
    _, info = module.compute_token_advantages(out, rewards, records)
    assert bool(info["opd_rows"].all()) and info["teacher_weight_mean"] == pytest.approx(0.5)
