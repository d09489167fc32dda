"""Training loaders whose shuffle depends on (seed, epoch) alone, so that a checkpoint resumes exactly.

A sampler that draws each epoch's order from its own running generator (``RandomSampler``) can
be resumed only from the middle of an epoch, where the stateful loader stores that generator. At
an epoch boundary (Lightning's default checkpoint) the next order comes from a generator state
nobody saved, and the resumed run trains on other batches. Here the order of epoch ``e`` is
``randperm(n)`` seeded with ``seed + e``, as in ``DistributedSampler``; Lightning's fit loop
calls ``set_epoch`` with the epoch it resumes at, and the sampler's state (epoch, position)
travels in the loader's part of the checkpoint.

Under several processes the same sampler splits each epoch between the ranks (the split
``DistributedSampler`` makes), so Lightning leaves it in place instead of wrapping it. A resume
on the same number of processes is exact. A mid-epoch checkpoint resumed on another number of
processes continues from the same place in the epoch's global order; when the rows already
trained do not split evenly between the new processes, up to (new processes - 1) of them are
trained again, with a warning, and none is skipped.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_agents import _lightning_compat as compat
from lightning_agents.rollout.seeding import run_seed

__all__ = ["EpochShuffleSampler", "shuffled_loader"]

log = logging.getLogger(__name__)


class EpochShuffleSampler(DistributedSampler):
    """A shuffling sampler whose order is a function of (seed, epoch) and whose position can be saved.

    Args:
        dataset: the rows (anything with a length).
        seed: the shuffle seed; epoch ``e`` is ordered by ``randperm`` seeded with ``seed + e``.
        num_replicas: processes that share each epoch (1 outside distributed training).
        rank: this process's index among them.
    """

    def __init__(self, dataset: Sequence[Any], seed: int, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.yielded = 0
        self._skip = 0

    def __iter__(self) -> Iterator[int]:
        # A generator: the skip is taken when iteration starts, after set_epoch and load_state_dict.
        skip, self._skip = self._skip, 0
        self.yielded = skip
        for index in itertools.islice(super().__iter__(), skip, None):
            self.yielded += 1
            yield index

    def state_dict(self) -> dict[str, int]:
        """The seed, the epoch, how many indices of it this rank handed out, and among how many ranks."""
        return {"seed": self.seed, "epoch": self.epoch, "yielded": self.yielded, "num_replicas": self.num_replicas}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from ``state``: within its epoch, or at the next epoch when it was finished.

        The seed comes from the checkpoint too: a resume started with another run seed still
        continues the checkpointed run's order.

        Lightning saves rank 0's state and every rank loads it. Ranks take interleaved positions
        of the epoch's global order, so after each of ``W`` ranks handed out ``yielded`` indices
        the first ``yielded * W`` positions are used, whatever this run's number of ranks. The new
        ranks start from the last multiple of their own count at or before that position: exact
        when ``W`` is unchanged (or the position divides evenly), otherwise the few rows in
        between are trained again (a warning says how many) rather than skipped. A state without
        ``num_replicas`` (written before it was saved) is taken as this run's number of ranks."""
        self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        saved_replicas = int(state.get("num_replicas", self.num_replicas))
        consumed = int(state["yielded"]) * saved_replicas
        if consumed >= len(self.dataset):
            # The epoch was done when the checkpoint was taken (the fit loop's set_epoch agrees).
            # Judged on the global position: the per-rank count against a larger world's shorter
            # share would end the epoch before its last rows were trained.
            self.epoch, self.yielded = self.epoch + 1, 0
        else:
            self.yielded = consumed // self.num_replicas
            repeated = consumed - self.yielded * self.num_replicas
            if repeated and self.rank == 0:
                log.warning(
                    "resuming a mid-epoch checkpoint taken on %d processes on %d: the %d rows of epoch %d "
                    "already trained do not split evenly between %d processes, so %d of them are trained "
                    "again (none is skipped); resuming on %d processes continues exactly",
                    saved_replicas,
                    self.num_replicas,
                    consumed,
                    self.epoch,
                    self.num_replicas,
                    repeated,
                    saved_replicas,
                )
        self._skip = self.yielded


def shuffled_loader(
    rows: Sequence[Any],
    *,
    batch_size: int,
    seed: int | None,
    collate_fn: Callable[[list[Any]], Any],
    num_workers: int = 0,
    trainer: Any = None,
) -> StatefulDataLoader:
    """A stateful training loader that shuffles ``rows`` with :class:`EpochShuffleSampler`.

    Args:
        rows: the training rows.
        batch_size: rows per batch (per process).
        seed: shuffle seed; ``None`` takes the run's seed (:func:`~lightning_agents.rollout.seeding.run_seed`).
        collate_fn: builds a batch from a list of rows.
        num_workers: loader worker processes.
        trainer: the Lightning trainer the loader is for, if any: under a distributed strategy
            (and ``use_distributed_sampler``, Lightning's default) each process gets its share of
            every epoch, as Lightning's own sampler would give it.
    """
    replicas = compat.distributed_sampler_kwargs(trainer) or {"num_replicas": 1, "rank": 0}
    sampler = EpochShuffleSampler(rows, run_seed(seed), replicas["num_replicas"], replicas["rank"])
    # The loader's own generator: every new iterator draws a seed for its workers, which from the
    # global generator would shift dropout and sampling by one draw per epoch in the straight run,
    # a draw a run resumed at an epoch boundary does not make.
    generator = torch.Generator().manual_seed(sampler.seed)
    return StatefulDataLoader(
        rows,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        num_workers=num_workers,
        generator=generator,
    )
