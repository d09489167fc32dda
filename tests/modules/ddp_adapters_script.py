"""Run by test_adapters.py: two CPU processes (gloo) train LoRA adapters with DDP (SFT or RSTG) and record them."""

import json
import sys
from pathlib import Path

import lightning as L
import torch

from lightning_agents import ChatDataModule, PromptDataModule, SFTModule
from lightning_agents.adapters import AdapterConfig
from lightning_agents.modules.rstg import RSTGModule


def checksum(params):
    return float(sum(p.double().sum() * (i + 1) for i, p in enumerate(params)))


def main(which: str, out_dir: Path) -> None:
    torch.set_num_threads(1)
    L.seed_everything(0)
    adapter = AdapterConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    if which == "sft":
        module = SFTModule(lr=1e-2, adapter=adapter)
        data = ChatDataModule(embedded_size=64, batch_size=8, max_length=96, val=None)
    else:
        module = RSTGModule(
            num_generations=4,
            max_new_tokens=24,
            micro_batch_size=8,
            lr=1e-2,
            distill_scope="all",
            sample_weight="none",
            teacher_sft=False,
            beta_start=0.5,
            adapter=adapter,
            log_samples_every_n_steps=0,
            reward_workers=1,
            teacher_cache=str(out_dir / "cache.jsonl"),
        )
        data = PromptDataModule(train_size=16, batch_size=2, val=None)
    module.configure_model()
    named = dict(module.named_parameters())
    lora = [p for n, p in named.items() if "lora_" in n]
    base = [p for n, p in named.items() if "lora_" not in n and n.startswith("model.")]
    initial_lora, initial_base = checksum(lora), checksum(base)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, data)
    result = {
        "world_size": trainer.world_size,
        "lora": checksum(lora),
        "initial_lora": initial_lora,
        "base": checksum(base),
        "initial_base": initial_base,
    }
    (out_dir / f"{which}_rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
