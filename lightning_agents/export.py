"""Hugging Face folders out of trained modules: merged weights (or separate adapters), tokenizer, chat template.

A folder written by :func:`export_hf_folder` loads with ``AutoModelForCausalLM.from_pretrained``
and serves with vLLM (``vllm serve DIR``); a separate-adapter folder loads with peft (or
``from_pretrained`` with peft installed) and serves with ``vllm serve BASE --enable-lora``.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any, Literal

import torch

from lightning_agents.adapters import has_adapters, merged_model
from lightning_agents.errors import LightningAgentsError

__all__ = ["ExportError", "check_export_target", "export_hf_folder", "load_trained_module", "turn_end_token_ids"]

EXPORT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Written last into every export: it marks a folder as one (complete) export, which a later export
# with `overwrite` may replace; any other non-empty folder is the user's and is never written into.
EXPORT_MARKER = "lightning_agents_export.json"


class ExportError(LightningAgentsError, ValueError):
    """A checkpoint or an output folder that cannot be exported to."""


def check_export_target(output: str | Path, overwrite: bool = False) -> Path:
    """Refuse an output that an export must not write into, before anything is loaded or trained.

    A new or empty folder is fine; so is a folder holding an earlier export (it has
    ``lightning_agents_export.json``) when ``overwrite`` is true, which is then replaced as a whole.
    Any other non-empty folder (a run's checkpoints, say) is refused, ``overwrite`` or not: mixing
    model files into it made folders that loaded as neither.

    Returns:
        The output as a ``Path``.
    """
    out = Path(output).expanduser()
    if out.exists() and not out.is_dir():
        raise ExportError(f"export output {out} exists and is not a folder")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not entries:
        return out
    if (out / EXPORT_MARKER).is_file():
        if overwrite:
            return out
        raise ExportError(
            f"export output {out} already holds an export; pass overwrite=true (--overwrite true) to replace it, "
            "or choose another folder"
        )
    shown = ", ".join(entries[:5]) + (f", ... ({len(entries)} entries)" if len(entries) > 5 else "")
    raise ExportError(
        f"export output {out} is a non-empty folder that is not an export (it holds {shown}); "
        "choose a new or empty folder"
    )


def export_hf_folder(
    model,
    tokenizer,
    output: str | Path,
    merge: bool = True,
    dtype: Literal["float32", "bfloat16", "float16"] | None = None,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` and ``tokenizer`` as a Hugging Face folder.

    The folder is written beside ``output`` under a temporary name and renamed into place when
    complete: a full disk or an interrupted write leaves no folder that looks like an export.

    Args:
        model: a transformers causal LM, or a peft model with LoRA adapters.
        tokenizer: the tokenizer used in training; its chat template is written with it
            (``chat_template.jinja``), so the folder renders prompts as training did.
        output: the folder to write: new or empty, or an earlier export with ``overwrite``
            (see :func:`check_export_target`).
        merge: fold adapters into the base weights (a plain model folder). ``False`` writes the
            adapters alone (``adapter_config.json``, ``adapter_model.safetensors``), which refer to
            the base model by its path or hub id. Ignored for a model without adapters.
        dtype: cast the written weights to this dtype (default: as trained).
        metadata: extra facts (source checkpoint, step) written to ``lightning_agents_export.json``.
        overwrite: replace an earlier export in ``output``.

    Returns:
        The output folder.
    """
    out = check_export_target(output, overwrite)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ExportError(
            "the tokenizer has no chat template; the exported folder could not render chats as in training"
        )
    adapters = has_adapters(model)
    target = merged_model(model) if (adapters and merge) else model
    if dtype is not None:
        if target is model:
            target = copy.deepcopy(model)
        target = target.to(EXPORT_DTYPES[dtype])
    info = {"merged": bool(adapters and merge), "adapters": adapters, **(metadata or {})}
    staging = out.absolute().with_name(f".{out.name}.partial-{os.getpid()}")
    was_training = target.training
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        target.eval()
        target.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        _write_stop_tokens(staging, target, tokenizer, adapters_only=adapters and not merge)
        (staging / EXPORT_MARKER).write_text(json.dumps(info, indent=2, default=str) + "\n")
        _move_into_place(staging, out)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        # OSError: full disk, read-only or missing permission; safetensors reports a full disk as its own error.
        if isinstance(exc, OSError) or type(exc).__name__ == "SafetensorError":
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ExportError(f"cannot write the export {out}: {first} (nothing was written there)") from exc
        raise
    finally:
        if was_training and target is model:
            model.train()
    return out


def _move_into_place(staging: Path, out: Path) -> None:
    """Rename the complete ``staging`` folder to ``out``, replacing an earlier export there."""
    old = None
    if out.is_dir() and any(out.iterdir()):
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    elif out.is_dir():
        out.rmdir()  # os.replace onto an empty folder is not portable
    try:
        os.replace(staging, out)
    except OSError:
        if old is not None:
            os.replace(old, out)  # the earlier export stays as it was
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def turn_end_token_ids(tokenizer) -> list[int]:
    """The ids of the special tokens the chat template closes an assistant turn with.

    ChatML closes turns with ``<|im_end|>``; a tool-call turn may close with another token (Llama
    3.1's ``<|eom_id|>``, gpt-oss's ``<|call|>``). Training labelled these, so the trained model
    emits them; generation must stop there.
    """
    from lightning_agents.datamodules.conversations import _first_marker, template_layout

    tokens = list(template_layout(tokenizer).end_tokens)
    # Templates with {% generation %} blocks are not probed by template_layout: the first special
    # token after a reply closes it, whether more turns follow or not.
    markers = [t for t in tokenizer.get_added_vocab() if t] + ([tokenizer.eos_token] if tokenizer.eos_token else [])
    reply = "Lightning-agents export probe"
    chats = (
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": reply}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": reply}, {"role": "user", "content": "Hi"}],
    )
    for chat in chats:
        try:
            text = tokenizer.apply_chat_template(chat, tokenize=False)
        except Exception:  # noqa: BLE001 - a template that needs more (tools) is probed by template_layout
            continue
        at = text.find(reply)
        found = _first_marker(text[at + len(reply) :], markers) if at >= 0 else None
        if found is not None:
            tokens.append(found)
    ids = []
    for token in dict.fromkeys(tokens):
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) == 1 and encoded[0] not in ids:
            ids.append(encoded[0])
    return ids


def _write_stop_tokens(folder: Path, model, tokenizer, adapters_only: bool) -> None:
    """Make ``generation_config.json`` stop at the template's end-of-turn tokens.

    ``model.generate`` and vLLM stop at the generation config's ``eos_token_id`` only; a base model
    whose EOS is ``<|endoftext|>``, fine-tuned on ChatML, otherwise ran past ``<|im_end|>`` to
    ``max_new_tokens``. An adapters-only folder is served with its base's generation config, so
    what it lacks is only warned about.
    """
    from transformers import GenerationConfig

    config = getattr(model, "generation_config", None)
    config = copy.deepcopy(config) if config is not None else GenerationConfig.from_model_config(model.config)
    eos = config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    try:
        ends = turn_end_token_ids(tokenizer)
    except Exception as exc:  # noqa: BLE001 - a template the probe cannot read must not lose a trained model
        warnings.warn(
            f"could not find the end-of-turn tokens of the chat template ({type(exc).__name__}: {exc}); "
            f"generation_config.json keeps eos_token_id {eos}",
            stacklevel=3,
        )
        return
    missing = [i for i in ends if i not in eos]
    if not missing:
        return
    if adapters_only:
        names = [tokenizer.convert_ids_to_tokens(i) for i in missing]
        warnings.warn(
            f"the base model's generation config stops only at token ids {eos}, not at {names}, which close an "
            f"assistant turn of the chat template: generation from base + adapters runs on past the end of the "
            f"turn unless told to stop there (eos_token_id / stop_token_ids); a merged export sets them",
            stacklevel=3,
        )
        return
    eos += missing
    config.eos_token_id = eos[0] if len(eos) == 1 else eos
    config.save_pretrained(folder)


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
        module = _rebuild(cls, path, checkpoint["hyper_parameters"], map_location)
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


def _rebuild(cls: type, path: Path, hparams: dict[str, Any], map_location: str):
    """``cls`` loaded from the checkpoint at ``path``, its base model named in the errors of a base
    that is gone or that the saved weights do not fit (a checkpoint of another model)."""
    from lightning_agents.models import ModelPathError

    base = hparams.get("model")
    try:
        module = cls.load_from_checkpoint(path, map_location=map_location, weights_only=True)
        module.configure_model()
    except ModelPathError as exc:
        raise ExportError(
            f"{path}: its base model (model={base!r} in the checkpoint) cannot be loaded: {exc}"
        ) from None
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines()]
        mismatch = next((line for line in lines if line.startswith("size mismatch")), None)
        if mismatch is None:
            raise
        raise ExportError(
            f"{path}: its weights do not fit its base model {base!r} ({mismatch.removesuffix('.')}); "
            "was the checkpoint written by a run of another model?"
        ) from None
    return module


def training_chat_template(checkpoint: dict[str, Any]) -> str | None:
    """The chat template text the data module trained with when it replaced the tokenizer's own
    (``data.chat_template``), from the data module's state in the checkpoint; ``None`` otherwise."""
    for value in checkpoint.values():
        if isinstance(value, dict) and isinstance(value.get("chat_template"), str) and "shuffle_seed" in value:
            return value["chat_template"]
    return None
