"""Which layers of a multimodal model ``adapter.target_modules: all-linear`` leaves frozen.

peft's ``all-linear`` leaves out only the output head, so on a model with a vision or audio tower it
adapts the towers and projectors too, which text post-training never runs. These functions find the
language model (``language_model`` where it holds the decoder, an encoder-decoder's encoder and
decoder, else ``get_decoder()``) and the towers built from ``vision_config``/``audio_config`` (also
those inside the decoder, as on Phi-4-multimodal, with the projections beside them, as GIT's, or
inside the encoder, as T5Gemma 2's), Fuyu's patch projection, and the decoder blocks a text-only
forward skips (Mllama's cross-attention layers), for
:func:`~lightning_agents.adapters.apply_adapters` to exclude and for the checkpoint filter to
recognise. No Lightning and no peft here.
"""

from __future__ import annotations

import logging
import re

import torch

log = logging.getLogger("lightning_agents.adapters")

__all__ = [
    "left_out_of_all_linear",
    "linears_outside_language_model",
    "skipped_without_images",
    "warn_tower_like_layers_kept",
]


def linears_outside_language_model(model) -> list[str]:
    """The linear layers of a multimodal model that ``all-linear`` leaves frozen (:func:`left_out_of_all_linear`)."""
    return [name for name, _ in left_out_of_all_linear(model)]


def left_out_of_all_linear(model) -> list[tuple[str, str]]:
    """``(name, part)`` for each linear layer of a multimodal model's vision or audio towers and
    projectors, which peft's ``all-linear`` adapts as well (it leaves out only the output head).

    Empty for a text-only model (:func:`_is_multimodal`). Three rules:

    - everything outside the language model: its ``language_model`` (InstructBLIP's whole T5, whose
      ``get_decoder()`` is the T5 decoder alone) where that holds ``get_decoder()``, else for an
      encoder-decoder the module holding ``get_encoder()`` and ``get_decoder()`` (T5Gemma 2's
      ``model``), else ``get_decoder()`` (Gemma 3/3n/4's, Qwen2-VL's, Llava's and Mllama's
      ``model.language_model``);
    - inside it, the modules built from ``config.vision_config`` / ``config.audio_config`` or those
      of a sub-config (T5Gemma 2's ``config.encoder.vision_config``, its SigLIP tower in
      ``model.encoder.vision_tower``): their ``config`` is that object, or of its class, widened to
      the largest module around them that holds no block list (``ModuleList``) of the language
      model nor its embeddings: Phi-4-multimodal keeps its SigLIP and conformer towers, and their
      projections, in ``model.embed_tokens_extend``, and GIT its image encoder in ``git``, both
      inside ``get_decoder()``;
    - beside such a tower (a child of the same parent), each module that holds a linear layer but
      none of the language model's own parts (a block list, a decoder block, the embeddings or the
      head): it reads the tower's output only (GIT's ``visual_projection``, Idefics'
      ``perceiver_resampler``).

    A model without a tower config whose ``language_model`` is built from a text config of its own
    (Fuyu, whose patch projection ``vision_embed_tokens`` sits beside it) is multimodal too: the first
    rule applies. ``part``, for the log line, names the module each layer was left out with.
    Mllama's cross-attention layers are :func:`skipped_without_images`.
    """
    from transformers.pytorch_utils import Conv1D

    config = getattr(model, "config", None)
    towers = _tower_configs(config)
    if not _is_multimodal(model):
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
    for part in _towers_inside(model, towers, prefix) if towers else []:
        label = part[len(prefix) + 1 :] if prefix else part
        left_out += [(name, label) for name in linears if _under(name, part)]
    return left_out


def _tower_configs(config, depth: int = 0) -> list:
    """The vision and audio configs that ``config`` names, also in its sub-configs: T5Gemma 2 keeps its
    SigLIP config in ``config.encoder.vision_config``, and its tower in ``model.encoder.vision_tower``
    (modeling_t5gemma2.py, ``T5Gemma2Encoder.__init__``)."""
    towers = [
        c for c in (getattr(config, "vision_config", None), getattr(config, "audio_config", None)) if c is not None
    ]
    if depth < 2:  # an encoder's or a thinker's config; deeper nesting is not known to hold towers
        for key in getattr(type(config), "sub_configs", None) or {}:
            sub = getattr(config, key, None) if key not in ("vision_config", "audio_config") else None
            if sub is not None and sub is not config and hasattr(sub, "to_dict"):
                towers += [c for c in _tower_configs(sub, depth + 1) if not any(c is t for t in towers)]
    return towers


def _is_multimodal(model) -> bool:
    """Whether ``model`` has vision or audio parts: its config names a ``vision_config`` or
    ``audio_config``, or it keeps its language model as ``language_model`` built from a text config
    of the config's own (Fuyu: a ``text_config`` and no vision config, its patch projection beside
    ``language_model``). A text config alone is no mark: Gemma 4's assistant drafter has one, and its
    ``pre_projection``/``post_projection`` beside ``model`` carry text hidden states."""
    config = getattr(model, "config", None)
    if _tower_configs(config):
        return True
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else None
    except ValueError:  # several text configs (an encoder's and a decoder's): not one language model
        return False
    return text is not None and text is not config and _named_language_model(model, _decoder(model)) is not None


def _decoder(model):
    try:
        return model.get_decoder()
    except (AttributeError, NotImplementedError):
        return None


def _language_model(model):
    """The language model of a multimodal ``model``: its ``language_model`` (or its inner
    ``model``'s) where that holds ``get_decoder()``; for an encoder-decoder (``is_encoder_decoder``)
    the innermost module that holds ``get_encoder()`` and ``get_decoder()`` (T5Gemma 2's ``model``:
    its encoder reads the prompt); else ``get_decoder()``; ``None`` without either."""
    decoder = _decoder(model)
    language = _named_language_model(model, decoder)
    if language is not None:
        return language
    if not isinstance(decoder, torch.nn.Module):
        return None
    both = _holding_encoder_and_decoder(model, decoder)
    return both if both is not None else decoder


def _holding_encoder_and_decoder(model, decoder):
    """The innermost module of an encoder-decoder ``model`` that holds its ``get_encoder()`` and
    ``decoder`` (below the head; ``model`` itself where they are its children, as on the headless
    ``T5Gemma2Model``); ``None`` for a decoder-only model, whose
    ``get_encoder()`` is the model itself or a tower (``vision_tower``, ...)."""
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return None
    try:
        encoder = model.get_encoder()
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if not isinstance(encoder, torch.nn.Module) or encoder is model or encoder is decoder:
        return None
    # A text encoder holds the input embeddings; a vision encoder-decoder's encoder is its tower
    # (Pix2Struct's, PP-FormulaNet's), outside the language model.
    embed = _input_embeddings(model)
    if embed is None or not any(module is embed for module in encoder.modules()):
        return None
    names = {id(module): name for name, module in model.named_modules()}
    ends = [names.get(id(encoder)), names.get(id(decoder))]
    if not all(ends):
        return None
    common = []
    for a, b in zip(*(end.split(".") for end in ends), strict=False):
        if a != b:
            break
        common.append(a)
    # No common prefix (T5Gemma2Model without a head: `encoder`, `decoder`): the model itself holds both.
    return model.get_submodule(".".join(common))


def _input_embeddings(model):
    """``model.get_input_embeddings()``, or ``None`` where transformers cannot find them (PP-FormulaNet)."""
    try:
        return model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    except (AttributeError, NotImplementedError):
        return None


def _named_language_model(model, decoder):
    """``model.language_model`` (or ``model.model.language_model``) where it holds ``decoder``."""
    for owner in (model, getattr(model, "model", None)):
        try:
            language = getattr(owner, "language_model", None) if owner is not None else None
        except Exception:  # noqa: BLE001 - a property of a half-built model
            language = None
        if isinstance(language, torch.nn.Module) and (
            decoder is None or any(module is decoder for module in language.modules())
        ):
            return language
    return None


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
    embed = _input_embeddings(model)

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
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return parts + _beside_towers(modules, parts, prefix, (embed, head))


def _beside_towers(modules, parts: list[str], prefix: str, ends: tuple) -> list[str]:
    """The modules beside the tower ``parts`` (children of the same parent, inside the language
    model) that hold a linear layer but none of the language model's parts: not a block list, no
    decoder block (transformers' ``GradientCheckpointingLayer``), not the embeddings or head (``ends``).

    The decoder runs its embeddings and blocks on the text; a module built beside the tower that
    holds none of them reads the tower's output only (a resampler's own blocks are plain modules):
    GIT's ``visual_projection`` (modeling_git.py, ``GitModel.forward``:
    ``self.visual_projection(visual_features)`` of the image encoder) and Idefics'
    ``perceiver_resampler`` (modeling_idefics.py, ``IdeficsModel.forward``: it resamples the vision
    model's states). Idefics' ``gated_cross_attn_layers`` are a block list and stay: their queries
    and MLP read the text.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.pytorch_utils import Conv1D

    beside: list[str] = []
    for part in parts:
        parent = part.rpartition(".")[0]
        if not _under(parent, prefix):
            continue
        for name, module in modules:
            if name.rpartition(".")[0] != parent or name == part or not name or any(_under(name, p) for p in parts):
                continue
            if isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)) or name in beside:
                continue
            if not any(isinstance(m, (torch.nn.Linear, Conv1D)) for m in module.modules()):
                continue
            if not any(
                any(m is end for end in ends if end is not None) or isinstance(m, GradientCheckpointingLayer)
                for m in module.modules()
            ):
                beside.append(name)
    return beside


def skipped_without_images(model) -> list[tuple[str, str]]:
    """``(name, block)`` for each linear layer of the decoder blocks that a text-only forward skips:
    the blocks that the text config lists in ``cross_attention_layers`` (Mllama, Llama 3.2 Vision).

    transformers' ``MllamaTextModel.forward`` (modeling_mllama.py, transformers 5.25) runs no
    ``MllamaCrossAttentionDecoderLayer`` without image states: ``if is_cross_attention_layer and
    cross_attention_states is None and is_cross_attention_cache_empty: continue``. The whole block is
    skipped, its MLP too, so on text its adapters get no gradient (20% of Llama-3.2-11B-Vision's
    rank-16 LoRA). lightning-agents passes no images, and ``AutoModelForCausalLM`` loads such a
    checkpoint as ``MllamaForCausalLM``, which has no vision model at all. Empty for other models.
    ``block`` is the block's path, for the warning.
    """
    from transformers.pytorch_utils import Conv1D

    config = getattr(model, "config", None)
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:
        text = None
    indices = getattr(text, "cross_attention_layers", None) or getattr(config, "cross_attention_layers", None)
    decoder = _decoder(model)
    if not indices or not isinstance(decoder, torch.nn.Module):
        return []
    # The decoder's block list: the first one of num_hidden_layers blocks (MllamaForCausalLM's
    # get_decoder() is the model itself, its blocks in model.layers).
    count = getattr(text, "num_hidden_layers", None)
    blocks = next(
        (m for m in decoder.modules() if isinstance(m, torch.nn.ModuleList) and count and len(m) == count),
        None,
    )
    if blocks is None:
        return []
    names = {}
    for name, module in model.named_modules():
        names.setdefault(id(module), name)
    skipped: list[tuple[str, str]] = []
    for index in sorted({i for i in indices if isinstance(i, int) and 0 <= i < len(blocks)}):
        block = names.get(id(blocks[index]))
        if block is None:
            continue
        skipped += [
            (f"{block}.{name}" if name else block, block)
            for name, module in blocks[index].named_modules()
            if isinstance(module, (torch.nn.Linear, Conv1D)) and ".lora_" not in name
        ]
    return skipped


# Path components that name a vision or audio part (the warning's net for a layer no rule above finds).
_TOWER_LIKE = re.compile(r"(?:^|\.)(?:vision|visual|image|img|audio|speech|multi_modal|mm_)[^.]*(?:\.|$)")


def warn_tower_like_layers_kept(model, left_out: set[str]) -> None:
    """Name the linear layers of a multimodal model that ``all-linear`` still adapts although their
    path names a vision or audio part: no rule of :func:`left_out_of_all_linear` finds them (a
    projection beside a tower config marks no tower, as GIT's ``visual_projection`` did before it was
    left out with its image encoder), but text training may never reach them."""
    from transformers.pytorch_utils import Conv1D

    if not _is_multimodal(model):
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
