"""Code verifiers: run a candidate program in the sandbox against tests or an expected output."""

from __future__ import annotations

from lightning_agents.rewards.sandbox import run_python
from lightning_agents.tasks.answers import extract_program

__all__ = ["CodeVerifier", "ProgramOutputVerifier", "extract_program"]

class CodeVerifier:
    """1.0 when the candidate program followed by the reference tests runs without error, else 0.0.

    ``completion`` is the full program (fenced code is extracted); ``reference`` is the test code,
    e.g. HumanEval's ``test`` followed by ``check(entry_point)``. Both run in one sandboxed
    process (see :func:`~lightning_agents.rewards.sandbox.run_python`): a timeout, a memory or
    CPU limit, a blocked socket or write, or any exception scores 0.

    Args:
        timeout_s: wall-clock limit per program in seconds.
        memory_mb: address-space limit in MiB.
        max_output_bytes: cap on what the program may print.
    """

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 1024, max_output_bytes: int = 1 << 16) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_output_bytes = max_output_bytes

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` against the test code ``reference``."""
        program = extract_program(completion)
        if not program.strip():
            return 0.0
        result = run_python(
            program + "\n\n" + reference + "\n",
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            max_output_bytes=self.max_output_bytes,
        )
        return float(result.ok)


class ProgramOutputVerifier:
    """1.0 when the candidate program prints exactly the reference (stripped), else 0.0.

    For "write a program that prints the answer" tasks, such as the embedded task's program style.

    Args:
        timeout_s: wall-clock limit per program in seconds.
        memory_mb: address-space limit in MiB.
    """

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 512) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` (a program) against the expected output ``reference``."""
        program = extract_program(completion)
        if not program.strip():
            return 0.0
        result = run_python(program, timeout_s=self.timeout_s, memory_mb=self.memory_mb, max_output_bytes=1 << 14)
        return float(result.ok and result.stdout.strip() == str(reference).strip())
