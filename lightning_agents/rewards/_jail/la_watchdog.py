"""Memory watchdog of a sandbox that has no cgroup (a non-root trainer without a delegated subtree).

Invoked by the trusted side (``isolation.Jail``), outside the sandbox, as
``python -I -S la_watchdog.py ROOT_PID CAP_PAGES INTERVAL_S``: every ``INTERVAL_S`` seconds it sums
the resident memory of every process below ``ROOT_PID`` (the outer ``bwrap``); over ``CAP_PAGES``,
it prints ``over`` and SIGKILLs them (the outer ``bwrap`` then reaps its child and exits; the
caller kills it last). It is a process of its own rather than a thread of the trainer: a thread
samples only when it gets the GIL, and while the trainer sat in one long C call (3.9 s) four
sandboxed processes held 160 MiB past a 64 MiB cap and ran to their end.

Standard library only: it runs under ``-S``.
"""

import os
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


def main():
    root, cap_pages, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    trainer = os.getppid()
    while True:
        # gone once the trainer reaped the sandbox (its PID may then be reused: nothing to watch)
        # or when the trainer died (reparented): without this a trainer killed with SIGKILL left
        # one watchdog polling forever per sandbox it had open
        if os.getppid() != trainer or not os.path.exists(f"/proc/{root}"):
            return
        pids = descendants(root)
        if resident_pages(pids) > cap_pages:
            # said first: the caller may kill this process as soon as the sandbox is gone
            sys.stdout.write("over\n")
            sys.stdout.flush()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        time.sleep(interval)


if __name__ == "__main__":
    main()
