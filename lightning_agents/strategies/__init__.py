"""Lightning strategies; importing this package registers ``"muzo"`` and ``"muzo_ddp"`` in Lightning's
``StrategyRegistry`` so ``Trainer(strategy="muzo")`` and ``trainer: {strategy: muzo}`` work."""

from lightning_agents.strategies.muzo import MUZODDPStrategy, MUZOStrategy

__all__ = ["MUZODDPStrategy", "MUZOStrategy"]
