"""Optimizers with no Lightning dependency: MUZO-Adam zeroth-order fine-tuning."""

from lightning_agents.optim.directions import full_direction, mix_seed
from lightning_agents.optim.muzo_adam import (
    FlatLossWarning,
    LowPrecisionLossWarning,
    MUZOAdam,
    MUZOConfigError,
    NonFiniteLossWarning,
    default_chunk_size,
)

__all__ = [
    "FlatLossWarning",
    "LowPrecisionLossWarning",
    "MUZOAdam",
    "MUZOConfigError",
    "NonFiniteLossWarning",
    "default_chunk_size",
    "full_direction",
    "mix_seed",
]
