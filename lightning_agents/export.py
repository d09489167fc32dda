"""Hugging Face folders out of trained modules: merged weights (or separate adapters), tokenizer, chat template.

A folder written by :func:`export_hf_folder` loads with ``AutoModelForCausalLM.from_pretrained``
and serves with vLLM (``vllm serve DIR``); a separate-adapter folder loads with peft (or
``from_pretrained`` with peft installed) and serves with ``vllm serve BASE --enable-lora``.
"""

from __future__ import annotations

import copy
import inspect
import json
import pickle
import warnings
from pathlib import Path
from typing import Any, Literal

import torch

from lightning_agents.adapters import has_adapters, merged_model
from lightning_agents.errors import LightningAgentsError

__all__ = ["ExportError", "export_hf_folder", "load_trained_module"]

EXPORT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ExportError(LightningAgentsError, ValueError):
    """A checkpoint or an output folder that cannot be exported to."""


def export_hf_folder(
    model,
    tokenizer,
    output: str | Path,
    merge: bool = True,
    dtype: Literal["float32", "bfloat16", "float16"] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` and ``tokenizer`` as a Hugging Face folder.

    Args:
        model: a transformers causal LM, or a peft model with LoRA adapters.
        tokenizer: the tokenizer used in training; its chat template is written with it
            (``chat_template.jinja``), so the folder renders prompts as training did.
        output: the folder to write (created; files in it are replaced).
        merge: fold adapters into the base weights (a plain model folder). ``False`` writes the
            adapters alone (``adapter_config.json``, ``adapter_model.safetensors``), which refer to
            the base model by its path or hub id. Ignored for a model without adapters.
        dtype: cast the written weights to this dtype (default: as trained).
        metadata: extra facts (source checkpoint, step) written to ``lightning_agents_export.json``.

    Returns:
        The output folder.
    """
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise ExportError(f"export output {out} exists and is not a folder")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ExportError(
            "the tokenizer has no chat template; the exported folder could not render chats as in training"
        )
    adapters = has_adapters(model)
    target = merged_model(model) if (adapters and merge) else model
    if dtype is not None:
        if target is model:
            import copy

            target = copy.deepcopy(model)
        target = target.to(EXPORT_DTYPES[dtype])
    was_training = target.training
    target.eval()
    out.mkdir(parents=True, exist_ok=True)
    target.save_pretrained(out, safe_serialization=True)
    if was_training and target is model:
        model.train()
    tokenizer.save_pretrained(out)
    info = {"merged": bool(adapters and merge), "adapters": adapters, **(metadata or {})}
    (out / "lightning_agents_export.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    return out


def _module_classes() -> list[type]:
    from lightning_agents.modules.rstg import RSTGModule
    from lightning_agents.modules.sft import SFTModule

    return [SFTModule, RSTGModule]


def _module_class_for(hparams: dict[str, Any], ckpt_path: str) -> type:
    """The module class that wrote ``hparams``: LightningCLI records its class path; otherwise the
    package class whose ``__init__`` takes every saved hyperparameter."""
    class_path = hparams.get("_class_path")
    if class_path:
        from lightning_agents.callbacks.accuracy import import_object

        return import_object(class_path)
    keys = {k for k in hparams if not k.startswith("_")}
    for cls in _module_classes():
        if keys <= set(inspect.signature(cls.__init__).parameters):
            return cls
    raise ExportError(
        f"{ckpt_path}: cannot tell which module wrote this checkpoint (hyperparameters {sorted(keys)[:8]}...)"
    )


def load_trained_module(ckpt_path: str | Path, map_location: str = "cpu"):
    """Rebuild the LightningModule of a checkpoint (frozen base reloaded, trained weights restored)."""
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        ValueError,
        EOFError,
        OSError,
    ) as exc:  # not a torch file, or cut short
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"{path}: not a readable checkpoint ({first[:200]})") from None
    if not isinstance(checkpoint, dict) or "hyper_parameters" not in checkpoint:
        raise ExportError(f"{path}: not a Lightning checkpoint of a lightning-agents module (no hyper_parameters)")
    cls = _module_class_for(checkpoint["hyper_parameters"], str(path))
    if not (isinstance(cls, type) and issubclass(cls, tuple(_module_classes()))):
        raise ExportError(
            f"{path}: written by {getattr(cls, '__name__', cls)!r}, not by a lightning-agents module "
            "(SFTModule, RSTGModule or a subclass); export reads those"
        )
    with warnings.catch_warnings():
        # Adapter checkpoints leave out the frozen base by design (it reloads from `model`), which
        # Lightning reports key by key; what must be there is checked below instead.
        warnings.filterwarnings(
            "ignore", message="Found keys that are in the model state dict but not in the checkpoint"
        )
        module = cls.load_from_checkpoint(path, map_location=map_location, weights_only=True)
    module.configure_model()
    saved = checkpoint.get("state_dict", {})
    missing = [name for name, p in module.named_parameters() if p.requires_grad and name not in saved]
    if missing:
        raise ExportError(f"{path}: trained parameters missing from the checkpoint, e.g. {missing[:3]}")
    template = training_chat_template(checkpoint)
    if template is not None and template != module.tokenizer.chat_template:
        # The data module's chat_template rendered the training data: serve with it, not the
        # model's original (the module's own tokenizer is shared with its sampler; copy it).
        module.tokenizer = copy.copy(module.tokenizer)
        module.tokenizer.chat_template = template
    return module.eval()


def training_chat_template(checkpoint: dict[str, Any]) -> str | None:
    """The chat template text the data module trained with when it replaced the tokenizer's own
    (``data.chat_template``), from the data module's state in the checkpoint; ``None`` otherwise."""
    for value in checkpoint.values():
        if isinstance(value, dict) and isinstance(value.get("chat_template"), str) and "shuffle_seed" in value:
            return value["chat_template"]
    return None
