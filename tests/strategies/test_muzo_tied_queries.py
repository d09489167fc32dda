"""Query-parallel MUZO on a real architecture with tied weights equals one process (bf16-true masters)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")


@pytest.mark.slow  # two processes start and import torch, Lightning and transformers: about a minute
@pytest.mark.distributed
def test_query_parallel_on_a_tied_llama_with_bf16_masters_equals_one_process_bit_for_bit(tmp_path):
    worker = Path(__file__).with_name("muzo_tied_queries_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for world in (1, 2):
        run = subprocess.run(
            [sys.executable, str(worker), str(tmp_path), str(world)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr[-3000:]
    single = torch.load(tmp_path / "world1_rank0.pt")
    ranks = [torch.load(tmp_path / f"world2_rank{r}.pt") for r in (0, 1)]
    assert "lm_head.weight" not in single  # tied: one tensor, listed once
    for name, weight in single.items():
        assert weight.dtype == torch.bfloat16
        # Masters restore exactly, so each rank evaluating only its own queries changes nothing.
        assert torch.equal(ranks[0][name], weight), name
        assert torch.equal(ranks[1][name], weight), name
