"""Run untrusted Python in a sandboxed subprocess.

Used by :class:`~lightning_agents.rewards.code.CodeVerifier` (candidate programs from RL rollouts)
and by HFlow's programmer operator. Layers, outermost first:

1. ``unshare`` (when it works on this machine): a fresh network namespace (no interfaces but a
   down loopback, so no network at all) and a fresh PID namespace whose init is killed with the
   parent, so a program that double-forks or calls ``setsid`` still dies with the sandbox.
2. A fresh temporary working directory (also ``HOME`` and ``TMPDIR``), removed afterwards.
3. In the child, before user code: resource rlimits (address space, CPU seconds, file size, number
   of processes, no core dumps); when started as root, a dedicated unprivileged uid per run (via
   ``setpriv``, keeping only the read-only ``DAC_READ_SEARCH`` capability so the interpreter and its
   standard library stay importable), so the process limit is per sandbox and the file system is
   read-only outside the working directory;
   and an audit hook that refuses sockets, spawning other programs, ``ctypes`` and writes outside
   the working directory.
4. In the parent: stdout/stderr go to files capped by the file-size limit (so a program printing
   forever cannot fill memory), a wall-clock timeout, then ``SIGKILL`` to the whole process group
   (and, as root, to every process of the sandbox uid).

This is defence in depth for verifier workloads, not a security boundary against a determined
attacker with kernel exploits; run fully untrusted code in a container or VM as well.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxResult", "run_python", "sandbox_capabilities"]

_BOOT = str(Path(__file__).with_name("_sandbox_boot.py"))
# Unprivileged uids handed out to sandboxes when running as root; far above any real account.
_UID_BASE = 61000
_UID_SPAN = 3000
_uid_counter = itertools.count()
_uid_lock = threading.Lock()
_capabilities: dict[str, object] | None = None
_SETPRIV_CAPS = ["--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search", "--bounding-set=-all,+dac_read_search"]


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run.

    Attributes:
        returncode: the program's exit status (negative: killed by that signal); ``None`` when
            it never finished.
        stdout: captured standard output (decoded, at most ``max_output_bytes``).
        stderr: captured standard error (decoded, at most ``max_output_bytes``).
        timed_out: the wall-clock timeout expired and the sandbox was killed.
        killed: the program ended by a signal (timeout kill, CPU limit, file-size limit, ...).
        output_truncated: stdout or stderr reached the output cap.
        duration_s: wall-clock seconds.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    killed: bool
    output_truncated: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        """The program ran to completion and exited with status 0."""
        return self.returncode == 0 and not self.timed_out and not self.killed


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def sandbox_capabilities() -> dict[str, object]:
    """What isolation this machine allows (probed once): the ``unshare`` prefix and uid switching."""
    global _capabilities
    if _capabilities is None:
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
        prefix: list[str] = []
        unshare = shutil.which("unshare")
        if unshare:
            base = [unshare] + ([] if is_root else ["--map-root-user"])
            for flags in (["--net", "--pid", "--fork", "--kill-child"], ["--net"]):
                if _probe(base + flags + ["true"]):
                    prefix = base + flags
                    break
        # As root the child runs under a dedicated uid. The interpreter may live under a
        # directory only root can search (e.g. /root/.pyenv), so setpriv keeps exactly one
        # capability, DAC_READ_SEARCH (read-only access); without setpriv the child cannot import
        # the standard library after switching, so it stays root (rlimits and the guard still apply).
        setpriv = shutil.which("setpriv") if is_root else None
        if setpriv and not _probe([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *_SETPRIV_CAPS, "true"]):
            setpriv = None
        _capabilities = {"unshare": prefix, "switch_uid": bool(setpriv), "setpriv": setpriv}
    return _capabilities


def _next_uid() -> int:
    with _uid_lock:
        return _UID_BASE + (os.getpid() * 7 + next(_uid_counter)) % _UID_SPAN


def _kill_uid(uid: int) -> None:
    """SIGKILL every process owned by ``uid`` (sandbox uids are used by nothing else)."""
    for _ in range(3):
        found = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found = True
                    os.kill(int(entry), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        if not found:
            return
        time.sleep(0.01)


def _read_capped(path: Path, limit: int) -> tuple[str, bool]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        return "", False
    return data[:limit].decode("utf-8", errors="replace"), len(data) >= limit


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: float | None = None,
    stdin: str | None = None,
    max_output_bytes: int = 1 << 20,
    max_processes: int = 32,
    python: str | None = None,
) -> SandboxResult:
    """Run ``code`` as a Python program in a sandbox and capture its output.

    Args:
        code: the program source (run as ``__main__``).
        timeout_s: wall-clock limit in seconds; the whole sandbox is killed when it expires.
        memory_mb: address-space limit (``RLIMIT_AS``) in MiB; allocations beyond it raise
            ``MemoryError`` in the program.
        cpu_s: CPU-time limit in seconds (``RLIMIT_CPU``); default ``ceil(timeout_s) + 1``.
        stdin: text fed to the program's standard input (empty when ``None``).
        max_output_bytes: cap on stdout and on stderr, and on any file the program writes
            (``RLIMIT_FSIZE``); a program exceeding it is killed by ``SIGXFSZ``.
        max_processes: ``RLIMIT_NPROC`` for the sandbox (enforced per sandbox when started as
            root, which switches to a dedicated uid); stops fork bombs.
        python: interpreter to run; defaults to the current one.

    Returns:
        A :class:`SandboxResult`; the call itself never raises for anything the program does.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if memory_mb < 64:
        raise ValueError(f"memory_mb must be at least 64 (the interpreter needs it), got {memory_mb}")
    caps = sandbox_capabilities()
    cpu_limit = int(math.ceil(cpu_s if cpu_s is not None else timeout_s + 1))
    uid = _next_uid() if caps["switch_uid"] else None
    base = Path(tempfile.mkdtemp(prefix="la-sandbox-"))
    try:
        # base/ holds the config and the output files (root-only when we switch uid); the program
        # sees only base/work.
        work = base / "work"
        work.mkdir()
        program = work / "main.py"
        program.write_text(code, encoding="utf-8")
        if uid is not None:
            os.chown(work, uid, uid)
            os.chown(program, uid, uid)
        cfg = {
            "program": str(program),
            "workdir": str(work),
            "memory_mb": int(memory_mb),
            "cpu_s": cpu_limit,
            "fsize_bytes": int(max_output_bytes),
            "uid": uid,
            "nproc": int(max_processes) if uid is not None else None,
        }
        cfg_path = base / "config.json"
        cfg_path.write_text(json.dumps(cfg))
        (base / "stdin").write_text(stdin or "", encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "TMPDIR": str(work),
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = list(caps["unshare"])
        if uid is not None:
            cmd += [str(caps["setpriv"]), f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *_SETPRIV_CAPS]
        cmd += [python or sys.executable, "-I", _BOOT, str(cfg_path)]
        start = time.monotonic()
        timed_out = False
        with open(base / "stdin", "rb") as fin, open(base / "stdout", "wb") as fout, open(base / "stderr", "wb") as ferr:
            proc = subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=work, env=env,
                                    start_new_session=True, close_fds=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # Kill the group even after a normal exit: the program may have left children.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                if uid is not None:
                    _kill_uid(uid)
                proc.wait()
        duration = time.monotonic() - start
        returncode = proc.returncode
        stdout, trunc_out = _read_capped(base / "stdout", max_output_bytes)
        stderr, trunc_err = _read_capped(base / "stderr", max_output_bytes)
        killed = timed_out or (returncode is not None and returncode < 0)
        if timed_out:
            returncode = None
        return SandboxResult(returncode, stdout, stderr, timed_out, killed, trunc_out or trunc_err, duration)
    finally:
        shutil.rmtree(base, ignore_errors=True)
