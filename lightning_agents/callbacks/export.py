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

    Args:
        output: the folder, relative to the trainer's ``default_root_dir`` unless absolute.
        merge: fold adapters into the base weights; ``False`` writes the adapters alone.
        dtype: cast the written weights (default: as trained).
    """

    def __init__(
        self, output: str = "export", merge: bool = True, dtype: Literal["float32", "bfloat16", "float16"] | None = None
    ) -> None:
        super().__init__()
        self.output = output
        self.merge = merge
        self.dtype = dtype
        self.written: Path | None = None

    @rank_zero_only
    def _export(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from lightning_agents.export import export_hf_folder

        out = Path(self.output)
        if not out.is_absolute():
            out = Path(trainer.default_root_dir) / out
        # The data module's tokenizer carries a `data.chat_template` that replaced the model's own:
        # the folder must render prompts as training did.
        datamodule = getattr(trainer, "datamodule", None)
        tokenizer = pl_module.tokenizer
        if getattr(datamodule, "chat_template", None) is not None:
            tokenizer = datamodule.tokenizer
        self.written = export_hf_folder(
            pl_module.model,
            tokenizer,
            out,
            merge=self.merge,
            dtype=self.dtype,
            metadata={"step": trainer.global_step, "module": type(pl_module).__name__},
        )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._export(trainer, pl_module)
        trainer.strategy.barrier("export_hf")
