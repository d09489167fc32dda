"""One rank of the 2-process FSDP2 reproducer of review finding F2 (launched by
test_rstg_sharded_teacher_cache.py with ``torch.distributed.run``; not a test module itself).

As ``tests/modules/rstg_fsdp_guidance_worker.py`` (student and teacher sharded, rank 0's groups all
wrong, rank 1's all right), but with ``sample_weight: teacher_pass_rate`` and an empty teacher cache:
rank 0 samples from the sharded teacher for its cache's misses, rank 1 does not. Each rank writes
``<out>/rank<r>.json`` with the number of guided rows, or with the setting error it raised.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
from lightning_agents.tasks import CalculatorTask
from tests.modules.rstg_two_ranks import record_pid, shard_layers
from tests.modules.test_rstg_rl_rows import TASK_PATH, _AsksTwice


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from torch.distributed.device_mesh import init_device_mesh

    task = _AsksTwice(split="val", n=2) if rank == 0 else CalculatorTask(split="val", n=2)
    path = TASK_PATH if rank == 0 else "lightning_agents.tasks.CalculatorTask"
    module = RSTGModule(
        num_generations=2,
        max_new_tokens=24,
        max_turns=6,
        teacher_k=2,
        micro_batch_size=2,
        temperature=0.9,
        sample_weight="teacher_pass_rate",
        teacher_sft=False,
        rl_rows="per_user_turn",
        sampling_seed=0,
        log_samples_every_n_steps=0,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    module._tasks[path] = task
    records = [{**task.prompt_record(p), "task": path} for p in task.problems]
    module.hparams.guidance = False  # sample and score without guidance before sharding
    rollout = module.collect(records)
    module.hparams.guidance = True
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    shard_layers(module.model, mesh)
    shard_layers(module.teacher, mesh)
    out = dataclasses.replace(rollout.out, entropies=None)
    episodes = len(rollout.info.get("episode_rewards", rollout.rewards))
    rewards = torch.full((episodes,), 0.0 if rank == 0 else 1.0)
    try:
        _, info = module.compute_token_advantages(out, rewards, records, rollout.info.get("row_episode"))
        result = {"rank": rank, "guided": int(info["opd_rows"].sum())}
    except RSTGSettingError as exc:
        result = {"rank": rank, "error": str(exc)}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
