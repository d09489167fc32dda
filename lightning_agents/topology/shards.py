"""Sharding curation by task: a stable hash of the task id decides each task's shard.

Curation is per task (every metric and the SFT pick need only that task's trials), so shards of
tasks are independent: any launcher (a SLURM array, Ray, Spark, a shell loop) curates each shard
on its own machine, and :func:`merge_shards` combines the per-shard results into the global
selections (the RL ranking and the size-matched baselines span all tasks). The hash is blake2b of
the task id, the same on every machine and Python process (``hash()`` is salted per process).
"""

from __future__ import annotations

import hashlib

from lightning_agents.errors import LightningAgentsError

__all__ = ["ShardError", "check_shard", "shard_of"]


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
