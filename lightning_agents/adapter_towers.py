"""Which layers of a multimodal model ``adapter.target_modules: all-linear`` leaves frozen.

peft's ``all-linear`` leaves out only the output head, so on a model with a vision or audio tower it
adapts the towers and projectors too, which text post-training never runs. These functions find the
language model (``language_model`` where it holds the decoder, else ``get_decoder()``) and the
towers built from ``vision_config``/``audio_config`` (also those inside the decoder, as on
Phi-4-multimodal), for :func:`~lightning_agents.adapters.apply_adapters` to exclude and for the
checkpoint filter to recognise. No Lightning and no peft here.
"""

from __future__ import annotations

import logging
import re

import torch

log = logging.getLogger("lightning_agents.adapters")

__all__ = ["left_out_of_all_linear", "linears_outside_language_model", "warn_tower_like_layers_kept"]


def linears_outside_language_model(model) -> list[str]:
    """The linear layers of a multimodal model that ``all-linear`` leaves frozen (:func:`left_out_of_all_linear`)."""
    return [name for name, _ in left_out_of_all_linear(model)]


def left_out_of_all_linear(model) -> list[tuple[str, str]]:
    """``(name, part)`` for each linear layer of a multimodal model's vision or audio towers and
    projectors, which peft's ``all-linear`` adapts as well (it leaves out only the output head).

    Empty for a model whose configuration names no ``vision_config`` or ``audio_config``. Two rules:

    - everything outside the language model: its ``language_model`` (InstructBLIP's whole T5, whose
      ``get_decoder()`` is the T5 decoder alone) where that holds ``get_decoder()``, else
      ``get_decoder()`` (Gemma 3/3n/4's, Qwen2-VL's, Llava's and Mllama's ``model.language_model``);
    - inside it, the modules built from ``config.vision_config`` / ``config.audio_config`` (their
      ``config`` is that object, or of its class), widened to the largest module around them that
      holds no block list (``ModuleList``) of the language model nor its embeddings: Phi-4-multimodal
      keeps its SigLIP and conformer towers, and their projections, in ``model.embed_tokens_extend``,
      and GIT its image encoder in ``git``, both inside ``get_decoder()``.

    ``part``, for the log line, names the module each layer was left out with.
    """
    from transformers.pytorch_utils import Conv1D

    config = getattr(model, "config", None)
    towers = [
        c for c in (getattr(config, "vision_config", None), getattr(config, "audio_config", None)) if c is not None
    ]
    if not towers:
        return []
    language = _language_model(model)
    if language is None:
        return []
    names = {}
    for name, module in model.named_modules():
        names.setdefault(id(module), name)
    prefix = names.get(id(language))
    if prefix is None:
        return []
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linears = [
        name
        for name, module in model.named_modules()
        if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not head and ".lora_" not in name
    ]
    left_out = [(name, _tower(name)) for name in linears if prefix and not _under(name, prefix)]
    for part in _towers_inside(model, towers, prefix):
        label = part[len(prefix) + 1 :] if prefix else part
        left_out += [(name, label) for name in linears if _under(name, part)]
    return left_out


def _language_model(model):
    """The language model of a multimodal ``model``: its ``language_model`` (or its inner
    ``model``'s) where that holds ``get_decoder()``, else ``get_decoder()``; ``None`` without either."""
    try:
        decoder = model.get_decoder()
    except (AttributeError, NotImplementedError):
        decoder = None
    for owner in (model, getattr(model, "model", None)):
        try:
            language = getattr(owner, "language_model", None) if owner is not None else None
        except Exception:  # noqa: BLE001 - a property of a half-built model
            language = None
        if isinstance(language, torch.nn.Module) and (
            decoder is None or any(module is decoder for module in language.modules())
        ):
            return language
    return decoder if isinstance(decoder, torch.nn.Module) else None


def _under(name: str, root: str) -> bool:
    return not root or name == root or name.startswith(root + ".")


def _towers_inside(model, towers: list, prefix: str) -> list[str]:
    """The parts of the language model (named under ``prefix``) that hold a vision or audio tower.

    A tower is a module whose ``config`` is one of ``towers`` (or of its class, when no text config
    shares it); it is widened to the outermost module around it, below the language model, that
    holds no ``ModuleList``/``ModuleDict`` outside the towers (the language model's blocks) and not
    the input embeddings, so a projector beside the tower in one wrapper goes with it.
    """
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    classes = {type(c) for c in towers} - {type(text)}
    modules = list(model.named_modules())
    found: list[str] = []
    for name, module in modules:
        if name == prefix or not _under(name, prefix) or any(_under(name, root) for root in found):
            continue
        own = getattr(module, "config", None)
        if own is not None and (any(own is c for c in towers) or type(own) in classes):
            found.append(name)
    if not found:
        return []
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None

    def holds_language_parts(root: str) -> bool:
        return any(
            _under(name, root)
            and (
                module is embed
                or (
                    isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict))
                    and not any(_under(name, tower) for tower in found)
                )
            )
            for name, module in modules
        )

    parts: list[str] = []
    depth = len(prefix.split(".")) if prefix else 0
    for tower in found:
        steps = tower.split(".")
        # From the outermost candidate down: the first that holds none of the language model's parts.
        part = next(
            (
                ".".join(steps[:k])
                for k in range(depth + 1, len(steps))
                if not holds_language_parts(".".join(steps[:k]))
            ),
            tower,
        )
        if not any(_under(part, other) for other in parts):
            parts = [other for other in parts if not _under(other, part)] + [part]
    return parts


# Path components that name a vision or audio part (GIT's visual_projection, Fuyu's vision_embed_tokens).
_TOWER_LIKE = re.compile(r"(?:^|\.)(?:vision|visual|image|img|audio|speech|multi_modal|mm_)[^.]*(?:\.|$)")


def warn_tower_like_layers_kept(model, left_out: set[str]) -> None:
    """Name the linear layers of a multimodal model that ``all-linear`` still adapts although their
    path names a vision or audio part: nothing in the config marks them (GIT's one-layer
    ``visual_projection``), so they are not left out, but text training may never reach them."""
    from transformers.pytorch_utils import Conv1D

    config = getattr(model, "config", None)
    if getattr(config, "vision_config", None) is None and getattr(config, "audio_config", None) is None:
        return
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    kept = [
        name
        for name, module in model.named_modules()
        if isinstance(module, (torch.nn.Linear, Conv1D))
        and module is not head
        and name not in left_out
        and _TOWER_LIKE.search(name)
    ]
    if kept:
        log.warning(
            "adapter.target_modules=all-linear still adapts %d linear layer(s) of %s whose names suggest a vision or "
            "audio part that its config does not mark as one: %s. Text training may never reach them (DDP without "
            "find_unused_parameters stops on such parameters); list the layers to adapt in adapter.target_modules to "
            "leave them out",
            len(kept),
            type(model).__name__,
            ", ".join(kept[:6]) + (", ..." if len(kept) > 6 else ""),
        )


def _tower(name: str) -> str:
    """The first path component that is not the model's inner ``model.`` (``vision_tower``, ``visual``)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "model" and len(parts) > 1 else parts[0]
