"""``lightning-agents convert``: save a GGUF checkpoint (or any loadable one) as an HF folder, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from lightning_agents.errors import LightningAgentsError

__all__ = ["ConvertCommand", "ConvertError", "check_output_folder"]


class ConvertError(LightningAgentsError, ValueError):
    """A convert command without its source or output."""


def check_output_folder(output: str) -> None:
    """Refuse an ``--output`` that convert's replace-the-folder write would destroy or fail on.

    The folder is replaced as a whole (``shutil.rmtree``), so only a new or empty folder or an
    earlier conversion (a Hugging Face folder: it has ``config.json``) may be named; a file there
    failed with a traceback after the whole conversion, and the current folder (or one above it)
    could be deleted with everything in it.
    """
    out = Path(output).expanduser()
    if out.is_file():
        raise ConvertError(f"output: {output} is a file; convert writes a folder")
    if not out.is_dir():
        return
    resolved, here = out.resolve(), Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise ConvertError(f"output: {output} is the current folder or one above it, which convert would replace")
    if any(out.iterdir()) and not (out / "config.json").is_file():
        raise ConvertError(
            f"output: {output} is a folder with other files in it (no config.json: not an earlier conversion); "
            "convert replaces its output as a whole, so name a new or empty folder"
        )


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
            output: the folder to write: new, empty, or an earlier conversion (a model folder, which is
                replaced; written under a temporary name first). Any other folder or a file is refused.
            dtype: weight dtype of the saved folder.

        Returns:
            The folder written.
        """
        from lightning_agents.models import check_model_path, convert_to_hf

        if not source or not output:
            raise ConvertError("convert needs --source (a .gguf file) and --output (a folder)")
        check_output_folder(output)  # before the minutes of dequantizing
        check_model_path(source, "source")
        path = convert_to_hf(source, output, dtype=dtype)
        print(f"wrote {path}")
        return path
