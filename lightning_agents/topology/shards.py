"""Sharding curation by task: a stable hash of the task id decides each task's shard.

Curation is per task (every metric and the SFT pick need only that task's trials), so shards of
tasks are independent: any launcher (a SLURM array, Ray, Spark, a shell loop) curates each shard
on its own machine, and :func:`merge_shards` combines the per-shard results into the global
selections (the RL ranking and the size-matched baselines span all tasks). The hash is blake2b of
the task id, the same on every machine and Python process (``hash()`` is salted per process).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_agents.errors import LightningAgentsError

__all__ = ["CURATION_VERSION", "ShardError", "check_shard", "check_shard_versions", "shard_of"]

# Bump when curation changes what it selects or what its payloads hold. Shard payloads carry it
# (a merge refuses shards of two versions) and TopoCurateDataModule's cache key is made with it
# (its CACHE_VERSION), so results of older code are never combined with or taken for newer ones.
CURATION_VERSION = 14


class ShardError(LightningAgentsError, ValueError):
    """Bad shard settings, or shard results that do not fit together."""


def shard_of(task_id: str, num_shards: int) -> int:
    """The shard (0-based) of ``task_id`` among ``num_shards``."""
    if num_shards <= 1:
        return 0
    digest = hashlib.blake2b(str(task_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_shards


def check_shard(num_shards: int, shard_index: int) -> None:
    """Raise :class:`ShardError` unless ``0 <= shard_index < num_shards``."""
    if num_shards < 1:
        raise ShardError(f"num_shards must be at least 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise ShardError(f"shard_index must be in [0, {num_shards}), got {shard_index}")


def check_shard_versions(payloads: Sequence[Mapping[str, Any]], sources: Sequence[str] = ()) -> None:
    """Raise :class:`ShardError` unless every shard payload was written by this curation code.

    Shards written by two code versions select by different rules (and a later code's per-task
    picks next to an earlier one's RL ranking fits neither), so a merge of them is no run at all.
    ``sources`` names the payloads (their files) in the message; without them, ``shard <index>``.
    """
    names = list(sources) + [f"shard {p.get('shard_index')}" for p in payloads[len(sources) :]]
    wrong = [(name, p.get("curation_version")) for name, p in zip(names, payloads)]
    wrong = [(name, version) for name, version in wrong if version != CURATION_VERSION]
    if not wrong:
        return
    listed = ", ".join(
        f"{name} (curation version {'none: written before shards carried one' if v is None else v})"
        for name, v in wrong
    )
    raise ShardError(
        f"cannot merge shards: {len(wrong)} of {len(payloads)} shard(s) were written by other curation code than this one "
        f"(curation version {CURATION_VERSION}): {listed}. Shards of different code versions select by different "
        "rules and cannot be merged; curate every shard again with this code (the same curate --num_shards N "
        "--shard_index i commands) and merge the new files"
    )
