"""Bootstrap run inside the sandbox child before any user code (see ``sandbox.py``).

Invoked as ``python -I _sandbox_boot.py CONFIG_JSON``. It applies resource limits, installs an audit hook that refuses network, process spawning, native-code loading
and file writes outside the working directory, and only then executes the user's program as
``__main__``. Audit hooks cannot be removed from Python code once installed, so the program
cannot undo them; rlimits, the separate uid and the network namespace (set up by the parent)
hold even against code that gets past the hook.

This file must stay importable with the standard library only: it runs under ``-I``.
"""

import json
import os
import resource
import sys


def _set_limits(cfg):
    mb = 1024 * 1024
    limits = [
        (resource.RLIMIT_AS, cfg["memory_mb"] * mb),
        (resource.RLIMIT_CPU, cfg["cpu_s"]),
        (resource.RLIMIT_FSIZE, cfg["fsize_bytes"]),
        (resource.RLIMIT_CORE, 0),
    ]
    if cfg.get("nproc") is not None:
        limits.append((resource.RLIMIT_NPROC, cfg["nproc"]))
    for which, value in limits:
        resource.setrlimit(which, (value, value))


def _install_guard(workdir):
    """Refuse side effects a verifier's candidate program has no business doing."""
    root = os.path.realpath(workdir)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    denied_prefixes = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "ctypes.", "pty.")
    denied = {"os.system", "os.kill", "os.killpg", "os.chroot"}
    path_events = {
        "os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.replace", "os.symlink", "os.link",
        "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile",
    }
    realpath = os.path.realpath
    fspath = os.fspath

    def inside(path):
        if isinstance(path, int):
            return True  # an already-open descriptor; it was checked when it was opened
        try:
            full = realpath(fspath(path))
        except (TypeError, ValueError, OSError):
            return False
        return full == root or full.startswith(root + os.sep)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = bool(mode) and any(c in mode for c in "wax+")
            writing = writing or (isinstance(flags, int) and bool(flags & write_flags))
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")
            return
        if event in path_events:
            for arg in args[:2]:
                if isinstance(arg, (str, bytes, os.PathLike)) and not inside(arg):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
            return
        if event in denied or event.startswith(denied_prefixes):
            raise PermissionError(f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)


def main():
    with open(sys.argv[1], encoding="utf-8") as fh:
        cfg = json.load(fh)
    program = cfg["program"]
    with open(program, encoding="utf-8") as fh:
        source = fh.read()
    # The parent already switched uid (setpriv); lowering limits needs no privilege.
    _set_limits(cfg)
    code = compile(source, program, "exec")
    _install_guard(cfg["workdir"])
    sys.argv[:] = [program]
    globals_ = {"__name__": "__main__", "__file__": program, "__builtins__": __builtins__}
    exec(code, globals_)


if __name__ == "__main__":
    main()
