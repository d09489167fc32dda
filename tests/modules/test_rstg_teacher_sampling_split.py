"""A sharded teacher's sampling split into several ``generate`` calls per rank (session 52).

Each forward of a teacher sharded across processes is a collective, so every rank must make as many
teacher ``generate`` calls as the others. Session 51's ``_join_teacher_sampling`` paired one idle call
with the one call ``teacher_info`` makes in training (``batch_size`` ``None``), and ``precompute_teacher``
(``lightning-agents teacher_cache``, ``batch_size`` prompts per call) did not join at all: ranks with
different numbers of uncached prompts made different numbers of calls (a hang, or collectives paired
wrongly). Now the ranks' call counts are all-reduced and a rank with fewer pads with idle calls, and
``teacher_info`` refuses to sample on a sharded teacher for calls it did not join.

Sharding is faked on one process here (``_sharded`` true, ``_global_max`` adds the other rank's
values); the slow test runs ``precompute_teacher`` on 2 gloo processes with an FSDP2 teacher.

Also: ``train/frac_tokens_distilled`` counted tokens selected on rows of teacher weight 0, whose
distillation advantage is 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rollout.hf_engine import HFGenerationEngine
from tests.modules.rstg_two_ranks import run_two_ranks
from tests.modules.test_rstg_rl_rows import _module


def _records(n: int, first: int = 0) -> list[dict]:
    return [
        {"id": f"p{i}", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "reference": str(i + 1)}
        for i in range(first, first + n)
    ]


def _other_rank(monkeypatch, *values: float) -> list[float]:
    """Fake a sharded teacher on 2 ranks: the other rank puts ``values`` into this rank's successive
    all-reduces (max). Returns what this rank puts in."""
    sent: list[float] = []
    others = list(values)
    monkeypatch.setattr(RSTGModule, "_sharded", lambda self, model: True)
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)

    def reduce(self, local: float) -> float:
        sent.append(float(local))
        return max(float(local), others.pop(0))

    monkeypatch.setattr(RSTGModule, "_global_max", reduce)
    return sent


def _teacher_calls(monkeypatch, module) -> list[list]:
    """The prompts of each teacher ``generate`` call (the real call still runs, unsynced: one process)."""
    calls: list[list] = []
    real = HFGenerationEngine.generate

    def counted(engine, prompts, *args, **kwargs):
        if engine.model is module.teacher:
            calls.append(list(prompts))
        return real(engine, prompts, *args, **{**kwargs, "synced_gpus": None})

    monkeypatch.setattr(HFGenerationEngine, "generate", counted)
    return calls


def test_a_rank_with_fewer_teacher_calls_pads_them_to_the_other_ranks(tmp_path, monkeypatch):
    """Batch size 1: this rank misses 1 prompt (one call), the other rank 3 (three calls)."""
    module = _module(tmp_path)
    sent = _other_rank(monkeypatch, 1.0, 3.0)
    calls = _teacher_calls(monkeypatch, module)
    records = _records(1)
    module._join_teacher_sampling(records, records[0], batch_size=1)
    assert sent == [1.0, 1.0]  # "misses, one-shot", then its own call count
    assert len(calls) == 2 and all(len(c) == 1 for c in calls)  # two idle calls
    module.teacher_info(records, batch_size=1)
    assert len(calls) == 3  # its own call: three in all, as the other rank
    assert len(module.teacher_cache) == 1  # the idle samples are dropped


def test_precompute_teacher_joins_the_other_ranks_calls(tmp_path, monkeypatch):
    """``precompute_teacher`` with 3 uncached prompts in chunks of 2 (two calls) while the other rank
    makes three: one idle call; the other rank receives this rank's 2."""
    module = _module(tmp_path)
    sent = _other_rank(monkeypatch, 1.0, 3.0)
    calls = _teacher_calls(monkeypatch, module)
    result = module.precompute_teacher(_records(3), batch_size=2)
    assert result == {"records": 3, "computed": 3, "cached": 0}
    assert sent == [1.0, 2.0]
    assert [len(c) for c in calls] == [1, 2, 1]  # the idle call first, then its own two
    assert len(module.teacher_cache) == 3


def test_precompute_teacher_on_a_rank_without_records_joins_on_a_one_token_prompt(tmp_path, monkeypatch):
    module = _module(tmp_path)
    sent = _other_rank(monkeypatch, 1.0, 2.0)
    calls = _teacher_calls(monkeypatch, module)
    assert module.precompute_teacher([], batch_size=2) == {"records": 0, "computed": 0, "cached": 0}
    assert sent == [0.0, 0.0]
    eos = module.tokenizer.eos_token_id or 0
    assert calls == [[[eos]], [[eos]]]
    assert len(module.teacher_cache) == 0


def test_no_rank_missing_the_cache_makes_one_all_reduce_and_no_call(tmp_path, monkeypatch):
    module = _module(tmp_path)
    sent = _other_rank(monkeypatch, 0.0)
    calls = _teacher_calls(monkeypatch, module)
    records = _records(2)
    for r in records:
        module.teacher_cache.put(module.teacher_key(r), 0.5, None, module.hparams.teacher_k)
    assert module.precompute_teacher(records, batch_size=1)["cached"] == 2
    assert sent == [0.0] and calls == []


def test_precompute_teacher_samples_a_repeated_prompt_once(tmp_path, monkeypatch):
    """Its chunks are counted ahead (to join them), so repeats are dropped ahead: before, a repeat in a
    later chunk was found cached there, and one in the same chunk was sampled twice."""
    module = _module(tmp_path)
    calls = _teacher_calls(monkeypatch, module)
    first, second = _records(2)
    result = module.precompute_teacher([first, first, second, first], batch_size=2)
    assert result == {"records": 4, "computed": 2, "cached": 2}
    assert [len(c) for c in calls] == [2] and len(module.teacher_cache) == 2


def test_teacher_info_refuses_calls_on_a_sharded_teacher_that_no_join_announced(tmp_path, monkeypatch):
    """Training joins with ``batch_size`` ``None`` (one call); a caller that then samples in chunks of
    1 (two calls) would leave the other ranks one call short: refused before any ``generate``."""
    module = _module(tmp_path)
    _other_rank(monkeypatch, 1.0, 1.0)
    calls = _teacher_calls(monkeypatch, module)
    records = _records(2)
    module._join_teacher_sampling(records, records[0])
    with pytest.raises(RuntimeError, match="_join_teacher_sampling"):
        module.teacher_info(records, batch_size=1)
    assert calls == []
    with pytest.raises(RuntimeError, match="joined the other ranks for None"):
        module.teacher_info(records)  # the join is spent: a second sampling needs its own


def test_frac_tokens_distilled_leaves_out_tokens_of_rows_weighted_zero(tmp_path, monkeypatch):
    """Under ``sample_weight: teacher_pass_rate`` a row whose teacher passes 0 (or unknown) gets weight 0,
    so its selected tokens gain no advantage: they were counted as distilled."""
    from tests.modules.test_rstg_guidance_metrics_batches import _guided_rollout

    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    zero = _guided_rollout(module, monkeypatch, problems=1, pass_rate=0.0, width=2, student_logp=-1.0)
    one = _guided_rollout(module, monkeypatch, problems=1, pass_rate=1.0, width=2, student_logp=-1.0)
    assert bool(zero.info["selected"].all())  # selected, yet weighted 0
    assert module._rollout_metrics([zero])["train/frac_tokens_distilled"] == 0.0
    assert module._rollout_metrics([one])["train/frac_tokens_distilled"] == pytest.approx(1.0)
    assert module._rollout_metrics([zero, one])["train/frac_tokens_distilled"] == pytest.approx(0.5)
    unweighted = _module(tmp_path / "none", token_selection="all")  # sample_weight none: weight 1
    rollout = _guided_rollout(unweighted, monkeypatch, problems=1, pass_rate=0.0, width=2, student_logp=-1.0)
    assert unweighted._rollout_metrics([rollout])["train/frac_tokens_distilled"] == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(("mode", "own_calls"), [("uneven", [3, 1]), ("none", [2, 0])])
def test_precompute_teacher_with_a_sharded_teacher_on_two_ranks_joins_every_call(tmp_path, mode, own_calls):
    """FSDP2 teacher on 2 gloo processes, different numbers of uncached prompts per rank (and none at
    all on rank 1 in mode ``none``): both finish, each rank's prompts cached, as many calls on each."""
    run_two_ranks(Path(__file__).with_name("rstg_precompute_worker.py"), tmp_path, 180, mode)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert len(r0["calls"]) == len(r1["calls"]) == max(own_calls), (r0["calls"], r1["calls"])
    for r, own in zip((r0, r1), own_calls):
        assert r["result"]["computed"] == len(r["entries"]), r
        assert all(e is not None and e["k"] == 2 for e in r["entries"]), r
        # the idle calls sample one prompt once
        assert sum(n == 1 for n in r["calls"]) >= max(own_calls) - own, r
