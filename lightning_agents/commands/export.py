"""``lightning-agents export``: a trained checkpoint as a Hugging Face folder (for transformers and vLLM)."""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["ExportCommand"]


class ExportCommand:
    """Mixin that adds the ``export`` subcommand to the trainer."""

    def export(
        self,
        model: Any = None,
        datamodule: Any = None,
        ckpt_path: str = "last.ckpt",
        output: str = "export",
        merge: bool = True,
        dtype: Literal["float32", "bfloat16", "float16"] | None = None,
        overwrite: bool = False,
    ) -> str:
        """Write the model of a ``fit`` checkpoint as a Hugging Face folder.

        The folder holds the weights (adapters merged into them unless ``merge`` is false), the
        tokenizer and the chat template used in training. It loads with
        ``AutoModelForCausalLM.from_pretrained(output)`` and serves with ``vllm serve output``.

        Args:
            model: unused (the module is rebuilt from the checkpoint's hyperparameters).
            datamodule: unused.
            ckpt_path: a checkpoint written by ``lightning-agents fit`` (or ``Trainer.fit``) of an
                ``SFTModule`` or ``RSTGModule``.
            output: the folder to write: new or empty, or an earlier export with ``overwrite``.
                Any other non-empty folder is refused.
            merge: fold LoRA adapters into the base weights; ``false`` writes the adapters alone
                (served with ``vllm serve BASE --enable-lora --lora-modules name=output``). A QLoRA
                run's adapters fold into its unquantized base, reloaded from ``model`` (no GPU needed).
            dtype: cast the weights to this dtype (default: as trained).
            overwrite: replace an earlier export in ``output``.

        Returns:
            The folder written.
        """
        from lightning_agents.export import check_export_target, export_hf_folder, load_trained_module

        check_export_target(output, overwrite)  # before the checkpoint's model is loaded
        module = load_trained_module(ckpt_path)
        out = export_hf_folder(
            module.model,
            module.tokenizer,
            output,
            merge=merge,
            dtype=dtype,
            metadata={"checkpoint": str(ckpt_path), "module": type(module).__name__},
            overwrite=overwrite,
        )
        from lightning_agents.adapters import has_adapters

        adapters = has_adapters(module.model)
        what = "merged weights" if adapters and merge else "adapters only" if adapters else "weights"
        print(f"wrote {out} ({what}, tokenizer, chat template)")
        if adapters and not merge:
            base = str(module.hparams.get("model"))
            print(f"  its base is model={base!r}; serve with the base beside it, or export with --merge true")
        return str(out)
