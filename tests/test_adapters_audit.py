"""Adapter faults found in the LoRA/QLoRA audit against real architectures (tiny models built from the
transformers config classes, hidden 64, 2 layers): settings that named nothing, a partly matching
target list, QLoRA on an unquantized base, merging an adapter on a tied head, MoE experts."""

import logging
import math

import pytest
import torch
import transformers

from lightning_agents.adapters import (
    AdapterConfig,
    AdapterError,
    apply_adapters,
    as_adapter_config,
    merged_model,
    trainable_parameter_count,
)
from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import QuantizationConfig, load_causal_lm

SMALL = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=96,
    max_position_embeddings=128,
)


def tiny(config_class, **extra):
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config_class(**{**SMALL, **extra})).float().eval()


def adapted_layers(model) -> set[str]:
    return {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if getattr(m, "lora_A", None)}


@pytest.mark.parametrize(
    "value, setting",
    [
        (dict(rank=4.5), "adapter.rank"),
        (dict(rank="8"), "adapter.rank"),
        (dict(rank=True), "adapter.rank"),
        (dict(alpha=0), "adapter.alpha"),
        (dict(alpha=-16), "adapter.alpha"),
        (dict(alpha=math.nan), "adapter.alpha"),
        (dict(bias="some"), "adapter.bias"),
        (dict(target_modules=[]), "adapter.target_modules"),
        (dict(target_modules="q_proj"), "adapter.target_modules"),
        (dict(target_modules=["q_proj", ""]), "adapter.target_modules"),
        (dict(modules_to_save="lm_head"), "adapter.modules_to_save"),
    ],
)
def test_bad_adapter_values_are_refused_naming_the_setting(value, setting):
    # alpha=0 trained nothing without a word (every update scaled by 0); a float rank died in torch.empty.
    with pytest.raises(AdapterError, match=setting):
        AdapterConfig(**value)


def test_all_linear_with_an_underscore_gets_a_hint():
    with pytest.raises(AdapterError, match="all-linear, with a hyphen"):
        AdapterConfig(target_modules="all_linear")


def test_peft_field_names_in_a_yaml_adapter_block_get_their_names_here():
    with pytest.raises(AdapterError, match=r"lora_alpha is alpha here; r is rank here"):
        as_adapter_config({"r": 8, "lora_alpha": 16})


def test_a_target_name_that_matches_nothing_is_refused_even_when_another_matches():
    # peft raises only when no name matches; a typo beside a good name trained fewer layers silently.
    model = load_causal_lm("embedded:student")
    with pytest.raises(AdapterError, match=r"adapter.target_modules \['v_prj'\] match no layer.*'v_proj'"):
        apply_adapters(model, AdapterConfig(target_modules=["q_proj", "v_prj"]))


def test_modules_to_save_that_matches_nothing_is_refused():
    model = load_causal_lm("embedded:student")
    with pytest.raises(AdapterError, match=r"adapter.modules_to_save: \['lm_haed'\]"):
        apply_adapters(model, AdapterConfig(modules_to_save=["lm_haed"]))


def test_qlora_on_an_unquantized_base_is_refused():
    # RSTGModule loads its student without `quantization`: qlora=true then cast a 16-bit base to
    # float32 through prepare_model_for_kbit_training, twice the memory of plain LoRA.
    model = load_causal_lm("embedded:student", dtype="bfloat16")
    with pytest.raises(AdapterError, match="adapter.qlora=true, but the base model was loaded unquantized"):
        apply_adapters(model, AdapterConfig(qlora=True))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error path")
def test_quantization_without_cuda_is_a_one_line_user_error():
    # A plain RuntimeError reached the command line as a traceback.
    with pytest.raises(LightningAgentsError, match="needs a CUDA GPU.*drop `quantization`"):
        load_causal_lm("embedded:student", quantization=QuantizationConfig(bits=4))


@pytest.mark.parametrize(
    "value, setting",
    [(dict(bits=3), "quantization.bits"), (dict(quant_type="nf5"), "quantization.quant_type")],
)
def test_bad_quantization_values_name_the_setting(value, setting):
    # bits=3 loaded in 4-bit without a word.
    with pytest.raises(LightningAgentsError, match=setting):
        QuantizationConfig(**value)


def train_a_little(model, ids, steps=3):
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(steps):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_merging_an_adapter_on_a_tied_output_head_keeps_the_trained_logits(tmp_path):
    # The embedded student ties lm_head to the input embedding: merging the head's adapter into the
    # shared weight moved the input embeddings too (logits off by 2.7 after 3 steps).
    model = apply_adapters(load_causal_lm("embedded:student"), AdapterConfig(target_modules=["q_proj", "lm_head"]))
    ids = torch.randint(3, 400, (2, 10))
    train_a_little(model, ids)
    with torch.no_grad():
        want = model(ids).logits
        merged = merged_model(model)
        torch.testing.assert_close(merged(ids).logits, want, rtol=0, atol=1e-4)
        merged.save_pretrained(tmp_path)
        back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
        torch.testing.assert_close(back(ids).logits, want, rtol=0, atol=1e-4)
    # The trained model is left as it was: still tied, adapters in place.
    head = model.get_base_model().lm_head
    assert head.get_base_layer().weight is model.get_input_embeddings().weight


def test_merging_all_linear_adapters_keeps_a_tied_model_tied():
    model = apply_adapters(load_causal_lm("embedded:student"), AdapterConfig())
    merged = merged_model(model)
    assert merged.get_output_embeddings().weight is merged.get_input_embeddings().weight


def gpt_oss():
    return tiny(
        transformers.GptOssConfig,
        num_local_experts=4,
        num_experts_per_tok=2,
        head_dim=16,
        layer_types=["sliding_attention", "full_attention"],
    )


def test_gpt_oss_experts_untouched_by_all_linear_are_reported(caplog):
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        model = apply_adapters(gpt_oss(), AdapterConfig(rank=4))
    assert adapted_layers(model) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert "adapter.target_parameters" in caplog.text and "gate_up_proj" in caplog.text


def test_gpt_oss_experts_train_through_target_parameters(tmp_path, caplog):
    config = AdapterConfig(rank=4, target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        model = apply_adapters(gpt_oss(), config)
    assert "target_parameters" not in caplog.text
    targeted = set(model.base_model.targeted_parameter_names)
    assert {n.rsplit(".", 1)[-1] for n in targeted} == {"gate_up_proj", "down_proj"}
    ids = torch.randint(3, 128, (2, 10))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_a_little(model, ids, steps=2)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {n for n in before if "lora_" in n}
    assert trainable_parameter_count(model)[0] == model.get_nb_trainable_parameters()[0]
    with torch.no_grad():
        torch.testing.assert_close(merged_model(model)(ids).logits, model(ids).logits, rtol=0, atol=1e-5)


def test_a_target_parameter_that_matches_nothing_is_refused():
    with pytest.raises(AdapterError, match=r"adapter.target_parameters \['mlp.experts.up_proj'\]"):
        apply_adapters(gpt_oss(), AdapterConfig(target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.up_proj"]))


def test_moe_expert_names_that_peft_renames_are_not_refused():
    # Qwen-MoE's v4 expert names map onto the fused gate_up_proj: a list naming them is valid.
    model = tiny(
        transformers.Qwen3MoeConfig, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16
    )
    model = apply_adapters(model, AdapterConfig(rank=4, target_modules=["q_proj", "gate_proj", "up_proj"]))
    assert {n.rsplit(".", 1)[-1] for n in model.base_model.targeted_parameter_names} == {"gate_up_proj"}


ARCHITECTURES = {
    # GPT-2's projections are Conv1D (weights stored transposed): peft must set fan_in_fan_out.
    "gpt2": (
        lambda: tiny(transformers.GPT2Config, n_embd=64, n_layer=2, n_head=4, n_positions=128),
        {"c_attn", "c_proj", "c_fc"},
    ),
    "phi3": (
        lambda: tiny(transformers.Phi3Config, pad_token_id=0),
        {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"},
    ),
    "falcon": (
        lambda: tiny(transformers.FalconConfig),
        {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"},
    ),
    "gemma3_text": (
        lambda: tiny(transformers.Gemma3TextConfig, head_dim=16),
        {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
    ),
}


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_default_adapter_on_real_architectures(arch):
    build, layers = ARCHITECTURES[arch]
    base = build()
    tied = base.get_output_embeddings().weight is base.get_input_embeddings().weight
    model = apply_adapters(base, AdapterConfig(rank=4, alpha=8))
    assert adapted_layers(model) == layers  # attention and MLP, never lm_head or the embeddings
    assert model.peft_config["default"].fan_in_fan_out == (arch == "gpt2")
    assert trainable_parameter_count(model)[0] == model.get_nb_trainable_parameters()[0]
    ids = torch.randint(3, 128, (2, 10))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_a_little(model, ids, steps=2)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {n for n in before if "lora_" in n}
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    with torch.no_grad():
        torch.testing.assert_close(merged_model(model)(ids).logits, model(ids).logits, rtol=0, atol=1e-5)


def test_a_checkpoint_of_other_adapters_is_refused_and_a_matching_one_passes():
    # Adapter modules load with strict=False, so resuming with other target_modules loaded nothing.
    from lightning_agents.adapters import check_adapter_checkpoint, keep_trainable_state

    def adapted(targets):
        return apply_adapters(load_causal_lm("embedded:student"), AdapterConfig(target_modules=targets))

    saved = adapted(["q_proj", "v_proj"])
    state = {"model." + k: v for k, v in saved.state_dict().items()}  # as in a module whose `model` it is
    keep_trainable_state(saved, state, prefix="model.")
    check_adapter_checkpoint(adapted(["q_proj", "v_proj"]), state, prefix="model.")
    with pytest.raises(AdapterError, match=r"4 missing \(first: model\..*k_proj.*4 unknown.*hyper_parameters.adapter"):
        check_adapter_checkpoint(adapted(["q_proj", "k_proj"]), state, prefix="model.")


def test_resuming_with_other_adapter_settings_is_refused(tmp_path):
    """Before: adapter modules load checkpoints non-strictly (the frozen base is not saved), so a
    resume with other target modules loaded none of the trained adapters and went on silently."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_agents import ChatDataModule, SFTModule

    def trainer(steps, **kw):
        return L.Trainer(
            max_steps=steps,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            default_root_dir=tmp_path,
            **kw,
        )

    def data():
        return ChatDataModule(embedded_size=8, batch_size=4, max_length=64, val=None)

    saved = SFTModule(lr=1e-2, adapter=AdapterConfig(rank=4, target_modules=["q_proj", "v_proj"]))
    trainer(1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True)]).fit(saved, data())
    ckpt = str(tmp_path / "ck" / "last.ckpt")
    other = SFTModule(lr=1e-2, adapter=AdapterConfig(rank=4, target_modules=["k_proj", "o_proj"]))
    with pytest.raises(AdapterError, match="do not fit this module's adapters"):
        trainer(2, enable_checkpointing=False).fit(other, data(), ckpt_path=ckpt)
    same = SFTModule(lr=1e-2, adapter=AdapterConfig(rank=4, target_modules=["q_proj", "v_proj"]))
    run = trainer(2, enable_checkpointing=False)
    run.fit(same, data(), ckpt_path=ckpt)
    assert run.global_step == 2


def test_rstg_refuses_qlora_before_loading_anything():
    """Before: RSTG loads its student unquantized, so `qlora: true` failed only in configure_model,
    on the GPU, with advice RSTG has no setting for (earlier still, it trained in float32)."""
    from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError

    with pytest.raises(RSTGSettingError, match="adapter.qlora"):
        RSTGModule(adapter={"qlora": True})


def test_a_users_own_partial_non_strict_load_is_not_taken_for_a_checkpoint():
    """Only a checkpoint is checked against the adapters: `load_state_dict(part, strict=False)` of
    the user's own loads what matches, as torch's does (the first check refused it)."""
    from lightning_agents import SFTModule

    source = SFTModule(adapter={"target_modules": ["q_proj", "v_proj"]})
    source.configure_model()
    part = {k: v + 1 for k, v in source.state_dict().items() if "lora_" in k and "q_proj" in k}
    target = SFTModule(adapter={"target_modules": ["q_proj", "v_proj"]})
    target.configure_model()
    result = target.load_state_dict(part, strict=False)
    key = next(iter(part))
    assert torch.equal(target.state_dict()[key], part[key]) and result.missing_keys


@pytest.mark.parametrize(
    "arch, targets, layers",
    [
        ("phi3", ["q_proj", "k_proj", "v_proj"], "'gate_up_proj', 'lm_head', 'o_proj', 'qkv_proj'"),
        ("gpt2", ["q_proj", "v_proj"], "'c_attn', 'c_fc', 'c_proj', 'lm_head'"),
        ("falcon", ["q_proj", "v_proj"], "'dense_4h_to_h', 'dense_h_to_4h', 'lm_head', 'query_key_value'"),
    ],
)
def test_a_target_list_that_matches_nothing_names_the_models_layers(arch, targets, layers):
    """Before: peft's refusal named only the missing names; the usual Llama recipe on Phi-3's fused
    qkv_proj, GPT-2's Conv1D c_attn or Falcon's query_key_value left the user to guess the right ones."""
    with pytest.raises(AdapterError, match=rf"adapter.target_modules=.*not found.*linear layers of .*: \[.*{layers}\]"):
        apply_adapters(ARCHITECTURES[arch][0](), AdapterConfig(target_modules=targets))


def deepseek_v3():
    # The layout of deepseek-ai/DeepSeek-V3 inference/configs/config_macbook.json (1 dense layer,
    # 2 shared experts, MLA with kv_lora_rank, q_lora_rank 0 -> no q_a_proj), shrunk.
    return tiny(
        transformers.DeepseekV3Config,
        first_k_dense_replace=1,
        n_shared_experts=2,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        q_lora_rank=None,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        n_group=1,
        topk_group=1,
    )


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]])
def test_dense_mlps_that_peft_leaves_without_adapters_on_moe_models_are_reported(targets, caplog):
    """Before: peft rewrites every gate_proj/up_proj/down_proj target of a fused-MoE model type onto the
    experts, so DeepSeek-V3's dense first layer and shared experts (and Qwen3-MoE's mlp_only_layers)
    trained nothing under the default all-linear, with no word."""
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        model = apply_adapters(deepseek_v3(), AdapterConfig(rank=4, target_modules=targets))
    base = model.get_base_model()
    if getattr(base.model.layers[0].mlp.gate_proj, "lora_A", None) is not None:
        # peft 0.22 adapts the dense MLPs as well: nothing is left out, and nothing is reported
        assert "without adapters" not in caplog.text
        assert getattr(base.model.layers[1].mlp.shared_experts.down_proj, "lora_A", None) is not None
        return
    # peft <= 0.21 rewrote the targets onto the experts only: reported, layer by layer
    assert "leaves 6 linear layer(s) of DeepseekV3ForCausalLM without adapters" in caplog.text
    assert (
        "model.layers.0.mlp.gate_proj" in caplog.text and "model.layers.1.mlp.shared_experts.down_proj" in caplog.text
    )
    assert "deepseek_v3" in caplog.text


def test_qwen3_moe_dense_layers_are_reported_and_a_plain_model_is_not(caplog):
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        apply_adapters(ARCHITECTURES["gemma3_text"][0](), AdapterConfig(rank=4))
        assert caplog.text == ""
        model = apply_adapters(
            tiny(
                transformers.Qwen3MoeConfig,
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=32,
                head_dim=16,
                mlp_only_layers=[0],
            ),
            AdapterConfig(rank=4),
        )
    dense = model.get_base_model().model.layers[0].mlp
    if all(getattr(getattr(dense, n), "lora_A", None) is not None for n in ("gate_proj", "up_proj", "down_proj")):
        assert "without adapters" not in caplog.text  # peft 0.22 adapts mlp_only_layers too
    else:
        assert "leaves 3 linear layer(s) of Qwen3MoeForCausalLM" in caplog.text


def test_a_vision_towers_3d_parameter_is_not_taken_for_moe_experts(caplog):
    """Before: Gemma 3 (the multimodal config of its 4B-27B checkpoints) warned that its SigLIP head's
    3-D `probe` was an untargeted MoE expert weight to name as mlp.experts.probe."""
    config = transformers.Gemma3Config(
        text_config={**SMALL, "head_dim": 16},
        vision_config=dict(
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=28,
            patch_size=14,
        ),
        mm_tokens_per_image=4,
    )
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(config).float()
    assert any(p.dim() == 3 for p in base.parameters())
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        apply_adapters(base, AdapterConfig(rank=4))
    assert "probe" not in caplog.text


def test_a_modules_to_save_head_is_not_reported_as_a_frozen_linear_layer(caplog):
    """Before: all-linear with modules_to_save=[lm_head] (AdapterConfig's own example) warned that
    `lm_head.original_module`, peft's frozen original beside the trained copy, was left frozen."""
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        model = apply_adapters(tiny(transformers.LlamaConfig), AdapterConfig(rank=4, modules_to_save=["lm_head"]))
    assert "original_module" not in caplog.text and "lm_head" not in caplog.text
    assert any("lm_head.modules_to_save" in n for n, p in model.named_parameters() if p.requires_grad)


def test_jetmoe_experts_outside_an_experts_path_are_reported(caplog):
    """Before: JetMoE's MLP experts (JetMoeParallelExperts at mlp.input_linear / mlp.output_linear)
    were missed by the `.experts.` path test; only its attention experts were named, as `weight`."""
    model = tiny(
        transformers.JetMoeConfig, num_local_experts=4, num_experts_per_tok=2, kv_channels=16, num_hidden_layers=1
    )
    with caplog.at_level(logging.WARNING, logger="lightning_agents.adapters"):
        apply_adapters(model, AdapterConfig(rank=4, target_modules=["kv_proj"]))
    assert "mlp.input_linear.weight" in caplog.text and "mlp.output_linear.weight" in caplog.text
    assert "self_attention.experts.input_linear.weight" in caplog.text


def test_a_refusal_other_than_not_found_gets_no_layer_list():
    """Before: every peft ValueError had the model's linear layers appended; beside DeepSeek-V3's
    "cannot convert gate_proj without also targeting up_proj" a list holding gate_proj read as a
    contradiction."""
    with pytest.raises(AdapterError, match="up_proj") as info:
        apply_adapters(deepseek_v3(), AdapterConfig(rank=4, target_modules=["q_proj", "gate_proj"]))
    assert "linear layers of" not in str(info.value)


def test_an_empty_peft_valueerror_is_refused_by_its_type(monkeypatch):
    """Before: an empty ValueError message raised IndexError from splitlines()[0]."""
    import peft

    def refuse(*args, **kwargs):
        raise ValueError("")

    monkeypatch.setattr(peft, "get_peft_model", refuse)
    with pytest.raises(AdapterError, match=r"cannot add LoRA adapters .*: ValueError"):
        apply_adapters(tiny(transformers.LlamaConfig), AdapterConfig(rank=4))
