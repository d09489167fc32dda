"""Crash-safe files: one atomic-write helper for every file the package writes (reports, caches,
memories, rollouts), and one reader for the logs it appends to line by line.

A reader never sees a half-written file: the content goes to a temporary file in the target's own
folder (same filesystem, so the rename is atomic), is flushed to disk, and only then replaces the
target. On any failure, KeyboardInterrupt included, the temporary file is removed. Append-only
logs (HFlow's traces, model calls and file-mode questions) can still end in a line a kill cut
short: :func:`read_appended` drops it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "atomic_write_text", "read_appended"]

log = logging.getLogger(__name__)


def _umask() -> int:
    """The process's umask (Python can only read it by setting it; it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)``, fsync the result, and move it onto ``path`` once it is complete.

    Args:
        path: the file to create or replace; missing parent folders are created.
        write: writes the whole content to the temporary path it is given.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        # mkstemp creates the file 0600; a plain open() would have given 0666 less the umask (or
        # kept the mode of the file replaced), which jobs of other users on a cluster can read.
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_appended(path: Path, parse: Callable[[str], Any], what: str) -> list[tuple[int, Any]]:
    """``(line number, parse(line) or the exception it raised)`` for each line of a log appended to
    line by line, without a last line a kill cut short.

    A last line that does not end in a newline and does not parse is what a kill mid-append
    leaves: it is dropped with a warning naming the file and line, and the file is rewritten
    without it, or the next append would be glued to it and lost with it. What any other bad line
    means is the caller's to decide.

    Args:
        path: the log.
        parse: reads one line; ``ValueError``, ``KeyError`` or ``TypeError`` mark it as bad.
        what: what a line holds, for the warning (``"trace"``).
    """
    text = path.read_text()
    lines = text.splitlines()
    out: list[tuple[int, Any]] = []
    for lineno, line in enumerate(lines, start=1):
        try:
            out.append((lineno, parse(line)))
        except (ValueError, KeyError, TypeError) as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                log.warning("%s:%d: dropped a %s cut short", path, lineno, what)
                atomic_write_text(path, "".join(x + "\n" for x in lines[:-1]))
                break
            out.append((lineno, exc))
    return out
