"""Kernel state a scored program shares with the host, and what outlives its call.

Found by a third red-team round (session 36; its scripts stay outside the repository): legacy AIO
contexts count against one machine-wide limit (fs.aio-max-nr), and one sandbox held all of it;
a program whose exit took the kernel seconds (millions of epoll watches) left its cgroups behind;
those watches count per user against fs.epoll.max_user_watches, and the sandbox's user is the
trainer's outside (4.9 million of this machine's 5.5 million in one call); where no cgroup can be
made, memory in no process's RSS (memfds, SysV shared memory) went past the watchdog's cap, and
the watchdog, a thread of the trainer's, did not run while the trainer held the GIL.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

from lightning_agents.rewards import isolation, run_python
from lightning_agents.rewards.isolation import Jail, Limits, isolation_report

# io_setup's number per architecture (the program calls it through libc's syscall())
_IO_SETUP = {"x86_64": 206, "aarch64": 0}.get(platform.machine())


@pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
@pytest.mark.skipif(_IO_SETUP is None, reason=f"io_setup's number on {platform.machine()} is not listed here")
def test_a_program_cannot_take_the_machines_aio_contexts():
    """fs.aio-max-nr is one counter for the whole machine, not per namespace or cgroup: a program
    that held every AIO event made each io_setup on the host fail with EAGAIN until its call ended."""
    program = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "ctx = ctypes.c_ulong(0)\n"
        f"rc = libc.syscall({_IO_SETUP}, 1024, ctypes.byref(ctx))\n"
        "print(rc, ctypes.get_errno())\n"
    )
    result = run_python(program, timeout_s=10)
    assert result.ok, result.stderr
    assert result.stdout.split() == ["-1", str(errno.EPERM)], result.stdout
    # the trainer's own io_setup is untouched by the filter (it runs outside the sandbox)
    libc = ctypes.CDLL(None, use_errno=True)
    ctx = ctypes.c_ulong(0)
    if libc.syscall(_IO_SETUP, 1, ctypes.byref(ctx)) == 0:
        libc.syscall(_IO_SETUP + 1, ctx)  # io_destroy follows io_setup on both architectures


def test_a_cgroup_still_busy_when_its_call_ends_is_removed_once_it_empties(tmp_path, monkeypatch):
    """A killed program's processes can take the kernel seconds to exit; its cgroup, busy until then,
    was left in place (one leaked cgroup per such sample). It is now removed in the background
    without the call waiting for it."""
    group = tmp_path / "la-sbx-busy"
    group.mkdir()
    # past close()'s own retries (about 1 s, several on a loaded machine), so only a close() that
    # waited for the group to empty could take that long
    busy_until = time.monotonic() + 8.0
    real_rmdir = os.rmdir

    def rmdir(path, *args, **kwargs):
        if os.fspath(path) == str(group) and time.monotonic() < busy_until:
            raise OSError(errno.EBUSY, "Device or resource busy", os.fspath(path))
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(isolation.os, "rmdir", rmdir)
    jail = Jail("bwrap", Limits())
    jail._cgroups = [str(group)]
    started = time.monotonic()
    jail.close()
    assert time.monotonic() - started < 5.0, "close() waited for the cgroup to empty"
    while group.exists() and time.monotonic() < busy_until + 3:
        time.sleep(0.05)
    assert not group.exists(), "the busy cgroup was left in place"


@pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
def test_a_program_cannot_hold_millions_of_epoll_watches():
    """Epoll watches count per user, the trainer's user outside; a process with n descriptors holds
    at most (n / 2) ** 2 of them. With the trainer's 20,000 descriptors one program held 4.9 million
    in a call (89% of fs.epoll.max_user_watches on a 23 GB machine); the descriptor cap keeps each
    process to 16,384."""
    program = (
        "import os, resource, select\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n"
        "except ValueError:\n"
        "    pass\n"
        "fds = []\n"
        "try:\n"
        "    while len(fds) < 2000:\n"
        "        fds.append(os.eventfd(0))\n"
        "except OSError:\n"
        "    pass\n"
        "half = len(fds) // 2\n"
        "count = 0\n"
        "for ep_fd in fds[:half]:\n"
        "    os.close(ep_fd)\n"
        "polls = []\n"
        "try:\n"
        "    while True:\n"
        "        ep = select.epoll()\n"
        "        polls.append(ep)\n"
        "        for fd in fds[half:]:\n"
        "            ep.register(fd, select.EPOLLIN)\n"
        "            count += 1\n"
        "except OSError:\n"
        "    pass\n"
        "print(hard, count)\n"
    )
    result = run_python(program, timeout_s=10)
    assert result.ok, result.stderr
    hard, watches = (int(x) for x in result.stdout.split())
    assert hard == Limits().max_open_files
    assert watches <= (hard // 2) ** 2, watches


@pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
def test_memory_that_no_process_maps_cannot_pass_the_watchdogs_cap(watchdog_path):
    """Without a writable cgroup (a non-root trainer) the memory cap is a watchdog summing the
    sandbox's resident memory; an open, unmapped memfd and a detached SysV segment are in no
    process's RSS, and a program held 200 MiB of them against a 64 MiB cap."""
    program = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "held = 0\n"
        "for i in range(48):\n"
        "    try:\n"
        "        fd = os.memfd_create(f'm{i}')\n"
        "    except OSError:\n"
        "        break\n"
        "    os.write(fd, b'x' * ((1 << 20) - 1))\n"
        "    held += 1\n"
        "for _ in range(2):\n"
        "    sid = libc.shmget(0, 24 << 20, 0o1600)\n"
        "    if sid < 0:\n"
        "        break\n"
        "    addr = libc.shmat(sid, None, 0)\n"
        "    ctypes.memset(addr, 1, 24 << 20)\n"
        "    libc.shmdt(ctypes.c_void_p(addr))\n"
        "    held += 24\n"
        "print(held)\n"
    )
    result = run_python(program, timeout_s=10, memory_mb=64)
    assert result.ok, result.stderr
    # the old code let it hold 96 MiB outside every RSS, past the 64 MiB cap, and kept it alive
    assert int(result.stdout) < 64, result.stdout


def _children_of_this_process() -> list[str]:
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as fh:
            found += fh.read().split()
    return found


@pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
def test_the_watchdog_holds_the_cap_while_the_trainer_holds_the_gil(watchdog_path):
    """Without a cgroup the cap was a thread of the trainer's, which samples only with the GIL:
    while the trainer sat in one long C call, four processes held 160 MiB past a 64 MiB cap and
    ran to their end."""
    program = (
        "import os, time\n"
        "time.sleep(0.3)\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "block = bytearray(40 << 20)\n"
        "for i in range(0, len(block), 4096):\n"
        "    block[i] = 1\n"
        "time.sleep(0.4)\n"
        "print('done', flush=True)\n"
    )
    results = []
    before = set(_children_of_this_process())
    scorer = threading.Thread(target=lambda: results.append(run_python(program, timeout_s=10, memory_mb=64)))
    scorer.start()
    deadline = time.monotonic() + 5
    while set(_children_of_this_process()) <= before and time.monotonic() < deadline:
        time.sleep(0.005)  # until the sandbox has started
    time.sleep(0.1)  # and its watchdog; the program allocates 0.3 s after it starts
    sum(range(200_000_000))  # one C call holding the GIL for about 1-3 s, past the program's end
    scorer.join()
    result = results[0]
    assert result.killed and "done" not in result.stdout, result


def _watchdog(*argv: str, parent_lingers_s: float | None = None) -> subprocess.Popen:
    script = str(isolation.BOOT_DIR / "la_watchdog.py")
    if parent_lingers_s is None:
        return subprocess.Popen([sys.executable, "-I", "-S", script, *argv], stdout=subprocess.PIPE)
    # started by a parent that exits after a while: the watchdog is then reparented, as when the
    # trainer is killed
    line = f'"{sys.executable}" -I -S "{script}" {" ".join(argv)} & echo $!; sleep {parent_lingers_s}'
    return subprocess.Popen(["/bin/sh", "-c", line], stdout=subprocess.PIPE, text=True)


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_the_watchdog_ends_when_its_sandbox_or_its_trainer_is_gone():
    """The watchdog polled forever once started: a trainer killed with SIGKILL left one process per
    open sandbox behind (and one whose sandbox was reaped watched a PID the kernel may reuse)."""
    reaped = subprocess.Popen(["true"])
    reaped.wait()
    dog = _watchdog(str(reaped.pid), str(1 << 40), "0.02")
    try:
        assert _gone_within(dog.pid, 5.0)
    finally:
        dog.kill()
    sandbox = subprocess.Popen(["sleep", "30"])
    shell = _watchdog(str(sandbox.pid), str(1 << 40), "0.02", parent_lingers_s=0.5)
    try:
        dog_pid = int(shell.stdout.readline())
        shell.wait(timeout=10)  # the "trainer" is gone, the sandbox still runs
        assert sandbox.poll() is None
        assert _gone_within(dog_pid, 5.0)
    finally:
        sandbox.kill()
        sandbox.wait()
        try:
            os.kill(dog_pid, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_RTPRIO)[1] == 0 and resource.getrlimit(resource.RLIMIT_NICE)[1] == 0,
    reason="this host allows neither real-time priority nor raised priority to anyone (hard limits 0)",
)
def test_a_program_gets_no_real_time_or_raised_priority():
    """Where the host's hard limits allow real-time scheduling, a SCHED_FIFO spinner in a sandbox
    would starve the trainer's threads on its core until RLIMIT_CPU."""
    got = run_python(
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_RTPRIO), resource.getrlimit(resource.RLIMIT_NICE))",
        timeout_s=10,
    )
    assert got.stdout.split() == ["(0,", "0)", "(0,", "0)"], got.stderr[-300:]
