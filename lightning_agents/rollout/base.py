"""The generation-engine interface RL modules sample through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from lightning_agents.rollout.hf_engine import GenerationOutput, SamplingConfig

__all__ = ["GenerationEngine"]


@runtime_checkable
class GenerationEngine(Protocol):
    """Anything that samples G completions per prompt and returns a :class:`GenerationOutput`.

    Implementations: :class:`~lightning_agents.rollout.HFGenerationEngine` (always available) and
    :class:`~lightning_agents.rollout.vllm_engine.VLLMGenerationEngine` (when vLLM is installed).
    """

    tokenizer: object

    def render(self, prompt, tools=None) -> str:
        """The prompt text a message list renders to."""

    def generate(
        self,
        prompts: Sequence,
        num_samples: int = 1,
        sampling: SamplingConfig | None = None,
        tools=None,
        seeds: Sequence[int] | None = None,
    ) -> GenerationOutput:
        """Sample ``num_samples`` completions per prompt (rows of a prompt contiguous); with
        ``seeds`` (one per prompt) each prompt's samples come from a generator of its own seed."""
