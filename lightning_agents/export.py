"""Hugging Face folders out of trained modules: merged weights (or separate adapters), tokenizer, chat template.

A folder written by :func:`export_hf_folder` loads with ``AutoModelForCausalLM.from_pretrained``
and serves with vLLM (``vllm serve DIR``); a separate-adapter folder loads with peft (or
``from_pretrained`` with peft installed) and serves with ``vllm serve BASE --enable-lora``. A
merged Llama 3.2 Vision (Mllama) folder is its text model alone, as lightning-agents trains it
(``MllamaForCausalLM``), under the base's ``mllama`` config: it loads with
``AutoModelForCausalLM``, not as an image-text-to-text model.
"""

from __future__ import annotations

import copy
import errno
import glob
import inspect
import io
import json
import os
import pickle
import shutil
import socket
import warnings
from pathlib import Path
from typing import Any, Literal

import torch

from lightning_agents.adapters import _is_quantized, has_adapters, merged_model
from lightning_agents.errors import LightningAgentsError

__all__ = ["ExportError", "check_export_target", "export_hf_folder", "load_trained_module", "unquantized_module"]

EXPORT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Written last into every export: it marks a folder as one (complete) export, which a later export
# with `overwrite` may replace; any other non-empty folder is the user's and is never written into.
EXPORT_MARKER = "lightning_agents_export.json"
# Marks a folder whose in-place export has begun and not finished: it is removed after
# lightning_agents_export.json is written, and check_export_target lets the next export replace it.
PARTIAL_MARKER = ".lightning_agents_export.partial"


class ExportError(LightningAgentsError, ValueError):
    """A checkpoint or an output folder that cannot be exported to."""


def check_export_target(output: str | Path, overwrite: bool = False) -> Path:
    """Refuse an output that an export must not write into, before anything is loaded or trained.

    A new or empty folder is fine; so is a folder holding an earlier export (it has
    ``lightning_agents_export.json``) when ``overwrite`` is true, which is then replaced as a whole,
    and an interrupted in-place export (it has ``.lightning_agents_export.partial``), overwrite or not.
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
    if (out / PARTIAL_MARKER).is_file() and not (out / EXPORT_MARKER).is_file():
        return out  # an in-place export that was interrupted: nothing there is usable
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
    complete: a full disk or an interrupted write leaves no folder that looks like an export. An
    output that is a symlink is written at its target (the staging goes beside the real folder).
    An output that cannot be renamed (a mount point, such as a Docker volume) is written in place:
    an earlier export there is removed first, and ``lightning_agents_export.json`` is written last,
    so an interrupted write never looks complete (the next export replaces it). Staging folders
    that killed exports of this machine left beside the output are removed.

    Args:
        model: a transformers causal LM, or a peft model with LoRA adapters.
        tokenizer: the tokenizer used in training; its chat template is written with it
            (``chat_template.jinja``), so the folder renders prompts as training did.
        output: the folder to write: new or empty, or an earlier export with ``overwrite``
            (see :func:`check_export_target`).
        merge: fold adapters into the base weights (a plain model folder). ``False`` writes the
            adapters alone (``adapter_config.json``, ``adapter_model.safetensors``), which refer to
            the base model by its path or hub id. Ignored for a model without adapters. Refused
            for adapters on a quantized base: merge those into the unquantized base
            (:func:`unquantized_module`).
        dtype: cast the written weights to this dtype (default: as trained). With ``merge=False``
            only the adapter tensors are written, and cast (the base is neither copied nor cast, a
            quantized one included). A quantized model without adapters is refused: its weights
            cannot be cast.
        metadata: extra facts (source checkpoint, step) written to ``lightning_agents_export.json``.
        overwrite: replace an earlier export in ``output``.

    Returns:
        The output folder (as given: a symlink stays one).
    """
    out = check_export_target(output, overwrite)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ExportError(
            "the tokenizer has no chat template; the exported folder could not render chats as in training"
        )
    adapters = has_adapters(model)
    if adapters and merge and _is_quantized(model):
        # peft dequantizes, adds B @ A and requantizes: at a usual LoRA update size (<= 1% of |W|)
        # the change in the written 4-bit weights was nearly uncorrelated with B @ A.
        raise ExportError(
            "the model's base is quantized (bitsandbytes): merging the adapters into it rounds most of the update "
            "away; export unquantized_module(module).model (what ExportHF does), export the checkpoint with "
            "`lightning-agents export`, or pass merge=False for the adapters alone"
        )
    adapters_only = adapters and not merge
    if dtype is not None and not adapters and _is_quantized(model):
        # transformers refuses the cast after a full copy of the model; say which setting to drop.
        raise ExportError(
            f"dtype={dtype!r}: the model is quantized (bitsandbytes), and its weights cannot be cast; export it "
            "with dtype unset, or export the unquantized model"
        )
    target = merged_model(model) if (adapters and merge) else model
    if dtype is not None and not adapters_only:
        if target is model:
            target = copy.deepcopy(model)
        target = target.to(EXPORT_DTYPES[dtype])
    info = {"merged": bool(adapters and merge), "adapters": adapters, **(metadata or {})}
    marker = json.dumps(info, indent=2, default=str) + "\n"

    def write(folder: Path) -> None:
        target.eval()
        target.save_pretrained(folder, safe_serialization=True)
        if not adapters_only:
            _write_composite_config(folder, target)
        if adapters_only and dtype is not None:
            _cast_adapter_files(folder, EXPORT_DTYPES[dtype])
        tokenizer.save_pretrained(folder)
        _write_stop_tokens(folder, target, tokenizer, adapters_only=adapters_only)

    # Renaming over a symlink replaced the link (leaving the weights on the link's filesystem and the
    # earlier export behind); the real folder is what is replaced, and staging must sit beside it.
    real = out.resolve()
    progress = _Progress()
    was_training = target.training
    try:
        _remove_dead_siblings(real)
        if _renamable(real):
            _staged_write(real, write, marker, progress)
        else:
            progress.in_place = "it is a mount point"
            _fill_in_place(real, write, marker, progress)
        _remove_dead_siblings(real)  # a `.old` folder kept while `real` was missing is replaced now
    except BaseException as exc:
        # OSError: full disk, read-only or missing permission; safetensors reports a full disk as its own error.
        if isinstance(exc, OSError) or type(exc).__name__ == "SafetensorError":
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            named = out if real == out.absolute() else f"{out} (-> {real})"
            raise ExportError(f"cannot write the export {named}: {first} ({progress.left(real)})") from exc
        raise
    finally:
        if was_training and target is model:
            model.train()
    return out


def _write_composite_config(folder: Path, model) -> None:
    """Rewrite ``config.json`` as the composite config that ``AutoModelForCausalLM`` maps to
    ``model``'s class, where the model keeps only a sub-config that it does not map.

    ``AutoModelForCausalLM`` loads Llama 3.2 Vision (``model_type: mllama``) as ``MllamaForCausalLM``,
    whose ``__init__`` keeps only ``config.get_text_config()`` (modeling_mllama.py, transformers 5),
    so ``save_pretrained`` wrote ``model_type: mllama_text_model``, and ``AutoModelForCausalLM``
    refused the folder: its mapping (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` in
    models/auto/modeling_auto.py) is keyed by ``mllama``, ``MllamaConfig``, alone. The text config
    goes back into the base model's composite config (its vision config, which this class never
    reads, as in the base, or the default where the base's config cannot be read); the weights are
    the class's own (``model.layers.*``, ``lm_head``) and load as saved. The folder holds no vision
    model: it is a text model for ``AutoModelForCausalLM`` (and lightning-agents), not for
    image-text-to-text.
    """
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = getattr(model, "config", None)
    if config is None or type(config) in AutoModelForCausalLM._model_mapping:
        return
    name = type(model).__name__
    for model_type in [t for t, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if cls == name]:
        composite = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
        subs = getattr(composite, "sub_configs", None) or {}
        key = next((k for k, cls in subs.items() if cls is type(config)), None)
        if key is None:
            continue
        try:
            base = AutoConfig.from_pretrained(model.name_or_path)
        except Exception:  # noqa: BLE001 - a hub id offline, a folder gone: the other sub-configs default
            base = None
        if not isinstance(base, composite):
            base = composite()
        setattr(base, key, copy.deepcopy(config))
        base.architectures = [name]
        saved = json.loads((folder / "config.json").read_text())
        for field in ("dtype", "torch_dtype"):
            if field in saved:
                setattr(base, field, saved[field])
        base.save_pretrained(folder)
        return


def _cast_adapter_files(folder: Path, dtype: torch.dtype) -> None:
    """Cast the floating tensors of the adapter files peft wrote in ``folder`` to ``dtype``.

    An adapters-only export holds no base weight, so only the adapters (and ``modules_to_save``
    copies) are cast, on their way out: casting the model meant a full copy of the base (a 4-bit
    base on the GPU at the end of fit included) for files of a few megabytes.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    for path in sorted(folder.glob("adapter_model*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata()
            tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 - safe_open is no mapping
        tensors = {key: t.to(dtype) if t.is_floating_point() else t for key, t in tensors.items()}
        save_file(tensors, str(path), metadata=metadata)


# Staging names carry the host: a PID says whether the writer is alive only on its own machine
# (an HPC node, a container), and a shared filesystem sees the folders of all of them.
_HOST = socket.gethostname()


class _Progress:
    """What a failed export has done to its output folder, for an error that says so truly."""

    def __init__(self) -> None:
        self.in_place: str | None = None  # why the folder was written in place, when it was
        self.cleared = False  # an earlier export in it was removed

    def left(self, real: Path) -> str:
        if self.in_place is None:
            return "nothing was written there"
        if (real / PARTIAL_MARKER).is_file():
            now = f"the partial files left there are marked {PARTIAL_MARKER}, and the next export replaces them"
        elif (real / EXPORT_MARKER).is_file():
            now = "the earlier export there is unchanged"
        else:
            now = "nothing is left there"
        removed = "the earlier export there was removed; " if self.cleared else ""
        return f"{self.in_place}, so the export was written in place; {removed}{now}"


def _renamable(real: Path) -> bool:
    """Whether ``real`` can be replaced by renaming a folder beside it: not a mount point, whose
    folder belongs to another filesystem (a rename onto it fails with EBUSY or EXDEV)."""
    return not os.path.ismount(real)


def _staged_write(real: Path, write, marker: str, progress: _Progress) -> None:
    """Write the export into a folder beside ``real`` and rename it into place when complete."""
    staging = real.with_name(f".{real.name}.partial-{_HOST}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM) or not real.is_dir():
            raise
        # The folder is there but its parent is not writable (a folder made for the user in a
        # shared directory): only the folder itself can be written.
        progress.in_place = f"its parent folder {real.parent} is not writable"
        _fill_in_place(real, write, marker, progress)
        return
    try:
        write(staging)
        (staging / EXPORT_MARKER).write_text(marker)
        _move_into_place(staging, real, marker, progress)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(staging: Path, out: Path, marker: str, progress: _Progress) -> None:
    """Rename the complete ``staging`` folder to ``out``, replacing an earlier export there; an
    ``out`` that cannot be renamed (a bind mount that ``os.path.ismount`` does not see) gets the
    staged files moved into it."""
    try:
        _rename_into_place(staging, out)
    except OSError as exc:
        if exc.errno not in (errno.EBUSY, errno.EXDEV) or not out.is_dir():
            raise
        progress.in_place = f"it cannot be renamed ({os.strerror(exc.errno)})"
        (staging / EXPORT_MARKER).unlink()
        _fill_in_place(out, lambda folder: _move_entries(staging, folder), marker, progress)


def _rename_into_place(staging: Path, out: Path) -> None:
    old = None
    if out.is_dir() and any(out.iterdir()):
        old = out.with_name(f".{out.name}.old-{_HOST}-{os.getpid()}")
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


def _move_entries(source: Path, folder: Path) -> None:
    for entry in sorted(source.iterdir()):
        shutil.move(str(entry), str(folder / entry.name))


def _fill_in_place(folder: Path, write, marker: str, progress: _Progress) -> None:
    """Write the export into ``folder`` itself, replacing the earlier export there.

    ``PARTIAL_MARKER`` goes in first and ``EXPORT_MARKER`` last, so at no moment does the folder
    look like a complete export that it is not. A failed write deletes what it wrote.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PARTIAL_MARKER).write_text("an export into this folder began and has not finished\n")
    try:
        progress.cleared = (folder / EXPORT_MARKER).is_file()
        _clear(folder, keep=PARTIAL_MARKER)
        write(folder)
        (folder / EXPORT_MARKER).write_text(marker)
    except BaseException:
        try:
            _clear(folder, keep=PARTIAL_MARKER)
            (folder / PARTIAL_MARKER).unlink()
        except OSError:
            pass  # what is left keeps PARTIAL_MARKER, and the error says so
        raise
    (folder / PARTIAL_MARKER).unlink()


def _clear(folder: Path, keep: str | None = None) -> None:
    """Delete the entries of ``folder`` (but ``keep``), the export marker first."""
    (folder / EXPORT_MARKER).unlink(missing_ok=True)
    for entry in folder.iterdir():
        if entry.name == keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _remove_dead_siblings(real: Path) -> None:
    """Delete the staging (``.NAME.partial-HOST-PID``) and replaced (``.NAME.old-HOST-PID``) folders
    beside ``real`` that exports of this machine left when they were killed (their PID is gone).

    Each is a full copy of the weights, and the next export has another PID, so nothing else
    removes them. Folders of live processes, or of other machines, are left alone; a ``.old``
    folder is left too while ``real`` is missing (an export killed between its two renames), since
    it then holds the only earlier export, until a new export is in place.
    """
    if not real.parent.is_dir():
        return
    for kind in ("partial", "old"):
        for path in real.parent.glob(f".{glob.escape(real.name)}.{kind}-*"):
            host, _, pid = path.name.rsplit(f".{kind}-", 1)[1].rpartition("-")
            if host not in ("", _HOST) or not pid.isdigit() or _alive(int(pid)):
                continue
            if kind == "old" and not real.exists():
                continue
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (``True`` when it cannot be told)."""
    if os.name != "posix":
        return True  # os.kill(pid, 0) terminates the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: another user's process
    return True


def _write_stop_tokens(folder: Path, model, tokenizer, adapters_only: bool) -> None:
    """Make ``generation_config.json`` stop at the template's end-of-turn tokens.

    ``model.generate`` and vLLM stop at the generation config's ``eos_token_id`` only; a base model
    whose EOS is ``<|endoftext|>``, fine-tuned on ChatML, otherwise ran past ``<|im_end|>`` to
    ``max_new_tokens``. An adapters-only folder is served with its base's generation config, so
    what it lacks is only warned about.
    """
    from transformers import GenerationConfig

    from lightning_agents.rollout.hf_engine import stop_token_ids

    config = getattr(model, "generation_config", None)
    config = copy.deepcopy(config) if config is not None else GenerationConfig.from_model_config(model.config)
    eos = config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    # The ids the project's own rollout engines stop at, so a served export ends turns where training did.
    missing = [i for i in stop_token_ids(tokenizer, config) if i not in eos]
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


def _rebuild(cls: type, path: Path | str, hparams: dict[str, Any], map_location: str, source: Any = None):
    """``cls`` loaded from the checkpoint at ``path`` (read from ``source``, a file object, when
    given), its base model named in the errors of a base that is gone or that the saved weights do
    not fit (a checkpoint of another model)."""
    from lightning_agents.adapters import AdapterError, ExcludedAdaptersError
    from lightning_agents.models import ModelPathError

    base = hparams.get("model")
    try:
        module = cls.load_from_checkpoint(
            path if source is None else source, map_location=map_location, weights_only=True, **_unquantized(hparams)
        )
        module.configure_model()
    except ModelPathError as exc:
        raise ExportError(
            f"{path}: its base model (model={base!r} in the checkpoint) cannot be loaded: {exc}"
        ) from None
    except ExcludedAdaptersError as exc:
        # Its own message says what changed and which setting exports it; "another model" would mislead.
        raise ExportError(f"{path}: {exc}") from None
    except AdapterError as exc:
        # The adapters the checkpoint's settings build on its base are not the ones it holds.
        raise ExportError(
            f"{path}: its weights do not fit its base model {base!r} ({exc}); was the checkpoint written by a run "
            "of another model, or cut short?"
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


def _unquantized(hparams: dict[str, Any]) -> dict[str, Any]:
    """The settings that rebuild a QLoRA (or quantized-base LoRA) run on its unquantized base.

    The adapters are merged into the base in its own precision, as the QLoRA recipe does: a 4-bit
    base refused to rebuild without a GPU (reported as a checkpoint of another model), and with one
    the adapters were rounded into 4-bit weights that ``dtype`` could not cast. The adapter tensors
    are the same either way; the base is reloaded from ``model`` in ``dtype``.
    """
    adapter, quantization = hparams.get("adapter"), hparams.get("quantization")
    if not isinstance(adapter, dict) or not (adapter.get("qlora") or quantization):
        return {}
    return {"adapter": {**adapter, "qlora": False}, "quantization": None}


def unquantized_module(module):
    """A live adapter module whose base is quantized (QLoRA, or LoRA on an 8-bit base), rebuilt as
    ``lightning-agents export`` rebuilds its checkpoint: on the unquantized base, with ``module``'s
    trained tensors.

    ``ExportHF`` exports from it: merging into the live 4-bit weights requantized the sum, which
    rounded away most of the LoRA update (the change in the written weights was nearly uncorrelated
    with B @ A), and a 4-bit model refused a ``dtype`` cast after all the training. The trained
    tensors go through an in-memory checkpoint and the same load as a checkpoint file
    (:func:`_unquantized` settings), so both exports write the same folder. The copy is built on the
    CPU (a GPU that only held the 4-bit base may have no room for it); ``module`` is left as it is.

    Args:
        module: an ``SFTModule`` (or subclass) with adapters, built (``configure_model`` run).

    Returns:
        The rebuilt module, in eval mode.
    """
    hparams = dict(module.hparams)
    # What a checkpoint of the run holds (on_save_checkpoint keeps the trainable tensors alone).
    state = {
        f"model.{name}": p.detach().to("cpu", copy=True)
        for name, p in module.model.named_parameters()
        if p.requires_grad
    }
    import lightning

    buffer = io.BytesIO()
    # The version key keeps Lightning's checkpoint migration from taking it for a legacy file.
    checkpoint = {"hyper_parameters": hparams, "state_dict": state, "pytorch-lightning_version": lightning.__version__}
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    label = f"the trained {type(module).__name__}"
    with warnings.catch_warnings():
        # The frozen base is not in the state by design, as in a checkpoint file (see load_trained_module).
        warnings.filterwarnings(
            "ignore", message="Found keys that are in the model state dict but not in the checkpoint"
        )
        return _rebuild(type(module), label, hparams, "cpu", source=buffer).eval()


def training_chat_template(checkpoint: dict[str, Any]) -> str | None:
    """The chat template text the data module trained with when it replaced the tokenizer's own
    (``data.chat_template``), from the data module's state in the checkpoint; ``None`` otherwise."""
    for value in checkpoint.values():
        if isinstance(value, dict) and isinstance(value.get("chat_template"), str) and "shuffle_seed" in value:
            return value["chat_template"]
    return None
