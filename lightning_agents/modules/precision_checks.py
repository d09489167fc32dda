"""Checks of the weight dtypes a module trains against the Trainer's precision, made when the
optimizer is built (the weights exist and the precision plugin has cast them).

Two settings looked fine and were not: float16 weights under AdamW (``precision: 16-true``), whose
``eps`` of 1e-8 is 0 in float16, so the first step turned every weight into NaN, even at lr 0;
and 16-bit weights under a precision that is not ``*-true`` (``dtype: bfloat16`` with
``bf16-mixed`` or ``32-true``), which trains entirely in bf16, where an AdamW step of ~1e-6 is
below the weights' resolution and is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch

from lightning_agents.errors import LightningAgentsError

__all__ = ["check_adamw_weights"]

log = logging.getLogger(__name__)


def check_adamw_weights(params: Iterable[torch.nn.Parameter], trainer: Any, module: str) -> None:
    """Refuse float16 trainable weights for AdamW; warn about bf16 ones outside a ``*-true`` precision.

    Args:
        params: the trainable parameters the optimizer gets.
        trainer: the Trainer (``None`` outside one: only the float16 check applies).
        module: the module's name, for the messages.
    """
    dtypes = {p.dtype for p in params}
    precision = str(getattr(trainer, "precision", "") or "")
    if torch.float16 in dtypes:
        raise LightningAgentsError(
            f"{module}: float16 trainable weights with AdamW{f' (precision {precision})' if precision else ''}: its "
            "eps of 1e-8 is 0 in float16, so the first step makes every weight NaN. Train float32 weights with "
            "precision: 16-mixed or bf16-mixed, or bfloat16 weights with bf16-true"
        )
    if torch.bfloat16 in dtypes and precision and not precision.endswith("-true"):
        log.warning(
            "%s: trainable weights are bfloat16 under precision %s, so the run trains entirely in bf16 and an "
            "AdamW step below the weights' resolution (~1e-6 at lr 1e-6) is lost; use dtype: float32 with "
            "precision: bf16-mixed (or bf16-true to mean it)",
            module,
            precision,
        )
