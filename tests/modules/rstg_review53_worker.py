"""One rank of the 2-process tests of tests/modules/test_rstg_review53.py (launched through
``rstg_two_ranks.run_two_ranks``; not a test module itself). Each rank writes what it did to
``<out>/rank<r>.json``.

Mode ``device <backend>``: the module's all-reduces outside a Trainer (the module stays on the CPU) under
a process group made with ``<backend>`` (``gloo``, ``cpu:gloo``). Modes ``mixed`` and
``episodes_sharded``: ``collect`` on a batch refused on rank 0 only (``mixed``: calculator episodes
and plain prompts in one batch; ``episodes_sharded``: calculator episodes under an FSDP2 student) and
a batch of plain prompts on rank 1, then the all-reduce that training's ``learn`` makes next.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
from tests.modules.rstg_two_ranks import record_pid, shard_layers


def _plain(n: int) -> list[dict]:
    return [
        {"id": f"p{i}", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "reference": str(i + 1)}
        for i in range(n)
    ]


def _tool_records(n: int) -> list[dict]:
    from lightning_agents.tasks import CalculatorTask

    task = CalculatorTask(split="train", n=n)
    return [task.prompt_record(p) for p in task.problems]


def _devices(out_dir: str, rank: int) -> dict:
    module = RSTGModule(teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"))
    return {
        "device": module._collective_device().type,
        "max": module._global_max(float(rank + 1)),
        "counts": module._global_counts([float(rank + 1), 0.5]),
    }


def _collect(out_dir: str, rank: int, mode: str) -> dict:
    module = RSTGModule(
        num_generations=2,
        max_new_tokens=8,
        max_turns=2,
        guidance=False,
        teacher=None,
        log_samples_every_n_steps=0,
        reward_workers=1,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    if mode == "episodes_sharded":
        from torch.distributed.device_mesh import init_device_mesh

        shard_layers(module.model, init_device_mesh("cpu", (dist.get_world_size(),)))
        batch = _tool_records(1) if rank == 0 else _plain(1)
    else:
        batch = _tool_records(1) + _plain(1) if rank == 0 else _plain(2)
    try:
        module.collect(batch)
        module._global_max(1.0)  # what learn() runs next on every rank
    except RSTGSettingError as exc:
        return {"error": str(exc)}
    return {"error": None}


def main(out_dir: str, mode: str, backend: str = "gloo") -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
    dist.init_process_group(backend)
    torch.set_num_threads(1)
    result = _devices(out_dir, rank) if mode == "device" else _collect(out_dir, rank, mode)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    # every rank past its last collective before any tears gloo down
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
    # Skip the interpreter's teardown (a joinable C++ thread of torch can abort it); results are on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
