"""Drop-in callbacks."""

from lightning_agents.callbacks.accuracy import HeldOutAccuracy
from lightning_agents.callbacks.hflow import HFlowCallback

__all__ = ["HFlowCallback", "HeldOutAccuracy"]
