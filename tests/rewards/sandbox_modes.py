"""Both isolation modes of the code sandbox, for tests that must hold in each (pytest puts a test
file's folder on ``sys.path``; there are no test packages)."""

from __future__ import annotations

import pytest

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards.isolation import isolation_report

BWRAP = pytest.param(
    "bwrap",
    marks=pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here"),
)
ISOLATIONS = [BWRAP, "process"]


def score(verifier: CodeVerifier, program: str, tests: str):
    """The verdict on ``program`` (fenced as a model would write it) under ``tests``."""
    return verifier.verdict(f"```python\n{program}\n```", tests)
