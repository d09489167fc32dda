"""Optimizers with no Lightning dependency: MUZO-Adam zeroth-order fine-tuning."""

from lightning_agents.optim.directions import full_direction, mix_seed
from lightning_agents.optim.muzo_adam import MUZOAdam, NonFiniteLossWarning

__all__ = ["MUZOAdam", "NonFiniteLossWarning", "full_direction", "mix_seed"]
