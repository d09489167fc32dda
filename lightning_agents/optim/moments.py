"""Storage of Adam moments in float32, bfloat16 or 8-bit blockwise quantization.

The optimizer reads and writes a moment one chunk at a time as float32 and the store decides how
the values are kept between steps. 8-bit storage uses bitsandbytes' blockwise dynamic quantization
(the format of its 8-bit optimizers): a signed dynamic map for the first moment, an unsigned one
for the second, one float32 absmax per block. Nothing here imports Lightning.
"""

from __future__ import annotations

import math

import torch

__all__ = ["MOMENT_DTYPES", "QUANT_BLOCKSIZE", "MomentStore", "check_int8_support"]

MOMENT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "int8")
# bitsandbytes' largest block; chunks are multiples of it so a chunk never splits a block.
QUANT_BLOCKSIZE = 4096


def _bnb_functional():
    try:
        import bitsandbytes.functional as bnb_f
    except Exception as exc:  # ImportError, or a broken native library raising at import
        raise RuntimeError(
            "moment_dtype='int8' needs bitsandbytes (pip install bitsandbytes); importing it failed with "
            f"{type(exc).__name__}: {exc}. Use moment_dtype='bfloat16' or 'float32' instead."
        ) from exc
    return bnb_f


def check_int8_support(device: torch.device | str) -> None:
    """Raise a clear ``RuntimeError`` unless blockwise 8-bit quantization round-trips on ``device``.

    Args:
        device: the device the moments will live on.
    """
    bnb_f = _bnb_functional()
    device = torch.device(device)
    probe = torch.linspace(-1.0, 1.0, QUANT_BLOCKSIZE + 7, device=device)
    try:
        quantized, state = bnb_f.quantize_blockwise(probe, blocksize=QUANT_BLOCKSIZE)
        restored = bnb_f.dequantize_blockwise(quantized, absmax=state.absmax, code=state.code, blocksize=QUANT_BLOCKSIZE)
    except Exception as exc:
        raise RuntimeError(
            f"moment_dtype='int8' is not supported on {device}: bitsandbytes blockwise quantization failed with "
            f"{type(exc).__name__}: {exc}. Use moment_dtype='bfloat16' or 'float32' instead."
        ) from exc
    if not torch.allclose(restored, probe, atol=2e-2):
        raise RuntimeError(
            f"moment_dtype='int8' is not usable on {device}: bitsandbytes' blockwise round-trip is wrong "
            f"(max error {float((restored - probe).abs().max()):.3g}). Use moment_dtype='bfloat16' or 'float32'."
        )


class MomentStore:
    """Reads and writes one moment tensor (flat, ``numel`` entries) chunk by chunk as float32.

    The store owns no tensors: they live in the optimizer's per-parameter ``state`` dict under
    ``name`` (float formats) or ``name + "_q"`` / ``name + "_absmax"`` (int8), so
    ``Optimizer.state_dict`` checkpoints them as they are.

    Args:
        dtype: ``"float32"``, ``"bfloat16"`` or ``"int8"``.
        signed: whether the moment takes negative values (first moment) or not (second moment);
            picks the 8-bit dynamic map.
    """

    def __init__(self, dtype: str, signed: bool) -> None:
        if dtype not in MOMENT_DTYPES:
            raise ValueError(f"moment_dtype must be one of {MOMENT_DTYPES}, got {dtype!r}")
        self.dtype = dtype
        self.signed = signed
        self._codes: dict[torch.device, torch.Tensor] = {}

    def _code(self, device: torch.device) -> torch.Tensor:
        code = self._codes.get(device)
        if code is None:
            code = _bnb_functional().create_dynamic_map(signed=self.signed).to(device)
            self._codes[device] = code
        return code

    def init(self, state: dict, name: str, numel: int, device: torch.device) -> None:
        """Create the zero moment in ``state`` if it is not there yet.

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment (e.g. ``"exp_avg"``).
            numel: number of entries.
            device: device of the parameter.
        """
        if self.dtype == "int8":
            if name + "_q" not in state:
                # absmax 0 dequantizes every entry to exactly 0 whatever the codes are.
                state[name + "_q"] = torch.zeros(numel, dtype=torch.uint8, device=device)
                state[name + "_absmax"] = torch.zeros(math.ceil(numel / QUANT_BLOCKSIZE), device=device)
        elif name not in state:
            state[name] = torch.zeros(numel, dtype=getattr(torch, self.dtype), device=device)

    def read(self, state: dict, name: str, start: int, end: int) -> torch.Tensor:
        """The float32 values ``[start, end)``; a view (write in place) for float32 storage.

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment.
            start: first entry; a multiple of ``QUANT_BLOCKSIZE`` for int8.
            end: one past the last entry.
        """
        if self.dtype == "float32":
            return state[name][start:end]
        if self.dtype == "bfloat16":
            return state[name][start:end].float()
        quantized = state[name + "_q"][start:end]
        absmax = state[name + "_absmax"][start // QUANT_BLOCKSIZE : math.ceil(end / QUANT_BLOCKSIZE)]
        return _bnb_functional().dequantize_blockwise(
            quantized, absmax=absmax, code=self._code(quantized.device), blocksize=QUANT_BLOCKSIZE
        )

    def write(self, state: dict, name: str, start: int, end: int, values: torch.Tensor) -> None:
        """Store float32 ``values`` as entries ``[start, end)`` (a no-op for float32 views).

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment.
            start: first entry; a multiple of ``QUANT_BLOCKSIZE`` for int8.
            end: one past the last entry.
            values: the new float32 values.
        """
        if self.dtype == "float32":
            target = state[name][start:end]
            if values.data_ptr() != target.data_ptr():
                target.copy_(values)
            return
        if self.dtype == "bfloat16":
            state[name][start:end].copy_(values)
            return
        absmax = state[name + "_absmax"][start // QUANT_BLOCKSIZE : math.ceil(end / QUANT_BLOCKSIZE)]
        _bnb_functional().quantize_blockwise(
            values.contiguous(),
            code=self._code(values.device),
            absmax=absmax,
            out=state[name + "_q"][start:end],
            blocksize=QUANT_BLOCKSIZE,
        )

    def nbytes(self, state: dict, name: str) -> int:
        """Bytes this moment occupies for one parameter.

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment.
        """
        keys = (name + "_q", name + "_absmax") if self.dtype == "int8" else (name,)
        return sum(state[k].numel() * state[k].element_size() for k in keys if k in state)
