"""Fixtures shared by the sandbox tests."""

from __future__ import annotations

import pytest

from lightning_agents.rewards import isolation


@pytest.fixture
def watchdog_path(monkeypatch):
    """Run sandboxes as a non-root trainer without a writable cgroup would: the memory cap is the
    watchdog process summing resident memory (the path most memory-outside-RSS attacks aim at)."""
    monkeypatch.setitem(isolation._probed, "cgroups", None)
    monkeypatch.setitem(isolation._probed, "root", False)
