"""MUZO under a real Trainer the way a demanding user runs it (audit, session 34): a 16-bit loss under
bf16-true, a mid-epoch resume with int8 moments and master weights, LoRA adapters, and 2 gloo
processes with master weights, int8 moments and a NaN on one rank."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from muzo_audit_ddp_worker import STEPS, AuditNet, result
from muzo_helpers import Regressor, loader, regression_data
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_agents.optim import LowPrecisionLossWarning, MUZOAdam
from lightning_agents.strategies import MUZOStrategy

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "muzo_quickstart.yaml"


def _trainer(root, **kwargs) -> L.Trainer:
    defaults = dict(
        strategy=MUZOStrategy(),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )
    defaults.update(kwargs)
    defaults["enable_checkpointing"] = any(isinstance(c, ModelCheckpoint) for c in defaults.get("callbacks", []))
    return L.Trainer(**defaults)


class _UpcastOrNot(Regressor):
    def __init__(self, upcast: bool):
        super().__init__(num_queries=4, dropout=0.0)
        self.upcast = upcast

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x)
        return (
            torch.nn.functional.mse_loss(out.float(), y.float())
            if self.upcast
            else torch.nn.functional.mse_loss(out, y)
        )


@pytest.mark.parametrize("upcast", [False, True])
def test_bf16_true_warns_about_a_bf16_loss_only(tmp_path, upcast):
    # Without the upcast 68% of the projected gradients were exactly 0 (40 steps, q 4), silently.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(tmp_path, precision="bf16-true", max_steps=3).fit(_UpcastOrNot(upcast), loader(regression_data(), 8))
    low = [w for w in caught if w.category is LowPrecisionLossWarning]
    assert len(low) == (0 if upcast else 1)


class _ResumeNet(Regressor):
    """int8 moments need a tensor of >= 4096 entries: a 64 x 80 layer; the loss in float32."""

    def __init__(self, seed: int = 0):
        super().__init__(num_queries=3, dropout=0.0, seed=seed)
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 64), torch.nn.Tanh(), torch.nn.Linear(64, 80), torch.nn.Tanh(), torch.nn.Linear(80, 1)
        )
        self.batches: dict[int, float] = {}

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.batches[self.global_step] = float(y.sum())
        return torch.nn.functional.mse_loss(self.net(x).float(), y.float())

    def configure_optimizers(self):
        # seed=None: drawn from torch's RNG, so it too must come back from the checkpoint.
        opt = MUZOAdam(
            self.parameters(), lr=1e-2, num_queries=3, moment_dtype="int8", chunk_size=1024, weight_decay=0.01
        )
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def train_dataloader(self):
        # A loader that resumes mid-epoch (ChatDataModule's kind); a plain DataLoader restarts the
        # epoch from its first batch after a mid-epoch resume, whatever the optimizer does.
        return StatefulDataLoader(regression_data(n=48), batch_size=8, shuffle=True)


def test_mid_epoch_resume_with_int8_moments_bf16_masters_and_a_cosine_schedule_is_bit_identical(tmp_path):
    L.seed_everything(7, verbose=False)
    straight = _ResumeNet()
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=4, save_top_k=-1)
    first = _trainer(tmp_path / "a", precision="bf16-true", max_steps=10, callbacks=[checkpoints])
    first.fit(straight)
    (ckpt,) = glob.glob(str(tmp_path / "ck" / "*step=4.ckpt"))  # step 4 of 6 in the first epoch

    L.seed_everything(123, verbose=False)  # another RNG and init: all of it must come from the checkpoint
    resumed = _ResumeNet(seed=5)
    second = _trainer(tmp_path / "b", precision="bf16-true", max_steps=10)
    second.fit(resumed, ckpt_path=ckpt)

    assert {k: straight.batches[k] for k in resumed.batches} == resumed.batches
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
    sa, sb = first.optimizers[0].state_dict(), second.optimizers[0].state_dict()
    names = {name for entry in sa["state"].values() for name in entry}
    assert {"master", "exp_avg_q", "exp_avg_sq_absmax", "exp_avg"} <= names  # int8 codes, float32 small tensors
    for key, entry in sa["state"].items():
        for name, tensor in entry.items():
            assert torch.equal(tensor, sb["state"][key][name]), f"{key}.{name}"
    assert torch.equal(sa["muzo"]["seed_stream"], sb["muzo"]["seed_stream"])
    assert sa["muzo"]["seed"] == sb["muzo"]["seed"] and sb["muzo"]["num_updates"] == 10
    assert first.lr_scheduler_configs[0].scheduler.state_dict() == second.lr_scheduler_configs[0].scheduler.state_dict()


def test_lora_adapters_alone_train_hold_the_state_and_resume_bit_identically(tmp_path):
    from lightning_agents.adapters import AdapterConfig
    from lightning_agents.datamodules import ChatDataModule
    from lightning_agents.modules import SFTModule

    class LoRAMUZO(SFTModule):
        def configure_optimizers(self):
            # Every parameter, frozen base included, as the CLI's `optimizer:` section passes them.
            return MUZOAdam(self.parameters(), lr=1e-3, num_queries=1, seed=11)

    def data():
        return ChatDataModule(
            train="embedded:arithmetic/train",
            val="embedded:arithmetic/val",
            tokenizer="embedded:student",
            embedded_size=16,
            embedded_styles=["direct"],
            max_length=48,
            batch_size=2,
            cache_dir=str(tmp_path / "cache"),  # a Path in hparams makes the checkpoint refuse weights_only loading
        )

    before: dict[str, torch.Tensor] = {}

    class Snapshot(Callback):  # after bf16-true has cast the module
        def on_train_start(self, trainer, pl_module):
            before.update({n: p.detach().clone() for n, p in pl_module.named_parameters()})

    adapter = AdapterConfig(rank=2, target_modules=["q_proj", "v_proj"])
    module = LoRAMUZO(adapter=adapter)
    saves = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=2, save_top_k=-1)
    common = dict(precision="bf16-true", max_steps=4, limit_val_batches=0)
    first = _trainer(tmp_path / "a", callbacks=[saves, Snapshot()], **common)
    first.fit(module, data())

    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for name, p in module.named_parameters():
        assert torch.equal(p, before[name]) != (name in trainable), name  # adapters moved, the base did not
    opt = first.optimizers[0]
    adapters = sum(p.numel() for p in module.parameters() if p.requires_grad)
    assert len(opt.state) == len(trainable)
    assert opt.moment_nbytes() == 8 * adapters and opt.master_nbytes() == 4 * adapters

    (ckpt,) = glob.glob(str(tmp_path / "ck" / "*step=2.ckpt"))
    assert set(torch.load(ckpt, weights_only=False)["state_dict"]) == trainable  # adapters only
    resumed = LoRAMUZO(adapter=adapter)
    _trainer(tmp_path / "b", **common).fit(resumed, data(), ckpt_path=ckpt)
    for (name, a), b in zip(module.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), name


@pytest.mark.slow  # about 30 s: two processes start and import torch and Lightning
@pytest.mark.distributed
def test_two_processes_with_bf16_masters_int8_moments_and_a_nan_on_one_rank(tmp_path):
    worker = Path(__file__).with_name("muzo_audit_ddp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, str(worker), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]

    single = AuditNet(world_size=1, nan_at=(0, 2))  # the same step's NaN, in the only process
    trainer = _trainer(tmp_path / "one", precision="bf16-true", max_steps=STEPS)
    trainer.fit(single)
    one = result(trainer, single)

    r0, r1 = ranks
    assert r0["seeds"] == r1["seeds"] == one["seeds"]
    # The NaN on rank 1 reached rank 0 through the loss reduction: both skipped the same step.
    assert (r0["updates"], r0["skipped"]) == (r1["updates"], r1["skipped"]) == (STEPS - 1, 1)
    for a, b in zip(r0["params"], r1["params"]):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
    for key, entry in r0["state"].items():
        for name, tensor in entry.items():
            assert torch.equal(tensor, r1["state"][key][name]), f"{key}.{name}"
    # One process on the global batch: bf16 forwards on 8 vs 16 rows round differently; measured
    # 7.9e-3 at most (a few bf16 ulps of these weights), against updates of about 5e-2.
    for a, b, start in zip(r0["params"], one["params"], AuditNet(world_size=1).parameters()):
        assert float((a.float() - b.float()).abs().max()) < 3e-2
        assert not torch.equal(b, start.detach().to(torch.bfloat16))


@pytest.mark.parametrize(("setting", "value"), [("accumulate_grad_batches", 2), ("gradient_clip_val", 1.0)])
def test_a_trainer_setting_muzo_refuses_is_one_line_naming_it_on_the_command_line(tmp_path, capsys, setting, value):
    # Was a 33-line Lightning traceback with exit status 1: MisconfigurationException is not the package's.
    import yaml

    from lightning_agents.cli import cli_main

    config = yaml.safe_load(QUICKSTART.read_text())
    config["data"]["init_args"].update(embedded_size=16, cache_dir=str(tmp_path / "cache"))
    config["trainer"].update({setting: value, "default_root_dir": str(tmp_path / "run"), "logger": False})
    path = tmp_path / "muzo.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    line_no = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith(setting))

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["fit", "--config", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2, err
    assert err[-1].startswith(f"lightning-agents: error: trainer.{setting}: MUZOStrategy"), err[-1]
    assert err[-1].endswith(f"({path}:{line_no})")
    assert not any(text.startswith("Traceback") for text in err)
