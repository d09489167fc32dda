"""The student's backward passes under wrappers that shard nothing but reduce gradients in every
backward: FSDP1 ``ShardingStrategy.NO_SHARD`` and FSDP2 over a 2 replicas x 1 shard mesh (HSDP).

Since session 51 these count as no sharding (``sharding_kind`` ``none``): generation and the frozen
models' forwards, which run no collective under them, are no longer padded or synced. Their backward
still all-reduces the gradients across ranks, in every backward (``no_sync`` is only entered for a
DDP wrapper), so ``learn`` must still run as many teacher-SFT and policy passes on every rank as on
the rank with the most: rank 0 trains on teacher answers, rank 1 does not. Without that padding the
ranks' gradient all-reduces pair up wrongly (rank 1's policy gradient averaged with rank 0's SFT one)
and the run hangs or ends with different weights.

(slow tier, 2 gloo processes.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.modules.rstg_two_ranks import run_two_ranks


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("mode", ["replicate_only", "no_shard"])
def test_teacher_sft_on_one_rank_under_a_wrapper_that_reduces_in_backward_finishes_alike(tmp_path, mode):
    run_two_ranks(Path(__file__).with_name("rstg_fsdp_worker.py"), tmp_path, 240, mode)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    # rank 0: every group all-failed, trained on the cached teacher answers; rank 1: none
    assert all(x > 0 for x in r0["sft_losses"]), r0
    assert all(x == 0 for x in r1["sft_losses"]), r1
    assert r0["checksum"] == r1["checksum"]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("layout", ["replicate_only", "no_shard"])
def test_an_uncached_teacher_under_a_wrapper_that_shards_nothing_samples_on_one_rank_only(tmp_path, layout):
    """Such a teacher's sampling is not joined across ranks (no forward of it is a collective), so its
    ``generate`` must not be synced either: transformers syncs generation on its own for any
    FSDP-managed module (``synced_gpus=None``), and rank 0's per-token all-reduces then met rank 1's
    next collective, which is not there."""
    run_two_ranks(Path(__file__).with_name("rstg_fsdp_worker.py"), tmp_path, 240, f"teacher_uncached_{layout}")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    assert r0["cached"] == 4 and all(x > 0 for x in r0["sft_losses"]), r0
    assert r1["cached"] == 0 and all(x == 0 for x in r1["sft_losses"]), r1
    assert r0["checksum"] == r1["checksum"]
