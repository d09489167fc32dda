"""all-linear on multimodal models, session 44: Mllama's cross-attention layers, which a text-only
forward skips, and T5Gemma 2's vision tower inside its encoder.

Models are built offline from transformers' own config classes at small sizes (no download).
"""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

import lightning_agents.adapters as adapters  # noqa: E402
from lightning_agents.adapters import AdapterConfig, apply_adapters, check_adapter_checkpoint  # noqa: E402

LOGGER = "lightning_agents.adapters"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    # The cross-attention warning is given once a process; each test starts with none given.
    monkeypatch.setattr(adapters, "_WARNED", set(), raising=False)


def _tiny_mllama_config(vocab_size: int = 128):
    """transformers' MllamaConfig (Llama 3.2 Vision), shrunk: 4 text layers, 1 and 3 cross-attention."""
    return transformers.MllamaConfig(
        text_config=dict(
            vocab_size=vocab_size,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            cross_attention_layers=[1, 3],
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_global_layers=1,
            attention_heads=4,
            image_size=32,
            patch_size=16,
            vision_output_dim=64,
            intermediate_layers_indices=[0],
        ),
        image_token_index=vocab_size - 1,
    )


def _mllama(kind: str):
    torch.manual_seed(0)
    config = _tiny_mllama_config()
    if kind == "conditional":
        return transformers.MllamaForConditionalGeneration(config)
    # What lightning-agents' load_model gets for a Llama-3.2-Vision checkpoint: AutoModelForCausalLM
    # maps mllama to MllamaForCausalLM, the text model alone (no vision model to feed the layers).
    model = transformers.AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == "MllamaForCausalLM"
    return model


def _without_gradient_after_a_text_step(wrapped) -> list[str]:
    ids = torch.randint(3, 120, (2, 6))
    wrapped(input_ids=ids, labels=ids).loss.backward()
    return [n for n, p in wrapped.named_parameters() if p.requires_grad and p.grad is None]


def _adapted(wrapped) -> list[str]:
    return sorted(wrapped.targeted_module_names)


@pytest.mark.parametrize("kind", ["conditional", "causal"])
def test_all_linear_on_mllama_leaves_the_cross_attention_layers_out_and_every_adapter_trains_on_text(kind, caplog):
    """MllamaTextModel.forward skips a cross-attention block (its cross_attn and its MLP) without
    image states, so on HEAD a text-only step left 28 of the 56 LoRA tensors here without a gradient
    (20% of Llama-3.2-11B-Vision's rank-16 LoRA), on MllamaForCausalLM too, which all-linear did not
    even take for multimodal. Now those blocks are left out with one warning naming them, and
    every LoRA tensor gets a gradient from a text-only batch."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        wrapped = apply_adapters(_mllama(kind), AdapterConfig(rank=4))
    assert _without_gradient_after_a_text_step(wrapped) == []
    prefix = "model.language_model." if kind == "conditional" else "model."
    adapted = _adapted(wrapped)
    assert adapted and not [n for n in adapted if n.startswith((prefix + "layers.1.", prefix + "layers.3."))]
    assert sum(n.startswith(prefix + "layers.") for n in adapted) == 14  # the two self-attention blocks
    warnings = [r.getMessage() for r in caplog.records if "cross_attention_layers" in r.getMessage()]
    assert len(warnings) == 1
    assert f"14 linear layer(s) of the 2 decoder block(s) that {type(wrapped.get_base_model()).__name__}" in warnings[0]
    assert f"{prefix}layers.1, {prefix}layers.3" in warnings[0]

    caplog.clear()  # the same layout again (a second fit, a reference policy): no second warning
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        apply_adapters(_mllama(kind), AdapterConfig(rank=4))
    assert "cross_attention_layers" not in caplog.text


def test_named_cross_attention_layers_of_mllama_stay_adapted_with_a_warning(caplog):
    """A target_modules list that points at layers of the cross-attention blocks keeps them (a run
    may feed images); a warning says text gives them no gradient (HEAD: adapted without a word). A
    bare name such as q_proj no longer reaches them (tests/test_adapter_review_mends44.py)."""
    targets = ["cross_attn.q_proj", "cross_attn.o_proj"]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        wrapped = apply_adapters(_mllama("conditional"), AdapterConfig(rank=4, target_modules=targets))
    adapted = _adapted(wrapped)
    assert "model.language_model.layers.1.cross_attn.q_proj" in adapted
    assert "model.language_model.layers.3.cross_attn.o_proj" in adapted
    assert "adapts 4 linear layer(s) in the decoder blocks that MllamaForConditionalGeneration skips" in caplog.text
    assert "cross_attention_layers: model.language_model.layers.1, model.language_model.layers.3" in caplog.text


def test_an_mllama_checkpoint_with_untrained_cross_attention_adapters_still_loads(caplog, monkeypatch):
    """A run before this rule adapted the cross-attention blocks with all-linear; they never trained
    (lora_B all zero: no gradient, so AdamW never moved them). Its checkpoint loads into the new
    layout with those adapters left out and a warning, as the towers' did (commit 8eb1330)."""
    with monkeypatch.context() as patch:  # the layout before: nothing left out
        patch.setattr(adapters, "skipped_without_images", lambda model: [])
        old = apply_adapters(_mllama("causal"), AdapterConfig(rank=4))
    saved = {"model." + k: v for k, v in old.state_dict().items() if ".lora_" in k}
    assert sum(".layers.1.cross_attn." in k for k in saved) == 8

    new = apply_adapters(_mllama("causal"), AdapterConfig(rank=4))
    state = dict(saved)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        check_adapter_checkpoint(new, state, "model.")
    assert "28 adapter tensor(s) on 14 layer(s)" in caplog.text
    assert not [k for k in state if ".layers.1." in k or ".layers.3." in k]
    live = {"model." + k for k, p in new.named_parameters() if p.requires_grad}
    assert set(state) == live


def _tiny_t5gemma2_config():
    """transformers' T5Gemma2Config (google/t5gemma-2), shrunk: a SigLIP tower inside the encoder."""
    text = dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        layer_types=["full_attention"],
        pad_token_id=0,
    )
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=16
    )
    return transformers.T5Gemma2Config(
        encoder=dict(text_config=text, vision_config=vision, mm_tokens_per_image=4), decoder=text
    )


def _tiny_t5gemma2():
    torch.manual_seed(0)
    return transformers.T5Gemma2ForConditionalGeneration(_tiny_t5gemma2_config())


def test_all_linear_on_t5gemma2_leaves_the_vision_tower_inside_the_encoder_frozen(caplog):
    """T5Gemma 2 names its vision config in ``config.encoder`` (none at the top), and its SigLIP
    tower sits in ``model.encoder.vision_tower``. On HEAD it was not taken for multimodal and all
    its linear layers kept adapters: a text step left the tower's 18 LoRA tensors (of 46) without a
    gradient (6.3% of the default config's rank-16 LoRA). Now the tower is left out, and the
    encoder's text model, which reads the prompt, keeps its adapters with the decoder."""
    with caplog.at_level(logging.INFO, logger=LOGGER):
        wrapped = apply_adapters(_tiny_t5gemma2(), AdapterConfig(rank=4))
    assert _without_gradient_after_a_text_step(wrapped) == []
    adapted = _adapted(wrapped)
    assert not [n for n in adapted if ".vision_tower." in n]
    assert sum(n.startswith("model.encoder.text_model.") for n in adapted) == 7
    assert sum(n.startswith("model.decoder.") for n in adapted) == 7
    assert "under encoder.vision_tower stay frozen" in caplog.text


@pytest.mark.parametrize("name", ["Pix2Struct", "PPFormulaNet"])
def test_a_vision_encoder_decoder_keeps_its_encoder_out_of_the_language_model(name):
    """The encoder-decoder rule above takes the encoder into the language model only where it holds
    the input embeddings (T5Gemma 2's text encoder). Pix2Struct's and PP-FormulaNet's encoders are
    their vision towers and stay left out, as on HEAD (a first version of the rule took them in,
    and PP-FormulaNet, whose get_input_embeddings raises NotImplementedError, crashed the sweep)."""
    from lightning_agents.adapter_towers import left_out_of_all_linear

    with torch.device("meta"):
        model = getattr(transformers, f"{name}ForConditionalGeneration")(getattr(transformers, f"{name}Config")())
    left_out = left_out_of_all_linear(model)
    assert left_out and {part for _, part in left_out} == {"encoder"}
    assert not [n for n, _ in left_out if ".decoder." in f".{n}"]
