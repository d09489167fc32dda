"""Review of session 48's W6 mend (RLIMIT_CORE of 1 byte kept by seccomp): the filter's rules on
``setrlimit``/``prlimit64`` (and the older ``fcntl(F_SETLEASE)`` one) compared all 64 bits of an
argument the kernel declares ``unsigned int``. The kernel drops the high half before using it, so
a program passing ``(1 << 32) | RLIMIT_CORE`` went past the rule and lowered its limit to 0 (a
crash then starts the host's ``core_pattern`` pipe helper again), and ``(1 << 32) | F_SETLEASE``
took a lease. The rules now compare the low 32 bits only (``isolation._int_arg``)."""

from __future__ import annotations

import os

import pytest
from sandbox_modes import score

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards.isolation import isolation_report

# syscall numbers of setrlimit, prlimit64 and fcntl on the two machines the filter is built for
NUMBERS = {"x86_64": (160, 302, 72), "aarch64": (164, 261, 25)}

needs_bwrap = pytest.mark.skipif(
    not isolation_report()["bwrap_works"] or os.uname().machine not in NUMBERS,
    reason="bubblewrap is unavailable here, or no syscall numbers for this machine",
)

PROGRAM = """
import ctypes, os, resource
SETRLIMIT, PRLIMIT64, FCNTL = {numbers}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
class Limit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
HIGH = 1 << 32  # dropped by the kernel from an unsigned int argument
def syscall(*args):
    result = libc.syscall(*(ctypes.c_long(a) if type(a) is int else a for a in args))
    return result, ctypes.get_errno() if result < 0 else 0
def lower_core(how):
    zero = Limit(0, 0)
    if how == "setrlimit":
        outcome = syscall(SETRLIMIT, HIGH | resource.RLIMIT_CORE, ctypes.byref(zero))
    else:
        outcome = syscall(PRLIMIT64, 0, HIGH | resource.RLIMIT_CORE, ctypes.byref(zero), 0)
    return outcome, resource.getrlimit(resource.RLIMIT_CORE)
def lease():
    with open("leased", "w") as fh:
        fh.write("x")
    fd = os.open("leased", os.O_RDONLY)
    return syscall(FCNTL, fd, HIGH | 1024, 0), syscall(FCNTL, fd, 1025, 0)[0]  # F_SETLEASE F_RDLCK, F_GETLEASE
"""


def _verdict(tests):
    program = PROGRAM.format(numbers=NUMBERS[os.uname().machine])
    return score(CodeVerifier(isolation="bwrap", timeout_s=30), program, tests)


@needs_bwrap
@pytest.mark.parametrize("how", ["setrlimit", "prlimit64"])
def test_high_bits_in_the_resource_argument_do_not_lower_the_core_limit(how):
    tests = f"outcome, limit = lower_core({how!r})\nassert outcome == (-1, 1) and limit == (1, 1), (outcome, limit)\n"
    verdict = _verdict(tests)
    assert verdict.passed, verdict


@needs_bwrap
def test_high_bits_in_the_fcntl_command_take_no_lease():
    tests = "refused, held = lease()\nassert refused == (-1, 1) and held == 2, (refused, held)  # EPERM; F_UNLCK\n"
    verdict = _verdict(tests)
    assert verdict.passed, verdict
