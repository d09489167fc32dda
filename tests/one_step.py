"""A quiet CPU trainer for one optimizer step, shared by tests that fit a module once."""

from __future__ import annotations

from pathlib import Path

import lightning as L


def one_step_trainer(root: Path) -> L.Trainer:
    """One step on the CPU, with no logger, checkpoints, progress bar or model summary."""
    return L.Trainer(
        max_steps=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
    )
