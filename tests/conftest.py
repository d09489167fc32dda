"""Shared fixtures: the real benchmark data in ``../shared/data`` and CPU thread limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"

# Two cores on the CI machine: keep intra-op threads at one per pytest worker so xdist workers
# do not oversubscribe the CPU.
torch.set_num_threads(int(os.environ.get("LA_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public benchmark data; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it lives beside the project as ../shared/data)")
    return SHARED_DATA
