"""One rank of the 2-process test of which wrappers count as sharding (launched by
tests/modules/test_rstg_sharding_kind.py through ``rstg_two_ranks.run_two_ranks``; not a test module
itself).

Wraps a small model in real FSDP1 (``FULL_SHARD`` and ``NO_SHARD``) and FSDP2 (a mesh over both ranks,
and HSDP's replicate-only layout: 2 replicas of 1 shard) on gloo/CPU and writes, to
``<out>/rank<r>.json``, ``sharding_kind`` of each and whether RSTG's ``_sharded`` counts it, and
whether the ``NO_SHARD`` model computes outside its wrapper's forward as the unwrapped one does.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rollout.sharding import gathered_for_generation, sharding_kind
from tests.modules.rstg_two_ranks import record_pid


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))


def _fsdp1(strategy) -> torch.nn.Module:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel(_model(), sharding_strategy=strategy, device_id=torch.device("cpu"))


def _fsdp2(shape: tuple[int, ...]) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    model = _model()
    for layer in model:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _synced(model: torch.nn.Module) -> bool | None:
    """``gathered_for_generation``'s ``synced_gpus`` for ``model``, and whether transformers would
    sync a ``generate`` of it on its own (``synced_gpus=None``: FSDP-managed over several ranks)."""
    from transformers.integrations.fsdp import is_fsdp_managed_module

    with gathered_for_generation(model) as synced:
        pass
    return {"yielded": synced, "transformers_would": is_fsdp_managed_module(model)}


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    from torch.distributed.fsdp import ShardingStrategy

    wrapped = {
        "fsdp1_full_shard": _fsdp1(ShardingStrategy.FULL_SHARD),
        "fsdp1_no_shard": _fsdp1(ShardingStrategy.NO_SHARD),
        "fsdp2": _fsdp2((2,)),
        "fsdp2_replicate_only": _fsdp2((2, 1)),
    }
    # RSTG's own test of a model, as a module without a trainer (its wrapper is the model itself)
    module = SimpleNamespace(_trainer=None, _world_size=lambda: dist.get_world_size())
    result = {
        name: {"kind": sharding_kind(model), "sharded": RSTGModule._sharded(module, model), "synced": _synced(model)}
        for name, model in wrapped.items()
    }
    # NO_SHARD counts as no sharding, so generation gathers nothing for it: its parameters must already
    # be whole and usable outside the wrapper's forward (before any forward, as generation may run)
    x = torch.ones(1, 8)
    inner = wrapped["fsdp1_no_shard"].module
    result["no_shard_outside_forward"] = bool(torch.equal(inner(x), _model()(x)))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as rstg_fsdp_worker.py: skip a teardown that can abort after the work is written
