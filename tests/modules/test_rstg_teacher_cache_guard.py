"""Review of 39ac4ea (RL rows), finding F2 on one process: the sharded-teacher cache check.

Sharding is faked (``_sharded`` true, world 2, ``_global_max`` adds the other rank's misses). A rank
whose own groups are all right (no guided row, no teacher statistics of its own) must still stop
when the other rank misses the teacher cache: on 39ac4ea it returned and went on to the idle passes,
while the other rank sampled from the sharded teacher alone (the 2-rank run hangs there). With every
prompt in the cache nothing is refused.

"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
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


def test_a_rank_without_guided_rows_stops_where_another_rank_misses_the_sharded_teachers_cache(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    _sharded(monkeypatch, module, other_rank_misses=1)
    out, records = _batch(2, module.hparams.num_generations)
    rewards = torch.ones(len(out.truncated))  # all right: no group guided here
    with pytest.raises(RSTGSettingError, match="teacher cache"):
        module.compute_token_advantages(out, rewards, records)


def test_a_filled_cache_lets_a_sharded_teacher_guide(tmp_path, monkeypatch):
    module = _module(tmp_path, sample_weight="teacher_pass_rate", token_selection="all")
    _sharded(monkeypatch, module, other_rank_misses=0)
    out, records = _batch(2, module.hparams.num_generations)
    for r in records:
        module.teacher_cache.put(module.teacher_key(r), 0.5, None, module.hparams.teacher_k, verified=2)
    rewards = torch.zeros(len(out.truncated))  # all wrong: every group guided, from the cache
    _, info = module.compute_token_advantages(out, rewards, records)
    assert bool(info["opd_rows"].all()) and info["teacher_weight_mean"] == pytest.approx(0.5)
