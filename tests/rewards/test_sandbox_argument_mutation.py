"""What the candidate does to its arguments comes back to the tests' own objects (red team 46's W3).

Before, the harness sent copies of the arguments and nothing the candidate did to them came back:
a program that sorted or emptied its input passed a "must not modify its input" test (a wrong
program scored 1.0), and a right in-place program (``lst.reverse()``, ``nums[:] = ...``) failed a
test that looked at its argument afterwards. One file gives the opposite verdicts. Now the lists,
dicts, sets and bytearrays of a call's arguments are numbered on the wire (one object passed or held
twice stays one), the candidate sends back the contents of those it changed, and the harness
writes them into the tests' objects in place: the same objects, of the same types, with their
other names and attributes. Every case below is checked against one file first.
"""

from __future__ import annotations

import json

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards._jail import la_wire

# -- the two shapes red team 46 found ---------------------------------------------------------

KEEP_INPUT = """
data = [3, 1, 2]
assert sorted_copy(data) == [1, 2, 3]
assert data == [3, 1, 2], "sorted_copy must not modify its input"
"""
SORTS_INPUT = "def sorted_copy(a):\n    a.sort()\n    return a\n"
COPIES_INPUT = "def sorted_copy(a):\n    return sorted(a)\n"

IN_PLACE = """
nums = [1, 2, 3, 4, 5]
assert rotate(nums, 2) is None
assert nums == [4, 5, 1, 2, 3], "rotate works in place"
"""
ROTATES = "def rotate(nums, k):\n    k %= len(nums)\n    nums[:] = nums[-k:] + nums[:-k]\n"
ROTATES_A_COPY = "def rotate(nums, k):\n    k %= len(nums)\n    nums = nums[-k:] + nums[:-k]\n"


def _verdict(program, tests, isolation="process", **options):
    return score(CodeVerifier(isolation=isolation, timeout_s=30, **options), program, tests)


def _agrees(program, tests, passes):
    """One file and the sandbox give ``passes`` for ``program`` under ``tests``."""
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests)
    assert verdict.passed is passes, verdict


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_program_that_destroys_its_input_fails_a_keep_input_test(isolation):
    assert not one_file_passes(SORTS_INPUT, KEEP_INPUT)
    verdict = _verdict(SORTS_INPUT, KEEP_INPUT, isolation)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "must not modify its input" in verdict.detail
    assert _verdict(COPIES_INPUT, KEEP_INPUT, isolation).passed


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_right_in_place_program_passes_an_in_place_test(isolation):
    assert one_file_passes(ROTATES, IN_PLACE)
    assert _verdict(ROTATES, IN_PLACE, isolation).passed
    verdict = _verdict(ROTATES_A_COPY, IN_PLACE, isolation)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


# -- kinds of objects, and identity -------------------------------------------------------------

CASES = {
    "reverse in place": (
        "def rev(lst):\n    lst.reverse()\n",
        "lst = [1, 2, 3]\nkeep = lst\nrev(lst)\nassert lst == [3, 2, 1] and keep is lst\n",
    ),
    "dict in place": (
        "def bump(d):\n    d['b'] = d.pop('a') + 1\n    d['c'] = [1]\n",
        "d = {'a': 1}\nkeep = d\nbump(d)\nassert d == {'b': 2, 'c': [1]} and keep is d and list(d) == ['b', 'c']\n",
    ),
    "set in place": (
        "def add_all(s, items):\n    s.update(items)\n    s.discard(0)\n",
        "s = {0, 1}\nkeep = s\nadd_all(s, (2, 3))\nassert s == {1, 2, 3} and keep is s\n",
    ),
    "bytearray in place": (
        "def upper(b):\n    b[:] = b.upper()\n    b.append(33)\n",
        "b = bytearray(b'hi')\nkeep = b\nupper(b)\nassert b == bytearray(b'HI!') and keep is b\n",
    ),
    "nested containers": (
        "def fill(grid):\n    grid[0][0] = 'x'\n    grid[1].append(9)\n    grid.append([])\n",
        "row0, row1 = [0, 0], [1]\ngrid = [row0, row1]\nfill(grid)\n"
        "assert grid == [['x', 0], [1, 9], []] and grid[0] is row0 and grid[1] is row1\n",
    ),
    "one list passed twice": (
        "def f(a, b):\n    a.append(1)\n    return len(b)\n",
        "x = []\nassert f(x, x) == 1\nassert x == [1]\n",
    ),
    "one list held twice": (
        "def f(grid):\n    grid[0].append(5)\n    return grid[1]\n",
        "inner = [1]\ngrid = [inner, inner]\nassert f(grid) == [1, 5]\n"
        "assert grid[0] is grid[1] is inner and inner == [1, 5]\n",
    ),
    "aliasing the candidate makes": (
        "def f(a, b):\n    a.append(b)\n    a.append(b)\n    b.append(0)\n",
        "a, b = [], []\nf(a, b)\nassert a[0] is a[1] is b and b == [0]\n",
    ),
    "the argument returned is the tests' object": (
        "def push(stack, item):\n    stack.append(item)\n    return stack\n",
        "s = [1]\nassert push(s, 2) is s\nassert s == [1, 2]\n",
    ),
    "a cycle": (
        "def f(a):\n    a.append(len(a))\n    return a[0] is a\n",
        "a = []\na.append(a)\nassert f(a) is True\nassert a[0] is a and a[1] == 1\n",
    ),
    "a change then an exception": (
        "def drain(q):\n    q.pop()\n    raise ValueError('stop')\n",
        "q = [1, 2]\ntry:\n    drain(q)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\nassert q == [1]\n",
    ),
    "keyword arguments": (
        "def f(*, into, value):\n    into[value] = True\n",
        "seen = {}\nf(into=seen, value='k')\nassert seen == {'k': True}\n",
    ),
    "a class of the tests' own": (
        "def push(stack):\n    stack.append(3)\n    stack.insert(0, 0)\n",
        "class Stack(list):\n    def peek(self):\n        return self[-1]\n"
        "s = Stack([1, 2])\ns.label = 'mine'\npush(s)\n"
        "assert type(s) is Stack and s.peek() == 3 and list(s) == [0, 1, 2, 3] and vars(s) == {'label': 'mine'}\n",
    ),
    "an OrderedDict reordered": (
        "def f(d):\n    d.move_to_end('a')\n",
        "import collections\nd = collections.OrderedDict(a=1, b=2)\nf(d)\n"
        "assert type(d) is collections.OrderedDict and list(d) == ['b', 'a']\n",
    ),
    "a Counter of the tests'": (
        "def count(c, words):\n    for w in words:\n        c[w] = c.get(w, 0) + 1\n",
        "import collections\nc = collections.Counter(a=1)\ncount(c, 'ab')\n"
        "assert type(c) is collections.Counter and c == {'a': 2, 'b': 1} and c.most_common(1) == [('a', 2)]\n",
    ),
    "a list inside a tuple": (
        "def f(pair):\n    pair[1].append('x')\n",
        "inner = []\npair = (1, inner)\nf(pair)\nassert inner == ['x']\n",
    ),
    "later calls see the change": (
        "def f(a):\n    a.append(len(a))\n    return list(a)\n",
        "a = []\nf(a)\nassert f(a) == [0, 1]\nassert a == [0, 1]\n",
    ),
    "a float changed to an equal int": (
        "def f(a):\n    a[0] = 1\n    a[1] = -0.0\n",
        "import math\na = [1.0, 0.0]\nf(a)\nassert type(a[0]) is int and math.copysign(1, a[1]) == -1\n",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_in_place_changes_come_back_as_in_one_file(case):
    program, tests = CASES[case]
    _agrees(program, tests, True)


WRONG = {
    "clears its dict": (
        "def total(d):\n    s = sum(d.values())\n    d.clear()\n    return s\n",
        "d = {'a': 1, 'b': 2}\nassert total(d) == 3\nassert d == {'a': 1, 'b': 2}\n",
    ),
    "pops a set": (
        "def smallest(s):\n    return s.pop() if len(s) == 1 else min(s)\n",
        "s = {5}\nassert smallest(s) == 5\nassert s == {5}\n",
    ),
    "empties a nested list it was passed twice": (
        "def f(rows):\n    rows[0].clear()\n    return 2\n",
        "r = [1, 2]\nassert f([r, r]) == 2\nassert r == [1, 2]\n",
    ),
    "changes then raises": (
        "def f(a):\n    a.append(0)\n    raise KeyError('k')\n",
        "a = []\ntry:\n    f(a)\nexcept KeyError:\n    pass\nassert a == []\n",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_program_that_changes_what_it_must_not_fails(case):
    program, tests = WRONG[case]
    _agrees(program, tests, False)


def test_async_def_changes_come_back():
    program = "async def fill(a):\n    a.append(1)\n"
    tests = "import asyncio\na = []\nasyncio.run(fill(a))\nassert a == [1]\n"
    _agrees(program, tests, True)
    # a plain function that changes its argument, then returns a coroutine
    program = "async def _g():\n    return 2\ndef f(a):\n    a.append(1)\n    return _g()\n"
    tests = "import asyncio\na = []\nc = f(a)\nassert a == [1]\nassert asyncio.run(c) == 2\n"
    _agrees(program, tests, True)


def test_an_argument_that_becomes_unsendable_fails_closed():
    """A value the wire cannot carry put into an argument comes back as a stand-in (review of
    93bf6c6, F8): the verdict fails where the tests see the change (the list is no longer empty)
    or use the item, never passes with the tests' object left as it was."""
    program = "def f(a):\n    a.append(object())\n    return 1\n"
    tests = "a = []\nassert f(a) == 1\nassert a == []\n"  # a wrong program that would pass on copies
    assert not one_file_passes(program, tests)
    verdict = _verdict(program, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    verdict = _verdict(program, "a = []\nassert f(a) == 1\nassert str(a[0])\n")
    assert not verdict.passed and "LeftOutTouched" in verdict.detail, verdict


def test_growing_an_argument_past_the_reply_cap_fails():
    """The contents that come back travel in the reply, under its cap (``max_reply_bytes``)."""
    program = "def f(a):\n    a.extend(range(5000))\n    return 0\n"
    tests = "a = []\nassert f(a) == 0\nassert a == []\n"
    assert not one_file_passes(program, tests)
    verdict = _verdict(program, tests, max_reply_bytes=4096)
    assert not verdict.passed and "exceeds the limit" in verdict.detail, verdict


# -- a candidate that forges what comes back ----------------------------------------------------

# The program replaces the candidate side's la_wire.changes (nothing there is trusted): its reply
# says the arguments changed in ways no program could make them, and the harness must refuse it,
# failing the verdict, without writing anything. On HEAD there was no such reply: the honest path
# passes these tests.
FORGER = """
import sys
# only inside the sandbox (one file, run in the tests' process, must not touch its la_wire)
_wire = sys.modules["la_wire"] if sys.argv[0].endswith("la_candidate.py") else None
_real = getattr(_wire, "changes", None)

def _forged(objects, before, value=getattr(_wire, "_NO_VALUE", None)):
    moved, frame, after = _real(objects, before, value)
    return {moved}, {frame}, after

if _real is not None:
    _wire.changes = _forged

def f(a, s, b):
    return 1
"""
FORGED_TESTS = (
    "a, s, b = [1], {1}, bytearray(b'x')\n"
    "try:\n    assert f(a, s, b) == 1\nfinally:\n    assert a == [1] and s == {1} and b == bytearray(b'x')\n"
)
FORGERIES = {
    "a number past the call's objects": ("[[3, [2]]]", "frame"),
    "a negative number": ("[[-1, [2]]]", "frame"),
    "one object twice": ("[[0, [2]], [0, [3]]]", "frame"),
    "a bool for a number": ("[[True, [2]]]", "frame"),
    "a list's contents for the set": ("[[0, [2]], [1, 'ff']]", "frame"),
    "a dict's pairs for the list": ("[[0, {'d': []}]]", "frame"),
    "bytes for the list": ("[[0, '41']]", "frame"),
    "the list in the set": ("[[1, [{'r': 0}]]]", "frame"),
    "the list as a dict key in the list": ("[[0, [{'d': [[{'r': 0}, 1]]}]]]", "frame"),
    "a reference past the objects": ("[[0, [{'r': 9}]]]", "frame"),
    "a reference to a later new object": ("[[0, [{'r': 3}, []]]]", "frame"),
    "a bad bytearray": ("[[2, 'zz']]", "frame"),
    "the value refers past the objects": ("moved", "{'r': 7}"),
    "moved not a list": ("{'0': [2]}", "frame"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_forged_changes_break_the_channel_and_write_nothing(case):
    moved, frame = FORGERIES[case]
    program = FORGER.format(moved=moved, frame=frame)
    assert one_file_passes(program, FORGED_TESTS)
    verdict = _verdict(program, FORGED_TESTS)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict


def test_a_forged_moved_list_is_decoded_whole_before_anything_is_written():
    """A ``moved`` list whose first entry is well formed and whose second is not writes neither:
    :func:`la_wire.decode_moved` builds every new contents before :func:`la_wire.write_back` runs,
    and the harness writes only when all of it decoded."""
    a, s = [1], {1}
    objects = la_wire.encode_call([a, s], {})[2]
    with pytest.raises(la_wire.WireError):
        la_wire.decode_moved(objects, [[0, [7]], [1, [{"r": 0}]]])
    assert a == [1] and s == {1}
    writes, _ = la_wire.decode_moved(objects, [[0, [7]], [1, [{"t": [{"r": 0}]}]]][:1])
    la_wire.write_back(writes)
    assert a == [7] and objects[0] is a


# -- the wire itself ----------------------------------------------------------------------------


def _to_candidate(args, kwargs=None):
    frames, named, objects = la_wire.encode_call(args, kwargs or {})
    got = la_wire.decode_call(*json.loads(json.dumps([frames, named], allow_nan=False)))
    return objects, got


def test_the_wire_numbers_shared_objects_alike_on_both_sides():
    inner = [1]
    d = {"k": inner}
    objects, (args, kwargs, theirs) = _to_candidate([inner, d, (inner,), bytearray(b"a")], {"z": d})
    assert [type(o) for o in objects] == [list, dict, bytearray]
    assert objects[0] is inner and objects[1] is d
    x, y, t, b = args
    assert y["k"] is x and t[0] is x and kwargs["z"] is y
    assert theirs == [x, y, b] and all(a is b for a, b in zip(theirs, [x, y, b]))


def test_write_back_keeps_objects_types_and_attributes():
    class Tagged(list):
        def __setitem__(self, key, value):  # never called: the base type's own methods write
            raise AssertionError("the tests' method ran")

    t = Tagged([1, 2])
    t.tag = "keep"
    s, b = {1}, bytearray(b"ab")
    objects, (_, _, theirs) = _to_candidate([t, s, b])
    before = la_wire.snapshot(theirs)  # what the candidate got
    theirs[0].reverse()
    theirs[1].add(len(theirs[0]))
    theirs[2].extend(b"c")
    moved, frame, _ = la_wire.changes(theirs, before, theirs[0])
    writes, value = la_wire.decode_moved(objects, json.loads(json.dumps(moved)), json.loads(json.dumps(frame)))
    la_wire.write_back(writes)
    assert type(t) is Tagged and list(t) == [2, 1] and vars(t) == {"tag": "keep"}
    assert s == {1, 2} and b == bytearray(b"abc") and value is t


def test_plain_decoding_refuses_references():
    """Outside a call's arguments (an exception's args, a frame of any other kind) ``{"r": k}`` is
    no value: nothing but a call's own objects can be named."""
    with pytest.raises(la_wire.WireError):
        la_wire.decode({"r": 0})
    assert la_wire.decode(la_wire.encode(bytearray(b"\x00z"))) == bytearray(b"\x00z")


def test_objects_the_candidate_made_go_whole():
    """Only the arguments' own objects are named by number in a reply: a list the candidate made
    and put in two places comes as two (a value always did), so no frame of a few bytes stands for
    a structure far past the reply's cap once the tests walk it (``[v] * 160000``)."""
    a = []
    objects = la_wire.encode_call([a], {})[2]
    theirs = la_wire.decode_call(*la_wire.encode_call([[]], {})[:2])[2]
    before = la_wire.snapshot(theirs)
    x = [1]
    theirs[0].extend([x, x])
    moved, frame, _ = la_wire.changes(theirs, before, [x] * 3)
    assert moved == [[0, [[1], [1]]]] and frame == [[1], [1], [1]]
    writes, value = la_wire.decode_moved(objects, moved, frame)
    la_wire.write_back(writes)
    assert a == [[1], [1]] and a[0] is not a[1] and value[0] is not value[1]
