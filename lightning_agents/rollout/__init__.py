"""Batched generation: one path for evaluation, RL rollouts, agent loops and HFlow backbones.

Names are imported on first use, so that torch-free users of the package (HFlow's operators
import the agent turn from here) do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GenerationEngine": "lightning_agents.rollout.base",
    "GenerationOutput": "lightning_agents.rollout.hf_engine",
    "HFGenerationEngine": "lightning_agents.rollout.hf_engine",
    "SamplingConfig": "lightning_agents.rollout.hf_engine",
    "parse_tool_calls": "lightning_agents.rollout.tool_calls",
}

__all__ = ["GenerationEngine", "GenerationOutput", "HFGenerationEngine", "SamplingConfig", "parse_tool_calls"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
