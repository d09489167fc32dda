"""Drop-in callbacks."""

from lightning_agents.callbacks.accuracy import HeldOutAccuracy
from lightning_agents.callbacks.export import ExportHF
from lightning_agents.callbacks.hflow import HFlowCallback

__all__ = ["ExportHF", "HFlowCallback", "HeldOutAccuracy"]
