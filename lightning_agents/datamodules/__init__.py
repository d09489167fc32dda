"""DataModules: chat conversations for SFT, curated rollouts, RL prompt sets."""

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError
from lightning_agents.datamodules.conversations import ConversationError

__all__ = ["ChatDataModule", "ConversationError", "DataFormatError"]
