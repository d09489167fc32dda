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


@pytest.fixture
def ticking_template_clock(monkeypatch):
    """transformers' chat-template clock moved one second on every read (``reads`` counts them), so
    any two renders of a template that prints the time straddle a tick unless they read
    :mod:`lightning_agents.template_clock`'s one instant."""
    import datetime as dt

    import transformers.utils.chat_template_utils as chat_utils

    class Ticking(dt.datetime):
        reads = 0

        @classmethod
        def now(cls, tz=None):
            cls.reads += 1
            return dt.datetime(2026, 12, 7, 12, 0, 0) + dt.timedelta(seconds=cls.reads)

    monkeypatch.setattr(chat_utils, "datetime", Ticking)
    return Ticking
