"""The tests' stand-ins for the candidate's coroutines behave as the coroutines would in one file.

Two differences found by a review, each failing a right solution:

- ``inspect.iscoroutine(candidate(x))`` was False: the stand-in was a ``collections.abc.Coroutine``
  of the harness's, not the built-in coroutine type ``inspect`` checks, so tests that await a
  result only ``if inspect.iscoroutine(result)`` (an "await if needed" helper, common in test
  utilities) compared the unawaited stand-in with the expected value. It is now a native coroutine
  of the harness's (:func:`la_harness.Awaited`).
- The harness's reader thread, which lets the tests' event loop run while it waits for the
  candidate, started at the first await: where the tests held 14 to 22 threads by then (each
  reserves a stack and a malloc arena under the harness's 1 GiB address-space cap), it could not
  start, and every await then blocked the tests' loop. Gathered awaits ran one after another (a
  waiter and the coroutine that sets its event never met: a timeout), and the tests' own timeouts
  could not fire (a solution that blocks for 8 s met a 5 s ``wait_for`` limit: a wrong pass). The
  reader now starts before the tests run when the candidate has an ``async def`` or the tests
  use asyncio.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier

SOLUTION = """
import asyncio

async def double(x):
    await asyncio.sleep(0.01)
    if x < 0:
        raise ValueError(x)
    return x * 2

def later(x):
    return double(x)  # a plain function returning a coroutine, as in one file
"""
WRONG = SOLUTION.replace("return x * 2", "return x * 3")

# Test styles seen in real suites: an "await if needed" helper, pytest-asyncio-style async test
# functions run by asyncio.run, TaskGroup, and unittest's IsolatedAsyncioTestCase.
TESTS = """
import asyncio, inspect, io, unittest

async def resolve(value):
    return await value if inspect.iscoroutine(value) else value

def run_maybe(value):
    return asyncio.run(value) if inspect.iscoroutine(value) else value

def check(candidate):
    coro = candidate(2)
    assert inspect.iscoroutine(coro) and asyncio.iscoroutine(coro) and inspect.isawaitable(coro)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CREATED
    assert coro.__name__ == "double"
    assert asyncio.run(resolve(coro)) == 4
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    assert run_maybe(candidate(3)) == 6
    assert run_maybe(later(5)) == 10
    assert inspect.iscoroutine(later(1)) and not inspect.iscoroutinefunction(later)

async def test_awaits():
    assert await double(4) == 8
    assert await asyncio.gather(double(1), later(2)) == [2, 4]

async def test_task_group():
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(double(i)) for i in range(3)]
    assert [task.result() for task in tasks] == [0, 2, 4]
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(double(-1))
            group.create_task(double(1))
    except* ValueError as errors:
        assert [err.args for err in errors.exceptions] == [(-1,)]

class DoubleTest(unittest.IsolatedAsyncioTestCase):
    async def test_value(self):
        self.assertEqual(await double(6), 12)

    async def test_error(self):
        with self.assertRaises(ValueError):
            await double(-2)

check(double)
asyncio.run(test_awaits())
asyncio.run(test_task_group())
suite = unittest.defaultTestLoader.loadTestsFromTestCase(DoubleTest)
result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
assert result.wasSuccessful() and result.testsRun == 2, result
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_call_of_an_async_def_gives_a_coroutine(isolation):
    # before: "AssertionError" at inspect.iscoroutine(coro)
    verifier = CodeVerifier(isolation=isolation, timeout_s=60)
    verdict = score(verifier, SOLUTION, TESTS)
    assert verdict.passed, verdict
    assert score(verifier, WRONG, TESTS).reason == "wrong_answer"


# The tests start threads until the harness's address-space cap refuses one, then await.
HOLD_THREADS = """
import asyncio, threading

held = threading.Event()
threads = []
try:
    while len(threads) < 500:
        thread = threading.Thread(target=held.wait, daemon=True)
        thread.start()
        threads.append(thread)
except RuntimeError:
    pass
assert len(threads) < 500, "the cap refused no thread: this test proves nothing here"
"""
EVENT_SOLUTION = """
import asyncio

box = []
filled = asyncio.Event()

async def consume():
    await filled.wait()
    return box.pop()

async def produce(x):
    await asyncio.sleep(0.1)
    box.append(x)
    filled.set()
    return "sent"
"""
EVENT_TESTS = (
    HOLD_THREADS
    + """
async def go():
    return await asyncio.wait_for(asyncio.gather(consume(), produce(5)), timeout=6.0)

try:
    assert asyncio.run(go()) == [5, "sent"]
finally:
    held.set()
"""
)


def test_awaits_run_concurrently_when_the_tests_hold_many_threads():
    # before: the waiter's await blocked the tests' loop, the setter's never went out: a timeout
    verdict = score(CodeVerifier(isolation="process", timeout_s=15), EVENT_SOLUTION, EVENT_TESTS)
    assert verdict.passed, verdict


FETCH = """
import asyncio

async def fetch(i):
    await asyncio.sleep(2.0)
    return i * 10
"""
FETCH_BLOCKING = FETCH.replace("await asyncio.sleep(2.0)", "__import__('time').sleep(2.0)")
FETCH_TESTS = (
    HOLD_THREADS
    + """
async def go():
    return await asyncio.wait_for(asyncio.gather(*(fetch(i) for i in range(4))), timeout=5.0)

try:
    assert asyncio.run(go()) == [0, 10, 20, 30]
finally:
    held.set()
"""
)


def test_the_tests_timeouts_fire_when_they_hold_many_threads():
    # before: both passed, the blocking one (8 s) too, as the 5 s limit could not fire while the
    # tests' loop was blocked in the harness's read
    verifier = CodeVerifier(isolation="process", timeout_s=30)
    right = score(verifier, FETCH, FETCH_TESTS)
    assert right.passed, right
    blocking = score(verifier, FETCH_BLOCKING, FETCH_TESTS)
    assert blocking.reason == "wrong_answer" and "TimeoutError" in blocking.detail, blocking
