"""LoRA adapters on the embedded student: only adapters train, checkpoints hold only them, QLoRA needs a GPU."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.adapters import AdapterConfig, AdapterError, has_adapters

LORA = AdapterConfig(rank=4, alpha=8, dropout=0.1, target_modules=["q_proj", "v_proj", "up_proj"])


def trainer(tmp_path, **kwargs):
    args = dict(
        accelerator="cpu",
        devices=1,
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    args.update(kwargs)
    return L.Trainer(**args)


def data():
    return ChatDataModule(embedded_size=64, batch_size=8, max_length=128, val=None)


def test_lora_sft_changes_only_adapter_parameters_and_checkpoints_only_them(tmp_path):
    L.seed_everything(0)
    module = SFTModule(lr=1e-2, adapter=LORA)
    module.configure_model()
    assert has_adapters(module.model)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, callbacks=[ckpt], enable_checkpointing=True).fit(module, data())
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
    adapters = {n for n in before if "lora_" in n}
    assert adapters and changed == adapters
    assert all(p.requires_grad == ("lora_" in n) for n, p in module.named_parameters())

    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    assert set(state) == adapters
    adapter_bytes = sum(t.numel() * t.element_size() for t in state.values())
    total_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    assert adapter_bytes < 0.1 * total_bytes

    # A fresh module rebuilds the frozen base from its id and takes the trained adapters.
    restored = SFTModule.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    for name, p in module.named_parameters():
        assert torch.equal(p, dict(restored.named_parameters())[name]), name


def test_full_fine_tuning_checkpoint_keeps_every_weight(tmp_path):
    module = SFTModule(lr=1e-3)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, callbacks=[ckpt], enable_checkpointing=True, max_steps=1).fit(module, data())
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    assert set(module.state_dict()) <= set(state)


def test_configure_model_is_idempotent():
    module = SFTModule(adapter=LORA)
    module.configure_model()
    model = module.model
    module.configure_model()
    assert module.model is model


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_qlora_refuses_on_cpu_before_loading_anything():
    with pytest.raises(AdapterError, match="needs a CUDA GPU.*qlora=false"):
        SFTModule(adapter=AdapterConfig(qlora=True))


def test_adapter_settings_are_checked():
    with pytest.raises(AdapterError, match="rank"):
        AdapterConfig(rank=0)
    module = SFTModule(adapter=AdapterConfig(target_modules=["no_such_layer"]))
    with pytest.raises(AdapterError, match="no_such_layer"):
        module.configure_model()


def test_lora_rstg_changes_only_adapters_and_uses_the_base_as_reference(tmp_path):
    from lightning_agents import PromptDataModule
    from lightning_agents.adapters import BaseModelView
    from lightning_agents.models import load_causal_lm
    from lightning_agents.modules.rstg import RSTGModule, completion_logprobs

    L.seed_everything(0)
    # Guidance on every prompt without teacher-pass-rate weights: gradients from the first step.
    module = RSTGModule(
        num_generations=4,
        max_new_tokens=24,
        micro_batch_size=8,
        lr=1e-2,
        teacher_k=2,
        beta_start=0.5,
        beta_kl=0.05,
        distill_scope="all",
        sample_weight="none",
        teacher_cache=str(tmp_path / "cache.jsonl"),
        adapter=LORA,
        log_samples_every_n_steps=0,
        reward_workers=1,
    )
    module.configure_model()
    # The KL reference is the student's own base, not a second model.
    assert isinstance(module.ref_model, BaseModelView)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, callbacks=[ckpt], enable_checkpointing=True, max_steps=3).fit(
        module, PromptDataModule(train_size=12, batch_size=4, val=None)
    )
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
    adapters = {n for n in before if "lora_" in n and n.startswith("model.")}
    # RL gradients can be zero for some adapters in a few steps (zero-variance groups); none
    # outside the adapters may move.
    assert changed and changed <= adapters

    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["state_dict"]
    assert set(state) == adapters

    # With adapters disabled the student computes exactly the base model's log-probs.
    base = load_causal_lm("embedded:student")
    ids = module.tokenizer("12 + 30 = 42", return_tensors="pt")["input_ids"]
    prompt, completion = ids[:, :4], ids[:, 4:]
    ones = torch.ones_like
    ref, _ = completion_logprobs(module.ref_model, prompt, ones(prompt), completion, ones(completion))
    with torch.no_grad():
        want, _ = completion_logprobs(base, prompt, ones(prompt), completion, ones(completion))
        trained, _ = completion_logprobs(module.model, prompt, ones(prompt), completion, ones(completion))
    torch.testing.assert_close(ref, want, rtol=0, atol=1e-6)
    assert not torch.allclose(trained, want)
    assert module.model.training  # using the reference did not switch the policy's mode


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("which", ["sft", "rstg"])
def test_ddp_two_processes_train_the_same_adapters(tmp_path, which):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("ddp_adapters_script.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run(
        [sys.executable, str(script), which, str(tmp_path)], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"{which}_rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world_size"] == 2
    # DDP averaged the adapters' gradients: both ranks hold the same adapters, moved from the start.
    assert ranks[0]["lora"] == ranks[1]["lora"] != ranks[0]["initial_lora"]
    assert all(r["base"] == r["initial_base"] for r in ranks)
