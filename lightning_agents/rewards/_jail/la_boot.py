"""Bootstrap run inside the sandbox before any untrusted code (see ``isolation.py``, ``sandbox.py``).

Invoked as ``python -S -s la_boot.py JOB_FD`` (in an environment the sandbox set) with a JSON job on that descriptor: the program, the
resource limits and whether to install the audit-hook guard. It lowers the rlimits (an unprivileged
process can lower but never raise them again), writes the program to ``main.py`` in the working
directory, installs the guard in the weaker ``process`` isolation and the standard-library shims
(:func:`install_stdlib_shims`: asyncio's loop on a pipe, since sockets are denied), and runs the
program as ``__main__``. Under ``bwrap`` isolation the guard is not needed: namespaces, seccomp and cgroups
hold whatever the program does to its own interpreter.

``la_candidate.py`` reuses :func:`read_job`, :func:`set_limits` and :func:`install_guard`.
Standard library only: it runs under ``-S``.
"""

import errno
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


# pending signals one sandbox may queue; far more than a program waits on, and a few hundred
# concurrent sandboxes fit under a typical inherited limit (RLIMIT_SIGPENDING, about 96,000)
SIGPENDING_CAP = 256


def set_limits(limits):
    mb = 1024 * 1024
    wanted = [
        (resource.RLIMIT_AS, limits["memory_mb"] * mb),
        (resource.RLIMIT_CPU, limits["cpu_s"]),
        (resource.RLIMIT_FSIZE, limits["fsize_bytes"]),
        (resource.RLIMIT_NPROC, limits["nproc"]),
        (resource.RLIMIT_NOFILE, limits["nofile"]),
        # no real-time scheduling and no raised priority: on a host whose hard limits allow them, a
        # SCHED_FIFO spinner would starve the trainer's threads on its core until RLIMIT_CPU
        (resource.RLIMIT_RTPRIO, 0),
        (resource.RLIMIT_NICE, 0),
        # no POSIX message queues (mq_open): their bytes are kernel memory in no process's RSS, which
        # is all the memory watchdog of a sandbox without a cgroup sees (msgget is denied by seccomp)
        (resource.RLIMIT_MSGQUEUE, 0),
        # queued signals count per outside user, and every sandbox shares that user (the sandbox
        # uid under a root trainer, else the trainer's own): one program holding the inherited
        # limit (96,367 blocked real-time signals) made every concurrent sandbox's timer_create
        # and sigqueue fail with EAGAIN (and a non-root trainer's own); this many leave the rest
        (resource.RLIMIT_SIGPENDING, SIGPENDING_CAP),
    ]
    for which, value in wanted:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))
    limit_core()


# RLIMIT_CORE of 1 byte: no core file (the kernel writes none under a page), and no core_pattern
# pipe helper either, which the kernel runs as root in the host's namespaces for each crash and
# which a limit of 0 does not stop (only exactly 1 does: fs/coredump.c, red team 46's W6).
CORE_LIMIT = 1


def limit_core():
    """Set ``RLIMIT_CORE`` to :data:`CORE_LIMIT` where it is not already. Under bwrap it already is
    (set before bwrap started, ``isolation.py``) and seccomp refuses changing it (``EPERM``, left
    as it is). In the ``process`` mode this sets it, as far as the hard limit allows (one of 0
    stays 0); a program there may lower it to 0 again (no seccomp: a weaker mode)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    value = CORE_LIMIT if hard == resource.RLIM_INFINITY else min(CORE_LIMIT, hard)
    if (soft, hard) == (value, value):
        return
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (value, value))
    except (OSError, ValueError):  # seccomp's EPERM (Python raises ValueError for it)
        pass


SOCKETPAIR_UNAVAILABLE = (
    "socket.socketpair is unavailable in the sandbox (no sockets of any family, see docs/sandbox.md); "
    "asyncio's event loop works without it, and multiprocessing.Pipe(duplex=False) or os.pipe() "
    "give a one-way channel"
)


class _PipeEnd:
    """One end of an ``os.pipe()`` with the socket methods asyncio's self-pipe uses."""

    def __init__(self, fd):
        self._fd = fd

    def fileno(self):
        return self._fd

    def setblocking(self, flag):
        os.set_blocking(self._fd, flag)

    def recv(self, size):
        return os.read(self._fd, size)

    def send(self, data):
        return os.write(self._fd, data)

    def close(self):
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def _make_self_pipe(self):
    # asyncio's selector loop wakes itself (call_soon_threadsafe, signals) through a socketpair,
    # which seccomp and the audit guard refuse; a pipe does the same job. Allowing
    # socketpair(AF_UNIX) instead was measured: socket buffers are memory outside every process's
    # RSS, and one process held 1.4 GiB of them under a 64 MiB watchdog cap (docs/sandbox.md).
    read_fd, write_fd = os.pipe()
    self._ssock, self._csock = _PipeEnd(read_fd), _PipeEnd(write_fd)
    self._ssock.setblocking(False)
    self._csock.setblocking(False)
    self._internal_fds += 1
    self._add_reader(self._ssock.fileno(), self._read_from_self)


def _patch_selector_events(module):
    loop = getattr(module, "BaseSelectorEventLoop", None)
    if loop is not None and hasattr(loop, "_make_self_pipe"):
        loop._make_self_pipe = _make_self_pipe


def _patch_socket(module):
    original = module.socketpair

    def socketpair(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except PermissionError as err:
            raise PermissionError(err.errno or errno.EPERM, SOCKETPAIR_UNAVAILABLE) from err

    socketpair.__doc__ = original.__doc__
    module.socketpair = socketpair


_PATCHES = {"asyncio.selector_events": _patch_selector_events, "socket": _patch_socket}


class _PatchLoader:
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        # get_source, get_resource_reader, ...: tracebacks and inspect ask the module's loader
        return getattr(self._loader, name)


class _PatchOnImport:
    """A ``sys.meta_path`` finder that patches a few standard-library modules once they are loaded.

    Lazy, so that programs that never import asyncio do not pay its 80 ms import.
    """

    def __init__(self, patches=None):
        self._patches = _PATCHES if patches is None else patches

    def find_spec(self, name, path=None, target=None):
        patch = self._patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchLoader(spec.loader, patch)
                return spec
        return None


def install_stdlib_shims(on_import=None):
    """Make asyncio run without sockets and say why ``socket.socketpair`` fails.

    Runs in the sandbox before the program; nothing here widens what the program may do (a program
    that undoes it only loses asyncio). ``on_import``: more ``{module name: function}`` to call with
    each of those modules once it is loaded (``la_candidate`` notes asyncio's ``CancelledError``
    as the standard library defines it).
    """
    patches = {**_PATCHES, **(on_import or {})}
    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport(patches))


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
    install_stdlib_shims()
    if job.get("guard"):
        install_guard(os.getcwd())
    sys.argv[:] = [program]
    exec(code, {"__name__": "__main__", "__file__": program, "__builtins__": __builtins__})  # noqa: S102 -- running the untrusted program is the point; the sandbox holds it


if __name__ == "__main__":
    main()
