"""Threads the trusted tests can start in the harness under its address-space cap.

glibc reserves 64 MiB of address space for each thread's own malloc arena (up to 8 per core), and
the harness runs under a 1 GiB ``RLIMIT_AS`` (``harness_memory_mb``): the tests could start 21
threads (18 after ``import numpy``) on this project's 2-core machine, and a test suite that runs its
checks in a thread pool, or gathers many awaits that each start a thread, failed a right solution
with "can't start new thread". The harness now runs with ``MALLOC_ARENA_MAX=2``: 117 (106). The
candidate's sandbox too: a program could start 14 threads, now 30 (``max_processes`` 32) in bwrap.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier

PROGRAM = "def square(x):\n    return x * x\n"
# 48 threads, each allocating (so each wants a malloc arena), all alive at once, then the
# candidate called from every one of them
TESTS = """
import threading
from concurrent.futures import ThreadPoolExecutor

ready = threading.Barrier(49)

def work(i):
    data = [str(i)] * 10_000
    ready.wait(timeout=20)
    return square(i) + len(data) - 10_000

with ThreadPoolExecutor(max_workers=48) as pool:
    futures = [pool.submit(work, i) for i in range(48)]
    ready.wait(timeout=20)
    assert [f.result() for f in futures] == [i * i for i in range(48)]
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_tests_can_hold_48_threads(isolation):
    # before: "RuntimeError: can't start new thread" after about 21 threads (a wrong answer)
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), PROGRAM, TESTS)
    assert verdict.passed, verdict


CANDIDATE_THREADS = """
import threading
from concurrent.futures import ThreadPoolExecutor

def squares(n):
    ready = threading.Barrier(n + 1)

    def work(i):
        data = [str(i)] * 10_000
        ready.wait(timeout=20)
        return i * i + len(data) - 10_000

    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(work, i) for i in range(n)]
        ready.wait(timeout=20)
        return [f.result() for f in futures]
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_candidate_can_hold_24_threads(isolation):
    # the candidate's side too (its RLIMIT_AS): before, "can't start new thread" after 14
    tests = "assert squares(24) == [i * i for i in range(24)]\n"
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), CANDIDATE_THREADS, tests)
    assert verdict.passed, verdict
