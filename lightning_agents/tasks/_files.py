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


# sanitized-mbpp.json, OlympiadBench's test.json: one JSON array, which a task reads line by line
_ARRAY = "a JSON array, not JSON Lines (one JSON object per line); write one record a line"


def _not_text(path: Path, lineno: int, exc: Exception) -> TaskDataError:
    """Why a task file could not be read as text, naming it: benchmark copies often come as Parquet
    (Hugging Face's datasets) or gzip, and the bare UnicodeDecodeError named neither the file nor
    the fix."""
    with path.open("rb") as fh:
        head = fh.read(4)
    if head == b"PAR1":
        kind = "a Parquet file; convert it to JSON Lines (pandas.read_parquet(...).to_json(..., orient='records', lines=True))"
    elif head[:2] == b"\x1f\x8b":
        kind = "gzip-compressed; name it *.gz" if path.suffix != ".gz" else f"a broken gzip file ({exc})"
    elif path.suffix == ".gz":
        kind = "named .gz but not gzip-compressed; drop the .gz"
    else:
        kind = f"not UTF-8 text ({exc})"
    return TaskDataError(f"{path}:{lineno}: {kind}")


def iter_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, record)`` for each non-empty line of a JSONL file (gzipped when it ends in ``.gz``).

    Raises:
        TaskDataError: a line is not a JSON object, or the file is not JSON Lines text (a Parquet
            file, a gzip file not named ``.gz``, a JSON array), naming the file and line.
    """
    with open_text(path) as fh:
        lineno = 0
        lines = iter(fh)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except (UnicodeDecodeError, OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
                raise _not_text(path, lineno + 1, exc) from None
            lineno += 1
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = loads_json(line)
            except JSONTextError as exc:
                if lineno == 1 and line.lstrip().startswith("["):
                    raise TaskDataError(f"{where}: {_ARRAY}") from None
                raise TaskDataError(f"{where}: invalid JSON ({exc})") from None
            if not isinstance(row, dict):
                if lineno == 1 and isinstance(row, list):
                    raise TaskDataError(f"{where}: {_ARRAY}")
                raise TaskDataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row
