"""Run an untrusted Python program in the sandbox and capture its output.

Used by HFlow's programmer and test operators (programs whose output is read) and by
:class:`~lightning_agents.rewards.code.ProgramOutputVerifier`. Scoring a program against tests goes
through :func:`lightning_agents.rewards.verdict.judge` instead, where the program's exit status and
output decide nothing.

Isolation comes from :mod:`lightning_agents.rewards.isolation` (``bwrap`` by default: namespaces,
seccomp, a whole-sandbox cgroup or equivalent; ``process`` only on explicit request). The program
runs as ``__main__`` from ``main.py`` in a private, size-capped working directory (``/tmp`` inside
the sandbox); its standard streams go to files capped at ``max_output_bytes``; when it ends or times
out, every process it started is killed.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

from lightning_agents.rewards.isolation import (
    Jail,
    Limits,
    check_isolation,
    sandbox_python,
    trainer_site_packages,
)
from lightning_agents.rewards.verdict import pass_fds_job

__all__ = ["SandboxResult", "run_python", "sandbox_capabilities"]


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
        stdout_is_utf8: the captured stdout was valid UTF-8 (else it was decoded with replacement).
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    killed: bool
    output_truncated: bool
    duration_s: float
    stdout_is_utf8: bool = True

    @property
    def ok(self) -> bool:
        """The program ran to completion and exited with status 0."""
        return self.returncode == 0 and not self.timed_out and not self.killed


def sandbox_capabilities() -> dict[str, object]:
    """What isolation this machine allows (see :func:`lightning_agents.rewards.isolation.isolation_report`)."""
    from lightning_agents.rewards.isolation import isolation_report

    return isolation_report()


def _read_capped(fh, limit: int) -> tuple[str, bool, bool]:
    fh.seek(0)
    data = fh.read(limit + 1)
    try:
        text, utf8 = data[:limit].decode("utf-8"), True
    except UnicodeDecodeError:
        text, utf8 = data[:limit].decode("utf-8", errors="replace"), False
    return text, len(data) >= limit, utf8


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: float | None = None,
    stdin: str | None = None,
    max_output_bytes: int = 1 << 20,
    max_processes: int = 32,
    isolation: str = "bwrap",
    site_packages: bool = False,
) -> SandboxResult:
    """Run ``code`` as a Python program in a sandbox and capture its output.

    Args:
        code: the program source (run as ``__main__``).
        timeout_s: wall-clock limit in seconds; the whole sandbox is killed when it expires.
        memory_mb: memory cap in MiB for the whole sandbox (and ``RLIMIT_AS`` per process).
        cpu_s: CPU-time limit per process in seconds (``RLIMIT_CPU``); default ``ceil(timeout_s) + 1``.
        stdin: text fed to the program's standard input (empty when ``None``).
        max_output_bytes: cap on stdout and on stderr, and on any file the program writes
            (``RLIMIT_FSIZE``); a program exceeding it is killed by ``SIGXFSZ``.
        max_processes: processes the sandbox may hold at once (stops fork bombs).
        isolation: ``"bwrap"`` (default) or the explicit weaker ``"process"``; see
            :mod:`lightning_agents.rewards.isolation`.
        site_packages: let the program import the trainer's installed packages (numpy, ...),
            bound read-only; by default it has the standard library only.

    Returns:
        A :class:`SandboxResult`; nothing the program does makes the call raise.

    Raises:
        IsolationUnavailable: the requested isolation cannot be set up on this machine.
        VerifierError: the sandbox itself failed to start.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if memory_mb < 64:
        raise ValueError(f"memory_mb must be at least 64 (the interpreter needs it), got {memory_mb}")
    check_isolation(isolation)
    cpu_limit = int(-(-(cpu_s if cpu_s is not None else timeout_s + 1) // 1))
    limits = Limits(memory_mb=memory_mb, max_processes=max_processes, cpu_s=cpu_limit, fsize_bytes=max_output_bytes)
    packages = trainer_site_packages() if site_packages else []
    job_fd = pass_fds_job(
        {"program": code, "limits": limits.boot_config(), "guard": isolation == "process", "sys_path": packages}
    )
    jail = Jail(isolation, limits, ro_paths=tuple(packages))
    timed_out = False
    start = time.monotonic()
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        fin.write((stdin or "").encode("utf-8"))
        fin.seek(0)
        try:
            jail.start(
                [sandbox_python(), "-S", "-s", "{boot}/la_boot.py", str(job_fd)],
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                pass_fds=(job_fd,),
            )
            os.close(job_fd)
            job_fd = -1
            try:
                jail.proc.wait(timeout=timeout_s)
            except Exception:  # noqa: BLE001 -- subprocess.TimeoutExpired
                timed_out = True
        finally:
            if job_fd >= 0:
                os.close(job_fd)
            jail.close()
        duration = time.monotonic() - start
        returncode = jail.proc.returncode
        # bwrap reports a child killed by signal N as exit status 128 + N.
        if isolation == "bwrap" and returncode is not None and returncode > 128:
            returncode = -(returncode - 128)
        stdout, trunc_out, utf8 = _read_capped(fout, max_output_bytes)
        stderr, trunc_err, _ = _read_capped(ferr, max_output_bytes)
    killed = timed_out or jail.memory_exceeded or (returncode is not None and returncode < 0)
    if timed_out:
        returncode = None
    return SandboxResult(returncode, stdout, stderr, timed_out, killed, trunc_out or trunc_err, duration, utf8)
