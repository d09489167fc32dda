"""The teacher's own sampling (SFT targets and pass rates for all-failed prompts the teacher cache
misses) under a teacher sharded across processes.

Only ranks with all-failed prompts sample from the teacher, and each forward of a sharded teacher is
a collective: before session 51 RSTG refused the step with a setting error naming the teacher cache.
Now a rank without such prompts joins each teacher ``generate`` call on a prompt of its own (its
samples dropped), with ``synced_gpus`` keeping both ranks stepping until the longest answer ends.

(slow tier, 2 gloo processes, FSDP2 student and teacher; on the code before it fails with the refusal.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.modules.rstg_two_ranks import run_two_ranks


@pytest.mark.slow
@pytest.mark.distributed
def test_sharded_uncached_teacher_samples_sft_targets_on_one_rank_and_both_finish_alike(tmp_path):
    run_two_ranks(Path(__file__).with_name("rstg_fsdp_worker.py"), tmp_path, 300, "teacher_uncached")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    # rank 0: every group all-failed, the teacher sampled for its 4 prompts (cache empty at start),
    # its right answers trained on; rank 1: mixed groups, no teacher statistics of its own
    assert all(x == 1.0 for x in r0["negative"]) and all(x > 0 for x in r0["sft_losses"]), r0
    assert r0["cached"] == 4, r0
    assert all(x == 0.0 for x in r1["negative"]) and all(x == 0 for x in r1["sft_losses"]), r1
    assert r1["cached"] == 0, r1
    assert r0["checksum"] == r1["checksum"]
