"""Kept objects the tests let go stop costing a call (``la_wire.Session.release``).

A design class built from a literal (``KthLargest(3, [4, 5, 8, 2])``, ``NumArray([...])``) keeps an
argument the tests never hold: before, the harness kept that object numbered for the whole verdict
and both sides copied and compared it around every later call (a 5,000-item heap: about 0.5 ms a
call). Now the harness drops, before each call, the kept objects nothing of the tests' reaches any
more (by reference count, as the candidate drops the copies the program let go) and names them in
the request as ``"dropped"``; the candidate stops comparing and sending its copies. Objects the
tests still hold, or reach through another kept object they hold, stay in step as before. The
session sizes are read through ``gc`` on both sides (the tests run in the harness's process), so
each end-to-end test here fails on the code before, where nothing the tests let go was dropped.
"""

from __future__ import annotations

import _thread
import json
import threading
import weakref
from types import SimpleNamespace

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards._jail import la_wire


@pytest.fixture(autouse=True)
def _only_this_tests_threads(monkeypatch):
    """``Session.release`` counts nothing while another thread runs; the harness's process has none
    of its own, but a pytest-xdist worker does (execnet's), so every in-process release here was
    empty under ``-n 2``. Count only the threads a test starts."""
    baseline = _thread._count()
    monkeypatch.setattr(la_wire, "_thread", SimpleNamespace(_count=lambda: _thread._count() - baseline))


KEEP = """
class Keep:
    def __init__(self, a):
        self.a = a
    def add(self, x):
        self.a.append(x)
    def add_inner(self, i, x):
        self.a[i].append(x)
    def get(self):
        return list(self.a)
"""
# the live numbers of the candidate's session, read by the program in the sandbox
KEPT = """
def kept():
    import gc
    return [len(o.snaps) for o in gc.get_objects() if type(o).__name__ == "Session"]
"""
# the same in the harness's process, where the tests run
HARNESS_KEPT = """
import gc
def harness_kept():
    return [len(o.snaps) for o in gc.get_objects() if type(o).__name__ == "Session"]
"""


def _passes(tests, isolation="process"):
    """The sandbox passes ``tests`` against ``KEEP``, and one file does, once the session probes
    are taken out (they find no session there)."""
    plain = "\n".join(line for line in tests.splitlines() if "kept()" not in line)
    assert one_file_passes(KEEP, plain)
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=30), KEEP + KEPT, HARNESS_KEPT + tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_literal_the_tests_let_go_is_dropped_on_both_sides(isolation):
    tests = (
        "s = Keep([1, 2])\n"
        "s.add(3)\n"
        "assert kept() == [0], kept()\n"  # the call's request dropped it before the call ran
        "assert harness_kept() == [0], harness_kept()\n"
        "s.add(4)\n"
        "assert s.get() == [1, 2, 3, 4]\n"  # the program's own object from then on
    )
    _passes(tests, isolation)


def test_an_argument_the_tests_hold_stays_in_step_until_they_let_go():
    tests = (
        "a = [1, 2]\n"
        "s = Keep(a)\n"
        "s.add(3)\n"
        "assert a == [1, 2, 3], a\n"
        "assert kept() == [1] and harness_kept() == [1]\n"
        "a.append(9)\n"  # pushed with the next call
        "s.add(4)\n"
        "assert a == [1, 2, 3, 9, 4], a\n"
        "del a\n"
        "s.add(5)\n"
        "assert kept() == [0] and harness_kept() == [0]\n"
        "assert s.get() == [1, 2, 3, 9, 4, 5]\n"
    )
    _passes(tests)


def test_a_change_the_tests_made_before_letting_go_reaches_the_program():
    """The request that drops an object still pushes the tests' last change to it first."""
    tests = "a = [1]\ns = Keep(a)\na.append(2)\ndel a\ns.add(3)\nassert kept() == [0]\nassert s.get() == [1, 2, 3]\n"
    _passes(tests)


def test_an_inner_list_the_tests_hold_stays_when_its_literal_outer_goes():
    tests = (
        "inner = [1]\n"
        "s = Keep([inner, [2]])\n"
        "s.add_inner(0, 5)\n"
        "assert inner == [1, 5], inner\n"
        "assert kept() == [1] and harness_kept() == [1]\n"  # the outer list and [2] went
        "inner.append(6)\n"
        "s.add_inner(0, 7)\n"
        "assert inner == [1, 5, 6, 7], inner\n"
        "s.add([8])\n"
        "assert s.get()[0] is inner\n"  # still numbered: the program's value names it
        "assert s.get()[0] == [1, 5, 6, 7] and s.get()[2] == [8]\n"
    )
    _passes(tests)


def test_what_a_kept_object_the_tests_hold_holds_stays():
    """An object reached through another kept object the tests hold is still held; a weak reference
    (a list subclass's) holds it too, as the program's object stays alive in one file."""
    tests = (
        "import weakref\n"
        "class L(list):\n"
        "    pass\n"
        "outer = [[1]]\n"
        "s = Keep(outer)\n"
        "w = L([0])\n"
        "r = weakref.ref(w)\n"
        "t = Keep(w)\n"
        "del w\n"
        "u = Keep([3])\n"  # let go: dropped
        "s.add_inner(0, 2)\n"
        "t.add(4)\n"
        "assert kept() == [3] and harness_kept() == [3], kept()\n"
        "assert outer == [[1, 2]], outer\n"
        "assert r() == [0, 4], r()\n"
    )
    _passes(tests)


# -- the two sessions, in this process ----------------------------------------------------------


def _call(harness, candidate, args):
    """One call through JSON, as ``Channel.call`` and the candidate's server make it: the harness
    encodes, then drops what the tests let go (the caller's ``args`` still held)."""
    frames, named, pushed = la_wire.encode_session_call(args, {}, harness)
    dropped = harness.release()
    frames, named, pushed, dropped = json.loads(json.dumps([frames, named, pushed, dropped]))
    return la_wire.decode_session_call(frames, named, candidate, pushed, dropped=dropped)[0]


def _reply(harness, candidate):
    moved, _ = candidate.changes()
    writes, _ = la_wire.decode_moved(harness.table, json.loads(json.dumps(moved)))
    la_wire.write_back(writes)
    harness.synced([target for target, _new in writes])
    harness.drop(harness.checked_drops(candidate.prune()))


def test_a_thousand_literals_the_program_keeps_cost_nothing_once_let_go():
    """The program keeps every list it is given; the tests keep none: nothing stays numbered, and the
    program's copies keep their contents (before, 1,000 objects were compared around each call)."""
    harness, candidate = la_wire.Session(), la_wire.Session()
    program = []
    for i in range(1000):
        program.append(_call(harness, candidate, [[i, i + 1]])[0])
        program[-1].append(i + 2)
        _reply(harness, candidate)
        assert len(harness.snaps) == len(candidate.snaps) == 1  # this call's, until the next one
    _call(harness, candidate, [])
    assert not harness.snaps and not candidate.snaps
    assert len(harness.quiet) == len(candidate.quiet) == 1000  # numbered still: a reply may name one
    assert program[500] == [500, 501, 502]
    del program  # the program lets them go: the candidate drops its copies, the harness with it
    for _ in range(1000 // 32 + 1):  # counted once in len(quiet) // 32 calls
        _call(harness, candidate, [])
        _reply(harness, candidate)
    assert not harness.quiet and not candidate.quiet
    assert all(k is None for k in harness.table)  # the tests' objects are gone


def test_aliasing_in_the_sessions():
    harness, candidate = la_wire.Session(), la_wire.Session()
    inner, other = [1], [2]
    program = _call(harness, candidate, [[inner, other, inner]])  # the outer list: a literal
    _reply(harness, candidate)
    del other
    _call(harness, candidate, [])
    assert sorted(harness.snaps) == sorted(candidate.snaps) == [1]  # inner, held twice by the outer
    program[0][0].append(5)
    _reply(harness, candidate)
    assert inner == [1, 5]
    outer = [inner]  # the tests' new list holding a kept one, which the program keeps too
    program.append(_call(harness, candidate, [outer])[0])
    _reply(harness, candidate)
    del inner
    _call(harness, candidate, [])
    assert sorted(harness.snaps) == [1, 3]  # inner, reached through the outer the tests hold
    outer.clear()
    _call(harness, candidate, [])
    # inner stays live on both sides: the quiet literal outer still holds it (counted as held)
    assert sorted(harness.snaps) == sorted(candidate.snaps) == [1, 3]
    assert list(harness.quiet) == list(candidate.quiet) == [0, 2]


def test_nothing_is_released_while_another_thread_runs():
    """Another thread of the tests' may change a kept object while it is counted: nothing goes."""
    harness, candidate = la_wire.Session(), la_wire.Session()
    _call(harness, candidate, [[1]])
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert harness.release() == []
    finally:
        stop.set()
        thread.join()
    assert harness.release() == [0]


def test_a_weakly_held_object_is_not_released():
    class Weak(list):
        pass

    harness, candidate = la_wire.Session(), la_wire.Session()
    _call(harness, candidate, [Weak([1])])
    held = Weak([2])
    ref = weakref.ref(held)
    _call(harness, candidate, [held])  # drops the first: nothing of the tests' reaches it
    del held
    assert harness.release() == []
    assert sorted(harness.snaps) == [1] and ref() == [2]


@pytest.mark.parametrize("dropped", [[5], [0, 0], ["0"], {"0": 1}])
def test_a_bad_dropped_list_decodes_nothing(dropped):
    harness, candidate = la_wire.Session(), la_wire.Session()
    _call(harness, candidate, [[1]])
    frames, named, pushed = la_wire.encode_session_call([[2]], {}, harness)
    with pytest.raises(la_wire.WireError, match="dropped"):
        la_wire.decode_session_call(frames, named, candidate, pushed, dropped=dropped)
    assert len(candidate.table) == 1 and list(candidate.snaps) == [0]


# -- a let-go object the program gives back (quiet numbers) ---------------------------------------
#
# What the tests let go stays numbered, quiet (``la_wire.Session.hush``): a reply that names it
# brings its contents and gives the tests their own object again, in step from then on, as in one
# file. Before, it had been dropped, so the program's list came back as a copy: a right program
# failed, and one that leaks its internal list passed a test of a defensive copy.

GETTERS = """
class Keep:
    def __init__(self, a):
        self.a = a
    def add(self, x):
        self.a.append(x)
    def raw(self):
        return self.a
    def size(self):
        return len(self.a)

class Grid:
    def __init__(self, rows):
        self.rows = rows
    def row(self, i):
        return self.rows[i]
    def flip(self, i, j):
        self.rows[i][j] ^= 1
"""


def _verdict(program, tests, one_file):
    """The sandbox's verdict on ``tests`` against ``program``, checked to agree with one file's
    (``one_file``: whether it passes there)."""
    assert one_file_passes(program, tests) is one_file
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed is one_file, verdict
    return verdict


def test_a_let_go_list_the_program_returns_is_the_tests_own_again():
    tests = (
        "s = Keep([1])\n"
        "s.add(5)\n"  # the literal goes quiet with this call
        "x = s.raw()\n"
        "assert x == [1, 5], x\n"
        "x.append(2)\n"  # pushed with the next call: the program's list is x
        "assert s.size() == 3\n"
        "assert s.raw() is x\n"
        "s.add(7)\n"
        "assert x == [1, 5, 2, 7], x\n"
    )
    _verdict(GETTERS, tests, True)


def test_a_row_of_a_let_go_literal_grid_follows_the_program():
    tests = "g = Grid([[0, 1], [1, 1]])\nr = g.row(1)\ng.flip(1, 0)\nassert r == [0, 1], r\nassert g.row(1) is r\n"
    _verdict(GETTERS, tests, True)


def test_returning_the_internal_list_fails_a_test_of_a_defensive_copy():
    """A wrong program (``raw`` should return a copy): the tests' change reaches its list, as in
    one file, so ``size`` is 2 and the test fails."""
    tests = "s = Keep([1])\nx = s.raw()\nx.append(2)\nassert s.size() == 1\n"
    _verdict(GETTERS, tests, False)


FORGER = """
class Keep:
    def __init__(self, a):
        self.a = a
    def add(self, x):
        self.a.append(x)
    def raw(self):
        import gc
        for o in gc.get_objects():
            if type(o).__name__ == "Session":
                getattr(o, "quiet", {}).clear()  # names its quiet copy without sending its contents
        return self.a
"""


def test_a_reply_naming_a_quiet_object_without_its_contents_fails_closed():
    """A forged reply would give the tests their own list as it was when they let it go (``[1]``),
    where the program's holds ``[1, 5]``: the harness refuses it."""
    tests = "s = Keep([1])\ns.add(5)\nassert s.raw() == [1]\n"
    assert not one_file_passes(FORGER, tests)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), FORGER, tests)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
    assert "quiet" in verdict.detail, verdict


def test_a_forged_reference_to_a_quiet_number_decodes_nothing():
    harness, candidate = la_wire.Session(), la_wire.Session()
    program = _call(harness, candidate, [[1]])  # the program keeps the literal
    _reply(harness, candidate)
    _call(harness, candidate, [])
    assert list(harness.quiet) == [0] and program == [[1]]
    with pytest.raises(la_wire.WireError, match="quiet"):
        la_wire.decode_moved(harness.table, [], {"r": 0}, quiet=harness.quiet)
    with pytest.raises(la_wire.WireError, match="quiet"):  # inside another object's contents too
        la_wire.decode_moved(harness.table, [], {"t": [{"r": 0}]}, quiet=harness.quiet)
    writes, value = la_wire.decode_moved(harness.table, [[0, [1, 5]]], {"r": 0}, quiet=harness.quiet)
    assert value is harness.table[0] and writes == [(value, [1, 5])]  # with its contents: revived


def test_a_quiet_copy_named_in_a_reply_comes_whole_with_what_it_names():
    """The candidate's side: a quiet outer list named in a reply's value sends its contents, and so
    does each quiet list those contents name; both sides then hold them live again."""
    harness, candidate = la_wire.Session(), la_wire.Session()
    grid = _call(harness, candidate, [[[0, 1], [1, 1]]])[0]  # a literal grid
    _reply(harness, candidate)
    _call(harness, candidate, [])
    assert list(harness.quiet) == list(candidate.quiet) == [0, 1, 2]
    grid[1][0] = 0
    grid.append([9])
    moved, frame = candidate.changes(grid)
    moved, frame = json.loads(json.dumps([moved, frame]))
    assert sorted(k for k, _ in moved) == [0, 1, 2] and frame == {"r": 0}
    writes, value = la_wire.decode_moved(harness.table, moved, frame, quiet=harness.quiet)
    la_wire.write_back(writes)
    harness.synced([target for target, _new in writes])
    assert value == [[0, 1], [0, 1], [9]] and value is harness.table[0]
    assert not harness.quiet and not candidate.quiet
    assert sorted(harness.snaps) == sorted(candidate.snaps)
