"""An argument the program keeps stays the tests' object across calls (review F6).

A program may keep an argument (``self.data = nums`` in a design class, a module global) and change
it in a LATER call; in one file the tests, which hold the original, see that change, and passing
the object again gives the program the very object it kept. Before, each call's arguments were
numbered for that call only: a later change never came back, a change the tests made between calls
never reached the program's copy, and the object passed again was a new copy. A right program
failed and a wrong one (one that keeps a copy) passed. Now the shared objects are numbered for the
whole verdict (``la_wire.Session``): the harness pushes the tests' changes before each call, the
candidate sends back every kept object's changes after it, and drops what the program no longer
holds. Every verdict below is checked against one file first; each test fails on the code before.
"""

from __future__ import annotations

import json

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards._jail import la_wire


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=30), program, tests)


def _agrees(program, tests, passes, isolation="process"):
    """One file and the sandbox give ``passes`` for ``program`` under ``tests``."""
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests, isolation)
    assert verdict.passed is passes, verdict
    return verdict


# -- a design class that keeps an argument ------------------------------------------------------

KEEPS = """
class Solution:
    def keep(self, nums):
        self.data = nums
    def add(self, x):
        self.data.append(x)
    def total(self):
        return sum(self.data)
    def get(self):
        return self.data
"""
KEEPS_A_COPY = KEEPS.replace("self.data = nums", "self.data = list(nums)")
LATER_CHANGE = "a = [1, 2]\ns = Solution()\ns.keep(a)\ns.add(3)\nassert a == [1, 2, 3], a\n"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_later_change_to_a_kept_argument_reaches_the_tests(isolation):
    """The review's case: right passes, a program that keeps a copy fails, as in one file."""
    _agrees(KEEPS, LATER_CHANGE, True, isolation)
    verdict = _agrees(KEEPS_A_COPY, LATER_CHANGE, False, isolation)
    assert verdict.reason == "wrong_answer", verdict


def test_a_constructor_argument_kept_and_changed_later():
    program = (
        "class Stack:\n    def __init__(self, items):\n        self.items = items\n"
        "    def push(self, x):\n        self.items.append(x)\n"
    )
    tests = "a = []\ns = Stack(a)\ns.push(1)\ns.push(2)\nassert a == [1, 2], a\n"
    _agrees(program, tests, True)
    _agrees(program.replace("self.items = items", "self.items = list(items)"), tests, False)


def test_a_module_global_that_keeps_an_argument():
    program = "_seen = []\ndef keep(a):\n    _seen.append(a)\ndef fill(x):\n    for a in _seen:\n        a.append(x)\n"
    tests = "a, b = [], {}\nkeep(a)\nkeep(b.setdefault('k', []))\nfill(7)\nassert a == [7] and b == {'k': [7]}\n"
    _agrees(program, tests, True)
    _agrees(program.replace("_seen.append(a)", "_seen.append(list(a))"), tests, False)


def test_the_tests_changes_between_calls_reach_the_kept_object():
    """A change of the tests' between two calls is in the program's object at the next call (a
    stale copy would have dropped the tests' 9 when it sent its own contents back)."""
    tests = "a = [1, 2]\ns = Solution()\ns.keep(a)\na.append(9)\ns.add(3)\nassert a == [1, 2, 9, 3], a\n"
    _agrees(KEEPS, tests, True)
    _agrees(KEEPS_A_COPY, tests, False)
    tests = "a = [1, 2]\ns = Solution()\ns.keep(a)\na.append(9)\nassert s.total() == 12\n"
    _agrees(KEEPS, tests, True)
    _agrees(KEEPS_A_COPY, tests, False)


def test_a_kept_argument_is_the_same_object_when_passed_or_returned_again():
    program = "_kept = []\ndef keep(a):\n    _kept.append(a)\ndef is_kept(b):\n    return b is _kept[0]\n"
    tests = "a = [1]\nkeep(a)\nassert is_kept(a)\nassert not is_kept([1])\n"
    _agrees(program, tests, True)
    _agrees(program.replace("_kept.append(a)", "_kept.append(list(a))"), tests, False)
    tests = "a = [1, 2]\ns = Solution()\ns.keep(a)\nassert s.get() is a\n"
    _agrees(KEEPS, tests, True)
    _agrees(KEEPS_A_COPY, tests, False)


def test_a_kept_dict_and_a_nested_kept_list():
    program = (
        "class Index:\n    def __init__(self, table):\n        self.table = table\n"
        "    def put(self, k, v):\n        self.table.setdefault(k, []).append(v)\n"
        "    def grow(self, k, v):\n        self.table[k].append(v)\n"
    )
    tests = (
        "t = {'x': [0]}\ninner = t['x']\nix = Index(t)\nix.put('y', 1)\nix.grow('x', 5)\n"
        "assert t == {'x': [0, 5], 'y': [1]}, t\nassert inner is t['x'] and inner == [0, 5]\n"
        # the list the program made in put() is the program's object too: later changes of both
        # sides to it hold
        "y = t['y']\ny.append(7)\nix.grow('y', 8)\nassert t['y'] is y and y == [1, 7, 8], t\n"
    )
    _agrees(program, tests, True)
    _agrees(program.replace("self.table = table", "self.table = dict(table)"), tests, False)


def test_an_async_method_changes_a_kept_argument():
    program = "class Box:\n    def keep(self, a):\n        self.a = a\n    async def add(self, x):\n        self.a.append(x)\n"
    tests = "import asyncio\na = []\nb = Box()\nb.keep(a)\nasyncio.run(b.add(4))\nassert a == [4], a\n"
    _agrees(program, tests, True)
    _agrees(program.replace("self.a = a", "self.a = list(a)"), tests, False)


def test_an_attribute_the_tests_set_is_their_object():
    """``s.data = lst`` crossed as a copy: the program's later changes to it never came back."""
    program = "class S:\n    def add(self, x):\n        self.data.append(x)\n"
    tests = "s = S()\nlst = []\ns.data = lst\ns.add(1)\nassert lst == [1], lst\n"
    _agrees(program, tests, True)
    _agrees(program.replace("self.data.append(x)", "self.data = self.data + [x]"), tests, False)


def test_gathered_coroutines_share_one_argument():
    """Red team 48's R5: two coroutines in flight that append to one list each held a copy of it,
    and the last to finish won (``["b"]``); the second call now gets the copy the first kept."""
    program = "import asyncio\nasync def record(log, x):\n    await asyncio.sleep(0)\n    log.append(x)\n"
    tests = (
        "import asyncio\nlog = []\nasync def main():\n    await asyncio.gather(record(log, 'a'), record(log, 'b'))\n"
        "asyncio.run(main())\nassert sorted(log) == ['a', 'b'], log\n"
    )
    _agrees(program, tests, True)
    _agrees(program.replace("log.append(x)", "log[:] = [x]"), tests, False)


def test_a_kept_heap_changed_in_a_few_places_each_call():
    """A kept list that changes in a few places per call comes back as a patch (its length and
    those places), which must give the tests the candidate's list exactly."""
    program = (
        "import heapq\nclass KthLargest:\n    def __init__(self, k, nums):\n        self.k, self.h = k, nums\n"
        "        heapq.heapify(self.h)\n        while len(self.h) > k:\n            heapq.heappop(self.h)\n"
        "    def add(self, val):\n        heapq.heappush(self.h, val)\n        if len(self.h) > self.k:\n"
        "            heapq.heappop(self.h)\n        return self.h[0]\n"
    )
    tests = (
        "import heapq, random\nrandom.seed(3)\nnums = [random.randrange(100) for _ in range(60)]\n"
        "mine = list(nums)\nheapq.heapify(mine)\nkl = KthLargest(50, nums)\nwhile len(mine) > 50:\n"
        "    heapq.heappop(mine)\nfor _ in range(40):\n    v = random.randrange(100)\n"
        "    heapq.heappush(mine, v)\n    heapq.heappop(mine)\n    assert kl.add(v) == mine[0]\n"
        "    assert nums == mine, (nums, mine)\n"
    )
    _agrees(program, tests, True)
    _agrees(program.replace("self.k, self.h = k, nums", "self.k, self.h = k, list(nums)"), tests, False)


# -- the session's numbering and pruning, on both sides of the wire ------------------------------


def _call(harness, candidate, args):
    """One call's arguments through JSON, from the harness's session into the candidate's."""
    frames, named, pushed = la_wire.encode_session_call(args, {}, harness)
    frames, named, pushed = json.loads(json.dumps([frames, named, pushed], allow_nan=False))
    return la_wire.decode_session_call(frames, named, candidate, pushed)[0]


def _reply(harness, candidate):
    """The candidate's changes written into the tests' objects, and its drops taken by both sides."""
    moved, _ = candidate.changes()
    writes, _ = la_wire.decode_moved(harness.table, json.loads(json.dumps(moved)))
    la_wire.write_back(writes)
    harness.synced([target for target, _new in writes])
    harness.drop(harness.checked_drops(candidate.prune()))


def test_a_thousand_calls_on_fresh_lists_keep_nothing():
    """Pruning keeps a HumanEval+-like file linear: nothing the program let go stays numbered."""
    harness, candidate = la_wire.Session(), la_wire.Session()
    for i in range(1000):
        got = _call(harness, candidate, [[i, i + 1], {"k": [i]}])
        got[0].sort(reverse=True)
        del got
        _reply(harness, candidate)
        assert not harness.snaps and not candidate.snaps
    assert len(harness.table) == len(candidate.table) == 3000  # numbers are never reused


def test_what_the_program_holds_stays_until_it_lets_go():
    harness, candidate = la_wire.Session(), la_wire.Session()
    held = []
    outer = [[1], [2]]
    held.append(_call(harness, candidate, [outer])[0])  # the program keeps the outer list
    _reply(harness, candidate)
    assert sorted(candidate.snaps) == sorted(harness.snaps) == [0, 1, 2]  # its items with it
    held[0][1].append(3)
    _call(harness, candidate, [])
    _reply(harness, candidate)
    assert outer == [[1], [2, 3]]
    outer[0].append(9)  # the tests' change: pushed before the next call
    _call(harness, candidate, [])
    assert held[0] == [[1, 9], [2, 3]]
    held.clear()
    _reply(harness, candidate)
    assert not candidate.snaps and not harness.snaps


# -- a candidate that forges the session's numbers ----------------------------------------------

# The program replaces the candidate side's la_wire.changes or Session.prune (nothing there is
# trusted) for its third reply; the harness must refuse it (bad_reply) and write nothing. The
# session then holds ``a`` as 0 (kept), ``t`` as 1 (dropped after the second call) and ``b, c, d``
# as 2 to 4. On the code before, the third reply was read in that call's own numbering (``b, c, d``
# as 0 to 2), where these forgeries wrote into ``b`` or ``c``, and no reply dropped anything.
FORGER = """
import sys
_wire = sys.modules["la_wire"] if sys.argv[0].endswith("la_candidate.py") else None
_replies = []

def _forged_changes(real):
    def changes(objects, before, value=getattr(_wire, "_NO_VALUE", None)):
        moved, frame, after = real(objects, before, value)
        _replies.append(1)
        if len(_replies) == 3:
            moved, frame = {moved}, {frame}
        return moved, frame, after
    return changes

def _forged_prune(real):
    def prune(self):
        dropped = real(self)
        _replies.append(1)
        return {dropped} if len(_replies) == 3 else dropped
    return prune

if _wire is not None and {hook!r} == "changes":
    _wire.changes = _forged_changes(_wire.changes)
if _wire is not None and {hook!r} == "prune" and hasattr(_wire, "Session"):
    _wire.Session.prune = _forged_prune(_wire.Session.prune)

_kept = []
def keep(a):
    _kept.append(a)
def f(*args):
    return 1
"""
FORGED_TESTS = (
    "a, t, b, c, d = [1], [2], bytearray(b'3'), [4], [5]\nkeep(a)\nf(t)\n"
    "try:\n    assert f(b, c, d) == 1\nfinally:\n"
    "    assert a == [1] and t == [2] and b == bytearray(b'3') and c == [4] and d == [5]\n"
)
# hook, the forged expressions (moved and frame, or dropped), a word of the harness's refusal
FORGERIES = {
    "moved names a dropped number": ("changes", ("[[1, [5]]]", "frame"), "moved argument number"),
    "the value refers to a dropped number": ("changes", ("moved", "{'r': 1}"), "reference"),
    "the kept list given bytes": ("changes", ("[[0, '41']]", "frame"), "moved contents"),
    "the kept list given a dict's pairs": ("changes", ("[[0, {'d': []}]]", "frame"), "moved contents"),
    "the kept list named twice": ("changes", ("[[0, [5]], [0, [6]]]", "frame"), "moved argument number"),
    "a patch not a pair": ("changes", ("[[0, {'p': 5}]]", "frame"), "bad moved patch"),
    "a negative patch length": ("changes", ("[[0, {'p': [-1, []]}]]", "frame"), "patch length"),
    "a patch length past its places": ("changes", ("[[0, {'p': [9, []]}]]", "frame"), "patch length"),
    "a patch place past the length": ("changes", ("[[0, {'p': [1, [[1, 5]]]}]]", "frame"), "patch place"),
    "patch places out of order": ("changes", ("[[0, {'p': [3, [[2, 5], [1, 6], [0, 7]]]}]]", "frame"), "patch place"),
    "a patch leaving a new place unfilled": ("changes", ("[[0, {'p': [2, [[0, 5]]]}]]", "frame"), "unfilled"),
    "dropped not a list": ("prune", ("'x'",), "dropped numbers"),
    "a bool for a dropped number": ("prune", ("[True]",), "dropped number"),
    "a dropped number past the table": ("prune", ("[99]",), "dropped number"),
    "a negative dropped number": ("prune", ("[-1]",), "dropped number"),
    "a number dropped twice in one reply": ("prune", ("[0, 0]",), "dropped number"),
    "a number dropped before": ("prune", ("[1]",), "dropped number"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_forged_session_numbers_break_the_channel_and_write_nothing(case):
    hook, forged, word = FORGERIES[case]
    moved, frame = forged if hook == "changes" else ("moved", "frame")
    dropped = forged[0] if hook == "prune" else "dropped"
    program = FORGER.format(hook=hook, moved=moved, frame=frame, dropped=dropped)
    assert one_file_passes(program, FORGED_TESTS)
    verdict = _verdict(program, FORGED_TESTS)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
    assert word in verdict.detail, verdict
