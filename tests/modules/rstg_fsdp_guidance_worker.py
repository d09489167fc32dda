"""One rank of the 2-process FSDP2 tests of RSTG's guidance passes (launched with
``torch.distributed.run`` by tests/modules/rstg_two_ranks.py; not a test module itself).

Rank 0's groups are all wrong (every row guided, several rows per episode), rank 1's all right (no
guided row). The student and the teacher are sharded, and the rollouts carry no entropies (as from
vLLM), so the teacher's pass and the student's entropy pass are collectives that rank 0 makes and rank
1 must join. The rollouts are sampled before sharding. Each rank writes ``<out>/rank<r>.json``.

Mode ``guidance`` (test_rstg_rl_rows_episodes.py): the rows, guided rows and their total over ranks.
Mode ``teacher_miss`` (test_rstg_sharded_teacher_cache.py): ``sample_weight: teacher_pass_rate`` and an
empty teacher cache, so rank 0 would sample from the sharded teacher for its cache's misses, episodes
of a task with tools, and rank 1 could not join them call for call; the guided rows, or the setting
error the rank raised.
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


def main(out_dir: str, mode: str) -> None:
    misses = mode == "teacher_miss"
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
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
        micro_batch_size=2,
        temperature=0.9,
        **({"teacher_k": 2, "sample_weight": "teacher_pass_rate"} if misses else {"sample_weight": "none"}),
        teacher_sft=False,
        rl_rows="per_user_turn",
        sampling_seed=0,
        log_samples_every_n_steps=0,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    module._tasks[path] = task
    records = [{**task.prompt_record(p), "task": path} for p in task.problems]
    module.hparams.guidance = not misses  # the teacher's sampling waits for the sharded step
    rollout = module.collect(records)
    module.hparams.guidance = True
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    shard_layers(module.model, mesh)
    shard_layers(module.teacher, mesh)
    out = dataclasses.replace(rollout.out, entropies=None)  # as from vLLM: the student's entropy pass runs
    episodes = len(rollout.info.get("episode_rewards", rollout.rewards))
    rewards = torch.full((episodes,), 0.0 if rank == 0 else 1.0)
    try:
        _, info = module.compute_token_advantages(out, rewards, records, rollout.info.get("row_episode"))
    except RSTGSettingError as exc:
        if not misses:
            raise
        result = {"rank": rank, "error": str(exc)}
    else:
        guided = int(info["opd_rows"].sum())
        result = {"rank": rank, "rows": len(rollout.rewards), "guided": guided}
        if not misses:
            total = torch.tensor([float(guided)])
            dist.all_reduce(total)
            result["total"] = int(total[0])
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "guidance")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as rstg_fsdp_worker.py: skip a teardown that can abort after the work is written
