"""Which calls keep what they drop, and when calm comes back, once the tests have awaited.

After the tests' first await of a program's coroutine the harness may hold what a call's reply
drops (``Session.table``) and record what it writes (``Channel.written``): an await's reply written
before the candidate read the call could still be decoded and name them. That is needed only for a
call sent while an await is unsettled. A call from an ``asyncio.to_thread``/executor worker is never
calm (another thread runs), yet when no await is unsettled as it is sent it now holds and records
nothing: before, 1,500 calls on fresh 20,000-item lists ran the harness out of memory ("can't start
new thread", a wrong fail).

An await left pending in an event loop the tests closed can never be decoded (``close()`` dropped
the callback that would wake its task), so it no longer keeps every later call from being calm:
before, a leaking getter passed and a right one failed for the rest of the verdict.
"""

from __future__ import annotations

import pathlib
import sys

import lightning_agents

_REWARDS_TESTS = pathlib.Path(lightning_agents.__file__).resolve().parent.parent / "tests" / "rewards"
if str(_REWARDS_TESTS) not in sys.path:
    sys.path.insert(0, str(_REWARDS_TESTS))

from sandbox_modes import one_file_passes, score  # noqa: E402
from test_sandbox_review52 import STACK  # noqa: E402  (the leaking getter's program)

from lightning_agents.rewards import CodeVerifier  # noqa: E402

# the tests run in the harness's process: how many objects its table still holds
HELD = """
def held():
    import gc
    return [sum(x is not None for x in o.table) for o in gc.get_objects() if type(o).__name__ == "Session"]
"""

# the same for the harness's record of what each reply wrote (Channel.written, for _not_stale)
RECORDED = """
def recorded():
    import gc
    return [len(o.written) for o in gc.get_objects() if type(o).__name__ == "Channel"]
"""

# the task sends its await, and the loop stops and closes before the reply: it stays pending
PENDING = """
import asyncio
loop = asyncio.new_event_loop()
t = loop.create_task(PING)
loop.run_until_complete(asyncio.sleep(0))
loop.close()
"""

ROWS = """
class M:
    def __init__(self, n):
        self.rows = [[i] for i in range(n)]
    def row(self, i):
        return self.rows[i]
    def add(self, i, x):
        self.rows[i].append(x)
    async def touch(self):
        return 0
"""


def _verifier():
    return CodeVerifier(isolation="process", timeout_s=30)


def _agrees(program, tests, passes):
    """One file and the sandbox (the process mode) both give ``passes``."""
    assert one_file_passes(program, tests) is passes
    verdict = score(_verifier(), program, tests)
    assert verdict.passed is passes, verdict


def test_to_thread_calls_sent_with_no_await_unsettled_let_their_arguments_go():
    """After an await, 300 ``to_thread`` calls on fresh lists leave at most a few of them in the
    harness's table: no await is unsettled as each is sent, so no await reply left to decode can
    name what its reply drops (held before: all 300)."""
    program = "def total(xs):\n    return sum(xs)\nasync def touch():\n    return 0\n"
    tests = (
        "import asyncio\n"
        "async def main():\n"
        "    assert await touch() == 0\n"
        "    for i in range(300):\n"
        "        assert await asyncio.to_thread(total, list(range(i, i + 50))) == sum(range(i, i + 50))\n"
        "    return True\n"
        "assert asyncio.run(main())\n"
    )
    assert one_file_passes(program, tests)
    check = "n = held()\nassert n and max(n) <= 64, n\n"
    verdict = score(_verifier(), program, HELD + tests + check)
    assert verdict.passed, verdict


def test_to_thread_calls_sent_with_no_await_unsettled_record_no_writes():
    """The same through a program that sorts each list in place: each list is written back, and the
    record of what replies wrote keeps at most a few of them, even inside ``asyncio.run`` where no
    call is calm (recorded before: all 300, until a calm call)."""
    program = "def srt(xs):\n    xs.sort()\nasync def touch():\n    return 0\n"
    tests = (
        "import asyncio\n"
        "async def main():\n"
        "    assert await touch() == 0\n"
        "    for i in range(300):\n"
        "        xs = list(range(i + 50, i, -1))\n"
        "        await asyncio.to_thread(srt, xs)\n"
        "        assert xs[0] == i + 1\n"
        "    return recorded()\n"
        "n = asyncio.run(main())\n"
        "assert n and max(n) <= 64, n\n"
    )
    assert one_file_passes(program, tests.replace("recorded()", "[0]"))
    verdict = score(_verifier(), program, RECORDED + tests)
    assert verdict.passed, verdict


def test_after_a_closed_loop_left_an_await_pending_a_leaking_getter_fails():
    """A getter that returns its own list fails, as in one file, after a task was left pending in
    a closed loop: later calls are calm again, so the value is the program's list, not a copy
    (before: the copy, a wrong pass)."""
    tests = PENDING.replace("PING", "Stack().ping()")
    tests += "s = Stack()\ns.push(1)\nsnap = s.snapshot()\ns.push(2)\nassert snap == [1], snap\n"
    _agrees(STACK, tests, False)


def test_after_a_closed_loop_left_an_await_pending_a_right_getter_passes():
    """A right program's row, read before it grows, is the program's row as in one file after a
    task was left pending in a closed loop (before: a copy, ``[1]``, a wrong fail)."""
    tests = "m = M(3)\n" + PENDING.replace("PING", "m.touch()")
    tests += "r = m.row(1)\nm.add(1, 9)\nassert r == [1, 9], r\n"
    _agrees(ROWS, tests, True)
