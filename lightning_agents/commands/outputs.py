"""Checks of a tool's output path, made before any model loads or any work starts.

A rollout or generate run whose ``--output`` was a folder, or lay under a file, did all its work
and then failed with a traceback from the atomic write; these checks say so first, in one line.
"""

from __future__ import annotations

from pathlib import Path

from lightning_agents.errors import LightningAgentsError

__all__ = ["OutputPathError", "check_output_file", "check_output_folder"]


class OutputPathError(LightningAgentsError, ValueError):
    """An output path the tool cannot write: a folder where a file goes, a file where a folder goes,
    or a path under a file."""


def check_output_file(setting: str, path: str | Path) -> None:
    """Refuse a file ``path`` that is a folder or lies under a file (``setting`` names it in the message)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise OutputPathError(f"{setting}: {path} is a folder; name the file to write (e.g. {Path(path) / 'out.json'})")
    _check_parents(setting, path, target)


def check_output_folder(setting: str, path: str | Path) -> None:
    """Refuse a folder ``path`` that is a file or lies under a file."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise OutputPathError(f"{setting}: {path} is a file; this writes a folder there")
    _check_parents(setting, path, target)


def _check_parents(setting: str, path: str | Path, target: Path) -> None:
    # The nearest existing parent is the one mkdir would stop at: a file there cannot hold the output.
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputPathError(f"{setting}: {path} cannot be written: {parent} is a file, not a folder")
            return
