"""ExportHF on a live QLoRA module: the adapters merge into the unquantized base, as
``lightning-agents export`` merges them, not into the 4-bit weights."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from lightning_agents.callbacks.export import ExportHF
from lightning_agents.export import ExportError


def _qlora_module(monkeypatch):
    """An SFTModule on the embedded student whose base is really 4-bit (bitsandbytes' CPU backend).

    The modules refuse QLoRA without CUDA; the loader is patched only to put the 4-bit weights on
    the CPU, so ExportHF sees what a GPU run hands it.
    """
    pytest.importorskip("bitsandbytes")
    import transformers

    import lightning_agents.modules.sft as sft
    from lightning_agents.models import load_causal_lm, resolve_model_path

    def load(name, dtype="float32", quantization=None, **kwargs):
        if quantization is None:
            return load_causal_lm(name, dtype=dtype, quantization=None, **kwargs)
        config = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
        return transformers.AutoModelForCausalLM.from_pretrained(
            resolve_model_path(name), dtype=torch.bfloat16, quantization_config=config, device_map={"": "cpu"}
        )

    monkeypatch.setattr(sft, "check_adapter_device", lambda config: None)
    monkeypatch.setattr(sft, "load_causal_lm", load)
    module = sft.SFTModule(model="embedded:student", dtype="bfloat16", adapter={"rank": 4, "qlora": True})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module.configure_model()
    except Exception as exc:  # noqa: BLE001 - any failure of bitsandbytes' CPU backend
        pytest.skip(f"bitsandbytes 4-bit does not run on this CPU: {type(exc).__name__}: {exc}")
    return module


def _trainer(tmp_path):
    return SimpleNamespace(default_root_dir=str(tmp_path), global_step=3, datamodule=None)


def test_exporthf_of_a_qlora_module_merges_into_the_unquantized_base(tmp_path, monkeypatch):
    """Before: the adapters were merged into the 4-bit weights (requantized, so most of B @ A rounded
    away, and the folder was a bitsandbytes checkpoint), and with dtype the export raised
    "You cannot cast a bitsandbytes model in a new `dtype`" at the end of fit."""
    import transformers

    from lightning_agents.models import resolve_model_path

    module = _qlora_module(monkeypatch)
    q_proj = module.model.get_base_model().model.layers[0].self_attn.q_proj
    assert type(q_proj.base_layer).__module__.startswith("bitsandbytes")
    torch.manual_seed(0)
    with torch.no_grad():
        q_proj.lora_B["default"].weight.normal_(std=0.02)
    delta = q_proj.scaling["default"] * (q_proj.lora_B["default"].weight @ q_proj.lora_A["default"].weight).float()

    ExportHF(output=str(tmp_path / "out"), dtype="bfloat16")._export(_trainer(tmp_path), module)

    out = tmp_path / "out"
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    written = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    base = transformers.AutoModelForCausalLM.from_pretrained(
        resolve_model_path("embedded:student"), dtype=torch.bfloat16
    )
    want = (base.model.layers[0].self_attn.q_proj.weight.float() + delta).to(torch.bfloat16).float()
    got = written.model.layers[0].self_attn.q_proj.weight
    torch.testing.assert_close(got, want, rtol=0, atol=1e-2)
    change = (got - base.model.layers[0].self_attn.q_proj.weight.float()).flatten()
    assert torch.nn.functional.cosine_similarity(change, delta.flatten(), dim=0) > 0.99
    # The live module keeps training-time state: its 4-bit base is untouched.
    assert type(q_proj.base_layer).__module__.startswith("bitsandbytes")


def test_exporthf_refuses_at_fit_start_a_quantized_model_it_cannot_rebuild(tmp_path, monkeypatch):
    """A quantized model with adapters in a module that is no SFTModule cannot be rebuilt on its
    unquantized base: the refusal comes when fit starts, not after the training. Before: nothing was
    checked, and fit ended merging into the 4-bit weights."""
    other = L.LightningModule()
    other.model = _qlora_module(monkeypatch).model
    with pytest.raises(ExportError, match="lightning-agents export"):
        ExportHF(output=str(tmp_path / "out")).on_fit_start(_trainer(tmp_path), other)


def test_export_hf_folder_refuses_to_merge_into_a_quantized_base(tmp_path, monkeypatch):
    """Before: export_hf_folder merged the adapters into the 4-bit weights (most of the update
    rounded away) and wrote a bitsandbytes folder without a word."""
    from lightning_agents.export import export_hf_folder

    module = _qlora_module(monkeypatch)
    with pytest.raises(ExportError, match="unquantized_module"):
        export_hf_folder(module.model, module.tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # The adapters alone do not depend on the base's quantization.
    export_hf_folder(module.model, module.tokenizer, tmp_path / "adapters", merge=False)
    assert (tmp_path / "adapters" / "adapter_model.safetensors").is_file()
