"""Mends of the review of commit 13bdf33 (adapters on multimodal models), session 44.

- a ``target_modules`` list of bare names (``q_proj``, ``down_proj``) leaves out the decoder blocks a
  text-only forward skips (Mllama's cross-attention layers): under DDP without
  find_unused_parameters (Lightning's default) their adapters stopped a run at step 2;
- a merged export of an Mllama run loads with ``AutoModelForCausalLM`` again;
- the headless ``T5Gemma2Model`` keeps its text encoder in the language model;
- the warning on an old checkpoint names what was left out.

Models are built offline from transformers' own config classes at small sizes (no download).
"""

from __future__ import annotations

import json
import logging
import re
import shutil

import pytest
import torch

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from test_adapter_towers_session44 import (  # noqa: E402
    _tiny_mllama_config,
    _tiny_t5gemma2_config,
    _without_gradient_after_a_text_step,
)

import lightning_agents.adapters as adapters  # noqa: E402
from lightning_agents.adapters import (  # noqa: E402
    AdapterConfig,
    ExcludedAdaptersError,
    apply_adapters,
    check_adapter_checkpoint,
)

LOGGER = "lightning_agents.adapters"
CROSS = ("model.layers.1.", "model.layers.3.")  # MllamaForCausalLM's cross-attention blocks below


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    # The warnings are given once a process; each test starts with none given.
    monkeypatch.setattr(adapters, "_WARNED", set(), raising=False)


def _causal_mllama():
    """What load_causal_lm gets for Llama 3.2 Vision: AutoModelForCausalLM maps mllama to MllamaForCausalLM."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_tiny_mllama_config())
    assert type(model).__name__ == "MllamaForCausalLM"
    return model


LLAMA_LISTS = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
    "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


@pytest.mark.parametrize("kind", sorted(LLAMA_LISTS))
def test_a_list_of_bare_names_leaves_the_blocks_text_skips_out_and_every_adapter_trains(kind, caplog):
    """The usual Llama list matches the cross-attention blocks' cross_attn.*_proj and mlp.*_proj by
    suffix (peft's rule). On HEAD they kept adapters that a text step leaves without a gradient, and
    2-process DDP with find_unused_parameters=False (Lightning's default) failed at step 2
    ("Expected to have finished reduction in the prior iteration"). Now they are left out with one
    warning that names the blocks and the entries that would keep them; the other blocks are adapted
    as peft would."""
    targets = LLAMA_LISTS[kind]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        wrapped = apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=targets))
    assert _without_gradient_after_a_text_step(wrapped) == []
    adapted = sorted(wrapped.targeted_module_names)
    assert not [n for n in adapted if n.startswith(CROSS)]
    assert sorted({n.rsplit(".", 1)[-1] for n in adapted}) == sorted(targets)
    assert sum(n.startswith(("model.layers.0.", "model.layers.2.")) for n in adapted) == 2 * len(targets)
    warnings = [r.getMessage() for r in caplog.records if "leaves frozen" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "cross_attention_layers: model.layers.1, model.layers.3" in warnings[0]
    hint = warnings[0].rsplit("point at them: ", 1)[1]
    if kind != "mlp":
        assert "cross_attn.q_proj" in hint
    if kind != "attention":
        assert "layers.1.mlp.gate_proj" in hint
    assert "without adapters" not in caplog.text  # no "dropped layers" warning beside it

    caplog.clear()  # the same layout again (a second fit, a reference policy): no second warning
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=targets))
    assert "leaves frozen" not in caplog.text


@pytest.mark.parametrize(
    "targets, kept",
    [
        (["cross_attn.q_proj"], ["model.layers.1.cross_attn.q_proj", "model.layers.3.cross_attn.q_proj"]),
        (["q_proj", "cross_attn.q_proj"], ["model.layers.1.cross_attn.q_proj", "model.layers.3.cross_attn.q_proj"]),
        (["up_proj", "model.layers.3.mlp.up_proj"], ["model.layers.3.mlp.up_proj"]),
    ],
    ids=["cross_attn-path", "bare-and-path", "full-path"],
)
def test_a_name_that_points_at_the_skipped_blocks_keeps_them_with_the_warning(targets, kept, caplog):
    """An entry that matches layers of the skipped blocks alone (cross_attn.q_proj, a full module
    path) keeps what it matches, with the warning that text gives them no gradient; a bare name
    beside it still leaves out the rest of those blocks (layers.1's up_proj below)."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        wrapped = apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=targets))
    adapted = sorted(wrapped.targeted_module_names)
    assert [n for n in adapted if n.startswith(CROSS)] == kept
    assert f"adapts {len(kept)} linear layer(s) in the decoder blocks that MllamaForCausalLM skips" in caplog.text
    assert ("leaves frozen" in caplog.text) == (targets[0] == "up_proj")


def test_a_list_on_mllama_for_conditional_generation_still_adapts_the_vision_model_as_peft_does():
    """Only the skipped blocks change: a list keeps peft's meaning elsewhere, the vision encoder's
    q_proj included (the towers are left out by all-linear alone)."""
    torch.manual_seed(0)
    model = transformers.MllamaForConditionalGeneration(_tiny_mllama_config())
    wrapped = apply_adapters(model, AdapterConfig(rank=4, target_modules=["q_proj"]))
    adapted = sorted(wrapped.targeted_module_names)
    assert "model.vision_model.transformer.layers.0.self_attn.q_proj" in adapted
    assert "model.language_model.layers.0.self_attn.q_proj" in adapted
    assert not [n for n in adapted if ".cross_attn." in n]


def _old_layout(targets):
    """apply_adapters as on HEAD, where no rule left the skipped blocks out."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(adapters, "skipped_without_images", lambda model: [])
        return apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=targets))


def test_an_old_list_checkpoint_resumes_and_the_warning_names_the_skipped_blocks(caplog):
    """A run of the usual list before this rule adapted the cross-attention blocks; they never
    trained (lora_B all zero), so its checkpoint loads with them left out. The warning names the
    blocks, not "vision/audio towers", which MllamaForCausalLM has none of (HEAD: no warning and no
    drop, since the list still adapted them)."""
    targets = LLAMA_LISTS["all"]
    saved = {"model." + k: v for k, v in _old_layout(targets).state_dict().items() if ".lora_" in k}
    new = apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=targets))
    state = dict(saved)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        check_adapter_checkpoint(new, state, "model.")
    assert "28 adapter tensor(s) on 14 layer(s)" in caplog.text
    assert "cross_attention_layers: model.layers.1, model.layers.3" in caplog.text
    assert "vision/audio" not in caplog.text
    assert set(state) == {"model." + k for k, p in new.named_parameters() if p.requires_grad}


def test_the_old_all_linear_warning_on_mllama_names_the_skipped_blocks_not_towers(caplog):
    """LOW 6 of the review: on MllamaForCausalLM the warning said "the vision/audio towers and
    projectors of MllamaForCausalLM, or the decoder blocks ..."; it now says what was left out."""
    saved = {"model." + k: v for k, v in _old_layout("all-linear").state_dict().items() if ".lora_" in k}
    new = apply_adapters(_causal_mllama(), AdapterConfig(rank=4))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        check_adapter_checkpoint(new, dict(saved), "model.")
    message = next(r.getMessage() for r in caplog.records if "adapter tensor(s)" in r.getMessage())
    assert "the decoder blocks that MllamaForCausalLM skips without image states" in message
    assert "vision/audio" not in message


def test_a_trained_cross_attention_checkpoint_is_refused_with_a_list_that_resumes_it():
    """Cross-attention adapters that did train (a run that fed images) are refused, and the list
    the error advises must reach them: the bare names of HEAD's advice no longer do, so it names
    them by paths inside the blocks, and with that list the checkpoint loads."""
    old = _old_layout(LLAMA_LISTS["all"])
    saved = {"model." + k: v for k, v in old.state_dict().items() if ".lora_" in k}
    saved["model.base_model.model.model.layers.1.cross_attn.q_proj.lora_B.default.weight"] = torch.ones_like(
        saved["model.base_model.model.model.layers.1.cross_attn.q_proj.lora_B.default.weight"]
    )
    new = apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=LLAMA_LISTS["all"]))
    with pytest.raises(ExcludedAdaptersError) as raised:
        check_adapter_checkpoint(new, dict(saved), "model.")
    message = str(raised.value)
    assert "model.layers.1.cross_attn.q_proj" in message
    assert "decoder blocks that MllamaForCausalLM skips" in message
    advised = re.search(r"adapter\.target_modules: \[(.*)\]$", message)[1].split(", ")
    assert "cross_attn.q_proj" in advised and "layers.3.mlp.down_proj" in advised

    resumed = apply_adapters(_causal_mllama(), AdapterConfig(rank=4, target_modules=advised))
    state = dict(saved)
    check_adapter_checkpoint(resumed, state, "model.")
    assert set(state) == {"model." + k for k, p in resumed.named_parameters() if p.requires_grad}
    assert len(state) == 56


def test_t5gemma2_model_keeps_its_text_encoder_in_the_language_model():
    """On the headless T5Gemma2Model (what AutoModel builds) the encoder and decoder are the model's
    own children, with no common parent below it, and HEAD fell back to get_decoder(): the encoder's
    text model, which reads the prompt, was listed with the SigLIP tower (257 of 439 layers at the
    default config). Now the model itself is the language model and only the tower is left out."""
    from lightning_agents.adapter_towers import left_out_of_all_linear

    torch.manual_seed(0)
    model = transformers.T5Gemma2Model(_tiny_t5gemma2_config())
    left_out = left_out_of_all_linear(model)
    assert left_out
    assert {part for _, part in left_out} == {"encoder.vision_tower"}
    assert all(name.startswith("encoder.vision_tower.") for name, _ in left_out)


def _mllama_folder(tmp_path):
    from lightning_agents.models import resolve_model_path

    folder = tmp_path / "mllama"
    torch.manual_seed(0)
    transformers.MllamaForConditionalGeneration(_tiny_mllama_config(vocab_size=480)).save_pretrained(folder)
    source = resolve_model_path("embedded:student")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(f"{source}/{name}", folder / name)
    return folder


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_a_merged_mllama_export_loads_with_auto_model_for_causal_lm(tmp_path, dtype):
    """lightning-agents trains Llama 3.2 Vision as MllamaForCausalLM, whose config is the text config
    alone; a merged export wrote it as is (model_type mllama_text_model), which
    AutoModelForCausalLM refuses ("Unrecognized configuration class MllamaTextConfig"), on HEAD and
    before. Now config.json is the base's mllama config holding the trained text config, and the
    folder reloads as MllamaForCausalLM computing what the merged model does, also through
    lightning-agents' own loader."""
    from lightning_agents.export import export_hf_folder
    from lightning_agents.models import load_causal_lm

    folder = _mllama_folder(tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    wrapped = apply_adapters(load_causal_lm(str(folder)), AdapterConfig(rank=4))
    for name, p in wrapped.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)  # a trained adapter: merging changes the weights
    out = export_hf_folder(wrapped, tokenizer, tmp_path / "out", merge=True, dtype=dtype)

    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "mllama"
    assert config["architectures"] == ["MllamaForCausalLM"]
    assert config["text_config"]["model_type"] == "mllama_text_model"
    base = json.loads((folder / "config.json").read_text())
    assert config["vision_config"]["hidden_size"] == base["vision_config"]["hidden_size"]
    assert config["dtype"] == (dtype or "float32")

    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert type(reloaded).__name__ == "MllamaForCausalLM"
    ids = torch.randint(3, 470, (1, 7))
    merged = adapters.merged_model(wrapped).to(reloaded.dtype)
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-5)
    trained = reloaded.model.layers[0].self_attn.q_proj.weight.float()
    frozen = wrapped.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight.float()
    assert not torch.allclose(trained, frozen, atol=1e-3)  # the adapters were merged in
    assert type(load_causal_lm(str(out))).__name__ == "MllamaForCausalLM"


def test_an_adapters_only_mllama_export_keeps_peft_s_files_as_they_were(tmp_path):
    """The adapters-only export refers to the base (its own mllama config): no config.json is written."""
    from lightning_agents.export import export_hf_folder
    from lightning_agents.models import load_causal_lm

    folder = _mllama_folder(tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    wrapped = apply_adapters(load_causal_lm(str(folder)), AdapterConfig(rank=4))
    out = export_hf_folder(wrapped, tokenizer, tmp_path / "out", merge=False)
    assert (out / "adapter_config.json").is_file()
    assert not (out / "config.json").exists()
