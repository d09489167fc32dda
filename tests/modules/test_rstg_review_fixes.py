"""RSTG review fixes: plateau schedulers across an end-of-epoch resume, and one step axis for all logged rows."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import ReduceLROnPlateau
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.types import LRSchedulerConfig

from lightning_agents import PromptDataModule
from lightning_agents.modules.rstg import RSTGModule

SMALL = dict(num_generations=2, max_new_tokens=4, micro_batch_size=4, lr=1e-3, log_samples_every_n_steps=0)


class _PlateauRSTG(RSTGModule):
    """RSTG with the scheduler `lr_scheduler: ReduceLROnPlateau` gives it (monitor on the scheduler)."""

    def configure_optimizers(self):
        opt = super().configure_optimizers()
        sched = ReduceLROnPlateau(opt, monitor="val/accuracy", mode="max", patience=0, factor=0.5)
        return [opt], [{"scheduler": sched, "monitor": sched.monitor}]


def _plateau_fit(root, ckpt=None):
    module = _PlateauRSTG(**SMALL, reward_workers=1)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        # Validation twice an epoch: ModelCheckpoint then saves at validation end, before the
        # epoch's on_train_epoch_end, which a resume from that checkpoint runs again.
        val_check_interval=0.5,
        limit_val_batches=1,
        callbacks=[ModelCheckpoint(dirpath=root / "ck", save_top_k=-1)],
        default_root_dir=root,
    )
    data = PromptDataModule(train_size=4, batch_size=2, val_size=2, eval_batch_size=2, seed=0)
    trainer.fit(module, data, ckpt_path=ckpt)
    (sched,) = trainer.lr_scheduler_configs
    return trainer.optimizers[0].param_groups[0]["lr"], sched.scheduler.best, sched.scheduler.num_bad_epochs


def test_plateau_scheduler_resumes_from_an_end_of_epoch_checkpoint(tmp_path):
    # The restored epoch's on_train_epoch_end ran with no metrics (a checkpoint holds none) and
    # raised; the plateau step of that epoch must also not be lost, or the LR drifts from the
    # straight run's.
    straight = _plateau_fit(tmp_path / "a")
    assert straight[0] < 1e-3  # the run did reduce, so a lost plateau step would show
    ckpt = tmp_path / "a" / "ck" / "epoch=0-step=2.ckpt"
    assert ckpt.is_file()
    resumed = _plateau_fit(tmp_path / "b", ckpt)
    assert resumed == pytest.approx(straight)


def _plateau_module_with(config, metrics, restarting=False):
    module = RSTGModule(**SMALL)
    module._trainer = SimpleNamespace(
        lr_scheduler_configs=[config],
        callback_metrics=metrics,
        current_epoch=0,
        fit_loop=SimpleNamespace(restarting=restarting),
    )
    return module


def test_a_non_strict_plateau_config_warns_and_skips_a_missing_metric():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", patience=0, factor=0.5)
    config = LRSchedulerConfig(sched, interval="epoch", reduce_on_plateau=True, monitor="val/accuracy", strict=False)
    module = _plateau_module_with(config, {})
    with pytest.warns(RuntimeWarning, match="val/accuracy"):
        module.on_train_epoch_end()
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 1.0


def test_a_plateau_scheduler_is_not_stepped_without_a_metric_while_restarting():
    # Lightning's own loop skips plateau schedulers while restarting; a checkpoint without a saved
    # value (one written before RSTG saved it) must not crash the resume.
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", patience=0, factor=0.5)
    config = LRSchedulerConfig(sched, interval="epoch", reduce_on_plateau=True, monitor="val/accuracy")
    module = _plateau_module_with(config, {}, restarting=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.on_train_epoch_end()
    assert sched.last_epoch == 0


class _RecordingLogger(Logger):
    """Keeps (kind, step) of every log_metrics call, in call order."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int | None]] = []

    @property
    def name(self):
        return "recording"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        if "train/loss" in metrics:
            kind = "train"
        elif "val/accuracy" in metrics:
            kind = "val"
        elif any(k.startswith("lr-") for k in metrics):
            kind = "lr"
        else:
            kind = "other"
        self.calls.append((kind, step))


@pytest.mark.parametrize(
    "generation_batches, log_every, train_steps",
    # 8 batches over 2 epochs. Two generation batches per update: 4 updates, the k-th completed by
    # batch 2k, whose rows Lightning puts at step 2k - 1. One per update: 8 updates, every second
    # one logged, at the steps they always had (update count - 1).
    [(2, 1, [1, 3, 5, 7]), (1, 2, [1, 3, 5, 7])],
)
def test_train_val_and_lr_monitor_rows_share_one_step_axis(tmp_path, generation_batches, log_every, train_steps):
    # With 2 generation batches per update, training rows went out at the update count while
    # Lightning wrote validation and LearningRateMonitor rows at its batch count: the steps a
    # logger received went backwards after each validation.
    logger = _RecordingLogger()
    module = RSTGModule(**SMALL, generation_batches_per_step=generation_batches, reward_workers=1)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=logger,
        log_every_n_steps=log_every,
        callbacks=[LearningRateMonitor(logging_interval="step")],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,  # the teacher cache goes there
    )
    trainer.fit(module, PromptDataModule(train_size=8, batch_size=2, val_size=2, eval_batch_size=2, seed=0))
    steps = [step for _, step in logger.calls]
    assert steps == sorted(steps), logger.calls
    assert trainer.global_step == 8 // generation_batches
    # one row per update, every log_every_n_steps updates
    assert [step for kind, step in logger.calls if kind == "train"] == train_steps
    assert [step for kind, step in logger.calls if kind == "val"] == [3, 7]
    # LearningRateMonitor follows log_every_n_steps in batches
    assert [step for kind, step in logger.calls if kind == "lr"] == [s for s in range(8) if (s + 1) % log_every == 0]
