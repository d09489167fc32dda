"""RSTG on two CPU processes (DDP, gloo) with a ReduceLROnPlateau on a ``train/*`` metric.

The training metrics are each rank's own (its prompts' rewards). A plateau scheduler stepped with
them lowered the learning rate on the rank whose reward stalled only, and the DDP replicas ended
with different weights, without an error. The script part of this test (``__main__``) sits in this
file so that the test is one file: rank 0's reward mean is 0.5 at every step; rank 1's is 0.5 at
its first step and 0.75 after (mixed groups, so there is a gradient).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from hang_guard import run_or_fail

from lightning_agents.modules.rstg import RSTGModule

_CALLS = itertools.count()


class RankRewards:
    """Rank 0: 1, 0, 1, 0, ... Rank 1: the same for its first 8 samples, then three of every four right."""

    def __call__(self, completion: str, reference: str) -> float:
        n = next(_CALLS)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0 or n < 8:
            return float(n % 2 == 0)
        return float(n % 4 != 0)


class PlateauRSTG(RSTGModule):
    """RSTG with ReduceLROnPlateau on train/reward_mean after every update, as a config's
    ``lr_scheduler`` section would set it."""

    def configure_optimizers(self):
        opt = super().configure_optimizers()
        opt = opt["optimizer"] if isinstance(opt, dict) else opt
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=0.1, patience=0)
        sched.monitor = "train/reward_mean"
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class _FirstValue(L.Callback):
    """The scheduler steps inside the update, before that update's metrics are logged: start from
    a logged -1 (the same on both ranks) so that the first update has a value."""

    def on_train_start(self, trainer, pl_module):
        trainer.callback_metrics["train/reward_mean"] = torch.tensor(-1.0)


class _LearningRates(L.Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def _fit(out: Path) -> None:
    from torch.utils.data import DataLoader

    from lightning_agents.rewards.arithmetic import arithmetic_conversation, make_arithmetic_split

    torch.set_num_threads(1)
    L.seed_everything(0)
    records = [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in make_arithmetic_split("val", n=16)
    ]
    module = PlateauRSTG(
        num_generations=4,
        max_new_tokens=8,
        guidance=False,
        micro_batch_size=4,
        lr=1e-2,
        verifier=f"{__name__}.RankRewards",
        reward_workers=1,
        log_samples_every_n_steps=0,
    )
    lrs = _LearningRates()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[_FirstValue(), lrs],
    )
    trainer.fit(module, DataLoader(records, batch_size=2, collate_fn=list))
    digest = hashlib.sha256()
    for p in module.model.parameters():
        digest.update(p.detach().double().numpy().tobytes())
    result = {"lrs": lrs.lrs, "weights": digest.hexdigest()}
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_plateau_scheduler_on_a_training_metric_steps_alike_on_every_rank(tmp_path):
    run_or_fail([sys.executable, __file__, str(tmp_path)], "2-process RSTG", timeout=300)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # The ranks' mean reward (0.5, then 0.625) improves at the third update and stalls at the fourth.
    assert r0["lrs"] == r1["lrs"] == pytest.approx([1e-2, 1e-2, 1e-2, 1e-3])
    assert r0["weights"] == r1["weights"]


if __name__ == "__main__":
    _fit(Path(sys.argv[1]))
