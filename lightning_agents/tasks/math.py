"""Competition math with ``\\boxed{}`` answers (MATH, AIME-style): records ``{problem, solution|answer}``.

:class:`BoxedMathVerifier` uses `math-verify <https://github.com/huggingface/Math-Verify>`_ when it
is installed (symbolic equivalence through sympy). Without it, a documented fallback compares the
last ``\\boxed{}`` contents after LaTeX normalisation, then by value when both sides are numbers or
simple fractions (``\\frac{a}{b}``, ``a/b``) -- exact on integer/fraction/decimal answers, but it
does not prove symbolic equivalence (``\\sqrt{8}`` vs ``2\\sqrt{2}`` counts as different).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import select
import subprocess
import sys
import threading
from fractions import Fraction
from typing import Any

from lightning_agents.tasks._files import TaskDataError, iter_jsonl, split_file
from lightning_agents.tasks.answers import all_boxed, last_boxed
from lightning_agents.tasks.base import Problem
from lightning_agents.tasks.question_file import QuestionFileTask

log = logging.getLogger(__name__)

__all__ = ["BoxedMathTask", "BoxedMathVerifier", "MATH_INSTRUCTION", "asks_for_order", "last_boxed", "normalize_latex"]

MATH_INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."

_REMOVE = [
    r"\left",
    r"\right",
    r"\!",
    r"\,",
    r"\;",
    r"\:",
    r"\displaystyle",
    r"\$",  # before "$": removing "$" alone would leave the backslash of a dollar sign
    "$",
    r"^\circ",
    r"^{\circ}",
    r"\%",
    "%",
]
# LaTeX's control space `\ ` (Llama 3.1 70B writes `\left( 10, \  2\right)`): with the spaces gone
# its backslash stayed, `(10,\2)`, and the fallback scored that right answer 0 against `(10,2)`.
# Not the second backslash of a row break `\\ `. At the end of an answer (`\frac{1}{2}\ `,
# `5\ \text{cm}` once the unit is split off) stripping left the backslash alone: `\frac{1}{2}\`.
_CONTROL_SPACE_RE = re.compile(r"(?<!\\)\\(?: |$)")
# \text{} and friends are unwrapped; the group is stripped in Python (a \s* before [^{}]* would
# backtrack quadratically)
_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mbox|mathrm|mathbf)\{([^{}]*)\}")
_FRAC_RE = re.compile(r"\\frac(\d|\{[^{}]*\})(\d|\{[^{}]*\})")
# a unit after the value: `5.4 \text{ cents}`, `864 \mbox{ inches}^2` (the power is part of the unit)
_UNIT_RE = re.compile(r"\\(?:text|mbox|mathrm)\{\s*([A-Za-z][A-Za-z.\s]*)\}(?:\^\{?(\d)\}?)?\s*\.?")
# `\mathrm{e}` and `\mathrm{i}` are Euler's number and the imaginary unit, not units: read as units,
# `2\mathrm{e}^{3}` equalled `2\mathrm{e}^{5}` and `3\mathrm{i}` equalled `3`.
_CONSTANT_RE = re.compile(r"\\mathrm\{\s*[ei]\s*\}")


def normalize_latex(answer: str) -> str:
    """Canonical string form of a LaTeX answer, for comparing answers: spacing (``\\ `` too), ``\\left``/``\\right``,
    ``\\dfrac``, ``\\frac 59``, ``\\text{}`` wrappers, dollar signs, degree and percent signs, a
    trailing period, and a multiple-choice ``(C)`` or ``(113)`` reduced to its content.

    Not a LaTeX answer to print (spaces and dollar signs are gone): :meth:`BoxedMathTask.answer_key`.
    """
    s = _CONTROL_SPACE_RE.sub(" ", answer.strip()).strip()
    s = _WRAPPER_RE.sub(lambda m: m.group(1).strip(), s)
    s = _CONTROL_SPACE_RE.sub(" ", s)
    for token in _REMOVE:
        s = s.replace(token, "")
    s = s.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac")
    # spaces go before the fraction rule, so `\frac 59` becomes `\frac{5}{9}` like `\frac59`
    s = s.replace(" ", "").rstrip(".")
    s = _FRAC_RE.sub(lambda m: "\\frac{" + m.group(1).strip("{}") + "}{" + m.group(2).strip("{}") + "}", s)
    choice = re.fullmatch(r"\(([A-Ea-e]|\d+)\)", s)
    return choice.group(1) if choice else s


def _split_unit(answer: str) -> tuple[str, str]:
    """``(value, unit)`` of an answer that ends in a unit word; ``(answer, "")`` when it does not."""
    start = max(answer.rfind(r"\text{"), answer.rfind(r"\mbox{"), answer.rfind(r"\mathrm{"))
    value = answer[:start].strip() if start > 0 else ""
    tail = answer[start:].strip()
    unit = _UNIT_RE.fullmatch(tail) if value and any(c.isdigit() for c in value) else None
    if unit is None or _CONSTANT_RE.match(tail):
        return (answer, "")
    return (value, re.sub(r"[\s.]", "", unit.group(1)).lower() + (f"^{unit.group(2)}" if unit.group(2) else ""))


def _split_variable(normalized: str) -> tuple[str, str]:
    """``("x", "5")`` for ``x=5``: a model may state the variable or not, but ``x=5`` is not ``y=5``."""
    m = re.fullmatch(r"([A-Za-z])=(.+)", normalized)
    return (m.group(1), m.group(2)) if m else ("", normalized)


def _as_fraction(s: str) -> Fraction | None:
    # commas only as thousands separators: `3,5,7` is a list of answers, not 357
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
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


def _conflict(predicted: str, gold: str) -> bool:
    """Differences both backends must see: different units (`85 feet` is not `85 m`; math-verify
    drops units) and different brackets around a list (`(15,-29)` is an ordered pair,
    `[15,-29]` an interval; math-verify equates them)."""
    unit_p, unit_g = _split_unit(predicted)[1], _split_unit(gold)[1]
    if unit_p and unit_g and unit_p != unit_g:
        return True
    a, b = normalize_latex(predicted), normalize_latex(gold)
    if "," in a and "," in b and a[:1] in "([" and b[:1] in "([" and a[-1:] in ")]" and b[-1:] in ")]":
        return (a[0], a[-1]) != (b[0], b[-1])
    return False


# a comma between a digit and exactly three digits: `1,000`, not the list `1,2` or `10,20`
_THOUSANDS_RE = re.compile(r",\d{3}(?!\d)")
_SET_BRACES = (("\\left\\{", "\\right\\}"), ("\\{", "\\}"), ("{", "}"))
# LaTeX spacing, with the spaces after it: MATH writes thousands as `10,\!000` (44 of its golds),
# and read as a separator the comma made `10, 0` a right list of two parts (`11,\! 111` too).
# `\\ ` (a row break and a space) is not spacing.
_SPACING_RE = re.compile(r"(?<!\\)(?:\\[!,;: ]|\\q?quad(?![A-Za-z]))\s*")


def _top_level_parts(answer: str) -> list[str]:
    """The comma-separated parts of an answer outside any bracket: ``1, 3, 5`` and
    ``(1,8,19), (2,7,13)`` have several, ``(1, 2)`` and ``[1, 2)`` one (a point or an interval is
    one answer), ``\\{1, 3\\}`` two (the set's braces are dropped), ``1,000`` one, ``27,54,108`` three."""
    text = _SPACING_RE.sub("", answer).strip().strip("$").strip()
    for opening, closing in _SET_BRACES:
        if text.startswith(opening) and text.endswith(closing):
            inner = text[len(opening) : -len(closing)]
            if _balanced(inner):  # `\{1\}, \{2\}` is two sets, not one
                text = inner
            break
    commas, depth = [], 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            commas.append(i)
    # `1,000` is one number, but in `27,54,108,135` (OlympiadBench 2684) the list's other commas
    # show that `,108` separates too, and in `\frac{1}{100},100` no digit comes before it
    thousands = [i for i in commas if i > 0 and text[i - 1].isdigit() and _THOUSANDS_RE.match(text, i)]
    if len(thousands) == len(commas):
        commas = []
    elif any(text[i + 1 : i + 2].isspace() for i in commas):
        # `10, 1,000` and MATH's `1,\!000, 2,\!000`: where the list's commas are followed by a
        # space, a comma between digits without one is a thousands separator
        commas = [i for i in commas if i not in thousands or text[i + 1 : i + 2].isspace()]
    bounds = [-1, *commas, len(text)]
    return [text[i + 1 : j].strip() for i, j in zip(bounds, bounds[1:])]


def _is_set(answer: str) -> bool:
    """``\\{1, 3\\}``: a set, whose elements have no order."""
    text = _SPACING_RE.sub("", answer).strip().strip("$").strip()
    return any(
        text.startswith(opening) and text.endswith(closing) and _balanced(text[len(opening) : -len(closing)])
        for opening, closing in _SET_BRACES
    )


# `x=3`, `f(1)=2`, `a_1=5`: a part that names what it gives
_NAMED_RE = re.compile(r"([A-Za-z](?:_\{?\w+\}?|\([^()=]*\))?)=")


def _names(parts: list[str]) -> list[str] | None:
    names = []
    for part in parts:
        m = _NAMED_RE.match(normalize_latex(_SPACING_RE.sub("", part)))
        if m is None:
            return None
        names.append(m.group(1))
    return names if len(set(names)) == len(names) else None


def _values(parts: list[str]) -> list[str]:
    return [normalize_latex(_SPACING_RE.sub("", part)).split("=", 1)[1] for part in parts]


# The question asks for the list in an order (measured on MATH's test questions with list answers:
# 8 of 133 match, all asking so; "Enter all the solutions, separated by commas" never matches).
# "respectively" and "in that order" mostly describe the problem ("O and H denote the circumcenter and
# orthocenter, respectively"; "form an arithmetic sequence, in that order"), so they count only in a
# sentence that also says how to give the answer, and not after "not necessarily".
_ORDER_RE = re.compile(
    r"in\s+(?:strictly\s+)?(?:increasing|decreasing|ascending|descending|numerical|alphabetical)\s+order"
    r"|(?:least|smallest|lowest)\s+to\s+(?:the\s+)?(?:greatest|largest|highest)"
    r"|(?:greatest|largest|highest)\s+to\s+(?:the\s+)?(?:least|smallest|lowest)"
    r"|\bfirst\b[^.?!]*?\bthen\b",
    re.IGNORECASE,
)
_ORDER_IF_ANSWER_RE = re.compile(
    r"(?<!not necessarily )(?:\brespectively\b|\bin\s+(?:that|this|the\s+given|the\s+same)\s+order\b)", re.IGNORECASE
)
_ANSWER_WORDS_RE = re.compile(r"\b(?:enter|express|list|write|give|separated|answer)", re.IGNORECASE)


def asks_for_order(question: str) -> bool:
    """Whether ``question`` asks for its list answer in a given order: "in increasing (decreasing,
    ascending, descending, alphabetical) order", "from least to greatest" (and the like), "first
    ..., then ...", or "respectively" / "in that order" in a sentence that says how to answer
    ("Enter $a$ and $b$, respectively"). Graders compare lists as sets otherwise: "Enter all the
    solutions, separated by commas" takes them in any order."""
    if _ORDER_RE.search(question):
        return True
    return any(
        _ORDER_IF_ANSWER_RE.search(sentence) and _ANSWER_WORDS_RE.search(sentence)
        for sentence in re.split(r"(?<=[.?!])\s+", question)
    )


def _paired(parts_p: list[str], parts_g: list[str], gold: str, any_order: bool, equal: Any) -> bool:
    """Whether the parts of a list answer equal those of a list reference of as many parts.

    By name when every part on both sides names its own unknown (``y=2, x=3`` for ``x=3, y=2``:
    the names, not the places, say which value is which). Otherwise in order when only one side
    names its parts (``5, 3`` for ``a=3, b=5``: the place is all that ties a value to its name),
    else in any order (each part paired with its own equal one) when ``any_order`` is set (the
    graders' convention, and OlympiadBench's ``is_multiple_answer``) or the reference is a set;
    else in order: MATH asks for ``12,9`` "first BP, then QT" and for ``89, 88, 85, 73, 70`` "from
    the greatest to the least", and a reversed list is wrong there."""
    names_p, names_g = _names(parts_p), _names(parts_g)
    if names_p is not None and names_g is not None and sorted(names_p) == sorted(names_g):
        # the names pair the parts and only the values are compared: math-verify equates
        # `f(1)=3` and `f(1)=2` (it scored the swapped values of `f(1)=2, f(2)=3` 1)
        parts_p = [value for _, value in sorted(zip(names_p, _values(parts_p)))]
        parts_g = [value for _, value in sorted(zip(names_g, _values(parts_g)))]
    elif names_p is None and names_g is None and (any_order or _is_set(gold)):
        return _match_parts(parts_p, parts_g, equal)
    return all(equal(p, g) for p, g in zip(parts_p, parts_g))


def _list_parts(predicted: str, gold: str) -> tuple[list[str], list[str]] | None:
    """The parts of a list reference and of an answer listing as many (``(1, 2)`` lists the parts
    of ``1, 2``), or ``None`` when the reference is one answer or the counts differ."""
    parts_g = _top_level_parts(gold)
    if len(parts_g) < 2:
        return None
    parts_p = _top_level_parts(predicted)
    if len(parts_p) == 1:
        plain = re.sub(r"\\+(?=[()\[\]])", "", normalize_latex(predicted))
        if plain[:1] == "(" and plain[-1:] == ")" and _balanced(plain[1:-1]):
            parts_p = _top_level_parts(plain[1:-1])
    return (parts_p, parts_g) if len(parts_p) == len(parts_g) else None


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += (char in "([{") - (char in ")]}")
        if depth < 0:
            return False
    return depth == 0


def _part_count(answer: str) -> int:
    """How many answers ``answer`` lists: its top-level parts, or the items of the one tuple it is
    (``(1, 2)`` and ``1, 2`` both list two)."""
    parts = _top_level_parts(answer)
    if len(parts) == 1 and parts[0][:1] in "([" and parts[0][-1:] in ")]" and _balanced(parts[0][1:-1]):
        return len(_top_level_parts(parts[0][1:-1]))
    return len(parts)


# What makes an answer more than a list of values: a relation, a connective, a set operation.
# `and`/`or` as words only: `\\lfloor` and `\\operatorname` are no connectives.
_STATEMENT_RE = re.compile(
    r"[=<>;]|\\(?:in|pm|mp|le|leq|ge|geq|ne|neq|lt|gt|cup|cap|quad|qquad)(?![A-Za-z])|(?<![A-Za-z])(?:and|or)(?![A-Za-z])"
)


def _misses_parts(predicted: str, gold: str, unordered: bool = False) -> bool:
    """A plain list answer with another number of parts than a plain list reference, or a list
    given for one plain answer. math-verify compares lists as sets, so `-2` equalled `-2, -2` and
    `16, 3, 1` equalled `16, 3, 1, 1` (OlympiadBench 2532, 2356), and it read `10, 0` as
    `10,\\!000` and `10, 1, 0` as `10, 1,000`.
    Answers that state more than values (``(p,q)=(3,2)``, ``x \\in [-2, 7]``,
    ``(5, 8) \\text{ and } (8, 5)``) are left to it, and so is a list that repeats a part. A
    reference of one bracketed answer (the interval ``(-\\infty,\\infty)``) keeps math-verify:
    ``\\mathbb{R}`` equals it (MATH test/intermediate_algebra/2181). ``unordered``: a list compared
    as a set may repeat a part (graders took ``(3,17,3,7)`` twice in a list of five, Math-Verify's
    own test), so the answer's distinct parts are counted."""
    if _STATEMENT_RE.search(predicted) or _STATEMENT_RE.search(gold):
        return False
    # `\\left(` (a doubled backslash too) and `\(`: the bracket is what counts. Spaces stay: they
    # tell the list's commas from a thousands separator (`10, 1,000`)
    plain = [
        re.sub(r"\\+(?=[()\[\]])", "", re.sub(r"\\+(?:left|right)(?![A-Za-z])", "", t)).strip()
        for t in (predicted, gold)
    ]
    if len(_top_level_parts(plain[1])) < 2:
        return len(_top_level_parts(plain[0])) > 1 and plain[1][:1] not in "(["
    count = _part_count(plain[0])
    parts = _top_level_parts(plain[0])
    if unordered and len(parts) > 1:
        count = len({normalize_latex(_SPACING_RE.sub("", part)) for part in parts})
    return count != _part_count(plain[1])


def _match_parts(predicted: list[str], gold: list[str], equal: Any = None) -> bool:
    """Every predicted part paired with its own equal gold part, in any order (a perfect matching
    by augmenting paths; equality is ``equal``, the fallback's by default, so a part that is a
    point stays ordered, and a part's unit must not differ from its pair's)."""
    equal = equal or _fallback_part_equal
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j, part in enumerate(gold):
            if j not in seen and equal(predicted[i], part):
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return all(place(i, set()) for i in range(len(predicted)))


def _fallback_part_equal(predicted: str, gold: str) -> bool:
    # `3 \text{ cm}, 5 \text{ kg}` is not `5 \text{ cm}, 3 \text{ kg}`: units count part by part
    return not _conflict(predicted, gold) and _fallback_equal(predicted, gold)


def _fallback_equal(predicted: str, gold: str, any_order: bool = False) -> bool:
    parts_p, parts_g = _top_level_parts(predicted), _top_level_parts(gold)
    if len(parts_p) > 1 and len(parts_p) != len(parts_g):
        # `3, 250` lists two numbers; normalised (spaces gone) it read as `3,250`, MATH's `3,\!250`
        return False
    a, b = normalize_latex(predicted), normalize_latex(gold)
    if a == b:
        return True
    if len(parts_p) > 1 and len(parts_p) == len(parts_g):
        if _paired(parts_p, parts_g, gold, any_order, _fallback_part_equal):
            return True
    (value_p, unit_p), (value_g, unit_g) = _split_unit(predicted), _split_unit(gold)
    if unit_p or unit_g:  # one side without its unit (`5.4` for `5.4 \text{ cents}`)
        a, b = normalize_latex(value_p), normalize_latex(value_g)
    (var_a, a), (var_b, b) = _split_variable(a), _split_variable(b)
    if var_a and var_b and var_a != var_b:
        return False
    if a == b:
        return True
    fa, fb = _as_fraction(a), _as_fraction(b)
    return fa is not None and fb is not None and fa == fb


# Logic and arrow operators: math-verify reads `1 \lor 3` and `1 \implies 3` as their last part, so
# an answer no grader accepts scored 1 against 3 (Math-Verify's own parse, audited 2026-12-05).
_LOGIC_RE = re.compile(
    r"\\(?:lor|vee|land|wedge|implies|impliedby|iff|to|mid|Rightarrow|rightarrow|Leftarrow|leftarrow|Leftrightarrow)(?![A-Za-z])"
)
_MATHRM_LETTER_RE = re.compile(r"\\mathrm\{([A-Za-z])\}")
# A number in another base (`40_9`): math-verify reads it as the number, 40.
_BASE_SUBSCRIPT_RE = re.compile(r"\d_\{?\d+\}?")
# Longer boxes are not answers to a competition problem, and sympy can take seconds on them.
MAX_ANSWER_CHARS = 1000
# Outer wall-clock bound of one math-verify call in a worker process; math-verify's own timeouts
# (5 s for parsing, 5 s for verifying) work there, so this catches only a C call that ignores them.
MATH_VERIFY_HARD_TIMEOUT_S = 30.0


# `0.1\overline{6}`: math-verify reads a repeating decimal as its fixed part (`0.\overline{3}` as 0).
_REPEATING_RE = re.compile(r"(\d*)\.(\d*)\\overline\{(\d+)\}")
# A top-level `=` (not `\leq`, `!=`, `==`); sides without letters are constants to compare.
_EQUALS_RE = re.compile(r"((?<![<>!=\\])=(?!=)|\\(?:approx|simeq|equiv)(?![A-Za-z]))")
# How far the sides of `\approx` may differ (`\frac{\sqrt{3}}{3} \approx 0.577` is a true statement).
_APPROX_REL = 1e-2
_CONSTANT_WORDS_RE = re.compile(r"\\(?:[dt]?frac|sqrt|pi|infty|cdot|times|left|right)(?![A-Za-z])")
# What does not make a side an expression with a variable: spacing and display commands, a unit
# word (`1 \text{ cm} = 3`), a percent sign.
_FORMATTING_RE = re.compile(
    r"\\(?:text|textrm|mathrm|mbox)\{[^{}]*\}|\\(?:quad|qquad|displaystyle|textstyle)(?![A-Za-z])|\\[,;:! ]|\\%"
)
# Digits math-verify compares numbers to. Its default, 6, took `0.3333333` for `\frac{1}{3}`; a
# competition answer asks for the exact value, and 10 digits still equate `0.5` and `\frac{1}{2}`.
_FLOAT_ROUNDING = 10


def _repeating_as_fraction(text: str) -> str:
    def fraction(m: re.Match[str]) -> str:
        whole, fixed, period = m.group(1) or "0", m.group(2), m.group(3)
        value = Fraction(int(whole)) + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
        value += Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
        return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"

    return _REPEATING_RE.sub(fraction, text)


def _differing_constants(predicted: str, parse: Any) -> bool:
    """``1 = 3``, ``1 = 2 = 3``, ``1 \\approx 2 = 3``: math-verify keeps the last side of an
    equation, so a false statement scored 1 whenever its last side was right. Sides of constants
    only (spacing, display commands and units aside) must be equal, and readable: a side of
    constants math-verify cannot read makes the answer no answer. ``2 + 1 = 3`` (sides equal) and
    ``x = 3`` (an equation with a variable) are compared as usual."""
    parts = _EQUALS_RE.split(predicted)
    sides, relations = [_FORMATTING_RE.sub(" ", side) for side in parts[::2]], parts[1::2]
    if len(sides) < 2 or any(re.search(r"[A-Za-z]", _CONSTANT_WORDS_RE.sub("", side)) for side in sides):
        return False
    values = [parse("$" + side + "$") for side in sides]
    if not all(values):
        return True
    try:
        numbers = [complex(value[0].evalf()) for value in values]
    except (TypeError, ValueError, AttributeError, OverflowError):
        return True
    for left, right, relation in zip(numbers, numbers[1:], relations):
        loose = relation.startswith("\\") and relation != "\\equiv"
        allowed = _APPROX_REL * max(abs(left), abs(right), 1.0) if loose else 1e-9
        if not abs(left - right) <= allowed:
            return True
    return False


def _math_verify_equal(gold: str, predicted: str) -> bool:
    """math-verify's verdict, computed in the calling thread."""
    import math_verify  # type: ignore[import-not-found]

    # math-verify parses `1+\frac{1}{\mathrm{e}}` as `1` (the rest dropped), which then equals `1-...`
    gold, predicted = (_repeating_as_fraction(_MATHRM_LETTER_RE.sub(r"\1", text)) for text in (gold, predicted))
    if _differing_constants(predicted, math_verify.parse):
        return False
    parsed_gold = math_verify.parse("$" + gold + "$")
    parsed_pred = math_verify.parse("$" + predicted + "$")
    return bool(
        parsed_gold and parsed_pred and math_verify.verify(parsed_gold, parsed_pred, float_rounding=_FLOAT_ROUNDING)
    )


class _MathVerifyWorkers:
    """math-verify's timeouts use ``signal.alarm``, which raises outside the main thread, so every call
    from RewardScorer's thread pool failed and every math reward was ``nan`` (no learning signal,
    only warnings). Off the main thread the call goes to a worker process
    (:mod:`lightning_agents.tasks._math_verify_worker`), where it runs on that process's main thread
    and keeps its timeouts. Workers are plain subprocesses, not multiprocessing's: spawning those
    re-runs the user's training script as ``__mp_main__``, and forking a trainer with threads can
    deadlock on a lock another thread held."""

    def __init__(self, max_workers: int = 4) -> None:
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.Semaphore(max_workers)

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "lightning_agents.tasks._math_verify_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def equal(self, gold: str, predicted: str) -> bool:
        with self._slots:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                worker = self._start()
            try:
                worker.stdin.write(json.dumps([gold, predicted]) + "\n")
                worker.stdin.flush()
                ready, _, _ = select.select([worker.stdout], [], [], MATH_VERIFY_HARD_TIMEOUT_S)
                answer = worker.stdout.readline() if ready else ""
            except (BrokenPipeError, OSError, ValueError):
                answer = ""
            if answer.strip() not in ("0", "1"):
                # stuck in one C call past its own timeouts, or dead: the fallback comparison decides
                worker.kill()
                worker.wait()
                log.warning(
                    "math-verify gave no verdict within %.0f s on the answer %r; the fallback comparison decides",
                    MATH_VERIFY_HARD_TIMEOUT_S,
                    predicted[:80],
                )
                return False
            self._idle.put(worker)
            return answer.strip() == "1"


_WORKERS = _MathVerifyWorkers()


def _has_top_level_comma(answer: str) -> bool:
    """A list, set or tuple of several answers (``(2, 2), (6, 2)``, ``\\{1, 3\\}``), not ``1,000``."""
    return len(_top_level_parts(answer)) > 1


class BoxedMathVerifier:
    """1.0 when the last ``\\boxed{}`` answer of the completion equals the reference, else 0.0.

    Both backends refuse an answer whose unit differs from the reference's, and an interval given
    for an ordered pair (or the reverse). With math-verify, an answer either it or the fallback
    accepts scores 1. The fallback compares normalised strings, then values:
    a variable may be stated or not (``x=5`` for ``5``) but not changed (``y=5``), a unit may be
    left out, commas are thousands separators only in ``1,000``-style numbers.

    Lists: an answer of several parts separated by commas outside any bracket (``1, 3, 5``,
    ``(1,8,19), (2,7,13)``, the set ``\\{1, 3\\}``) matches a reference of as many parts, each part
    paired with its own equal one (units included, a repeated part counted as often as it is
    given). By default the parts pair in any order, as graders do (Math-Verify, MATH's grader,
    OlympiadBench's judge for ``is_multiple_answer``): MATH's "Enter all the solutions, separated
    by commas" takes them in any order. ``any_order=False`` pairs them in order, for a question that
    asks for one (MATH asks for ``12,9`` "first BP, then QT"; ``9, 12`` is wrong):
    :class:`BoxedMathTask` sets it per problem (:func:`asks_for_order`). Even then a set reference
    pairs in any order, and so do parts that each name their unknown (``y=2, x=3`` for
    ``x=3, y=2``). Inside brackets order always counts: the point ``(1, 2)`` is not ``(2, 1)``.
    Both backends follow these rules (math-verify alone would take ``-2`` for ``-2, -2``), and
    neither takes a list for one plain answer (``10, 0`` for ``10,\\!000``).

    Args:
        use_math_verify: use ``math-verify`` when importable (``False`` forces the fallback, e.g.
            for reproducibility across environments: math-verify also accepts symbolic
            equivalents, and ``40_9`` for ``40``). The backend is logged once per process.
        any_order: whether the parts of a list reference may come in any order. ``None`` (the
            default) leaves it to the record; a verifier sees only the reference, so it takes any
            order (the graders' convention) unless :class:`BoxedMathTask` builds it with
            ``any_order=False`` for a question that asks for an order. ``True``/``False`` force
            either.
    """

    _logged: set[str] = set()

    def __init__(self, use_math_verify: bool = True, any_order: bool | None = None) -> None:
        self.any_order = None if any_order is None else bool(any_order)
        # without a question to read, lists compare as graders compare them: as multisets
        self._unordered = self.any_order is not False
        self._mv = None
        if use_math_verify:
            try:
                import math_verify  # type: ignore[import-not-found]

                self._mv = math_verify
            except ImportError:
                self._mv = None
        if self.backend not in BoxedMathVerifier._logged:
            BoxedMathVerifier._logged.add(self.backend)
            log.info("BoxedMathVerifier compares answers with %s", self.backend)

    @property
    def backend(self) -> str:
        """``"math-verify"`` or ``"fallback"``."""
        return "math-verify" if self._mv is not None else "fallback"

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion``; ``reference`` is the bare answer or a solution containing ``\\boxed{}``."""
        predicted = last_boxed(completion)
        if predicted is None or not predicted.strip():
            return 0.0
        gold_boxes = all_boxed(reference)
        gold = ", ".join(dict.fromkeys(b.strip() for b in gold_boxes)) if gold_boxes else reference
        candidates = [predicted]
        # the completion's boxes are read again only for a list reference: rewards score every sample
        boxes = [b.strip() for b in all_boxed(completion)] if _has_top_level_comma(gold) else []
        if len(boxes) > 1 and all(boxes):
            # An answer of several parts boxed one by one (`\boxed{(2, 2)} and \boxed{(6, 2)}`) was
            # read as its last part: 12 of the 20 wrong 0s among real graders' test cases. Joined,
            # the boxes must equal the whole list, so boxing extra candidates does not pay.
            candidates.append(", ".join(dict.fromkeys(boxes)))
            if len(set(boxes)) < len(boxes):  # a list with a repeated part (`-2, -2`) boxed part by part
                candidates.append(", ".join(boxes))
        return float(any(self._equal(candidate, gold) for candidate in candidates))

    def _equal(self, predicted: str, gold: str) -> bool:
        if len(predicted) > MAX_ANSWER_CHARS or _conflict(predicted, gold):
            return False
        if _LOGIC_RE.search(predicted) and not _LOGIC_RE.search(gold):
            return False
        if _BASE_SUBSCRIPT_RE.search(predicted) and not _BASE_SUBSCRIPT_RE.search(gold):
            return False
        lists = _list_parts(predicted, gold)
        if lists is not None:
            # part by part, so math-verify's set comparison cannot reorder an ordered list
            return _paired(*lists, gold, self._unordered, self._part_equal)
        if self._mv is not None and not _misses_parts(predicted, gold, self._unordered):
            # what the fallback accepts (a stated variable, an omitted unit, `\textbf{(073)}`) math-verify
            # may not parse; either accepting is enough, so installing it never takes a reward away
            on_main = threading.current_thread() is threading.main_thread()
            if (_math_verify_equal if on_main else _WORKERS.equal)(gold, predicted):
                return True
        return _fallback_equal(predicted, gold, self._unordered)

    def _part_equal(self, predicted: str, gold: str) -> bool:
        # the fallback first: it settles most parts without a math-verify call
        return _fallback_part_equal(predicted, gold) or self._equal(predicted, gold)


def _field_text(value: Any, field: str, where: str, sep: str) -> str | None:
    """A record's ``answer`` or ``solution`` as text: a string, a number, or a list of them joined.

    OlympiadBench's records (its own ``final_answer``, ``answer`` in copies reshaped for MATH-style
    harnesses) hold the answer as a JSON list, ``["$2^{1009}$"]``, and the solution as a list of
    texts. Read with ``str()``, the reference was the list's Python repr, ``['$2^{1009}$']``: the
    fallback scored every one of 675 gold answers 0 and math-verify 205 of them (nothing said so).
    Several answers are joined with ", ", the form a list reference is compared in.
    """
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        value = sep.join(str(v).strip() for v in value)
        if not value.strip(", \n"):  # `[""]`: no answer, as `""` is (a solution may still give one)
            return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TaskDataError(
            f"{where}: a math record's {field!r} must be text, a number or a list of them "
            f"(it is {type(value).__name__}: {str(value)[:60]!r})"
        )
    return str(value)


class NoBoxedAnswerError(TaskDataError):
    """A math record whose solution boxes no answer (a proof, as NuminaMath-CoT mixes in): a file
    reader skips such rows, counted in one warning, and refuses the file only when no row is usable."""


def boxed_math_problem(row: dict[str, Any], where: str, index: int | None = None) -> Problem:
    """A ``{problem, solution|answer}`` row as a problem (``reference``: the answer or the solution).

    ``answer`` and ``solution`` may be lists (OlympiadBench): the answers are joined with ", ", the
    solution's parts with blank lines. An empty ``answer`` (``""``, ``[]``, ``[""]``) is no answer.

    Raises:
        TaskDataError: no ``problem``, no answer, or a ``solution`` (read when there is no
            ``answer``) without a ``\\boxed{}``, naming the file and line."""
    # `answer` wins when present, 0 included; a solution is read for its last \boxed{}
    reference = _field_text(row.get("answer"), "answer", where, ", ")
    from_solution = reference is None
    if from_solution:
        reference = _field_text(row.get("solution"), "solution", where, "\n\n")
    if not isinstance(row.get("problem"), str) or reference is None:
        raise TaskDataError(
            f"{where}: a math record needs 'problem' and 'solution' or 'answer' (it has {sorted(row)[:8]})"
        )
    # The verifier reads a solution for its \boxed{}; without one it compared the whole text, and
    # no answer ever equals that (OlympiadBench's solutions box nothing: 671 of 675 gold answers
    # scored 0). Every one of MATH's 5,000 test solutions has a box.
    if from_solution and not all_boxed(reference):
        raise NoBoxedAnswerError(
            f"{where}: a math record without 'answer' needs a 'solution' with the answer in \\boxed{{}} "
            f"(this one has none, so no answer could score); give the final answer as 'answer'"
        )
    pid = row.get("id", row.get("unique_id", f"math-{index}" if index is not None else where))
    problem = {**row, "id": str(pid), "question": row["problem"], "reference": reference}
    if "is_multiple_answer" in row:  # OlympiadBench: the parts of the answer may come in any order
        problem["is_multiple_answer"] = bool(row["is_multiple_answer"])
    return problem


def warn_skipped(path: Any, skipped: int, first: str) -> None:
    """One warning for the rows of ``path`` that box no answer (``first``: the first one's message)."""
    if skipped:
        log.warning(
            "%s: skipped %d math row(s) without an answer or a \\boxed{} solution; first: %s", path, skipped, first
        )


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
        self._any_order_verifier = BoxedMathVerifier(any_order=True)
        self._ordered_verifier = BoxedMathVerifier(any_order=False)

    def load(self, split: str) -> list[Problem]:
        """The problems of ``split``; rows whose solution boxes no answer (proofs) are skipped with
        one warning naming the file, the count and the first such line.

        Raises:
            TaskDataError: a malformed row, or no row with an answer at all."""
        path = split_file(self.path, split)
        problems, skipped, first = [], 0, ""
        for i, (where, row) in enumerate(iter_jsonl(path)):
            try:
                problems.append(boxed_math_problem(row, where, i))
            except NoBoxedAnswerError as exc:
                skipped, first = skipped + 1, first or str(exc)
        if skipped and not problems:
            raise NoBoxedAnswerError(f"{path}: no row has an answer ({skipped} without one; first: {first})")
        warn_skipped(path, skipped, first)
        return problems

    @staticmethod
    def list_any_order(problem: Problem) -> bool:
        """Whether the parts of ``problem``'s list answer may come in any order: yes when it is
        marked ``is_multiple_answer`` (OlympiadBench), no when its question asks for an order
        (:func:`asks_for_order`: "in increasing order", "first BP, then QT"), else yes (graders
        compare lists as sets)."""
        if problem.get("is_multiple_answer"):
            return True
        return not asks_for_order(str(problem.get("question") or problem.get("problem") or ""))

    def verify(self, completion: str, problem: Problem) -> float:
        """Score a completion of ``problem``; list parts pair in order only where
        :meth:`list_any_order` says so."""
        verifier = self._verifier if self.list_any_order(problem) else self._ordered_verifier
        return float(verifier(completion, problem["reference"]))

    def prompt_record(self, problem: Problem) -> dict[str, Any]:
        """The RL record; its verifier is built with ``any_order=False`` where the question asks
        for an order, and with ``any_order=True`` for an ``is_multiple_answer`` problem."""
        record = super().prompt_record(problem)
        if problem.get("is_multiple_answer"):
            record["verifier"] = {"class_path": self.verifier_spec(), "init_args": {"any_order": True}}
        elif not self.list_any_order(problem):
            record["verifier"] = {"class_path": self.verifier_spec(), "init_args": {"any_order": False}}
        return record

    def extract_answer(self, text: str) -> str | None:
        # the LaTeX as written: it is printed again in \boxed{} (normalize_latex would drop spaces
        # and dollar signs, `\$36` -> `\36`); votes group answers by answer_key
        boxed = last_boxed(text)
        return boxed.strip() if boxed and boxed.strip() else None

    def answer_key(self, answer: str) -> str:
        """``\\frac12`` and ``\\dfrac{1}{2}`` are one ballot."""
        return normalize_latex(answer)

    def verifier_spec(self) -> str:
        return "lightning_agents.rewards.BoxedMathVerifier"
