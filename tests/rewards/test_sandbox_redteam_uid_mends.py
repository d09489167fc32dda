"""Red team of 218faee (the sandbox's unprivileged outside uid, session 47): what it left open.

- U1: queued signals count per outside user, and every sandbox of a host shares that user (the
  sandbox uid under a root trainer, the trainer's own otherwise): one program holding the inherited
  ``RLIMIT_SIGPENDING`` (96,367 blocked real-time signals) made a concurrent sandbox's
  ``timer_create`` and real-time ``pthread_kill`` fail with ``EAGAIN``. ``la_boot`` now caps it.
- U2: ``LIGHTNING_AGENTS_SANDBOX_UID`` accepted the uid of an account (``nobody``, a login user):
  that account's processes own the sandboxes' user namespaces (``PTRACE_SEIZE``, ``pidfd_getfd``
  of the reply pipe, ``SIGKILL``, ``/proc/PID/root``). Refused now, naming the variable.
- U3: bwrap reached through a link named otherwise (``bubblewrap -> bwrap``): the launcher exec'd
  the link's name in the target's folder, the probe failed and the sandbox silently stayed root.
- U4: the bind folder was made in any reachable ``TMPDIR``, one another user may own: that user can
  swap it for a symlink between the launcher's mounts and bwrap's opens and pick the interpreter
  the sandbox runs. Only folders root alone controls are used now.
- U5: a stream handed to the sandbox uid stayed its (with the mode the program gave it) after the
  call: a caller's own pipe (the trainer's stdout under docker) kept uid 2000000000. Given back now.
"""

from __future__ import annotations

import os
import pwd
import select
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from lightning_agents.rewards import run_python
from lightning_agents.rewards.isolation import Jail, Limits, isolation_report, sandbox_python

_REPORT = isolation_report()
needs_bwrap = pytest.mark.skipif(not _REPORT["bwrap_works"], reason="bubblewrap is unavailable here")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop applies under a root trainer only")
needs_drop = pytest.mark.skipif(
    bool(_REPORT.get("uid_drop_error")), reason=f"no uid drop here: {_REPORT.get('uid_drop_error')}"
)

_SIGNAL_HOG = (
    "import os, signal, time\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
    "try:\n"
    "    for _ in range(200000):\n"
    "        os.kill(os.getpid(), signal.SIGRTMIN)\n"
    "except OSError:\n"
    "    pass\n"
    "time.sleep(8)\n"
)
_TIMER_USER = (
    "import ctypes, os, signal, threading\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN + 1])\n"
    "signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN + 1)\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "timer = ctypes.c_void_p()\n"
    "if libc.timer_create(1, None, ctypes.byref(timer)) != 0:\n"
    "    raise OSError(ctypes.get_errno(), 'timer_create')\n"
    "print('timers ok')\n"
)


def _queued_signals_of_sandboxes() -> int:
    """The most signals queued to one sandboxed program's user, as the host's /proc shows it."""
    most = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"la_boot.py" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("SigQ:"):
                    most = max(most, int(line.split()[1].split("/")[0]))
        except (OSError, ValueError):
            continue
    return most


@needs_bwrap
def test_a_sandbox_holding_queued_signals_leaves_a_concurrent_one_its_timers():
    # U1: on 218faee the hog queues 96,367 and the victim's pthread_kill raises EAGAIN
    hog: dict[str, object] = {}
    thread = threading.Thread(target=lambda: hog.update(result=run_python(_SIGNAL_HOG, timeout_s=20)))
    thread.start()
    try:
        deadline, seen = time.monotonic() + 15, [0]
        # until the hog has queued all it can: at least 200, and no more for 0.3 s
        while time.monotonic() < deadline and not (seen[-1] >= 200 and seen[-4:] == seen[-1:] * 4):
            time.sleep(0.1)
            seen.append(_queued_signals_of_sandboxes())
        assert seen[-1] >= 200, f"the hog never queued its signals: {seen}"
        victim = run_python(_TIMER_USER, timeout_s=10)
    finally:
        thread.join()
    assert victim.stdout == "timers ok\n", victim.stderr[-500:]
    assert hog["result"].returncode == 0, hog["result"].stderr[-500:]


@needs_bwrap
@needs_root
def test_a_sandbox_uid_that_belongs_to_an_account_is_refused_by_name():
    # U2: on 218faee the account's uid was accepted (the sandbox then ran as, e.g., nobody)
    account = next((p for p in pwd.getpwall() if p.pw_uid not in (0, 65535)), None)
    if account is None:
        pytest.skip("no account other than root here")
    script = (
        "from lightning_agents.rewards.isolation import IsolationUnavailable, check_isolation\n"
        "try:\n    check_isolation('bwrap')\nexcept IsolationUnavailable as err:\n    print(err)\n"
        "else:\n    print('accepted')\n"
    )
    env = {**os.environ, "LIGHTNING_AGENTS_SANDBOX_UID": str(account.pw_uid)}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "LIGHTNING_AGENTS_SANDBOX_UID" in run.stdout and repr(account.pw_name) in run.stdout, run.stdout


@needs_bwrap
@needs_root
@needs_drop
def test_bwrap_through_a_link_of_another_name_still_drops_the_uid(tmp_path):
    # U3: on 218faee sandbox_ids was None ("[Errno 2] No such file or directory")
    link = tmp_path / "bubblewrap"
    link.symlink_to(os.path.realpath(str(_REPORT["bwrap"])))
    script = (
        "from lightning_agents.rewards import isolation\n"
        f"isolation._bwrap_path = lambda: {str(link)!r}\n"
        "report = isolation.isolation_report()\n"
        "print(report['sandbox_ids'], '|', report['uid_drop_error'])\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("|")[0].strip() == str(_REPORT["sandbox_ids"]), run.stdout


def _closed_above(path: str) -> bool:
    """Whether a folder above ``path`` is closed to other users (as ``/root`` is)."""
    return any(not os.stat(parent).st_mode & stat.S_IXOTH for parent in Path(os.path.realpath(path)).parents)


@needs_bwrap
@needs_root
@needs_drop
def test_the_bind_folder_is_never_made_in_a_temp_folder_another_user_owns():
    # U4: on 218faee la-sandbox-binds-* was made in the user's TMPDIR
    if not _closed_above(sys.base_prefix):
        pytest.skip("the interpreter needs no bind here, so no bind folder is made")
    theirs = tempfile.mkdtemp(prefix="la-redteam-user-tmp-", dir="/tmp")
    try:
        os.chown(theirs, 4242, 4242)
        os.chmod(theirs, 0o755)
        script = (
            "import os, sys\n"
            "from lightning_agents.rewards import run_python\n"
            "r = run_python('print(40 + 2)', timeout_s=20)\n"
            "print(r.stdout.strip(), sorted(os.listdir(sys.argv[1])))\n"
        )
        env = {**os.environ, "TMPDIR": theirs}
        run = subprocess.run(
            [sys.executable, "-c", script, theirs], capture_output=True, text=True, env=env, timeout=60
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["42", "[]"], run.stdout
    finally:
        for name in os.listdir(theirs):
            os.rmdir(os.path.join(theirs, name))
        os.rmdir(theirs)


@needs_bwrap
@needs_root
@needs_drop
def test_a_pipe_the_caller_keeps_is_given_back_with_its_mode_after_the_call():
    # U5: on 218faee the pipe stayed uid 2000000000 and 0o666 after the call
    read_end, write_end = os.pipe()
    before = os.fstat(read_end)
    code = "import os\nos.fchmod(1, 0o666)\nprint(oct(os.fstat(1).st_mode & 0o777), os.fstat(1).st_uid, flush=True)\n"
    jail = Jail("bwrap", Limits())
    try:
        jail.start(
            [sandbox_python(), "-I", "-S", "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.DEVNULL,
            pass_fds=(),
        )
        os.close(write_end)
        write_end = -1
        out = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the end of file must come: nothing else holds the pipe
            if select.select([read_end], [], [], 0.2)[0]:
                chunk = os.read(read_end, 4096)
                if not chunk:
                    break
                out += chunk
        else:
            raise AssertionError(f"no end of file on the sandbox's stdout; read {out!r}")
        jail.proc.wait(timeout=20)
    finally:
        if write_end >= 0:
            os.close(write_end)
        jail.close()
    assert out.split() == [b"0o666", b"65534"], out
    after = os.fstat(read_end)
    os.close(read_end)
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_uid,
        before.st_gid,
        stat.S_IMODE(before.st_mode),
    )
