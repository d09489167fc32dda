"""RSTG training on multi-turn episodes (a task with tools) on 2 ranks under a wrapper that splits no
parameter: Lightning's DDP, and FSDP1 ``ShardingStrategy.NO_SHARD`` around student and teacher.

Under such a wrapper no forward is a collective, so the ranks' episodes, which take different numbers
of ``generate`` calls (rank 0's the user's two further turns, rank 1's one), run unsynced, student's and
teacher's alike (the teacher samples episodes for its cache's misses on each rank), while the backward
passes still reduce gradients and must pair up. Session 51 made this path work (an FSDP wrapper that
shards nothing passes ``synced_gpus=False``, where transformers would sync generation on its own) and
tested it on one process only (``_sample`` -> ``generate``); this is the real 2-process run.

(slow tier, 2 gloo processes.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.modules.rstg_two_ranks import run_two_ranks


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("mode", ["ddp", "no_shard"])
def test_episodes_of_different_lengths_per_rank_train_alike_under_an_unsplit_wrapper(tmp_path, mode):
    run_two_ranks(Path(__file__).with_name("rstg_episodes_unsplit_worker.py"), tmp_path, 300, mode)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    # rank 0's episodes ask again: more student generate calls than rank 1's, none of them synced
    assert r0["calls"]["student"] > r1["calls"]["student"], (r0, r1)
    # rank 0's all-failed groups sample the teacher's episodes for its cache, rank 1's mixed ones do not
    assert r0["calls"]["teacher"] > r1["calls"]["teacher"] and r0["cached"] > r1["cached"], (r0, r1)
    assert r0["checksum"] == r1["checksum"]
