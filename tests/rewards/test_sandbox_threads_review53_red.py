"""The tests' own code run inside ``Channel.apply_lock`` (review 53's red team of the sandbox fixes).

``apply_lock`` (not re-entrant, no timeout) is held while a reply's writes replace the contents of
the tests' objects. What they replace may be the last reference to an object of the tests' whose
finalizer calls the program: that call applies its own reply, so it took ``apply_lock`` again in
the same thread and waited for good (the verdict's wall-clock kill: ``timeout``, where one file and
the code before the lock pass). The replaced contents now outlive the lock.
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

PROGRAM = """
async def fill(xs):
    xs.clear()
    xs.append(1)
def ping():
    return 7
"""

# D is the tests' own object, put into xs after the call that shared it: the await's reply, which
# rewrites xs, lets the last reference to it go, and its finalizer calls the program
FINALIZER_IN_AN_AWAITS_WRITES = """
import asyncio
got = []
class D:
    def __del__(self):
        got.append(ping())
xs = [0]
async def main():
    co = fill(xs)
    xs.append(D())
    await co
asyncio.run(main())
assert xs == [1], xs
assert got == [7], got
"""


def test_a_finalizer_freed_by_an_awaits_writes_may_call_the_program():
    """Before, the finalizer's call waited on ``apply_lock`` held by its own thread: ``timeout``."""
    assert one_file_passes(PROGRAM, FINALIZER_IN_AN_AWAITS_WRITES)
    verdict = score(CodeVerifier(isolation="process", timeout_s=10), PROGRAM, FINALIZER_IN_AN_AWAITS_WRITES)
    assert verdict.passed, verdict


def test_a_memory_error_scanning_a_reply_for_new_handles_breaks_the_channel(monkeypatch):
    """``la_wire.issue_handles`` scans each frame as it is read, before the decode (which turns a
    ``MemoryError`` into a ``memory`` break). Read by the waiting thread itself (no await yet, so
    no reader thread: every plain call), its ``MemoryError`` reached the tests, where ``except
    Exception`` takes it for the program's raise."""
    import os
    import time

    from lightning_agents.rewards._jail import la_harness

    la_wire = la_harness.la_wire
    read_fd, write_fd = os.pipe()
    try:
        channel = la_harness.Channel(-1, read_fd, time.monotonic() + 20, 1 << 20)
        channel.call_slot = la_harness._Slot("f")
        la_wire.write_frame(write_fd, {"ok": [[1], [2]]}, time.monotonic() + 5)

        def out_of_memory(frame):
            raise MemoryError

        monkeypatch.setattr(la_wire, "issue_handles", out_of_memory)
        channel._pump()
        assert channel.broken is not None and channel.broken.reason == "memory", channel.broken
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_reply_applied_inside_another_in_the_same_thread_does_not_deadlock(monkeypatch):
    """A finalizer the garbage collector runs in any allocation under ``apply_lock``, or a signal
    handler of the tests', may call the program there: that call's reply is applied in the same
    thread, inside the other's writes. Before, the second ``with apply_lock`` waited for good (the
    verdict's wall-clock kill, ``timeout``, where the code before the lock passed)."""
    import threading
    import time

    from lightning_agents.rewards._jail import la_harness

    la_wire = la_harness.la_wire
    channel = la_harness.Channel(-1, -1, time.monotonic() + 20, 1 << 20)
    first, second = [0], [0]
    channel.session.table.extend([first, second])
    channel.session.adopt(0)
    channel.awaited = True
    write_back, nested = la_wire.write_back, []

    def with_a_finalizer(writes):
        write_back(writes)
        if not nested:  # the tests' code, run mid-apply, calls the program: its reply is applied here
            nested.append(True)
            table = channel.session.table
            channel._written("ping", table, [[1, [9]]], la_wire._NO_VALUE, True, True, 2, False, True)

    monkeypatch.setattr(la_wire, "write_back", with_a_finalizer)
    done = threading.Event()

    def outer():
        channel._written("fill", channel.session.table, [[0, [1]]], la_wire._NO_VALUE, True, False, 1, False, True)
        done.set()

    thread = threading.Thread(target=outer, daemon=True)  # stuck for good before the fix
    thread.start()
    thread.join(5)
    assert done.is_set(), "a reply applied inside another's writes in the same thread deadlocked"
    assert (first, second) == ([1], [9])
