"""What a data source string names: a local file or folder, or a Hugging Face dataset id.

``data/train.jsonl`` and ``org/name`` both contain a slash; a name with a data file's extension is
a local file, and a missing one is an error here, not a 30-second attempt to download a dataset
called ``data/nope.jsonl`` that ends in a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning_agents.tasks._files import open_text

__all__ = ["DATA_SUFFIXES", "cache_home", "open_text", "require_local_file"]

DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".arrow", ".txt", ".gz")


def require_local_file(source: str, what: str) -> None:
    """Raise ``FileNotFoundError`` when ``source`` names a data file (by its extension) that does not exist.

    Args:
        source: the configured source.
        what: what the source is, for the message (e.g. ``"the `train` prompt source"``).
    """
    path = Path(source)
    if path.suffix.lower() in DATA_SUFFIXES and not path.exists():
        raise FileNotFoundError(f"{what} {source!r} does not exist (a data file, by its extension, not a dataset id)")


def cache_home(kind: str) -> Path:
    """``$XDG_CACHE_HOME/lightning_agents/<kind>`` (``~/.cache/...`` when the variable is unset):
    the one root of the package's caches of derived data (tokenized rows, curation results).

    Args:
        kind: the cache's folder, e.g. ``"tokenized"``.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lightning_agents" / kind
