"""``\\boxed{}`` answers of competition math (MATH, AIME-style).

Uses `math-verify <https://github.com/huggingface/Math-Verify>`_ when it is installed (symbolic
equivalence through sympy). Without it, a documented fallback compares the last ``\\boxed{}``
contents after LaTeX normalisation, then by value when both sides are numbers or simple
fractions (``\\frac{a}{b}``, ``a/b``) -- exact on integer/fraction/decimal answers, but it does not
prove symbolic equivalence (``\\sqrt{8}`` vs ``2\\sqrt{2}`` counts as different).
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["BoxedMathVerifier", "last_boxed", "normalize_latex"]


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched; ``None`` if absent."""
    text = text or ""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i]
    return None  # unbalanced: the answer was cut off


_REMOVE = [r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\displaystyle", "$", r"^\circ", r"^{\circ}", r"\%", "%"]


def normalize_latex(answer: str) -> str:
    """Canonical string form of a LaTeX answer: spacing, ``\\left``/``\\right``, ``\\dfrac``, ``\\text{}``
    wrappers, trailing periods and units-like ``\\text`` suffixes removed."""
    s = answer.strip()
    s = re.sub(r"\\text\{\s*([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\mbox\{\s*([^{}]*)\}", r"\1", s)
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
        if re.fullmatch(r"-?\d+/\d+", s) or re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", s):
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
