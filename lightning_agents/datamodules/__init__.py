"""DataModules: chat conversations for SFT, curated rollouts, RL prompt sets.

Names are imported on first use (PEP 562), so importing a pure part of this package, the
rollout readers in :mod:`lightning_agents.datamodules.trajectories`, does not import torch,
Lightning or transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ChatDataModule": "lightning_agents.datamodules.chat",
    "DataFormatError": "lightning_agents.datamodules.chat",
    "ConversationError": "lightning_agents.datamodules.conversations",
    "PromptDataModule": "lightning_agents.datamodules.prompts",
    "TopoCurateDataModule": "lightning_agents.datamodules.topocurate",
    "RolloutFormatError": "lightning_agents.datamodules.trajectories",
    "load_rollouts": "lightning_agents.datamodules.trajectories",
}

__all__ = [
    "ChatDataModule",
    "ConversationError",
    "DataFormatError",
    "PromptDataModule",
    "RolloutFormatError",
    "TopoCurateDataModule",
    "load_rollouts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_agents.datamodules' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
