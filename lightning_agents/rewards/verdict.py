"""A verdict on a candidate program that the candidate cannot forge.

:func:`judge` runs the candidate in a sandbox (:mod:`~lightning_agents.rewards.isolation`) and the
tests in a separate trusted harness process (``_jail/la_harness.py``) that calls the candidate's functions
through a pipe, receives results as plain data and decides pass/fail itself. The candidate never
sees the test source or the expected values; exiting early, signals, hooks, tracing, patched
builtins or custom objects only change the candidate's own process, which the verdict does not
trust. See docs/sandbox.md for the threat model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import (
    BOOT_DIR,
    Jail,
    Limits,
    check_isolation,
    sandbox_python,
    trainer_site_packages,
)

__all__ = ["MIN_HARNESS_MEMORY_MB", "REASONS", "Verdict", "check_module_name", "judge", "pass_fds_job"]

#: The smallest ``harness_memory_mb`` :func:`judge` accepts. The harness interpreter starts in about
#: 14 MiB of address space; with numpy, which every HumanEval+ and MBPP+ test imports, it maps about
#: 96 MiB (numpy 2.4, OpenBLAS at one thread) before the first reply arrives. Under that, a correct
#: program failed (the tests' import raised: a wrong answer) or the harness died without a verdict
#: (OpenBLAS exits when it cannot map its buffers).
MIN_HARNESS_MEMORY_MB = 128

# The harness's environment over the trainer's: one BLAS thread, two malloc arenas (see judge).
_HARNESS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}

# How a harness process dies when its address-space cap strikes inside the interpreter or a C
# library instead of raising MemoryError ("Cannot recover from MemoryErrors while normalizing
# exceptions" is an abort), and what it then says on its standard error.
_CAP_SIGNALS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS)
_CAP_WORDS = ("memoryerror", "cannot allocate memory", "out of memory", "failed to map segment", "memory allocation")

#: Every reason a verdict can carry (``pass`` is the only passing one).
REASONS = (
    "pass",
    "empty",
    "no_code",
    "compile_error",
    "load_error",
    "wrong_answer",
    "timeout",
    "candidate_died",
    "bad_reply",
    "output_flood",
    "memory",
    "reply_cpu",
    "bad_output",
    "runtime_error",
)


@dataclass(frozen=True)
class Verdict:
    """The trusted side's decision on one program.

    Attributes:
        passed: the tests ran to their end in the harness with the candidate answering.
        reason: one of :data:`REASONS`.
        detail: a short human-readable explanation (the failing assertion, the load error, ...).
        duration_s: wall-clock seconds of the whole check.
    """

    passed: bool
    reason: str
    detail: str = ""
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        # The detail quotes the candidate's own exception message, which can hold lone surrogates
        # that no UTF-8 log handler or JSON writer with ensure_ascii=False can write.
        if isinstance(self.detail, str):
            object.__setattr__(self, "detail", self.detail.encode("utf-8", "replace").decode("utf-8"))


def check_module_name(name: str) -> None:
    """Refuse a program ``__name__`` (``module_name`` of :func:`judge` and
    :class:`~lightning_agents.rewards.CodeVerifier`) that is empty or a standard-library module's.

    Raises:
        ValueError: as said; the program's functions and classes take the name as their
            ``__module__``, so a standard-library module's would make them look like its own.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"module_name must be a non-empty string, got {name!r}")
    if name != "__main__" and (name.split(".")[0] in sys.stdlib_module_names or name == "builtins"):
        raise ValueError(f"module_name {name!r} names a standard-library module; use another (e.g. 'solution')")


def pass_fds_job(job: dict) -> int:
    """A read-only descriptor holding ``job`` as JSON (an unlinked file: nothing on disk to read)."""
    fh = tempfile.TemporaryFile()  # noqa: SIM115 -- closed below once a second descriptor is open
    fh.write(json.dumps(job).encode("utf-8"))
    fh.flush()
    fd = os.open(f"/proc/self/fd/{fh.fileno()}", os.O_RDONLY)
    fh.close()
    return fd


def _output_file() -> tuple[int, object]:
    fh = tempfile.TemporaryFile()  # noqa: SIM115 -- the caller closes it after reading the output
    return fh.fileno(), fh


def judge(
    program: str,
    tests: str,
    *,
    isolation: str = "bwrap",
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_output_bytes: int = 1 << 16,
    max_processes: int = 32,
    max_reply_bytes: int = 1 << 20,
    harness_memory_mb: int = 1024,
    harness_cpu_s: int | None = None,
    site_packages: bool = False,
    module_name: str = "__main__",
) -> Verdict:
    """Run ``tests`` against the functions ``program`` defines; the harness decides.

    Args:
        program: the candidate's source (untrusted).
        tests: trusted test source, e.g. HumanEval's ``test`` plus ``check(entry_point)``; names it
            uses without defining them are looked up in the candidate. What a test runner would
            run of it also runs (``_jail/la_runner.py``): ``if __name__ == "__main__":`` blocks,
            ``unittest.main()``, ``test*`` functions and ``Test*`` classes it never names,
            ``TestCase`` classes nothing ran.
        isolation: ``"bwrap"`` (namespaces, seccomp, cgroups) or the weaker ``"process"``.
        timeout_s: wall-clock limit for loading the program and running all tests.
        memory_mb: memory cap of the candidate's sandbox (all its processes together).
        max_output_bytes: cap on what the candidate prints (and on any file it writes).
        max_processes: processes the candidate may hold at once.
        max_reply_bytes: largest single reply accepted from the candidate (decoded into Python
            objects it takes up to about 100 times as much in the harness).
        harness_memory_mb: address-space cap of the trusted harness process, which runs outside
            the sandbox's cgroup: a reply built to expand cannot take the trainer's memory. At least
            :data:`MIN_HARNESS_MEMORY_MB`. Where the cap strikes while the harness holds the
            candidate's replies, the verdict is a 0 (``memory``) even when the interpreter dies
            instead of raising ``MemoryError``.
        harness_cpu_s: CPU-time cap in seconds of the trusted harness process (``RLIMIT_CPU``;
            at least 1), which runs outside the sandbox's cgroup and its CPU limit: a reply whose
            values collide in hash (decoding and comparing it is quadratic) cannot take more host
            CPU than this. It covers the harness's whole life (start-up, the tests' own imports
            and work, decoding and comparing replies). Default: ``int(timeout_s) + 1``, what each
            process of the candidate gets and about what the single-threaded harness can spend
            before the tests' deadline; honest scoring takes far less (0.03 s for most HumanEval
            and MBPP+ rows, 2 s for MBPP+'s 1.4 MB replies checked against a reference function
            in the harness), so lower it to spend less on hostile replies. Where the cap strikes
            after the first call of the candidate the verdict is a 0 (``reply_cpu``); where it
            strikes before, a ``VerifierError``.
        site_packages: let the program import the trainer's installed packages (numpy, ...),
            bound read-only into the sandbox; by default it has the standard library only.
        module_name: the program's ``__name__``, in the namespace it runs in from its first
            statement (its text is not edited): ``"__main__"`` (the default) runs its ``if
            __name__ == "__main__":`` blocks; another name (``"solution"``) does not, as in
            human-eval's and evalplus's ``exec(program, {})``. The program's functions and classes
            take their ``__module__`` from it.

    Raises:
        ValueError: ``harness_memory_mb`` is below :data:`MIN_HARNESS_MEMORY_MB`,
            ``harness_cpu_s`` is below 1, or ``module_name`` is empty or a standard-library
            module's name (``"json"``, ``"builtins"``).
        VerifierError: the sandbox or the harness failed before the candidate ran, the trusted
            tests did not fit under ``harness_memory_mb`` or ``harness_cpu_s`` before calling the
            candidate, or they ran to their end without calling it where the candidate had no say
            in that (not a verdict).
    """
    if harness_memory_mb < MIN_HARNESS_MEMORY_MB:
        raise ValueError(
            f"harness_memory_mb must be at least {MIN_HARNESS_MEMORY_MB} (the test harness's interpreter "
            f"with numpy, which HumanEval+ and MBPP+ tests import, maps about 96 MiB), got {harness_memory_mb}"
        )
    if harness_cpu_s is not None and harness_cpu_s < 1:
        raise ValueError(f"harness_cpu_s must be at least 1 (RLIMIT_CPU counts whole seconds), got {harness_cpu_s}")
    check_module_name(module_name)
    start = time.monotonic()
    if not program.strip():
        return Verdict(False, "empty", "no program", 0.0)
    try:
        compile(program, "solution.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        return Verdict(False, "compile_error", f"{type(err).__name__}: {err}"[:300], time.monotonic() - start)
    check_isolation(isolation)
    limits = Limits(
        memory_mb=memory_mb, max_processes=max_processes, cpu_s=int(timeout_s) + 1, fsize_bytes=max_output_bytes
    )
    harness_cpu = int(harness_cpu_s) if harness_cpu_s is not None else limits.cpu_s
    packages = trainer_site_packages() if site_packages else []
    candidate_job = {
        "program": program,
        "limits": limits.boot_config(),
        "guard": isolation == "process",
        "sys_path": packages,
    }
    if module_name != "__main__":
        candidate_job["module_name"] = module_name
    job_fd = pass_fds_job(candidate_job)
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    out_fd, out_fh = _output_file()
    err_fd, err_fh = _output_file()
    harness_err_fd, harness_err_fh = _output_file()
    jail = Jail(isolation, limits, ro_paths=tuple(packages))
    harness = None
    try:
        with open(os.devnull, "rb") as devnull:
            jail.start(
                [sandbox_python(), "-S", "-s", "{boot}/la_candidate.py", str(job_fd), str(req_r), str(rep_w)],
                stdin=devnull,
                stdout=out_fd,
                stderr=err_fd,
                pass_fds=(job_fd, req_r, rep_w),
            )
        for fd in (job_fd, req_r, rep_w):
            os.close(fd)
        job_fd = req_r = rep_w = -1
        harness = subprocess.Popen(
            [sys.executable, "-I", "-S", str(BOOT_DIR / "la_harness.py"), str(req_w), str(rep_r)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # the interpreter's own messages only (the tests' prints go nowhere): why it died
            stderr=harness_err_fd,
            pass_fds=(req_w, rep_r),
            start_new_session=True,
            close_fds=True,
            # one BLAS thread: the tests need none, and per-thread buffers would count against the
            # harness's address-space cap if they import numpy. Two malloc arenas: glibc reserves
            # 64 MiB of address space for each thread's own arena (up to 8 per core), so under the
            # 1 GiB cap the tests could start 21 threads (18 with numpy); with two, 117 (106), each
            # then costing about its 8 MiB stack (docs/sandbox.md, "Threads")
            env={**os.environ, **_HARNESS_ENV},
        )
        os.close(req_w)
        os.close(rep_r)
        req_w = rep_r = -1
        job = json.dumps(
            {
                "tests": tests,
                "timeout_s": timeout_s,
                "max_frame": max_reply_bytes,
                "memory_mb": harness_memory_mb,
                "cpu_s": harness_cpu,
                # the trusted tests may import what the trainer can (evalplus's tests use numpy)
                "sys_path": [p for p in sys.path if p],
            }
        )
        try:
            raw, _ = harness.communicate(job.encode("utf-8"), timeout=timeout_s + 10)
        except subprocess.TimeoutExpired:
            harness.kill()
            harness.communicate()
            return Verdict(False, "timeout", "the tests did not finish", time.monotonic() - start)
    finally:
        for fd in (job_fd, req_r, rep_w, req_w, rep_r):
            if fd >= 0:
                os.close(fd)
        if harness is not None and harness.poll() is None:
            harness.kill()
            harness.wait()
        jail.close()
    duration = time.monotonic() - start
    result, phase = _harness_report(raw)
    if result is None:
        harness_err_fh.seek(max(0, os.fstat(harness_err_fd).st_size - 2000))
        harness_stderr = harness_err_fh.read(2000).decode("utf-8", errors="replace")
        harness_err_fh.close()
        out_fh.close()
        err_fh.close()
        return _harness_died(harness.returncode, phase, harness_stderr, harness_memory_mb, harness_cpu, duration)
    harness_err_fh.close()
    status = result["status"]
    out_size = os.fstat(out_fd).st_size + os.fstat(err_fd).st_size
    err_fh.seek(max(0, os.fstat(err_fd).st_size - 2000))  # the tail only: the size is the candidate's
    stderr_tail = err_fh.read(2000).decode("utf-8", errors="replace")
    out_fh.close()
    err_fh.close()
    if status == "sandbox_failed":
        raise VerifierError(
            f"the sandbox did not start: {result.get('detail')}; sandbox stderr: {stderr_tail.strip()[-500:]}"
        )
    if status == "bad_tests":
        raise VerifierError(str(result.get("detail")))
    if status == "harness_memory":
        raise VerifierError(
            f"the trusted tests ran out of the test harness's memory before calling the candidate "
            f"({result.get('detail')}): raise harness_memory_mb (now {harness_memory_mb})"
        )
    if status == "harness_cpu":
        raise VerifierError(
            f"the trusted tests used up the test harness's CPU time before calling the candidate "
            f"({result.get('detail')}): raise harness_cpu_s (now {harness_cpu})"
        )
    if status == "reply_cpu":
        detail = (
            f"the test harness reached its CPU cap of {harness_cpu} s (harness_cpu_s) after calling the "
            f"candidate (replies whose values collide in hash are quadratic to decode and compare)"
        )
        return Verdict(False, "reply_cpu", detail, duration)
    if status == "pass":
        return Verdict(True, "pass", f"{result.get('calls', 0)} calls", duration)
    if jail.memory_exceeded or jail.oom_killed:
        status = "memory"
    elif out_size >= max_output_bytes and status in ("candidate_died", "load_error"):
        status = "output_flood"
    elif status == "load_error" and "MemoryError" in str(result.get("detail")):
        status = "memory"
    elif status == "wrong_answer" and result.get("memory_error") is True:
        # the built-in MemoryError, raised inside a call: the candidate ran out of its memory cap
        # (a class of the program's own named MemoryError is no reason to relabel)
        status = "memory"
    if status not in REASONS:
        status = "wrong_answer"
    return Verdict(False, status, str(result.get("detail", ""))[:300], duration)


def _harness_report(raw: bytes) -> tuple[dict | None, str | None]:
    """The harness's verdict (None when it wrote none) and the last phase it reported."""
    verdict, phase = None, None
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if type(message) is dict and "phase" in message:
            phase = str(message["phase"])
        elif type(message) is dict and "status" in message:
            verdict = message
    return verdict, phase


def _harness_died(
    returncode: int | None, phase: str | None, stderr: str, cap_mb: int, cap_cpu_s: int, duration: float
) -> Verdict:
    """A verdict, or a VerifierError, for a harness that ended without writing one."""
    how = f"exit status {returncode}"
    if returncode is not None and returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"killed by signal {-returncode}"
    # The kernel's SIGKILL at the hard CPU limit, one second past the soft one: the harness was in
    # one C call that its SIGXCPU handler could not interrupt. judge's own kill at timeout_s + 10 s
    # returns a timeout before this; only the host's OOM killer would also end it so.
    if returncode is not None and -returncode in (signal.SIGKILL, signal.SIGXCPU):
        if phase == "candidate":
            detail = f"the test harness was {how} at its CPU cap of {cap_cpu_s} s (harness_cpu_s) after calling the candidate"
            return Verdict(False, "reply_cpu", detail, duration)
        raise VerifierError(
            f"the test harness was {how} before calling the candidate (its CPU cap, unless the host's "
            f"OOM killer did it): if the trusted tests need more CPU, raise harness_cpu_s (now {cap_cpu_s})"
        )
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = next((line for line in lines if any(w in line.lower() for w in _CAP_WORDS)), "")
    by_cap = bool(said) or (returncode is not None and -returncode in _CAP_SIGNALS)
    if by_cap and phase == "candidate":
        # It died holding a frame of the candidate's: the cap struck where Python cannot raise
        # MemoryError (an abort while normalizing one). A dodge of the 0 if it were "no verdict".
        detail = f"the test harness died ({how}) at its memory cap of {cap_mb} MiB holding the candidate's replies"
        return Verdict(False, "memory", f"{detail}: {said}"[:300] if said else detail, duration)
    hint = f"; if its memory cap was too small, raise harness_memory_mb (now {cap_mb})" if by_cap else ""
    tail = " | ".join(lines[-4:])[-500:]
    raise VerifierError(f"the test harness ended without a verdict ({how}){hint}; its stderr: {tail or '(empty)'}")
