"""Both isolation modes of the code sandbox, for tests that must hold in each (pytest puts a test
file's folder on ``sys.path``; there are no test packages)."""

from __future__ import annotations

import json

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


def one_file_passes(program: str, tests: str, name: str = "one file", namespace: dict | None = None) -> bool:
    """Whether ``tests`` pass when they run after ``program`` as one file in this process: what a
    sandbox verdict must agree with (any exception, ``BaseException`` included, is a failure, as the
    harness counts it). ``namespace``: the file's globals (default: empty, no ``__name__``)."""
    try:
        exec(compile(program + "\n" + tests, name, "exec"), {} if namespace is None else namespace)  # noqa: S102
    except BaseException:  # noqa: BLE001 -- any failure of the tests
        return False
    return True


def agrees_with_one_file(case: str, program: str, tests: str, passes: bool) -> None:
    """Assert that ``tests`` after ``program`` pass in one file exactly when ``passes`` (the case's
    label, checked so it cannot drift) and that the process sandbox's verdict says the same."""
    assert one_file_passes(program, tests) is passes, case
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed is passes, (case, verdict)


def forged_ready(message: dict) -> str:
    """A program that writes its own ``ready`` frame (``message``) on the reply descriptor and exits."""
    return (
        "import json, os, struct, sys\n"
        f"body = json.dumps({json.dumps(message)}).encode()\n"
        "os.write(int(sys.argv[3]), struct.pack('>I', len(body)) + body)\n"
        "os._exit(0)\n"
    )
