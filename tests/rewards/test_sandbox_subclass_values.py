"""Values of subclasses of plain types cross as the value they store, as ``==`` compares them in one file.

Before, a return value (and an exception's ``args``) of a subclass of a plain type was converted
with the program's own ``int()``, ``str()``, ``float()``, ``bytes()``, ``list()`` and ``dict()``:
an ``int`` subclass whose ``__int__`` says 404 while it holds 5 came as 404, so ``f() == 404``
passed, though ``X(5) == 404`` is False in one file (int's ``==`` reads the digits it stores). Now
the candidate reads such values through the plain type's own C-level methods (``int.__int__``,
``str.__str__``, ``list.__iter__``, ``dict.items``, ...), as it already read an exception's own
attributes, and a right program's ``IntEnum``, namedtuple, ``OrderedDict`` (in its own order),
``defaultdict``, ``Counter`` and ``str`` subclasses still pass what they pass in one file.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier

# Subclasses whose conversions lie about what they hold (each holds something else than it says).
LIARS = r"""
class SlyInt(int):
    def __int__(self):
        return 404
    __index__ = __int__
    def __str__(self):
        return "404"
    __repr__ = __str__

class SlyStr(str):
    def __str__(self):
        return "expected"
    __repr__ = lambda self: "'expected'"

class SlyList(list):
    def __iter__(self):
        return iter([1, 2])
    def __len__(self):
        return 2
    def __getitem__(self, i):
        return [1, 2][i]

class SlyTuple(tuple):
    def __iter__(self):
        return iter((1, 2))
    def __len__(self):
        return 2

class SlyDict(dict):
    def keys(self):
        return ["a"]
    def items(self):
        return [("a", 1)]
    def values(self):
        return [1]
    def __iter__(self):
        return iter(["a"])
    def __getitem__(self, key):
        return 1
    def __len__(self):
        return 1

class SlyFloat(float):
    def __float__(self):
        return 0.5

class SlyBytes(bytes):
    def __bytes__(self):
        return b"ok"

class SlyComplex(complex):
    def __complex__(self):
        return 1j

class SlySet(set):
    def __iter__(self):
        return iter([1, 2])
    def __len__(self):
        return 2

class SlyFrozen(frozenset):
    def __iter__(self):
        return iter([1, 2])
    def __len__(self):
        return 2
"""


def _case(body, tests):
    return LIARS + body, tests


# Programs that fail these tests in one file: each must fail them here too (each passed before).
ONE_FILE_FAILS = {
    "an int that converts to the answer": _case("def f():\n    return SlyInt(5)\n", "assert f() == 404\n"),
    "a str that prints the answer": _case("def f():\n    return SlyStr('wrong')\n", "assert f() == 'expected'\n"),
    "a list that iterates as the answer": _case("def f():\n    return SlyList([3])\n", "assert f() == [1, 2]\n"),
    "a tuple that iterates as the answer": _case("def f():\n    return SlyTuple((3,))\n", "assert f() == (1, 2)\n"),
    "a dict whose keys, items and lookups lie": _case(
        "def f():\n    return SlyDict(a=2, b=3)\n", "assert f() == {'a': 1}\n"
    ),
    "a float that converts to the answer": _case("def f():\n    return SlyFloat(2.0)\n", "assert f() == 0.5\n"),
    "bytes that convert to the answer": _case("def f():\n    return SlyBytes(b'no')\n", "assert f() == b'ok'\n"),
    "a complex that converts to the answer": _case("def f():\n    return SlyComplex(2)\n", "assert f() == 1j\n"),
    "a set that iterates as the answer": _case("def f():\n    return SlySet({3})\n", "assert f() == {1, 2}\n"),
    "a frozenset that iterates as the answer": _case(
        "def f():\n    return SlyFrozen({3})\n", "assert f() == frozenset({1, 2})\n"
    ),
    "liars nested in containers": _case(
        "def f():\n    return [SlyInt(5), {'k': (SlyFloat(2.0),)}]\n", "assert f() == [404, {'k': (0.5,)}]\n"
    ),
    "a lying dict key": _case("def f():\n    return {SlyStr('wrong'): 1}\n", "assert f() == {'expected': 1}\n"),
    "a liar in a set": _case("def f():\n    return {SlyInt(5), 7}\n", "assert f() == {404, 7}\n"),
    "a liar returned by a coroutine": _case(
        "async def f():\n    return SlyInt(5)\n", "import asyncio\nassert asyncio.run(f()) == 404\n"
    ),
    "a liar in a built-in exception's args": _case(
        "def f():\n    raise ValueError(SlyInt(5), 'x')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.args == (404, 'x')\nelse:\n    raise AssertionError\n",
    ),
    "a liar in the args of a class of the program's own": _case(
        "class Bad(KeyError):\n    pass\ndef f():\n    raise Bad(SlyList([3]))\n",
        "try:\n    f()\nexcept KeyError as e:\n    assert e.args[0] == [1, 2]\nelse:\n    raise AssertionError\n",
    ),
    "a liar in the args of a group's member": _case(
        "def f():\n    raise ExceptionGroup('g', [ValueError(SlyInt(5))])\n",
        "try:\n    f()\nexcept* ValueError as g:\n    assert g.exceptions[0].args == (404,)\n",
    ),
    # the args go by the value stored (5), the text by the value's own __str__ ("404"), as in one
    # file: rebuilt from 5 alone, str(e) would be "5" and match="^5$" would pass
    "an exception whose text is not its stored args' text": _case(
        "class Shown(int):\n    def __str__(self):\n        return '404'\ndef f():\n    raise ValueError(Shown(5))\n",
        "import pytest\nwith pytest.raises(ValueError, match='^5$'):\n    f()\n",
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_FILE_FAILS))
def test_what_fails_in_one_file_fails_here(case):
    program, tests = ONE_FILE_FAILS[case]
    assert not one_file_passes(program, tests, case)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", (case, verdict)


# A right program returning subclasses of plain types from the standard library and of its own:
# each check passes in one file and here.
RIGHT = r'''
import collections
import enum


class Status(enum.IntEnum):
    NOT_FOUND = 404


class Color(str, enum.Enum):  # str() of a member is "Color.RED", its stored text "red"
    RED = "red"


class Level(str, enum.Enum):  # enum.StrEnum's shape (3.11 on)
    HIGH = "high"

    def __str__(self):
        return str.__str__(self)


class Markup(str):
    """markupsafe-ish: a str subclass with methods of its own."""

    def __html__(self):
        return self

    def __add__(self, other):
        return Markup(str.__add__(self, other))


class Meters(float):
    def __repr__(self):
        return f"{float(self)} m"


Point = collections.namedtuple("Point", "x y")


def status():
    return Status.NOT_FOUND


def color():
    return [Color.RED, Level.HIGH]


def markup():
    return Markup("<b>") + "x</b>"


def distance():
    return Meters(2.5)


def point():
    return Point(3, 7)


def recent():
    seen = collections.OrderedDict(a=1, b=2, c=3)
    seen.move_to_end("a")
    return seen


def groups():
    out = collections.defaultdict(list)
    for word in ["ab", "ac", "b"]:
        out[word[0]].append(word)
    return out


def counts():
    return collections.Counter("abracadabra")


def tags():
    return frozenset({Markup("x"), "y"})


def fail(code):
    raise ValueError(Status(code))


def where():
    raise IndexError(Point(1, 2))
'''

RIGHT_TESTS = r"""
import pytest

assert status() == 404
assert color() == ["red", "high"]
assert markup() == "<b>x</b>"
assert distance() == 2.5
assert point() == (3, 7)
assert recent() == {"a": 1, "b": 2, "c": 3} and list(recent()) == ["b", "c", "a"]
assert list(recent().items()) == [("b", 2), ("c", 3), ("a", 1)]
assert groups() == {"a": ["ab", "ac"], "b": ["b"]}
assert counts() == {"a": 5, "b": 2, "r": 2, "c": 1, "d": 1} and list(counts()) == ["a", "b", "r", "c", "d"]
assert tags() == frozenset({"x", "y"})
with pytest.raises(ValueError, match="^404$") as e:
    fail(404)
assert e.value.args == (404,)
with pytest.raises(IndexError, match=r"^Point\(x=1, y=2\)$"):
    where()
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_right_program_returning_subclasses_passes(isolation):
    # before: `color() == ["red", "high"]` failed ("Color.RED" crossed, str() of the member)
    exec(compile(RIGHT + RIGHT_TESTS, "one file", "exec"), {})  # noqa: S102 -- passes in one file
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), RIGHT, RIGHT_TESTS)
    assert verdict.passed, verdict


def test_wrong_values_of_subclasses_still_fail():
    wrong = RIGHT.replace('seen.move_to_end("a")', 'seen.move_to_end("b")')
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), wrong, RIGHT_TESTS)
    assert verdict.reason == "wrong_answer", verdict


def test_the_wire_reads_what_subclasses_store():
    # in-process: la_wire.encode (a return value, and the tests' arguments the harness sends) and
    # the candidate's budgeted encoder (exception args and attributes) send the same plain data
    import collections
    import importlib.util
    import sys
    from pathlib import Path

    from lightning_agents.rewards._jail import la_wire

    namespace = {}
    exec(compile(LIARS, "liars", "exec"), namespace)  # noqa: S102
    saved = list(sys.path)  # la_candidate puts its folder first on sys.path: restored
    try:
        path = Path(la_wire.__file__).parent / "la_candidate.py"
        spec = importlib.util.spec_from_file_location("la_candidate_subclass_values", path)
        la_candidate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(la_candidate)
    finally:
        sys.path[:] = saved

    class Shuffled(collections.OrderedDict):
        def __iter__(self):
            return iter(["zz"])

    recent = Shuffled(a=1, b=2, c=3)
    recent.move_to_end("a")
    point = collections.namedtuple("Point", "x y")
    cases = [
        (namespace["SlyInt"](5), 5),
        (namespace["SlyStr"]("wrong"), "wrong"),
        (namespace["SlyList"]([3]), [3]),
        (namespace["SlyTuple"]((3,)), (3,)),
        (namespace["SlyDict"](a=2, b=3), {"a": 2, "b": 3}),
        (namespace["SlyFloat"](2.0), 2.0),
        (namespace["SlyBytes"](b"no"), b"no"),
        (namespace["SlyComplex"](2), 2 + 0j),
        (namespace["SlySet"]({3}), {3}),
        (namespace["SlyFrozen"]({3}), frozenset({3})),
        (recent, collections.OrderedDict([("b", 2), ("c", 3), ("a", 1)])),  # an OrderedDict, in its order
        (point(1, namespace["SlyInt"](2)), (1, 2)),
        (collections.Counter("aab"), {"a": 2, "b": 1}),
    ]
    for value, expected in cases:
        data = la_wire.encode(value)
        assert data == la_candidate._encode(value, la_candidate._Budget(), 1 << 20), value
        decoded = la_wire.decode(data)
        assert type(decoded) is type(expected) and decoded == expected, (value, decoded)
        if isinstance(decoded, dict):
            assert list(decoded) == list(expected)  # an OrderedDict in its own order
