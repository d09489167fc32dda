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

__all__ = ["TeacherCache", "model_fingerprint", "teacher_cache_key"]


def teacher_cache_key(teacher: str, prompt: Any, settings: dict[str, Any]) -> str:
    """Stable key of one teacher and prompt under ``settings``: everything that changes the
    teacher's samples (k, length, temperature, top-p, dtype, chat template arguments, tools, the
    weights) or how they are scored (reference, verifier, success threshold)."""
    blob = json.dumps([str(teacher), prompt, settings], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def model_fingerprint(name_or_path: str) -> str:
    """Names, sizes and modification times of a local model folder's config and weight files (the
    name alone for a hub id), so that retraining a local teacher in place invalidates its cached
    statistics: a retrained model of the same shape has the same file sizes. A copy or a fresh
    checkout also changes the times, which only costs a recomputation."""
    from lightning_agents.models import resolve_model_path

    path = Path(resolve_model_path(str(name_or_path)))
    if not path.is_dir():
        return str(name_or_path)
    parts = []
    for f in sorted(path.iterdir()):
        if f.suffix in (".safetensors", ".bin", ".json") and f.is_file():
            stat = f.stat()
            parts.append(f"{f.name}:{stat.st_size}:{stat.st_mtime_ns}")
    config = path / "config.json"
    if config.is_file():
        parts.append(hashlib.sha256(config.read_bytes()).hexdigest()[:16])
    return ";".join(parts)


class TeacherCache:
    """``key -> {"pass_rate": float or None, "answer": shortest correct teacher completion or None,
    "k": samples drawn, "verified": samples the verifier could decide}``.

    Args:
        path: JSONL file; ``None`` keeps the cache in memory only.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            for _lineno, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
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

    def put(
        self, key: str, pass_rate: float | None, answer: str | None, k: int, verified: int | None = None
    ) -> dict[str, Any]:
        """Store and persist one entry (``pass_rate`` ``None``: no sample could be verified)."""
        if pass_rate is not None and not 0.0 <= pass_rate <= 1.0:
            raise ValueError(f"pass rate must be in [0, 1], got {pass_rate}")
        entry = {
            "key": key,
            "pass_rate": None if pass_rate is None else float(pass_rate),
            "answer": answer,
            "k": int(k),
            "verified": int(k if verified is None else verified),
        }
        with self._lock:
            self._entries[key] = entry
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return entry
