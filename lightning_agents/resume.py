"""Random-number state carried through checkpoints, so that a resumed run continues the run it resumed.

Lightning restores weights, optimizer, loop counters and (with a stateful data loader) the
position in the epoch, but not the global random generators. Dropout, LoRA dropout and RL
sampling draw from them, so without this a resumed run diverges from the straight run at its
first random draw.

The state is restored at the first training batch after loading, not while loading: building the
resumed data loader draws from the global generator (its sampler seeds itself), which the straight
run never did at that point. This makes a resume from a mid-epoch checkpoint exact. From a
checkpoint taken at the end of an epoch (Lightning's default) it is not: the straight run shuffles
the next epoch with its sampler's own generator, which the stateful loader does not carry across
the epoch boundary, so the resumed run sees another order; a warning says so.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import torch

__all__ = ["RNGResume", "collect_rng_states", "set_rng_states"]

CHECKPOINT_KEY = "lightning_agents_rng"

log = logging.getLogger(__name__)


def collect_rng_states() -> dict[str, Any]:
    """The global torch, CUDA, numpy and Python generator states, as plain values and tensors
    (loadable with ``torch.load(weights_only=True)``)."""
    version, state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": {"version": version, "state": list(state), "gauss": gauss},
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`collect_rng_states` returned."""
    torch.set_rng_state(states["torch"])
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    n = states["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = states["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


class RNGResume:
    """Saves the generator states of this process into a checkpoint and restores them on resume.

    Each rank saves under its own key; Lightning writes rank 0's checkpoint, so after a
    multi-process resume rank 0 continues its stream exactly and the other ranks keep their own
    fresh (seeded) streams.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    @staticmethod
    def _key(rank: int) -> str:
        return f"{CHECKPOINT_KEY}_rank{rank}"

    def save(self, checkpoint: dict[str, Any], rank: int = 0, trainer: Any = None) -> None:
        """Store this process's generator states in ``checkpoint``.

        Args:
            checkpoint: the checkpoint being written.
            rank: this process's global rank.
            trainer: the Lightning trainer, to note whether the epoch's last batch is done.
        """
        states = collect_rng_states()
        states["at_epoch_end"] = _at_epoch_end(trainer)
        checkpoint[self._key(rank)] = states

    def load(self, checkpoint: dict[str, Any], rank: int = 0) -> None:
        """Remember the states saved for ``rank``, to restore at the first training batch."""
        states = checkpoint.get(self._key(rank))
        if states is not None and states.get("at_epoch_end"):
            log.warning(
                "resuming from a checkpoint taken at the end of an epoch: the next epoch's shuffle and "
                "random draws will differ from an uninterrupted run's (the data loader's sampler state is "
                "not carried across an epoch boundary); checkpoint with every_n_train_steps for an exact resume"
            )
        self._pending = states

    def restore_pending(self) -> None:
        """Restore the remembered states (once); call at the start of each training batch."""
        if self._pending is not None:
            states, self._pending = self._pending, None
            set_rng_states(states)


def _at_epoch_end(trainer: Any) -> bool:
    """Whether the epoch's last batch is done (the next thing a straight run does is build the
    next epoch's loader)."""
    try:
        return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)
    except AttributeError:  # no trainer, or not fitting
        return False
