"""Drop-in callbacks."""

from lightning_agents.callbacks.accuracy import HeldOutAccuracy

__all__ = ["HeldOutAccuracy"]
