"""LightningModules: supervised fine-tuning and RL with teacher guidance."""

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.modules.sft import SFTModule

__all__ = ["RSTGModule", "SFTModule"]
