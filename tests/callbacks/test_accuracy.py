"""HeldOutAccuracy history across a checkpoint resume: one run's history, continued, not two mixed."""

import json
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.callbacks import HeldOutAccuracy


class CountingAccuracy(HeldOutAccuracy):
    evaluations = 0

    def evaluate(self, pl_module):
        self.evaluations += 1
        return super().evaluate(pl_module)


def _fit(root, max_steps, ckpt_path=None):
    callback = CountingAccuracy(split="val", size=8, max_new_tokens=12)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[
            callback,
            ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=2, save_top_k=-1, filename="{step}"),
        ],
    )
    trainer.fit(
        SFTModule(lr=3e-3), ChatDataModule(embedded_size=32, batch_size=8, max_length=96, val=None), ckpt_path=ckpt_path
    )
    return json.loads((Path(trainer.log_dir) / "heldout_accuracy.json").read_text()), callback


def test_history_continues_after_resume(tmp_path):
    first, _ = _fit(tmp_path / "a", 2)
    assert [(h["when"], h["step"]) for h in first] == [("before", 0), ("after", 2)]
    resumed, callback = _fit(tmp_path / "b", 4, ckpt_path=str(tmp_path / "a" / "ckpt" / "step=2.ckpt"))
    # The original "before" (from the checkpoint), no second "before" at the resume point.
    assert [(h["when"], h["step"]) for h in resumed] == [("before", 0), ("after", 4)]
    assert resumed[0] == first[0]
    assert callback.evaluations == 1  # only "after": the resumed weights are not a "before"
    # The same callback object on a fresh fit starts over.
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        default_root_dir=tmp_path / "c",
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[callback],
        enable_checkpointing=False,
    )
    trainer.fit(SFTModule(), ChatDataModule(embedded_size=16, batch_size=8, max_length=96, val=None))
    assert [(h["when"], h["step"]) for h in callback.history] == [("before", 0), ("after", 1)]
