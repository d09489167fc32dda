"""Task adapters: the problems a workflow is evaluated on and how its answers are read and scored.

A task tells the operators how to pull an answer out of a completion (for voting), how to state a
final answer, how to turn a program's output into an answer, and how to score the workflow's
final text. Three are provided: the embedded arithmetic task, GSM8K and HumanEval (from the files
in ``../shared/data`` or any copy of them).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

__all__ = ["ArithmeticTask", "GSM8KTask", "HumanEvalTask", "Task", "build_task", "extract_code"]

_CODE_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.DOTALL)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_ANSWER_IS_RE = re.compile(r"answer is\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)", re.IGNORECASE)


def extract_code(text: str) -> str | None:
    """The first fenced Python block of ``text`` (an unterminated fence runs to the end), else None."""
    match = _CODE_RE.search(text or "")
    if match is None:
        return None
    code = match.group(1).strip()
    return code or None


def _normalise_number(s: str) -> str:
    s = s.replace(",", "").strip()
    try:
        value = float(s)
    except ValueError:
        return s
    return str(int(value)) if value.is_integer() else repr(value)


class Task:
    """Base class of HFlow tasks (math-style answers by default).

    Args:
        name: task name (memory keys, reports).
        domain: ``math`` or ``code``; the experience memory keeps priors per domain.
        problems: ``{"id", "question", "reference", ...}`` records.
    """

    answer_template = "The answer is {answer}."

    def __init__(self, name: str, domain: str, problems: list[dict[str, Any]]) -> None:
        if not problems:
            raise ValueError(f"task {name!r} has no problems")
        ids = [p["id"] for p in problems]
        if len(set(ids)) != len(ids):
            raise ValueError(f"task {name!r} has duplicate problem ids")
        self.name = name
        self.domain = domain
        self.problems = problems

    def sample(self, n: int | None, seed: int = 0) -> list[dict[str, Any]]:
        """A seeded sample of ``n`` problems (all when ``n`` is None or too large), in a stable order."""
        if n is None or n >= len(self.problems):
            return list(self.problems)
        return random.Random(seed).sample(self.problems, n)

    def split(self, n_first: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Disjoint ``(first n_first, rest)`` after a seeded shuffle (e.g. search set vs rater set)."""
        order = list(self.problems)
        random.Random(seed).shuffle(order)
        return order[:n_first], order[n_first:]

    # The hooks the operators call.
    def user_message(self, problem: dict[str, Any]) -> str:
        """What the model sees as the user turn."""
        return problem["question"]

    def extract_answer(self, text: str) -> str | None:
        """The answer stated in ``text`` (``The answer is N``), normalised for voting; None if absent."""
        matches = _ANSWER_IS_RE.findall(text or "")
        return _normalise_number(matches[-1]) if matches else None

    def format_answer(self, answer: str, template: str | None = None) -> str:
        """A final statement of ``answer`` (``template`` with ``{answer}``, default the task's own)."""
        return (template or self.answer_template).format(answer=answer)

    def answer_from_stdout(self, stdout: str) -> str | None:
        """The answer a program printed: its last number."""
        numbers = _NUMBER_RE.findall(stdout or "")
        return _normalise_number(numbers[-1]) if numbers else None

    def program_for(self, code: str, problem: dict[str, Any]) -> str:
        """The program the sandbox runs for a candidate's code (math: the code itself)."""
        return code

    def example_tests(self, problem: dict[str, Any]) -> str | None:
        """Test code from the problem statement's examples (None when it has none)."""
        return None

    def score(self, text: str, problem: dict[str, Any]) -> float:
        """Score the workflow's final text in [0, 1]."""
        raise NotImplementedError


class ArithmeticTask(Task):
    """The embedded arithmetic word problems, scored by :class:`ArithmeticVerifier`.

    Args:
        split: ``train``, ``val`` or ``test``.
        n: number of problems.
        seed: draw a different set of problems than the split's default (e.g. a "related task").
        name: task name (default ``arithmetic-<split>``).
    """

    def __init__(self, split: str = "val", n: int | None = 64, seed: int | None = None, name: str | None = None) -> None:
        from lightning_agents.rewards.arithmetic import ArithmeticVerifier, make_arithmetic_split

        records = make_arithmetic_split(split, n=n, seed=seed)
        problems = [{**r, "reference": r["answer"]} for r in records]
        super().__init__(name or f"arithmetic-{split}" + (f"-s{seed}" if seed is not None else ""), "math", problems)
        self._verifier = ArithmeticVerifier()

    def score(self, text: str, problem: dict[str, Any]) -> float:
        return float(self._verifier(text, problem["reference"]))


class GSM8KTask(Task):
    """GSM8K word problems from a ``{question, answer}`` JSONL (the gold answer after ``####``).

    Scored by :class:`lightning_agents.rewards.GSM8KVerifier`.

    Args:
        path: the JSONL, e.g. ``../shared/data/gsm8k/test.jsonl``.
        n: use only a seeded sample of this many problems (None: all).
        seed: sampling seed.
    """

    def __init__(self, path: str, n: int | None = None, seed: int = 0) -> None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"GSM8K file {p} does not exist")
        problems = []
        for i, line in enumerate(p.read_text().splitlines()):
            if not line.strip():
                continue
            row = json.loads(line)
            if "####" not in row.get("answer", ""):
                raise ValueError(f"{p}:{i + 1}: answer has no '#### N' line")
            gold = _normalise_number(row["answer"].rsplit("####", 1)[1].strip())
            problems.append({"id": f"gsm8k-{i}", "question": row["question"], "reference": gold, "solution": row["answer"]})
        if n is not None and n < len(problems):
            problems = random.Random(seed).sample(problems, n)
        super().__init__("gsm8k", "math", problems)
        from lightning_agents.rewards import GSM8KVerifier

        self._verifier = GSM8KVerifier()

    def score(self, text: str, problem: dict[str, Any]) -> float:
        return float(self._verifier(text, problem["reference"]))


class HumanEvalTask(Task):
    """HumanEval function-completion problems; a candidate is a complete Python function.

    The docstring's ``>>>`` examples are the tests the ``test`` operator can run; the hidden
    ``check`` tests score the final code with :class:`lightning_agents.rewards.CodeVerifier`.

    Args:
        path: ``HumanEval.jsonl`` or ``HumanEval.jsonl.gz``.
        n: use only a seeded sample of this many problems (None: all).
        seed: sampling seed.
        timeout_s: sandbox time limit per program.
    """

    answer_template = "```python\n{answer}\n```"

    def __init__(self, path: str, n: int | None = None, seed: int = 0, timeout_s: float = 10.0) -> None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"HumanEval file {p} does not exist")
        opener = gzip.open if p.suffix == ".gz" else open
        problems = []
        with opener(p, "rt") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    problems.append({"id": row["task_id"], "question": row["prompt"], "reference": row["test"],
                                     "entry_point": row["entry_point"], "prompt": row["prompt"]})
        if n is not None and n < len(problems):
            problems = random.Random(seed).sample(problems, n)
        super().__init__("humaneval", "code", problems)
        from lightning_agents.rewards import CodeVerifier

        self._verifier = CodeVerifier(timeout_s=timeout_s)

    def user_message(self, problem: dict[str, Any]) -> str:
        return "Complete this Python function. Reply with the whole function in a ```python block.\n\n" + problem["prompt"]

    def extract_answer(self, text: str) -> str | None:
        code = extract_code(text)
        if code is None and "def " in (text or ""):
            code = text.strip()
        return code

    def answer_from_stdout(self, stdout: str) -> str | None:
        return None  # a code task's answer is the code, not what it prints

    def program_for(self, code: str, problem: dict[str, Any]) -> str:
        # The model may return only a body; prepend the prompt so the function exists either way.
        if f"def {problem['entry_point']}" not in code:
            code = problem["prompt"] + code
        return code

    def example_tests(self, problem: dict[str, Any]) -> str | None:
        lines = problem["prompt"].splitlines()
        tests = []
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith(">>>") and i + 1 < len(lines):
                expected = lines[i + 1].strip()
                if expected and not expected.startswith(">>>") and not expected.startswith('"""'):
                    tests.append(f"assert ({stripped[3:].strip()}) == ({expected}), {stripped[3:].strip()!r}")
        return "\n".join(tests) or None

    def score(self, text: str, problem: dict[str, Any]) -> float:
        code = self.extract_answer(text)
        if not code:
            return 0.0
        program = self.program_for(code, problem)
        return float(self._verifier(program, f"{problem['reference']}\n\ncheck({problem['entry_point']})\n"))


def build_task(task: str, path: str | None = None, n: int | None = None, seed: int | None = None) -> Task:
    """A task by name: ``embedded:arithmetic[/split]``, ``gsm8k`` or ``humaneval`` (these need ``path``).

    Args:
        task: task name.
        path: data file for ``gsm8k`` / ``humaneval``.
        n: number of problems (sample size).
        seed: problem-drawing seed.
    """
    if task.startswith("embedded:arithmetic"):
        split = task.partition("/")[2] or "val"
        return ArithmeticTask(split=split, n=n, seed=seed)
    if task in ("gsm8k", "humaneval"):
        if not path:
            raise ValueError(f"task {task!r} needs task_path (e.g. ../shared/data/{task}/...)")
        cls = GSM8KTask if task == "gsm8k" else HumanEvalTask
        return cls(path, n=n, seed=seed or 0)
    raise ValueError(f"unknown task {task!r}; expected embedded:arithmetic[/split], gsm8k or humaneval")
