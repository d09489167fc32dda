"""Storage of Adam moments in float32, bfloat16 (stochastic rounding) or 8-bit blockwise quantization.

The optimizer reads and writes a moment one chunk at a time as float32 and the store decides how
the values are kept between steps:

- ``"float32"``: as they are.
- ``"bfloat16"``: rounded *stochastically* (up or down with probabilities that make the stored value
  unbiased). Round-to-nearest would freeze the second moment: ``v * 0.999`` differs from ``v`` by
  less than half a bfloat16 ulp (2^-9 relative), so it rounds back to ``v`` and ``v`` could only
  grow; after a gradient burst Adam's steps would stay small for good.
- ``"int8"``: bitsandbytes' 8-bit optimizer layout: blockwise dynamic quantization with 256-entry
  blocks and one float32 absmax per block, bitsandbytes' signed dynamic map for the first moment
  and its unsigned map for the second; tensors with fewer than 4096 entries keep float32 moments
  (bitsandbytes' ``min_8bit_size``), where 8 bits would save nothing worth their error.

Nothing here imports Lightning.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "MIN_8BIT_SIZE",
    "MOMENT_DTYPES",
    "QUANT_BLOCKSIZE",
    "MomentStore",
    "check_int8_support",
    "round_to_bf16_stochastic",
]

MOMENT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "int8")
# bitsandbytes' 8-bit optimizers quantize moments in blocks of 256 entries (Optimizer2State with
# block_wise=True) and keep tensors under min_8bit_size=4096 entries in float32.
QUANT_BLOCKSIZE = 256
MIN_8BIT_SIZE = 4096


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
    probe = torch.linspace(-1.0, 1.0, QUANT_BLOCKSIZE * 3 + 7, device=device)
    try:
        quantized, state = bnb_f.quantize_blockwise(probe, blocksize=QUANT_BLOCKSIZE)
        restored = bnb_f.dequantize_blockwise(
            quantized, absmax=state.absmax, code=state.code, blocksize=QUANT_BLOCKSIZE
        )
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


def round_to_bf16_stochastic(values: torch.Tensor, out: torch.Tensor, generator: torch.Generator) -> None:
    """Write float32 ``values`` into the bfloat16 tensor ``out`` with unbiased stochastic rounding.

    A bfloat16 is the top 16 bits of a float32. Adding a uniform random integer in ``[0, 2^16)`` to
    the float32 bit pattern and truncating the low 16 bits rounds the magnitude up with probability
    equal to the discarded fraction, so ``E[out] = values`` (carries into the exponent are correct
    because the bit pattern of a float's magnitude is monotone). Non-finite values are kept as they are.

    Args:
        values: contiguous float32 values.
        out: bfloat16 tensor with as many entries.
        generator: the random source (seeded by the caller, so a resumed run is bit-identical).
    """
    bits = values.view(torch.int32)
    noise = torch.randint(0, 1 << 16, values.shape, dtype=torch.int32, device=values.device, generator=generator)
    rounded = (bits + noise).bitwise_and_(-65536).view(torch.float32)
    out.copy_(torch.where(torch.isfinite(values), rounded, values))


class MomentStore:
    """Reads and writes one moment tensor (flat, ``numel`` entries) chunk by chunk as float32.

    The store owns no tensors: they live in the optimizer's per-parameter ``state`` dict under
    ``name`` (float formats, and int8 for tensors under ``MIN_8BIT_SIZE`` entries) or
    ``name + "_q"`` / ``name + "_absmax"`` (int8), so ``Optimizer.state_dict`` checkpoints them as
    they are.

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

    @property
    def needs_random(self) -> bool:
        """Whether :meth:`write` needs a generator (stochastic rounding)."""
        return self.dtype == "bfloat16"

    def init(self, state: dict, name: str, numel: int, device: torch.device) -> None:
        """Create the zero moment in ``state`` if it is not there yet.

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment (e.g. ``"exp_avg"``).
            numel: number of entries.
            device: device of the parameter.
        """
        if name in state or name + "_q" in state:
            return
        if self.dtype == "int8" and numel >= MIN_8BIT_SIZE:
            # absmax 0 dequantizes every entry to exactly 0 whatever the codes are.
            state[name + "_q"] = torch.zeros(numel, dtype=torch.uint8, device=device)
            state[name + "_absmax"] = torch.zeros(math.ceil(numel / QUANT_BLOCKSIZE), device=device)
        else:
            dtype = torch.bfloat16 if self.dtype == "bfloat16" else torch.float32
            state[name] = torch.zeros(numel, dtype=dtype, device=device)

    def read(self, state: dict, name: str, start: int, end: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """The float32 values ``[start, end)``; a view (write in place) for float32 storage.

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment.
            start: first entry; a multiple of ``QUANT_BLOCKSIZE`` for int8.
            end: one past the last entry.
            out: optional float32 buffer of at least ``end - start`` entries to decode into.
        """
        stored = state.get(name)
        if stored is not None and stored.dtype == torch.float32:
            return stored[start:end]
        buffer = out[: end - start] if out is not None and out.numel() >= end - start else None
        if stored is not None:  # bfloat16
            return buffer.copy_(stored[start:end]) if buffer is not None else stored[start:end].float()
        quantized = state[name + "_q"][start:end]
        absmax = state[name + "_absmax"][start // QUANT_BLOCKSIZE : math.ceil(end / QUANT_BLOCKSIZE)]
        # No `out=` here: bitsandbytes has no CPU kernel for dequantize_blockwise.out.
        return _bnb_functional().dequantize_blockwise(
            quantized, absmax=absmax, code=self._code(quantized.device), blocksize=QUANT_BLOCKSIZE
        )

    def write(
        self,
        state: dict,
        name: str,
        start: int,
        end: int,
        values: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> None:
        """Store float32 ``values`` as entries ``[start, end)`` (a no-op for float32 views).

        Args:
            state: the optimizer's state dict of one parameter.
            name: key of this moment.
            start: first entry; a multiple of ``QUANT_BLOCKSIZE`` for int8.
            end: one past the last entry.
            values: the new float32 values.
            generator: random source of the stochastic rounding (bfloat16 storage only).
        """
        stored = state.get(name)
        if stored is not None and stored.dtype == torch.float32:
            target = stored[start:end]
            if values.data_ptr() != target.data_ptr():
                target.copy_(values)
            return
        if stored is not None:
            if generator is None:
                raise ValueError("bfloat16 moments are written with stochastic rounding: pass a generator")
            round_to_bf16_stochastic(values.contiguous(), stored[start:end], generator)
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
        keys = (name, name + "_q", name + "_absmax")
        return sum(state[k].numel() * state[k].element_size() for k in keys if k in state)
