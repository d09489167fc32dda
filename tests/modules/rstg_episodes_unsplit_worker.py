"""One rank of the 2-process test of RSTG training on multi-turn episodes (a task with tools) under a
wrapper that splits no parameter (launched by tests/modules/test_rstg_episodes_unsplit_wrappers.py
through ``rstg_two_ranks.run_two_ranks``; not a test module itself).

Rank 0's episodes take the user's two further turns (``_AsksTwice``), rank 1's one user turn (the
calculator), so the ranks make different numbers of student and teacher ``generate`` calls, which
must therefore run unsynced; the teacher cache starts empty, and the guided steps' teacher sampling
(episodes) runs on each rank for its own misses. Mode ``ddp``: Lightning's DDP strategy (the
teacher is left unwrapped). Mode ``no_shard``: student and teacher under FSDP1
``ShardingStrategy.NO_SHARD`` (driven by hand: Lightning refuses FSDP on CPU), whose backward
all-reduces the gradients in every pass. Each rank writes what it did to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rollout.hf_engine import HFGenerationEngine
from lightning_agents.tasks import CalculatorTask
from tests.modules.rstg_two_ranks import record_pid
from tests.modules.test_rstg_rl_rows import TASK_PATH, _AsksTwice

STEPS = 2


def _count_generate(module: RSTGModule) -> dict[str, int]:
    """Teacher and student ``generate`` calls of this rank (the calls still run)."""
    calls = {"teacher": 0, "student": 0}
    real = HFGenerationEngine.generate

    def counted(engine, *args, **kwargs):
        calls["teacher" if engine.model is module.teacher else "student"] += 1
        return real(engine, *args, **kwargs)

    HFGenerationEngine.generate = counted
    return calls


def _by_hand(module: RSTGModule, records: list[dict], metrics: list[dict]) -> None:
    """The optimizer steps without a Trainer, as rstg_fsdp_worker.py does."""
    from tests.modules.rstg_fsdp_worker import _wrap

    module.model = _wrap(module.model, "no_shard")
    module.teacher = _wrap(module.teacher, "no_shard")
    opt = torch.optim.SGD(module.model.parameters(), lr=1e-2)
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    module.log_dict = lambda d, *a, **k: metrics.append(dict(d))
    module.log = lambda *a, **k: None
    for step in range(STEPS):
        module.training_step(records[2 * step : 2 * step + 2], step)


def _lightning_ddp(module: RSTGModule, records: list[dict], metrics: list[dict]) -> None:
    import lightning as L
    from torch.utils.data import DataLoader

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            metrics.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")})

    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[Record()],
        use_distributed_sampler=False,  # each rank its own task's records
    )
    trainer.fit(module, DataLoader(records, batch_size=2, collate_fn=list))


def main(out_dir: str, mode: str) -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
    if mode == "no_shard":
        dist.init_process_group("gloo")
    torch.set_num_threads(1)
    task = _AsksTwice(split="val", n=2 * STEPS) if rank == 0 else CalculatorTask(split="val", n=2 * STEPS)
    path = TASK_PATH if rank == 0 else "lightning_agents.tasks.CalculatorTask"
    module = RSTGModule(
        num_generations=2,
        max_new_tokens=24,
        max_turns=6,
        teacher_k=2,
        micro_batch_size=2,
        temperature=0.9,
        lr=1e-2,
        rl_rows="per_user_turn",
        loss_aggregation="token_mean",
        sampling_seed=rank,
        log_samples_every_n_steps=0,
        reward_workers=1,
        teacher_cache=os.path.join(out_dir, f"cache{rank}.jsonl"),
    )
    module.configure_model()
    module._tasks[path] = task
    records = [{**task.prompt_record(p), "task": path} for p in task.problems]
    calls = _count_generate(module)
    metrics: list[dict] = []
    (_by_hand if mode == "no_shard" else _lightning_ddp)(module, records, metrics)
    params = torch.cat([p.detach().reshape(-1).double() for p in module.model.parameters()])
    result = {
        "rank": rank,
        "steps": len(metrics),
        "checksum": float(params.sum()),
        "calls": calls,
        "cached": len(module.teacher_cache),
        "sft_losses": [m["train/sft_loss"] for m in metrics],
        "negative": [m["train/frac_negative_zero_var"] for m in metrics],
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    if dist.is_initialized():  # (Lightning may have torn its group down already)
        dist.barrier()  # every rank past its last collective before any tears gloo down
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as rstg_fsdp_worker.py: skip a teardown that can abort after the work is written
