"""MUZOStrategy and Lightning behaviours a module or callback asks for without any Trainer setting.

From an audit (session 36, /work/h36/muzo/s3_lightning_settings.py): a module overriding
``configure_gradient_clipping`` (Lightning's per-module clipping hook) trained with the hook never
called, silently; a ``training_step`` returning ``None`` (Lightning's documented "skip this batch",
e.g. on a non-finite loss) stopped the fit with a RuntimeError from MUZOAdam; and
``on_before_zero_grad`` (where EMA callbacks often update) ran in each of the 2q evaluations, on
perturbed weights (s6_zero_grad_hook.py).
"""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from muzo_helpers import Regressor, loader, regression_data

from lightning_agents.strategies import MUZOStrategy, SkippedBatchWarning


def _fit(module: L.LightningModule, steps: int = 3) -> L.Trainer:
    trainer = L.Trainer(
        strategy=MUZOStrategy(),
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, loader(regression_data(dtype=torch.float64), 8))
    return trainer


class _Clipping(Regressor):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.clip_gradients(optimizer, gradient_clip_val=0.01, gradient_clip_algorithm="norm")


def test_a_module_that_overrides_configure_gradient_clipping_is_told_the_hook_never_runs():
    # a warning, not a refusal (review): Lightning's documented override clips only under a
    # condition, and with gradient_clip_val unset it does nothing
    with pytest.warns(UserWarning, match="_Clipping.configure_gradient_clipping: MUZOStrategy never calls it"):
        _fit(_Clipping(dropout=0.0, dtype=torch.float64))


class _SkipsOneEvaluation(Regressor):
    """Returns None in one perturbed evaluation of the second step, as `if not finite: return None` would."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0, dtype=torch.float64, num_queries=2)
        self.calls = 0
        self.weights: dict[int, list[torch.Tensor]] = {}

    def on_train_batch_start(self, batch, batch_idx):
        self.weights[batch_idx] = [p.detach().clone() for p in self.parameters()]

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.calls += 1
        return None if self.calls == 4 + 3 else loss  # step 2 has evaluations 5..8


def test_training_step_returning_none_skips_that_step_with_the_weights_restored():
    module = _SkipsOneEvaluation()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _fit(module)
    optimizer = trainer.optimizers[0]
    assert (optimizer.num_updates, optimizer.num_skipped, trainer.global_step) == (2, 1, 3)
    assert module.calls == 12  # every evaluation still ran
    for before, after in zip(module.weights[1], module.weights[2]):
        assert torch.allclose(before, after, rtol=0, atol=1e-14)  # float64: restored to rounding
    assert not all(torch.equal(a, b) for a, b in zip(module.weights[0], module.weights[1]))
    skipped = [w for w in caught if w.category is SkippedBatchWarning]
    assert len(skipped) == 1 and "global step 1" in str(skipped[0].message)


class _ZeroGradProbe(L.Callback):
    """Where an EMA callback usually updates: records how far the weights are from the batch's start."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, float]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.start = [p.detach().clone() for p in pl_module.parameters()]

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        offset = max(float((p - s).abs().max()) for p, s in zip(pl_module.parameters(), self.start))
        self.seen.append((trainer.global_step, offset))


def test_on_before_zero_grad_runs_once_per_step_on_the_unperturbed_weights():
    probe = _ZeroGradProbe()
    trainer = L.Trainer(
        strategy=MUZOStrategy(),
        accelerator="cpu",
        max_steps=3,
        callbacks=[probe],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(dropout=0.0, num_queries=4), loader(regression_data(), 8))
    assert probe.seen == [(0, 0.0), (1, 0.0), (2, 0.0)]
