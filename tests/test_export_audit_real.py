"""What a user does after training, on SmolLM2-135M-Instruct (the ``real_model`` tier): LoRA SFT with
a ChatML ``data.chat_template`` on a base-style checkpoint, ``export``, then the folders loaded with
plain transformers and peft in a fresh interpreter (no lightning_agents import).

Run with ``python -m pytest -m real_model tests/test_export_audit_real.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from test_real_model import smollm2, smollm2_gguf  # noqa: F401 - the session fixtures of the real model

pytestmark = pytest.mark.real_model

CHAT = [{"role": "user", "content": "Ava has 5 apples and gets 6 more. How many apples does Ava have now?"}]

_LOAD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, base, text = sys.argv[1], sys.argv[2], sys.argv[3]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(base or folder, dtype=torch.float32)
if base:
    from peft import PeftModel
    model = PeftModel.from_pretrained(model, folder)
model.eval()
ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
with torch.no_grad():
    torch.save(model(ids).logits[0], folder + ".logits.pt")
chat = [{"role": "user", "content": "Ava has 5 apples and gets 6 more. How many apples does Ava have now?"}]
inputs = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
out = model.generate(**inputs, max_new_tokens=48, do_sample=False)[0, inputs["input_ids"].shape[1]:]
print(json.dumps({"template": tok.chat_template, "eos": model.generation_config.eos_token_id,
                  "generated": out.tolist(), "imported": "lightning_agents" in sys.modules}))
"""


def _plain_load(folder, text, base=""):
    done = subprocess.run([sys.executable, "-c", _LOAD, str(folder), base, text], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), torch.load(f"{folder}.logits.pt")


@pytest.fixture(scope="module")
def base_style(smollm2, tmp_path_factory):  # noqa: F811
    """SmolLM2's weights with a base checkpoint's token settings: EOS ``<|endoftext|>`` (id 0) in
    the tokenizer and generation config, no chat template (the weights are linked, not copied)."""
    folder = tmp_path_factory.mktemp("smol_base")
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        settings = json.loads((Path(smollm2) / name).read_text())
        if name == "tokenizer_config.json":
            settings.update(eos_token="<|endoftext|>", pad_token="<|endoftext|>")
        else:
            settings.update(eos_token_id=0, bos_token_id=0, pad_token_id=0)
        (folder / name).write_text(json.dumps(settings))
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(Path(smollm2) / name)
    return folder


def test_lora_export_of_a_chatml_fine_tune_loads_plainly_matches_and_stops(base_style, shared_data, tmp_path):
    from lightning_agents import ChatDataModule, SFTModule
    from lightning_agents.adapters import AdapterConfig
    from lightning_agents.commands import ExportCommand

    template = (shared_data / "chat_templates" / "smollm2.jinja").read_text()
    L.seed_everything(0)
    module = SFTModule(model=str(base_style), lr=1e-3, adapter=AdapterConfig(rank=8, alpha=16))
    data = ChatDataModule(
        val=None, embedded_size=8, batch_size=4, max_length=128, chat_template=template, cache_dir=str(tmp_path / "c")
    )
    L.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
        callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)],
    ).fit(module, data)
    module.eval()
    text = data.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    with torch.no_grad():
        expected = module.model(data.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"])
    ckpt = str(tmp_path / "ckpt" / "last.ckpt")

    merged = ExportCommand().export(ckpt_path=ckpt, output=str(tmp_path / "merged"))
    info, logits = _plain_load(merged, text)
    assert not info["imported"]
    torch.testing.assert_close(logits, expected.logits[0], rtol=0, atol=2e-3)
    assert info["template"] == template
    im_end = data.tokenizer.convert_tokens_to_ids("<|im_end|>")
    # Before: eos_token_id stayed 0 (<|endoftext|>) and generation ran past <|im_end|> to max_new_tokens.
    assert info["eos"] == [0, im_end]
    assert info["generated"][-1] == im_end and len(info["generated"]) < 48

    adapters = ExportCommand().export(ckpt_path=ckpt, output=str(tmp_path / "adapters"), merge=False)
    info, logits = _plain_load(adapters, text, base=str(base_style))
    torch.testing.assert_close(logits, expected.logits[0], rtol=0, atol=2e-3)
    assert info["template"] == template


def test_qlora_run_with_added_tokens_and_a_trained_head_exports_on_cpu(smollm2, tmp_path):  # noqa: F811
    """SmolLM2 with two added tokens (embeddings resized, lm_head still tied), LoRA plus a trained
    lm_head, saved as a QLoRA run saves it: before, export refused it without a GPU as "a checkpoint of
    another model"; now the adapters merge into the unquantized base and the folder loads plainly with
    the resized vocabulary, the head untied, and the trained logits."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_agents import ChatDataModule, SFTModule
    from lightning_agents.adapters import AdapterConfig
    from lightning_agents.commands import ExportCommand

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    base = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
    tokenizer.add_tokens(["<tool_call>", "</tool_call>"], special_tokens=True)
    base.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    base.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    L.seed_everything(0)
    module = SFTModule(
        model=str(tmp_path / "base"), lr=1e-3, adapter=AdapterConfig(rank=4, modules_to_save=["lm_head"])
    )
    data = ChatDataModule(val=None, embedded_size=4, batch_size=2, max_length=64, cache_dir=str(tmp_path / "c"))
    L.Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
        callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)],
    ).fit(module, data)
    module.eval()
    text = data.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) + "<tool_call>"
    with torch.no_grad():
        expected = module.model(data.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"])
    checkpoint = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["adapter"]["qlora"] = True
    checkpoint["hyper_parameters"]["quantization"] = {
        "bits": 4,
        "quant_type": "nf4",
        "double_quant": True,
        "compute_dtype": "bfloat16",
    }
    torch.save(checkpoint, tmp_path / "qlora.ckpt")
    merged = ExportCommand().export(ckpt_path=str(tmp_path / "qlora.ckpt"), output=str(tmp_path / "merged"))
    info, logits = _plain_load(merged, text)
    assert logits.shape[-1] == len(tokenizer) == 49154
    torch.testing.assert_close(logits, expected.logits[0], rtol=0, atol=2e-3)
    saved = json.loads((Path(merged) / "config.json").read_text())
    assert saved["tie_word_embeddings"] is False and saved["vocab_size"] == 49154
