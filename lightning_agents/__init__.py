"""lightning-agents: PyTorch Lightning plugins for post-training LLM agents.

The public API is re-exported here. Names are imported on first use, so that importing a pure
part (``lightning_agents.topology``, ``lightning_agents.hflow``) does not pay for importing
Lightning and transformers. The CLI calls :func:`import_all`, which imports every module so that
LightningCLI resolves modules, datamodules, callbacks and strategies by short class name.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # models
    "QuantizationConfig": "lightning_agents.models",
    "load_causal_lm": "lightning_agents.models",
    "load_model_and_tokenizer": "lightning_agents.models",
    "load_tokenizer": "lightning_agents.models",
    # adapters and export
    "AdapterConfig": "lightning_agents.adapters",
    "export_hf_folder": "lightning_agents.export",
    # LightningModules
    "SFTModule": "lightning_agents.modules.sft",
    "RSTGModule": "lightning_agents.modules.rstg",
    # DataModules and data errors
    "ChatDataModule": "lightning_agents.datamodules.chat",
    "DataFormatError": "lightning_agents.datamodules.chat",
    "ConversationError": "lightning_agents.datamodules.conversations",
    "PromptDataModule": "lightning_agents.datamodules.prompts",
    "TopoCurateDataModule": "lightning_agents.datamodules.topocurate",
    "RolloutFormatError": "lightning_agents.datamodules.trajectories",
    "load_rollouts": "lightning_agents.datamodules.trajectories",
    # callbacks
    "HeldOutAccuracy": "lightning_agents.callbacks.accuracy",
    "HFlowCallback": "lightning_agents.callbacks.hflow",
    "ExportHF": "lightning_agents.callbacks.export",
    # zeroth-order optimisation
    "MUZOAdam": "lightning_agents.optim.muzo_adam",
    "NonFiniteLossWarning": "lightning_agents.optim.muzo_adam",
    "MUZOStrategy": "lightning_agents.strategies.muzo",
    "MUZODDPStrategy": "lightning_agents.strategies.muzo",
    # rewards
    "ArithmeticVerifier": "lightning_agents.tasks.arithmetic",
    "make_arithmetic_split": "lightning_agents.tasks.arithmetic",
    "GSM8KVerifier": "lightning_agents.rewards.gsm8k",
    "BoxedMathVerifier": "lightning_agents.rewards.math",
    "CodeVerifier": "lightning_agents.rewards.code",
    # topology and workflows
    "build_quotient_graph": "lightning_agents.topology",
    "Workflow": "lightning_agents.hflow",
    "HFlowSearch": "lightning_agents.hflow",
    "BackboneSpec": "lightning_agents.hflow",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def import_all() -> None:
    """Import every exported name, registering all Lightning classes with the CLI's resolver."""
    for name in __all__:
        __getattr__(name)


# `Trainer(strategy="muzo")` right after `import lightning_agents`: the strategy names are put in
# Lightning's registry when Lightning loads (or now, if it already has), without importing it here.
from lightning_agents.strategies import install_registration as _install_strategy_registration  # noqa: E402

_install_strategy_registration()
