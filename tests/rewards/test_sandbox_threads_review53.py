"""Replies the tests' threads decode in another order than the candidate wrote them (review 53).

Once the tests await, the harness's reader thread reads every reply in the candidate's order, but
each is decoded where its waiter runs: a call's in the tests' calling thread (a ``to_thread`` or
executor worker), an await's in their event loop's thread, whenever that loop runs it, and an
await's whose loop the tests closed never. Three things counted on the decode order:

- the handles (instances of the program's classes): a new one's number had to be the next one
  where its reply was decoded. ``gather(amake(i), to_thread(make, -i))`` (a right program) was
  ``bad_reply`` ("a handle issued out of order") as the worker decoded its reply before the loop
  decoded the await's; so was any call after an await left pending in a closed loop that brought
  one. The handles are now made where each reply is read (``la_handles.HarnessTable.issue``).
- the bytearrays the tests hold a ``memoryview`` of, named in an await's request (``"exported"``)
  while a ``to_thread`` call that drops the same number is in flight: the candidate dropped its
  copy first and refused the number (``bad_reply``, "bad exported bytearray numbers"). A dropped
  copy now holds nothing (``la_wire.hold_exports``).
- which of two replies that write one list is written last (``Channel._not_stale``): its check
  and the writes it lets through were not one step, so an older await's reply could land after
  a newer call's. They now run under ``Channel.apply_lock`` (with each call's drop).
"""

from __future__ import annotations

import pathlib
import sys
import threading
import time

import pytest

import lightning_agents

_REWARDS_TESTS = pathlib.Path(lightning_agents.__file__).resolve().parent.parent / "tests" / "rewards"
if str(_REWARDS_TESTS) not in sys.path:
    sys.path.insert(0, str(_REWARDS_TESTS))

from sandbox_modes import one_file_passes, score  # noqa: E402

from lightning_agents.rewards import CodeVerifier  # noqa: E402
from lightning_agents.rewards._jail import la_harness  # noqa: E402

# the modules as the harness runs them (top-level, beside it)
la_wire, la_handles = la_harness.la_wire, la_harness.la_handles

HANDLES = """
class P:
    def __init__(self, v):
        self.v = v
    def get(self):
        return self.v
def make(v):
    return P(v)
async def amake(v):
    return P(v)
"""

GATHERED = """
import asyncio
async def main():
    out = []
    for i in range(50):
        a, c = await asyncio.gather(amake(i), asyncio.to_thread(make, -i))
        out.append((a.get(), c.get()))
    return out
assert asyncio.run(main()) == [(i, -i) for i in range(50)]
"""

# the task sends its await, and the loop stops and closes before the reply: it is never decoded
CLOSED_LOOP = """
import asyncio, time
loop = asyncio.new_event_loop()
t = loop.create_task(amake(1))
loop.run_until_complete(asyncio.sleep(0))
loop.close()
time.sleep(0.2)
assert make(2).get() == 2
assert make(3).get() == 3
"""

EXPORTS = """
import time
def slow_len(b):
    time.sleep(0.5)
    return len(b)
async def ping():
    return 1
"""

# the worker's call (on b, which the program does not keep) is in flight as the loop sends the await
EXPORTED_IN_FLIGHT = """
import asyncio
async def main():
    b = bytearray(b"abc")
    m = memoryview(b)
    co = ping()
    t = asyncio.ensure_future(asyncio.to_thread(slow_len, b))
    await asyncio.sleep(0.2)
    r = await co
    n = await t
    return r, n, bytes(m)
assert asyncio.run(main()) == (1, 3, b"abc")
"""


def _agrees(program, tests, passes):
    """One file and the sandbox (the process mode) both give ``passes``."""
    assert one_file_passes(program, tests) is passes
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed is passes, verdict


def test_an_await_and_a_to_thread_call_gathered_each_bring_a_new_handle():
    """The loop thread decodes the await's reply after the worker decoded the call's, written
    after it: before, ``bad_reply`` ("a handle issued out of order") in a few of the 50 rounds."""
    _agrees(HANDLES, GATHERED, True)


def test_a_new_handle_in_the_reply_of_an_await_left_in_a_closed_loop_is_counted():
    """That reply is only routed, never decoded: before, the next call's new handle was out of
    order (``bad_reply``)."""
    _agrees(HANDLES, CLOSED_LOOP, True)


def test_a_handle_in_the_reply_of_an_await_left_in_a_closed_loop_is_not_the_next_calls():
    """The handle numbers stay in step: a wrong ``make`` still fails."""
    _agrees(HANDLES.replace("return P(v)\nasync", "return P(v + 1)\nasync"), CLOSED_LOOP, False)


def test_an_await_sent_while_a_to_thread_call_drops_an_exported_bytearray():
    """The harness names the bytearray the tests hold a view of in the await's request; the
    candidate dropped its copy after the call sent before it: before, ``bad_reply``."""
    _agrees(EXPORTS, EXPORTED_IN_FLIGHT, True)


def test_new_handles_are_issued_in_number_order_once_each():
    """``issue`` takes one reply's new handles in any order within it; a number skipped or
    given twice (in the same reply or an earlier one) is refused, as the decode refused it."""
    frame = {"ok": [{"h": [1, "P", []]}, {"d": [["k", {"h": [0, "P", ["eq"]]}]]}], "moved": [[0, [1, 2]]]}
    bodies = la_wire.new_handles(frame)
    assert sorted(body[0] for body in bodies) == [0, 1]
    table = la_handles.HarnessTable(channel=None, touched=None, gone=None)
    table.issue(bodies)
    assert [la_handles._NUMBER.__get__(h) for h in table.handles] == [0, 1]
    assert table.decode([1, "P", []]) is table.handles[1]
    assert table.decode(0) is table.handles[0]
    for forged in ([[1, "P", []]], [[3, "P", []]], [[2, "P", []], [2, "P", []]]):
        with pytest.raises(la_wire.WireError, match="out of order"):
            table.issue(forged)
    with pytest.raises(la_wire.WireError, match="bad handle"):
        table.issue([[2, "P"]])


def test_an_older_reply_applied_in_another_thread_never_lands_after_a_newer_one(monkeypatch):
    """An await's reply (``seq`` 1, the loop thread) is past ``_not_stale``'s check when a
    to_thread call's reply (``seq`` 2, the worker) that empties the same list is applied: the
    newer contents must stay. Before, the worker's check and writes ran inside the await's window
    and the await's older ``[0, "A"]`` was written last (end to end: a program whose
    ``rows[0].clear()`` the tests check passed ``rows[0] == [0, "A"]`` in about 1 of 30 rounds)."""
    channel = la_harness.Channel(-1, -1, time.monotonic() + 20, 1 << 20)
    target = [0]
    channel.session.table.append(target)
    channel.session.adopt(0)
    channel.awaited = True
    in_window, newer_done = threading.Event(), threading.Event()
    guarded = la_wire.guarded

    def held_open(writes):  # between the await's _not_stale and its writes
        if threading.current_thread() is threading.main_thread():
            in_window.set()
            newer_done.wait(0.5)  # with the fix the worker waits for this reply's writes instead
        return guarded(writes)

    monkeypatch.setattr(la_wire, "guarded", held_open)

    def newer():
        in_window.wait(5)
        channel._written("bump", channel.session.table, [[0, []]], la_wire._NO_VALUE, True, True, 2, False, True)
        newer_done.set()

    worker = threading.Thread(target=newer)
    worker.start()
    older = [[0, [0, "A"]]]
    channel._written("touch_all", channel.session.table, older, la_wire._NO_VALUE, True, False, 1, False, True)
    worker.join(5)
    assert target == [], target
