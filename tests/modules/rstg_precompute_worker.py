"""One rank of the 2-process test of RSTG's teacher-cache filling under a sharded teacher (launched by
tests/modules/test_rstg_teacher_sampling_split.py through ``rstg_two_ranks.run_two_ranks``; not a test
module itself).

The teacher is sharded with ``fully_shard`` over a CPU mesh, so each forward of its ``generate`` is a
collective. ``precompute_teacher`` samples ``batch_size`` prompts per ``generate`` call, and the ranks
have different numbers of uncached prompts, hence of calls: mode ``uneven`` gives rank 0 three prompts
and rank 1 one (batch size 1: three calls against one), mode ``none`` gives rank 1 no record at all
(batch size 2: two calls against none). Each rank writes what it did to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rewards.arithmetic import arithmetic_conversation, make_arithmetic_split
from lightning_agents.rollout.hf_engine import HFGenerationEngine
from tests.modules.rstg_two_ranks import record_pid, shard_layers

#: mode -> (rank 0's prompts, rank 1's prompts, batch size)
MODES = {"uneven": (3, 1, 1), "none": (3, 0, 2)}


def _count_teacher_calls(module: RSTGModule) -> list[int]:
    """Prompts of each teacher ``generate`` call this rank makes (the call still runs)."""
    calls: list[int] = []
    real = HFGenerationEngine.generate

    def counted(engine, prompts, *args, **kwargs):
        if engine.model is module.teacher:
            calls.append(len(prompts))
        return real(engine, prompts, *args, **kwargs)

    HFGenerationEngine.generate = counted
    return calls


def main(out_dir: str, mode: str) -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    counts = MODES[mode]
    split = make_arithmetic_split("val", n=4)
    start = 0 if rank == 0 else counts[0]
    records = [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in split[start : start + counts[rank]]
    ]
    module = RSTGModule(
        # the ranks' answers end at different lengths: synced_gpus must keep both stepping
        max_new_tokens=12 + 8 * rank,
        teacher_k=2,
        log_samples_every_n_steps=0,
        reward_workers=1,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    shard_layers(module.teacher, init_device_mesh("cpu", (dist.get_world_size(),)))
    calls = _count_teacher_calls(module)
    result = module.precompute_teacher(records, batch_size=counts[2])
    entries = [module.teacher_cache.get(module.teacher_key(r)) for r in records]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump({"rank": rank, "result": result, "calls": calls, "entries": entries}, fh)
    # every rank past its last collective before any tears gloo down
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # Skip the interpreter's teardown (a joinable C++ thread of torch can abort it); results are on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
