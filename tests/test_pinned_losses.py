"""Pinned losses of the first 4 optimisation steps (torchtune-style) and "every trainable parameter
changed" checks (TRL-style) for SFT, RSTG and MUZO on the embedded student, seed 0.

A pinned value moves when anything on the training path changes: the data and its tokenization,
the chat template's assistant mask, the loss, the optimizer, the strategy, the checkpoints. When a
change is intended, re-run with ``LIGHTNING_AGENTS_PRINT_PINS=1 pytest tests/test_pinned_losses.py -s``
and paste the printed values (and say why in the commit). Values hold for the pinned torch
version on CPU; tolerances absorb summation-order noise only.
"""

from __future__ import annotations

import os

import lightning as L
import pytest
import torch

from lightning_agents import ChatDataModule, PromptDataModule, SFTModule
from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.optim import MUZOAdam
from lightning_agents.strategies import MUZOStrategy

STEPS = 4
# The 4 step losses, then the L2 distance the trainable weights moved over the 4 steps.
# Measured on the embedded checkpoints of this commit's lightning_agents/assets (torch 2.13.0, CPU).
PINNED = {
    "sft": [0.030264, 0.044158, 0.0925, 0.061332, 0.808416],
    "muzo": [0.03001, 0.031734, 0.078551, 0.035451, 0.835225],
    "rstg": [0.0, 0.0, 0.0, 0.0, 0.791459],
}


class _Losses(L.Callback):
    """Records each step's loss, and the trainable parameters as training starts (modules may
    build their model in ``configure_model``, after construction)."""

    def __init__(self):
        self.values: list[float] = []
        self.before: dict[str, torch.Tensor] = {}

    def on_train_start(self, trainer, pl_module):
        self.before = {n: p.detach().clone() for n, p in pl_module.named_parameters() if p.requires_grad}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.values.append(float(loss))


def _fit(module, data, tmp_path, **trainer_kwargs):
    losses = _Losses()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=tmp_path,
        callbacks=[losses],
        deterministic=True,
        **trainer_kwargs,
    )
    trainer.fit(module, data)
    before = losses.before
    unchanged = [n for n, p in module.named_parameters() if p.requires_grad and torch.equal(p.detach(), before[n])]
    # The size of the whole update: GRPO's surrogate is 0 on-policy whatever the gradient, so the
    # loss alone would not pin RSTG; the distance the weights moved does.
    delta = (
        sum(
            float((p.detach().double() - before[n].double()).pow(2).sum())
            for n, p in module.named_parameters()
            if p.requires_grad
        )
        ** 0.5
    )
    return losses.values + [delta], unchanged, len(before)


def _check(name, losses):
    if os.environ.get("LIGHTNING_AGENTS_PRINT_PINS"):
        print(f'\n    "{name}": {[round(v, 6) for v in losses]},')
    assert len(losses) == STEPS + 1
    assert PINNED[name] is not None, f"no pinned losses for {name}; print them with LIGHTNING_AGENTS_PRINT_PINS=1"
    assert losses == pytest.approx(PINNED[name], rel=1e-4, abs=1e-5)


def _sft_data():
    return ChatDataModule(
        train="embedded:arithmetic/train",
        val=None,
        tokenizer="embedded:student",
        embedded_size=64,
        embedded_styles=["direct", "tool"],
        batch_size=8,
        max_length=128,
        shuffle=False,
    )


def test_sft_pinned_losses_and_every_parameter_changes(tmp_path):
    L.seed_everything(0)
    losses, unchanged, n = _fit(SFTModule(model="embedded:student", lr=1e-3), _sft_data(), tmp_path)
    assert n > 0 and unchanged == []
    _check("sft", losses)


class _MUZOSFT(SFTModule):
    def configure_optimizers(self):
        return MUZOAdam(self.parameters(), lr=1e-3, eps=1e-3, num_queries=2, seed=0)


def test_muzo_pinned_losses_and_every_parameter_changes(tmp_path):
    L.seed_everything(0)
    module = _MUZOSFT(model="embedded:student")
    losses, unchanged, n = _fit(module, _sft_data(), tmp_path, strategy=MUZOStrategy())
    assert n > 0 and unchanged == []
    _check("muzo", losses)


@pytest.mark.slow
def test_rstg_pinned_losses_and_every_parameter_changes(tmp_path):
    L.seed_everything(0)
    module = RSTGModule(
        num_generations=4,
        max_new_tokens=16,
        teacher_k=4,
        micro_batch_size=8,
        lr=1e-3,
        beta_start=0.5,
        beta_floor=0.1,
        teacher_cache=str(tmp_path / "cache.jsonl"),
    )
    data = PromptDataModule(
        train="embedded:arithmetic/train", val=None, train_size=4 * STEPS, batch_size=4, shuffle=False
    )
    losses, unchanged, n = _fit(module, data, tmp_path)
    assert n > 0 and unchanged == []
    _check("rstg", losses)
