"""SFTModule end to end on the embedded student: loss drops, weights move, metrics, precisions, DDP."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.callbacks import HeldOutAccuracy


class LossHistory(L.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def make_trainer(tmp_path, **kwargs):
    defaults = dict(
        accelerator="cpu",
        devices=1,
        max_steps=30,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


def small_data(**kwargs):
    args = dict(embedded_size=512, embedded_styles=["direct", "tool"], batch_size=16, max_length=128)
    args.update(kwargs)
    return ChatDataModule(**args)


def new_format_conversations(path, n=96):
    """Conversations in a reply format the student never saw, so its loss starts high."""
    from lightning_agents.tasks.arithmetic import make_arithmetic_split

    with path.open("w") as handle:
        for record in make_arithmetic_split("train", n=n):
            messages = [
                {"role": "user", "content": record["question"]},
                {"role": "assistant", "content": f"Result: {record['answer']} ({record['kind']})"},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return str(path)


def test_fit_lowers_loss_and_changes_parameters(tmp_path):
    L.seed_everything(0)
    module = SFTModule(lr=3e-3)
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    history = LossHistory()
    trainer = make_trainer(tmp_path, callbacks=[history], limit_val_batches=4)
    source = new_format_conversations(tmp_path / "train.jsonl")
    trainer.fit(module, ChatDataModule(train=source, val=source, batch_size=16, max_length=128))
    first, last = sum(history.losses[:5]) / 5, sum(history.losses[-5:]) / 5
    assert last < 0.9 * first, (first, last)
    changed = [n for n, p in module.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(before)
    metrics = trainer.callback_metrics
    assert 0.0 < float(metrics["val/token_accuracy"]) <= 1.0
    assert math.isclose(float(metrics["val/perplexity"]), math.exp(float(metrics["val/loss"])), rel_tol=0.02)


def test_bf16_true_precision(tmp_path):
    module = SFTModule(lr=3e-3)
    trainer = make_trainer(tmp_path, precision="bf16-true", max_steps=3, limit_val_batches=0)
    trainer.fit(module, small_data(embedded_size=64))
    assert module.model.dtype == torch.bfloat16
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_heldout_accuracy_callback_reports_before_and_after(tmp_path, capsys):
    module = SFTModule(lr=3e-3)
    callback = HeldOutAccuracy(split="val", size=24, max_new_tokens=24)
    trainer = make_trainer(tmp_path, max_steps=2, limit_val_batches=0, callbacks=[callback], logger=True)
    trainer.fit(module, small_data(embedded_size=64))
    out = capsys.readouterr().out
    assert "held-out accuracy: before" in out
    history = json.loads((Path(trainer.log_dir) / "heldout_accuracy.json").read_text())
    assert [h["when"] for h in history] == ["before", "after"]
    assert all(0.0 <= h["accuracy"] <= 1.0 and h["n"] == 24 for h in history)


@pytest.mark.distributed
def test_ddp_two_processes_gloo(tmp_path):
    script = Path(__file__).with_name("ddp_sft_script.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["world_size"] == results[1]["world_size"] == 2
    # DDP averages gradients, so both ranks hold the same weights after every step.
    assert results[0]["checksum"] == results[1]["checksum"]
    assert results[0]["checksum"] != results[0]["initial_checksum"]
    assert results[0]["last_loss"] < results[0]["first_loss"]
    # 12 steps x 8 rows x 2 ranks of a 256-row epoch: the ranks trained on different rows, in the
    # order EpochShuffleSampler gives each rank (the run's seed 0, epoch 0).
    from lightning_agents.datamodules.shuffling import EpochShuffleSampler

    assert results[0]["sampler"] == results[1]["sampler"] == "EpochShuffleSampler"
    data = ChatDataModule(embedded_size=256, batch_size=8, max_length=128, val=None)
    data.setup("fit")
    rows = data.datasets["fit"]
    for rank, result in enumerate(results):
        order = list(EpochShuffleSampler(rows, seed=0, num_replicas=2, rank=rank))[: len(result["rows"])]
        assert result["rows"] == [rows[i]["input_ids"] for i in order]
    assert not {tuple(r) for r in results[0]["rows"]} & {tuple(r) for r in results[1]["rows"]}
