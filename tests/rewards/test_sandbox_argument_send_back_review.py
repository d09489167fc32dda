"""Arguments sent back: the tests' guard subclasses and items that are not plain data (review of
93bf6c6, F7 and F8).

F7: the tests pass an object of their own subclass whose mutating methods raise (``class
Frozen(list)``), to check that a program leaves its input alone. The candidate changes a plain copy
and the harness wrote the result through ``list.__setitem__``, so a program that sorts its input
passed where it fails in one file. Such a change now writes nothing and raises ``TypeError`` into
the tests. F8: a right program that leaves an item that is not plain data (a ``Fraction``) in an
argument the tests never read got ``bad_reply``; the item now comes back as a stand-in that fails
only where the tests use it. Each sandbox case is checked against one file first.
"""

from __future__ import annotations

import collections
import importlib

import pytest
from sandbox_modes import ISOLATIONS, agrees_with_one_file, one_file_passes, score

from lightning_agents.errors import VerifierError
from lightning_agents.rewards import CodeVerifier

la_wire = importlib.import_module("lightning_agents.rewards._jail.la_wire")

FROZEN = (
    "class Frozen(list):\n"
    "    def _no(self, *a, **k):\n"
    "        raise TypeError('frozen')\n"
    "    sort = append = extend = insert = pop = remove = clear = reverse = __setitem__ = __delitem__ = _no\n"
)
READ_ONLY = "class ReadOnly(dict):\n    def __setitem__(self, k, v):\n        raise TypeError('read-only')\n"
SORTS = "def sorted_copy(a):\n    a.sort()\n    return list(a)\n"
FRACTION = "from fractions import Fraction\n"

GUARDS = {
    "a program that sorts a Frozen list fails": (
        SORTS,
        FROZEN + "assert sorted_copy(Frozen([3, 1, 2])) == [1, 2, 3]\n",
        False,
    ),
    "a program that writes into a ReadOnly dict fails": (
        "def with_total(d):\n    d['total'] = sum(d.values())\n    return dict(d)\n",
        READ_ONLY + "assert with_total(ReadOnly(a=1, b=2)) == {'a': 1, 'b': 2, 'total': 3}\n",
        False,
    ),
}

ITEMS = {
    "a Fraction appended to a list the tests never read": (
        FRACTION + "def f(acc):\n    acc.append(Fraction(1, 3))\n    return 1\n",
        "acc = []\nassert f(acc) == 1\nassert len(acc) == 1\n",
        True,
    ),
    "an object stored as a dict value whose key the tests check": (
        "def register(d):\n    d['handler'] = object()\n",
        "d = {}\nregister(d)\nassert 'handler' in d\n",
        True,
    ),
    "a function stored in a list is still callable": (
        "def f(acc):\n    acc.append(len)\n",
        "acc = []\nf(acc)\nassert callable(acc[0])\n",
        True,
    ),
}


@pytest.mark.parametrize("case", list(GUARDS))
def test_a_guard_subclass_of_the_tests_is_not_bypassed(case):
    program, tests, passes = GUARDS[case]
    agrees_with_one_file(case, program, tests, passes)


def test_a_guard_refusal_writes_nothing_and_a_pass_past_it_is_no_verdict():
    """Nothing is written, not even into the call's plain arguments (``log == []`` holds: the
    tests pass). In one file they pass because ``Frozen.sort`` raises ``TypeError``; the harness's
    ``TypeError`` is a guess at what the tests' method does, so the pass is no verdict (red team
    50: where the tests' method lets the change through, a program passed ``pytest.raises``)."""
    program = "def both(a, log):\n    a.sort()\n    log.append('sorted')\n"
    tests = FROZEN + "log = []\ntry:\n    both(Frozen([2, 1]), log)\nexcept TypeError:\n    pass\nassert log == []\n"
    assert one_file_passes(program, tests)
    with pytest.raises(VerifierError, match="changed an argument of the tests' class Frozen"):
        score(CodeVerifier(isolation="process", timeout_s=30), program, tests)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_guard_refusal_names_the_tests_class(isolation):
    tests = FROZEN + "assert sorted_copy(Frozen([3, 1, 2])) == [1, 2, 3]\n"
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=30), SORTS, tests)
    assert not verdict.passed
    assert "TypeError" in verdict.detail and "Frozen" in verdict.detail, verdict


def test_which_subclasses_count_as_guards():
    class Frozen(list):
        def sort(self, *args, **kwargs):
            raise TypeError("frozen")

    class Logged:
        def append(self, item):
            raise TypeError("logged")

    class Mixed(Logged, list):  # the mixin's append comes before list's
        pass

    class Stack(list):  # a method of its own, no override: written as any list
        def push(self, item):
            list.append(self, item)

    class MyOrdered(collections.OrderedDict):
        pass

    class Tally(collections.Counter):
        def update(self, *args, **kwargs):
            raise TypeError("tally")

    class Members(set):
        def __ior__(self, other):
            raise TypeError("members")

    guards = {Frozen: "list.sort", Mixed: "list.append", Tally: "dict.update", Members: "set.__ior__"}
    for kind, method in guards.items():
        target = kind.__new__(kind)  # no __init__: Counter's calls update
        assert la_wire.guarded([([], []), (target, [])]) == (kind, method), kind
    unguarded = [[], {}, Stack(), MyOrdered(), collections.OrderedDict(), collections.Counter()]
    unguarded += [collections.defaultdict(int), bytearray()]
    assert la_wire.guarded([(target, None) for target in unguarded]) is None


@pytest.mark.parametrize("case", list(ITEMS))
def test_an_item_that_is_not_plain_data_fails_only_where_the_tests_use_it(case):
    program, tests, passes = ITEMS[case]
    agrees_with_one_file(case, program, tests, passes)


@pytest.mark.parametrize(
    "tests",
    [
        "acc = []\nf(acc)\nassert acc[0] * 3 == 1\n",  # read by the tests
        "acc = []\nf(acc)\nf(acc)\n",  # passed back to the candidate (in one file it gets the Fraction)
        "class Stack(list):\n    pass\nacc = Stack()\nf(acc)\nf(acc)\n",  # so too inside the tests' subclass
    ],
)
def test_a_left_out_item_the_tests_use_fails_the_verdict(tests):
    program = FRACTION + "def f(acc):\n    acc.append(Fraction(1, 3))\n"
    assert one_file_passes(program, tests)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert not verdict.passed
    assert "LeftOutTouched" in verdict.detail and "Fraction" in verdict.detail, verdict


def _stand_in(name, is_callable):
    return ("stand-in", name, is_callable)


def test_a_left_out_marker_is_refused_where_it_would_be_hashed_or_is_the_value():
    marker = {"lo": ["Fraction", False]}
    target = []
    writes, _ = la_wire.decode_moved([target], [[0, [1, marker]]], stand_in=_stand_in)
    assert writes == [(target, [1, ("stand-in", "Fraction", False)])]
    forged = [
        ([set()], [[0, [marker]]], la_wire._NO_VALUE),  # a set member
        ([{}], [[0, [[{"t": [1, marker]}, 1]]]], la_wire._NO_VALUE),  # inside a dict key
        ([[]], [[0, [{"fs": [marker]}]]], la_wire._NO_VALUE),  # a frozenset's member in a list
        ([[]], [], {"t": [marker]}),  # the call's value: the tests asked for it
        ([[]], [[0, [{"lo": ["Fraction", 0]}]]], la_wire._NO_VALUE),  # a malformed marker
    ]
    for objects, moved, frame in forged:
        with pytest.raises(la_wire.WireError):
            la_wire.decode_moved(objects, moved, frame, stand_in=_stand_in)
    with pytest.raises(la_wire.WireError):  # no stand-in given: refused as before
        la_wire.decode_moved([[]], [[0, [marker]]])
    with pytest.raises(la_wire.WireError):  # nor in a plain value
        la_wire.decode({"t": [marker]})


def test_the_candidate_marks_only_the_changed_arguments_items():
    from fractions import Fraction

    acc, keyed = [], {}
    before = la_wire.snapshot([acc, keyed])
    acc.append(Fraction(1, 3))
    moved, _, _ = la_wire.changes([acc, keyed], before)
    assert moved == [[0, [{"lo": ["Fraction", False]}]]]
    with pytest.raises(la_wire.WireError):  # the value is not marked
        la_wire.changes([acc], la_wire.snapshot([acc]), Fraction(1, 3))
