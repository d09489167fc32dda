"""One atomic-write helper for every file the package writes (reports, caches, memories, rollouts).

A reader never sees a half-written file: the content goes to a temporary file in the target's own
folder (same filesystem, so the rename is atomic), is flushed to disk, and only then replaces the
target. On any failure, KeyboardInterrupt included, the temporary file is removed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_text"]


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
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
