"""``lightning-agents convert``: save a GGUF checkpoint (or any loadable one) as an HF folder, once."""

from __future__ import annotations

from typing import Any, Literal

from lightning_agents.errors import LightningAgentsError

__all__ = ["ConvertCommand", "ConvertError"]


class ConvertError(LightningAgentsError, ValueError):
    """A convert command without its source or output."""


class ConvertCommand:
    """Mixin that adds the ``convert`` subcommand to the trainer."""

    def convert(
        self,
        model: Any = None,
        datamodule: Any = None,
        source: str = "",
        output: str = "",
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
    ) -> str:
        """Dequantize a GGUF file into an ordinary Hugging Face folder (weights, tokenizer, chat template).

        Loading a GGUF file dequantizes every tensor and rebuilds the tokenizer from the file each
        time; after one conversion, later runs name the folder and load it like any checkpoint.

        Args:
            model: unused.
            datamodule: unused.
            source: the checkpoint to convert: a ``.gguf`` file, ``folder::file.gguf``, or any
                model name :mod:`lightning_agents.models` loads.
            output: the folder to write (replaced if it exists; written under a temporary name first).
            dtype: weight dtype of the saved folder.

        Returns:
            The folder written.
        """
        from lightning_agents.models import check_model_path, convert_to_hf

        if not source or not output:
            raise ConvertError("convert needs --source (a .gguf file) and --output (a folder)")
        check_model_path(source, "source")
        path = convert_to_hf(source, output, dtype=dtype)
        print(f"wrote {path}")
        return path
