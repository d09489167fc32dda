"""The candidate's exceptions reach the tests as they would in one file.

The harness rebuilt a built-in exception from its name and message only, ``exc(msg)``: classes
whose constructor takes more (``UnicodeDecodeError``'s five arguments, an exception group's
message and members) raised ``TypeError`` in the tests instead, so a right solution failed tests
written as ``pytest.raises(UnicodeDecodeError)`` or ``except* ValueError`` (an ``asyncio.TaskGroup``
raises an ``ExceptionGroup``), and others lost what their arguments say (``KeyError('a')`` came
as ``KeyError("'a'")``, ``SystemExit(3)``'s ``code`` as ``'3'``, ``OSError``'s ``errno`` and
``filename`` as ``None``). The candidate now sends a built-in exception's ``args`` (and the
attributes they leave out, and a group's members) as plain data; the harness rebuilds it from
those, and treats them as untrusted like any value.
"""

from __future__ import annotations

import pytest
from sandbox_attacks import FORGE
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier

# One function, run by the candidate (to raise) and by the tests (to know what one file gives).
MAKE = r'''
import builtins

def make(name):
    """An instance of the built-in exception class ``name``, built as its constructor expects."""
    kind = getattr(builtins, name)
    if issubclass(kind, BaseExceptionGroup):
        members = [ValueError(1), ExceptionGroup("inner", [KeyError("k"), OSError(2, "gone", "f")])]
        if kind is BaseExceptionGroup:
            members.append(KeyboardInterrupt("stop"))
        return kind("grouped", members)
    if issubclass(kind, UnicodeDecodeError):
        return kind("utf-8", b"\xffab", 0, 1, "invalid start byte")
    if issubclass(kind, UnicodeEncodeError):
        return kind("ascii", "\xe9t\xe9", 0, 1, "ordinal not in range(128)")
    if issubclass(kind, UnicodeTranslateError):
        return kind("\xe9", 0, 1, "no mapping")
    if issubclass(kind, BlockingIOError):
        return kind(11, "would block", 7)
    if issubclass(kind, OSError):
        return kind(2, "No such file or directory", "a.txt", None, "b.txt")
    if issubclass(kind, ImportError):
        return kind("no module named mod", name="mod", path="/x/mod.py")
    if issubclass(kind, (NameError, AttributeError)):
        return kind("no attribute thing", name="thing")
    if issubclass(kind, SyntaxError):
        return kind("bad", ("f.py", 3, 4, "x = = 1\n", 3, 5))
    if kind is SystemExit:
        return kind(3)
    if kind is KeyError:
        return kind("k")
    return kind("m", 2)
'''

ALL_BUILTINS_PROGRAM = MAKE + "\ndef raise_named(name):\n    raise make(name)\n"
ALL_BUILTINS_TESTS = (
    MAKE
    + r"""
FIELDS = ("errno", "strerror", "filename", "filename2", "characters_written", "name", "path", "encoding",
          "object", "start", "end", "reason", "code", "msg", "lineno", "offset", "text", "end_lineno",
          "end_offset", "value")
MISSING = ("missing",)

def field(err, attr):
    try:
        return getattr(err, attr)
    except AttributeError:
        return MISSING

def same(got, want):
    assert type(got) is type(want), (type(got), type(want), got)
    assert str(got) == str(want), (str(got), str(want))
    if isinstance(want, BaseExceptionGroup):
        assert got.message == want.message
        assert len(got.exceptions) == len(want.exceptions)
        for a, b in zip(got.exceptions, want.exceptions):
            same(a, b)
        return
    assert got.args == want.args, (got.args, want.args)
    for attr in FIELDS:
        assert field(got, attr) == field(want, attr), (type(want).__name__, attr, field(got, attr))

names = sorted(n for n in dir(builtins) if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException))
assert len(names) > 60
for name in names:
    try:
        raise_named(name)
    except BaseException as got:
        if name in ("StopIteration", "StopAsyncIteration"):
            # the candidate's error, never the end of the tests' own iteration
            assert type(got).__name__ == "CandidateRaised", got
            assert not isinstance(got, (StopIteration, StopAsyncIteration))
        else:
            same(got, make(name))
    else:
        raise AssertionError(f"{name}: nothing raised")
"""
)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_every_builtin_exception_class_round_trips(isolation):
    # before: TypeError for UnicodeDecodeError/EncodeError/TranslateError and both groups,
    # CandidateInterrupted for BaseExceptionGroup, and other args, str and fields off
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), ALL_BUILTINS_PROGRAM, ALL_BUILTINS_TESTS)
    assert verdict.passed, verdict


REAL_PROGRAM = """
import asyncio

def decode(data):
    return data.decode("utf-8")

def lookup(table, key):
    return table[key]

def read(path):
    with open(path) as handle:
        return handle.read()

def finish(code):
    raise SystemExit(code)

def validate_all(values):
    errors = [TypeError(v) if not isinstance(v, int) else ValueError(v) for v in values if not isinstance(v, int) or v < 0]
    if errors:
        raise ExceptionGroup("invalid values", errors)
    return len(values)

def load(name):
    __import__(name)

async def fetch(x):
    await asyncio.sleep(0.01)
    if x < 0:
        raise ValueError(x)
    return x

async def fetch_all(xs):
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(fetch(x)) for x in xs]
    return [task.result() for task in tasks]
"""
REAL_TESTS = """
import asyncio, pytest

with pytest.raises(UnicodeDecodeError, match="can't decode byte 0xff in position 1") as info:
    decode(b"a\\xff")
assert (info.value.start, info.value.end, info.value.object) == (1, 2, b"a\\xff")
with pytest.raises(KeyError) as info:
    lookup({"a": 1}, "b")
assert info.value.args == ("b",) and str(info.value) == "'b'"
with pytest.raises(FileNotFoundError) as info:
    read("/no/such/file")
assert info.value.errno == 2 and info.value.filename == "/no/such/file"
with pytest.raises(SystemExit) as info:
    finish(3)
assert info.value.code == 3
with pytest.raises(ModuleNotFoundError) as info:
    load("no_such_module_here")
assert info.value.name == "no_such_module_here"

assert validate_all([1, 2]) == 2
seen = []
try:
    validate_all([1, -2, "x", -3])
except* ValueError as group:
    seen.append(sorted(err.args[0] for err in group.exceptions))
except* TypeError as group:
    seen.append([err.args[0] for err in group.exceptions])
assert seen == [[-3, -2], ["x"]], seen

assert asyncio.run(fetch_all([1, 2])) == [1, 2]
with pytest.raises(ExceptionGroup) as info:
    asyncio.run(fetch_all([1, -1, -2]))
assert sorted(err.args[0] for err in info.value.exceptions) == [-2, -1]
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_real_tests_of_exceptions_pass_a_right_solution(isolation):
    # before: "TypeError: function takes exactly 5 arguments (1 given)" at the first check
    verifier = CodeVerifier(isolation=isolation, timeout_s=60)
    verdict = score(verifier, REAL_PROGRAM, REAL_TESTS)
    assert verdict.passed, verdict
    # and a wrong one still fails them: it raises where it should not, or the wrong class
    wrong = REAL_PROGRAM.replace('raise ExceptionGroup("invalid values", errors)', "raise errors[0]")
    assert score(verifier, wrong, REAL_TESTS).reason == "wrong_answer"
    wrong = REAL_PROGRAM.replace('return data.decode("utf-8")', 'return data.decode("latin-1")')
    assert score(verifier, wrong, REAL_TESTS).reason == "wrong_answer"


def test_exceptions_too_big_to_send_keep_their_class():
    # args past the candidate's budget go unsent: the exception is rebuilt from its class and
    # message, and the reply stays small (a right solution must not fail on its size)
    program = (
        "def fail(n):\n    raise ValueError(list(range(n)))\n"
        "def decode(n):\n    return (b'\\xff' * n).decode('utf-8')\n"
        "def many(n):\n    raise ExceptionGroup('many', [ValueError(i) for i in range(n)])\n"
    )
    tests = (
        "import pytest\n"
        "with pytest.raises(ValueError):\n    fail(10**6)\n"
        "with pytest.raises(UnicodeDecodeError):\n    decode(300_000)\n"
        "try:\n    many(5)\nexcept* ValueError as group:\n    assert len(group.exceptions) == 5\n"
        "with pytest.raises(Exception):\n    many(5000)\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), program, tests)
    assert verdict.passed, verdict


# Each answers the tests' call with a frame of the candidate's own writing.
MALFORMED = {
    "args not a list": {"raised": "ValueError", "msg": "m", "args": "m"},
    "args not plain data": {"raised": "ValueError", "msg": "m", "args": [{"x": 1, "y": 2}]},
    "attrs not a dict": {"raised": "OSError", "msg": "m", "args": [], "attrs": [1]},
    "attrs key not a str": {"raised": "OSError", "msg": "m", "args": [], "attrs": {"d": [[1, 2]]}},
    "group not a list": {"raised": "ExceptionGroup", "msg": "m", "args": ["m"], "group": {"raised": "ValueError"}},
    "group member malformed": {"raised": "ExceptionGroup", "msg": "m", "args": ["m"], "group": [{"ok": 1}]},
    "unknown key": {"raised": "ValueError", "msg": "m", "traceback": []},
    "groups nested 100 deep": None,
}


# built in the program: a literal this deep does not compile
NESTED = (
    "frame = {'raised': 'ValueError', 'msg': 'm'}\n"
    "for _ in range(100):\n"
    "    frame = {'raised': 'ExceptionGroup', 'msg': 'm', 'args': ['m'], 'group': [frame]}\n"
)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_exception_replies_break_the_channel(case):
    # tests that pass on any exception: a frame the candidate forged must not reach them as one
    frame = "frame" if case == "groups nested 100 deep" else repr(MALFORMED[case])
    program = FORGE + NESTED + f"def f(x):\n    forge({frame})\n"
    tests = "try:\n    f(1)\nexcept BaseException:\n    pass\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "bad_reply", (case, verdict)


FORGED_BUT_WELL_FORMED = {
    # a StopIteration stays the candidate's error, with whatever args or inside a group
    "stop with args": (
        {"raised": "StopIteration", "msg": "", "args": [True]},
        "assert all(map(lambda x: f(x) == x * 2, [1, 2, 3]))\n",
    ),
    "stop in a group": (
        {"raised": "ExceptionGroup", "msg": "m", "args": ["m"], "group": [{"raised": "StopIteration", "msg": ""}]},
        "try:\n    f(1)\nexcept* StopIteration:\n    pass\n",
    ),
    # attributes are set only where the class defines them: a ValueError gets no `name`, and no
    # attribute of the exception's machinery is ever set
    "attribute of another class": (
        {"raised": "ValueError", "msg": "m", "args": ["m"], "attrs": {"d": [["name", "x"], ["__class__", "x"]]}},
        "try:\n    f(1)\nexcept ValueError as err:\n    assert err.name == 'x'\n",
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED_BUT_WELL_FORMED))
def test_forged_exceptions_grant_nothing(case):
    frame, tests = FORGED_BUT_WELL_FORMED[case]
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert not verdict.passed, (case, verdict)
