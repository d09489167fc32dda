"""Weight dtypes against the Trainer's precision, and callbacks against modules that build their weights
in configure_model: what trained into NaN, silently in bf16, or averaged nothing."""

from __future__ import annotations

import logging

import lightning as L
import pytest

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.errors import LightningAgentsError


def _fit(tmp_path, module, data=None, max_steps=2, **trainer_kwargs):
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        **trainer_kwargs,
    )
    trainer.fit(module, data or ChatDataModule(embedded_size=16, batch_size=4, max_length=64, val=None))


def test_float16_weights_under_adamw_are_refused_not_trained_into_nan(tmp_path):
    # 16-true: AdamW's eps 1e-8 is 0 in float16; the first step made every weight NaN, even at lr 0.
    with pytest.raises(LightningAgentsError, match="float16 trainable weights with AdamW"):
        _fit(tmp_path, SFTModule(lr=0.0), precision="16-true")


def test_rstg_refuses_float16_weights_too(tmp_path):
    from lightning_agents import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule

    module = RSTGModule(num_generations=2, max_new_tokens=4, log_samples_every_n_steps=0, reward_workers=1)
    data = PromptDataModule(train_size=4, batch_size=2, val=None)
    with pytest.raises(LightningAgentsError, match="float16 trainable weights with AdamW"):
        _fit(tmp_path, module, data, max_steps=1, precision="16-true")


def test_bf16_weights_outside_a_true_precision_are_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="lightning_agents.modules.precision_checks"):
        _fit(tmp_path, SFTModule(dtype="bfloat16"), precision="bf16-mixed")
    assert "trainable weights are bfloat16 under precision bf16-mixed" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lightning_agents.modules.precision_checks"):
        _fit(tmp_path, SFTModule(), precision="bf16-mixed")  # float32 weights: the advised setting
        _fit(tmp_path, SFTModule(dtype="bfloat16"), precision="bf16-true")  # meant
    assert "bfloat16" not in caplog.text


def test_a_teacher_dtype_a_true_precision_overrides_is_warned_about(tmp_path, caplog):
    # bf16-true casts the whole module, the teacher included: teacher_dtype float32 was ignored.
    from lightning_agents import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule

    module = RSTGModule(
        num_generations=2,
        max_new_tokens=4,
        teacher_dtype="float32",
        dtype="bfloat16",
        log_samples_every_n_steps=0,
        reward_workers=1,
    )
    with caplog.at_level(logging.WARNING, logger="lightning_agents.modules.rstg"):
        _fit(
            tmp_path, module, PromptDataModule(train_size=2, batch_size=2, val=None), max_steps=1, precision="bf16-true"
        )
    assert "teacher_dtype float32 is not in effect" in caplog.text


def test_stochastic_weight_averaging_is_refused_and_weight_averaging_works(tmp_path):
    # SWA copied the module in setup, before configure_model built its weights: it averaged
    # nothing and only changed the learning rate.
    import torch
    from lightning.pytorch.callbacks import StochasticWeightAveraging, WeightAveraging

    with pytest.raises(LightningAgentsError, match="StochasticWeightAveraging"):
        _fit(tmp_path, SFTModule(), callbacks=[StochasticWeightAveraging(swa_lrs=1e-3, swa_epoch_start=1)])
    averaging = WeightAveraging(avg_fn=torch.optim.swa_utils.get_ema_avg_fn(0.5))
    _fit(tmp_path, SFTModule(), callbacks=[averaging])
    assert sum(p.numel() for p in averaging._average_model.parameters()) > 0
