"""all-linear on multimodal models (session 43): the projections from vision features into the text
stream are tower parts too (GIT's ``visual_projection``, Fuyu's ``vision_embed_tokens``, Idefics'
``perceiver_resampler``); each model is built from transformers' own config classes, shrunk, offline."""

from __future__ import annotations

import pytest
import torch

from lightning_agents.adapters import AdapterConfig, apply_adapters

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")


def _adapted(wrapped) -> list[str]:
    """The base-model layer names that carry a LoRA adapter."""
    return sorted(
        {
            name.removeprefix("base_model.model.").split(".lora_A")[0]
            for name, _ in wrapped.named_parameters()
            if ".lora_A." in name
        }
    )


def _text_step_leaves_no_adapter_without_gradient(wrapped, vocab_size: int) -> list[str]:
    """One text-only training step; the LoRA tensors it gave no gradient (what DDP stops on)."""
    torch.manual_seed(0)
    ids = torch.randint(3, vocab_size, (2, 6))
    wrapped.train()
    # The loss from the logits: GIT's own shifts the labels by the image tokens, absent here.
    logits = wrapped(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()).backward()
    return [name for name, p in wrapped.named_parameters() if p.requires_grad and p.grad is None]


def _tiny_git():
    """transformers' GitConfig (microsoft/git-base's shapes), shrunk. GitModel.forward (modeling_git.py)
    feeds ``visual_projection`` the image encoder's output only, under ``if pixel_values is not None``."""
    torch.manual_seed(0)
    return transformers.GitForCausalLM(
        transformers.GitConfig(
            vocab_size=120,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            vision_config={
                "hidden_size": 24,
                "intermediate_size": 48,
                "num_hidden_layers": 1,
                "num_attention_heads": 4,
                "image_size": 32,
                "patch_size": 16,
            },
        )
    )


def test_all_linear_on_git_leaves_its_visual_projection_frozen(caplog):
    """Before: ``git.visual_projection.visual_projection.0`` kept its adapter (only a warning named it)
    and a text step gave it no gradient. Now it is left out with the image encoder, and every adapter
    left gets a gradient from text."""
    with caplog.at_level("INFO", logger="lightning_agents.adapters"):
        wrapped = apply_adapters(_tiny_git(), AdapterConfig(rank=4))
    adapted = _adapted(wrapped)
    assert not [n for n in adapted if "visual_projection" in n or "image_encoder" in n], adapted
    assert adapted and all(n.startswith("git.encoder.layer.") for n in adapted)
    assert "under image_encoder, visual_projection stay frozen" in caplog.text
    assert "still adapts" not in caplog.text
    assert _text_step_leaves_no_adapter_without_gradient(wrapped, 120) == []


def _tiny_fuyu():
    """transformers' FuyuConfig (adept/fuyu-8b: Persimmon text model, no vision config), shrunk.
    FuyuModel.forward (modeling_fuyu.py) runs ``vision_embed_tokens`` on the image patches only."""
    torch.manual_seed(0)
    return transformers.FuyuForCausalLM(
        transformers.FuyuConfig(
            patch_size=4,
            num_channels=3,
            text_config={
                "model_type": "persimmon",
                "vocab_size": 120,
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 64,
                "max_position_embeddings": 64,
            },
        )
    )


def test_all_linear_on_fuyu_leaves_its_patch_projection_frozen(caplog):
    """Fuyu's config has a ``text_config`` and no ``vision_config``. Before: nothing was left out, so
    ``model.vision_embed_tokens`` (the patch projection, outside ``language_model``) kept its adapter
    and got no gradient from text. Now a config with a text config of its own marks a multimodal model."""
    with caplog.at_level("INFO", logger="lightning_agents.adapters"):
        wrapped = apply_adapters(_tiny_fuyu(), AdapterConfig(rank=4))
    adapted = _adapted(wrapped)
    assert "model.vision_embed_tokens" not in adapted
    assert adapted and all(n.startswith("model.language_model.layers.") for n in adapted), adapted
    assert "1 linear layer(s) under vision_embed_tokens stay frozen" in caplog.text
    assert _text_step_leaves_no_adapter_without_gradient(wrapped, 120) == []


def test_all_linear_on_idefics_leaves_the_perceiver_frozen_and_adapts_the_gated_cross_attention():
    """Idefics (v1) with its perceiver (HuggingFaceM4/idefics-9b sets use_resampler): IdeficsModel.forward
    (modeling_idefics.py) runs ``perceiver_resampler`` on the vision model's states only, so it goes
    with the vision model (before: its 12 linear layers here kept adapters). The gated cross-attention
    blocks stay adapted: their queries and MLP read the text stream."""
    from lightning_agents.adapter_towers import left_out_of_all_linear

    config = transformers.IdeficsConfig(
        vocab_size=120,
        additional_vocab_size=0,  # idefics-9b's 2 put a Linear (additional_fc) in its head, left out as before
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        use_resampler=True,
        perceiver_config={
            "resampler_depth": 1,
            "resampler_n_heads": 2,
            "resampler_head_dim": 8,
            "resampler_n_latents": 4,
        },
        vision_config={
            "embed_dim": 24,
            "image_size": 32,
            "patch_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "intermediate_size": 48,
        },
    )
    with torch.device("meta"):
        model = transformers.IdeficsForVisionText2Text(config)
    parts = {part for _, part in left_out_of_all_linear(model)}
    assert parts == {"vision_model", "perceiver_resampler"}
    adapted = _adapted(apply_adapters(model, AdapterConfig(rank=4)))
    assert not [n for n in adapted if "perceiver_resampler" in n or "vision_model" in n]
    assert "model.gated_cross_attn_layers.0.cross_attn.q_proj" in adapted
    assert "model.layers.1.mlp.down_proj" in adapted


def test_text_models_and_towers_outside_the_decoder_are_unchanged():
    """The new rules leave out nothing from a text-only model, and nothing beside Llava's
    ``language_model`` (its tower is outside the decoder: the sibling rule does not apply)."""
    from lightning_agents.adapter_towers import left_out_of_all_linear

    with torch.device("meta"):
        text_only = transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
            )
        )
        llava = transformers.LlavaForConditionalGeneration(transformers.LlavaConfig())
    assert left_out_of_all_linear(text_only) == []
    parts = {part for _, part in left_out_of_all_linear(llava)}
    assert parts == {"vision_tower", "multi_modal_projector"}


def test_a_text_only_drafter_with_a_text_config_of_its_own_keeps_its_projections():
    """Gemma 4's assistant drafter (AutoModelForCausalLM's ``gemma4_unified_assistant``) has a
    ``text_config`` but no ``language_model``: its ``pre_projection``/``post_projection`` beside
    ``model`` carry text hidden states, so the Fuyu rule must not leave them out."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from lightning_agents.adapter_towers import left_out_of_all_linear

    if "gemma4_unified_assistant" not in CONFIG_MAPPING:
        pytest.skip("this transformers has no Gemma 4 assistant")
    config = CONFIG_MAPPING["gemma4_unified_assistant"]()
    with torch.device("meta"):
        model = transformers.Gemma4UnifiedAssistantForCausalLM._from_config(config)
    assert left_out_of_all_linear(model) == []
