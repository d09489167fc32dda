"""Run MUZODDPStrategy on 2 CPU processes (gloo) with bf16-true master weights, int8 moments and a
NaN loss on one rank at one step; save every rank's parameters, optimizer state and seeds.

Usage: python muzo_audit_ddp_worker.py OUT_DIR
Lightning's popen launcher re-runs this script for rank 1, like `torchrun` would.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from muzo_helpers import regression_data  # noqa: E402

from lightning_agents.optim import MUZOAdam  # noqa: E402
from lightning_agents.strategies import MUZODDPStrategy  # noqa: E402

PER_RANK, STEPS, QUERIES = 8, 6, 4
NAN_AT = (1, 2)  # (rank, global step): that rank's first evaluation of that step returns NaN


class AuditNet(L.LightningModule):
    """An MLP with a 64 x 64 layer (int8 moments need >= 4096 entries) and a float32 loss."""

    def __init__(self, world_size: int = 2, nan_at: tuple[int, int] | None = NAN_AT):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
        )
        self.world, self.nan_at, self.calls, self.seeds = world_size, nan_at, 0, []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).float(), y.float())
        self.calls += 1
        if (self.global_rank, self.global_step) == self.nan_at and self.calls % (2 * QUERIES) == 1:
            loss = loss * float("nan")
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.seeds.append(list(self.trainer.optimizers[0].last_seeds))

    def configure_optimizers(self):
        return MUZOAdam(
            self.parameters(), lr=1e-2, num_queries=QUERIES, seed=1234, moment_dtype="int8", chunk_size=1024
        )

    def train_dataloader(self):
        data = regression_data(n=PER_RANK * 2 * STEPS)
        if self.world == 1:
            return DataLoader(data, batch_size=2 * PER_RANK, shuffle=False)
        sampler = DistributedSampler(data, num_replicas=self.world, rank=self.global_rank, shuffle=False)
        return DataLoader(data, batch_size=PER_RANK, sampler=sampler)


def result(trainer: L.Trainer, module: AuditNet) -> dict:
    """What the test compares: parameters, optimizer state, seeds and counters."""
    opt = trainer.optimizers[0]
    return {
        "params": [p.detach().clone() for p in module.parameters()],
        "state": opt.state_dict()["state"],
        "seeds": module.seeds,
        "updates": opt.num_updates,
        "skipped": opt.num_skipped,
    }


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    module = AuditNet()
    trainer = L.Trainer(
        strategy=MUZODDPStrategy(process_group_backend="gloo"),
        accelerator="cpu",
        devices=2,
        precision="bf16-true",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        default_root_dir=out,
    )
    trainer.fit(module)
    torch.save(result(trainer, module), out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main()
