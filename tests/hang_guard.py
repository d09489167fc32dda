"""Run a multi-process test command in its own process group and fail, not hang, when a
collective waits forever. (``tests/`` is on ``sys.path`` through its rootdir ``conftest.py``.)"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_or_fail(cmd: list[str], what: str, timeout: float = 300) -> str:
    """Run ``cmd`` from the repository root with one thread per process; ``pytest.fail`` naming
    ``what`` if it outlives ``timeout`` (its whole process group is killed, so no rank is left
    behind), fail on a non-zero exit; returns its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"{what} hung (a collective waited forever): {stderr[-2000:]}")
    assert proc.returncode == 0, stderr[-4000:]
    return stderr
