"""Query-parallel MUZODDPStrategy on transformers' Llama (SmolLM2's structure, tied embeddings), bf16-true.

Usage: python muzo_tied_queries_worker.py OUT_DIR WORLD_SIZE
WORLD_SIZE 1 trains in one process with MUZOStrategy; 2 starts two gloo processes (Lightning's popen
launcher re-runs this script for rank 1). Every rank saves its final parameters by name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from lightning_agents.optim import MUZOAdam
from lightning_agents.strategies import MUZODDPStrategy, MUZOStrategy

STEPS, QUERIES = 3, 4


class TiedLlama(L.LightningModule):
    """Two decoder layers of SmolLM2-135M-Instruct's structure (RMSNorm, no biases, tied lm_head)."""

    def __init__(self):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            vocab_size=256,
            max_position_embeddings=64,
            tie_word_embeddings=True,
        )
        self.model = LlamaForCausalLM(config)
        self.ids = torch.randint(3, 256, (4, 16), generator=torch.Generator().manual_seed(1))

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=self.ids, labels=self.ids).loss

    def configure_optimizers(self):
        return MUZOAdam(self.parameters(), lr=1e-3, num_queries=QUERIES, seed=7)

    def train_dataloader(self):
        return DataLoader(list(range(STEPS)), batch_size=1)


def main() -> None:
    out, world = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    module = TiedLlama()
    strategy = MUZODDPStrategy(process_group_backend="gloo", parallel="queries") if world > 1 else MUZOStrategy()
    trainer = L.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=world,
        precision="bf16-true",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
    )
    trainer.fit(module)
    assert module.model.lm_head.weight is module.model.model.embed_tokens.weight
    params = {name: p.detach().clone() for name, p in module.named_parameters()}
    torch.save(params, out / f"world{world}_rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main()
