"""Code verifiers: a candidate program against trusted tests, or against an expected output.

Both score through the sandbox (:mod:`lightning_agents.rewards.isolation`) and never trust what the
candidate reports about itself: :class:`CodeVerifier` asks the trusted harness of
:func:`~lightning_agents.rewards.verdict.judge`; :class:`ProgramOutputVerifier` compares the captured
output here. Each also offers ``verdict(completion, reference)`` with the reason for the score,
which :class:`~lightning_agents.rewards.registry.RewardScorer` counts.
"""

from __future__ import annotations

from typing import Literal

from lightning_agents.rewards.isolation import check_isolation
from lightning_agents.rewards.sandbox import run_python
from lightning_agents.rewards.verdict import Verdict, judge
from lightning_agents.tasks.answers import extract_program

__all__ = ["CodeVerifier", "ProgramOutputVerifier", "extract_program"]


def _has_fence(completion: str) -> bool:
    return "```" in (completion or "")


def _compile_reason(completion: str, program: str) -> Verdict | None:
    """A failing verdict for a completion with nothing to run, else None."""
    if not program.strip():
        return Verdict(False, "empty", "no program in the completion")
    try:
        compile(program, "solution.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        reason = "compile_error" if _has_fence(completion) else "no_code"
        return Verdict(False, reason, f"{type(err).__name__}: {err}"[:300])
    return None


class CodeVerifier:
    """1.0 when the candidate's functions pass the reference tests, as decided by a trusted harness.

    ``completion`` is the program (fenced code is extracted with :func:`extract_program`);
    ``reference`` is trusted test code, e.g. HumanEval's ``test`` followed by ``check(entry_point)``.
    The tests run in a separate harness process; every name they use without defining it (the
    entry point) calls into the sandboxed candidate and gets plain data back (see
    :func:`~lightning_agents.rewards.verdict.judge`). A timeout, a dead candidate, a wrong or
    non-plain result, a failed assertion: 0.

    Args:
        timeout_s: wall-clock limit per program (loading it and running all tests), in seconds.
        memory_mb: memory cap of the candidate's sandbox in MiB (all its processes together).
        max_output_bytes: cap on what the program may print or write.
        isolation: ``"bwrap"`` (namespaces + seccomp + cgroup; refuses to run where unavailable)
            or the explicit, weaker ``"process"``.
        site_packages: let programs import the trainer's installed packages (numpy, ...), bound
            read-only into the sandbox. Off by default (standard library only): 48 of MBPP+'s 394
            reference solutions import numpy and score 0 without it.
        max_reply_bytes: largest value a program's function may return, as JSON (one MBPP+
            solution returns 1.4 MB); the harness holds up to about 100 times as much.

    Raises:
        IsolationUnavailable: at construction, when ``isolation`` cannot be set up on this machine.
    """

    def __init__(
        self,
        timeout_s: float = 10.0,
        memory_mb: int = 1024,
        max_output_bytes: int = 1 << 16,
        isolation: Literal["bwrap", "process"] = "bwrap",
        site_packages: bool = False,
        max_reply_bytes: int = 1 << 20,
    ) -> None:
        check_isolation(isolation)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_output_bytes = max_output_bytes
        self.isolation = isolation
        self.site_packages = site_packages
        self.max_reply_bytes = max_reply_bytes

    def verdict(self, completion: str, reference: str) -> Verdict:
        """The harness's decision on ``completion`` against the test code ``reference``, with its reason.

        Raises:
            VerifierError: the sandbox or harness failed (no verdict; not the program's fault).
        """
        program = extract_program(completion)
        early = _compile_reason(completion, program)
        if early is not None:
            return early
        return judge(
            program,
            reference,
            isolation=self.isolation,
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            max_output_bytes=self.max_output_bytes,
            site_packages=self.site_packages,
            max_reply_bytes=self.max_reply_bytes,
        )

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` against the test code ``reference``: 1.0 pass, 0.0 fail."""
        return float(self.verdict(completion, reference).passed)


class ProgramOutputVerifier:
    """1.0 when the candidate program prints exactly the reference (stripped), else 0.0.

    For "write a program that prints the answer" tasks, such as the embedded task's program style.
    The program never sees the reference; its output is compared here, on the trusted side.

    Args:
        timeout_s: wall-clock limit per program in seconds.
        memory_mb: memory cap of the sandbox in MiB.
        max_output_bytes: cap on what the program may print.
        isolation: ``"bwrap"`` or the explicit, weaker ``"process"``.
        site_packages: let programs import the trainer's installed packages (see
            :class:`CodeVerifier`).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        max_output_bytes: int = 1 << 14,
        isolation: Literal["bwrap", "process"] = "bwrap",
        site_packages: bool = False,
    ) -> None:
        check_isolation(isolation)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_output_bytes = max_output_bytes
        self.isolation = isolation
        self.site_packages = site_packages

    def verdict(self, completion: str, reference: str) -> Verdict:
        """The decision on ``completion`` with its reason (see :data:`~lightning_agents.rewards.verdict.REASONS`)."""
        program = extract_program(completion)
        early = _compile_reason(completion, program)
        if early is not None:
            return early
        r = run_python(
            program,
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            max_output_bytes=self.max_output_bytes,
            isolation=self.isolation,
            site_packages=self.site_packages,
        )
        if r.timed_out:
            return Verdict(False, "timeout", "", r.duration_s)
        if r.output_truncated:
            return Verdict(False, "output_flood", "", r.duration_s)
        if not r.ok:
            return Verdict(
                False, "runtime_error", r.stderr.strip()[-300:] or f"exit status {r.returncode}", r.duration_s
            )
        if not r.stdout_is_utf8:
            return Verdict(False, "bad_output", "the output is not UTF-8", r.duration_s)
        if r.stdout.strip() != str(reference).strip():
            return Verdict(False, "wrong_answer", r.stdout.strip()[:100], r.duration_s)
        return Verdict(True, "pass", "", r.duration_s)

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` (a program) against the expected output ``reference``."""
        return float(self.verdict(completion, reference).passed)
