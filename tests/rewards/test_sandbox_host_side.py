"""What a scored program can do to the host and the trusted side, beyond its own verdict.

Found by a red-team round against the real sandbox (its scripts stay outside the repository):
bwrap's own init ran without the program's limits and its memory was writable through
/proc/1/mem; fallocate reserved host disk past RLIMIT_FSIZE; inotify instances and file leases
reached the trainer's user; one reply blew the harness up to 1.5 GiB; every call left a zombie.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import pytest

from lightning_agents.rewards import run_python
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

TESTS = "assert f(1) == 2\n"


def test_every_process_in_the_sandbox_holds_the_programs_limits():
    """No process of the sandbox's uid runs without the limits (bwrap's init did: code written
    into it through /proc/1/mem wrote 1.5 GiB to a host file and the trainer read it whole)."""
    program = textwrap.dedent(
        """
        import os
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        for pid in pids:
            for line in open(f"/proc/{pid}/limits"):
                if line.startswith("Max file size"):
                    print(pid, line.split()[3])
        """
    )
    result = run_python(program, max_output_bytes=65536)
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows and rows[0][0] == "1", result.stdout  # the program is the namespace's init
    assert {size for _, size in rows} == {"65536"}, result.stdout


def test_host_disk_and_inotify_and_leases_are_out_of_reach():
    program = textwrap.dedent(
        """
        import ctypes, errno, fcntl, os
        libc = ctypes.CDLL(None, use_errno=True)
        # FALLOC_FL_KEEP_SIZE on stdout, a file on the host: reserves disk past RLIMIT_FSIZE
        rc = libc.fallocate(1, 1, ctypes.c_long(0), ctypes.c_long(1 << 30))
        print("fallocate", rc, errno.errorcode.get(ctypes.get_errno()))
        rc = libc.inotify_init1(0)
        print("inotify", rc, errno.errorcode.get(ctypes.get_errno()))
        fd = os.open(os.path.realpath("/usr/bin/env"), os.O_RDONLY)
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            print("lease taken")
        except OSError as err:
            print("lease", errno.errorcode[err.errno])
        """
    )
    result = run_python(program)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"fallocate -1 {errno.errorcode[errno.EOPNOTSUPP]}", lines
    assert lines[1] == "inotify -1 EPERM", lines
    assert lines[2] in ("lease EPERM", "lease EACCES"), lines  # EACCES: a non-root trainer owns no /usr file


def test_no_zombie_is_left_for_the_trainer_to_reap(tmp_path):
    """In a container whose PID 1 is the trainer, an orphaned bwrap is never reaped: one PID lost
    per scored program. A subreaper stands in for that PID 1 here."""
    script = tmp_path / "reaper.py"
    script.write_text(
        textwrap.dedent(
            """
            import ctypes, glob, os
            assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
            from lightning_agents.rewards import run_python
            from lightning_agents.rewards.verdict import judge
            for _ in range(3):
                judge("def f(x):\\n    return x + 1\\n", "assert f(1) == 2\\n")
                run_python("print(1)")
            zombies = 0
            for stat in glob.glob("/proc/[0-9]*/stat"):
                try:
                    fields = open(stat).read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                zombies += fields[0] == "Z" and int(fields[1]) == os.getpid()
            print(zombies)
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_a_reply_built_to_expand_is_a_zero_not_a_harness_crash():
    """A reply under the frame cap that decodes into far more objects than its bytes: the harness,
    outside the sandbox's cgroup, stops at its own memory cap and the program scores 0."""
    # 7.6 MB of JSON, 900,000 one-item tuples nested 20 deep (45,000 places of one chain, each
    # sent whole: tuples are not numbered), parsed into as many dicts and lists, against a 256
    # MiB cap: the cap strikes as a MemoryError, not as an abort somewhere in the interpreter (a
    # 64 MiB cap did that under load). A chain of lists, ``[v] * 160000``, was this attack until a
    # call's value numbered its containers (RT51-3's fix): it now crosses as one list at 160,000
    # places, as in one file, and is a plain wrong answer
    program = "def f(x):\n    v = ()\n    for _ in range(20):\n        v = (v,)\n    return [v] * 45000\n"
    # 9.3 to 9.8 s on this project's machine under load: the default 10 s deadline turned some
    # runs into a `timeout` (the reason goes by the clock once the deadline has passed)
    verdict = judge(program, TESTS, harness_memory_mb=256, max_reply_bytes=8 << 20, timeout_s=30)
    # where the cap strikes (the JSON parse, the copy, elsewhere) decides the reason; all are a 0
    assert not verdict.passed and verdict.reason in ("bad_reply", "candidate_died", "memory"), verdict
    aliased = "def f(x):\n    v = []\n    for _ in range(20):\n        v = [v]\n    return [v] * 160000\n"
    verdict = judge(aliased, TESTS, harness_memory_mb=256, max_reply_bytes=8 << 20, timeout_s=30)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    over = "def f(x):\n    return 'x' * (2 << 20)\n"
    verdict = judge(over, TESTS)
    assert not verdict.passed and verdict.reason == "candidate_died" and "exceeds the limit" in verdict.detail


def test_a_correct_result_of_5000_digits_is_sent():
    """Python's default cap of 4,300 digits on int/str conversion made a correct 10**5000 unsendable
    (the channel broke: candidate_died)."""
    verdict = judge("def f(n):\n    return 10 ** n + 1\n", "assert f(5000) == 10 ** 5000 + 1\n")
    assert verdict.passed, verdict
