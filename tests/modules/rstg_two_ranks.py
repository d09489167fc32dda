"""Runs an RSTG test worker on 2 gloo processes (``torch.distributed.run``) and fails, rather than
hangs, when a collective waits forever. Not a test module itself.

``torchrun`` starts each worker in a session of its own, so killing the launcher's process group left a
waiting worker alive, holding the stderr pipe the test read: the test then hung in ``communicate()``
instead of failing. Each worker writes its process id first (:func:`record_pid`), stderr goes to a file,
and on a timeout every worker is killed by its id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def record_pid(out_dir: str, rank: int) -> None:
    """Called by a worker first thing: its process id, for :func:`run_two_ranks` to kill it by."""
    with open(os.path.join(out_dir, f"pid{rank}"), "w", encoding="utf-8") as fh:
        fh.write(str(os.getpid()))


def shard_layers(model, mesh) -> None:
    """FSDP2 over ``mesh``: each decoder layer of ``model`` (a causal LM), then the rest."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def run_two_ranks(worker: Path, out_dir: Path, timeout: float, *args: str) -> str:
    """``worker out_dir *args`` on 2 ranks; returns its stderr. Fails the test where it runs past ``timeout``
    seconds (a collective left waiting), and where it exits with an error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={port}",
        str(worker),
        str(out_dir),
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    log = out_dir / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in out_dir.glob("pid*"):
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid.read_text()), signal.SIGKILL)
            proc.wait()
            pytest.fail(f"the 2-rank run hung (a collective waited forever): {log.read_text()[-2000:]}")
    stderr = log.read_text()
    assert proc.returncode == 0, stderr[-4000:]
    return stderr
