"""A program exception's own attributes (``self.code = code`` in its ``__init__``) reach the tests.

Before, only ``args`` and the built-in fields crossed: a right program failed tests such as
``with pytest.raises(ValueError) as e: ...; assert e.value.code == 404`` (the shape of
PeterShinners/comp's ``src/comp/_error.py``, a ``ParseError`` that keeps ``message`` and
``position``). The candidate now sends the exception's instance ``__dict__`` (read through
``BaseException``'s own descriptor) as plain data, each value whole or as a stand-in that no
check takes (:class:`LeftOut`); the harness writes them into the rebuilt exception's instance dict.
What a test sees is what a one-file program could set as plain instance attributes.
"""

from __future__ import annotations

import pytest
from sandbox_attacks import FORGE
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier

PROGRAM = r'''
import collections
import enum


class Status(enum.IntEnum):
    NOT_FOUND = 404


Point = collections.namedtuple("Point", "line column")


class HTTPError(ValueError):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = Status.NOT_FOUND
        self.details = {"path": "/x", "tries": [1, 2.5, None, True], "ok": False}
        self.where = Point(3, 7)
        self.handler = lambda: None  # not plain data: a stand-in


class ParseError(Exception):
    """In the shape of PeterShinners/comp src/comp/_error.py."""

    def __init__(self, message, position=None):
        self.message = message
        self.position = position
        super().__init__(f"Parse error: {message}")


def get(path):
    raise HTTPError(404, f"{path} not found")


def parse(text):
    raise ParseError("unexpected token", text.index("!"))


def lookup(key):
    err = KeyError(key)
    err.hint = "try 'a'"
    raise err


def validate(values):
    errors = []
    for i, value in enumerate(values):
        if value < 0:
            err = ValueError(f"negative: {value}")
            err.index = i
            errors.append(err)
    if errors:
        raise ExceptionGroup("invalid", errors)
    return len(values)


def wrapped(text):
    try:
        parse(text)
    except ParseError as err:
        raise RuntimeError("could not parse") from err
'''

TESTS = r"""
import copy
import pytest
import unittest

with pytest.raises(ValueError, match="/x not found") as e:
    get("/x")
assert e.value.code == 404
assert e.value.message == "/x not found"
assert e.value.status == 404 and e.value.status == 404.0
assert e.value.details == {"path": "/x", "tries": [1, 2.5, None, True], "ok": False}
assert e.value.where == (3, 7)
assert e.value.handler is not None and hasattr(e.value, "handler")
assert list(vars(e.value)) == ["code", "message", "status", "details", "where", "handler"]
assert copy.copy(e.value).code == 404 and copy.deepcopy(e.value).details["tries"][1] == 2.5

try:
    parse("ab!c")
except Exception as err:
    assert err.position == 2 and err.message == "unexpected token"
    assert str(err) == "Parse error: unexpected token"
else:
    raise AssertionError("no exception")


class Lookup(unittest.TestCase):
    def test_hint(self):
        with self.assertRaises(KeyError) as ctx:
            lookup("b")
        self.assertEqual(ctx.exception.hint, "try 'a'")


result = unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Lookup))
assert result.wasSuccessful(), result.failures + result.errors

seen = []
try:
    validate([1, -2, 3, -4])
except* ValueError as group:
    seen.extend(err.index for err in group.exceptions)
assert seen == [1, 3], seen

with pytest.raises(RuntimeError) as e:
    wrapped("x!")
assert e.value.__cause__.position == 1
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_right_program_whose_tests_read_its_exception_attributes_passes(isolation):
    # before: "AttributeError: 'HTTPError' object has no attribute 'code'"
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), PROGRAM, TESTS)
    assert verdict.passed, verdict


WRONG = {
    "another code": PROGRAM.replace("raise HTTPError(404,", "raise HTTPError(403,"),
    "another position": PROGRAM.replace('text.index("!")', 'text.index("!") + 1'),
    "no hint": PROGRAM.replace("    err.hint = \"try 'a'\"\n", ""),
    "a str for an int": PROGRAM.replace("raise HTTPError(404,", "raise HTTPError('404',"),
    "a bool for an int": PROGRAM.replace("err.index = i", "err.index = bool(i)"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_attributes_still_fail(case):
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), WRONG[case], TESTS)
    assert verdict.reason == "wrong_answer", (case, verdict)


# Programs that fail these tests in one file: each must fail them here too.
ONE_FILE_FAILS = {
    # an int subclass whose __int__ says 404 while it holds 5: `code == 404` is False in one file
    "an int that converts to the answer": (
        "class Sly(int):\n    def __int__(self):\n        return 404\n    __index__ = __int__\n"
        "class E(ValueError):\n    pass\n"
        "def f():\n    e = E('m')\n    e.code = Sly(5)\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError) as e:\n    f()\nassert e.value.code == 404\n",
    ),
    # a str subclass whose __str__ gives the answer: the text it holds is compared in one file
    "a str that prints the answer": (
        "class Sly(str):\n    def __str__(self):\n        return 'right'\n"
        "def f():\n    e = ValueError('m')\n    e.word = Sly('wrong')\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.word == 'right'\n",
    ),
    # a dict subclass whose items() lie: the dict's own entries count in one file
    "a dict whose items lie": (
        "class Sly(dict):\n    def items(self):\n        return [('a', 1)]\n    def __iter__(self):\n"
        "        return iter(['a'])\n"
        "def f():\n    e = ValueError('m')\n    e.d = Sly(a=2)\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.d == {'a': 1}\n",
    ),
    # a __dict__ property of the class does not change the instance dict `e.code` reads
    "a __dict__ property": (
        "class E(ValueError):\n    @property\n    def __dict__(self):\n        return {'code': 404}\n"
        "def f():\n    e = E('m')\n    object.__setattr__(e, 'code', 5)\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    # an object is not the number it prints as
    "an object for a number": (
        "class N:\n    def __eq__(self, other):\n        return False\n    def __repr__(self):\n        return '404'\n"
        "def f():\n    e = ValueError('m')\n    e.code = N()\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404 or not e.code\n",
    ),
    # a left-out value is still there: a test that it is absent (or None) fails, as in one file
    "a left-out value is not absent": (
        "def f():\n    e = ValueError('m')\n    e.response = object()\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert getattr(e, 'response', None) is None\n",
    ),
    # nor falsy, whatever the object says of itself
    "a left-out value is not falsy": (
        "class Full:\n    def __bool__(self):\n        return True\n"
        "def f():\n    e = ValueError('m')\n    e.rows = Full()\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert not e.rows\n",
    ),
    # a name of a str subclass whose hash is not its text's: `e.code` does not find it in one file
    "a name that is not found": (
        "class Name(str):\n    def __hash__(self):\n        return 1\n"
        "def f():\n    e = ValueError('m')\n    e.__dict__[Name('code')] = 5\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert hasattr(e, 'code')\n",
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_FILE_FAILS))
def test_what_fails_in_one_file_fails_here(case):
    program, tests = ONE_FILE_FAILS[case]
    assert not one_file_passes(program, tests, case)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_names_the_interpreter_reads_from_the_class_stay_shadowed():
    # a program's instance dict may hold `args`, `__class__`, `__traceback__`, `__cause__`,
    # `__dict__`, `__str__`, `__notes__` (set through vars(e)): in one file the class's
    # descriptors win for all but `__notes__`, and so they do here
    program = (
        "def f():\n"
        "    e = ValueError('real')\n"
        "    vars(e).update({'args': ('forged',), '__class__': 'KeyError', '__traceback__': 1,\n"
        "                    '__cause__': 'c', '__dict__': {'x': 1}, '__str__': 's', 'ok': 1})\n"
        "    raise e\n"
    )
    tests = (
        "try:\n"
        "    f()\n"
        "except ValueError as e:\n"
        "    assert type(e) is ValueError and e.__class__ is ValueError\n"
        "    assert e.args == ('real',) and str(e) == 'real' and e.__cause__ is None\n"
        "    assert e.__dict__['args'] == ('forged',) and e.__dict__['__str__'] == 's'\n"
        "    assert e.__traceback__ is not None and e.__str__ == 's' and e.ok == 1\n"
    )
    exec(compile(program + tests, "one file", "exec"), {})  # noqa: S102 -- the same in one file
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed, verdict


FORGED = {
    # what "vars" claims is written into the instance dict only: the class, args, str and chain
    # are the reply's, as in one file, where these names are the class's descriptors
    "class": ([["__class__", "KeyError"]], "assert isinstance(err, KeyError) or err.__class__ == 'KeyError'"),
    "args": ([["args", {"t": ["pass"]}]], "assert err.args == ('pass',)"),
    "str": ([["__str__", "pass"]], "assert str(err) == 'pass'"),
    "cause": ([["__cause__", "pass"]], "assert err.__cause__ == 'pass'"),
    # notes go by "notes" only (pytest 8's match= reads them): a "__notes__" here is dropped
    "notes": ([["__notes__", ["pass"]]], "assert getattr(err, '__notes__', None) == ['pass']"),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_forged_attributes_grant_nothing(case):
    items, check = FORGED[case]
    frame = {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "args": ["m"], "vars": items}
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    tests = f"try:\n    f(1)\nexcept Exception as err:\n    {check}\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_forged_fields_of_a_standard_library_class_keep_their_types():
    # json's JSONDecodeError's fields are set by "attrs" where their types are right, never here
    frame = {
        "raised": "JSONDecodeError",
        "msg": "",
        "bases": ["json.decoder.JSONDecodeError", "ValueError"],
        "args": ["m: line 1 column 1 (char 0)"],
        "attrs": {"d": [["doc", "x"], ["pos", 0]]},
        "vars": [["doc", 5], ["pos", "p"]],
    }
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    tests = (
        "import json\ntry:\n    f(1)\nexcept json.JSONDecodeError as err:\n    assert err.doc == 5 or err.pos == 'p'\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", verdict


def test_forged_attributes_on_a_class_of_the_harness_name_grant_nothing():
    # a class named like the harness's CandidateGone, with a "reason": only a class of that name
    frame = {"raised": "CandidateGone", "msg": "m", "bases": ["BaseException"], "vars": [["reason", "pass"]]}
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, "f(1)\n")
    assert verdict.reason == "wrong_answer", verdict


MALFORMED = {
    "not a list": {"vars": {"code": 1}},
    "an item not a list": {"vars": ["code"]},
    "a name not a string": {"vars": [[1, 2]]},
    "an empty item": {"vars": [[]]},
    "a why not a string": {"vars": [["code", None, 5]]},
    "a stand-in with a value": {"vars": [["code", 1, "int"]]},
    "a long why": {"vars": [["code", None, "x" * 65]]},
    "four items": {"vars": [["code", None, "x", 1]]},
    "a value not plain data": {"vars": [["code", {"q": 1}]]},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_attributes_break_the_channel(case):
    frame = {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "args": ["m"], **MALFORMED[case]}
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    tests = "try:\n    f(1)\nexcept BaseException:\n    pass\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "bad_reply", (case, verdict)


def test_attributes_past_the_budget_come_as_stand_ins_or_not_at_all():
    # a 1 MB value is past the reply's budget: a stand-in (no check on it passes), while the
    # class and a small attribute still come; 100,000 attributes do not fit the reply's text
    # budget: that exception keeps its class, and a name not there fails the verdict (a test of
    # `not hasattr(e, "x99999")` must not pass on attributes that were dropped). A stand-in's use
    # fails the verdict even where the tests catch what it raises (LeftOutTouched, sticky).
    program = (
        "def big():\n    e = ValueError('m')\n    e.blob = 'x' * (1 << 20)\n    e.code = 7\n    raise e\n"
        "def loop():\n    e = ValueError('m')\n    a = [1]\n    a.append(a)\n    e.a = a\n    raise e\n"
        "def many():\n    e = ValueError('m')\n    for i in range(100_000):\n"
        "        setattr(e, f'x{i}', i)\n    raise e\n"
    )
    tests = (
        "import pytest\n"
        "with pytest.raises(ValueError) as e:\n    big()\n"
        "assert e.value.code == 7 and hasattr(e.value, 'blob')\n"
        "with pytest.raises(ValueError) as e:\n    loop()\n"
        "assert type(e.value.a).__name__ == 'LeftOut'\n"
        "with pytest.raises(ValueError, match='^m$') as e:\n    many()\n"
        "assert type(e.value).__name__ == 'ValueError' and e.value.args == ('m',)\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), program, tests)
    assert verdict.passed, verdict
    for call, use in (("big", "len(e.value.blob)"), ("many", "hasattr(e.value, 'x99999')")):
        touch = (
            tests
            + f"with pytest.raises(ValueError) as e:\n    {call}()\ntry:\n    {use}\nexcept BaseException:\n    pass\n"
        )
        verdict = score(CodeVerifier(isolation="process", timeout_s=60), program, touch)
        assert verdict.reason == "wrong_answer" and "LeftOutTouched" in verdict.detail, (use, verdict)
