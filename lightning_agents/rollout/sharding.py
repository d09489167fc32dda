"""Generation with a policy whose parameters are sharded across processes (FSDP, FSDP2, ZeRO-3).

``generate`` calls the model's forward once per new token. With sharded parameters each forward
needs the other processes' shards, which raises two problems that this module handles, as TRL does
around its own ``generate`` calls:

- parameters held by no inner shard unit are only views of a local shard outside the wrapper's
  forward. FSDP1 (``FullyShardedDataParallel``, Lightning's ``FSDPStrategy``): the root wrapper's
  own parameters are gathered with ``summon_full_params(root, recurse=False)`` when generation runs
  outside its forward (inside a Lightning ``training_step`` the root's forward already gathered
  them). ZeRO-3: all parameters are gathered with ``deepspeed.zero.GatheredParameters`` (TRL's
  default, ``ds3_gather_for_generation``). FSDP2 (``fully_shard``, Lightning's
  ``ModelParallelStrategy``): every sharded module gathers its parameters in its own forward hook,
  nothing to do.
- the per-layer gathers are collectives, so every process must run the same number of forwards
  although their completions end at different lengths: ``generate(synced_gpus=True)`` keeps
  stepping until all processes are done.

Pure torch (no Lightning).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch

__all__ = ["fsdp_wrapped", "gathered_for_generation", "sharding_kind"]

ShardingKind = Literal["none", "fsdp1", "fsdp2", "zero3"]


def _distributed_world() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def _fsdp1_shards(unit) -> bool:
    """Whether a ``FullyShardedDataParallel`` unit splits its parameters: ``NO_SHARD`` (DDP-like,
    every rank holds them whole) does not."""
    from torch.distributed.fsdp import ShardingStrategy

    return getattr(unit, "sharding_strategy", None) != ShardingStrategy.NO_SHARD


def _fsdp1_root(model: torch.nn.Module, root: torch.nn.Module | None):
    from torch.distributed.fsdp import FullyShardedDataParallel

    for candidate in (root, model):
        if isinstance(candidate, FullyShardedDataParallel) and _fsdp1_shards(candidate):
            return candidate
    if any(isinstance(m, FullyShardedDataParallel) and _fsdp1_shards(m) for m in model.modules()):
        # Inner units only: each gathers its own parameters in its forward.
        return model
    return None


def _fsdp2_shards(model: torch.nn.Module) -> bool:
    """Whether a ``fully_shard`` module of ``model`` holds a parameter split over more than one
    process (a ``Shard`` placement on a mesh dimension of size > 1): a mesh of one process, or
    HSDP's replicate-only layout, leaves every parameter whole on every rank."""
    for p in model.parameters():
        mesh, placements = getattr(p, "device_mesh", None), getattr(p, "placements", ())
        if mesh is None:
            continue
        if any(pl.is_shard() and mesh.size(dim) > 1 for dim, pl in enumerate(placements)):
            return True
    return False


def _fsdp2_class():
    """FSDP2's module class (``fully_shard`` makes a module one), or None on a torch without it."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return None
    return FSDPModule


def sharding_kind(model: torch.nn.Module, root: torch.nn.Module | None = None) -> ShardingKind:
    """How ``model``'s parameters are sharded: ``fsdp1`` (``model`` or ``root``, the wrapper the
    strategy built around the LightningModule, is or holds a ``FullyShardedDataParallel`` that
    shards), ``fsdp2`` (a ``fully_shard`` module inside ``model`` splits a parameter over processes),
    ``zero3`` (DeepSpeed ZeRO-3 parameters) or ``none``, also for wrappers whose parameters are
    whole on every rank (FSDP1 ``ShardingStrategy.NO_SHARD``, FSDP2 over a one-process mesh)."""
    if _fsdp1_root(model, root) is not None:
        return "fsdp1"
    fsdp2 = _fsdp2_class()
    if fsdp2 is not None and any(isinstance(m, fsdp2) for m in model.modules()) and _fsdp2_shards(model):
        return "fsdp2"
    if any(hasattr(p, "ds_id") for p in model.parameters()):
        return "zero3"
    return "none"


def fsdp_wrapped(model: torch.nn.Module, root: torch.nn.Module | None = None) -> bool:
    """Whether ``model`` is under an FSDP wrapper of any layout: ``model`` or ``root`` is, or ``model``
    holds, a ``FullyShardedDataParallel`` (any ``ShardingStrategy``) or a ``fully_shard`` module (any
    mesh). Such a wrapper reduces gradients across processes in every backward, also where it splits
    no parameter and :func:`sharding_kind` says ``none`` (``NO_SHARD``, HSDP replicate-only): a
    caller must run as many backward passes on every process."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    fsdp2 = _fsdp2_class()
    wrappers = (FullyShardedDataParallel,) if fsdp2 is None else (FullyShardedDataParallel, fsdp2)
    return isinstance(root, wrappers) or any(isinstance(m, wrappers) for m in model.modules())


def _fsdp1_in_forward(root) -> bool:
    # IDLE: no forward or backward of the root in progress, its own parameters are sharded.
    from torch.distributed.fsdp._common_utils import TrainingState

    return getattr(root, "training_state", TrainingState.IDLE) != TrainingState.IDLE


@contextmanager
def gathered_for_generation(model: torch.nn.Module, root: torch.nn.Module | None = None) -> Iterator[bool | None]:
    """Make ``model`` (a causal LM, possibly sharded) usable by ``generate`` inside the block.

    Args:
        model: the policy whose ``generate`` is called.
        root: the strategy's wrapper around the whole LightningModule, if any (Lightning's
            ``trainer.model``); FSDP1 keeps the parameters no inner unit owns there.

    Yields:
        the ``synced_gpus`` value for ``generate``: ``True`` when forwards run collectives across
        several processes; ``False`` under an FSDP wrapper that splits no parameter (``NO_SHARD``,
        HSDP replicate-only), whose forwards run none, where transformers would otherwise sync on its
        own (any FSDP-managed module) and a ``generate`` run by some processes only (a teacher's for
        its cache misses) would wait for the others; ``None`` (let transformers decide) otherwise.
    """
    kind = sharding_kind(model, root)
    many = _distributed_world() > 1
    if kind != "none":
        synced = True if many else None
    else:
        synced = False if many and fsdp_wrapped(model, root) else None
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        fsdp_root = _fsdp1_root(model, root)
        if isinstance(fsdp_root, FullyShardedDataParallel) and not _fsdp1_in_forward(fsdp_root):
            with FullyShardedDataParallel.summon_full_params(fsdp_root, recurse=False, writeback=False):
                yield synced
            return
    elif kind == "zero3":
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            # Every process holds every parameter now: forwards run no collectives.
            yield None
        return
    yield synced
