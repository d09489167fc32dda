"""Under a root trainer each live sandbox runs as an outside uid of its own (session 47).

218faee ran every sandbox of a host as the one uid 2000000000, so the kernel's per-user counters
were shared between concurrent sandboxes: a hog holding that uid's pipe-buffer allowance
(``fs.pipe-user-pages-soft``) shrank every other sandbox's new pipes to 8 KiB, and a right program
that writes 20 KB into its own pipe before reading it timed out (red team of 218faee, U-pipe; its
``a1c``). Now a sandbox takes the first free uid of a range (``flock`` on a lock file per uid in a
root-only folder, so every trainer process of the host sees the same locks) and gives it back when
it ends, or when its trainer dies.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest

from lightning_agents.rewards import run_python
from lightning_agents.rewards.isolation import Jail, Limits, isolation_report, sandbox_python

_REPORT = isolation_report()
pytestmark = [
    pytest.mark.skipif(not _REPORT["bwrap_works"], reason="bubblewrap is unavailable here"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop applies under a root trainer only"),
    pytest.mark.skipif(
        bool(_REPORT.get("uid_drop_error")), reason=f"no uid drop here: {_REPORT.get('uid_drop_error')}"
    ),
]

# grows 64 pipes to 1 MiB (16,384 pages, fs.pipe-user-pages-soft by default), then opens pipes
# until a new one gets the minimum size: the outside uid's allowance is used up
_PIPE_HOG = (
    "import fcntl, os, time\n"
    "held = []\n"
    "for _ in range(120):\n"
    "    r, w = os.pipe(); held += [r, w]\n"
    "    try:\n"
    "        fcntl.fcntl(w, 1031, 1 << 20)\n"  # F_SETPIPE_SZ
    "    except OSError:\n"
    "        break\n"
    "for _ in range(60):\n"
    "    r, w = os.pipe(); held += [r, w]\n"
    "    if fcntl.fcntl(w, 1032) == 8192:\n"  # F_GETPIPE_SZ
    "        break\n"
    "print('hog', fcntl.fcntl(w, 1032), flush=True)\n"
    "time.sleep(30)\n"
)
# right: Linux's default pipe holds 64 KiB, so this write does not block on a pipe of its own
_FILLS_ITS_PIPE = (
    "import fcntl, os\n"
    "r, w = os.pipe()\n"
    "size = fcntl.fcntl(w, 1032)\n"
    "os.write(w, b'x' * 20000)\n"
    "os.close(w)\n"
    "print(len(os.read(r, 1 << 16)), size)\n"
)


def _ids(pid: int) -> tuple[int, int]:
    """The real uid and gid of ``pid`` as the host sees them."""
    found = {}
    for line in open(f"/proc/{pid}/status").read().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Uid", "Gid"):
            found[key] = int(rest.split()[0])
    return found["Uid"], found["Gid"]


def _start(code: str) -> tuple[Jail, object]:
    """A bwrap :class:`Jail` running ``code``, and a reader of its output."""
    jail = Jail("bwrap", Limits())
    out_r, out_w = os.pipe()
    try:
        jail.start(
            [sandbox_python(), "-I", "-S", "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=out_w,
            pass_fds=(),
        )
    except BaseException:
        os.close(out_r)
        raise
    finally:
        os.close(out_w)
    return jail, os.fdopen(out_r, "r")


def _in_range(uid: int, gid: int) -> bool:
    base_uid, base_gid = _REPORT["sandbox_ids"]
    k = uid - base_uid
    return 0 <= k < _REPORT["sandbox_id_count"] and gid == base_gid + k


def test_two_concurrent_sandboxes_run_as_different_outside_uids():
    # on 218faee both were uid 2000000000
    code = "print('ready', flush=True)\nimport time\ntime.sleep(5)\n"
    jails, outs = [], []
    try:
        for _ in range(2):
            jail, out = _start(code)
            jails.append(jail)
            outs.append(out)
        seen = []
        for jail, out in zip(jails, outs):
            assert out.readline().strip() == "ready"
            seen.append({_ids(pid) for pid in jail._descendants()})
    finally:
        for jail, out in zip(jails, outs):
            jail.close()
            out.close()
    assert all(len(ids) == 1 for ids in seen), seen  # bwrap and the program: one uid per sandbox
    (first,), (second,) = seen
    assert first != second and first[0] != second[0], seen
    assert _in_range(*first) and _in_range(*second), (seen, _REPORT["sandbox_ids"])


def test_a_right_program_that_fills_its_own_pipe_passes_beside_a_pipe_hog():
    # U-pipe (a1c): on 218faee the right program's pipe was 8 KiB and its write blocked to the timeout
    hog, out = _start(_PIPE_HOG)
    try:
        said = out.readline().split()
        assert said == ["hog", "8192"], said  # the hog's uid has no pipe allowance left
        result = run_python(_FILLS_ITS_PIPE, timeout_s=4)
    finally:
        hog.close()
        out.close()
    assert not result.timed_out and result.returncode == 0, result
    assert result.stdout.split() == ["20000", "65536"], result


_HOLDER = """
import os, sys, time
from lightning_agents.rewards.isolation import Jail, Limits, sandbox_python
import subprocess
jail = Jail("bwrap", Limits())
jail.start([sandbox_python(), "-I", "-S", "-c", "print(1, flush=True); import time; time.sleep(60)"],
           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None, pass_fds=())
jail.proc.stdout.readline()
child = os.fork()  # a data-loader worker: it must not keep the trainer's uid after the trainer dies
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, jail._slot.ids[0], *jail._cgroups, flush=True)
time.sleep(60)
"""


def _lock_is_free(path: str) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # drops the lock if taken
    return True


def _run_one(env: dict[str, str]) -> tuple[str, str]:
    """Start one sandbox in a fresh process under ``env``: (its outside uid, what was logged)."""
    script = (
        "import logging, subprocess\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "from lightning_agents.rewards.isolation import Jail, Limits, sandbox_python\n"
        "jail = Jail('bwrap', Limits())\n"
        "jail.start([sandbox_python(), '-I', '-S', '-c', 'print(1, flush=True); import time; time.sleep(5)'],\n"
        "           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None, pass_fds=())\n"
        "jail.proc.stdout.readline()\n"
        "uids = {l.split()[1] for pid in jail._descendants()\n"
        "        for l in open(f'/proc/{pid}/status') if l.startswith('Uid:')}\n"
        "jail.close()\n"
        "print(*sorted(uids))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip(), run.stderr


def test_the_uid_of_a_trainer_killed_with_sigkill_comes_back():
    # a range of one uid (UID:GID:COUNT; 218faee refused the form): the holder has it, a second
    # trainer shares it with a warning meanwhile, and gets it for itself once the holder is killed
    uid = 1_999_990_000
    env = {**os.environ, "LIGHTNING_AGENTS_SANDBOX_UID": f"{uid}:{uid}:1"}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    child, cgroups = None, []
    try:
        line = holder.stdout.readline().split()
        assert line, holder.communicate(timeout=10)[1] if holder.poll() is not None else "no line"
        child, held, cgroups = int(line[0]), int(line[1]), line[2:]
        assert held == uid
        lock = os.path.join(_REPORT["sandbox_uid_dir"], str(uid))
        assert not _lock_is_free(lock)
        shared, said = _run_one(env)
        assert shared == str(uid) and f"all 1 uids from {uid} are held" in said, said

        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        for _ in range(100):  # the kernel drops the flock with the holder's last descriptor
            if _lock_is_free(lock):
                break
            time.sleep(0.05)
        assert os.path.exists(f"/proc/{child}"), "the forked child should still be alive"
        assert _lock_is_free(lock), "the uid stayed held after its holder was SIGKILLed"
        own, said = _run_one(env)
        assert own == str(uid) and "are held" not in said, said
    finally:
        for pid in (holder.pid, child):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        holder.wait(timeout=10)
        holder.stdout.close()
        holder.stderr.close()
        if child:
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                pass  # not our child: init reaps it
        for path in cgroups:
            for _ in range(100):  # a killed trainer leaves its sandbox's cgroups behind
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def test_a_range_that_holds_an_account_is_refused_by_name():
    # the whole range is checked (once per process), not only its first uid
    import pwd

    # an account in the middle of a range of 3 whose ends are free: found by enumeration
    taken = {a.pw_uid for a in pwd.getpwall()}
    account = next(
        (a for a in pwd.getpwall() if a.pw_uid > 1 and not {a.pw_uid - 1, a.pw_uid + 1} & (taken | {65535})), None
    )
    if account is None:
        pytest.skip("no account with free uids on both sides")
    base = account.pw_uid - 1
    script = (
        "from lightning_agents.rewards.isolation import IsolationUnavailable, check_isolation\n"
        "try:\n    check_isolation('bwrap')\nexcept IsolationUnavailable as err:\n    print(err)\n"
    )
    env = {**os.environ, "LIGHTNING_AGENTS_SANDBOX_UID": f"{base}:1999990100:3"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "LIGHTNING_AGENTS_SANDBOX_UID" in run.stdout, run.stdout
    assert f"uid {account.pw_uid} is the account {account.pw_name!r}" in run.stdout, run.stdout
