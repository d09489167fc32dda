"""Which wrappers count as sharding the student, teacher or reference for RSTG (``sharding_kind``,
``RSTGModule._sharded``): only those that split parameters over processes. Before session 51 any
FSDP1 wrapper counted, ``ShardingStrategy.NO_SHARD`` (DDP-like, every rank holds every parameter)
included, and any ``fully_shard`` module, a mesh whose shard dimension holds one process included;
RSTG then padded passes and synced generation for nothing and, with a teacher missing its cache,
refused the step."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rollout.sharding import sharding_kind
from tests.modules.rstg_two_ranks import run_two_ranks


def _fsdp1_wrapper(strategy: ShardingStrategy):
    """A stand-in FSDP1 wrapper (passes ``isinstance``) with the given strategy."""
    wrapper = mock.MagicMock(spec=FullyShardedDataParallel)
    wrapper.sharding_strategy = strategy
    return wrapper


@pytest.mark.parametrize(
    ("strategy", "kind"),
    [
        (ShardingStrategy.NO_SHARD, "none"),
        (ShardingStrategy.FULL_SHARD, "fsdp1"),
        (ShardingStrategy.SHARD_GRAD_OP, "fsdp1"),
        (ShardingStrategy.HYBRID_SHARD, "fsdp1"),
    ],
)
def test_an_fsdp1_wrapper_counts_as_sharding_unless_it_shards_nothing(strategy, kind):
    model = torch.nn.Linear(2, 2)
    root = _fsdp1_wrapper(strategy)  # the strategy's wrapper around the LightningModule
    assert sharding_kind(model, root) == kind
    module = SimpleNamespace(_trainer=SimpleNamespace(model=root), _world_size=lambda: 2)
    assert RSTGModule._sharded(module, model) is (kind != "none")


@pytest.mark.slow
@pytest.mark.distributed
def test_real_wrappers_on_two_ranks_count_as_sharding_only_where_they_split_parameters(tmp_path):
    run_two_ranks(Path(__file__).with_name("rstg_sharding_kind_worker.py"), tmp_path, 120)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0 == r1
    # a wrapper that shards nothing gets synced_gpus False, not None: transformers would sync it
    never = {"yielded": False, "transformers_would": True}
    assert r0 == {
        "fsdp1_full_shard": {"kind": "fsdp1", "sharded": True, "synced": {"yielded": True, "transformers_would": True}},
        "fsdp1_no_shard": {"kind": "none", "sharded": False, "synced": never},
        "fsdp2": {"kind": "fsdp2", "sharded": True, "synced": {"yielded": True, "transformers_would": True}},
        "fsdp2_replicate_only": {"kind": "none", "sharded": False, "synced": never},
        "no_shard_outside_forward": True,
    }


@pytest.mark.parametrize("with_tools", [False, True])
def test_sampling_passes_synced_gpus_false_down_to_every_generate_call(tmp_path, monkeypatch, with_tools):
    """``synced_gpus=False`` (an FSDP wrapper that shards nothing, ``gathered_for_generation``) must
    reach transformers: left out, it syncs any FSDP-managed module's generate on its own, and a
    generate run by some ranks only (a teacher's cache misses) or a data-dependent number of times
    (episodes) then waits for ranks that never join. Before the fix ``_sample`` dropped it."""
    from lightning_agents.rollout.hf_engine import HFGenerationEngine
    from tests.modules.test_rstg_rl_rows import _AsksTwice, _module, _records, _with_task

    module = _module(tmp_path, guidance=False, teacher=None)
    if with_tools:
        task = _AsksTwice(split="val", n=1)
        _with_task(module, task)
        records = _records(task, 1)
    else:
        records = [{"id": "p0", "prompt": [{"role": "user", "content": "1+1?"}], "reference": "2"}]
    seen: list = []
    real = HFGenerationEngine.generate

    def spied(engine, prompts, *args, **kwargs):
        seen.append(kwargs.get("synced_gpus", "left out"))
        return real(engine, prompts, *args, **{**kwargs, "synced_gpus": None})  # one process here

    monkeypatch.setattr(HFGenerationEngine, "generate", spied)
    module._sample(module.engine, records, 1, module.sampling, [0], synced_gpus=False)
    assert seen and all(s is False for s in seen), seen
