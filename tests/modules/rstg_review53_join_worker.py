"""One rank of the 2-process tests of tests/modules/test_rstg_review53_join.py (launched through
``rstg_two_ranks.run_two_ranks``; not a test module itself). Each rank writes what it did to
``<out>/rank<r>.json``.

``precompute_teacher`` under a teacher sharded with ``fully_shard`` over a CPU mesh (each forward of its
``generate`` a collective), every rank with its own records, as user code calls it. Rank 1 has one plain
prompt; rank 0's uncached records are refused by ``_sample`` on rank 0 only, after the join:

- ``episode_verifier``: a prompt whose verifier scores whole episodes but that names no task with tools
  (``check_one_shot_records``);
- ``mixed``: calculator episodes and a plain prompt in one ``generate`` chunk (``agent_task``).
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from lightning_agents.errors import LightningAgentsError
from lightning_agents.modules.rstg import RSTGModule
from tests.modules.rstg_two_ranks import record_pid, shard_layers

EPISODE_VERIFIER = "lightning_agents.tasks.tau_actions.TauActionVerifier"


def _plain(i: int, **extra) -> dict:
    prompt = [{"role": "user", "content": f"What is {i} + 1?"}]
    return {"id": f"p{i}", "prompt": prompt, "reference": str(i + 1), **extra}


def _records(rank: int, mode: str) -> list[dict]:
    if rank == 1:
        return [_plain(1)]
    if mode == "episode_verifier":
        return [_plain(0, verifier=EPISODE_VERIFIER)]
    from lightning_agents.tasks import CalculatorTask

    task = CalculatorTask(split="train", n=1)
    return [task.prompt_record(p) for p in task.problems] + [_plain(0)]


def main(out_dir: str, mode: str) -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    module = RSTGModule(
        max_new_tokens=4,
        max_turns=2,
        teacher_k=1,
        log_samples_every_n_steps=0,
        reward_workers=1,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    shard_layers(module.teacher, init_device_mesh("cpu", (dist.get_world_size(),)))
    try:
        module.precompute_teacher(_records(rank, mode), batch_size=4)
        error = None
    except LightningAgentsError as exc:
        error = str(exc)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump({"rank": rank, "error": error}, fh)
    # every rank past its last collective before any tears gloo down
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # Skip the interpreter's teardown (a joinable C++ thread of torch can abort it); results are on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
