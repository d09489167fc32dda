"""Code verifiers: a candidate program against trusted tests, or against an expected output.

Both score through the sandbox (:mod:`lightning_agents.rewards.isolation`) and never trust what the
candidate reports about itself: :class:`CodeVerifier` asks the trusted harness of
:func:`~lightning_agents.rewards.verdict.judge`; :class:`ProgramOutputVerifier` compares the captured
output here. Each also offers ``verdict(completion, reference)`` with the reason for the score,
which :class:`~lightning_agents.rewards.registry.RewardScorer` counts.
"""

from __future__ import annotations

import re
from typing import Literal

from lightning_agents.rewards.isolation import check_isolation
from lightning_agents.rewards.sandbox import run_python
from lightning_agents.rewards.verdict import Verdict, check_module_name, judge
from lightning_agents.tasks.answers import extract_code, extract_program, strip_reasoning

__all__ = [
    "CodeVerifier",
    "ProgramOutputVerifier",
    "extract_program",
    "function_code",
    "function_program",
    "insert_first",
]


def function_code(completion: str | None) -> str | None:
    """The code of an answer to a function-completion problem (HumanEval, MBPP): its fenced blocks
    (:func:`~lightning_agents.tasks.answers.extract_code`), else, after any reasoning block, the
    whole text when it has a ``def``; ``None`` when it has neither (prose is not run).

    The one reading of such answers: :class:`CodeVerifier` with an ``entry_point`` (RL) and
    :class:`~lightning_agents.tasks.HumanEvalTask` (evaluation, HFlow's votes) both use it."""
    code = extract_code(completion)
    if code is None:
        # strip_reasoning as extract_code does: a `def` drafted inside <think> is not the answer,
        # and the program is not read again (evaluation lost the block only on a second reading)
        text = strip_reasoning(completion)
        if "def " in text:
            code = text.strip()
    return code


def function_program(code: str, entry_point: str, stub: str = "", drop_prints: bool = False) -> str:
    """The program run for a function-completion answer ``code``: ``stub`` (the problem's function
    signature and docstring) first when ``code`` never defines ``entry_point`` (the model returned
    only the body); with ``drop_prints``, what it prints dropped as evalplus drops it
    (:func:`~lightning_agents.tasks.evalplus.discard_prints`; for evalplus release rows).

    The one place that turns an answer into the program: :class:`CodeVerifier` with an
    ``entry_point`` (what RL records name) and :meth:`~lightning_agents.tasks.HumanEvalTask.program_for`
    (evaluation, HFlow's operators) both call it."""
    # a top-level `def entry_point(` (column 0), not the substring `def entry_point`: a body's
    # helper `def factorial` (entry `f`) or `def fib_iter` (entry `fib`) is no definition of it
    if re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", code, re.M) is None:
        code = stub + code
    if drop_prints:
        from lightning_agents.tasks.evalplus import discard_prints

        code = discard_prints(code)
    return code


def insert_first(code: str, statement: str) -> str:
    """``code`` with the one-line ``statement`` run first: after its leading module docstring
    (kept as the program's ``__doc__``) and its ``from __future__`` imports (which must come
    first). Code that does not parse is returned as it is (it fails to compile either way)."""
    import ast

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    after = 0
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            after = node.end_lineno or after
        elif index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            # a statement above the docstring would leave the program's __doc__ None
            after = node.end_lineno or after
        else:
            break
    # the lines as the parser counts them (str.splitlines also splits at \f, \x1c, \u2028, ...,
    # which may sit inside a docstring before the imports)
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", code)
    head = "".join(lines[:after])
    if head and not head.endswith("\n"):
        head += "\n"
    return f"{head}{statement}\n{''.join(lines[after:])}"


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
    ``reference`` is trusted test code, e.g. HumanEval's ``test`` followed by ``check(entry_point)``,
    or tests written for a runner (pytest-style ``test_*`` functions, ``unittest.TestCase`` classes,
    ``if __name__ == "__main__":`` blocks), which the harness runs as the runner would; tests that
    still never call the candidate are a ``VerifierError``. The tests run in a separate harness process; every name they use without defining it (the
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
        module_name: the program's ``__name__`` (and so its functions' and classes'
            ``__module__``). ``"__main__"`` (the default) runs its ``if __name__ == "__main__":``
            blocks, as ``python solution.py`` would; any other name does not, as human-eval's and
            evalplus's graders, which ``exec`` the program in a fresh ``{}``, never run them
            (:class:`~lightning_agents.tasks.HumanEvalTask` uses ``"solution"``). The namespace
            the program runs in has it before its first statement (the program's text is not
            edited: a statement sharing the docstring's line sees it too). A standard-library
            module's name is refused.
        entry_point: the function the tests call. Given, the completion is read as an answer to a
            function-completion problem, as :class:`~lightning_agents.tasks.HumanEvalTask` reads
            it in evaluation: its code by :func:`function_code` (no fence and no ``def``: 0,
            ``no_code``), the program by :func:`function_program` (``stub`` first when the code
            does not define ``entry_point``). ``None`` (the default): the completion is the
            program (:func:`extract_program`), as records written before these arguments expect.
        stub: the problem's function stub (HumanEval's ``prompt``), put before a body-only
            answer; used only with ``entry_point``.
        drop_prints: drop what the program prints, as evalplus's ``swallow_io`` does (evalplus
            release rows); used only with ``entry_point``.

    Raises:
        IsolationUnavailable: at construction, when ``isolation`` cannot be set up on this machine.
        ValueError: ``module_name`` is empty or a standard-library module's name.
    """

    def __init__(
        self,
        timeout_s: float = 10.0,
        memory_mb: int = 1024,
        max_output_bytes: int = 1 << 16,
        isolation: Literal["bwrap", "process"] = "bwrap",
        site_packages: bool = False,
        max_reply_bytes: int = 1 << 20,
        module_name: str = "__main__",
        entry_point: str | None = None,
        stub: str = "",
        drop_prints: bool = False,
    ) -> None:
        check_isolation(isolation)
        check_module_name(module_name)
        if entry_point is not None and (not isinstance(entry_point, str) or not entry_point.isidentifier()):
            raise ValueError(f"entry_point must be a Python identifier or None, got {entry_point!r}")
        if not isinstance(stub, str):
            raise ValueError(f"stub must be a string, got {type(stub).__name__}")
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_output_bytes = max_output_bytes
        self.isolation = isolation
        self.site_packages = site_packages
        self.max_reply_bytes = max_reply_bytes
        self.module_name = module_name
        self.entry_point = entry_point
        self.stub = stub
        self.drop_prints = drop_prints

    def program(self, completion: str) -> str | None:
        """The program run for ``completion`` (run under ``module_name``); ``None`` when a
        function-completion answer (``entry_point`` given) has no code."""
        if self.entry_point is None:
            return extract_program(completion)
        code = function_code(completion)
        return None if code is None else function_program(code, self.entry_point, self.stub, self.drop_prints)

    def verdict(self, completion: str, reference: str) -> Verdict:
        """The harness's decision on ``completion`` against the test code ``reference``, with its reason.

        Raises:
            VerifierError: the sandbox or harness failed (no verdict; not the program's fault).
        """
        program = self.program(completion)
        if program is None:
            reason = "empty" if _has_fence(strip_reasoning(completion)) else "no_code"
            return Verdict(False, reason, "no code in the completion")
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
            module_name=self.module_name,
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
