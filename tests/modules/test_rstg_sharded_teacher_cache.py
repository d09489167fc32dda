"""Review of 39ac4ea (RL rows), finding F2: a sharded teacher whose cache misses on one rank hangs.

39ac4ea pads the teacher's log-prob pass and the student's entropy pass across ranks, so a sharded
teacher now works from a filled teacher cache. Its sampling for the cache's misses (``teacher_info``,
``sample_weight: teacher_pass_rate`` or ``teacher_sft``) ran only on ranks with all-failed prompts:
under FSDP/ZeRO-3 each of its forwards is a collective that the other ranks never join, and the run
hung. Session 50 made every rank agree, before the early returns, whether any rank misses the cache,
and raise a setting error naming the cache on every rank. Session 51 lets the other ranks join the
sampling of one-shot records (test_rstg_sharded_teacher_sampling.py); these records are a task's with
tools (episodes, a data-dependent number of ``generate`` calls), which still stop with that error.

(slow tier, 2 gloo processes; on 39ac4ea it fails after its 150 s timeout).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.modules.rstg_two_ranks import run_two_ranks


@pytest.mark.slow
@pytest.mark.distributed
def test_sharded_teacher_cache_misses_on_one_rank_raise_on_every_rank_instead_of_hanging(tmp_path):
    run_two_ranks(Path(__file__).with_name("rstg_fsdp_guidance_worker.py"), tmp_path, 150, "teacher_miss")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert "teacher cache" in r0.get("error", "") and "teacher cache" in r1.get("error", ""), (r0, r1)
