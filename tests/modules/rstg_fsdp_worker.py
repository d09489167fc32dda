"""One rank of the 2-process FSDP2 test of RSTGModule (launched by tests/modules/test_rstg_ddp.py
through ``rstg_two_ranks.run_two_ranks``; not a test module itself).

The student is sharded with ``fully_shard`` over a CPU mesh (Lightning's strategies refuse FSDP on
CPU, so the optimizer step is driven by hand). Rank 0 scores every sample 0 (all groups negative:
guidance and teacher SFT), rank 1 alternates (no teacher SFT), and the ranks' completions have
different lengths: sampling and the data-dependent teacher-SFT passes must still line up the
ranks' collectives. Each rank writes what it did to ``<out>/rank<r>.json``.

Mode ``teacher_uncached`` (tests/modules/test_rstg_sharded_teacher_sampling.py): the teacher is
sharded too and its cache starts empty, so rank 0 samples the teacher's answers for its all-failed
prompts (scored right, so they become SFT targets) while rank 1, with no such prompt, must join
each of those sharded ``generate`` calls; the ranks' longest answers differ (``max_new_tokens``).

Modes ``replicate_only`` and ``no_shard`` (tests/modules/test_rstg_unsharded_wrappers_backward.py): the
student is wrapped so that every rank holds every parameter, FSDP2 over a 2 replicas x 1 shard mesh
(HSDP) or FSDP1 ``ShardingStrategy.NO_SHARD``; these do not count as sharding, but each backward still
all-reduces the gradients across ranks, so the ranks' different numbers of teacher-SFT passes must
still be padded. ``teacher_uncached_replicate_only`` and ``teacher_uncached_no_shard``: the teacher is
wrapped so too and its cache starts empty; only rank 0 samples from it, and nothing may sync those
``generate`` calls with a rank that makes none.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rewards.arithmetic import arithmetic_conversation, make_arithmetic_split
from tests.modules.rstg_two_ranks import record_pid, shard_layers

_CALLS = itertools.count()
_TEACHER = [False]  # the samples being scored are the teacher's (set around its _sample calls)


class RankRewards:
    """Rank 0: the student always wrong, the teacher always right. Rank 1: right, wrong, right, ...
    (mixed groups; scored sequentially)."""

    def __call__(self, completion: str, reference: str) -> float:
        if int(os.environ["RANK"]) == 0:
            return float(_TEACHER[0])
        return float(next(_CALLS) % 2 == 0)


def _tag_teacher_scoring(module: RSTGModule) -> None:
    """Tell RankRewards when the samples it scores are the teacher's."""
    sample = module._sample

    def tagged(engine, *args, **kwargs):
        _TEACHER[0] = engine.model is module.teacher
        try:
            return sample(engine, *args, **kwargs)
        finally:
            _TEACHER[0] = False

    module._sample = tagged


def _wrap(model, layout: str):
    """``model`` under FSDP2 over both ranks (``shard``), FSDP2 over 2 replicas x 1 shard
    (``replicate_only``) or FSDP1 ``NO_SHARD`` (``no_shard``)."""
    from torch.distributed.device_mesh import init_device_mesh

    if layout == "no_shard":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

        return FullyShardedDataParallel(
            model, sharding_strategy=ShardingStrategy.NO_SHARD, device_id=torch.device("cpu")
        )
    world = dist.get_world_size()
    if layout == "replicate_only":
        mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    shard_layers(model, mesh)
    return model


def main(out_dir: str, mode: str) -> None:
    uncached = mode.startswith("teacher_uncached")
    layout = next((w for w in ("no_shard", "replicate_only") if mode.endswith(w)), "shard")
    record_pid(out_dir, int(os.environ["RANK"]))  # the test kills a worker left waiting by this id
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    split = make_arithmetic_split("val", n=8)
    records = [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in split[rank * 4 : rank * 4 + 4]
    ]
    module = RSTGModule(
        num_generations=4,
        # uncached: the teacher's answers (about 20 tokens) must end within the limit to be SFT targets
        max_new_tokens=32 - 8 * rank if uncached else 8 + 8 * rank,
        teacher_k=2,
        micro_batch_size=4,
        lr=1e-2,
        beta_start=0.5,
        beta_floor=0.5,
        verifier="__main__.RankRewards",
        reward_workers=1,
        loss_aggregation="token_mean",
        log_samples_every_n_steps=0,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    if uncached:
        _tag_teacher_scoring(module)
    else:
        for rec in records:  # a known SFT target for every prompt, so rank 0 surely runs teacher SFT
            module.teacher_cache.put(module.teacher_key(rec), 0.5, "The answer is 3.", 2)
    module.model = _wrap(module.model, layout)
    if uncached:
        module.teacher = _wrap(module.teacher, layout)

    opt = torch.optim.SGD(module.model.parameters(), lr=1e-2)
    metrics: list[dict] = []
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    module.log_dict = lambda d, *a, **k: metrics.append(dict(d))
    module.log = lambda *a, **k: None
    for step in range(2):
        module.training_step(records[2 * step : 2 * step + 2], step)
    full = {
        n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach() for n, p in module.model.named_parameters()
    }
    params = torch.cat([t.reshape(-1).double() for t in full.values()])
    result = {
        "rank": rank,
        "steps": len(metrics),
        "checksum": float(params.sum()),
        "sft_losses": [m["train/sft_loss"] for m in metrics],
        "negative": [m["train/frac_negative_zero_var"] for m in metrics],
        "lengths": [m["train/completion_length"] for m in metrics],
        "cached": len(module.teacher_cache),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    # every rank past its last collective before any tears gloo down: a rank that destroys the
    # group while the other still talks to it can abort (seen once in CI: SIGABRT at exit)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cached")
    # Skip the interpreter's teardown: a C++ thread torch leaves joinable can abort it with
    # "terminate called without an active exception" after the work is done and written (SIGABRT
    # seen twice in CI, once after the barrier above was added). The results are already on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
