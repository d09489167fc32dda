"""The trusted harness's CPU cap (``harness_cpu_s``).

The harness runs outside the sandbox's cgroup and its ``RLIMIT_CPU``. A reply of ints whose hashes
collide (``k * (2**61 - 1)`` all hash to 0), sent as a prebuilt frame that costs the sandbox next
to nothing, makes decoding it into a set quadratic: about 10 s of the harness's CPU per 1 MiB
reply, and with no cap the harness ran until the trainer killed it at ``timeout_s + 10`` s (a 0,
``timeout``, after up to that much host CPU).
"""

from __future__ import annotations

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
CORRECT = "def f(x):\n    return x + 1\n"
# A wall-clock limit far past the CPU caps below: on a loaded machine the harness may get a small
# share of a core, and the verdict must come from its CPU cap, not from the clock.
TIMEOUT_S = 120
# The program answers every call with one prebuilt frame, written to the channel itself.
FORGED = (
    "import json, os, struct, sys\n"
    "M = (1 << 61) - 1\n"
    "body = json.dumps({{'ok': {payload}}}, separators=(',', ':')).encode()\n"
    "rfd, qfd = int(sys.argv[3]), int(sys.argv[2])\n"
    "def f(x):\n    return x + 1\n"
    "os.write(rfd, struct.pack('>I', 11) + b'{{\"ready\":1}}')\n"
    "while True:\n"
    "    n = os.read(qfd, 4)\n"
    "    if len(n) < 4:\n        os._exit(0)\n"
    "    os.read(qfd, struct.unpack('>I', n)[0])\n"
    "    os.write(rfd, struct.pack('>I', len(body)) + body)\n"
)
COLLIDING_SET = FORGED.format(payload="{'s': [k * M for k in range(1, 42000)]}")
COLLIDING_LIST = FORGED.format(payload="[k * M for k in range(1, 42000)]")


@needs_bwrap
def test_a_reply_of_colliding_values_is_a_zero_at_the_harness_cpu_cap():
    """Before the cap: ``timeout`` after the harness had spent up to ``timeout_s + 10`` s of CPU
    decoding the replies; now the cap ends it (``reply_cpu``). A correct program returning as
    large a set of distinct ints passes under the same cap."""
    tests = "for i in range(5):\n    assert f(i) == i + 1\n"
    verdict = judge(COLLIDING_SET, tests, timeout_s=TIMEOUT_S, harness_cpu_s=1)
    assert (verdict.passed, verdict.reason) == (False, "reply_cpu"), verdict
    assert "CPU cap of 1 s" in verdict.detail
    honest = "def f(x):\n    return set(range(10**15, 10**15 + 42000))\n"
    tests = "for i in range(3):\n    assert f(i) == set(range(10**15, 10**15 + 42000))\n"
    assert judge(honest, tests, timeout_s=TIMEOUT_S, harness_cpu_s=2).passed


@needs_bwrap
def test_one_long_c_call_on_a_reply_is_cut_by_the_hard_limit():
    """The tests' own ``set()`` of a colliding list is one C call (seconds) that the SIGXCPU
    handler cannot interrupt: the kernel kills the harness a second later, still a 0."""
    verdict = judge(COLLIDING_LIST, "assert set(f(1)) == {2}\n", timeout_s=TIMEOUT_S, harness_cpu_s=1)
    assert (verdict.passed, verdict.reason) == (False, "reply_cpu"), verdict
    assert "SIGKILL" in verdict.detail and "CPU cap of 1 s" in verdict.detail


@needs_bwrap
def test_tests_that_spin_before_any_call_are_a_verifier_error_not_a_zero():
    """CPU the trusted tests take for themselves before calling the candidate is a setting to
    raise, in Python code and in one C call alike; after a call it is the candidate's 0, as with
    the harness's memory cap."""
    for spin in ("n = 0\nwhile n >= 0:\n    n += 1\n", "sum(range(10**12))\n"):
        with pytest.raises(VerifierError, match=r"harness_cpu_s \(now 1\)"):
            judge(CORRECT, spin + "assert f(1) == 2\n", timeout_s=TIMEOUT_S, harness_cpu_s=1)
    verdict = judge(
        CORRECT, "assert f(1) == 2\nn = 0\nwhile n >= 0:\n    n += 1\n", timeout_s=TIMEOUT_S, harness_cpu_s=1
    )
    assert (verdict.passed, verdict.reason) == (False, "reply_cpu"), verdict


@needs_bwrap
def test_the_default_cap_is_the_candidates_own_cpu_limit():
    """``int(timeout_s) + 1`` soft, one second more hard; the trusted tests read it in the harness."""
    tests = "import resource\nassert resource.getrlimit(resource.RLIMIT_CPU) == ({}, {})\nassert f(1) == 2\n"
    verdict = judge(CORRECT, tests.format(4, 5), timeout_s=3.5)
    assert verdict.passed, verdict
    assert judge(CORRECT, tests.format(7, 8), timeout_s=3.5, harness_cpu_s=7).passed


def test_a_harness_cpu_cap_below_one_second_is_refused():
    for cap in (0, -1):
        with pytest.raises(ValueError, match="harness_cpu_s must be at least 1"):
            judge(CORRECT, "assert f(1) == 2\n", harness_cpu_s=cap)
