"""One rank of the 2-process FSDP2 test of RSTG's ``learn`` on rollouts laid out one row per user turn
(launched by tests/modules/test_rstg_rl_rows_sharded.py with ``torch.distributed.run``; not a test
module itself).

Rank 0's episodes take the user's two further turns (several rows each), rank 1's have one user turn
(one row each): the ranks hold different numbers of rows, hence of policy micro-batches, and every
forward and backward of the sharded student is a collective. The rollouts are sampled before the
student is sharded (the HF engine's synced generation refuses multi-turn episodes; the vLLM engines,
which allow them, hold their own copy). Each rank writes what it did to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.tasks import CalculatorTask
from tests.modules.rstg_two_ranks import record_pid, shard_layers
from tests.modules.test_rstg_rl_rows import TASK_PATH, _AsksTwice


def main(out_dir: str) -> None:
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
        lr=1e-2,
        guidance=False,
        teacher=None,
        rl_rows="per_user_turn",
        loss_aggregation="token_mean",
        sampling_seed=0,
        log_samples_every_n_steps=0,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    module._tasks[path] = task
    records = [{**task.prompt_record(p), "task": path} for p in task.problems]
    rollout = module.collect(records)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    shard_layers(module.model, mesh)
    opt = torch.optim.SGD(module.model.parameters(), lr=1e-2)
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    metrics = module.learn([rollout])
    full = [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach() for p in module.model.parameters()]
    result = {
        "rank": rank,
        "rows": len(rollout.rewards),
        "loss": metrics["train/loss"],
        "checksum": float(torch.cat([t.reshape(-1).double() for t in full]).sum()),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as rstg_fsdp_worker.py: skip a teardown that can abort after the work is written
