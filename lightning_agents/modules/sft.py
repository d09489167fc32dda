"""``SFTModule``: supervised fine-tuning of a causal LM on assistant tokens."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from lightning_agents.datamodules.conversations import IGNORE_INDEX
from lightning_agents.models import DType, QuantizationConfig, load_model_and_tokenizer

__all__ = ["SFTModule"]


class SFTModule(L.LightningModule):
    """Causal-LM supervised fine-tuning with the loss on assistant tokens only.

    Batches come from :class:`~lightning_agents.datamodules.ChatDataModule` (``input_ids``,
    ``attention_mask`` or packed ``position_ids``, and ``labels`` that are -100 outside assistant
    turns). Token accuracy and perplexity are torchmetrics metrics, so they are reduced correctly
    across DDP ranks.

    Args:
        model: model to fine-tune: local path, hub id, or ``embedded:student`` / ``embedded:teacher``.
        dtype: dtype the weights are loaded in. With ``precision: bf16-true`` Lightning casts them
            anyway; loading in bf16 directly halves peak memory while loading.
        quantization: bitsandbytes 4/8-bit weights (CUDA only; pair it with adapters).
        gradient_checkpointing: recompute activations during backward to save memory.
        lr: AdamW learning rate, used unless the config has an ``optimizer:`` section.
        weight_decay: AdamW decoupled weight decay.
        betas: AdamW moment coefficients.
        warmup_steps: linear learning-rate warmup steps (0 for none).
        trust_remote_code: allow model repositories with custom code.
    """

    def __init__(
        self,
        model: str = "embedded:student",
        dtype: DType = "float32",
        quantization: QuantizationConfig | None = None,
        gradient_checkpointing: bool = False,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 0,
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model, self.tokenizer = load_model_and_tokenizer(
            model,
            dtype=dtype,
            quantization=quantization,
            gradient_checkpointing=gradient_checkpointing,
            trust_remote_code=trust_remote_code,
        )
        # from_pretrained returns the model in eval mode; Lightning keeps module modes as it finds
        # them, so without this dropout would silently stay off during training.
        self.model.train()
        vocab = self.model.config.vocab_size
        self.val_token_accuracy = MulticlassAccuracy(num_classes=vocab, average="micro", ignore_index=IGNORE_INDEX)
        self.val_perplexity = Perplexity(ignore_index=IGNORE_INDEX)
        self.val_loss = MeanMetric()

    def forward(self, batch: dict[str, torch.Tensor]):
        """Run the model on a batch; returns the transformers output (loss over assistant tokens)."""
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "labels")}
        return self.model(**inputs, use_cache=False)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self(batch).loss
        tokens = (batch["labels"] != IGNORE_INDEX).sum()
        self.log("train/loss", loss, prog_bar=True, batch_size=int(batch["input_ids"].shape[0]))
        self.log("train/assistant_tokens", tokens.float(), reduce_fx="sum", batch_size=1)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self(batch)
        # Next-token prediction: logits at t predict the label at t + 1.
        logits = out.logits[:, :-1].float()
        target = batch["labels"][:, 1:]
        self.val_loss.update(out.loss.detach(), weight=(target != IGNORE_INDEX).sum())
        self.val_token_accuracy.update(logits.argmax(-1), target)
        self.val_perplexity.update(logits, target)
        self.log("val/loss", self.val_loss, prog_bar=True, batch_size=int(batch["input_ids"].shape[0]))
        self.log("val/token_accuracy", self.val_token_accuracy, batch_size=int(batch["input_ids"].shape[0]))
        self.log("val/perplexity", self.val_perplexity, batch_size=int(batch["input_ids"].shape[0]))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self(batch)
        self.log("test/loss", out.loss, batch_size=int(batch["input_ids"].shape[0]), sync_dist=True)

    def configure_optimizers(self) -> Any:
        """AdamW over trainable parameters with optional linear warmup."""
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(
            params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay, betas=tuple(self.hparams.betas)
        )
        if self.hparams.warmup_steps <= 0:
            return optimizer
        warmup = self.hparams.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
