"""Adapters and export on real architectures (session 42): an adapters-only export with ``dtype``
casts the adapters alone (a quantized base neither copied nor cast), ``all-linear`` on multimodal
models adapts the language model only, and merged exports of real tiny architectures reload with
plain transformers computing what was trained."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from lightning_agents.adapters import AdapterConfig, apply_adapters
from lightning_agents.export import ExportError, export_hf_folder
from lightning_agents.models import load_model_and_tokenizer


@pytest.fixture
def student():
    return load_model_and_tokenizer("embedded:student")


def _trained_lora(model, **settings):
    """``model`` with LoRA adapters whose B is non-zero (a fresh B is zero: nothing to compare)."""
    wrapped = apply_adapters(model, AdapterConfig(rank=4, **settings))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in wrapped.parameters():
            if p.requires_grad:
                p.normal_(std=0.02)
    return wrapped


@pytest.fixture
def copied_parameters(monkeypatch):
    """The names of the parameters that get deep-copied while the fixture is active."""
    copied: list[int] = []
    original = torch.nn.Parameter.__deepcopy__

    def spy(self, memo):
        copied.append(id(self))
        return original(self, memo)

    monkeypatch.setattr(torch.nn.Parameter, "__deepcopy__", spy)
    return copied


def test_adapters_only_export_with_dtype_casts_the_adapters_and_leaves_the_base_alone(
    student, tmp_path, copied_parameters
):
    """Before: ``merge=False, dtype=...`` deep-copied the whole model (base included) and cast it, to
    write a file holding the adapters alone. Now the written adapters (and modules_to_save copy) are
    the same tensors, cast, and no base weight is copied."""
    model, tokenizer = student
    wrapped = _trained_lora(model, modules_to_save=["lm_head"])
    trained = {n: p.detach().clone() for n, p in wrapped.named_parameters() if p.requires_grad}
    frozen = {id(p) for p in wrapped.parameters() if not p.requires_grad}
    copied_parameters.clear()  # peft copied lm_head for modules_to_save

    out = export_hf_folder(wrapped, tokenizer, tmp_path / "out", merge=False, dtype="bfloat16")

    assert not frozen & set(copied_parameters), "the frozen base was copied for an adapters-only export"
    written = load_file(out / "adapter_model.safetensors")
    assert {t.dtype for t in written.values()} == {torch.bfloat16}
    assert any("lm_head" in k for k in written)
    lora_a = next(k for k in written if k.endswith("q_proj.lora_A.weight"))
    live = next(v for n, v in trained.items() if n.endswith("q_proj.lora_A.default.weight") and ".0." in n)
    assert ".0." in lora_a
    torch.testing.assert_close(written[lora_a], live.to(torch.bfloat16), rtol=0, atol=0)
    # The live model is untouched: still float32, still training-ready.
    assert all(p.dtype == torch.float32 for p in wrapped.parameters())
    for name, p in wrapped.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(p.detach(), trained[name], rtol=0, atol=0)
    # peft reloads it on its base.
    from peft import PeftModel

    base, _ = load_model_and_tokenizer("embedded:student")
    reloaded = PeftModel.from_pretrained(base, out)
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, wrapped(ids).logits, rtol=0, atol=2e-2)


def _quantize_4bit():
    """A 4-bit (bitsandbytes, CPU backend) copy of the embedded student, or a skip."""
    pytest.importorskip("bitsandbytes")
    import transformers

    from lightning_agents.models import resolve_model_path

    config = transformers.BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return transformers.AutoModelForCausalLM.from_pretrained(
                resolve_model_path("embedded:student"),
                dtype=torch.bfloat16,
                quantization_config=config,
                device_map={"": "cpu"},
            )
    except Exception as exc:  # noqa: BLE001 - any failure of bitsandbytes' CPU backend
        pytest.skip(f"bitsandbytes 4-bit does not run on this CPU: {type(exc).__name__}: {exc}")


def test_adapters_only_export_of_a_4bit_model_with_dtype_copies_no_quantized_weight(
    student, tmp_path, copied_parameters
):
    """A QLoRA model (4-bit base, bitsandbytes' CPU backend standing in for the GPU): before, the
    whole 4-bit model was deep-copied (on a GPU, a second base in its memory at the end of fit) and
    cast, to write the adapters. Now only the adapters are written, in the dtype asked."""
    _, tokenizer = student
    quantized = _quantize_4bit()
    wrapped = _trained_lora(quantized, qlora=True)
    frozen = {id(p) for p in wrapped.parameters() if not p.requires_grad}
    copied_parameters.clear()  # peft copied lm_head for modules_to_save

    out = export_hf_folder(wrapped, tokenizer, tmp_path / "out", merge=False, dtype="float16")

    assert not frozen & set(copied_parameters), "the 4-bit base was copied for an adapters-only export"
    written = load_file(out / "adapter_model.safetensors")
    assert {t.dtype for t in written.values()} == {torch.float16}
    live = dict(wrapped.named_parameters())
    for key, tensor in written.items():
        name = next(n for n in live if n.replace(".default", "") == key)
        torch.testing.assert_close(tensor, live[name].detach().to(torch.float16), rtol=0, atol=0)
    assert json.loads((out / "lightning_agents_export.json").read_text())["merged"] is False


def test_a_quantized_model_without_adapters_refuses_dtype_naming_the_setting(student, tmp_path):
    """Before: the model was deep-copied, then transformers refused ("You cannot cast a bitsandbytes
    model in a new `dtype`"), naming no export setting."""
    _, tokenizer = student
    quantized = _quantize_4bit()
    with pytest.raises(ExportError, match="dtype='bfloat16'.*quantized"):
        export_hf_folder(quantized, tokenizer, tmp_path / "out", dtype="bfloat16")
    assert not (tmp_path / "out").exists()


def test_exporthf_adapters_only_of_a_qlora_module_reloads_no_base(student, tmp_path, monkeypatch):
    """ExportHF(merge=False) on a live QLoRA module: before, the unquantized base was reloaded on the
    CPU (the full model in its training dtype, e.g. 16 GB for an 8B base) only to write the same
    adapters. Now they are written from the live model."""
    import lightning_agents.modules.sft as sft
    from lightning_agents.callbacks.export import ExportHF

    _, tokenizer = student
    wrapped = _trained_lora(_quantize_4bit(), qlora=True)
    monkeypatch.setattr(sft, "check_adapter_device", lambda config: None)  # QLoRA needs CUDA otherwise
    module = sft.SFTModule(model="embedded:student", dtype="bfloat16", adapter={"rank": 4, "qlora": True})
    module.model, module.tokenizer = wrapped, tokenizer
    loads = []
    monkeypatch.setattr(sft, "load_causal_lm", lambda *a, **k: loads.append(a) or pytest.fail("base reloaded"))
    trainer = SimpleNamespace(default_root_dir=str(tmp_path), global_step=3, datamodule=None)

    ExportHF(output=str(tmp_path / "out"), merge=False, dtype="bfloat16")._export(trainer, module)

    assert loads == []
    written = load_file(tmp_path / "out" / "adapter_model.safetensors")
    assert {t.dtype for t in written.values()} == {torch.bfloat16}
    live = {n.replace(".default", ""): p for n, p in wrapped.named_parameters() if p.requires_grad}
    assert set(written) == set(live)
    for key, tensor in written.items():
        torch.testing.assert_close(tensor, live[key].detach().to(torch.bfloat16), rtol=0, atol=0)


def test_exporthf_merge_false_does_not_refuse_a_quantized_module_it_cannot_rebuild(student, tmp_path):
    """Only a merge needs the unquantized rebuild; adapters alone export from any module."""
    import lightning as L

    from lightning_agents.callbacks.export import ExportHF

    other = L.LightningModule()
    other.model = _trained_lora(_quantize_4bit(), qlora=True)
    trainer = SimpleNamespace(default_root_dir=str(tmp_path), global_step=3, datamodule=None)
    ExportHF(output=str(tmp_path / "out"), merge=False).on_fit_start(trainer, other)
    with pytest.raises(ExportError, match="lightning-agents export"):
        ExportHF(output=str(tmp_path / "out2")).on_fit_start(trainer, other)


# google/gemma-3-4b-it's config.json (text and vision parts as published), shrunk in width and depth.
_GEMMA3_TEXT = dict(
    hidden_size=64,  # 2560
    intermediate_size=128,  # 10240
    num_attention_heads=2,  # 8
    num_key_value_heads=1,  # 4
    num_hidden_layers=2,  # 34
    head_dim=32,  # 256
    vocab_size=300,  # 262208
    sliding_window=16,  # 1024
    query_pre_attn_scalar=32,  # 256
)
_GEMMA3_VISION = dict(
    model_type="siglip_vision_model",
    hidden_size=32,  # 1152
    intermediate_size=48,  # 4304
    num_attention_heads=2,  # 16
    num_hidden_layers=2,  # 27
    image_size=28,  # 896
    patch_size=14,
    num_channels=3,
    vision_use_head=False,
)


def _tiny_gemma3():
    import transformers

    torch.manual_seed(0)
    config = transformers.Gemma3Config(
        text_config=_GEMMA3_TEXT,
        vision_config=_GEMMA3_VISION,
        mm_tokens_per_image=4,  # 256
        image_token_index=299,
        boi_token_index=297,
        eoi_token_index=298,
    )
    return transformers.Gemma3ForConditionalGeneration(config)


def _adapted(wrapped) -> list[str]:
    return [
        name.removesuffix(".base_layer")
        for name, module in wrapped.get_base_model().named_modules()
        if getattr(module, "lora_A", None) is not None
    ]


def test_all_linear_on_gemma3_adapts_the_language_model_only(caplog):
    """Before: peft's all-linear (which leaves out only the output head) put adapters on the 12
    linear layers of the SigLIP vision tower too (26 adapted, 14 in the language model): parameters
    that text training never reaches (no gradient: DDP stops on them), in every checkpoint and
    adapter. Now the language model's 14 layers are adapted, and the log names the frozen tower."""
    model = _tiny_gemma3()
    with caplog.at_level("INFO", logger="lightning_agents.adapters"):
        wrapped = apply_adapters(model, AdapterConfig(rank=4))
    adapted = _adapted(wrapped)
    assert len(adapted) == 14 and all(name.startswith("model.language_model.layers.") for name in adapted)
    assert "12 linear layer(s) under vision_tower stay frozen" in caplog.text
    assert "without adapters" not in caplog.text  # not reported as layers peft dropped
    # Every trainable parameter is reached by a text-only step.
    ids = torch.randint(0, 290, (2, 6))
    wrapped(input_ids=ids, labels=ids).loss.backward()
    unreached = [n for n, p in wrapped.named_parameters() if p.requires_grad and p.grad is None]
    assert unreached == []


def test_all_linear_on_llava_leaves_the_projector_and_vision_tower_frozen():
    """Llava's multi_modal_projector is made of linear layers too (peft adapted them with the tower)."""
    import transformers

    torch.manual_seed(0)
    text = dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=300,
    )
    vision = dict(
        model_type="clip_vision_model",
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
        projection_dim=32,
    )
    model = transformers.LlavaForConditionalGeneration(
        transformers.LlavaConfig(text_config=text, vision_config=vision, image_token_index=299)
    )
    adapted = _adapted(apply_adapters(model, AdapterConfig(rank=4)))
    assert len(adapted) == 14 and all(name.startswith("model.language_model.") for name in adapted)


def test_named_vision_layers_are_still_adapted_and_text_models_are_unchanged(student):
    """The restriction is all-linear's only: a list naming the tower's layers adapts them, and a
    text-only model gets what peft's all-linear gives (every linear layer but the head)."""
    wrapped = apply_adapters(_tiny_gemma3(), AdapterConfig(rank=4, target_modules=["out_proj", "fc1"]))
    assert sorted({n.rsplit(".", 1)[-1] for n in _adapted(wrapped)}) == ["fc1", "out_proj"]
    model, _ = student
    linear = [
        n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings()
    ]
    assert sorted(_adapted(apply_adapters(model, AdapterConfig(rank=4)))) == sorted(linear)


def test_merged_gemma3_with_a_trained_head_says_untied_in_its_text_config_too(student, tmp_path):
    """A tied Gemma 3 with ``modules_to_save: [lm_head]``: peft unties the trained head and sets the
    flag on the top config only. Before: the exported config.json said ``tie_word_embeddings: false``
    at the top but ``true`` in ``text_config`` beside the trained ``lm_head.weight`` (transformers
    reloads from the top flag; a reader building the language model from the text config ties the
    trained head away). Reloaded logits match the trained model either way."""
    import transformers

    _, tokenizer = student
    wrapped = _trained_lora(_tiny_gemma3(), modules_to_save=["lm_head"]).eval()
    ids = torch.randint(0, 290, (2, 7))
    with torch.no_grad():
        want = wrapped(input_ids=ids).logits
    out = export_hf_folder(wrapped, tokenizer, tmp_path / "out")
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert config["text_config"]["tie_word_embeddings"] is False
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, want, rtol=0, atol=1e-5)
    # A tied model whose head is not trained stays tied, both flags.
    out2 = export_hf_folder(_trained_lora(_tiny_gemma3()), tokenizer, tmp_path / "out2")
    config = json.loads((out2 / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["text_config"]["tie_word_embeddings"] is True


# --- Checkpoints written before all-linear left the towers out (review of a8bcd81, MED-1) -----------


def _old_layout_state(config: AdapterConfig, model=None) -> dict[str, torch.Tensor]:
    """The trained tensors of a checkpoint written before a8bcd81: peft's own all-linear, which put
    adapters on Gemma 3's SigLIP tower too (their lora_B stays zero: text training never runs it)."""
    import peft

    old = peft.get_peft_model(model if model is not None else _tiny_gemma3(), config.to_peft())
    return {"model." + n: p.detach().clone() for n, p in old.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("bias", ["none", "all"])
def test_a_gemma3_checkpoint_from_before_the_tower_exclusion_loads_without_its_untrained_tower_adapters(bias, caplog):
    """Before: check_adapter_checkpoint refused it ("24 unknown (first: ...vision_tower...); resume
    with the adapter settings the checkpoint was saved with"), which were the same settings, so no
    Gemma 3 all-linear run from before a8bcd81 could be resumed or exported. Now the tower adapters,
    never trained, are left out with a warning, and the language model's adapters load. With
    ``bias: all`` the tower layers' own biases, saved as ``<layer>.base_layer.bias``, load as
    ``<layer>.bias``."""
    from lightning_agents.adapters import check_adapter_checkpoint

    config = AdapterConfig(rank=4, bias=bias)
    state = _old_layout_state(config)
    with torch.no_grad():  # trained language-model adapters
        for key, value in state.items():
            if "language_model" in key and "lora_B" in key:
                value.normal_(std=0.02)
    tower = [k for k in state if "vision_tower" in k and ".lora_" in k]
    assert len(tower) == 24
    new = apply_adapters(_tiny_gemma3(), config)
    with caplog.at_level("WARNING", logger="lightning_agents.adapters"):
        check_adapter_checkpoint(new, state, "model.")
    assert "24 adapter tensor(s) on 12 layer(s)" in caplog.text and "never trained" in caplog.text
    assert not [k for k in state if ".lora_" in k and "vision_tower" in k]
    trainable = {"model." + n for n, p in new.named_parameters() if p.requires_grad}
    assert trainable <= set(state)
    assert not [k for k in state if "base_layer" in k and "vision_tower" in k]
    result = torch.nn.Module.load_state_dict(new, {k.removeprefix("model."): v for k, v in state.items()}, strict=False)
    assert result.unexpected_keys == []
    live = dict(new.named_parameters())
    for key, value in state.items():
        torch.testing.assert_close(live[key.removeprefix("model.")].detach(), value, rtol=0, atol=0)


def test_a_checkpoint_with_trained_tower_adapters_is_refused_with_advice_that_loads_it():
    """A tower adapter that did train (lora_B non-zero, a run that named the tower layers) is not
    dropped: refused, saying the all-linear rule changed and which target_modules list adapts what
    the checkpoint holds; that list then loads it (before: "resume with the adapter settings the
    checkpoint was saved with", and those settings refused it)."""
    from lightning_agents.adapters import AdapterError, check_adapter_checkpoint

    config = AdapterConfig(rank=4)
    state = _old_layout_state(config)
    key = next(k for k in state if "vision_tower" in k and "lora_B" in k)
    state[key] = torch.ones_like(state[key])
    with pytest.raises(AdapterError) as caught:
        check_adapter_checkpoint(apply_adapters(_tiny_gemma3(), config), dict(state), "model.")
    assert "no longer adapts" in str(caught.value), str(caught.value)
    from lightning_agents.adapters import ExcludedAdaptersError  # export passes its message on as is

    assert isinstance(caught.value, ExcludedAdaptersError)
    advice = str(caught.value).split("adapter.target_modules: [", 1)[1].rstrip("]").split(", ")
    assert {"fc1", "fc2", "out_proj", "q_proj", "down_proj"} <= set(advice)
    check_adapter_checkpoint(
        apply_adapters(_tiny_gemma3(), AdapterConfig(rank=4, target_modules=advice)), state, "model."
    )


def _gemma3_folder(path, pad_token_id: int | None = 0):
    """A tiny Gemma 3 saved with the embedded student's tokenizer, loadable by ``model=<path>``."""
    import shutil

    from lightning_agents.models import resolve_model_path

    model = _tiny_gemma3_for(vocab_size=480, pad_token_id=pad_token_id)
    model.save_pretrained(path)
    source = resolve_model_path("embedded:student")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(f"{source}/{name}", path / name)
    return str(path)


def _tiny_gemma3_for(vocab_size: int, pad_token_id: int | None = 0):
    import transformers

    torch.manual_seed(0)
    config = transformers.Gemma3Config(
        text_config={**_GEMMA3_TEXT, "vocab_size": vocab_size},
        vision_config=_GEMMA3_VISION,
        mm_tokens_per_image=4,
        image_token_index=vocab_size - 1,
        boi_token_index=vocab_size - 3,
        eoi_token_index=vocab_size - 2,
    )
    # google/gemma-3-4b-it's config has no top-level pad_token_id; SFTModule.configure_model reads
    # model.config.pad_token_id, which Gemma3Config then lacks (AttributeError), so it is set here.
    if pad_token_id is not None:
        config.pad_token_id = pad_token_id
    return transformers.Gemma3ForConditionalGeneration(config)


def test_load_model_and_tokenizer_takes_a_gemma3_config_without_a_pad_token_id(tmp_path):
    """google/gemma-3-4b-it's config.json names no top-level pad_token_id, and transformers 5's
    Gemma3Config then has no such attribute: before, load_model_and_tokenizer (RSTG's student and
    teacher loads) raised AttributeError reading it. Now the tokenizer's pad id is set."""
    from lightning_agents.models import load_model_and_tokenizer

    folder = _gemma3_folder(tmp_path / "gemma3", pad_token_id=None)
    model, tokenizer = load_model_and_tokenizer(folder)
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0


def test_a_gemma3_run_from_before_the_tower_exclusion_resumes_and_exports(tmp_path, monkeypatch):
    """End to end: an SFT run of tiny Gemma 3 with all-linear in the old layout (the towers adapted,
    as before a8bcd81) saves a checkpoint; the current code resumes it (the optimizer state follows:
    torch refused "a parameter group that doesn't match the size of optimizer's group") and
    ``lightning-agents export`` rebuilds it (before: both refused by check_adapter_checkpoint)."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    import lightning_agents.adapter_towers as adapter_towers
    import lightning_agents.adapters as adapters
    from lightning_agents import ChatDataModule, SFTModule
    from lightning_agents.export import load_trained_module

    folder = _gemma3_folder(tmp_path / "gemma3")

    def run(steps, **kwargs):
        return L.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=steps,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            **kwargs,
        )

    def data():
        return ChatDataModule(embedded_size=32, batch_size=8, max_length=96, val=None)

    left_out = adapter_towers.left_out_of_all_linear
    with monkeypatch.context() as patch:  # the layout before a8bcd81: nothing left out
        patch.setattr(adapters, left_out.__name__, lambda model: [])
        module = SFTModule(model=folder, lr=1e-2, adapter={"rank": 4})
        run(2, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)]).fit(module, data())
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    assert sum("vision_tower" in k for k in saved) == 24
    trained = {k: v for k, v in saved.items() if "language_model" in k}

    resumed = SFTModule(model=folder, lr=1e-2, adapter={"rank": 4})
    run(3).fit(resumed, data(), ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert resumed.trainer.global_step == 3
    assert not [n for n, p in resumed.named_parameters() if p.requires_grad and "vision_tower" in n]

    exported = load_trained_module(tmp_path / "ckpt" / "last.ckpt")
    live = dict(exported.named_parameters())
    for key, value in trained.items():
        torch.testing.assert_close(live[key].detach(), value, rtol=0, atol=0)


# --- Towers inside get_decoder() (MED-2) and a language model wider than get_decoder() (LOW-4) -------


def _tiny_phi4_multimodal():
    """transformers' Phi4MultimodalConfig (microsoft/Phi-4-multimodal-instruct's shapes), shrunk."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Phi4MultimodalConfig(
        vocab_size=400,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        vision_config=dict(
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=28,
            crop_size=28,
            patch_size=14,
            image_token_id=399,
        ),
        audio_config=dict(
            hidden_size=32,
            intermediate_size=48,
            num_blocks=1,
            num_attention_heads=2,
            ext_pw_out_channel=32,
            depthwise_separable_out_channel=32,
            nemo_conv_channels=32,
            audio_token_id=398,
        ),
    )
    return transformers.Phi4MultimodalForCausalLM(config)


def test_all_linear_on_phi4_multimodal_leaves_the_towers_inside_the_decoder_frozen(caplog):
    """AutoModelForCausalLM loads Phi-4-multimodal as Phi4MultimodalForCausalLM, whose get_decoder()
    is the whole ``model``, with the SigLIP and conformer towers and their projections inside it
    (``model.embed_tokens_extend``). Before: nothing was left out and nothing logged; a text step
    left 60 of the 76 LoRA tensors without a gradient (43.9% of rank-16 LoRA at full size). Now the
    modules built from ``vision_config``/``audio_config`` and their wrapper are left out, and logged."""
    with caplog.at_level("INFO", logger="lightning_agents.adapters"):
        wrapped = apply_adapters(_tiny_phi4_multimodal(), AdapterConfig(rank=4))
    adapted = _adapted(wrapped)
    assert len(adapted) == 8 and all(name.startswith("model.layers.") for name in adapted)
    assert "under embed_tokens_extend stay frozen" in caplog.text
    ids = torch.randint(3, 390, (2, 12))
    wrapped(input_ids=ids, labels=ids).loss.backward()
    unreached = [n for n, p in wrapped.named_parameters() if p.requires_grad and p.grad is None]
    assert unreached == []


def test_all_linear_on_git_leaves_its_image_encoder_frozen(caplog):
    """GitForCausalLM (AutoModelForCausalLM's ``git``): its CLIP image encoder sits in ``git``, which is
    get_decoder(). Before: its 72 linear layers kept adapters, without a word. Its one-layer
    ``visual_projection`` beside the encoder goes with it (session 43; it stayed adapted before)."""
    import transformers

    with torch.device("meta"):
        model = transformers.GitForCausalLM(transformers.GitConfig())
    with caplog.at_level("INFO", logger="lightning_agents.adapters"):
        adapted = _adapted(apply_adapters(model, AdapterConfig(rank=4)))
    assert "73 linear layer(s) under image_encoder, visual_projection stay frozen" in caplog.text
    assert not [n for n in adapted if n.startswith("git.image_encoder.")]
    assert [n for n in adapted if not n.startswith("git.encoder.")] == []
    assert "still adapts" not in caplog.text


def test_all_linear_keeps_the_encoder_of_an_encoder_decoder_language_model():
    """InstructBLIP on Flan-T5 (InstructBlipConfig with a t5 text config, built directly):
    get_decoder() is ``language_model.decoder``. Before: the T5 encoder (the half of the language
    model that reads the prompt) was left frozen with the vision model. Now the language model is
    ``language_model`` where that holds get_decoder()."""
    import transformers

    from lightning_agents.adapter_towers import linears_outside_language_model as _linears_outside_language_model

    with torch.device("meta"):
        model = transformers.InstructBlipForConditionalGeneration(
            transformers.InstructBlipConfig(text_config={"model_type": "t5"})
        )
    left_out = _linears_outside_language_model(model)
    assert any(n.startswith("vision_model.") for n in left_out)
    assert any(n.startswith("qformer.") for n in left_out)
    assert not [n for n in left_out if n.startswith("language_model.")], "the T5 encoder was left out"
