"""Exceptions of classes the program defines (or a module defines) reach the tests as in one file.

Before, an exception whose class is not a built-in one (``class MyError(ValueError)`` of the
program, ``json.JSONDecodeError``, ``statistics.StatisticsError``) reached the tests as
``CandidateRaised``, a plain ``Exception``: a right solution failed ``pytest.raises(ValueError)``,
``except ValueError`` and ``assertRaises(KeyError)``. The candidate now sends the class's name and
its built-in bases (nearest first), with its ``args`` as for a built-in exception; the harness
rebuilds it as an instance of a class of that name over those bases, made in the harness (no code
of the candidate's runs there). What it grants is what the program could raise itself in one file.
"""

from __future__ import annotations

import pytest
from sandbox_attacks import FORGE
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier

# In the shape of DwayneGit/PhantomDBM phantom/utility/validate_json.py (json.loads re-raising
# json.JSONDecodeError, a ValueError subclass defined in json.decoder) and of the classic unittest
# pattern `self.assertRaises(ValueError, raises_error, ...)` (cgoldberg/python-unittest-tutorial
# test_exception.py), plus classes of the program's own as solutions write them.
PROGRAM = r'''
import json
import statistics


class InvalidInputError(ValueError):
    """Raised for an input the function does not take."""


class MissingKey(KeyError):
    pass


class BadCode(ValueError):
    def __init__(self, code):
        super().__init__(f"bad code {code}")
        self.code = code

    def __str__(self):
        return f"code {self.code} is not allowed"


class Both(KeyError, TypeError):
    pass


class NotThere(FileNotFoundError):
    pass


class Invalid(ExceptionGroup):
    pass


class Done(SystemExit):
    pass


class Halt(BaseException):
    pass


def validate_json_script(json_str):
    try:
        return json.loads(json_str)
    except json.decoder.JSONDecodeError:
        raise


def parse_positive(text):
    value = int(text)
    if value <= 0:
        raise InvalidInputError(f"not positive: {value}", value)
    return value


def lookup(table, key):
    if key not in table:
        raise MissingKey(key)
    return table[key]


def check_code(code):
    raise BadCode(code)


def both(x):
    raise Both(x)


def read(path):
    raise NotThere(2, "No such file or directory", path)


def validate_all(values):
    errors = [InvalidInputError(v) for v in values if v < 0]
    if errors:
        raise Invalid("invalid values", errors)
    return len(values)


def mean(values):
    return statistics.mean(values)


def finish(code):
    raise Done(code)


def halt():
    raise Halt("stop")
'''

TESTS = r"""
import pytest
import unittest

with pytest.raises(ValueError, match="Expecting property name"):
    validate_json_script("{not json")
assert validate_json_script('{"a": 1}') == {"a": 1}
try:
    validate_json_script("[1, 2")
except ValueError as err:
    assert type(err).__name__ == "JSONDecodeError", type(err)
    assert str(err).startswith("Expecting ',' delimiter"), str(err)
else:
    raise AssertionError("no ValueError")

with pytest.raises(ValueError, match="not positive: -3") as info:
    parse_positive("-3")
assert str(info.value) == "('not positive: -3', -3)", str(info.value)
assert info.value.args == ("not positive: -3", -3), info.value.args
assert type(info.value).__name__ == "InvalidInputError"
assert type(info.value) is not ValueError  # a subclass, as in one file
assert parse_positive("4") == 4


class Lookup(unittest.TestCase):
    def test_missing(self):
        with self.assertRaises(KeyError) as ctx:
            lookup({"a": 1}, "b")
        self.assertEqual(ctx.exception.args, ("b",))
        self.assertEqual(str(ctx.exception), "'b'")
        self.assertRaises(LookupError, lookup, {}, "x")

    def test_found(self):
        self.assertEqual(lookup({"a": 1}, "a"), 1)


result = unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Lookup))
assert result.wasSuccessful(), result.failures + result.errors

with pytest.raises(ValueError) as info:
    check_code(7)
assert str(info.value) == "code 7 is not allowed", str(info.value)
assert info.value.args == ("bad code 7",)

for kind in (KeyError, TypeError, LookupError):
    with pytest.raises(kind):
        both(1)

with pytest.raises(FileNotFoundError) as info:
    read("a.txt")
assert (info.value.errno, info.value.strerror, info.value.filename) == (2, "No such file or directory", "a.txt")
assert isinstance(info.value, OSError) and type(info.value).__name__ == "NotThere"

assert validate_all([1, 2]) == 2
seen = []
try:
    validate_all([1, -2, -3])
except* ValueError as group:
    seen.extend(err.args[0] for err in group.exceptions)
assert sorted(seen) == [-3, -2], seen

with pytest.raises(ValueError):  # statistics.StatisticsError
    mean([])

with pytest.raises(SystemExit) as info:
    finish(4)
assert info.value.code == 4

try:
    halt()
except Exception:
    raise AssertionError("a BaseException caught as an Exception")
except BaseException as err:
    assert type(err).__name__ == "Halt" and str(err) == "stop"
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_own_exception_classes_reach_the_tests_as_their_builtin_bases(isolation):
    # before: "Failed: DID NOT RAISE <class 'ValueError'>" at the first check (a CandidateRaised)
    verifier = CodeVerifier(isolation=isolation, timeout_s=60)
    verdict = score(verifier, PROGRAM, TESTS)
    assert verdict.passed, verdict


WRONG = {
    # a class over another built-in base is not the one the tests expect
    "TypeError for ValueError": (
        PROGRAM.replace("class InvalidInputError(ValueError)", "class InvalidInputError(TypeError)")
    ),
    # Exception is not ValueError
    "Exception for ValueError": (
        PROGRAM.replace("class InvalidInputError(ValueError)", "class InvalidInputError(Exception)")
    ),
    # a plain BaseException subclass is not caught as an Exception
    "BaseException for KeyError": PROGRAM.replace("class MissingKey(KeyError)", "class MissingKey(BaseException)"),
    # the name is the program's: a different one fails a test that reads it
    "another name": PROGRAM.replace("InvalidInputError", "BadInput"),
    # its own str is what the tests see
    "another str": PROGRAM.replace('return f"code {self.code} is not allowed"', 'return "no"'),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_programs_still_fail(case):
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), WRONG[case], TESTS)
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_a_subclass_is_not_its_base():
    # type(err) is ValueError holds in one file only for a ValueError itself: a subclass sent as
    # its plain builtin base would pass where one file fails
    program = "class Mine(ValueError):\n    pass\n\ndef f(x):\n    raise Mine(x)\n"
    tests = "try:\n    f(1)\nexcept ValueError as err:\n    assert type(err) is ValueError\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", verdict


MALFORMED = {
    "bases not a list": {"raised": "Mine", "msg": "m", "bases": "ValueError"},
    "bases empty": {"raised": "Mine", "msg": "m", "bases": []},
    "bases not names": {"raised": "Mine", "msg": "m", "bases": [1]},
    "nine bases": {"raised": "Mine", "msg": "m", "bases": ["ValueError"] * 9},
    "str not true": {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "str": False},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bases_break_the_channel(case):
    program = FORGE + f"def f(x):\n    forge({MALFORMED[case]!r})\n"
    tests = "try:\n    f(1)\nexcept BaseException:\n    pass\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "bad_reply", (case, verdict)


FORGED = {
    # names that are not built-in exception classes build nothing: the harness's own classes
    # (CandidateGone decides the verdict's status), object, type
    "harness classes": (
        {"raised": "CandidateGone", "msg": "m", "bases": ["CandidateGone", "OutOfCpu", "object", "type"]},
        "f(1)\n",
    ),
    # a class named like one of the harness's is only a class of that name to it
    "harness class name": ({"raised": "CandidateGone", "msg": "pass", "bases": ["BaseException"]}, "f(1)\n"),
    "harness class name, caught": (
        {"raised": "OutOfCpu", "msg": "m", "bases": ["BaseException"]},
        "try:\n    f(1)\nexcept BaseException as err:\n    raise err\n",
    ),
    # a StopIteration subclass stays the candidate's error, not the end of the tests' map()
    "stop iteration": (
        {"raised": "Mine", "msg": "", "bases": ["StopIteration"], "args": [True]},
        "assert all(map(lambda x: f(x) == x * 2, [1, 2, 3]))\n",
    ),
    # a BaseException of the program's own is not caught as an Exception
    "base exception": (
        {"raised": "Mine", "msg": "m", "bases": ["BaseException"]},
        "try:\n    f(1)\nexcept Exception:\n    pass\n",
    ),
    # only the attributes the built-in base defines are set
    "attribute of another class": (
        {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "args": ["m"], "attrs": {"d": [["name", "x"]]}},
        "try:\n    f(1)\nexcept ValueError as err:\n    assert err.name == 'x'\n",
    ),
    # a group subclass without its members is not a group (except* cannot match part of it)
    "group without members": (
        {"raised": "Mine", "msg": "m", "bases": ["ExceptionGroup"], "args": ["m"]},
        "try:\n    f(1)\nexcept* ValueError:\n    pass\n",
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_forged_bases_grant_nothing(case):
    frame, tests = FORGED[case]
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_names_a_class_cannot_take_are_mended_not_a_crash():
    # a surrogate or a NUL in the name, or a long one, must not crash the harness (no verdict:
    # a verifier error, "no reward" instead of a score)
    tests = (
        "import pytest\n"
        "for i in range(3):\n"
        "    with pytest.raises(ValueError) as info:\n"
        "        f(i)\n"
        "    assert len(type(info.value).__name__) <= 200\n"
    )
    program = (
        "def f(i):\n    name = ['\\ud800x', 'a\\0b', 'n' * 100_000][i]\n    raise type(name, (ValueError,), {})('m')\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed, verdict


def test_a_class_past_the_budget_comes_whole_or_by_its_name_only():
    # 2,000 members whose own __str__ gives 500 characters spend the reply's text budget after
    # about 250: the rest must not come with fewer bases (an `except* TypeError` clause would
    # miss them) nor with their args' str for their own (a wrong text could pass): they come as
    # CandidateRaised, which no clause of these tests takes
    program = (
        "class Both(ValueError, TypeError):\n"
        "    def __str__(self):\n"
        "        return 'b' * 500\n"
        "def f(n):\n"
        "    raise ExceptionGroup('g', [Both(i) for i in range(n)])\n"
    )
    tests = (
        "whole = named = 0\n"
        "try:\n"
        "    f(2000)\n"
        "except ExceptionGroup as group:\n"
        "    assert len(group.exceptions) == 2000\n"
        "    for err in group.exceptions:\n"
        "        if type(err).__name__ == 'Both':\n"
        "            assert isinstance(err, ValueError) and isinstance(err, TypeError), type(err).__mro__\n"
        "            assert str(err) == 'b' * 500, str(err)\n"
        "            whole += 1\n"
        "        else:\n"
        "            assert type(err).__name__ == 'CandidateRaised', type(err)\n"
        "            assert not isinstance(err, (ValueError, TypeError))\n"
        "            named += 1\n"
        "assert whole > 100 and named > 100, (whole, named)\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), program, tests)
    assert verdict.passed, verdict


def _own_make():
    from test_sandbox_exceptions import MAKE

    own = MAKE.replace("def make(name):", "def make(name, own=True):").replace(
        "    kind = getattr(builtins, name)\n",
        "    kind = getattr(builtins, name)\n    if own:\n        kind = type('Own' + name, (kind,), {})\n",
    )
    assert own != MAKE
    return own


EVERY_CLASS_TESTS = r"""
FIELDS = ("errno", "strerror", "filename", "filename2", "characters_written", "name", "path", "encoding",
          "object", "start", "end", "reason", "code", "msg", "lineno", "offset", "text", "end_lineno",
          "end_offset", "value")

def field(err, attr):
    try:
        return getattr(err, attr)
    except AttributeError:
        return "missing"

def same(got, want):
    base = type(want).__mro__[1]
    assert type(got).__name__ == type(want).__name__, (type(got), type(want))
    assert isinstance(got, base) and type(got) is not base, type(got).__mro__
    assert str(got) == str(want), (str(got), str(want))
    if isinstance(want, BaseExceptionGroup):
        assert got.message == want.message and len(got.exceptions) == len(want.exceptions)
        return
    assert got.args == want.args, (got.args, want.args)
    for attr in FIELDS:
        assert field(got, attr) == field(want, attr), (type(want).__name__, attr, field(got, attr))

names = sorted(n for n in dir(builtins) if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException))
checked = 0
for name in names:
    try:
        raise_own(name)
    except BaseException as got:
        if name in ("StopIteration", "StopAsyncIteration"):
            assert type(got).__name__ == "CandidateRaised", got
        else:
            same(got, make(name))
            checked += 1
    else:
        raise AssertionError(f"{name}: nothing raised")
assert checked > 60, checked
"""


def test_a_subclass_of_every_builtin_exception_class_round_trips():
    # before: every one a CandidateRaised (or CandidateInterrupted), named in its message
    make = _own_make()
    program = make + "\ndef raise_own(name):\n    raise make(name)\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), program, make + EVERY_CLASS_TESTS)
    assert verdict.passed, verdict
