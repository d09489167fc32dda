"""The review of 7aab048 (kept objects the tests let go of go quiet): reproducers, each checked against
one file (``sandbox_modes.one_file_passes``) and the process sandbox's verdict."""

from __future__ import annotations

import pytest
from sandbox_modes import one_file_passes, score

from lightning_agents.rewards import CodeVerifier

KEEP = """
class K:
    def __init__(self, a):
        self.a = a
    def add(self, x):
        self.a.append(x)
    def put(self, k, v):
        self.a[k] = v
    def get(self):
        return list(self.a)
"""
FROZEN = "class Frozen(list):\n    def append(self, x):\n        raise TypeError('the input is read-only')\n"
SPY = "calls = []\nclass Spy(list):\n    def append(self, x):\n        calls.append(x)\n        super().append(x)\n"
TRACK = "log = []\nclass Track(dict):\n    def __setitem__(self, k, v):\n        log.append(k)\n        super().__setitem__(k, v)\n"

# A wrong program (it changes its input in place) passed: the literal of the tests' class went quiet
# before the call that changed it, so the change was never compared, never refused (la_wire.guarded)
WRONG_PASSES = {
    "a read-only list literal appended to": FROZEN + "s = K(Frozen([1]))\ns.add(2)\nassert s.get() == [1, 2]\n",
    "a logging list literal: the tests read the log": SPY + "s = K(Spy([1]))\ns.add(2)\nassert calls == [], calls\n",
    "a logging dict literal: the tests read the log": TRACK
    + "s = K(Track(a=1))\ns.put('b', 2)\nassert log == [], log\n",
}


def _verdict(program, tests, one_file):
    assert one_file_passes(program, tests) is one_file
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed is one_file, verdict
    return verdict


@pytest.mark.parametrize("tests", list(WRONG_PASSES.values()), ids=list(WRONG_PASSES))
def test_a_change_to_a_let_go_object_of_a_guarded_class_is_still_refused(tests):
    verdict = _verdict(KEEP, tests, False)
    assert "overrides" in str(verdict.detail), verdict


def test_a_guarded_object_the_program_gives_back_unchanged_is_not_refused():
    """A right program scored 0: an object of the tests' guarded class it kept went quiet, and the
    reply that named it again wrote its (unchanged) contents back, which the harness refuses."""
    tests = FROZEN + "s = K([Frozen([1])])\ns.add(5)\ns.put(0, Frozen([1]))\nassert s.get()[1] == 5\n"
    _verdict(KEEP, tests, True)


NUMS = "class N:\n    def __init__(self, a):\n        self.a = a\n    def raw(self):\n        return self.a\n"


KEPT = """
def kept():
    import gc
    return [len(o.snaps) for o in gc.get_objects() if type(o).__name__ == "Session"]
"""


def test_a_let_go_literal_a_getter_returned_stays_live():
    """Each call quieted the 30,000-item literal again (the tests let go of what ``raw`` returned)
    and each reply named it again, so it went whole each call: about 5x the compare of a list the
    tests hold (300 calls 1.0 s -> 5 s, 15 ms a call). Once given back it stays live: the call
    after ``raw`` finds it among the candidate's live numbers (it was quiet there: ``[0]``)."""
    tests = "s = N(list(range(5)))\nassert s.raw()[0] == 0\nassert kept() == [1], kept()\nassert s.raw()[1] == 1\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), NUMS + KEPT, tests)
    assert verdict.passed, verdict
