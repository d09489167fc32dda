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

from lightning_agents.tasks._files import TaskDataError
from lightning_agents.tasks.answers import all_boxed, last_boxed
from lightning_agents.tasks.base import Problem
from lightning_agents.tasks.question_file import QuestionFileTask

log = logging.getLogger(__name__)

__all__ = ["BoxedMathTask", "BoxedMathVerifier", "MATH_INSTRUCTION", "last_boxed", "normalize_latex"]

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


def _top_level_parts(answer: str) -> list[str]:
    """The comma-separated parts of an answer outside any bracket: ``1, 3, 5`` and
    ``(1,8,19), (2,7,13)`` have several, ``(1, 2)`` and ``[1, 2)`` one (a point or an interval is
    one answer), ``\\{1, 3\\}`` two (the set's braces are dropped), ``1,000`` one, ``27,54,108`` three."""
    text = answer.strip().strip("$").strip()
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
    if all(i > 0 and text[i - 1].isdigit() and _THOUSANDS_RE.match(text, i) for i in commas):
        commas = []
    bounds = [-1, *commas, len(text)]
    return [text[i + 1 : j].strip() for i, j in zip(bounds, bounds[1:])]


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
_STATEMENT_RE = re.compile(r"[=<>;]|\\(?:in|pm|mp|le|leq|ge|geq|ne|neq|lt|gt|cup|cap|quad|qquad)(?![A-Za-z])|and|or")


def _misses_parts(predicted: str, gold: str) -> bool:
    """A plain list answer with fewer parts than a plain list reference. math-verify compares
    lists as sets, so `-2` equalled `-2, -2` and `16, 3, 1` equalled `16, 3, 1, 1` (OlympiadBench
    2532, 2356). Answers that state more than values (``(p,q)=(3,2)``, ``x \\in [-2, 7]``,
    ``(5, 8) \\text{ and } (8, 5)``) are left to it, and so is a list that repeats a part."""
    if _STATEMENT_RE.search(predicted) or _STATEMENT_RE.search(gold):
        return False
    # `\\left(` written with a doubled backslash normalises to `\(`: the bracket is what counts
    plain = [re.sub(r"\\+(?=[()\[\]])", "", normalize_latex(text)) for text in (predicted, gold)]
    return _part_count(plain[0]) < _part_count(plain[1])


def _match_parts(predicted: list[str], gold: list[str]) -> bool:
    """Every predicted part paired with its own equal gold part, in any order (a perfect matching
    by augmenting paths; equality is the fallback's, so a part that is a point stays ordered)."""
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j, part in enumerate(gold):
            if j not in seen and _fallback_equal(predicted[i], part):
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return all(place(i, set()) for i in range(len(predicted)))


def _fallback_equal(predicted: str, gold: str) -> bool:
    a, b = normalize_latex(predicted), normalize_latex(gold)
    if a == b:
        return True
    parts_p, parts_g = _top_level_parts(predicted), _top_level_parts(gold)
    if len(parts_p) > 1 and len(parts_p) == len(parts_g) and _match_parts(parts_p, parts_g):
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
    ``(1,8,19), (2,7,13)``, the set ``\\{1, 3\\}``) matches a reference of as many parts in any
    order, each part paired with an equal one (as OlympiadBench's own judge pairs them); inside
    brackets order counts, so the point ``(1, 2)`` is not ``(2, 1)`` and an interval keeps its
    ends. With math-verify too, an answer must list as many parts as the reference (math-verify
    alone compares lists as sets, ``-2`` for ``-2, -2``).

    Args:
        use_math_verify: use ``math-verify`` when importable (``False`` forces the fallback, e.g.
            for reproducibility across environments: math-verify also accepts symbolic
            equivalents, and ``40_9`` for ``40``). The backend is logged once per process.
    """

    _logged: set[str] = set()

    def __init__(self, use_math_verify: bool = True) -> None:
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
        if self._mv is not None and not _misses_parts(predicted, gold):
            # what the fallback accepts (a stated variable, an omitted unit, `\textbf{(073)}`) math-verify
            # may not parse; either accepting is enough, so installing it never takes a reward away
            on_main = threading.current_thread() is threading.main_thread()
            if (_math_verify_equal if on_main else _WORKERS.equal)(gold, predicted):
                return True
        return _fallback_equal(predicted, gold)


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
        raise TaskDataError(
            f"{where}: a math record without 'answer' needs a 'solution' with the answer in \\boxed{{}} "
            f"(this one has none, so no answer could score); give the final answer as 'answer'"
        )
    pid = row.get("id", row.get("unique_id", f"math-{index}" if index is not None else where))
    return {**row, "id": str(pid), "question": row["problem"], "reference": reference}


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
        # the LaTeX as written: it is printed again in \boxed{} (normalize_latex would drop spaces
        # and dollar signs, `\$36` -> `\36`); votes group answers by answer_key
        boxed = last_boxed(text)
        return boxed.strip() if boxed and boxed.strip() else None

    def answer_key(self, answer: str) -> str:
        """``\\frac12`` and ``\\dfrac{1}{2}`` are one ballot."""
        return normalize_latex(answer)

    def verifier_spec(self) -> str:
        return "lightning_agents.rewards.BoxedMathVerifier"
