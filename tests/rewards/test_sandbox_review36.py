"""Holes a review of the third sandbox red-team round found (session 36; its scripts stay outside
the repository).

Where no cgroup can be made (a non-root trainer), the memory cap is a watchdog summing the
sandbox's resident memory: secret memfds (250 MiB), SysV message queues (500 MiB) and SysV
semaphore arrays (445 MiB) held kernel memory in no process's RSS past a 64 MiB cap. The watchdog
and ``Jail.kill()`` acted on the sandbox's PID after it was reaped, when it may name another
process (an unrelated process and its child were SIGKILLed). And a trainer holding more than 1,024
descriptors made every ``judge()`` fail: the wire between harness and candidate used ``select``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import resource
import subprocess
import sys
import time

import pytest

from lightning_agents.rewards import isolation, run_python
from lightning_agents.rewards._jail import la_wire
from lightning_agents.rewards.isolation import Jail, Limits, isolation_report
from lightning_agents.rewards.verdict import judge

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
# memfd_secret's number (syscalls from 424 on have one number on every architecture; glibc has no wrapper)
_MEMFD_SECRET = {"x86_64": 447, "aarch64": 447}.get(platform.machine())


def _errors(program: str) -> list[str]:
    """What ``program`` prints in a sandbox on the watchdog path (as a non-root trainer gets it)."""
    result = run_python(program, timeout_s=10, memory_mb=64)
    assert result.ok, result.stderr[-500:]
    return result.stdout.split()


@needs_bwrap
@pytest.mark.skipif(_MEMFD_SECRET is None, reason=f"memfd_secret's number on {platform.machine()} is not listed here")
def test_a_program_cannot_make_secret_memfds(watchdog_path):
    """A secret memfd's pages stay in the file after munmap, in no process's RSS: 250 of them (one
    of RLIMIT_FSIZE each) held 250 MiB against a 64 MiB cap and the watchdog saw 10 MiB."""
    program = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"print(libc.syscall({_MEMFD_SECRET}, 0), ctypes.get_errno())\n"
    )
    assert _errors(program) == ["-1", str(errno.EPERM)]


@needs_bwrap
def test_a_program_cannot_make_sysv_message_queues_or_semaphores(watchdog_path):
    """Each sandbox's IPC namespace allows 32,000 message queues of 16 KiB and 32,000 arrays of
    32,000 semaphores, kernel memory in no process's RSS: 500 MiB of messages and 445 MiB of
    semaphores (200 arrays) ran to their end under a 64 MiB cap."""
    program = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.msgget(0, 0o1600), ctypes.get_errno())\n"  # IPC_PRIVATE, IPC_CREAT | 0600
        "ctypes.set_errno(0)\n"
        "print(libc.semget(0, 1, 0o1600), ctypes.get_errno())\n"
    )
    assert _errors(program) == ["-1", str(errno.EPERM)] * 2


@needs_bwrap
def test_a_program_cannot_make_posix_message_queues():
    """POSIX message queues are kernel memory as well, counted against RLIMIT_MSGQUEUE (800 KiB by
    default, per user): it is 0 in the sandbox, so mq_open cannot make any."""
    libc = ctypes.util.find_library("rt") or None  # glibc before 2.34 has mq_open in librt
    program = (
        "import ctypes, resource\n"
        f"lib = ctypes.CDLL({libc!r}, use_errno=True)\n"
        "print(*resource.getrlimit(resource.RLIMIT_MSGQUEUE))\n"
        "print(lib.mq_open(b'/q', 0o102, 0o600, None), ctypes.get_errno())\n"  # O_CREAT | O_RDWR
    )
    assert _errors(program) == ["0", "0", "-1", str(errno.EMFILE)]


def _zombie() -> subprocess.Popen:
    """A child that has exited but is not reaped: its PID stays taken and /proc still shows it, as
    /proc shows whatever process reuses a reaped sandbox's PID."""
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return child
        time.sleep(0.01)
    raise AssertionError("the child did not exit")


def _has_pidfds() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


@pytest.mark.skipif(not _has_pidfds(), reason="no pidfds here (Linux before 5.3): the watchdog checks /proc")
def test_the_watchdog_stops_when_its_sandbox_exits_not_when_its_pid_is_gone():
    """The watchdog went on while ``/proc/ROOT`` existed, and a process that reused the reaped
    sandbox's PID made it exist again: the watchdog then summed that process's children and
    SIGKILLed them, and the finished call was reported as over its memory cap. It now holds a pidfd
    of the sandbox and stops once that process exits."""
    sandbox = _zombie()
    script = str(isolation.BOOT_DIR / "la_watchdog.py")
    dog = subprocess.Popen([sys.executable, "-I", "-S", script, str(sandbox.pid), str(1 << 40), "0.02"])
    try:
        dog.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail("the watchdog still watches a PID whose process has exited")
    finally:
        dog.kill()
        dog.wait()
        sandbox.wait()


def test_kill_does_not_walk_from_a_reaped_pid():
    """``Jail.close()`` after the sandbox was reaped walked the process tree from its old PID and
    SIGKILLed whatever process had it by then (here another process is given the PID by hand)."""
    jail = Jail("process", Limits())
    jail.proc = subprocess.Popen(["true"])
    jail.proc.wait()
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        jail.proc.pid = bystander.pid  # the kernel handed the freed PID to another process
        jail.kill()
        time.sleep(0.1)
        assert bystander.poll() is None, "kill() SIGKILLed a process that reused the sandbox's PID"
    finally:
        bystander.kill()
        bystander.wait()


@pytest.fixture
def high_descriptors():
    """Descriptors past 1,024 in this process, as a trainer with many open files, sockets or
    DataLoader workers has: the next descriptor opened gets a number above 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048) if hard == resource.RLIM_INFINITY else hard, hard))
    held = [os.open(os.devnull, os.O_RDONLY)]
    try:
        while held[-1] <= 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_wire_takes_descriptors_past_1024(high_descriptors):
    """``select`` refuses descriptors from 1,024 up ("filedescriptor out of range in select()")."""
    read_fd, write_fd = os.pipe()
    try:
        assert min(read_fd, write_fd) > 1024
        deadline = time.monotonic() + 5
        la_wire.write_frame(write_fd, {"ok": [1, "two"]}, deadline)
        assert la_wire.read_frame(read_fd, deadline, 1 << 20) == {"ok": [1, "two"]}
        with pytest.raises(la_wire.WireError, match="timed out"):
            la_wire.read_frame(read_fd, time.monotonic() + 0.05, 1 << 20)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_judge_works_for_a_trainer_holding_many_descriptors(high_descriptors):
    """The harness gets the trainer's descriptor numbers (``pass_fds`` keeps them): with 1,500
    descriptors open every ``judge()`` raised VerifierError."""
    mode = "bwrap" if isolation_report()["bwrap_works"] else "process"
    verdict = judge("def f(x):\n    return x + 1\n", "assert f(1) == 2\n", isolation=mode, timeout_s=10)
    assert verdict.passed, verdict
