"""The engine interface: the HF engine satisfies it; the vLLM engine refuses clearly without vLLM."""

from __future__ import annotations

import pytest

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine
from lightning_agents.rollout.base import GenerationEngine
from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine, vllm_available


def test_hf_engine_is_a_generation_engine():
    model, tok = load_model_and_tokenizer("embedded:student")
    assert isinstance(HFGenerationEngine(model, tok), GenerationEngine)


@pytest.mark.skipif(vllm_available(), reason="vllm is installed")
def test_vllm_engine_without_vllm_raises_clear_error():
    _, tok = load_model_and_tokenizer("embedded:student")
    with pytest.raises(ImportError, match="needs vllm"):
        VLLMGenerationEngine("embedded:student", tok)
