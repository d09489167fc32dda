"""asyncio in the code sandbox: correct async solutions score 1, sockets stay denied.

asyncio's selector event loop wakes itself through ``socket.socketpair()``, which seccomp (every
socket family) and the ``process`` isolation's audit hook refuse, so ``asyncio.run`` raised
``PermissionError`` and every correct async program scored 0. Allowing ``socketpair(AF_UNIX)`` was
measured and rejected (socket buffers are memory outside every process's RSS: one process held
1.4 GiB under a 64 MiB watchdog cap; docs/sandbox.md); instead the sandbox's boot gives asyncio's
loop a pipe. Separately, an ``async def`` entry point returned a coroutine, which cannot cross the
channel (``bad_reply``): the candidate now runs it to its end and the tests get a coroutine of the
harness's own that yields the decoded plain value where they await it.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier, run_python
from lightning_agents.rewards.isolation import isolation_report

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

ASYNC_PROGRAM = """
import asyncio, threading

async def square(x):
    await asyncio.sleep(0.01)
    return x * x

async def main():
    loop = asyncio.get_running_loop()
    got = asyncio.Queue()
    # call_soon_threadsafe from another thread wakes the loop through its self-pipe
    threading.Thread(target=lambda: loop.call_soon_threadsafe(got.put_nowait, "woken")).start()
    woken = await asyncio.wait_for(got.get(), timeout=20)
    squares = await asyncio.gather(*(square(i) for i in range(5)))
    in_thread = await loop.run_in_executor(None, sum, squares)
    return woken, squares, in_thread

print(asyncio.run(main()))
print(asyncio.run(square(7)))
"""

ASYNC_SOLUTION = """
import asyncio

async def double(x):
    await asyncio.sleep(0)
    if x < 0:
        raise ValueError("negative")
    return [x * 2]
"""

ASYNC_TESTS = """
import asyncio

def check(candidate):
    assert asyncio.run(candidate(3)) == [6]

    async def inner():
        assert await candidate(4) == [8]
        assert await asyncio.gather(candidate(1), candidate(2)) == [[2], [4]]
        coro = candidate(-1)  # the error is raised where the coroutine is awaited
        try:
            await coro
        except ValueError as err:
            assert str(err) == "negative"
        else:
            raise AssertionError("no ValueError")

    asyncio.run(inner())

check(double)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_asyncio_program_runs_in_the_sandbox(isolation):
    result = run_python(ASYNC_PROGRAM, timeout_s=30, isolation=isolation)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout == "('woken', [0, 1, 4, 9, 16], 30)\n49\n"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_async_entry_point_passes(isolation):
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=30), ASYNC_SOLUTION, ASYNC_TESTS)
    assert verdict.passed, verdict
    # a solution that runs asyncio inside a plain function, as many do
    sync_wrapper = (
        "import asyncio\ndef double(x):\n    async def go():\n        return [x * 2]\n    return asyncio.run(go())"
    )
    sync_tests = "def check(candidate):\n    assert candidate(3) == [6]\ncheck(double)\n"
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=30), sync_wrapper, sync_tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_wrong_async_answers_score_0(isolation):
    verifier = CodeVerifier(isolation=isolation, timeout_s=30)
    wrong = ASYNC_SOLUTION.replace("x * 2", "x * 3")
    assert score(verifier, wrong, ASYNC_TESTS).reason == "wrong_answer"
    # not awaited, a coroutine equals no value (as in plain Python)
    unawaited = "def check(candidate):\n    assert candidate(3) == [6]\ncheck(double)\n"
    assert score(verifier, ASYNC_SOLUTION, unawaited).reason == "wrong_answer"
    # awaited twice: the second await fails as a real coroutine's does
    twice = "import asyncio\ndef check(c):\n    r = c(3)\n    asyncio.run(r)\n    asyncio.run(r)\ncheck(double)\n"
    assert score(verifier, ASYNC_SOLUTION, twice).reason == "wrong_answer"
    # the coroutine's result crosses as plain data, like any reply
    forged = "async def double(x):\n    return object()\n"
    assert score(verifier, forged, ASYNC_TESTS).reason == "bad_reply"
    # StopIteration from the coroutine is the candidate's error, not the end of the tests' iteration
    stop = "async def double(x):\n    raise StopIteration\n"
    stop_tests = (
        "import asyncio\ndef check(c):\n    assert all(asyncio.run(c(i)) == [i * 2] for i in range(3))\ncheck(double)\n"
    )
    assert not score(verifier, stop, stop_tests).passed


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_socketpair_stays_unavailable_and_says_so(isolation):
    program = (
        "import socket\n"
        "try:\n"
        "    socket.socketpair()\n"
        "except PermissionError as err:\n"
        "    print('denied:', err)\n"
        "else:\n"
        "    print('ALLOWED')\n"
    )
    result = run_python(program, timeout_s=30, isolation=isolation)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout.startswith("denied:"), result.stdout
    assert "socket.socketpair is unavailable in the sandbox" in result.stdout
    assert "asyncio" in result.stdout


@needs_bwrap
def test_seccomp_still_denies_every_socket_call():
    # under the interpreter's wrappers: the syscalls themselves, for every family and type
    program = (
        "import _socket, socket\n"
        "out = []\n"
        "for fam in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):\n"
        "    for typ in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):\n"
        "        for call in (_socket.socketpair, _socket.socket):\n"
        "            try:\n"
        "                call(fam, typ)\n"
        "                out.append('open')\n"
        "            except OSError as err:\n"
        "                out.append(err.errno)\n"
        "print(sorted(set(map(str, out))))\n"
    )
    result = run_python(program, timeout_s=30, isolation="bwrap")
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout == "['1']\n"  # EPERM for each of them
