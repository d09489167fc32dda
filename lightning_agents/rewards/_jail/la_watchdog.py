"""Memory watchdog of a sandbox that has no cgroup (a non-root trainer without a delegated subtree).

Invoked by the trusted side (``isolation.Jail``), outside the sandbox, as ``python -I -S
la_watchdog.py ROOT_PID CAP_PAGES INTERVAL_S [PIDFD]`` (``PIDFD``: a pidfd of ``ROOT_PID`` the
caller opened and passed; without it the watchdog opens one), until ``ROOT_PID`` exits or the caller
dies: every ``INTERVAL_S`` seconds it sums the resident memory of every process below ``ROOT_PID``
(the outer ``bwrap``); over ``CAP_PAGES``, it prints ``over`` and SIGKILLs them (the outer ``bwrap``
then reaps its child and exits; the caller kills it last). It is a process of its own rather than a
thread of the trainer: a thread samples only when it gets the GIL, and while the trainer sat in one
long C call (3.9 s) four sandboxed processes held 160 MiB past a 64 MiB cap and ran to their end.

Standard library only: it runs under ``-S``.
"""

import os
import select
import signal
import sys
import time


def descendants(root):
    """``root``'s descendants (not ``root``), read from ``/proc/PID/task/TID/children``."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid != root:
            found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return found


def resident_pages(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def exit_waiter(root, pidfd):
    """``wait(seconds)``: whether ``root`` has exited, after waiting up to ``seconds`` for that;
    ``None`` when ``root`` is already gone. ``pidfd`` is one the caller passed (else one is opened
    here): a PID names whichever process holds it now, and once the sandbox is reaped that may be
    any process of the machine; a pidfd names the sandbox only."""
    if pidfd is None:
        try:
            pidfd = os.pidfd_open(root)
        except ProcessLookupError:
            return None
        except OSError:  # no pidfds before Linux 5.3: /proc/ROOT, which a reused PID brings back

            def gone(seconds):
                time.sleep(seconds)
                return not os.path.exists(f"/proc/{root}")

            return None if gone(0) else gone
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)  # readable once the process has exited, reaped or not
    return lambda seconds: bool(poller.poll(seconds * 1000))


def main():
    root, cap_pages, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    trainer = os.getppid()
    exited = exit_waiter(root, int(sys.argv[4]) if len(sys.argv) > 4 else None)
    if exited is None:
        return
    while True:
        # gone once the sandbox's root exits (from its reaping on its PID may be another process's)
        # or when the trainer died (reparented): without this a trainer killed with SIGKILL left
        # one watchdog polling forever per sandbox it had open
        if os.getppid() != trainer or exited(0):
            return
        pids = descendants(root)
        if resident_pages(pids) > cap_pages:
            if exited(0):
                return  # the root exited while its processes were read: they may be another's now
            # said first: the caller may kill this process as soon as the sandbox is gone
            sys.stdout.write("over\n")
            sys.stdout.flush()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        exited(interval)  # the next round, or at once when the root exits


if __name__ == "__main__":
    main()
