"""Competition math with ``\\boxed{}`` answers (MATH, AIME-style): records ``{problem, solution|answer}``.

:class:`BoxedMathVerifier` uses `math-verify <https://github.com/huggingface/Math-Verify>`_ when it
is installed (symbolic equivalence through sympy). Without it, a documented fallback compares the
last ``\\boxed{}`` contents after LaTeX normalisation, then by value when both sides are numbers or
simple fractions (``\\frac{a}{b}``, ``a/b``) -- exact on integer/fraction/decimal answers, but it
does not prove symbolic equivalence (``\\sqrt{8}`` vs ``2\\sqrt{2}`` counts as different).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from lightning_agents.tasks._files import TaskDataError
from lightning_agents.tasks.answers import last_boxed
from lightning_agents.tasks.base import Problem
from lightning_agents.tasks.question_file import QuestionFileTask

__all__ = ["BoxedMathTask", "BoxedMathVerifier", "MATH_INSTRUCTION", "last_boxed", "normalize_latex"]

MATH_INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."

_REMOVE = [r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\displaystyle", "$", r"^\circ", r"^{\circ}", r"\%", "%"]


def normalize_latex(answer: str) -> str:
    """Canonical string form of a LaTeX answer: spacing, ``\\left``/``\\right``, ``\\dfrac``, ``\\text{}``
    wrappers, trailing periods and units-like ``\\text`` suffixes removed."""
    s = answer.strip()
    # the group is left-stripped in Python: a \s* before [^{}]* would backtrack quadratically
    s = re.sub(r"\\(?:text|mbox)\{([^{}]*)\}", lambda m: m.group(1).lstrip(), s)
    for token in _REMOVE:
        s = s.replace(token, "")
    s = s.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = s.replace(" ", "").rstrip(".")
    if s.startswith("x=") or s.startswith("y="):
        s = s[2:]
    return s


def _as_fraction(s: str) -> Fraction | None:
    s = s.replace(",", "")
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    try:
        if m:
            value = Fraction(int(m.group(2)), int(m.group(3)))
            return -value if m.group(1) else value
        if re.fullmatch(r"-?\d+/\d+", s) or re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)", s):
            return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


class BoxedMathVerifier:
    """1.0 when the last ``\\boxed{}`` answer of the completion equals the reference, else 0.0.

    Args:
        use_math_verify: use ``math-verify`` when importable (``False`` forces the fallback, e.g.
            for reproducibility across environments).
    """

    def __init__(self, use_math_verify: bool = True) -> None:
        self._mv = None
        if use_math_verify:
            try:
                import math_verify  # type: ignore[import-not-found]

                self._mv = math_verify
            except ImportError:
                self._mv = None

    @property
    def backend(self) -> str:
        """``"math-verify"`` or ``"fallback"``."""
        return "math-verify" if self._mv is not None else "fallback"

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion``; ``reference`` is the bare answer or a solution containing ``\\boxed{}``."""
        predicted = last_boxed(completion)
        if predicted is None or not predicted.strip():
            return 0.0
        gold = last_boxed(reference)
        gold = reference if gold is None else gold
        if self._mv is not None:
            parsed_gold = self._mv.parse("$" + gold + "$")
            parsed_pred = self._mv.parse("$" + predicted + "$")
            if parsed_gold and parsed_pred:
                return float(bool(self._mv.verify(parsed_gold, parsed_pred)))
        a, b = normalize_latex(predicted), normalize_latex(gold)
        if a == b:
            return 1.0
        fa, fb = _as_fraction(a), _as_fraction(b)
        return float(fa is not None and fb is not None and fa == fb)


def boxed_math_problem(row: dict[str, Any], where: str, index: int | None = None) -> Problem:
    """A ``{problem, solution|answer}`` row as a problem (``reference``: the answer or the solution)."""
    if not isinstance(row.get("problem"), str) or not (row.get("answer") or row.get("solution")):
        raise TaskDataError(f"{where}: a math record needs 'problem' and 'solution' or 'answer'")
    pid = row.get("id", row.get("unique_id", f"math-{index}" if index is not None else where))
    return {**row, "id": str(pid), "question": row["problem"], "reference": str(row.get("answer") or row["solution"])}


class BoxedMathTask(QuestionFileTask):
    """Competition math answered in ``\\boxed{}``, scored by :class:`BoxedMathVerifier`.

    Args:
        path: a ``{problem, solution}`` or ``{problem, answer}`` JSONL, or a folder with ``<split>.jsonl``.
        split: the split :attr:`problems` draws from.
        n: use only a seeded sample of this many problems (``None``: all).
        seed: sampling seed.
        name: task name (default ``math``).
        instruction: appended to every problem in :meth:`prompt`.
    """

    default_name = "math"
    answer_template = "The answer is $\\boxed{{{answer}}}$."

    def __init__(
        self,
        path: str,
        split: str = "test",
        n: int | None = None,
        seed: int | None = 0,
        name: str | None = None,
        instruction: str | None = MATH_INSTRUCTION,
    ) -> None:
        super().__init__(path, split, n, seed, name, instruction, boxed_math_problem, BoxedMathVerifier())

    def extract_answer(self, text: str) -> str | None:
        boxed = last_boxed(text)
        return normalize_latex(boxed) if boxed else None

    def verifier_spec(self) -> str:
        return "lightning_agents.rewards.BoxedMathVerifier"
