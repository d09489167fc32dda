"""LoRA and QLoRA adapters through ``peft``, and the checkpoint filter that keeps only what trains.

The modules (:class:`~lightning_agents.SFTModule`, :class:`~lightning_agents.RSTGModule`) take an
:class:`AdapterConfig`; :func:`apply_adapters` wraps a loaded causal LM in a ``peft`` model whose
only trainable parameters are the adapters. No Lightning here: the modules call these functions
from ``configure_model`` and their checkpoint hooks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from lightning_agents.errors import LightningAgentsError

__all__ = [
    "AdapterConfig",
    "AdapterError",
    "BaseModelView",
    "adapters_disabled",
    "apply_adapters",
    "check_adapter_device",
    "has_adapters",
    "keep_trainable_state",
    "merged_model",
]


class AdapterError(LightningAgentsError, ValueError):
    """An adapter setting that cannot be honoured (QLoRA without a GPU, peft missing, no target module)."""


@dataclass
class AdapterConfig:
    """LoRA adapters (``peft``) on a causal LM; the base weights stay frozen.

    Args:
        rank: LoRA rank r of the update ``B @ A``.
        alpha: LoRA scaling numerator; the update is scaled by ``alpha / rank``.
        dropout: dropout on the adapter input during training.
        target_modules: names of the linear layers that get adapters (e.g. ``[q_proj, v_proj]``),
            or ``all-linear`` for every linear layer except the output head.
        qlora: load the base model in 4-bit NF4 (bitsandbytes) and train LoRA on top; needs a CUDA GPU.
        bias: which biases train as well: ``none``, ``all`` or ``lora_only``.
        modules_to_save: extra modules trained in full and saved with the adapters (e.g. ``[lm_head]``).
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    qlora: bool = False
    bias: Literal["none", "all", "lora_only"] = "none"
    modules_to_save: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise AdapterError(f"adapter rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise AdapterError(f"adapter dropout must be in [0, 1), got {self.dropout}")

    def to_peft(self):
        """The equivalent ``peft.LoraConfig`` for a causal LM."""
        peft = _import_peft()
        return peft.LoraConfig(
            task_type="CAUSAL_LM",
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules),
            bias=self.bias,
            modules_to_save=list(self.modules_to_save) or None,
        )


def _import_peft():
    try:
        import peft
    except ImportError:
        raise AdapterError("adapters need the `peft` package: pip install 'lightning-agents[adapters]'") from None
    return peft


def as_adapter_config(value: AdapterConfig | dict[str, Any] | None) -> AdapterConfig | None:
    """Accept an :class:`AdapterConfig`, a plain dict of its fields (from Python or YAML), or ``None``."""
    if value is None or isinstance(value, AdapterConfig):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(AdapterConfig.__dataclass_fields__))
        if unknown:
            raise AdapterError(
                f"unknown adapter setting(s) {unknown}; known: {sorted(AdapterConfig.__dataclass_fields__)}"
            )
        return AdapterConfig(**value)
    raise AdapterError(f"adapter must be an AdapterConfig or a dict, got {type(value).__name__}")


def check_adapter_device(config: AdapterConfig | None) -> None:
    """Refuse QLoRA where bitsandbytes 4-bit kernels cannot run (no CUDA device).

    Called when a module is built, so the error comes before any model is loaded.
    """
    if config is not None and config.qlora and not torch.cuda.is_available():
        raise AdapterError(
            "adapter.qlora=true loads the base model in 4-bit with bitsandbytes, which needs a CUDA GPU, and none "
            "is available here. Set adapter.qlora=false to train plain LoRA on an unquantized base on this machine."
        )


def apply_adapters(model, config: AdapterConfig, gradient_checkpointing: bool = False):
    """Wrap ``model`` in a ``peft`` LoRA model: every base weight frozen, the adapters trainable.

    Args:
        model: a transformers causal LM (4-bit quantized when ``config.qlora``).
        config: the adapter settings.
        gradient_checkpointing: keep input gradients enabled so checkpointed blocks still reach the
            adapters through a frozen embedding.
    """
    peft = _import_peft()
    if config.qlora:
        # Casts norms to fp32 and enables input gradients, as the QLoRA recipe requires.
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    elif gradient_checkpointing:
        model.enable_input_require_grads()
    try:
        return peft.get_peft_model(model, config.to_peft())
    except ValueError as exc:
        raise AdapterError(f"cannot add LoRA adapters (target_modules={config.target_modules!r}): {exc}") from None


def has_adapters(model) -> bool:
    """Whether ``model`` is a ``peft`` model."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


@contextmanager
def adapters_disabled(model) -> Iterator[None]:
    """Run ``model`` as its base model (adapters off), e.g. as the frozen reference policy.

    A no-op context for a model without adapters.
    """
    with model.disable_adapter() if has_adapters(model) else nullcontext():
        yield


class BaseModelView:
    """The base model under a ``peft`` model's adapters, called like a model: the frozen reference
    policy of RL without a second copy of the weights.

    It has no mode of its own (``eval``/``train`` do nothing) so that using it never switches the
    trained policy's mode; forwards run without gradient.

    Args:
        model: the peft model whose base is wanted.
    """

    training = False

    def __init__(self, model) -> None:
        self.model = model

    def eval(self) -> BaseModelView:
        return self

    def train(self, mode: bool = True) -> BaseModelView:
        return self

    def __call__(self, *args: Any, **kwargs: Any):
        with torch.no_grad(), adapters_disabled(self.model):
            return self.model(*args, **kwargs)


def keep_trainable_state(module: torch.nn.Module, state_dict: dict[str, torch.Tensor], prefix: str) -> int:
    """Drop from ``state_dict`` every tensor of ``module`` (named under ``prefix``) that does not train.

    Checkpoints of an adapter run then hold the adapters only; the frozen base is reloaded from
    its path or hub id when the module is rebuilt. Returns the number of entries dropped.
    """
    trainable = {prefix + name for name, p in module.named_parameters() if p.requires_grad}
    frozen = [k for k in state_dict if k.startswith(prefix) and k not in trainable]
    for key in frozen:
        del state_dict[key]
    return len(frozen)


def merged_model(model):
    """A plain transformers model with the adapters folded into the base weights (a copy; ``model`` is kept).

    A model without adapters is returned as is.
    """
    if not has_adapters(model):
        return model
    import copy

    return copy.deepcopy(model).merge_and_unload()


def trainable_parameter_count(model: torch.nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
