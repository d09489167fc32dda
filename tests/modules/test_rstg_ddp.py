"""RSTG under DDP and with an FSDP2-sharded student: ranks with different data (only one has
negative groups, hence teacher SFT) run the same collectives, finish, and end with identical weights."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_agents.models import load_causal_lm

WORKER = Path(__file__).with_name("rstg_ddp_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_with_sft_on_one_rank_only_finishes_with_identical_weights(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        str(WORKER),
        str(tmp_path),
    ]
    # Own process group, so a hung run's workers are ended with the launcher.
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:  # the deadlock this test exists for
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"DDP run hung (a collective waited forever): {stderr[-2000:]}")
    assert proc.returncode == 0, stderr[-4000:]
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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        str(WORKER.with_name("rstg_fsdp_worker.py")),
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:  # a collective one rank never joins
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"FSDP2 run hung (a collective waited forever): {stderr[-2000:]}")
    assert proc.returncode == 0, stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 2
    assert all(x == 1.0 for x in r0["negative"]) and all(x > 0 for x in r0["sft_losses"])
    assert all(x == 0.0 for x in r1["negative"]) and all(x == 0 for x in r1["sft_losses"])
    assert r0["lengths"] != r1["lengths"]
    assert r0["checksum"] == r1["checksum"]
