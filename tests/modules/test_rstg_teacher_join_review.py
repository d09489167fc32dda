"""The teacher-sampling join's guards, pinned from the review of 491555d (session 52): a refused
join leaves nothing to spend, a joined call without sampling is refused, ranks with different
``batch_size`` make the same all-reduces, and ``beta`` 0 distils nothing.

Sharding is faked on one process as in tests/modules/test_rstg_teacher_sampling_split.py."""

from __future__ import annotations

import pytest

from lightning_agents.modules.rstg import RSTGSettingError
from tests.modules.test_rstg_rl_rows import _module
from tests.modules.test_rstg_teacher_sampling_split import _other_rank, _records, _teacher_calls


def test_a_refused_join_leaves_no_count_for_an_unjoined_teacher_info(tmp_path, monkeypatch):
    """A join refused for a tool task stores no call count: a later teacher_info with no join of its
    own is refused, not sampled on the sharded teacher alone."""
    module = _module(tmp_path)
    _other_rank(monkeypatch, 2.0)  # the other rank misses the cache for records of a task with tools
    calls = _teacher_calls(monkeypatch, module)
    records = _records(1)
    with pytest.raises(RSTGSettingError, match="task with tools"):
        module._join_teacher_sampling(records, records[0])
    # nothing joined this call: the guard should refuse it before any generate
    with pytest.raises(RuntimeError, match="_join_teacher_sampling"):
        module.teacher_info(records)
    assert calls == []


def test_a_joined_call_that_teacher_info_does_not_make_is_refused(tmp_path, monkeypatch):
    """A rank that joined for one call and then finds nothing to sample (other records than it joined
    for) is refused: returning quietly would leave the other ranks waiting in that call."""
    module = _module(tmp_path)
    _other_rank(monkeypatch, 1.0, 1.0)  # misses, then the call count
    calls = _teacher_calls(monkeypatch, module)
    missing, cached = _records(1), _records(1, first=5)
    for r in cached:
        module.teacher_cache.put(module.teacher_key(r), 0.5, None, module.hparams.teacher_k)
    module._join_teacher_sampling(missing, missing[0])  # announces one generate call
    with pytest.raises(RuntimeError, match="_join_teacher_sampling"):
        module.teacher_info(cached)  # makes none
    assert calls == []


def test_ranks_with_batch_size_none_and_set_make_the_same_all_reduces(tmp_path, monkeypatch):
    """A rank with batch_size None and one with an int make the same number of all-reduces: before
    session 52's review the int rank made a second one, which on real ranks paired with the None
    rank's next collective (the first forward of its generate)."""
    a = _module(tmp_path / "a")
    sent_a = _other_rank(monkeypatch, 1.0, 1.0)
    _teacher_calls(monkeypatch, a)
    records = _records(2)
    a._join_teacher_sampling(records, records[0], batch_size=None)
    n_none = len(sent_a)
    b = _module(tmp_path / "b")
    sent_b = _other_rank(monkeypatch, 1.0, 1.0)
    b._join_teacher_sampling(records, records[0], batch_size=1)
    assert n_none == len(sent_b), (n_none, len(sent_b))


def test_beta_zero_is_left_out_of_frac_tokens_distilled(tmp_path, monkeypatch):
    """docs/rstg.md: a selected token at beta_t 0 gains no advantage, so it is not counted as
    distilled."""
    from tests.modules.test_rstg_guidance_metrics_batches import _guided_rollout

    module = _module(tmp_path, token_selection="all", beta_start=0.0, beta_slope=0.0, beta_floor=0.0)
    assert module.beta() == 0.0
    rollout = _guided_rollout(module, monkeypatch, problems=1, pass_rate=1.0, width=2, student_logp=-1.0)
    assert bool(rollout.info["selected"].all())
    assert module._rollout_metrics([rollout])["train/frac_tokens_distilled"] == 0.0
