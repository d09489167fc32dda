"""The one place that loads a tokenizer and a causal LM.

Every module, callback and command goes through :func:`load_model_and_tokenizer`, so a model is
named the same way everywhere: a local path, a hub id, or ``embedded:student`` /
``embedded:teacher`` for the tiny checkpoints shipped in :mod:`lightning_agents.assets`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

log = logging.getLogger(__name__)

__all__ = [
    "DTYPES",
    "QuantizationConfig",
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

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


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
    compute_dtype: str = "bfloat16"

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
        raise ValueError(f"unknown embedded model {name_or_path!r}; expected one of "
                         + ", ".join(EMBEDDED_PREFIX + m for m in EMBEDDED_MODELS))
    path = Path(__file__).resolve().parent / "assets" / which
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"embedded checkpoint {path} is missing; rebuild it with `python scripts/build_embedded.py`"
        )
    return str(path)


def load_tokenizer(name_or_path: str, padding_side: str = "right", trust_remote_code: bool = False):
    """Load the tokenizer of a model and make sure it can pad.

    Args:
        name_or_path: local path, hub id, or ``embedded:student`` / ``embedded:teacher``.
        padding_side: ``"right"`` for training batches, ``"left"`` for generation.
        trust_remote_code: forwarded to ``AutoTokenizer.from_pretrained``.
    """
    from transformers import AutoTokenizer

    with _LOAD_LOCK:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path), trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        # Many causal LMs ship no pad token; EOS is the usual stand-in since padded positions are
        # masked out of both attention and loss.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    return tokenizer


def load_causal_lm(
    name_or_path: str,
    dtype: str = "float32",
    quantization: QuantizationConfig | None = None,
    gradient_checkpointing: bool = False,
    device: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
):
    """Load a causal LM.

    Args:
        name_or_path: local path, hub id, or ``embedded:student`` / ``embedded:teacher``.
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
            raise RuntimeError(
                f"bitsandbytes {quantization.bits}-bit quantization of {name_or_path!r} needs a CUDA GPU, and none is "
                "available; drop `quantization` to load the model unquantized on this machine"
            )
        kwargs["quantization_config"] = quantization.to_transformers()
        kwargs["device_map"] = {"": device or f"cuda:{torch.cuda.current_device()}"}
    with _LOAD_LOCK:
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(name_or_path), **kwargs)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # The KV cache is useless while recomputing activations and transformers warns about it.
        model.config.use_cache = False
    if device is not None and quantization is None:
        model.to(device)
    return model


def load_model_and_tokenizer(
    name_or_path: str,
    dtype: str = "float32",
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
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
