"""Review 51's F3: after an await, a call's value no longer numbers its containers.

Since a8e6a21 a call's reply numbers the containers of its value (RT51-3: a getter's own list is
the tests' object, aliased as in one file). After the tests' first await the harness quiets
nothing (``release()`` does not run), so every row a getter returned stayed live and was compared
on every later call: one pass over 2,000 own rows after one ``asyncio.run`` went 2.1 s -> 15.3 s,
a timeout. Now the harness decides per call, in the request (``"own"``), whether the value is
numbered: only for a call sent while no await is in flight (review_sb (a): once ``asyncio.run``
returned, calls are numbered again and what the tests let go goes quiet again). A call sent while
one is gets a copy (the documented limit), and a candidate that numbers anyway is out of step with
the harness: a bad reply.
"""

from __future__ import annotations

import pathlib
import sys

import lightning_agents

_REWARDS_TESTS = pathlib.Path(lightning_agents.__file__).resolve().parent.parent / "tests" / "rewards"
if str(_REWARDS_TESTS) not in sys.path:
    sys.path.insert(0, str(_REWARDS_TESTS))

from sandbox_modes import one_file_passes, score  # noqa: E402

from lightning_agents.rewards import CodeVerifier  # noqa: E402

ROWS = """
class M:
    def __init__(self, n):
        self.rows = [[i, i + 1] for i in range(n)]
    def row(self, i):
        return self.rows[i]
    def add(self, i, x):
        self.rows[i].append(x)
    async def touch(self):
        return 0
"""

# the candidate's live numbers (its sessions' snapshots), read from inside the sandbox
LIVE = """
def live():
    import gc
    return [len(o.snaps) for o in gc.get_objects() if type(o).__name__ == "Session"]
"""


def _verdict(program, tests):
    return score(CodeVerifier(isolation="process", timeout_s=30), program, tests)


def test_after_an_await_a_getter_of_own_rows_keeps_few_numbers_live():
    """F3's reproducer, by count not time: one ``asyncio.run``, then one pass of the getter over
    400 rows the program holds. 8c1b59f numbered every row (about 400 live on the candidate, each
    compared on every later call); now the rows the tests let go go quiet and the live count stays
    small (19c3593 sent copies there; review_sb numbers them again, and quiets them again)."""
    tests = (
        "import asyncio\nm = M(400)\nassert asyncio.run(m.touch()) == 0\n"
        "for i in range(400):\n    assert m.row(i)[0] == i\n"
    )
    assert one_file_passes(ROWS, tests)
    verdict = _verdict(ROWS + LIVE, tests + "n = live()\nassert n and max(n) <= 64, n\n")
    assert verdict.passed, verdict


def test_after_an_await_rows_read_twice_go_quiet_again():
    """review_sb (a)'s cost: rows a getter returned after ``asyncio.run`` are numbered again, and
    must go quiet again once the tests let them go. The record of what each reply wrote
    (``Channel._not_stale``) held every row written back when read the second time, so none
    looked let go: F3's shape (2,000 rows, two passes) took 16-20 s, a timeout, against 4-5 s.
    By count: 300 rows, read twice. (On 19c3593 the rows were copies: this guards the patch.)"""
    tests = (
        "import asyncio\nm = M(300)\nassert asyncio.run(m.touch()) == 0\n"
        "for _ in range(2):\n    for i in range(300):\n        assert m.row(i)[0] == i\n"
    )
    assert one_file_passes(ROWS, tests)
    verdict = _verdict(ROWS + LIVE, tests + "n = live()\nassert n and max(n) <= 64, n\n")
    assert verdict.passed, verdict


def test_once_the_await_settled_a_getters_own_list_is_the_tests_own():
    """review_sb (a): once every await is settled and no thread runs but the reader, a call's
    value is numbered again (and what the tests let go goes quiet again), so after
    ``asyncio.run`` the program's own list a getter returns is the tests' object, as in one file
    (19c3593 gave a copy there: RT51-3's wrong pass). Before any await it is too (RT51-3, kept)."""
    for tests in (
        "import asyncio\nm = M(3)\nassert asyncio.run(m.touch()) == 0\nr = m.row(1)\nm.add(1, 9)\nassert r == [1, 2]\n",
        "m = M(3)\nr = m.row(1)\nm.add(1, 9)\nassert r == [1, 2]\n",
    ):
        assert not one_file_passes(ROWS, tests)
        assert not _verdict(ROWS, tests).passed


# a call sent while an await is in flight (unsettled): its value is a copy, the documented limit
IN_FLIGHT = """
import asyncio
m = M(3)
async def main():
    p = asyncio.ensure_future(m.touch())
    await asyncio.sleep(0)
    r = m.row(1)
    m.add(1, 9)
    assert await p == 0
    return r
r = asyncio.run(main())
"""


def test_while_an_await_is_in_flight_a_getters_own_list_crosses_as_a_copy():
    """The documented limit that is left: a call sent while an await is unsettled gets a copy of
    the program's own list (one file sees the later change: this test fails there)."""
    tests = IN_FLIGHT + "assert r == [1, 2]\n"
    assert not one_file_passes(ROWS, tests)
    assert _verdict(ROWS, tests).passed


# the candidate numbers every value, whatever the request's "own" says (a forged la_candidate,
# as test_sandbox_kept_arguments' forgeries are)
FORGED = """
import sys
_wire = sys.modules['la_wire'] if sys.argv[0].endswith('la_candidate.py') else None
if _wire is not None and hasattr(_wire, 'Session'):
    _wire.Session.own = property(lambda self: True, lambda self, value: None)
"""


def test_a_candidate_that_numbers_a_value_after_an_await_anyway_is_bad_reply():
    """The harness decodes by its own decision: a candidate that numbered the row anyway later
    sends its change under a number the harness never gave, which is ``bad_reply`` (8c1b59f
    numbered on both sides, and this right program passed). One file passes."""
    tests = IN_FLIGHT + "assert r == [1, 2, 9]\n"
    assert one_file_passes(ROWS, tests)
    verdict = _verdict(FORGED + ROWS, tests)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
