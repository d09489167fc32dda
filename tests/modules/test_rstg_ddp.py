"""RSTG under DDP and with an FSDP2-sharded student: ranks with different data (only one has
negative groups, hence teacher SFT) run the same collectives, finish, and end with identical weights.

Launched through :func:`tests.modules.rstg_two_ranks.run_two_ranks`, which fails a run that outlives
its timeout (a collective left waiting) instead of hanging.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lightning_agents.models import load_causal_lm
from tests.modules.rstg_two_ranks import run_two_ranks

WORKER = Path(__file__).with_name("rstg_ddp_worker.py")


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_with_sft_on_one_rank_only_finishes_with_identical_weights(tmp_path):
    run_two_ranks(WORKER, tmp_path, 240)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    # Rank 0 had only negative groups and ran teacher SFT; rank 1 had none of either.
    assert all(x == 1.0 for x in r0["negative"]) and all(x > 0 for x in r0["sft_losses"])
    assert all(x == 0.0 for x in r1["negative"]) and all(x == 0 for x in r1["sft_losses"])
    assert r0["checksum"] == r1["checksum"] and r0["l2"] == r1["l2"] and r0["first"] == r1["first"]
    init = torch.cat([p.detach().reshape(-1).double() for p in load_causal_lm("embedded:student").parameters()])
    assert float(init.norm()) != r0["l2"]  # training moved the weights


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp2_sharded_student_with_sft_on_one_rank_only_finishes_with_identical_weights(tmp_path):
    """The student sharded with fully_shard: sampling (completions of different lengths per rank)
    and the teacher-SFT passes (rank 0 only) still run the same collectives on both ranks."""
    run_two_ranks(WORKER.with_name("rstg_fsdp_worker.py"), tmp_path, 240)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    assert all(x == 1.0 for x in r0["negative"]) and all(x > 0 for x in r0["sft_losses"])
    assert all(x == 0.0 for x in r1["negative"]) and all(x == 0 for x in r1["sft_losses"])
    assert r0["lengths"] != r1["lengths"]
    assert r0["checksum"] == r1["checksum"]
