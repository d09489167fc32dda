"""Sampling seeds derived from what is being sampled, not from a shared random stream.

A seed computed from ``(run seed, step, prompt)`` makes a prompt's samples the same whatever was
sampled before it (a resumed run, a teacher-statistics cache hit or miss, another data order or
rank) and the same for every engine that takes a per-request seed (HF ``generate`` through
:class:`~lightning_agents.rollout.HFGenerationEngine`, vLLM's ``SamplingParams.seed``).

Pure Python (no torch).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

__all__ = ["derive_seed", "prompt_identity", "run_seed"]

# vLLM and torch generators take non-negative 63-bit seeds.
_SEED_BITS = 63


def derive_seed(*parts: Any) -> int:
    """A non-negative 63-bit seed determined by ``parts`` (JSON-serialisable values)."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
    digest = hashlib.blake2b(blob, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - _SEED_BITS)


def prompt_identity(record: dict[str, Any]) -> str:
    """What identifies a prompt record for seeding: its ``id`` and its prompt (two records that
    share an id but not a prompt, or a prompt but not an id, get different seeds)."""
    return json.dumps([record.get("id"), record.get("prompt")], sort_keys=True, ensure_ascii=False, default=str)


def run_seed(seed: int | None) -> int:
    """``seed`` or, when ``None``, the seed given to Lightning's ``seed_everything``
    (``PL_GLOBAL_SEED``; ``seed_everything: N`` in a LightningCLI config), else 0."""
    if seed is not None:
        return int(seed)
    return int(os.environ.get("PL_GLOBAL_SEED", "0"))
