"""Input/output examples read from a code problem's docstring, as tests and as inputs for voting.

HumanEval states its examples in many forms: ``>>> f(x)`` followed by the result (possibly over
several lines), and on one line ``f(x) == y``, ``f(x) ==> y``, ``f(x) => y``, ``f(x) ➞ y``,
``f(x) -> y``, ``f(x) = y``, ``f(x) returns y``, ``f(x) should return y``, ``f(x)  # returns y``.
An example is kept only when its call and its expected value are Python expressions made of
literals (``is_happy(a) => False`` names an undefined ``a`` and is dropped; ``true`` is read as
``True``), and results are compared with a float tolerance (``triangle_area(3, 4, 5) == 6.00``),
so no canonical solution fails its own examples, except HumanEval/47's, whose docstring states
a wrong median (checked on all 164 problems by the tests). LeetCode-style ``Input: a = 1, b = 2``
/ ``Output: 3`` pairs are examples too, and so are MBPP's ``assert`` lines (evalplus's MBPP+
prompts state the task's first test: ``assert set(f(x)) == set(y)``, ``assert math.isclose(f(x),
y, rel_tol=0.001)``, ...).

The checks run inside the package sandbox as part of the candidate's program; nothing here
executes model code. :meth:`HumanEvalTask.example_tests <lightning_agents.tasks.code.HumanEvalTask.example_tests>`
serves them to HFlow's ``test`` operator; HFlow's code voting groups candidates by
:func:`behaviour_program` output, on the examples and on :func:`generated_calls` made from them.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import re
import tokenize

__all__ = [
    "MAX_GENERATED",
    "behaviour_program",
    "docstring_examples",
    "example_assertions",
    "generated_calls",
    "parse_behaviour",
]

_SEPARATORS = re.compile(r"^\s*(?:#\s*)?(?:==>|=>|➞|->|==|=|should\s+return|returns?|is)\s*", re.IGNORECASE)
_LITERAL_NAMES = {"True", "False", "None", "true", "false", "none", "inf", "nan"}

# Comparison helper shipped with the generated checks: equality, with a tolerance for floats.
_CLOSE = """
import math as _hflow_math


def _hflow_close(a, b, tol=None):
    if isinstance(a, float) or isinstance(b, float) or tol:
        try:
            if tol:  # the example's own math.isclose(..., rel_tol=, abs_tol=)
                return _hflow_math.isclose(float(a), float(b), rel_tol=tol[0], abs_tol=tol[1])
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


# Pure built-ins MBPP's asserts wrap a call and its value in (``set(f(x)) == set((4, 5))``): the
# example then compares ``set(f(x))`` with the wrapped value.
_WRAPPERS = {"set": set, "sorted": sorted, "tuple": tuple, "list": list}


def _entry_call(node: ast.expr, entry_point: str) -> str | None:
    """``node`` as source when it calls the entry point (possibly inside one ``_WRAPPERS`` call)
    with literal arguments only."""
    wrapper = None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _WRAPPERS
        and len(node.args) == 1
        and not node.keywords
    ):
        wrapper, node = node.func.id, node.args[0]
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
        return None
    values = list(node.args) + [k.value for k in node.keywords]
    if any(isinstance(v, ast.Starred) for v in node.args) or any(k.arg is None for k in node.keywords):
        return None
    if not all(_literal_only(ast.unparse(v)) for v in values):
        return None
    call = ast.unparse(node)
    return f"{wrapper}({call})" if wrapper else call


def _wrapped_value(node: ast.expr, wrapper: str | None) -> str | None:
    """The literal ``node`` (``set((4, 5))`` or ``(4, 5)``) as source of the value the call side
    compares with: ``wrapper`` applied to it when the call side is wrapped."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == wrapper
        and len(node.args) == 1
    ):
        node = node.args[0]
    source = ast.unparse(node)
    if not _is_value(source):
        return None
    if wrapper is None:
        return source
    try:
        return repr(_WRAPPERS[wrapper](ast.literal_eval(source)))
    except (TypeError, ValueError):  # set([[1]]), sorted([1, "a"]): not an example we can state
        return None


def _assert_example(line: str, entry_point: str) -> tuple | None:
    """``(call, expected)`` from an MBPP-style ``assert`` line: ``assert f(x) == y`` (either side),
    ``assert set(f(x)) == set(y)``, ``assert f(x) is None``, ``assert f(x)`` and ``assert not f(x)``
    (``bool(f(x))``); ``(call, expected, (rel_tol, abs_tol))`` from ``assert math.isclose(f(x), y,
    rel_tol=...)``, whose stated values are often rounded (``62.830000000000005`` for ``2 * 3.1415 * 10``)."""
    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    test = tree.body[0].test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        call = _entry_call(test.operand, entry_point)
        # the test asks for a falsy value, not for False (MBPP's regex tasks return None or a match)
        return (f"bool({call})", "False") if call else None
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "isclose":
        if len(test.args) != 2:
            return None
        sides = test.args
    elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        sides = [test.left, test.comparators[0]]
    else:
        call = _entry_call(test, entry_point)
        return (f"bool({call})", "True") if call else None
    for call_node, value_node in (sides, sides[::-1]):
        call = _entry_call(call_node, entry_point)
        if call:
            wrapper = call.split("(", 1)[0] if call.split("(", 1)[0] in _WRAPPERS else None
            value = _wrapped_value(value_node, wrapper)
            if value is None:
                return None
            if not isinstance(test, ast.Call):
                return call, value
            tol = _isclose_tolerance(test)
            return (call, value, tol) if tol else None
    return None


def _isclose_tolerance(call: ast.Call) -> tuple[float, float] | None:
    """``(rel_tol, abs_tol)`` of a ``math.isclose`` call (its defaults where not given); None when
    one is not a number."""
    tol = {"rel_tol": 1e-9, "abs_tol": 0.0}
    for k in call.keywords:
        if k.arg not in tol:
            return None
        try:
            tol[k.arg] = float(ast.literal_eval(k.value))
        except (ValueError, TypeError, SyntaxError):
            return None
    return tol["rel_tol"], tol["abs_tol"]


_INPUT = re.compile(r"^input\s*:\s*(.*)$", re.IGNORECASE)
_OUTPUT = re.compile(r"^output\s*:\s*(.*)$", re.IGNORECASE)
# HumanEval's prose form: ``For lst = [1,2,3] the output should be 14`` (HumanEval/78, 84, 94, 112,
# 133, 142; 84 puts a remark between: ``For N = 150, the sum of digits will be 6 the output ...``)
_FOR_SHOULD_BE = re.compile(r"^for\s+(.+?)\s+the\s+(?:output|result)\s+should\s+be\s*:?\s*(.+)$", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def _definition(prompt: str, entry_point: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """``entry_point``'s definition in ``prompt`` (parsed once per prompt: several example lines ask)."""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            return node
    return None


def _parameters(prompt: str, entry_point: str) -> list[str] | None:
    """The positional parameter names of ``entry_point`` as the prompt defines it."""
    node = _definition(prompt, entry_point)
    return None if node is None else [a.arg for a in node.args.posonlyargs + node.args.args]


def _input_output_example(inputs: str, output: str, entry_point: str, params: list[str] | None):
    """``(call, expected)`` from LeetCode's ``Input: arr = [1, 2], k = 3`` / ``Output: [2]`` (or
    ``Input: [4,2,3]`` for a one-parameter function). Named inputs are put in the order of the
    function's parameters, so that a candidate that names its parameters otherwise is called alike."""
    if params is None:
        return None
    try:
        node = ast.parse(f"_f({_normalise(inputs.strip().rstrip('.,;'))})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    if node.keywords:
        named = {k.arg: k.value for k in node.keywords}
        if node.args or list(named) != params[: len(named)] or len(named) != len(params):
            return None
        values = [named[p] for p in params]
    elif len(node.args) == 1 == len(params):
        values = list(node.args)
    else:
        return None
    if not all(_literal_only(ast.unparse(v)) for v in values):
        return None
    expected = _longest_expression(output)
    if expected is None:
        return None
    return f"{entry_point}({', '.join(ast.unparse(v) for v in values)})", expected


def _whole_value(text: str) -> str | None:
    """``text`` as a literal value when nothing but a comment follows it, else ``None``."""
    text = text.strip()
    cuts = [len(text)] + [k for k, ch in enumerate(text) if ch == "#"]
    for cut in cuts:
        head = text[:cut].strip()
        if head and _is_value(_normalise(head)):
            return ast.unparse(ast.parse(_normalise(head), mode="eval"))
    return None


def _may_return_none(prompt: str, entry_point: str) -> bool:
    """Whether ``entry_point``'s return annotation in ``prompt`` admits ``None`` (``Optional[...]``,
    ``X | None``, ``None``); no annotation says nothing."""
    node = _definition(prompt, entry_point)
    if node is None or node.returns is None:
        return False
    return bool(re.search(r"\b(?:Optional|None)\b", ast.unparse(node.returns)))


def _for_should_be_example(inputs: str, output: str, entry_point: str, params: list[str] | None):
    """``(call, expected)`` from ``For x = 1, y = 2 the output should be 3``: the named inputs are
    the longest comma-separated prefix that reads as keyword arguments (a remark may follow them)."""
    parts = inputs.split(",")
    for n in range(len(parts), 0, -1):
        example = _input_output_example(",".join(parts[:n]), output, entry_point, params)
        if example:
            return example
    return None


def _kind(value) -> str:
    if isinstance(value, (bool, int, float)):
        return "number"
    return type(value).__name__


def docstring_examples(prompt: str, entry_point: str) -> list[tuple]:
    """``(call, expected)`` pairs of Python source stated in ``prompt``'s docstring; an example from
    ``assert math.isclose(...)`` carries its tolerance as a third item, ``(rel_tol, abs_tol)``."""
    lines = prompt.splitlines()
    params = (
        _parameters(prompt, entry_point) if re.search(r"^\s*input\s*:", prompt, re.IGNORECASE | re.MULTILINE) else None
    )
    out: list[tuple] = []
    one_line: set[int] = set()
    section = 0
    i = 0
    in_examples = False
    while i < len(lines):
        stripped = lines[i].strip()
        match = _INPUT.match(stripped)
        if match and i + 1 < len(lines) and _OUTPUT.match(lines[i + 1].strip()):
            example = _input_output_example(
                match.group(1), _OUTPUT.match(lines[i + 1].strip()).group(1), entry_point, params
            )
            if example:
                out.append(example)
            i += 2
            continue
        match = _FOR_SHOULD_BE.match(stripped) if in_examples else None
        if match:
            params = params if params is not None else _parameters(prompt, entry_point)
            example = _for_should_be_example(match.group(1), match.group(2), entry_point, params)
            if example:
                out.append(example)
                i += 1
                continue
        if stripped.startswith("assert "):
            # MBPP states its examples as the asserts of its tests (evalplus's MBPP+ prompt: the
            # task's first test); an assert is an example wherever it stands
            example = _assert_example(stripped, entry_point)
            if example:
                out.append(example)
            i += 1
            continue
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
            # `>>> f(x) == y` on one line, no output line (HumanEval/108, 116, 128, 145, 156, 162):
            # only when the value is all that follows (or a comment); `== [1, 3] or f(x) == [3, 1]`
            # states two answers, of which the first alone would reject the second
            inline = _SEPARATORS.match(call[end:]) if end is not None and end < len(call) else None
            if inline and not expected and _literal_only(_normalise(call[len(entry_point) : end])):
                exp = _whole_value(call[end:][inline.end() :])
                if exp is not None:
                    out.append((entry_point + _normalise(call[len(entry_point) : end]), exp))
                continue
            # `>>> f(x)` and no output line: doctest shows nothing for None (HumanEval/12, whose
            # function returns Optional[str]); BigCodeBench writes usage lines that way for
            # functions that return a path or a frame, so only a return annotation that admits
            # None makes it an example
            if (
                end == len(call)
                and not expected
                and _literal_only(_normalise(call[len(entry_point) :]))
                and _may_return_none(prompt, entry_point)
            ):
                out.append((call, "None"))
                continue
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
            # a line that starts with `f(x) <sep> y` is an example without an "Example" heading
            # too (HumanEval/90, 132, 137, 144, 151, 154, 158); inside prose it stays prose
            and (in_examples or pos == 0)
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
    seen: set[tuple] = set()
    return [e for e in out if not (e in seen or seen.add(e))]


def _tol_arg(tol: list) -> str:
    """The tolerance argument of ``_hflow_close`` for an example with one (``, (0.001, 0.0)``)."""
    return f", {tol[0]!r}" if tol else ""


def example_assertions(prompt: str, entry_point: str) -> str | None:
    """Python source that asserts every docstring example (None when there is none)."""
    examples = docstring_examples(prompt, entry_point)
    if not examples:
        return None
    body = [_CLOSE]
    for call, expected, *tol in examples:
        body.append(
            f"_hflow_got = {call}\nassert _hflow_close(_hflow_got, {expected}{_tol_arg(tol)}), "
            f"{call!r} + ' returned ' + repr(_hflow_got) + ', expected ' + {expected!r}"
        )
    return "\n".join(body)


# Behaviour voting also runs the candidate on inputs made from the examples' own (one argument
# changed at a time): candidates that agree on the stated examples, as most plausible ones do,
# still split where they differ, e.g. on an empty list. At most this many per problem, each with
# this many seconds.
MAX_GENERATED = 6
GENERATED_TIME_S = 0.5


def _variants(value) -> list:
    """Small type-preserving changes of a literal argument, nearest first."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, 0]
    if isinstance(value, float):
        return [value + 0.5, -value, 0.0]
    if isinstance(value, str):
        return [value[::-1], value[1:], value + value[:1], value.upper()]
    if isinstance(value, (list, tuple)):
        return [value[::-1], value[:-1], value + value[:1], type(value)()]
    if isinstance(value, dict):
        items = list(value.items())
        return [dict(items[:-1]), dict(items[::-1][:1]), {}]
    return []


def generated_calls(prompt: str, entry_point: str, limit: int = MAX_GENERATED) -> list[str]:
    """Calls of ``entry_point`` on inputs near the docstring examples' (no result is stated for
    them): each argument of each example changed in the ways of :func:`_variants`, taken in turn
    across examples and arguments so that ``limit`` calls cover as many as they can; stated calls
    and repeats are left out. The same for every candidate: nothing here is random."""
    stated, per_example = set(), []
    for call, *_ in docstring_examples(prompt, entry_point):
        node = _inner_call(call, entry_point)
        if node is None:
            continue
        stated.add(ast.unparse(node))
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        changes = [[(args[:i] + [v] + args[i + 1 :], kwargs) for v in _variants(a)] for i, a in enumerate(args)]
        changes += [[(args, {**kwargs, key: v}) for v in _variants(a)] for key, a in kwargs.items()]
        # first change of each argument, then the second of each, ...: every argument gets varied
        width = max((len(c) for c in changes), default=0)
        per_example.append([c[v] for v in range(width) for c in changes if v < len(c)])
    out: list[str] = []
    for depth in range(max((len(o) for o in per_example), default=0)):
        for options in per_example:
            if depth < len(options) and len(out) < limit:
                args, kwargs = options[depth]
                parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
                call = f"{entry_point}({', '.join(parts)})"
                if call not in stated and call not in out:
                    out.append(call)
    return out


def _inner_call(call: str, entry_point: str) -> ast.Call | None:
    """The call of ``entry_point`` in an example's call (``set(f(x))`` -> ``f(x)``), when its
    arguments are literals Python can build."""
    try:
        node = ast.parse(_normalise(call), mode="eval").body
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id != entry_point:
            node = node.args[0] if len(node.args) == 1 else None
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
            return None
        for value in list(node.args) + [k.value for k in node.keywords]:
            ast.literal_eval(value)
        if any(k.arg is None for k in node.keywords):
            return None
        return node
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


# Repr of what a call returned, the same in every process: no object addresses (``<map object at
# 0x7f..>``), which would put two copies of one program in two groups.
_PROBE = """
import json as _hflow_json
import re as _hflow_re
import signal as _hflow_signal


class _HflowSlow(BaseException):  # not an Exception: a candidate's `except Exception` lets it through
    pass


def _hflow_alarm(*_):
    raise _HflowSlow()


def _hflow_repr(value):
    return _hflow_re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))[:500]
"""


def behaviour_program(program: str, prompt: str, entry_point: str, tag: str = "", generated: int = 0) -> str:
    """``program`` followed by code that prints, per docstring example, what the candidate returns
    (or the exception it raises) and whether that matches the stated result, one JSON line each;
    then a line that the examples ran; then what it returns on ``generated`` of
    :func:`generated_calls` (each with a time limit of ``GENERATED_TIME_S``: a slow one reads
    ``!slow``), and a closing line.

    Args:
        tag: a value the lines carry (``"t"``) and :func:`parse_behaviour` requires: a fresh random
            one per run keeps a program that prints such lines itself (and exits) from passing.
        generated: how many generated inputs to run (HFlow's vote: :data:`MAX_GENERATED`).
    """
    examples = docstring_examples(prompt, entry_point) if entry_point else []
    probe = [_CLOSE, _PROBE]
    for call, expected, *tol in examples:
        probe.append(
            "try:\n"
            f"    _hflow_r = {call}\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'r': _hflow_repr(_hflow_r), 'ok': bool(_hflow_close(_hflow_r, {expected}{_tol_arg(tol)}))}}))\n"
            "except Exception as _hflow_e:\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'r': '!' + type(_hflow_e).__name__, 'ok': False}}))"
        )
    # a program that exits before the probe (os._exit(0) in its own code) ran no example
    probe.append(f"print(_hflow_json.dumps({{'t': {tag!r}, 'done': 'examples'}}), flush=True)")
    calls = generated_calls(prompt, entry_point, generated) if examples and generated > 0 else []
    if calls:
        probe.append("_hflow_signal.signal(_hflow_signal.SIGALRM, _hflow_alarm)")
    for call in calls:
        probe.append(
            "try:\n"
            f"    _hflow_signal.setitimer(_hflow_signal.ITIMER_REAL, {GENERATED_TIME_S})\n"
            "    try:\n"
            f"        _hflow_r = {call}\n"
            "    finally:\n"
            "        _hflow_signal.setitimer(_hflow_signal.ITIMER_REAL, 0)\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'g': _hflow_repr(_hflow_r)}}), flush=True)\n"
            "except _HflowSlow:\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'g': '!slow'}}), flush=True)\n"
            "except Exception as _hflow_e:\n"
            f"    print(_hflow_json.dumps({{'t': {tag!r}, 'g': '!' + type(_hflow_e).__name__}}), flush=True)"
        )
    probe.append(f"print(_hflow_json.dumps({{'t': {tag!r}, 'done': True}}))")
    return program + "\n\n" + "\n".join(probe) + "\n"


def parse_behaviour(stdout: str, ran: bool, tag: str = "") -> tuple[str, bool]:
    """``(behaviour signature, passes every example)`` from a :func:`behaviour_program` run made
    with the same ``tag``; lines without it are the program's own output. A run without the line
    that the examples ran did not run them (``"!crashed"``); one that ran them and then died on a
    generated input (``ran`` false, or no closing line) keeps its examples' verdict and ends its
    signature with ``!died``."""
    results, ok, examples_done, done = [], True, False, False
    for line in (stdout or "").splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(row, dict) or row.get("t", "") != tag:
            continue
        if "r" in row and not examples_done:
            results.append(row["r"])
            ok = ok and bool(row.get("ok"))
        elif "g" in row and examples_done and not done:
            results.append(row["g"])
        elif row.get("done") == "examples":
            examples_done = True
        elif row.get("done") is True and examples_done:
            done = True
    if not examples_done:
        return "!crashed", False
    if not (ran and done):
        results.append("!died")
    return "\x1f".join(results), ok
