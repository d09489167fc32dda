"""MUZOStrategy inside a real Trainer: no backward, eval mode, one log per step, refusals, resume."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import StrategyRegistry
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from muzo_helpers import Regressor, loader, regression_data

from lightning_agents.optim import MUZOAdam, MUZOConfigError
from lightning_agents.strategies import MUZODDPStrategy, MUZOStrategy


def _trainer(tmp_path, **kwargs) -> L.Trainer:
    defaults = dict(
        strategy=MUZOStrategy(),
        accelerator="cpu",
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


class _RecordStep(Callback):
    def __init__(self):
        self.metrics, self.before_step, self.backward_hooks = [], 0, 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.before_step += 1

    def on_before_backward(self, trainer, pl_module, loss):
        self.backward_hooks += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.metrics.append({k: float(v) for k, v in trainer.callback_metrics.items()})


def test_registered_right_after_import_lightning_agents():
    # A fresh interpreter: nothing but `import lightning_agents` (torch-free) and Lightning.
    import subprocess
    import sys

    code = (
        "import sys, lightning_agents\n"
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules\n"
        "import lightning as L\n"
        "t = L.Trainer(strategy='muzo', logger=False, enable_progress_bar=False)\n"
        "q = L.Trainer(strategy='muzo_queries', accelerator='cpu', devices=2, logger=False)\n"
        "print(type(t.strategy).__name__, type(q.strategy).__name__, q.strategy.parallel)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["MUZOStrategy", "MUZODDPStrategy", "queries"]


def test_registered_in_lightning_registry():
    assert "muzo" in StrategyRegistry and "muzo_ddp" in StrategyRegistry
    assert isinstance(L.Trainer(strategy="muzo", logger=False).strategy, MUZOStrategy)
    assert isinstance(
        L.Trainer(strategy="muzo_ddp", accelerator="cpu", devices=1, logger=False).strategy, MUZODDPStrategy
    )


def test_trains_without_backward_in_eval_mode_and_logs_once_per_step(tmp_path):
    q, steps = 3, 4
    model = Regressor(num_queries=q)
    record = _RecordStep()
    trainer = _trainer(tmp_path, max_steps=steps, callbacks=[record])
    trainer.fit(model, loader(regression_data(), 8))

    assert len(model.evaluations) == 2 * q * steps
    assert not any(e["grad"] for e in model.evaluations)
    assert not any(any(e["training"]) for e in model.evaluations), "dropout must be off in perturbed evaluations"
    assert all(m.training for m in model.modules()), "training flags are restored after the step"
    assert all(p.grad is None for p in model.parameters())
    assert record.before_step == steps and record.backward_hooks == 0

    assert len(record.metrics) == steps
    for step, metrics in enumerate(record.metrics):
        losses = [e["loss"] for e in model.evaluations if e["step"] == step]
        assert len(losses) == 2 * q
        # One value per step: the mean over the 2q evaluations, not the last perturbed loss.
        assert metrics["train/loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-6)
        assert metrics["train/double"] == pytest.approx(2 * sum(losses) / len(losses), rel=1e-6)
        assert metrics["train/const"] == 3.0
    assert trainer.optimizers[0].num_updates == steps


def test_loss_decreases_under_trainer(tmp_path):
    data = regression_data(n=64)
    model = Regressor(num_queries=4, lr=2e-2, dropout=0.0)
    x, y = data.tensors
    start = torch.nn.functional.mse_loss(model.net(x), y).item()
    _trainer(tmp_path, max_steps=80).fit(model, loader(data, 16))
    with torch.no_grad():
        assert torch.nn.functional.mse_loss(model.net(x), y).item() < 0.6 * start


def test_validation_and_bf16_true_run(tmp_path):
    class WithVal(Regressor):
        def validation_step(self, batch, batch_idx):
            self.log("val/loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    model = WithVal(num_queries=1)
    trainer = _trainer(tmp_path, max_steps=2, precision="bf16-true", val_check_interval=1, limit_val_batches=1)
    trainer.fit(model, loader(regression_data(), 8), loader(regression_data(), 8))
    assert next(model.parameters()).dtype == torch.bfloat16 and "val/loss" in trainer.callback_metrics


@pytest.mark.parametrize(
    ("trainer_kwargs", "message"),
    [
        (dict(gradient_clip_val=1.0), "cannot clip gradients"),
        (dict(accumulate_grad_batches=2), "accumulate_grad_batches=2"),
    ],
)
def test_refuses_settings_it_cannot_honour(tmp_path, trainer_kwargs, message):
    with pytest.raises(MisconfigurationException, match=message):
        _trainer(tmp_path, **trainer_kwargs).fit(Regressor(), loader(regression_data(), 8))


def test_refuses_accumulation_a_callback_turns_on_after_setup(tmp_path):
    # GradientAccumulationScheduler sets accumulate_grad_batches at epoch start, after the setup
    # check: the batches between updates were evaluated once and thrown away.
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    trainer = _trainer(tmp_path, max_steps=-1, max_epochs=2, callbacks=[GradientAccumulationScheduler({1: 2})])
    with pytest.raises(MisconfigurationException, match="accumulate_grad_batches=2"):
        trainer.fit(Regressor(), loader(regression_data(), 8))


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_mixed_precision_trains_float32_weights(tmp_path, precision):
    strategy = MUZOStrategy(precision_plugin=MixedPrecision(precision, "cpu"))
    data = regression_data(n=64)
    model = Regressor(num_queries=4, lr=2e-2, dropout=0.0)
    x, y = data.tensors
    start = torch.nn.functional.mse_loss(model.net(x), y).item()
    dtypes = []

    record = _RecordStep()
    trainer = _trainer(tmp_path, strategy=strategy, max_steps=40, callbacks=[record])
    original = model.training_step

    def step(batch, batch_idx):
        dtypes.append(model.net(batch[0]).dtype)  # the forward runs in 16 bits under autocast
        return original(batch, batch_idx)

    model.training_step = step
    trainer.fit(model, loader(data, 16))
    half = torch.float16 if precision == "16-mixed" else torch.bfloat16
    assert set(dtypes) == {half}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert "master" not in trainer.optimizers[0].state[model.net[0].weight]  # float32 weights need no copy
    with torch.no_grad():
        assert torch.nn.functional.mse_loss(model.net(x), y).item() < 0.7 * start


def test_bf16_mixed_at_lr_zero_keeps_the_weights(tmp_path):
    model = Regressor(num_queries=4, lr=0.0, dropout=0.0)
    before = [p.detach().clone() for p in model.parameters()]
    strategy = MUZOStrategy(precision_plugin=MixedPrecision("bf16-mixed", "cpu"))
    _trainer(tmp_path, strategy=strategy, max_steps=60).fit(model, loader(regression_data(), 8))
    for a, b in zip(before, model.parameters()):
        # float32 perturb/restore: rounding residue only (bf16-true in place drifted by ~1e-1 relative).
        torch.testing.assert_close(b.detach(), a, rtol=0, atol=1e-5)


def test_bf16_true_plain_perturbation_is_refused(tmp_path):
    class Plain(Regressor):
        def configure_optimizers(self):
            return MUZOAdam(self.parameters(), lr=1e-3, num_queries=1, master_weights=False)

    with pytest.raises(MUZOConfigError, match="random-walk"):
        _trainer(tmp_path, precision="bf16-true").fit(Plain(), loader(regression_data(), 8))


def test_on_before_optimizer_step_sees_unperturbed_weights(tmp_path):
    class Watch(Callback):
        def __init__(self):
            self.start, self.seen = [], []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.start.append(torch.cat([p.detach().reshape(-1).clone() for p in pl_module.parameters()]))

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            self.seen.append(torch.cat([p.detach().reshape(-1).clone() for p in pl_module.parameters()]))

    watch = Watch()
    _trainer(tmp_path, max_steps=3, callbacks=[watch]).fit(Regressor(num_queries=2), loader(regression_data(), 8))
    assert len(watch.seen) == len(watch.start) == 3
    for start, seen in zip(watch.start, watch.seen):
        torch.testing.assert_close(seen, start, rtol=0, atol=1e-6)


def test_refuses_other_optimizers_and_manual_optimization(tmp_path):
    with pytest.raises(MisconfigurationException, match="exactly one lightning_agents.optim.MUZOAdam"):
        _trainer(tmp_path).fit(Regressor(optimizer="adamw"), loader(regression_data(), 8))

    class Manual(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

    with pytest.raises(MisconfigurationException, match="needs automatic optimization"):
        _trainer(tmp_path).fit(Manual(), loader(regression_data(), 8))


def test_resume_from_checkpoint_is_bit_identical(tmp_path):
    data = regression_data(n=24)  # 3 batches of 8: an epoch boundary is a clean resume point

    straight = Regressor(num_queries=2)
    _trainer(tmp_path / "a", max_steps=-1, max_epochs=2).fit(straight, loader(data, 8))

    first = Regressor(num_queries=2)
    trainer = _trainer(tmp_path / "b", max_steps=-1, max_epochs=1)
    trainer.fit(first, loader(data, 8))
    ckpt = tmp_path / "half.ckpt"
    trainer.save_checkpoint(ckpt)
    assert "muzo" in torch.load(ckpt, weights_only=False)["optimizer_states"][0]

    resumed = Regressor(num_queries=2, seed=99)  # different init: everything must come from the checkpoint
    _trainer(tmp_path / "c", max_steps=-1, max_epochs=2).fit(resumed, loader(data, 8), ckpt_path=ckpt)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


@pytest.mark.distributed
def test_ddp_two_processes_equal_single_process_on_the_global_batch(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    steps, per_rank, q = 4, 4, 2
    worker = Path(__file__).with_name("muzo_ddp_worker.py")
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(worker), str(tmp_path), str(steps), str(per_rank), str(q)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert ranks[0]["world_size"] == 2 and ranks[0]["wrapped"] != "DistributedDataParallel"

    single = Regressor(num_queries=q, dtype=torch.float64, dropout=0.0)
    _trainer(tmp_path / "single", max_steps=steps).fit(
        single, loader(regression_data(dtype=torch.float64), 2 * per_rank)
    )

    start = Regressor(num_queries=q, dtype=torch.float64, dropout=0.0)
    for p0, p1, ps, pinit in zip(ranks[0]["params"], ranks[1]["params"], single.parameters(), start.parameters()):
        assert torch.equal(p0, p1), "every rank must apply the identical update"
        assert not torch.equal(ps.detach(), pinit.detach())
        # Equal up to the rounding of mean-of-rank-means vs the global mean (float64).
        torch.testing.assert_close(p0, ps.detach(), rtol=1e-9, atol=1e-11)


@pytest.mark.distributed
def test_query_parallel_two_processes_equal_single_process_update(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    steps, per_rank, q = 4, 4, 4
    worker = Path(__file__).with_name("muzo_ddp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(worker), str(tmp_path), str(steps), str(per_rank), str(q), "queries"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    # Each rank evaluates q of the 2q perturbed losses per step: half the forward passes.
    assert [r["evaluations"] for r in ranks] == [q * steps, q * steps]

    single = Regressor(num_queries=q, dtype=torch.float64, dropout=0.0)
    _trainer(tmp_path / "single", max_steps=steps).fit(
        single, loader(regression_data(dtype=torch.float64), 2 * per_rank)
    )
    assert len(single.evaluations) == 2 * q * steps
    torch.testing.assert_close(ranks[0]["losses"], ranks[1]["losses"], rtol=0, atol=0)
    start = Regressor(num_queries=q, dtype=torch.float64, dropout=0.0)
    for p0, p1, ps, pinit in zip(ranks[0]["params"], ranks[1]["params"], single.parameters(), start.parameters()):
        assert not torch.equal(ps.detach(), pinit.detach())
        # Each rank perturbs and restores only its own directions: equal to the last float64 bits.
        torch.testing.assert_close(p0, p1, rtol=0, atol=1e-13)
        torch.testing.assert_close(p0, ps.detach(), rtol=0, atol=1e-12)
