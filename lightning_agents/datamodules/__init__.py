"""DataModules: chat conversations for SFT, curated rollouts, RL prompt sets."""

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError
from lightning_agents.datamodules.conversations import ConversationError
from lightning_agents.datamodules.prompts import PromptDataModule
from lightning_agents.datamodules.topocurate import TopoCurateDataModule
from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts

__all__ = [
    "ChatDataModule",
    "ConversationError",
    "DataFormatError",
    "PromptDataModule",
    "RolloutFormatError",
    "TopoCurateDataModule",
    "load_rollouts",
]
