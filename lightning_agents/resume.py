"""Random-number state carried through checkpoints, so that a resumed run continues the run it resumed.

Lightning restores weights, optimizer, loop counters and (with a stateful data loader) the
position in the epoch, but not the global random generators. Dropout, LoRA dropout and RL
sampling draw from them, so without this a resumed run diverges from the straight run at its
first random draw.

The state is restored at the first training batch after loading, not while loading: building the
resumed data loader draws from the global generator, which the straight run never did at that
point. With the package's data modules (whose shuffle is a function of seed and epoch, see
``datamodules/shuffling.py``) a resume on the same number of processes is exact from any
checkpoint, the end of an epoch included.
A loader that shuffles with ``RandomSampler`` draws each epoch's order from a generator no
checkpoint holds at an epoch boundary; resuming such a loader from there is warned about.
"""

from __future__ import annotations

import logging
import random
from pathlib import PurePath
from typing import Any

import numpy as np
import torch

__all__ = ["RNGResume", "collect_rng_states", "loadable_hparams", "set_rng_states"]

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
        self._pending = checkpoint.get(self._key(rank))

    def restore_pending(self, trainer: Any = None) -> None:
        """Restore the remembered states (once); call at the start of each training batch.

        Args:
            trainer: the running trainer, to check that its training loaders can resume exactly
                from an end-of-epoch checkpoint (a warning names the ones that cannot).
        """
        if self._pending is not None:
            states, self._pending = self._pending, None
            if states.get("at_epoch_end") and trainer is not None:
                _warn_if_reshuffled_from_lost_state(trainer)
            set_rng_states(states)


def _at_epoch_end(trainer: Any) -> bool:
    """Whether the epoch's last batch is done (the next thing a straight run does is build the
    next epoch's loader)."""
    try:
        return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)
    except AttributeError:  # no trainer, or not fitting
        return False


def _warn_if_reshuffled_from_lost_state(trainer: Any) -> None:
    """Warn when a training loader orders the new epoch with a ``RandomSampler``: its generator
    state at the epoch boundary is in no checkpoint, so the order differs from the straight run's."""
    from torch.utils.data import RandomSampler
    from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

    loaders = trainer.train_dataloader
    loaders = (
        loaders.values() if isinstance(loaders, dict) else loaders if isinstance(loaders, (list, tuple)) else [loaders]
    )
    for loader in loaders:
        batch_sampler = getattr(loader, "batch_sampler", None)
        samplers = (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None))
        if any(isinstance(s, (RandomSampler, StatefulRandomSampler)) for s in samplers):
            log.warning(
                "resuming from a checkpoint taken at the end of an epoch with a training loader that shuffles "
                "with RandomSampler: the next epoch's order will differ from an uninterrupted run's (its "
                "generator is not carried across an epoch boundary); use the package's data modules, a sampler "
                "with set_epoch, or checkpoint with every_n_train_steps for an exact resume"
            )
            return


def loadable_hparams(owner: Any) -> None:
    """Write the ``pathlib`` paths among ``owner.hparams`` (a module's or data module's, after
    ``save_hyperparameters()``) as strings, in place.

    Lightning stores the hyperparameters in every checkpoint and resumes with ``torch.load(...,
    weights_only=True)``, which refuses a ``PosixPath``: a ``cache_dir=Path(...)`` given from Python
    made every checkpoint of the run impossible to resume from. A string loads, and every argument
    that takes a path takes a string too.
    """

    def plain(value: Any) -> Any:
        if isinstance(value, PurePath):
            return str(value)
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    for key, value in list(owner.hparams.items()):
        owner.hparams[key] = plain(value)
