"""A callback writing the weights in on_before_optimizer_step (e.g. clamping them) under bf16-true.

MUZOAdam keeps a float32 master of every bf16 weight; the update used to start from the master, so
whatever the hook wrote was silently undone.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from muzo_helpers import Regressor, loader, regression_data


class ClampOutputLayer(Callback):
    """Projects the last layer's weights into [-0.05, 0.05] before each update."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        pl_module.net[-1].weight.data.clamp_(-0.05, 0.05)


# the regressor's loss is bf16 under bf16-true and lr is 0: those warnings are beside the point here
@pytest.mark.filterwarnings("ignore::lightning_agents.optim.FlatLossWarning")
@pytest.mark.filterwarnings("ignore::lightning_agents.optim.LowPrecisionLossWarning")
def test_a_callbacks_weight_write_before_the_update_survives_under_bf16_true(tmp_path):
    model = Regressor(num_queries=2, lr=0.0, dropout=0.0)
    assert model.net[-1].weight.abs().max() > 0.05
    trainer = L.Trainer(
        strategy="muzo",
        accelerator="cpu",
        precision="bf16-true",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[ClampOutputLayer()],
    )
    trainer.fit(model, loader(regression_data(), 8))
    weight = model.net[-1].weight
    assert weight.dtype == torch.bfloat16
    assert weight.abs().max() <= 0.05
