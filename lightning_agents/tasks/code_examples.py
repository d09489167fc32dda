"""Input/output examples read from a code problem's docstring, as tests and as inputs for voting.

HumanEval states its examples in many forms: ``>>> f(x)`` followed by the result (possibly over
several lines), and on one line ``f(x) == y``, ``f(x) ==> y``, ``f(x) => y``, ``f(x) ➞ y``,
``f(x) -> y``, ``f(x) = y``, ``f(x) returns y``, ``f(x) should return y``, ``f(x)  # returns y``.
An example is kept only when its call and its expected value are Python expressions made of
literals (``is_happy(a) => False`` names an undefined ``a`` and is dropped; ``true`` is read as
``True``), and results are compared with a float tolerance (``triangle_area(3, 4, 5) == 6.00``),
so no canonical solution fails its own examples, except HumanEval/47's, whose docstring states
a wrong median (checked on all 164 problems by the tests).

The checks run inside the package sandbox as part of the candidate's program; nothing here
executes model code. :meth:`HumanEvalTask.example_tests <lightning_agents.tasks.code.HumanEvalTask.example_tests>`
serves them to HFlow's ``test`` operator; HFlow's code voting groups candidates by
:func:`behaviour_program` output.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize

__all__ = ["behaviour_program", "docstring_examples", "example_assertions", "parse_behaviour"]

_SEPARATORS = re.compile(r"^\s*(?:#\s*)?(?:==>|=>|➞|->|==|=|should\s+return|returns?|is)\s*", re.IGNORECASE)
_LITERAL_NAMES = {"True", "False", "None", "true", "false", "none", "inf", "nan"}

# Comparison helper shipped with the generated checks: equality, with a tolerance for floats.
_CLOSE = """
def _hflow_close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        try:
            return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b)))
        except (TypeError, ValueError):
            return False
    if isinstance(a, tuple) and isinstance(b, str):
        b = (b,)  # a one-element tuple written without its comma: ("Venus")
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_hflow_close(x, y) for x, y in zip(a, b))
    return a == b
"""


def _literal_only(expr: str) -> bool:
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the last two: absurdly deep expressions
        return False
    return not any(isinstance(n, ast.Name) and n.id not in _LITERAL_NAMES for n in ast.walk(tree)) and not any(
        isinstance(n, (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.Attribute, ast.Subscript))
        for n in ast.walk(tree)
    )


def _is_value(expr: str) -> bool:
    try:
        ast.literal_eval(expr)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _normalise(expr: str) -> str:
    """JavaScript-style ``true``/``false`` in an example as Python's, as names only: inside a
    string literal (``'false'``, ``'it is true'``) they are data."""
    if "true" not in expr and "false" not in expr:
        return expr
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(expr).readline))
    except (tokenize.TokenError, SyntaxError):
        return expr
    lines = expr.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = list(expr)
    for tok in tokens:
        if tok.type == tokenize.NAME and tok.string in ("true", "false"):
            at = starts[tok.start[0] - 1] + tok.start[1]
            out[at] = tok.string[0].upper()  # same length, so every other offset stays put
    return "".join(out)


def _call_end(line: str, start: int) -> int | None:
    """Index just past the parenthesis that closes the call opening at ``start`` (None if unbalanced)."""
    depth, quote, i = 0, "", start
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


_MAX_TRIES = 64


def _longest_expression(text: str) -> str | None:
    """The longest prefix of ``text`` that is a literal expression (``8 = ...`` -> ``8``)."""
    text = text.strip().rstrip(".,;")  # the sentence's full stop: "should return 16."
    tries = 0
    for end in range(len(text), 0, -1):
        # what follows must be prose or a comment: not the rest of a token (``""aaa"`` is a typo)
        # and not more arithmetic (``1 + (2 / 2) = 2`` is a derivation, not a result)
        if end < len(text) and text[end] not in " \t#.,;":
            continue
        rest = text[end:].lstrip()
        if end < len(text) and rest and not (rest[0].isalpha() or rest[0] in "#.,;"):
            continue
        candidate = text[:end].strip()
        if end < len(text):
            # "f(1) == 2, f(2) == 3": the comma ends the value, it does not make a tuple of it
            candidate = candidate.removesuffix(",").rstrip()
        if candidate and _is_value(_normalise(candidate)):
            return ast.unparse(ast.parse(_normalise(candidate), mode="eval"))
        tries += 1
        if tries >= _MAX_TRIES:
            break  # each try parses the prefix: a long line of prose would cost quadratic time
    return None


def _kind(value) -> str:
    if isinstance(value, (bool, int, float)):
        return "number"
    return type(value).__name__


def docstring_examples(prompt: str, entry_point: str) -> list[tuple[str, str]]:
    """``(call, expected)`` pairs of Python source stated in ``prompt``'s docstring."""
    lines = prompt.splitlines()
    out: list[tuple[str, str]] = []
    one_line: set[int] = set()
    section = 0
    i = 0
    in_examples = False
    while i < len(lines):
        stripped = lines[i].strip()
        # One-line forms count only once the docstring says it gives examples: before that,
        # ``tri(1) = 3`` is part of a definition, not a call and its result.
        in_examples = in_examples or bool(re.search(r"example|for instance|e\.g\.", stripped, re.IGNORECASE))
        if stripped.startswith(">>>"):
            call = stripped[3:].strip()
            i += 1
            while i < len(lines) and lines[i].strip().startswith("..."):
                call += " " + lines[i].strip()[3:].strip()
                i += 1
            expected_lines = []
            while i < len(lines):
                nxt = lines[i].strip()
                if not nxt or nxt.startswith((">>>", '"""', "'''")):
                    break
                expected_lines.append(nxt)
                i += 1
            expected = " ".join(expected_lines)
            end = _call_end(call, len(entry_point)) if call.startswith(entry_point + "(") else None
            if end == len(call) and expected and _literal_only(_normalise(call[len(entry_point) :])):
                exp = _longest_expression(expected)
                if exp is not None and _literal_only(_normalise(expected)):
                    out.append((call, exp))
            continue
        if in_examples and re.search(r"example|for instance|e\.g\.", stripped, re.IGNORECASE):
            section = len(out)  # one-line examples from here on belong to the latest example section
        pos = stripped.find(entry_point + "(")
        if (
            pos >= 0
            and in_examples
            and not stripped.startswith("def ")
            and (pos == 0 or not (stripped[pos - 1].isalnum() or stripped[pos - 1] in "_."))
        ):
            end = _call_end(stripped, pos + len(entry_point))
            if end is not None:
                call = stripped[pos:end]
                rest = stripped[end:]
                match = _SEPARATORS.match(rest)
                args = call[len(entry_point) :]
                if match and _literal_only(_normalise(args)):
                    exp = _longest_expression(rest[match.end() :])
                    if exp is not None:
                        one_line.add(len(out))
                        out.append((entry_point + _normalise(args), exp))
        i += 1
    # Results of one function have one type; when one-line "examples" disagree (``tri(4) = 3`` in a
    # recurrence's definition next to ``tri(3) = [1, 3, 2, 8]``), keep only the last example section,
    # and one-liners of another type than the ``>>>`` examples (MultiPL-E's rewording of the same
    # problem puts the list result under ``>>> tri(3)``).
    items = [(example, k in one_line, _kind(ast.literal_eval(example[1]))) for k, example in enumerate(out)]
    if len({kind for _, one, kind in items if one}) > 1:
        items = [item for k, item in enumerate(items) if not item[1] or k >= section]
    doctest_kinds = {kind for _, one, kind in items if not one}
    if doctest_kinds:
        items = [item for item in items if not item[1] or item[2] in doctest_kinds]
    out = [example for example, _, _ in items]
    seen: set[tuple[str, str]] = set()
    return [e for e in out if not (e in seen or seen.add(e))]


def example_assertions(prompt: str, entry_point: str) -> str | None:
    """Python source that asserts every docstring example (None when there is none)."""
    examples = docstring_examples(prompt, entry_point)
    if not examples:
        return None
    body = [_CLOSE]
    for call, expected in examples:
        body.append(
            f"_hflow_got = {call}\nassert _hflow_close(_hflow_got, {expected}), "
            f"{call!r} + ' returned ' + repr(_hflow_got) + ', expected ' + {expected!r}"
        )
    return "\n".join(body)


def behaviour_program(program: str, prompt: str, entry_point: str, tag: str = "") -> str:
    """``program`` followed by code that prints, per docstring example, what the candidate returns
    (or the exception it raises) and whether that matches the stated result, one JSON line each.

    Args:
        tag: a value the lines carry (``"t"``) and :func:`parse_behaviour` requires: a fresh random
            one per run keeps a program that prints such lines itself (and exits) from passing.
    """
    examples = docstring_examples(prompt, entry_point) if entry_point else []
    probe = [_CLOSE, "import json as _hflow_json"]
    for call, expected in examples:
        probe.append(
            "try:\n"
            f"    _hflow_r = {call}\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'r': repr(_hflow_r)[:500], 'ok': bool(_hflow_close(_hflow_r, {expected}))}}))\n"
            "except Exception as _hflow_e:\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'r': '!' + type(_hflow_e).__name__, 'ok': False}}))"
        )
    # the last line: a program that exits before the probe (os._exit(0) in its own code) ran no example
    probe.append(f"print(_hflow_json.dumps({{'t': {tag!r}, 'done': True}}))")
    return program + "\n\n" + "\n".join(probe) + "\n"


def parse_behaviour(stdout: str, ran: bool, tag: str = "") -> tuple[str, bool]:
    """``(behaviour signature, passes every example)`` from a :func:`behaviour_program` run made
    with the same ``tag``; lines without it are the program's own output, and a run without the
    probe's last line did not run the examples (``"!crashed"``)."""
    if not ran:
        return "!crashed", False
    results, ok, done = [], True, False
    for line in (stdout or "").splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(row, dict) or row.get("t", "") != tag:
            continue
        if "r" in row:
            results.append(row["r"])
            ok = ok and bool(row.get("ok"))
        elif row.get("done") is True:
            done = True
    if not done:
        return "!crashed", False
    return "\x1f".join(results), ok
