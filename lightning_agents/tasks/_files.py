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
    """A data file opened for reading as UTF-8 text (a leading byte-order mark skipped); ``.gz`` files are decompressed on the fly
    (benchmark files ship gzipped: HumanEval.jsonl.gz). Every reader of task, prompt, conversation
    and rollout files opens them here."""
    # utf-8-sig: Windows tools (Notepad, PowerShell's Out-File -Encoding utf8) start UTF-8 files
    # with a byte-order mark, which JSON rejected at line 1; without one it reads as plain UTF-8
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return path.open(encoding="utf-8-sig")


# sanitized-mbpp.json, OlympiadBench's test.json: one JSON array, which a task reads line by line
_ARRAY = "a JSON array, not JSON Lines (one JSON object per line); write one record a line"


def _not_text(path: Path, lineno: int, exc: Exception) -> TaskDataError:
    """Why a task file could not be read as text, naming it: benchmark copies often come as Parquet
    (Hugging Face's datasets) or gzip, and the bare UnicodeDecodeError named neither the file nor
    the fix."""
    with path.open("rb") as fh:
        head = fh.read(4)
    gzipped = head[:2] == b"\x1f\x8b"
    if head == b"PAR1":
        kind = "a Parquet file; convert it to JSON Lines (pandas.read_parquet(...).to_json(..., orient='records', lines=True))"
    elif gzipped and path.suffix != ".gz":
        kind = "gzip-compressed; name it *.gz"
    elif gzipped and isinstance(exc, UnicodeDecodeError):
        kind = f"a gzip file whose contents are not UTF-8 text ({exc})"
    elif gzipped:
        kind = f"a broken gzip file ({exc})"
    elif path.suffix == ".gz":
        kind = "named .gz but not gzip-compressed; drop the .gz"
    else:
        kind = f"not UTF-8 text ({exc})"
    return TaskDataError(f"{path}:{lineno}: {kind}")


def iter_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, record)`` for each non-empty line of a JSONL file (gzipped when it ends in ``.gz``;
    a UTF-8 byte-order mark is skipped).

    Raises:
        TaskDataError: a line is not a JSON object, or the file is not JSON Lines text (a Parquet
            file, a gzip file not named ``.gz``, a JSON array, bytes that are not UTF-8), naming the
            file and line.
    """
    # Bytes are decoded one line at a time: a text stream decodes in 8 KiB chunks, and a bad byte
    # on line 60 was reported at the line the chunk began on (line 1).
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as fh:
        lineno = 0
        lines = iter(fh)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
                raise _not_text(path, lineno + 1, exc) from None
            # CR-only line ends (classic Mac OS, some exporters): the text-mode reader this replaced
            # split them as lines, and read as one line the file was refused as "Extra data".
            # JSON escapes a carriage return inside a string, so a bare one ends a line.
            body = raw.rstrip(b"\r\n")
            for piece in body.split(b"\r") if b"\r" in body else (raw,):
                lineno += 1
                yield from _record(path, lineno, piece)


def _record(path: Path, lineno: int, raw: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """The record of one line (none when it is blank)."""
    try:
        line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise _not_text(path, lineno, exc) from None
    if not line.strip():
        return
    where = f"{path}:{lineno}"
    try:
        row = loads_json(line)
    except JSONTextError as exc:
        if lineno == 1 and line.lstrip().startswith("["):
            raise TaskDataError(f"{where}: {_ARRAY}") from None
        raise TaskDataError(f"{where}: invalid JSON ({exc})") from None
    if not isinstance(row, dict):
        # a line holding a whole array of records; a JSONL whose lines are arrays of values
        # (`["a", 1]`) is JSON Lines, only not of objects
        if lineno == 1 and isinstance(row, list) and row and all(isinstance(r, dict) for r in row):
            raise TaskDataError(f"{where}: {_ARRAY}")
        raise TaskDataError(f"{where}: expected a JSON object (one record a line), got {type(row).__name__}")
    yield where, row
