"""One rank of the 2-process DDP test of RSTGModule (launched by tests/modules/test_rstg_ddp.py
through ``rstg_two_ranks.run_two_ranks``; not a test module itself).

Rank 0 scores every sample 0, so all its groups are negative and get teacher guidance and teacher
SFT; rank 1 alternates 1, 0, so its groups are mixed and get neither. With a data-dependent number
of gradient-synchronising backward passes this would hang; each rank writes its final weights'
checksum and what it did to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import itertools
import json
import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rewards.arithmetic import (
    arithmetic_conversation,
    make_arithmetic_split,
)
from tests.modules.rstg_two_ranks import record_pid

_CALLS = itertools.count()


class RankRewards:
    """Rank 0: always wrong. Rank 1: right, wrong, right, ... (mixed groups; scored sequentially)."""

    def __call__(self, completion: str, reference: str) -> float:
        if int(os.environ["RANK"]) == 0:
            return 0.0
        return float(next(_CALLS) % 2 == 0)


class Record(L.Callback):
    def __init__(self) -> None:
        self.sft_losses: list[float] = []
        self.negative: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        m = trainer.callback_metrics
        self.sft_losses.append(float(m["train/sft_loss"]))
        self.negative.append(float(m["train/frac_negative_zero_var"]))


def main(out_dir: str) -> None:
    rank = int(os.environ["RANK"])
    record_pid(out_dir, rank)  # the test kills a worker left waiting by this id
    records = [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in make_arithmetic_split("val", n=8)
    ]
    module = RSTGModule(
        num_generations=4,
        max_new_tokens=8,
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
    for rec in records:  # a known SFT target for every prompt, so rank 0 surely runs teacher SFT
        module.teacher_cache.put(module.teacher_key(rec), 0.5, "The answer is 3.", 2)
    record = Record()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[record],
        use_distributed_sampler=True,
    )
    torch.manual_seed(rank)
    trainer.fit(module, DataLoader(records, batch_size=2, collate_fn=list))
    params = torch.cat([p.detach().reshape(-1).double() for p in module.model.parameters()])
    result = {
        "rank": rank,
        "steps": trainer.global_step,
        "checksum": float(params.sum()),
        "l2": float(params.norm()),
        "first": params[:8].tolist(),
        "sft_losses": record.sft_losses,
        "negative": record.negative,
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main(sys.argv[1])
