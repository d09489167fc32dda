"""Review of the session-53 RSTG multi-process change: refusals the ranks must agree on.

1. ``precompute_teacher`` (user code, every rank its own records) under a sharded teacher: a rank whose
   uncached records ``_sample`` refuses (a verifier that scores episodes on a record naming no task with
   tools; episodes and plain prompts in one chunk) raised after the join, while the others waited in
   the sharded ``generate`` (or, with episodes joined call by call, in the next all-reduce): a hang. The
   join now reduces the refusal with its first all-reduce and every rank raises.
2. ``_agree_on_batch`` caught only ``RSTGSettingError``: a task that cannot be built (a class path that
   does not import, ``TaskSpecError``) raised on one rank before the all-reduce the others waited in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_agents.errors import LightningAgentsError
from lightning_agents.modules.rstg import RSTGModule
from tests.modules.rstg_two_ranks import run_two_ranks

EPISODE_VERIFIER = "lightning_agents.tasks.tau_actions.TauActionVerifier"


def _plain(i: int, **extra) -> dict:
    prompt = [{"role": "user", "content": f"What is {i} + 1?"}]
    return {"id": f"p{i}", "prompt": prompt, "reference": str(i + 1), **extra}


def _sharded_teacher_ranks(monkeypatch, other: float) -> list[float]:
    """Fake 2 ranks and a sharded teacher; the other rank's all-reduced code is ``other``."""
    sent: list[float] = []
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)
    monkeypatch.setattr(RSTGModule, "_sharded", lambda self, model: True)

    def most(self, local):
        sent.append(float(local))
        return max(float(local), other)

    monkeypatch.setattr(RSTGModule, "_global_max", most)
    return sent


def test_a_rank_whose_teacher_records_are_refused_tells_the_others_before_raising(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    sent = _sharded_teacher_ranks(monkeypatch, other=1.0)
    with pytest.raises(LightningAgentsError, match="TauActionVerifier scores a whole agent episode"):
        module._join_teacher_sampling([_plain(0, verifier=EPISODE_VERIFIER)], _plain(5), 4)
    assert len(sent) == 1 and sent[0] > 2.0, sent  # one all-reduce, with a code the others stop on


def test_a_rank_with_good_teacher_records_stops_with_a_refused_rank(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    sent = _sharded_teacher_ranks(monkeypatch, other=3.0)
    with pytest.raises(LightningAgentsError, match=r"another rank refused its uncached teacher records"):
        module._join_teacher_sampling([_plain(1)], None, 4)
    assert sent == [1.0]


def test_a_rank_whose_batch_names_a_task_that_cannot_be_built_still_joins_the_others(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    sent: list[list[float]] = []
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)
    monkeypatch.setattr(RSTGModule, "_global_counts", lambda self, local: sent.append(list(local)) or list(local))
    with pytest.raises(LightningAgentsError, match="no_such_module"):
        module._agree_on_batch([_plain(0, task="no_such_module.Task")], None, "a training batch")
    assert sent == [[1.0, 0.0]]  # it told the others before raising


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["episode_verifier", "mixed"])
def test_precompute_teacher_refused_on_one_rank_stops_every_rank(tmp_path, mode):
    """FSDP2 teacher on 2 gloo processes; rank 0's uncached records are refused by ``_sample``."""
    run_two_ranks(Path(__file__).with_name("rstg_review53_join_worker.py"), tmp_path, 150, mode)
    errors = [json.loads((tmp_path / f"rank{rank}.json").read_text())["error"] for rank in (0, 1)]
    assert errors[0] is not None and errors[1] is not None, errors
    if mode == "episode_verifier":
        assert "scores a whole agent episode" in errors[0], errors
        assert "another rank refused its uncached teacher records" in errors[1], errors
