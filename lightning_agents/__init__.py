"""lightning-agents: PyTorch Lightning plugins for post-training LLM agents.

The public API: modules, datamodules, callbacks, strategies and optimizers resolve by short class
name in LightningCLI configs because importing this package imports (and so registers) them all.
"""

__version__ = "0.1.0"

from lightning_agents.callbacks import HeldOutAccuracy
from lightning_agents.datamodules import ChatDataModule, ConversationError, DataFormatError
from lightning_agents.models import QuantizationConfig, load_causal_lm, load_model_and_tokenizer, load_tokenizer
from lightning_agents.modules import SFTModule
from lightning_agents.rewards.arithmetic import ArithmeticVerifier, make_arithmetic_split

__all__ = [
    "ArithmeticVerifier",
    "ChatDataModule",
    "ConversationError",
    "DataFormatError",
    "HeldOutAccuracy",
    "QuantizationConfig",
    "SFTModule",
    "load_causal_lm",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "make_arithmetic_split",
]
