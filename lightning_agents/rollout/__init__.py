"""Batched generation: one path for evaluation, RL rollouts, agent loops and HFlow backbones."""

from lightning_agents.rollout.base import GenerationEngine
from lightning_agents.rollout.hf_engine import (
    GenerationOutput,
    HFGenerationEngine,
    SamplingConfig,
)
from lightning_agents.rollout.tool_calls import parse_tool_calls

__all__ = ["GenerationEngine", "GenerationOutput", "HFGenerationEngine", "SamplingConfig", "parse_tool_calls"]
