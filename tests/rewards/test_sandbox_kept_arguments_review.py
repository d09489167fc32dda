"""Red-team reproducers for the F6 session numbering (review of session 49). Each test states what one
file does and failed before the mends of 22baa3c's review."""

from __future__ import annotations

from sandbox_modes import one_file_passes, score

from lightning_agents.rewards import CodeVerifier


def _verdict(program, tests):
    return score(CodeVerifier(isolation="process", timeout_s=30), program, tests)


# R1: a stand-in the program put into a kept list makes the tests' NEXT, unrelated call raise
# TypeError (the harness checks only that call's own arguments for stand-ins), which the tests'
# pytest.raises(TypeError) / except TypeError takes: a wrong `check` passes.
POISON = """
class S:
    def keep(self, a):
        self.a = a
    def poison(self):
        self.a.append(object())
    def check(self, x):
        return 1  # wrong: should raise TypeError for a str
"""
POISON_TESTS = """
a = [3, 1]
s = S()
s.keep(a)
s.poison()
a.append(5)
try:
    s.check("x")
except TypeError:
    pass
else:
    raise AssertionError("no TypeError")
"""


def test_a_stand_in_in_a_kept_list_never_passes_as_a_typeerror():
    assert not one_file_passes(POISON, POISON_TESTS)
    verdict = _verdict(POISON, POISON_TESTS)
    assert not verdict.passed, verdict


# R2: once any await ran, a container the program puts into a kept object is sent whole and never
# numbered, so its later changes (or the tests') never cross: a right program fails silently.
BUCKETS = """
class S:
    def __init__(self, a):
        self.a = a
    async def ping(self):
        return 1
    def bucket(self):
        self.a.append([])
    def put(self, x):
        self.a[-1].append(x)
"""
BUCKETS_TESTS = """
import asyncio
a = []
s = S(a)
assert asyncio.run(s.ping()) == 1
s.bucket()
s.put(1)
assert a == [[1]], a
"""


def test_a_container_put_into_a_kept_object_after_an_await_stays_in_step():
    assert one_file_passes(BUCKETS, BUCKETS_TESTS)
    verdict = _verdict(BUCKETS, BUCKETS_TESTS)
    assert verdict.passed, verdict


# R3: an await's reply read before a later call's reply but applied after it (the tests' loop was
# blocked meanwhile) writes its older contents over the call's newer ones.
ORDER = """
async def add_async(a, x):
    a.append(x)
def add(a, x):
    a.append(x)
"""
ORDER_TESTS = """
import asyncio, time
async def main():
    a = []
    t = asyncio.ensure_future(add_async(a, 1))
    await asyncio.sleep(0)
    time.sleep(0.3)
    add(a, 2)
    await t
    assert a == [1, 2], a
asyncio.run(main())
"""


def test_an_await_reply_applied_late_does_not_undo_a_later_call():
    assert one_file_passes(ORDER, ORDER_TESTS)
    verdict = _verdict(ORDER, ORDER_TESTS)
    assert verdict.passed, verdict


# R4: the program makes a kept list hold itself twice; the tests put a lambda (not plain data) into
# it and pass it back: the search for stand-ins (cut at depth 50) walks it as a tree, 2**50 steps,
# until the verdict's deadline, where it should give up at once.
TWICE = """
_kept = []
def keep(a):
    _kept.append(a)
def loop():
    _kept[0][:] = [_kept[0], _kept[0]]
def check(x):
    return 1
"""
TWICE_TESTS = "a = []\nkeep(a)\nloop()\na.append(lambda: 0)\nassert check(a) == 1\n"


def test_a_kept_list_holding_itself_is_searched_once():
    assert one_file_passes(TWICE, TWICE_TESTS)
    verdict = score(CodeVerifier(isolation="process", timeout_s=10), TWICE, TWICE_TESTS)
    assert verdict.reason != "timeout" and verdict.duration_s < 5, verdict
