"""``ExportHF``: write the trained model as a Hugging Face folder when ``fit`` ends."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

__all__ = ["ExportHF"]


class ExportHF(L.Callback):
    """At the end of ``fit``, export the module's ``model`` and ``tokenizer`` as a Hugging Face folder.

    Same folder as ``lightning-agents export`` on the last checkpoint: weights (LoRA merged unless
    ``merge`` is false), tokenizer, chat template. Rank 0 writes it. Under FSDP / DeepSpeed the
    weights are sharded at this point: export from the checkpoint with ``lightning-agents export``.
    A QLoRA run (or LoRA on an 8-bit base) is exported as that command exports it: the base is
    reloaded unquantized from ``model`` on the CPU and the trained adapters are merged into it
    (:func:`~lightning_agents.export.unquantized_module`), not rounded into the 4-bit weights;
    with ``merge=False`` its adapters are written from the live model (no base is reloaded).

    Args:
        output: the folder, relative to the trainer's ``default_root_dir`` unless absolute.
        merge: fold adapters into the base weights; ``False`` writes the adapters alone.
        dtype: cast the written weights (default: as trained); with ``merge=False``, the adapters.
        overwrite: replace an earlier export in ``output`` (a run of the same config again). A
            non-empty folder that is not an export is refused when ``fit`` starts, before training.
    """

    def __init__(
        self,
        output: str = "export",
        merge: bool = True,
        dtype: Literal["float32", "bfloat16", "float16"] | None = None,
        overwrite: bool = True,
    ) -> None:
        super().__init__()
        self.output = output
        self.merge = merge
        self.dtype = dtype
        self.overwrite = overwrite
        self.written: Path | None = None

    def _folder(self, trainer: L.Trainer) -> Path:
        out = Path(self.output)
        return out if out.is_absolute() else Path(trainer.default_root_dir) / out

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from lightning_agents.export import check_export_target

        # Hours of training must not end in a refusal that was known at the start. Every rank
        # checks (a read-only look), so that none is left waiting for one that stopped.
        check_export_target(self._folder(trainer), self.overwrite)
        if self.merge and _quantized_adapters(pl_module) and not _rebuildable(pl_module):
            from lightning_agents.export import ExportError

            raise ExportError(
                f"ExportHF: the model of {type(pl_module).__name__} is quantized (bitsandbytes) with adapters, and "
                "only an SFTModule can be rebuilt on its unquantized base to merge them (merging into the quantized "
                "weights rounds the update away); remove ExportHF and export the last checkpoint with "
                "`lightning-agents export`"
            )

    @rank_zero_only
    def _export(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from lightning_agents.export import export_hf_folder, unquantized_module

        out = self._folder(trainer)
        model = pl_module.model
        if self.merge and _quantized_adapters(pl_module):
            # Only a merge needs the unquantized base; the adapters alone are the live ones.
            model = unquantized_module(pl_module).model
        # The data module's tokenizer carries a `data.chat_template` that replaced the model's own:
        # the folder must render prompts as training did.
        datamodule = getattr(trainer, "datamodule", None)
        tokenizer = pl_module.tokenizer
        if getattr(datamodule, "chat_template", None) is not None:
            tokenizer = datamodule.tokenizer
        self.written = export_hf_folder(
            model,
            tokenizer,
            out,
            merge=self.merge,
            dtype=self.dtype,
            metadata={"step": trainer.global_step, "module": type(pl_module).__name__},
            overwrite=self.overwrite,
        )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._export(trainer, pl_module)
        trainer.strategy.barrier("export_hf")


def _quantized_adapters(pl_module: L.LightningModule) -> bool:
    """Whether the module's model carries adapters on a bitsandbytes-quantized base."""
    from lightning_agents.adapters import _is_quantized, has_adapters

    model = getattr(pl_module, "model", None)
    return model is not None and has_adapters(model) and _is_quantized(model)


def _rebuildable(pl_module: L.LightningModule) -> bool:
    """Whether ``lightning-agents export`` could rebuild the module from its hyperparameters
    (the only modules with a ``quantization`` setting are SFTModule and its subclasses)."""
    from lightning_agents.modules.sft import SFTModule

    return isinstance(pl_module, SFTModule)
