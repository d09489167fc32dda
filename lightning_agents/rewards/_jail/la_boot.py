"""Bootstrap run inside the sandbox before any untrusted code (see ``isolation.py``, ``sandbox.py``).

Invoked as ``python -S -s la_boot.py JOB_FD`` (in an environment the sandbox set) with a JSON job on that descriptor: the program, the
resource limits and whether to install the audit-hook guard. It lowers the rlimits (an unprivileged
process can lower but never raise them again), writes the program to ``main.py`` in the working
directory, installs the guard in the weaker ``process`` isolation, and runs the program as
``__main__``. Under ``bwrap`` isolation the guard is not needed: namespaces, seccomp and cgroups
hold whatever the program does to its own interpreter.

``la_candidate.py`` reuses :func:`read_job`, :func:`set_limits` and :func:`install_guard`.
Standard library only: it runs under ``-S``.
"""

import json
import os
import resource
import sys


def read_job(fd):
    """The job the trusted side wrote to ``fd`` (then closed, so the program cannot reread it)."""
    chunks = []
    with os.fdopen(fd, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    return json.loads(b"".join(chunks).decode("utf-8"))


def set_limits(limits):
    mb = 1024 * 1024
    wanted = [
        (resource.RLIMIT_AS, limits["memory_mb"] * mb),
        (resource.RLIMIT_CPU, limits["cpu_s"]),
        (resource.RLIMIT_FSIZE, limits["fsize_bytes"]),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, limits["nproc"]),
        (resource.RLIMIT_NOFILE, limits["nofile"]),
        # no real-time scheduling and no raised priority: on a host whose hard limits allow them, a
        # SCHED_FIFO spinner would starve the trainer's threads on its core until RLIMIT_CPU
        (resource.RLIMIT_RTPRIO, 0),
        (resource.RLIMIT_NICE, 0),
        # no POSIX message queues (mq_open): their bytes are kernel memory in no process's RSS, which
        # is all the memory watchdog of a sandbox without a cgroup sees (msgget is denied by seccomp)
        (resource.RLIMIT_MSGQUEUE, 0),
    ]
    for which, value in wanted:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def install_guard(workdir):
    """A Python audit hook refusing network, spawning and writes outside ``workdir``.

    Only the weaker ``process`` isolation relies on it; Python code can get around audit hooks
    (see docs/sandbox.md), which is why ``bwrap`` isolation does not rest on it.
    """
    root = os.path.realpath(workdir)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    denied_prefixes = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "ctypes.", "pty.")
    denied = {"os.system", "os.kill", "os.killpg", "os.chroot", "os.fork", "os.forkpty", "os.mkfifo", "os.mknod"}
    path_events = {
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.rename",
        "os.replace",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "shutil.copyfile",
    }
    realpath = os.path.realpath
    fspath = os.fspath
    sep = os.sep
    str_startswith = str.startswith

    def inside(path):
        if type(path) is int:
            return True  # an already-open descriptor; it was checked when it was opened
        try:
            full = realpath(fspath(path))
        except (TypeError, ValueError, OSError):
            return False
        if type(full) is bytes:
            full = full.decode("utf-8", "surrogateescape")
        return full == root or str_startswith(full, root + sep)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = bool(mode) and any(c in mode for c in "wax+")
            writing = writing or (type(flags) is int and bool(flags & write_flags))
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")
            return
        if event in path_events:
            for arg in args[:2]:
                if type(arg) in (str, bytes) and not inside(arg):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
            return
        if event in denied or str_startswith(event, denied_prefixes):
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


def main():
    job = read_job(int(sys.argv[1]))
    program = os.path.join(os.getcwd(), "main.py")
    with open(program, "w", encoding="utf-8") as fh:
        fh.write(job["program"])
    set_limits(job["limits"])
    code = compile(job["program"], program, "exec")
    sys.path.extend(job.get("sys_path") or ())  # site_packages=True: the trainer's, read-only
    if job.get("guard"):
        install_guard(os.getcwd())
    sys.argv[:] = [program]
    exec(code, {"__name__": "__main__", "__file__": program, "__builtins__": __builtins__})  # noqa: S102 -- running the untrusted program is the point; the sandbox holds it


if __name__ == "__main__":
    main()
