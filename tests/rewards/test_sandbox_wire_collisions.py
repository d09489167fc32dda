"""Keys that collapse, NaN objects and ``OrderedDict`` on the wire (la_wire), as ``==`` sees them in one file.

Before:
- keys or members whose class's ``__hash__``/``__eq__`` go by identity (``{K("a"), K("a")}``, two
  members in one file) were decoded into a plain set or dict, where they collapsed: ``len(f()) == 1``
  passed a program whose value has two. A container that decodes shorter than it was sent is now
  refused (``bad_reply``); no plain value's keys can collapse.
- every NaN was decoded as the one ``math.nan``: ``{float("nan"), float("nan")}`` (two members in
  one file) came as one, and a fresh NaN passed ``math.nan in f()``. Each NaN object now crosses
  as its own object: the same one where it recurs, ``math.nan`` only where it was ``math.nan``.
- an ``OrderedDict`` came as a plain ``dict``, whose ``==`` ignores the order:
  ``f() == OrderedDict([("b", 2), ("a", 1)])`` passed a program that returned them as a, b. It now
  crosses as an ``OrderedDict`` (made by the decoding side), both ways.
- a malformed float frame (``{"f": []}``) raised TypeError inside the harness, which the test saw as
  the function's own TypeError; a complex with an infinite part could not cross at all.
"""

from __future__ import annotations

import collections
import json
import math
import sys

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards._jail import la_wire

LIARS = r"""
import collections
import math

class K(str):
    __slots__ = ()
    def __hash__(self):
        return id(self)
    def __eq__(self, other):
        return self is other
    def __ne__(self, other):
        return self is not other

class I(int):
    def __hash__(self):
        return id(self)
    def __eq__(self, other):
        return self is other

class Od(collections.OrderedDict):
    pass
"""


def _round_trip(value):
    return la_wire.decode(json.loads(json.dumps(la_wire.encode(value), allow_nan=False)))


def test_keys_that_collapse_are_refused():
    namespace = {}
    exec(compile(LIARS, "liars", "exec"), namespace)  # noqa: S102
    key = namespace["K"]
    for value in (
        {key("a"): 1, key("a"): 2},
        {"a": 1, key("a"): 2},
        {key("a"), key("a")},
        frozenset({key("a"), key("a")}),
        namespace["Od"]([(key("a"), 1), (key("a"), 2)]),
        {namespace["I"](1), namespace["I"](1)},
    ):
        assert len(value) == 2
        with pytest.raises(la_wire.WireError, match="distinct where they were sent"):
            _round_trip(value)
    for frame in ({"d": [["a", 1], ["a", 2]]}, {"s": ["a", "a"]}, {"fs": [1, 1.0]}, {"od": [[1, 1], [True, 2]]}):
        with pytest.raises(la_wire.WireError):
            la_wire.decode(frame)
    # distinct keys of such classes still cross
    assert _round_trip({key("a"), key("b")}) == {"a", "b"}


def test_each_nan_object_crosses_as_its_own():
    x, y = float("nan"), float("nan")
    two = _round_trip({x, y})
    assert len(two) == 2 and len(_round_trip({float("nan"): 1, float("nan"): 2})) == 2
    got = _round_trip([x, y, y, x, {x: (x,)}, math.nan])
    assert got[0] is got[3] and got[1] is got[2] and got[0] is not got[1]
    assert len(set(got[:4])) == 2 and got[4] == {got[0]: (got[0],)}
    assert got[5] is math.nan and math.nan not in got[:4]
    # a complex with a NaN part, and a float subclass's NaN, are one object where they recur
    c = complex(0, math.nan)
    got = _round_trip([c, [c], complex(0, math.nan)])
    assert got[0] is got[1][0] and len({got[0], got[1][0], got[2]}) == 2
    sub = type("F", (float,), {})("nan")
    got = _round_trip([sub, sub, float(sub)])
    assert type(got[0]) is float and got[0] is got[1] and got[0] is not got[2]
    for frame in ({"n": 0}, {"n": [0, 1.5]}, {"n": [0, [1]]}, [{"n": [0, {"f": "nan"}]}, {"n": [0, {"f": "nan"}]}]):
        with pytest.raises(la_wire.WireError, match="NaN reference"):
            la_wire.decode(frame)


def test_an_ordered_dict_crosses_as_one():
    value = collections.OrderedDict(a=1, b=2)
    value.move_to_end("a")
    namespace = {}
    exec(compile(LIARS, "liars", "exec"), namespace)  # noqa: S102
    for sent in (value, namespace["Od"](value)):
        got = _round_trip(sent)
        assert type(got) is collections.OrderedDict and list(got.items()) == [("b", 2), ("a", 1)]
        assert got == collections.OrderedDict([("b", 2), ("a", 1)])
        assert got != collections.OrderedDict([("a", 1), ("b", 2)])
    assert type(_round_trip(collections.Counter("ab"))) is dict  # other dict subclasses: a plain dict


def test_malformed_floats_are_wire_errors_and_infinite_complexes_cross():
    for frame in ({"f": []}, {"f": {}}, {"f": "NaN"}, {"c": [[1], 0]}):
        with pytest.raises(la_wire.WireError):
            la_wire.decode(frame)
    assert _round_trip(complex(math.inf, -1)) == complex(math.inf, -1)
    assert _round_trip([complex(-math.inf, math.inf)]) == [complex(-math.inf, math.inf)]


# each fails its tests in one file and passed them in the sandbox before
ONE_FILE_FAILS = {
    "keys that collapse in a dict": ("def f():\n    return {K('a'): 1, K('a'): 2}\n", "assert len(f()) == 1\n"),
    "a key that collapses onto a plain one": ("def f():\n    return {'a': 1, K('a'): 2}\n", "assert f() == {'a': 2}\n"),
    "members that collapse in a set": ("def f():\n    return {K('a'), K('a')}\n", "assert f() == {'a'}\n"),
    "int members that collapse": ("def f():\n    return {I(1), I(1), I(2)}\n", "assert len(f()) == 2\n"),
    "members that collapse in a frozenset": (
        "def f():\n    return frozenset({K('a'), K('a')})\n",
        "assert len(f()) == 1\n",
    ),
    "an OrderedDict in the wrong order": (
        "def f():\n    return collections.OrderedDict([('a', 1), ('b', 2)])\n",
        "import collections\nassert f() == collections.OrderedDict([('b', 2), ('a', 1)])\n",
    ),
    "an OrderedDict subclass in the wrong order": (
        "def f():\n    return Od([('a', 1), ('b', 2)])\n",
        "import collections\nassert f() == collections.OrderedDict([('b', 2), ('a', 1)])\n",
    ),
    "two NaNs taken for one": (
        "def f():\n    return [float('nan'), float('nan')]\n",
        "assert len(set(f())) == 1\n",
    ),
    "a fresh NaN taken for math.nan": (
        "def f():\n    return [float('nan')]\n",
        "import math\nassert math.nan in f()\n",
    ),
    "one NaN taken for two": (
        "def f():\n    x = float('nan')\n    return [x, x]\n",
        "assert len(set(f())) == 2\n",
    ),
    "one complex NaN taken for two": (
        "def f():\n    c = complex(math.nan, 0)\n    return [c, c]\n",
        "assert len(set(f())) == 2\n",
    ),
    # the program breaks its own encoder: the harness raised TypeError decoding {"f": []}
    "a malformed float frame": (
        "import sys\ndef f():\n    return 1\nm = sys.modules.get('la_wire')\n"
        "if m:\n    m.encode = lambda v, depth=0: {'f': []}\n",
        "import pytest\nwith pytest.raises(TypeError):\n    f()\n",
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_FILE_FAILS))
def test_what_fails_in_one_file_fails_here(case):
    body, tests = ONE_FILE_FAILS[case]
    program = LIARS + body
    # in one file there is no la_wire to break (this process's, imported by other tests, stays whole)
    wire = sys.modules.pop("la_wire", None)
    try:
        assert not one_file_passes(program, tests, case)
    finally:
        if wire is not None:
            sys.modules["la_wire"] = wire
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert not verdict.passed and verdict.reason in ("wrong_answer", "bad_reply"), (case, verdict)


RIGHT = r"""
import collections
import math


def two_nans():
    return {float("nan"), float("nan")}


def nan_keys():
    return {float("nan"): 1, float("nan"): 2}


def same_nan():
    x = float("nan")
    return [x, x, {x}, (x,)]


def shared():
    return [math.nan]


def ordered():
    seen = collections.OrderedDict(a=1, b=2)
    seen.move_to_end("a")
    return seen


def is_sorted(d):
    return d == collections.OrderedDict(sorted(d.items()))


def far():
    return complex(math.inf, -1)
"""

RIGHT_TESTS = r"""
import collections
import math

assert len(two_nans()) == 2
assert len(nan_keys()) == 2
v = same_nan()
assert len(set(v[:2])) == 1 and v[0] is v[1] and v[2] == {v[1]} and v[3][0] is v[0]
assert shared()[0] is math.nan and math.nan in shared()
assert ordered() == collections.OrderedDict([("b", 2), ("a", 1)])
assert ordered() != collections.OrderedDict([("a", 1), ("b", 2)])
assert ordered() == {"a": 1, "b": 2}
assert not is_sorted(collections.OrderedDict([("b", 1), ("a", 2)]))
assert is_sorted(collections.OrderedDict([("a", 1), ("b", 2)]))
assert far() == complex(math.inf, -1)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_right_program_with_nans_and_ordered_dicts_passes(isolation):
    exec(compile(RIGHT + RIGHT_TESTS, "one file", "exec"), {})  # noqa: S102 -- passes in one file
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), RIGHT, RIGHT_TESTS)
    assert verdict.passed, verdict


# needs la_candidate's encoder to tag an OrderedDict too (its exception args and attributes)
EXCEPTION_ORDER = (
    "import collections\n"
    "def f():\n"
    "    e = ValueError('x', collections.OrderedDict([('a', 1), ('b', 2)]))\n"
    "    e.data = collections.OrderedDict([('a', 1), ('b', 2)])\n"
    "    raise e\n"
)


@pytest.mark.parametrize(
    ("check", "reason"),
    [
        ("e.data == collections.OrderedDict([('b', 2), ('a', 1)])", "wrong_answer"),  # passed before
        ("e.data == collections.OrderedDict([('a', 1), ('b', 2)])", "pass"),
        ("e.args[1] == collections.OrderedDict([('a', 1), ('b', 2)])", "pass"),  # args were left out before
        ("e.args[1] == collections.OrderedDict([('b', 2), ('a', 1)])", "wrong_answer"),
    ],
)
def test_an_ordered_dict_in_an_exception_crosses_as_one(check, reason):
    tests = f"import collections\ntry:\n    f()\nexcept ValueError as e:\n    assert {check}\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), EXCEPTION_ORDER, tests)
    assert verdict.reason == reason, verdict
