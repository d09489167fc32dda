"""Reading a task's JSONL files: one file for every split, or a folder with ``<split>.jsonl``."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.json_text import JSONTextError, loads_json

__all__ = ["TaskDataError", "iter_jsonl", "open_text", "split_file"]


class TaskDataError(LightningAgentsError, ValueError):
    """A task's data file is missing or malformed; the message names the file and line."""


def split_file(path: str | Path, split: str) -> Path:
    """The file holding ``split``: ``path`` itself when it is a file, else ``path/<split>.jsonl[.gz]``."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        for name in (f"{split}.jsonl", f"{split}.jsonl.gz"):
            if (p / name).is_file():
                return p / name
        raise TaskDataError(f"{p}: no {split}.jsonl for split {split!r}")
    raise TaskDataError(f"task data {p} does not exist")


def open_text(path: Path) -> Any:
    """A data file opened for reading as UTF-8 text; ``.gz`` files are decompressed on the fly
    (benchmark files ship gzipped: HumanEval.jsonl.gz). Every reader of task, prompt, conversation
    and rollout files opens them here."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def iter_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, record)`` for each non-empty line of a JSONL file (gzipped when it ends in ``.gz``)."""
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = loads_json(line)
            except JSONTextError as exc:
                raise TaskDataError(f"{where}: invalid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise TaskDataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row
