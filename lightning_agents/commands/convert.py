"""``lightning-agents convert``: save a GGUF checkpoint (or any loadable one) as an HF folder, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from lightning_agents.errors import LightningAgentsError

__all__ = ["ConvertCommand", "ConvertError", "check_output_folder", "write_marker"]


class ConvertError(LightningAgentsError, ValueError):
    """A convert command without its source or output."""


def check_output_folder(output: str, source: str = "") -> None:
    """Refuse an ``--output`` that convert's replace-the-folder write would destroy or fail on.

    The folder is replaced as a whole (``shutil.rmtree``), so only a new or empty folder, or one
    that convert or export wrote (it holds their marker ``lightning_agents_export.json``), may be
    named. A folder with ``config.json`` alone is no proof: the source's own folder, or a model
    folder with the user's notes and GGUF files beside the weights, has one too. The source's
    folder, any folder that holds the source and any folder inside it are refused even when marked;
    for a ``.gguf`` source the source is the file, so a new folder beside it is allowed.
    """
    # Convert marks its folders as export does: both write a whole model folder the other may replace.
    from lightning_agents.export import EXPORT_MARKER, ExportError, check_export_target

    out = Path(output).expanduser()
    if out.is_file():
        raise ConvertError(f"output: {output} is a file; convert writes a folder")
    _refuse_source_folder(out, output, source)
    if not out.is_dir():
        return
    resolved, here = out.resolve(), Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise ConvertError(f"output: {output} is the current folder or one above it, which convert would replace")
    try:
        check_export_target(out, overwrite=True)
        return  # empty, an earlier conversion or export, or an interrupted in-place export
    except ExportError:
        pass  # another folder: said in convert's own words below
    entries = sorted(p.name for p in out.iterdir())
    if (out / "config.json").is_file():
        raise ConvertError(
            f"output: {output} is a model folder that convert did not mark as its own (no {EXPORT_MARKER}; "
            "conversions before this version wrote none): if it is an old conversion that holds nothing "
            f"else of yours, delete it by hand (rm -r {output}) and convert again, or name a new or empty folder"
        )
    shown = ", ".join(entries[:5]) + (f", ... ({len(entries)} entries)" if len(entries) > 5 else "")
    raise ConvertError(
        f"output: {output} is a folder with other files in it ({shown}), not one convert wrote; "
        "convert replaces its output as a whole, so name a new or empty folder"
    )


def _refuse_source_folder(out: Path, output: str, source: str) -> None:
    """Refuse an output that is the source's folder, holds the source, or lies inside a source
    folder: replacing it would delete the source and the user's files beside it.

    A ``.gguf`` source is the file: its folder and those above it hold it and are refused, but a
    new folder beside it (``--source model.gguf --output folder``) deletes nothing and is allowed.
    """
    from lightning_agents.models import split_gguf

    folder, gguf = split_gguf(source) if source else ("", None)
    if not folder:
        return
    source_path = Path(folder).expanduser() / gguf if gguf else Path(folder).expanduser()
    if not source_path.exists():
        return  # a hub id: nothing local to protect
    src, dst = source_path.resolve(), out.resolve()
    if dst == src:
        how = "is the source's folder"
    elif dst in src.parents:
        how = "holds the source"
    elif src in dst.parents:
        how = "lies inside the source's folder"
    else:
        return
    raise ConvertError(
        f"output: {output} {how} ({source}); convert replaces its output as a whole, which would delete "
        "the source and the files beside it: name a new folder outside it"
    )


def write_marker(folder: str | Path, source: str, dtype: str) -> None:
    """Mark ``folder`` as convert's own (export's marker), so the next convert may replace it."""
    from lightning_agents.export import EXPORT_MARKER

    info = {"converted_from": str(source), "dtype": dtype}
    (Path(folder) / EXPORT_MARKER).write_text(json.dumps(info, indent=2) + "\n")


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
            output: the folder to write: new, empty, or one an earlier convert or export wrote (it
                holds ``lightning_agents_export.json``; replaced, written under a temporary name
                first). Any other folder, a file, or a folder that is, holds or lies inside the
                source is refused (a ``.gguf`` source is the file: a new folder beside it is allowed);
                a conversion by a version before the marker must be deleted by hand.
            dtype: weight dtype of the saved folder.

        Returns:
            The folder written.
        """
        from lightning_agents.models import check_model_path, convert_to_hf

        if not source or not output:
            raise ConvertError("convert needs --source (a .gguf file) and --output (a folder)")
        check_output_folder(output, source)  # before the minutes of dequantizing
        check_model_path(source, "source")
        # The marker goes into the complete folder before it is renamed into place, so a kill never
        # leaves a whole but unmarked conversion (the next one would refuse it).
        path = convert_to_hf(source, output, dtype=dtype, before_rename=lambda tmp: write_marker(tmp, source, dtype))
        print(f"wrote {path}")
        return path
