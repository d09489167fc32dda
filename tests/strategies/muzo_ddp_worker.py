"""Run MUZODDPStrategy on 2 CPU processes (gloo) and save every rank's final parameters.

Usage: python muzo_ddp_worker.py OUT_DIR STEPS PER_RANK_BATCH NUM_QUERIES [data|queries]
With ``queries`` every rank reads the same global batch (2 x PER_RANK_BATCH) and evaluates half of
the queries.
Lightning's popen launcher re-runs this script for rank 1, like `torchrun` would.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from muzo_helpers import Regressor, regression_data  # noqa: E402

from lightning_agents.strategies import MUZODDPStrategy  # noqa: E402


class SaveParameters(Callback):
    def __init__(self, out: Path):
        self.out = out

    def on_train_end(self, trainer, pl_module):
        torch.save(
            {
                "params": [p.detach().clone() for p in pl_module.parameters()],
                "losses": trainer.optimizers[0].last_losses,
                "world_size": trainer.world_size,
                "evaluations": len(pl_module.evaluations),
                "wrapped": type(trainer.strategy.model).__name__,
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )


class ShardedRegressor(Regressor):
    """Rank r reads samples r, r + 2, ... in order, so the global batch k is the single-process batch k
    (Lightning's automatic DistributedSampler would shuffle)."""

    def __init__(self, per_rank_batch: int, parallel: str = "data", **kwargs):
        super().__init__(**kwargs)
        self.per_rank_batch = per_rank_batch
        self.parallel = parallel

    def train_dataloader(self):
        data = regression_data(dtype=torch.float64)
        if self.parallel == "queries":  # every rank the whole global batch
            return DataLoader(data, batch_size=2 * self.per_rank_batch, shuffle=False)
        sampler = DistributedSampler(data, num_replicas=self.trainer.world_size, rank=self.global_rank, shuffle=False)
        return DataLoader(data, batch_size=self.per_rank_batch, sampler=sampler)


def main() -> None:
    out, steps, batch, q = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    parallel = sys.argv[5] if len(sys.argv) > 5 else "data"
    torch.set_num_threads(1)
    model = ShardedRegressor(batch, parallel=parallel, num_queries=q, dtype=torch.float64, dropout=0.0)
    trainer = L.Trainer(
        strategy=MUZODDPStrategy(process_group_backend="gloo", parallel=parallel),
        accelerator="cpu",
        devices=2,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[SaveParameters(out)],
        default_root_dir=out,
        use_distributed_sampler=False,
    )
    trainer.fit(model)


if __name__ == "__main__":
    main()
