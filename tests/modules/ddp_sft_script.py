"""Run by test_sft.py: two CPU processes (gloo) fine-tune the student with DDP and record their weights."""

import json
import sys
from pathlib import Path

import lightning as L
import torch

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.datamodules.chat import collate_padded


class Record(L.Callback):
    def __init__(self):
        self.losses = []
        self.rows = []  # each trained row's token ids, to check how the ranks split the epoch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        for ids, mask in zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist()):
            self.rows.append([t for t, m in zip(ids, mask) if m])


def checksum(module):
    return float(sum(p.double().sum() * (i + 1) for i, p in enumerate(module.parameters())))


@torch.no_grad()
def probe_loss(module, batch) -> float:
    was_training = module.training
    module.eval()
    loss = float(module(batch).loss)
    module.train(was_training)
    return loss


def main(out_dir: Path) -> None:
    torch.set_num_threads(1)
    L.seed_everything(0)
    module = SFTModule(lr=3e-4)
    module.configure_model()
    initial = checksum(module)
    record = Record()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=12,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[record],
    )
    data = ChatDataModule(embedded_size=256, batch_size=8, max_length=128, val=None)
    # The training loss of single batches is too noisy to show learning in 12 steps of an already
    # pretrained student, so both ranks score the same fixed training rows before and after.
    data.setup("fit")
    rows = data.datasets["fit"]
    probe = collate_padded([rows[i] for i in range(64)], pad_id=data.tokenizer.pad_token_id)
    before = probe_loss(module, probe)
    trainer.fit(module, data)
    result = {
        "world_size": trainer.world_size,
        "checksum": round(checksum(module), 6),
        "initial_checksum": round(initial, 6),
        "first_loss": before,
        "last_loss": probe_loss(module, probe),
        "rows": record.rows,
        "sampler": type(trainer.train_dataloader.sampler).__name__,
    }
    (out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
