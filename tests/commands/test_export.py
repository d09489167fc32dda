"""fit (LoRA) -> export -> transformers: the folder generates what the trained module generates."""

import json

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.adapters import AdapterConfig
from lightning_agents.callbacks import ExportHF
from lightning_agents.commands import ExportCommand, GenerateCommand
from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig
from lightning_agents.tasks.arithmetic import make_arithmetic_split

GREEDY = SamplingConfig(max_new_tokens=24, do_sample=False)


class _Tools(ExportCommand, GenerateCommand):
    pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A LoRA SFT run of a few steps, its last checkpoint and the end-of-fit export."""
    root = tmp_path_factory.mktemp("fit")
    L.seed_everything(0)
    module = SFTModule(lr=2e-2, adapter=AdapterConfig(rank=4, alpha=16))
    _fit_and_export(root, 6, module, ChatDataModule(embedded_size=96, batch_size=16, max_length=128, val=None))
    return module.eval(), root


def _fit_and_export(root, max_steps, module, data):
    """Fit, keeping the last checkpoint in ``root/ckpt`` and exporting to ``root/hf`` at the end (ExportHF)."""
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        limit_val_batches=0,
        callbacks=[ModelCheckpoint(dirpath=root / "ckpt", save_last=True), ExportHF(output="hf")],
    )
    trainer.fit(module, data)


def prompts(n=20):
    return [[{"role": "user", "content": r["question"]}] for r in make_arithmetic_split("test", n=n)]


def greedy_texts(model, tokenizer):
    return HFGenerationEngine(model, tokenizer).generate(prompts(), num_samples=1, sampling=GREEDY).texts


def test_export_loads_with_transformers_and_generates_like_the_module(trained, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    module, root = trained
    # The adapters did move away from the base (so the export is not of the base model).
    base = SFTModule()
    assert greedy_texts(module.model, module.tokenizer) != greedy_texts(base.model, base.tokenizer)
    expected = greedy_texts(module.model, module.tokenizer)

    out = _Tools().export(ckpt_path=str(root / "ckpt" / "last.ckpt"), output=str(tmp_path / "merged"))
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == module.tokenizer.chat_template
    assert not any("lora" in n for n, _ in model.named_parameters())
    assert greedy_texts(model, tokenizer) == expected
    # The callback wrote the same folder at the end of fit.
    assert greedy_texts(AutoModelForCausalLM.from_pretrained(root / "hf"), tokenizer) == expected


def test_merged_and_separate_adapter_exports_agree(trained, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    module, root = trained
    ckpt = str(root / "ckpt" / "last.ckpt")
    merged = AutoModelForCausalLM.from_pretrained(_Tools().export(ckpt_path=ckpt, output=str(tmp_path / "m")))
    sep_dir = _Tools().export(ckpt_path=ckpt, output=str(tmp_path / "a"), merge=False)
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
    separate = PeftModel.from_pretrained(base, sep_dir).eval()
    ids = module.tokenizer("3 + 4 =", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, separate(ids).logits, rtol=1e-4, atol=1e-4)
    assert greedy_texts(merged, module.tokenizer) == greedy_texts(separate, module.tokenizer)


def test_generate_from_checkpoint_and_folder_writes_completions_and_rewards(trained, tmp_path):
    module, root = trained
    records = make_arithmetic_split("test", n=20)
    source = tmp_path / "prompts.jsonl"
    source.write_text(
        "".join(json.dumps({"id": r["id"], "prompt": r["question"], "reference": r["answer"]}) + "\n" for r in records)
    )
    out = _Tools().generate(
        prompts=str(source),
        output=str(tmp_path / "a.jsonl"),
        max_new_tokens=24,
        ckpt_path=str(root / "ckpt" / "last.ckpt"),
        verifier="lightning_agents.rewards.ArithmeticVerifier",
    )
    rows = [json.loads(line) for line in open(out)]
    assert [r["completion"] for r in rows] == greedy_texts(module.model, module.tokenizer)
    assert all(0.0 <= r["reward"] <= 1.0 for r in rows)
    from lightning_agents.rewards import ArithmeticVerifier

    assert [r["reward"] for r in rows] == [
        ArithmeticVerifier()(r["completion"], rec["answer"]) for r, rec in zip(rows, records)
    ]
    # Without a verifier, no reward column.
    again = _Tools().generate(
        prompts=str(source), output=str(tmp_path / "b.jsonl"), max_new_tokens=24, policy=str(root / "hf")
    )
    rows_b = [json.loads(line) for line in open(again)]
    assert [r["completion"] for r in rows_b] == [r["completion"] for r in rows]
    assert "reward" not in rows_b[0]


def test_generate_names_the_bad_line(tmp_path):
    from lightning_agents.datamodules.chat import DataFormatError

    source = tmp_path / "p.jsonl"
    source.write_text('{"prompt": "hi"}\n{"text": "no prompt"}\n')
    with pytest.raises(DataFormatError, match=r"p.jsonl:2: needs 'prompt'"):
        _Tools().generate(prompts=str(source), output=str(tmp_path / "o.jsonl"), policy="embedded:student")


def test_export_refuses_a_checkpoint_without_its_trained_weights(trained, tmp_path):
    from lightning_agents.export import ExportError

    _, root = trained
    checkpoint = torch.load(root / "ckpt" / "last.ckpt", weights_only=True)
    # Without the adapters it would export the untouched base, silently.
    checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if "lora_B" not in k}
    torch.save(checkpoint, tmp_path / "no_adapters.ckpt")
    with pytest.raises(ExportError, match="lora_B"):
        _Tools().export(ckpt_path=str(tmp_path / "no_adapters.ckpt"), output=str(tmp_path / "out"))


def test_a_data_chat_template_is_the_one_exported(tmp_path):
    """`data.chat_template` rendered the training data, but export (and ExportHF) wrote the model's
    original template: served prompts differed from the trained ones."""
    from lightning_agents.models import load_tokenizer

    custom = load_tokenizer("embedded:student").chat_template.replace(
        "<|im_start|>assistant\n", "<|im_start|>assistant\nX "
    )
    assert custom != load_tokenizer("embedded:student").chat_template
    (tmp_path / "custom.jinja").write_text(custom)
    L.seed_everything(0)
    data = ChatDataModule(
        embedded_size=16, batch_size=8, max_length=128, val=None, chat_template=str(tmp_path / "custom.jinja")
    )
    _fit_and_export(tmp_path, 1, SFTModule(), data)
    (tmp_path / "custom.jinja").unlink()  # export must not need the file any more
    _Tools().export(ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), output=str(tmp_path / "exported"))
    from transformers import AutoTokenizer

    for folder in ("exported", "hf"):
        assert AutoTokenizer.from_pretrained(tmp_path / folder).chat_template == custom, folder


def test_export_refuses_a_checkpoint_of_another_module_in_one_line(tmp_path):
    from lightning_agents.export import ExportError

    path = tmp_path / "other.ckpt"
    torch.save({"hyper_parameters": {"_class_path": "lightning_agents.callbacks.ExportHF"}, "state_dict": {}}, path)
    with pytest.raises(ExportError, match="not by a lightning-agents module"):
        _Tools().export(ckpt_path=str(path), output=str(tmp_path / "o"))
