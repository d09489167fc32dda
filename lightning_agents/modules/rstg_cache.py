"""On-disk cache of the teacher's confidence per prompt (mean@k pass rate) and its best answer.

Pure Python (no torch, no Lightning). One JSON line per entry, appended as entries are computed,
so an interrupted run keeps what it paid for and a later run with the same teacher reuses it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

__all__ = ["TeacherCache", "teacher_cache_key"]


def teacher_cache_key(teacher: str, prompt: Any, k: int, max_new_tokens: int) -> str:
    """Stable key of one (teacher, prompt, sampling budget) triple."""
    blob = json.dumps([str(teacher), prompt, int(k), int(max_new_tokens)], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class TeacherCache:
    """``key -> {"pass_rate": float, "answer": shortest correct teacher completion or None, "k": int}``.

    Args:
        path: JSONL file; ``None`` keeps the cache in memory only.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            for lineno, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    self._entries[entry["key"]] = entry
                except (json.JSONDecodeError, KeyError):
                    # A line cut by a crash mid-write; the entry is recomputed.
                    continue

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry for ``key`` or ``None``."""
        return self._entries.get(key)

    def put(self, key: str, pass_rate: float, answer: str | None, k: int) -> dict[str, Any]:
        """Store and persist one entry."""
        if not 0.0 <= pass_rate <= 1.0:
            raise ValueError(f"pass rate must be in [0, 1], got {pass_rate}")
        entry = {"key": key, "pass_rate": float(pass_rate), "answer": answer, "k": int(k)}
        with self._lock:
            self._entries[key] = entry
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return entry
