"""The one place that loads a tokenizer and a causal LM.

Every module, callback and command goes through :func:`load_model_and_tokenizer`, so a model is
named the same way everywhere: a local path, a ``.gguf`` file (or ``folder::file.gguf``), a hub id,
or ``embedded:student`` / ``embedded:teacher`` for the tiny checkpoints shipped in
:mod:`lightning_agents.assets`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from lightning_agents.errors import LightningAgentsError

log = logging.getLogger(__name__)

__all__ = [
    "DTYPES",
    "DType",
    "ModelFileError",
    "ModelPathError",
    "VocabularyMismatchError",
    "check_model_path",
    "check_same_vocab",
    "context_length",
    "convert_to_hf",
    "read_chat_template",
    "split_gguf",
    "QuantizationConfig",
    "QuantizationError",
    "load_causal_lm",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model_path",
]

# transformers' from_pretrained patches process-wide state while it loads (torch.nn.init functions,
# Module.register_parameter for meta-device init). Two threads loading at once can restore each
# other's patched versions and leave every later model in the process uninitialised or on the
# meta device, so all loads go through this lock (thread pools of HFlow backbones load lazily).
_LOAD_LOCK = threading.RLock()

EMBEDDED_PREFIX = "embedded:"
EMBEDDED_MODELS = ("student", "teacher")

# Weight dtypes by name; the Literal lets --help list them and the parser reject a typo.
DType = Literal["float32", "fp32", "bfloat16", "bf16", "float16", "fp16"]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


class QuantizationError(LightningAgentsError, RuntimeError):
    """A ``quantization`` setting that cannot be honoured (no CUDA device, a bit width bitsandbytes lacks)."""


@dataclass
class QuantizationConfig:
    """bitsandbytes weight quantization for loading a model (CUDA only).

    Args:
        bits: 4 or 8.
        quant_type: 4-bit data type, ``"nf4"`` or ``"fp4"``.
        double_quant: quantize the 4-bit quantization constants too (saves ~0.4 bit/param).
        compute_dtype: dtype of the matmuls on dequantized weights.
    """

    bits: Literal[4, 8] = 4
    quant_type: Literal["nf4", "fp4"] = "nf4"
    double_quant: bool = True
    compute_dtype: DType = "bfloat16"

    def __post_init__(self) -> None:
        # Without these checks bits=3 loaded in 4-bit and quant_type="nf5" failed inside transformers.
        if self.bits not in (4, 8) or isinstance(self.bits, bool):
            raise QuantizationError(f"quantization.bits must be 4 or 8, got {self.bits!r}")
        if self.quant_type not in ("nf4", "fp4"):
            raise QuantizationError(f"quantization.quant_type must be nf4 or fp4, got {self.quant_type!r}")
        if self.compute_dtype not in DTYPES:
            raise QuantizationError(
                f"quantization.compute_dtype must be one of {sorted(DTYPES)}, got {self.compute_dtype!r}"
            )

    def to_transformers(self):
        """The equivalent ``transformers.BitsAndBytesConfig``."""
        from transformers import BitsAndBytesConfig

        if self.bits == 8:
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=self.quant_type,
            bnb_4bit_use_double_quant=self.double_quant,
            bnb_4bit_compute_dtype=_dtype(self.compute_dtype),
        )


def _dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}") from None


def resolve_model_path(name_or_path: str) -> str:
    """Map ``embedded:student`` / ``embedded:teacher`` to the packaged folder; leave others as given."""
    name_or_path = str(name_or_path)
    if not name_or_path.startswith(EMBEDDED_PREFIX):
        return name_or_path
    which = name_or_path[len(EMBEDDED_PREFIX) :]
    if which not in EMBEDDED_MODELS:
        raise ValueError(
            f"unknown embedded model {name_or_path!r}; expected one of "
            + ", ".join(EMBEDDED_PREFIX + m for m in EMBEDDED_MODELS)
        )
    path = Path(__file__).resolve().parent / "assets" / which
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"embedded checkpoint {path} is missing; rebuild it with `python scripts/build_embedded.py`"
        )
    return str(path)


class ModelPathError(LightningAgentsError, FileNotFoundError):
    """A model or tokenizer setting that names no loadable checkpoint."""


class ModelFileError(ModelPathError, ValueError):
    """A local checkpoint whose file cannot be read (cut short, garbled, a ``config.json`` without
    ``model_type``): named with its folder, and still the ``ValueError`` transformers raised for it."""


class VocabularyMismatchError(LightningAgentsError, ValueError):
    """Two settings that must share a tokenizer (model and data, student and teacher) do not."""


GGUF_SEPARATOR = "::"


def split_gguf(name_or_path: str) -> tuple[str, str | None]:
    """``(folder, gguf file name)`` for a GGUF checkpoint, ``(name_or_path, None)`` otherwise.

    A GGUF checkpoint is named as a path ending in ``.gguf`` or as ``folder::file.gguf``.
    """
    name_or_path = str(name_or_path)
    if GGUF_SEPARATOR in name_or_path:
        folder, _, file = name_or_path.partition(GGUF_SEPARATOR)
        return folder, file
    if name_or_path.lower().endswith(".gguf"):
        path = Path(name_or_path).expanduser()
        return str(path.parent), path.name
    return name_or_path, None


def _looks_like_local_path(name: str) -> bool:
    # A hub id is `name` or `org/name`; anything else (absolute, relative with ./ or ../, ~, deeper
    # folders, a file suffix) can only be a local path.
    return (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or os.sep != "/"
        and os.sep in name
        or bool(re.search(r"\.(gguf|safetensors|bin|json)$", name))
    )


def check_model_path(name_or_path: str, setting: str = "model") -> None:
    """Fail fast, before anything is loaded, when a setting names a local checkpoint that is absent.

    Hub ids (``org/name``) cannot be checked offline and are left to the loader.

    Raises:
        ModelPathError: naming the setting and what is missing.
    """
    name = str(name_or_path)
    if name.startswith(EMBEDDED_PREFIX):
        try:
            resolve_model_path(name)
        except (ValueError, FileNotFoundError) as exc:
            raise ModelPathError(f"{setting}: {exc}") from None
        return
    folder, gguf = split_gguf(name)
    if gguf is not None:
        path = Path(folder).expanduser() / gguf
        if not path.is_file():
            raise ModelPathError(f"{setting}: GGUF file {path} does not exist")
        return
    path = Path(name).expanduser()
    if path.exists():
        if path.is_dir() and not (path / "config.json").is_file() and not (path / "tokenizer_config.json").is_file():
            raise ModelPathError(
                f"{setting}: {path} is a folder without config.json or tokenizer_config.json, not a checkpoint"
            )
        return
    if _looks_like_local_path(name):
        raise ModelPathError(f"{setting}: model path {name} does not exist")


def check_same_vocab(tokenizer_a, tokenizer_b, name_a: str = "model", name_b: str = "data.tokenizer") -> None:
    """Raise unless two tokenizers map every token to the same id.

    Training on ids from one tokenizer with a model of another gives no error and learns nothing
    useful, so every pairing that must agree (model and data, student and teacher or reference)
    is checked with this before anything trains.

    Raises:
        VocabularyMismatchError: naming both settings and the first disagreement.
    """
    if tokenizer_a is tokenizer_b:
        return
    va, vb = tokenizer_a.get_vocab(), tokenizer_b.get_vocab()
    if va == vb:
        return
    if len(va) != len(vb):
        detail = f"{len(va)} vs {len(vb)} tokens"
    else:
        token = next(t for t in sorted(va) if va.get(t) != vb.get(t))
        detail = f"token {token!r} is id {va.get(token)} vs {vb.get(token)}"
    raise VocabularyMismatchError(
        f"{name_a} ({getattr(tokenizer_a, 'name_or_path', '?')}) and {name_b} "
        f"({getattr(tokenizer_b, 'name_or_path', '?')}) have different vocabularies ({detail}); "
        f"leave {name_b} unset to use the model's tokenizer"
    )


def read_chat_template(template: str) -> str:
    """A chat template given as a file path (``.jinja``/``.j2``/``.txt``) or as the template text itself."""
    path = Path(str(template)).expanduser()
    if "{%" not in template and "{{" not in template:
        if not path.is_file():
            raise ModelPathError(f"chat_template: file {path} does not exist")
        return path.read_text(encoding="utf-8")
    return template


def _from_pretrained_args(name_or_path: str) -> tuple[str, dict]:
    folder, gguf = split_gguf(resolve_model_path(name_or_path))
    return folder, ({"gguf_file": gguf} if gguf is not None else {})


def _load_error(name_or_path: str, exc: Exception) -> ModelPathError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ModelPathError(f"cannot load {name_or_path!r}: {first}")


def _file_error(setting: str, name_or_path: str, exc: Exception) -> ModelFileError:
    # The whole message, on one line: the command line prints these errors as one line.
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip()) or type(exc).__name__
    return ModelFileError(f"{setting}: cannot load {name_or_path!r}: {text} ({type(exc).__name__})")


def _broken_local_files(name_or_path: str, exc: Exception) -> bool:
    """Whether ``exc`` from ``from_pretrained`` is a local checkpoint's unreadable file, not a setting.

    A cut-short ``model.safetensors`` (safetensors' own error), a garbled ``tokenizer.json`` (a
    JSON or Unicode decode error) or a ``config.json`` without ``model_type`` reached the user as
    bare tracebacks that named neither the folder nor the setting. Only those: the ValueErrors of a
    setting (custom code without ``trust_remote_code``, an unknown ``attn_implementation``, a GGUF
    architecture transformers cannot read) keep their own message and its hint on how to fix it.
    A hub id's errors are left as they are.
    """
    if name_or_path.startswith(EMBEDDED_PREFIX) or not Path(split_gguf(name_or_path)[0]).expanduser().exists():
        return False
    if type(exc).__name__ == "SafetensorError" or isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return True
    # transformers' "Unrecognized model in ... Should have a `model_type` key in its config.json".
    return isinstance(exc, ValueError) and "model_type" in str(exc) and str(exc).startswith("Unrecognized model")


def convert_to_hf(
    name_or_path: str, output: str, dtype: DType = "float32", before_rename: Callable[[Path], None] | None = None
) -> str:
    """Save a checkpoint (typically a GGUF file, dequantized) as an ordinary Hugging Face folder.

    Loading a GGUF file dequantizes every tensor and rebuilds the tokenizer from the file, which
    takes a while; a converted folder then loads like any HF checkpoint.

    Args:
        name_or_path: the checkpoint (a ``.gguf`` file, ``folder::file.gguf``, a folder or hub id).
        output: the folder to write; it is written beside it and renamed into place when complete.
        dtype: the weights' dtype.
        before_rename: called with the complete staging folder just before it is renamed into
            place (``convert`` writes its marker there, so a kill never leaves an unmarked folder).

    Returns:
        The folder written (model, tokenizer and chat template).
    """
    tokenizer = load_tokenizer(name_or_path)
    model = load_causal_lm(name_or_path, dtype=dtype)
    out = Path(output).expanduser()
    tmp = out.with_name(f".{out.name}.partial")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    if getattr(model, "hf_quantizer", None) is not None and split_gguf(str(name_or_path))[1] is not None:
        # transformers marks a model loaded from GGUF as quantized and refuses to save it, but its
        # weights are already dequantized to `dtype`: drop the marker so it saves as a plain model.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if before_rename is not None:
        before_rename(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return str(out)


def load_tokenizer(name_or_path: str, padding_side: str = "right", trust_remote_code: bool = False):
    """Load the tokenizer of a model and make sure it can pad.

    Args:
        name_or_path: local path, ``.gguf`` file (or ``folder::file.gguf``), hub id, or
            ``embedded:student`` / ``embedded:teacher``.
        padding_side: ``"right"`` for training batches, ``"left"`` for generation.
        trust_remote_code: forwarded to ``AutoTokenizer.from_pretrained``.
    """
    from transformers import AutoTokenizer

    check_model_path(name_or_path, "tokenizer")
    folder, extra = _from_pretrained_args(name_or_path)
    with _LOAD_LOCK:
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code, **extra)
        except OSError as exc:
            raise _load_error(name_or_path, exc) from exc
        except Exception as exc:
            if not _broken_local_files(name_or_path, exc):
                raise
            raise _file_error("tokenizer", name_or_path, exc) from exc
    if tokenizer.pad_token is None:
        # Many causal LMs ship no pad token; EOS is the usual stand-in since padded positions are
        # masked out of both attention and loss.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    return tokenizer


def load_causal_lm(
    name_or_path: str,
    dtype: DType = "float32",
    quantization: QuantizationConfig | None = None,
    gradient_checkpointing: bool = False,
    device: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
):
    """Load a causal LM.

    Args:
        name_or_path: local path, ``.gguf`` file (or ``folder::file.gguf``; dequantized to
            ``dtype``), hub id, or ``embedded:student`` / ``embedded:teacher``.
        dtype: weight dtype (``float32``, ``bfloat16``, ``float16``). Always explicit: transformers 5
            otherwise loads in the checkpoint's own dtype ("auto").
        quantization: bitsandbytes 4/8-bit weights; needs a CUDA device.
        gradient_checkpointing: recompute activations in backward to save memory.
        device: device to place the model on (``None`` leaves it on CPU for Lightning to move).
        trust_remote_code: forwarded to ``from_pretrained``.
        attn_implementation: e.g. ``"sdpa"`` or ``"eager"``; ``None`` lets transformers choose.
    """
    from transformers import AutoModelForCausalLM

    kwargs: dict = {"dtype": _dtype(dtype), "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if quantization is not None:
        if not torch.cuda.is_available():
            raise QuantizationError(
                f"bitsandbytes {quantization.bits}-bit quantization of {name_or_path!r} needs a CUDA GPU, and none is "
                "available; drop `quantization` to load the model unquantized on this machine"
            )
        kwargs["quantization_config"] = quantization.to_transformers()
        kwargs["device_map"] = {"": device or f"cuda:{torch.cuda.current_device()}"}
    check_model_path(name_or_path, "model")
    folder, extra = _from_pretrained_args(name_or_path)
    with _LOAD_LOCK:
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, **kwargs, **extra)
        except OSError as exc:
            raise _load_error(name_or_path, exc) from exc
        except Exception as exc:
            if not _broken_local_files(name_or_path, exc):
                raise
            raise _file_error("model", name_or_path, exc) from exc
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # The KV cache is useless while recomputing activations and transformers warns about it.
        model.config.use_cache = False
    if device is not None and quantization is None:
        model.to(device)
    return model


def load_model_and_tokenizer(
    name_or_path: str,
    dtype: DType = "float32",
    quantization: QuantizationConfig | None = None,
    gradient_checkpointing: bool = False,
    device: str | None = None,
    trust_remote_code: bool = False,
    padding_side: str = "right",
):
    """Load ``(model, tokenizer)``; the arguments are those of :func:`load_causal_lm` and :func:`load_tokenizer`."""
    tokenizer = load_tokenizer(name_or_path, padding_side=padding_side, trust_remote_code=trust_remote_code)
    model = load_causal_lm(
        name_or_path,
        dtype=dtype,
        quantization=quantization,
        gradient_checkpointing=gradient_checkpointing,
        device=device,
        trust_remote_code=trust_remote_code,
    )
    # getattr: transformers 5's multimodal configs (Gemma 3's, as google/gemma-3-4b-it ships it) have
    # no top-level pad_token_id at all, and reading it raised AttributeError.
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def context_length(config: Any) -> tuple[int, str] | None:
    """The positions a model reads and how that was read: ``max_position_embeddings`` (GPT-2's
    ``n_positions``) of the text config, scaled by a RoPE scaling factor: over
    ``original_max_position_embeddings`` where the config states it (Qwen2.5's YaRN keeps
    ``max_position_embeddings`` 32,768 with ``factor`` 4 for 131,072), else over
    ``max_position_embeddings`` (vicuna-7b-v1.5-16k: 4,096 with ``linear`` factor 4). ``llama3``
    and ``longrope`` scaling list the extended length as ``max_position_embeddings`` already
    (Llama 3.2: 131,072 with factor 32 over 8,192). Some configs list the extended length under
    ``linear`` scaling too (Gemma 3): the product then overestimates, which only leaves long
    samples unflagged, where underestimating would drop samples the model can read."""
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    if not isinstance(limit, int) or limit <= 0:
        return None
    how = f"max_position_embeddings {limit}"
    scaling = getattr(text, "rope_scaling", None) or getattr(text, "rope_parameters", None) or {}
    if not isinstance(scaling, dict):
        return limit, how
    kind = scaling.get("rope_type", scaling.get("type"))
    factor, original = scaling.get("factor"), scaling.get("original_max_position_embeddings")
    if kind not in ("llama3", "longrope") and isinstance(factor, (int, float)) and factor > 1:
        base = original or limit
        scaled = int(base * factor)
        if scaled > limit:
            named = "original_max_position_embeddings" if original else "max_position_embeddings"
            return scaled, f"{kind} RoPE scaling: {named} {base} x factor {factor:g}"
    return limit, how
