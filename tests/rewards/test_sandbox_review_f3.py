"""Review of 8c1b59f / 19c3593 (review_f3): the 32-cap on objects given back once quiet, and the
await boundary of the call's "own" numbering.

The first test is a probe that passes on 19c3593 (an object past the cap that the tests still reach
stays live and sees later changes); the second (R1) fails there: a right program is ``bad_reply``
where an await's reply is decoded before the reply of a call read ahead of it.
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

KEEP = """
class K:
    def __init__(self):
        self.kept = []
    def keep(self, x):
        self.kept.append(x)
    def get(self, i):
        return self.kept[i]
    def add(self, i, v):
        self.kept[i].append(v)
    def n(self):
        return len(self.kept)
"""


def _verdict(program, tests):
    return score(CodeVerifier(isolation="process", timeout_s=30), program, tests)


def test_woke_objects_past_the_cap_the_tests_still_hold_see_later_changes():
    """40 kept lists go quiet (the tests let them go), are given back (woke) and held by the
    tests; more than 32 woke, the oldest leave the woke set. The tests still reach them, so they
    must stay live: a change the program makes later must be seen (one file sees it)."""
    tests = (
        "k = K()\n"
        "for i in range(40):\n    k.keep([i])\n"
        "k.n(); k.n()\n"
        "got = [k.get(i) for i in range(40)]\n"
        "for _ in range(3):\n    k.n()\n"
        "for i in range(40):\n    k.add(i, -1)\n"
        "assert all(g == [i, -1] for i, g in enumerate(got)), got\n"
    )
    assert one_file_passes(KEEP, tests)
    assert _verdict(KEEP, tests).passed
    wrong = KEEP.replace("self.kept[i].append(v)", "self.kept[i] = self.kept[i] + [v]")
    assert not one_file_passes(wrong, tests)
    assert not _verdict(wrong, tests).passed


RACE = """
import time
class M:
    def __init__(self, n):
        self.rows = [[i, [i]] for i in range(n)]
    def big(self):
        time.sleep(0.3)
        return self.rows
    async def crow(self):
        return self.rows[-1]
"""

# the call's request goes before the first await's (the call sleeps in the candidate meanwhile);
# its reply (the program's own rows, numbered as "own" said) is read before the await's, whose
# value names one of those rows by its new number
RACE_TESTS = """
import asyncio
m = M(50000)
async def main():
    c = m.crow()
    t = asyncio.ensure_future(asyncio.to_thread(m.big))
    await asyncio.sleep(0.1)
    b = await c
    a = await t
    return a, b
a, b = asyncio.run(main())
assert b == [49999, [49999]]
assert b is a[-1]
"""


def test_an_await_reply_naming_a_number_of_an_earlier_call_reply_read_later():
    """FINDING R1 (a right program fails, bad_reply; a race, failed 3/3 at n=50,000 on 19c3593).
    The call's request is written before the first await's, so it has "own": true and its reply
    numbers the program's 100,000 containers; the await's reply (written after it) names the last
    row by its new number. The call's reply is decoded in the to_thread worker, the await's in the
    tests' loop thread, with nothing ordering the two: the await's decode runs while the worker is
    still appending to the session's table, and ``{"r": k}`` past its end is 'bad reference to a
    shared object'. One file passes."""
    assert one_file_passes(RACE, RACE_TESTS)
    verdict = _verdict(RACE, RACE_TESTS)
    assert verdict.passed, verdict
