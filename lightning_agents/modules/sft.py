"""``SFTModule``: supervised fine-tuning of a causal LM on assistant tokens."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from lightning_agents.adapters import (
    AdapterConfig,
    apply_adapters,
    as_adapter_config,
    check_adapter_checkpoint,
    check_adapter_device,
    fit_optimizer_states,
    has_adapters,
    keep_trainable_state,
)
from lightning_agents.datamodules.conversations import IGNORE_INDEX
from lightning_agents.models import DType, QuantizationConfig, context_length, load_causal_lm, load_tokenizer
from lightning_agents.modules.callback_checks import check_callbacks
from lightning_agents.modules.precision_checks import check_adamw_weights
from lightning_agents.resume import RNGResume, loadable_hparams

__all__ = ["SFTModule"]


class SFTModule(L.LightningModule):
    """Causal-LM supervised fine-tuning with the loss on assistant tokens only.

    Batches come from :class:`~lightning_agents.datamodules.ChatDataModule` (``input_ids``,
    ``attention_mask`` or packed ``position_ids``, and ``labels`` that are -100 outside assistant
    turns). Token accuracy and perplexity are torchmetrics metrics, so they are reduced correctly
    across DDP ranks. Under several processes the loss trained is the mean over the assistant
    tokens of the whole global batch, as one process with that batch would train (each rank's
    loss is scaled by its share of the tokens); ``train/loss`` logs rank 0's own token mean.

    The causal LM is built in :meth:`configure_model` (so FSDP and DeepSpeed can shard it as it is
    created); reading ``module.model`` before ``fit`` builds it on the spot. With an ``adapter``
    only the LoRA weights train and only they are written to checkpoints; the frozen base is
    reloaded from ``model`` when a checkpoint is loaded.

    Args:
        model: model to fine-tune: local path, hub id, or ``embedded:student`` / ``embedded:teacher``.
        dtype: dtype the weights are loaded in. With ``precision: bf16-true`` Lightning casts them
            anyway; loading in bf16 directly halves peak memory while loading.
        quantization: bitsandbytes 4/8-bit weights (CUDA only; pair it with adapters).
        adapter: LoRA/QLoRA adapters (``peft``); ``None`` fine-tunes every weight.
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
        adapter: AdapterConfig | None = None,
        gradient_checkpointing: bool = False,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 0,
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__()
        if lr < 0 or warmup_steps < 0 or weight_decay < 0:
            name, value = next(
                (n, v) for n, v in (("lr", lr), ("warmup_steps", warmup_steps), ("weight_decay", weight_decay)) if v < 0
            )
            raise ValueError(f"model.{name} must be >= 0, got {value}")
        adapter = as_adapter_config(adapter)
        check_adapter_device(adapter)
        self.save_hyperparameters()
        loadable_hparams(self)  # a Path argument made every checkpoint unloadable
        # Plain values in the checkpoint: it then loads with torch.load(weights_only=True).
        self.hparams["adapter"] = None if adapter is None else asdict(adapter)
        self.adapter = adapter
        if isinstance(quantization, dict):
            quantization = QuantizationConfig(**quantization)
        if adapter is not None and adapter.qlora and quantization is None:
            quantization = QuantizationConfig(bits=4)
        self.hparams["quantization"] = None if quantization is None else asdict(quantization)
        self.quantization = quantization
        self.tokenizer = load_tokenizer(model, trust_remote_code=trust_remote_code)
        # Frozen base weights are not saved when adapters train; they reload from `model`.
        self.strict_loading = adapter is None
        self.rng_resume = RNGResume()
        self._loading_checkpoint = False
        # (this batch's labels, its predicted tokens summed over ranks), set at each batch's start
        self._global_tokens: tuple[torch.Tensor, torch.Tensor] | None = None
        # Token accuracy as a token-weighted mean: it needs no vocabulary size, so no model (or
        # config) has to be read before configure_model.
        self.val_token_accuracy = MeanMetric()
        self.val_perplexity = Perplexity(ignore_index=IGNORE_INDEX)
        self.val_loss = MeanMetric()

    def __getattr__(self, name: str) -> Any:
        # `module.model` before the Trainer calls configure_model (tests, notebooks, callbacks that
        # inspect the module) builds the model then; configure_model is idempotent afterwards.
        if name == "model" and "_modules" in self.__dict__ and "model" not in self._modules:
            self.configure_model()
        return super().__getattr__(name)

    def configure_model(self) -> None:
        """Load the causal LM (and wrap it with adapters); does nothing when it already exists."""
        if "model" in self._modules:
            return
        hp = self.hparams
        model = load_causal_lm(
            hp.model,
            dtype=hp.dtype,
            quantization=self.quantization,
            gradient_checkpointing=hp.gradient_checkpointing,
            trust_remote_code=hp.trust_remote_code,
        )
        # getattr: Gemma 3's multimodal config (transformers 5) has no top-level pad_token_id at all.
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = self.tokenizer.pad_token_id
        if self.adapter is not None:
            model = apply_adapters(model, self.adapter, gradient_checkpointing=hp.gradient_checkpointing)
        # from_pretrained returns the model in eval mode; Lightning keeps module modes as it finds
        # them, so without this dropout would silently stay off during training.
        model.train()
        self.model = model

    def load_state_dict(self, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        """Load weights, building the model first when ``state_dict`` holds some of it.

        The model exists only after :meth:`configure_model`. ``ddp_spawn`` trains in worker
        processes and then loads their weights into the main process's module non-strictly; the
        model's keys, finding nothing to go to, were dropped without a word, and ``module.model``
        there built the untrained model.
        """
        if "model" not in self._modules and any(k.startswith("model.") for k in state_dict):
            self.configure_model()
        if self._loading_checkpoint and "model" in self._modules and has_adapters(self.model):
            # A checkpoint loads non-strictly (the frozen base is not saved): adapters of other
            # settings than the checkpoint's would load nothing, without a word. Only a checkpoint
            # (marked by on_load_checkpoint): a user's own partial non-strict load is theirs.
            check_adapter_checkpoint(self.model, state_dict, "model.")
        self._loading_checkpoint = False
        return super().load_state_dict(state_dict, *args, **kwargs)

    def forward(self, batch: dict[str, torch.Tensor]):
        """Run the model on a batch; returns the transformers output (loss over assistant tokens)."""
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "labels")}
        return self.model(**inputs, use_cache=False)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        out = self(batch)
        loss = out.loss
        tokens = (batch["labels"] != IGNORE_INDEX).sum()
        # Logged as before: this rank's mean over its assistant tokens.
        self.log("train/loss", loss, prog_bar=True, batch_size=int(batch["input_ids"].shape[0]))
        self.log("train/assistant_tokens", tokens.float(), reduce_fx="sum", batch_size=1)
        return self._global_token_mean(loss, batch["labels"], out.logits)

    def _global_token_mean(self, loss: torch.Tensor, labels: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Turn this rank's token-mean ``loss`` into its share of the mean over every rank's tokens.

        DDP averages gradients over ranks, so the rank means alone would weight a token on a rank
        with few assistant tokens more than one on a rank with many: two processes with batch B
        would not train as one with batch 2B. Scaled by ``world * local / global`` tokens, the
        ranks' average is the token mean of the whole global batch. The global count comes from
        :meth:`on_train_batch_start` (one all-reduce per batch on every rank; not here, where a
        strategy may call this a different number of times per rank, as MUZO's query split does).
        """
        pending = self._global_tokens
        if pending is None or pending[0] is not labels:
            return loss  # one process, or training_step called outside a fit
        local = _predicted_tokens(labels)
        if int(local) == 0:
            # No assistant token on this rank (its mean is NaN): zero gradients through the
            # forward's own output, so DDP's all-reduce runs here as on the other ranks; a zero
            # built from the parameters themselves hung FSDP (its gradients are not the sharded
            # forward's) or crashed it with a gradient of the unsharded size.
            return logits.sum() * 0.0
        return loss * (local.to(loss.dtype) * self.trainer.world_size / pending[1].to(loss.dtype))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self(batch)
        # Next-token prediction: logits at t predict the label at t + 1.
        logits = out.logits[:, :-1].float()
        target = batch["labels"][:, 1:]
        self.val_loss.update(out.loss.detach(), weight=(target != IGNORE_INDEX).sum())
        counted = target != IGNORE_INDEX
        correct = (logits.argmax(-1) == target) & counted
        self.val_token_accuracy.update(correct.sum() / counted.sum().clamp(min=1), weight=counted.sum())
        self.val_perplexity.update(logits, target)
        self.log("val/loss", self.val_loss, prog_bar=True, batch_size=int(batch["input_ids"].shape[0]))
        self.log("val/token_accuracy", self.val_token_accuracy, batch_size=int(batch["input_ids"].shape[0]))
        self.log("val/perplexity", self.val_perplexity, batch_size=int(batch["input_ids"].shape[0]))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self(batch)
        self.log("test/loss", out.loss, batch_size=int(batch["input_ids"].shape[0]), sync_dist=True)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.rng_resume.restore_pending(self._trainer)
        self._global_tokens = None
        if self._trainer is not None and self.trainer.world_size > 1:
            labels = batch["labels"]
            total = self.trainer.strategy.reduce(_predicted_tokens(labels).double(), reduce_op="sum")
            self._global_tokens = (labels, total)

    def on_fit_start(self) -> None:
        self._warn_beyond_context()

    def _warn_beyond_context(self) -> None:
        """Warn once when ``data.max_length`` lets training rows run past the model's context.

        A warning, not a refusal: ``data.max_length`` is only a cap (a generous one is harmless while
        the conversations are short), and SFT has no ``context_length`` override as RSTG has, so a
        model whose config understates its context, or a run that extends a RoPE model's context on
        purpose, would have no way round a refusal. Rows past the context train positions the model
        never learned (RoPE models run on without a word; learned position embeddings fail on them).
        """
        data = self.trainer.datamodule if self._trainer is not None else None
        max_length = getattr(data, "max_length", None)
        context = context_length(getattr(self.model, "config", None))
        if not isinstance(max_length, int) or context is None or max_length <= context[0]:
            return
        limit, how = context
        rows = (getattr(data, "datasets", None) or {}).get("fit")
        over = _rows_longer_than(rows, limit) if rows is not None else None
        if over == 0:
            return  # the cap is above the context, but no conversation reaches it
        counted = "" if over is None else f": {over[0]} of {over[1]} training rows are longer"
        rank_zero_warn(
            f"data.max_length={max_length} is longer than the context of model.model {self.hparams.model!r} "
            f"({limit} tokens, {how}){counted}; tokens past {limit} train positions the model never learned. "
            f"Set data.max_length to at most {limit}.",
            category=UserWarning,
        )

    def on_train_start(self) -> None:
        check_callbacks(self.trainer, "SFTModule")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.rng_resume.save(checkpoint, self.global_rank, self._trainer)
        if has_adapters(self.model):
            keep_trainable_state(self.model, checkpoint["state_dict"], prefix="model.")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.rng_resume.load(checkpoint, self.global_rank)
        self._loading_checkpoint = True  # Lightning loads its state_dict next (load_state_dict)
        if "model" in self._modules and has_adapters(self.model):
            # A run from before all-linear left a multimodal model's towers out: their untrained
            # adapters leave its optimizer state as they leave its weights (check_adapter_checkpoint).
            fit_optimizer_states(self.model, checkpoint, "model.")

    def configure_optimizers(self) -> Any:
        """AdamW over trainable parameters with optional linear warmup."""
        params = [p for p in self.parameters() if p.requires_grad]
        check_adamw_weights(params, self._trainer, "SFTModule")
        optimizer = torch.optim.AdamW(
            params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay, betas=tuple(self.hparams.betas)
        )
        if self.hparams.warmup_steps <= 0:
            return optimizer
        warmup = self.hparams.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _rows_longer_than(rows: Any, limit: int) -> tuple[int, int] | int:
    """``(rows whose positions reach past limit, rows)``, or 0 when none does. A packed row's
    positions restart with each conversation, so its ``position_ids`` are what counts."""
    if not len(rows):
        return 0
    if hasattr(rows, "data") and "position_ids" not in rows.column_names:  # a datasets.Dataset, read in Arrow
        import pyarrow.compute as pc

        lengths = pc.list_value_length(rows.data.table.column("input_ids")).to_numpy(zero_copy_only=False)
        over = int((lengths > limit).sum())
    else:
        over = sum(
            1
            for row in rows
            if (max(row["position_ids"]) + 1 if row.get("position_ids") else len(row["input_ids"])) > limit
        )
    return (over, len(rows)) if over else 0


def _predicted_tokens(labels: torch.Tensor) -> torch.Tensor:
    """Tokens the causal-LM loss averages over: labels after the first position that are not ignored."""
    return (labels[:, 1:] != IGNORE_INDEX).sum()
