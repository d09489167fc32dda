"""Shared HFlow fixtures: tiny models built from a config (no files), and the embedded checkpoints."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedded_pool_factory():
    """Builds a pool over the packaged student and teacher (the models load once per session)."""
    from lightning_agents.hflow import BackbonePool, LocalHFBackbone
    from lightning_agents.models import load_model_and_tokenizer

    try:
        student = load_model_and_tokenizer("embedded:student")
        teacher = load_model_and_tokenizer("embedded:teacher")
    except FileNotFoundError as exc:  # pragma: no cover - only before the checkpoints are built
        pytest.skip(str(exc))

    def make(ledger=None):
        return BackbonePool(
            [
                LocalHFBackbone(
                    "student", input_price=1.0, output_price=2.0, model_object=student[0], tokenizer=student[1]
                ),
                LocalHFBackbone(
                    "teacher", input_price=4.0, output_price=8.0, model_object=teacher[0], tokenizer=teacher[1]
                ),
            ],
            ledger,
        )

    return make
