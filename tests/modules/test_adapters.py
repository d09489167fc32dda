"""LoRA adapters on the embedded student: only adapters train, checkpoints hold only them, QLoRA needs a GPU."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.adapters import AdapterConfig, AdapterError, has_adapters

LORA = AdapterConfig(rank=4, alpha=8, dropout=0.1, target_modules=["q_proj", "v_proj", "up_proj"])


def trainer(tmp_path, **kwargs):
    args = dict(accelerator="cpu", devices=1, max_steps=4, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                limit_val_batches=0, num_sanity_val_steps=0)
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
