"""Small LightningModules and data shared by the MUZO strategy tests and their DDP worker script."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from lightning_agents.optim import MUZOAdam


def regression_data(n: int = 48, d: int = 6, dtype=torch.float32, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=dtype)
    w = torch.randn(d, 1, generator=gen, dtype=dtype)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=gen, dtype=dtype))


class Regressor(L.LightningModule):
    """An MLP with dropout that records what each evaluation of training_step saw."""

    def __init__(
        self,
        d: int = 6,
        lr: float = 1e-2,
        num_queries: int = 2,
        mode: str = "adam",
        dropout: float = 0.5,
        dtype=torch.float32,
        optimizer: str = "muzo",
        seed: int = 0,
    ):
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
        ).to(dtype)
        self.lr, self.num_queries, self.mode, self.optimizer_name = lr, num_queries, mode, optimizer
        self.evaluations: list[dict] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.evaluations.append(
            {
                "grad": torch.is_grad_enabled(),
                "training": [m.training for m in self.modules()],
                "loss": loss.item(),
                "step": self.global_step,
            }
        )
        self.log("train/loss", loss)
        self.log_dict({"train/double": 2 * loss, "train/const": 3.0})
        return loss

    def configure_optimizers(self):
        if self.optimizer_name == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=self.lr)
        return MUZOAdam(self.parameters(), lr=self.lr, num_queries=self.num_queries, mode=self.mode, seed=1234)


def loader(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False)
