"""Review of the uid slots (a972f17): a uid is not handed on while its sandbox's cgroup is left
busy, and trainers that find the first lock folder unusable at different moments still share one.
No sandbox is started: the reaper and the folder choice are exercised on scratch folders."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from lightning_agents.rewards import isolation

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the lock folder must be root's; the uid drop is a root trainer's"
)


def _wait_reaped(path: str, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with isolation._reap_lock:
            if path not in isolation._reap_pending:
                return
        time.sleep(0.05)
    raise AssertionError(f"the reaper still holds {path} after {timeout_s} s")


def test_a_uid_is_not_given_back_while_its_cgroup_is_left_busy(tmp_path, monkeypatch):
    # a folder that cannot be removed stands for a cgroup whose killed process does not exit (D
    # state): its sandbox still has a process, so its uid must not go to another sandbox
    busy = tmp_path / "la-sbx-busy"
    busy.mkdir()
    (busy / "cgroup.procs").write_text("")
    monkeypatch.setattr(isolation, "REAP_GIVE_UP_S", 0.3)
    released = threading.Event()
    isolation._reap_later([str(busy)], then=released.set)
    _wait_reaped(str(busy))
    assert busy.exists()
    assert not released.is_set(), "the uid was handed back while a process of its sandbox was left"


def test_a_uid_is_given_back_once_its_cgroup_is_gone(tmp_path, monkeypatch):
    gone = tmp_path / "la-sbx-gone"
    gone.mkdir()
    monkeypatch.setattr(isolation, "REAP_GIVE_UP_S", 30.0)
    released = threading.Event()
    isolation._reap_later([str(gone)], then=released.set)
    _wait_reaped(str(gone))
    assert not gone.exists()
    assert released.wait(5)


@needs_root
def test_trainers_that_find_the_first_folder_unusable_at_different_moments_use_one(tmp_path, monkeypatch):
    # the first folder cannot be made while its parent is missing (a full or not yet mounted /run):
    # the trainer started then uses the second; one started once it can be made must see the same
    # locks, or their sandboxes run as one uid with no warning
    first = tmp_path / "run" / "uids"
    second = tmp_path / "shm" / "uids"
    second.parent.mkdir()
    monkeypatch.setattr(isolation, "SANDBOX_UID_DIRS", (str(first), str(second)))
    early = isolation._slot_dir()
    first.parent.mkdir()
    late = isolation._slot_dir()
    assert early == str(second)
    assert late == early


@needs_root
def test_the_first_folder_is_made_when_none_exists(tmp_path, monkeypatch):
    first = tmp_path / "run" / "uids"
    second = tmp_path / "shm" / "uids"
    first.parent.mkdir()
    second.parent.mkdir()
    monkeypatch.setattr(isolation, "SANDBOX_UID_DIRS", (str(first), str(second)))
    assert isolation._slot_dir() == str(first)
    assert oct(first.stat().st_mode & 0o777) == "0o700"
    assert not second.exists()


@needs_root
def test_a_squatted_existing_folder_is_passed_over(tmp_path, monkeypatch):
    first = tmp_path / "run" / "uids"
    second = tmp_path / "shm" / "uids"
    first.parent.mkdir()
    second.mkdir(parents=True, mode=0o755)  # someone else's, or too open: never used
    monkeypatch.setattr(isolation, "SANDBOX_UID_DIRS", (str(first), str(second)))
    assert isolation._slot_dir() == str(first)


# A trainer that is SIGKILLed (the OOM killer) 5 ms after it started a launcher: the launcher is
# still starting its interpreter, before bwrap sets its parent-death signal.
_DYING_TRAINER = r"""
import os, signal, subprocess, threading
from lightning_agents.rewards import isolation
from lightning_agents.rewards.sandbox import run_python
isolation.check_isolation("bwrap")
class Dying(subprocess.Popen):
    def __init__(self, args, *rest, **kw):
        super().__init__(args, *rest, **kw)
        if isolation._LAUNCHER in args:
            threading.Timer(0.005, os.kill, (os.getpid(), signal.SIGKILL)).start()
subprocess.Popen = Dying
run_python("import time; time.sleep(8)", timeout_s=20)
"""
_ORPHAN_UID = 1999960000


def _pids_of_uid(uid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = open(f"/proc/{name}/status").read()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid and "State:\tZ" not in status:
                found.append(int(name))
    return found


@needs_root
def test_a_sandbox_does_not_outlive_a_trainer_killed_while_its_launcher_starts():
    # its lock (the uid) goes with the trainer, so a sandbox left running would share its uid
    # with the next sandbox that takes it
    report = isolation.isolation_report()
    if not report["bwrap_works"] or report.get("uid_drop_error"):
        pytest.skip(f"no uid drop here: {report.get('uid_drop_error') or report.get('bwrap_error')}")
    assert not _pids_of_uid(_ORPHAN_UID), "a process of the test's uid runs already"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(isolation.__file__))))
    env = {**os.environ, "PYTHONPATH": root, isolation.SANDBOX_UID_ENV: f"{_ORPHAN_UID}:{_ORPHAN_UID}:1"}
    child = subprocess.Popen([sys.executable, "-c", _DYING_TRAINER], env=env, cwd=root)
    try:
        assert child.wait(timeout=60) == -9
        time.sleep(1.5)
        left = _pids_of_uid(_ORPHAN_UID)
        assert not left, f"the sandbox outlived its trainer as uid {_ORPHAN_UID}: {left}"
    finally:
        for pid in _pids_of_uid(_ORPHAN_UID):
            os.kill(pid, 9)
        time.sleep(0.5)
        for parent in (report["cgroups"] or {}).get("parents", {}).values():
            for name in os.listdir(parent):
                if name.startswith(f"la-sbx-{child.pid}-"):
                    try:
                        os.rmdir(os.path.join(parent, name))
                    except OSError:
                        pass
