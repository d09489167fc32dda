"""LoRA and QLoRA adapters through ``peft``, and the checkpoint filter that keeps only what trains.

The modules (:class:`~lightning_agents.SFTModule`, :class:`~lightning_agents.RSTGModule`) take an
:class:`AdapterConfig`; :func:`apply_adapters` wraps a loaded causal LM in a ``peft`` model whose
only trainable parameters are the adapters. No Lightning here: the modules call these functions
from ``configure_model`` and their checkpoint hooks.
"""

from __future__ import annotations

import copy
import logging
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from lightning_agents.adapter_towers import left_out_of_all_linear, skipped_without_images, warn_tower_like_layers_kept
from lightning_agents.errors import LightningAgentsError

log = logging.getLogger(__name__)

__all__ = [
    "AdapterConfig",
    "AdapterError",
    "BaseModelView",
    "adapters_disabled",
    "apply_adapters",
    "check_adapter_checkpoint",
    "check_adapter_device",
    "ExcludedAdaptersError",
    "fit_optimizer_states",
    "has_adapters",
    "keep_trainable_state",
    "merged_model",
]


class AdapterError(LightningAgentsError, ValueError):
    """An adapter setting that cannot be honoured (QLoRA without a GPU, peft missing, no target module)."""


@dataclass
class AdapterConfig:
    """LoRA adapters (``peft``) on a causal LM; the base weights stay frozen.

    Args:
        rank: LoRA rank r of the update ``B @ A``.
        alpha: LoRA scaling numerator; the update is scaled by ``alpha / rank``.
        dropout: dropout on the adapter input during training.
        target_modules: names of the linear layers that get adapters (e.g. ``[q_proj, v_proj]``),
            or ``all-linear`` for every linear layer of the language model except the output head
            (the vision / audio towers and projectors of a multimodal model, such as Gemma 3's, and
            the decoder blocks a text-only forward skips, Mllama's cross-attention layers, are left
            frozen: text training never runs them; name them to adapt them). A list entry matches as
            in peft (the whole path or its last dotted components), except that the decoder blocks a
            text-only forward skips are reached only by entries that point at them
            (``cross_attn.q_proj``, ``model.layers.3.mlp.up_proj``), not by a bare name that also
            matches the other blocks (``q_proj``), which is warned. A list that matches
            nothing is refused naming the model's linear layers; on fused-MoE model types
            (DeepSeek-V3, Qwen3-MoE, ...) peft leaves the dense MLPs without adapters, which is warned.
        qlora: load the base model in 4-bit NF4 (bitsandbytes) and train LoRA on top; needs a CUDA GPU.
        bias: which biases train as well: ``none``, ``all`` or ``lora_only``.
        modules_to_save: extra modules trained in full and saved with the adapters (e.g. ``[lm_head]``).
        target_parameters: weights that are parameters rather than linear layers, by name or name
            suffix, e.g. the fused MoE experts of GPT-OSS
            (``[mlp.experts.gate_up_proj, mlp.experts.down_proj]``), which ``all-linear`` leaves alone.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    qlora: bool = False
    bias: Literal["none", "all", "lora_only"] = "none"
    modules_to_save: list[str] = field(default_factory=list)
    target_parameters: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Checked here, not left to peft/torch: a float rank fails deep in torch.empty, and alpha 0
        # scales every update to zero, so a run would train nothing without a word.
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise AdapterError(f"adapter.rank must be an integer >= 1, got {self.rank!r}")
        if not _is_real(self.alpha) or not math.isfinite(self.alpha) or self.alpha <= 0:
            raise AdapterError(
                f"adapter.alpha must be a finite number > 0 (the update is scaled by alpha / rank), got {self.alpha!r}"
            )
        if not _is_real(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise AdapterError(f"adapter.dropout must be in [0, 1), got {self.dropout!r}")
        if self.bias not in ("none", "all", "lora_only"):
            raise AdapterError(f"adapter.bias must be one of none, all, lora_only; got {self.bias!r}")
        if isinstance(self.target_modules, str):
            if self.target_modules != "all-linear":
                close = self.target_modules.lower().replace("_", "-") == "all-linear"
                hint = "all-linear, with a hyphen" if close else f"[{self.target_modules}] for one layer"
                raise AdapterError(
                    f"adapter.target_modules must be all-linear or a list of layer names, got the string "
                    f"{self.target_modules!r}; write {hint}"
                )
        else:
            self.target_modules = _names("target_modules", self.target_modules, allow_empty=False)
        self.modules_to_save = _names("modules_to_save", self.modules_to_save)
        self.target_parameters = _names("target_parameters", self.target_parameters)

    def to_peft(self):
        """The equivalent ``peft.LoraConfig`` for a causal LM."""
        peft = _import_peft()
        return peft.LoraConfig(
            task_type="CAUSAL_LM",
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules),
            bias=self.bias,
            modules_to_save=list(self.modules_to_save) or None,
            target_parameters=list(self.target_parameters) or None,
        )


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _names(setting: str, value: Any, allow_empty: bool = True) -> list[str]:
    """``value`` as a list of non-empty strings, or an error naming ``adapter.<setting>``."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise AdapterError(f"adapter.{setting} must be a list of names, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise AdapterError(f"adapter.{setting} must hold non-empty names, got {list(value)!r}")
    if not value and not allow_empty:
        raise AdapterError(f"adapter.{setting} is empty: name the layers to adapt, or use all-linear")
    return list(value)


def _import_peft():
    try:
        import peft
    except ImportError:
        raise AdapterError("adapters need the `peft` package: pip install 'lightning-agents[adapters]'") from None
    return peft


# peft.LoraConfig field -> AdapterConfig field, for the error on an unknown setting.
PEFT_NAMES = {"r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout"}


def as_adapter_config(value: AdapterConfig | dict[str, Any] | None) -> AdapterConfig | None:
    """Accept an :class:`AdapterConfig`, a plain dict of its fields (from Python or YAML), or ``None``."""
    if value is None or isinstance(value, AdapterConfig):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(AdapterConfig.__dataclass_fields__))
        if unknown:
            # peft's own names are the likeliest slip for anyone coming from a LoraConfig.
            hints = [f"{k} is {PEFT_NAMES[k]} here" for k in unknown if k in PEFT_NAMES]
            raise AdapterError(
                f"unknown adapter setting(s) {unknown}; known: {sorted(AdapterConfig.__dataclass_fields__)}"
                + (f" ({'; '.join(hints)})" if hints else "")
            )
        return AdapterConfig(**value)
    raise AdapterError(f"adapter must be an AdapterConfig or a dict, got {type(value).__name__}")


def check_adapter_device(config: AdapterConfig | None) -> None:
    """Refuse QLoRA where bitsandbytes 4-bit kernels cannot run (no CUDA device).

    Called when a module is built, so the error comes before any model is loaded.
    """
    if config is not None and config.qlora and not torch.cuda.is_available():
        raise AdapterError(
            "adapter.qlora=true loads the base model in 4-bit with bitsandbytes, which needs a CUDA GPU, and none "
            "is available here. Set adapter.qlora=false to train plain LoRA on an unquantized base on this machine."
        )


def apply_adapters(model, config: AdapterConfig, gradient_checkpointing: bool = False):
    """Wrap ``model`` in a ``peft`` LoRA model: every base weight frozen, the adapters trainable.

    Args:
        model: a transformers causal LM (4-bit quantized when ``config.qlora``).
        config: the adapter settings.
        gradient_checkpointing: keep input gradients enabled so checkpointed blocks still reach the
            adapters through a frozen embedding.
    """
    peft = _import_peft()
    if config.qlora:
        if not _is_quantized(model):
            # prepare_model_for_kbit_training would cast every 16-bit weight of the full-precision
            # base to float32: twice the memory of plain LoRA where 4-bit was asked for.
            raise AdapterError(
                "adapter.qlora=true, but the base model was loaded unquantized: QLoRA needs the base loaded in "
                "4-bit (bitsandbytes quantization); load it quantized or set adapter.qlora=false"
            )
        # Casts norms to fp32 and enables input gradients, as the QLoRA recipe requires.
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    elif gradient_checkpointing:
        model.enable_input_require_grads()
    _check_modules_to_save(model, config)
    peft_config = config.to_peft()
    left_out = left_out_of_all_linear(model) if config.target_modules == "all-linear" else []
    outside = [name for name, _ in left_out]
    if outside:
        # Text post-training never runs the vision/audio towers: their adapters would get no gradient
        # (DDP without find_unused_parameters stops on such parameters), weigh in the optimizer and
        # the checkpoints, and ship in an adapter that vLLM serves on the language model only.
        log.info(
            "adapter.target_modules=all-linear adapts the language model of %s only; its %d linear layer(s) "
            "under %s stay frozen (name them in adapter.target_modules to adapt them)",
            type(model).__name__,
            len(outside),
            ", ".join(sorted({part for _, part in left_out})),
        )
    skipped = skipped_without_images(model)
    if config.target_modules == "all-linear" and skipped:
        # The same reason as the towers: a text-only forward skips these decoder blocks (Mllama's
        # cross-attention layers), so their adapters would never get a gradient.
        outside += [name for name, _ in skipped if name not in set(outside)]
        blocks = sorted({block for _, block in skipped}, key=_natural)
        _warn_once(
            "adapter.target_modules=all-linear leaves the %d linear layer(s) of the %d decoder block(s) that %s skips "
            "without image states (its config's cross_attention_layers) frozen: %s. Text training never runs them, "
            "so their adapters would get no gradient; name them in adapter.target_modules to adapt them",
            len(skipped),
            len(blocks),
            type(model).__name__,
            ", ".join(blocks),
        )
    if skipped and isinstance(config.target_modules, list):
        # A bare name such as q_proj or down_proj is the usual Llama list, not a wish to adapt blocks
        # that never run on text: their adapters would get no gradient, and DDP without
        # find_unused_parameters (Lightning's default) stops on the second step.
        generic, dropped = _skipped_by_generic_names(model, config.target_modules, skipped)
        if dropped:
            outside += [name for name in dropped if name not in set(outside)]
            blocks = sorted({block for name, block in skipped if name in set(dropped)}, key=_natural)
            _warn_once(
                "adapter.target_modules=%s leaves frozen the %d linear layer(s) it matches in the %d decoder block(s) that "
                "%s skips without image states (its config's cross_attention_layers: %s): %s also match(es) layers "
                "of the other blocks, and text training never runs these, so their adapters would get no gradient "
                "(DDP without find_unused_parameters stops on them). To adapt them, add names that point at them: %s",
                config.target_modules,
                len(dropped),
                len(blocks),
                type(model).__name__,
                ", ".join(blocks),
                generic,
                ", ".join(_names_of_skipped(model, dropped, skipped)),
            )
    if outside:
        peft_config.exclude_modules = outside
    if config.target_modules == "all-linear":
        warn_tower_like_layers_kept(model, set(outside))
    try:
        wrapped = peft.get_peft_model(model, peft_config)
    except ValueError as exc:
        message = str(exc).strip()
        first = message.splitlines()[0] if message else type(exc).__name__
        # peft names only the missing targets; the model's own layer names are what the user needs
        # (Phi-3's fused qkv_proj, GPT-2's c_attn and Falcon's query_key_value match no q_proj).
        # Only then: beside another refusal ("cannot convert gate_proj without also targeting
        # up_proj") a list holding gate_proj read as a contradiction.
        layers = (
            f" (the linear layers of {type(model).__name__}: {_linear_layer_names(model)})"
            if "not found" in message
            else ""
        )
        raise AdapterError(
            f"cannot add LoRA adapters (adapter.target_modules={config.target_modules!r}): {first}{layers}"
        ) from None
    _check_every_target_matched(wrapped, config)
    _warn_dropped_linear_layers(wrapped, config, left_out=outside)
    if skipped and config.target_modules != "all-linear":
        # Named layers stay adapted (a run could feed images some day), but say that text gives them nothing.
        blocks = sorted({block for _, block in skipped}, key=_natural)
        named = [name for name in wrapped.targeted_module_names if any(_under(name, block) for block in blocks)]
        if named:
            _warn_once(
                "adapter.target_modules=%s adapts %d linear layer(s) in the decoder blocks that %s skips without "
                "image states (its config's cross_attention_layers: %s); text training never runs them, so their "
                "adapters get no gradient (DDP without find_unused_parameters stops on such parameters)",
                config.target_modules,
                len(named),
                type(model).__name__,
                ", ".join(blocks),
            )
    _warn_untargeted_experts(wrapped, config)
    return wrapped


def _skipped_by_generic_names(model, names: list[str], skipped: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``(generic, dropped)``: the ``target_modules`` entries that match a module outside the
    ``skipped`` blocks too (peft's rule: the whole path or its last dotted components, so ``q_proj``
    matches every block's), and the layers of the skipped blocks that only such entries match.

    An entry that matches modules of the skipped blocks alone (``cross_attn.q_proj``, or a full path
    such as ``model.layers.3.mlp.up_proj``) points at them, and what it matches stays adapted.
    """
    blocks = {block for _, block in skipped}
    elsewhere = [name for name, _ in model.named_modules() if name and not any(_under(name, b) for b in blocks)]
    generic = [entry for entry in names if any(_matches_target(name, [entry]) for name in elsewhere)]
    specific = [entry for entry in names if entry not in generic]
    dropped = [name for name, _ in skipped if _matches_target(name, generic) and not _matches_target(name, specific)]
    return generic, dropped


def _names_of_skipped(model, layers: list[str], skipped: list[tuple[str, str]], shown: int = 6) -> list[str]:
    """Short ``target_modules`` entries that match ``layers`` (of the ``skipped`` blocks) and nothing
    else: each layer's shortest path suffix that matches no module outside those blocks
    (``cross_attn.q_proj``; ``layers.3.mlp.up_proj`` for an MLP that every block has)."""
    blocks = {block for _, block in skipped}
    # Every entry that matches a module outside the blocks: the dotted suffixes of its path.
    taken = {
        ".".join(parts[k:])
        for name, _ in model.named_modules()
        if name and not any(_under(name, b) for b in blocks)
        for parts in [name.split(".")]
        for k in range(len(parts))
    }
    entries: list[str] = []
    for layer in layers:
        parts = layer.split(".")
        for k in range(len(parts) - 1, -1, -1):
            if parts[k].isdigit() and k > 0:
                continue  # `layers.3.mlp.up_proj`, not the bare index `3.mlp.up_proj`
            entry = ".".join(parts[k:])
            if entry not in taken:
                break
        if entry not in entries:
            entries.append(entry)
    return entries[:shown] + (["..."] if len(entries) > shown else [])


# The warnings of _warn_once already given in this process: a module rebuilt for each fit (or a
# policy and its reference) would repeat the same list of layers.
_WARNED: set[tuple] = set()


def _warn_once(message: str, *args: Any) -> None:
    """``log.warning(message, *args)`` the first time these arguments come (lists count by value)."""
    key = (message, *(tuple(a) if isinstance(a, list) else a for a in args))  # a list is unhashable
    if key in _WARNED:
        return
    _WARNED.add(key)
    log.warning(message, *args)


def _natural(name: str) -> tuple:
    """Sort key that puts ``layers.3`` before ``layers.13``."""
    return tuple(int(part) if part.isdigit() else 0 for part in name.split(".")), name


def _under(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def _is_quantized(model) -> bool:
    """Whether the weights are bitsandbytes 4/8-bit (a GGUF load also sets ``hf_quantizer``, yet is dequantized)."""
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        return True
    return any(type(m).__module__.startswith("bitsandbytes") for m in model.modules())


def _matches(name: str, paths: list[str]) -> bool:
    # peft's rule for a list entry: the full path, or its last dotted components.
    return any(path == name or path.endswith("." + name) for path in paths)


def _linear_layer_names(model) -> list[str]:
    from transformers.pytorch_utils import Conv1D

    leaves = {
        n.rsplit(".", 1)[-1]
        for n, m in model.named_modules()
        if isinstance(m, (torch.nn.Linear, Conv1D)) and ".lora_" not in n
    }
    return sorted(leaves - {"base_layer"})


def _check_modules_to_save(model, config: AdapterConfig) -> None:
    paths = [n for n, _ in model.named_modules()]
    missing = [name for name in config.modules_to_save if not _matches(name, paths)]
    if missing:
        raise AdapterError(f"adapter.modules_to_save: {missing} match no module of {type(model).__name__}")


def _check_every_target_matched(model, config: AdapterConfig) -> None:
    """Refuse a target name that matched nothing (peft raises only when *every* name misses).

    peft renames the expert projections of some MoE models (Mixtral's ``w1``, Qwen-MoE's
    ``gate_proj``) into fused parameters; those leave ``target_modules`` and are not checked here.
    """
    resolved = model.peft_config["default"]
    problems = []
    if isinstance(config.target_modules, list):
        still_modules = set(resolved.target_modules or ())
        targeted = list(model.targeted_module_names)
        missing = [n for n in config.target_modules if n in still_modules and not _matches(n, targeted)]
        if missing:
            problems.append(
                f"adapter.target_modules {missing} match no layer of {type(model.get_base_model()).__name__} "
                f"(its linear layers: {_linear_layer_names(model.get_base_model())})"
            )
    if config.target_parameters:
        targeted = list(getattr(model.base_model, "targeted_parameter_names", ()))
        missing = [n for n in config.target_parameters if not _matches(n, targeted)]
        if missing:
            problems.append(f"adapter.target_parameters {missing} match no parameter")
    if problems:
        raise AdapterError("; ".join(problems))


def _warn_dropped_linear_layers(model, config: AdapterConfig, left_out: list[str] | tuple[str, ...] = ()) -> None:
    """Say so when linear layers that ``target_modules`` names got no adapter.

    For the MoE models whose experts transformers 5 fused (``model_type`` deepseek_v2/v3, glm4_moe,
    qwen3_moe, ernie4_5_moe, ...) peft rewrites every target ending in ``gate_proj``, ``up_proj`` or
    ``down_proj`` into the fused expert parameters, so the dense MLPs of those models (DeepSeek-V3's
    first layers, its shared experts, Qwen3-MoE's ``mlp_only_layers``) lost their adapters without a
    word, ``all-linear`` included (peft up to 0.21; 0.22 adapts them too, and then nothing is left
    to list). No setting brings them back through those peft versions; the warning lists them.
    ``left_out``: layers left out on purpose (the towers of a multimodal model), not warned about.
    """
    from transformers.pytorch_utils import Conv1D

    base = model.get_base_model()
    head = base.get_output_embeddings()
    # modules_to_save (e.g. lm_head) trains a full copy inside peft's wrapper; the frozen
    # `original_module` beside it is kept so by design, and was reported as a layer left frozen.
    saved = [name + "." for name, module in base.named_modules() if _is_modules_to_save_wrapper(module)]
    linear, adapted = [], set()
    for name, module in base.named_modules():
        if getattr(module, "lora_A", None) is not None:
            adapted.add(name)
        elif (
            isinstance(module, (torch.nn.Linear, Conv1D)) and ".lora_" not in name and not name.startswith(tuple(saved))
        ):
            linear.append((name.removesuffix(".base_layer"), module))
    head_weight = getattr(head.get_base_layer() if hasattr(head, "get_base_layer") else head, "weight", None)
    wanted = [
        name
        for name, module in linear
        if module.weight is not head_weight
        and name not in left_out
        and (config.target_modules == "all-linear" or _matches_target(name, config.target_modules))
    ]
    dropped = [name for name in wanted if name not in adapted]
    if not dropped:
        return
    shown = ", ".join(dropped[:6]) + (f", ... ({len(dropped)} layers)" if len(dropped) > 6 else "")
    why = ""
    if any(name.endswith(("gate_proj", "up_proj", "down_proj")) for name in dropped):
        why = (
            f"; peft maps the names gate_proj/up_proj/down_proj of this MoE model (model_type "
            f"{getattr(base.config, 'model_type', None)!r}) onto its fused experts, and these dense layers lose their "
            "adapters with them"
        )
    log.warning(
        "adapter.target_modules=%s leaves %d linear layer(s) of %s without adapters, frozen: %s%s",
        config.target_modules,
        len(dropped),
        type(base).__name__,
        shown,
        why,
    )


def _is_modules_to_save_wrapper(module) -> bool:
    """Whether ``module`` is peft's wrapper of a ``modules_to_save`` entry (or another trained-copy wrapper)."""
    try:
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:  # older peft: only ModulesToSaveWrapper
        from peft.utils.other import ModulesToSaveWrapper as AuxiliaryTrainingWrapper
    return isinstance(module, AuxiliaryTrainingWrapper)


def _matches_target(path: str, names: list[str]) -> bool:
    # peft's rule for a list entry: the whole path, or its last dotted components.
    return any(path == name or path.endswith("." + name) for name in names)


def _warn_untargeted_experts(model, config: AdapterConfig) -> None:
    """Say so when fused MoE expert weights (3-D parameters) carry no adapter.

    ``all-linear`` finds only linear layers; peft maps the fused experts of Mixtral and Qwen-MoE
    back, but not those of every MoE (GPT-OSS), whose expert MLPs, most of the weights, then stay
    untouched.
    """
    targeted = set(getattr(model.base_model, "targeted_parameter_names", ()))
    bare = set()
    for owner_name, owner in model.get_base_model().named_modules():
        # Only the parameters of an experts module: Gemma 3's vision tower has a 3-D `probe`,
        # which the warning told the user to name as an MoE expert weight. An experts module is
        # told by its class (JetMoE's JetMoeParallelExperts sit at mlp.input_linear, with no
        # `experts` in the path) or by its path.
        experts = "Expert" in type(owner).__name__ or ".experts" in f".{owner_name}"
        for leaf, p in owner.named_parameters(recurse=False):
            # peft wraps a targeted parameter's module, so its name gains `base_layer.` segments.
            name = f"{owner_name}.{leaf}".replace("base_layer.", "")
            if experts and p.dim() == 3 and name not in targeted:
                bare.add(re.sub(r"^(.*?\.)?\d+\.", "", name))  # the path inside a decoder layer
    if bare and not config.target_parameters:
        shown = sorted(bare)
        log.warning(
            "adapter.target_modules=%s leaves the fused MoE expert weights %s of %s without adapters; name them in "
            "adapter.target_parameters (e.g. [%s]) to train them",
            config.target_modules,
            shown,
            type(model.get_base_model()).__name__,
            shown[0],
        )


def has_adapters(model) -> bool:
    """Whether ``model`` is a ``peft`` model."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


@contextmanager
def adapters_disabled(model) -> Iterator[None]:
    """Run ``model`` as its base model (adapters off), e.g. as the frozen reference policy.

    A no-op context for a model without adapters.
    """
    with model.disable_adapter() if has_adapters(model) else nullcontext():
        yield


class BaseModelView:
    """The base model under a ``peft`` model's adapters, called like a model: the frozen reference
    policy of RL without a second copy of the weights.

    It has no mode of its own (``eval``/``train`` do nothing) so that using it never switches the
    trained policy's mode; forwards run without gradient.

    Args:
        model: the peft model whose base is wanted.
    """

    training = False

    def __init__(self, model) -> None:
        self.model = model

    def eval(self) -> BaseModelView:
        return self

    def train(self, mode: bool = True) -> BaseModelView:
        return self

    def __call__(self, *args: Any, **kwargs: Any):
        with torch.no_grad(), adapters_disabled(self.model):
            return self.model(*args, **kwargs)


def keep_trainable_state(module: torch.nn.Module, state_dict: dict[str, torch.Tensor], prefix: str) -> int:
    """Drop from ``state_dict`` every tensor of ``module`` (named under ``prefix``) that does not train.

    Checkpoints of an adapter run then hold the adapters only; the frozen base is reloaded from
    its path or hub id when the module is rebuilt. Returns the number of entries dropped.
    """
    trainable = {prefix + name for name, p in module.named_parameters() if p.requires_grad}
    frozen = [k for k in state_dict if k.startswith(prefix) and k not in trainable]
    for key in frozen:
        del state_dict[key]
    return len(frozen)


class ExcludedAdaptersError(AdapterError):
    """A checkpoint holds trained adapters on layers that ``target_modules`` no longer adapts (the
    vision or audio towers and projectors of a multimodal model under ``all-linear``, or Mllama's
    cross-attention layers under ``all-linear`` or a bare name such as ``q_proj``, adapted by runs
    before those rules)."""


# A LoRA tensor of one layer under peft's wrapper: `<layer>.lora_A.<adapter>.weight`, or the wrapped
# layer's own weight or bias (trainable with adapter.bias): `<layer>.base_layer.<name>`.
_LORA_KEY = re.compile(r"^(?P<layer>.+?)\.(?:(?P<lora>lora_[AB])\.[^.]+\.weight|base_layer\.(?P<own>[^.]+))$")


def _left_out_in_checkpoint(
    module: torch.nn.Module, keys: list[str], state_dict: dict[str, torch.Tensor], prefix: str
) -> tuple[dict[str, str | None], list[str]]:
    """Sort the checkpoint ``keys`` that ``module`` does not know into the adapters of layers that
    ``all-linear`` left out on purpose (``exclude_modules``) and never trained, and those that trained.

    Returns ``(untrained, trained_layers)``: ``untrained`` maps each untrained key to the key it loads
    as (``<layer>.<name>`` for a trainable ``<layer>.base_layer.<name>``) or ``None`` (not loaded);
    ``trained_layers`` names the left-out layers whose ``lora_B`` is not all zero. A layer whose
    ``lora_B`` is all zero got no gradient (text training never runs it; AdamW skips a parameter
    without one), so its adapter computes nothing and is safe to leave out.
    """
    peft_config = getattr(module, "peft_config", {}).get("default") if has_adapters(module) else None
    excluded = set(getattr(peft_config, "exclude_modules", None) or ())
    if not excluded or isinstance(getattr(peft_config, "exclude_modules", None), str):
        return {}, []
    base = module.get_base_model()
    inner = next((name for name, m in module.named_modules() if m is base), None)
    if not inner:
        return {}, []
    root = prefix + inner + "."
    layers: dict[str, list[str]] = {}
    for key in keys:
        found = _LORA_KEY.match(key[len(root) :]) if key.startswith(root) else None
        if found and found["layer"] in excluded:
            layers.setdefault(found["layer"], []).append(key)
    trainable = {prefix + name for name, p in module.named_parameters() if p.requires_grad}
    untrained: dict[str, str | None] = {}
    trained: list[str] = []
    for layer, held in layers.items():
        b = [state_dict[k] for k in held if _LORA_KEY.match(k[len(root) :])["lora"] == "lora_B"]
        if not b or any(bool(t.detach().ne(0).any()) for t in b):
            trained.append(layer)
            continue
        for key in held:
            own = _LORA_KEY.match(key[len(root) :])["own"]
            target = f"{root}{layer}.{own}" if own else None
            untrained[key] = target if target in trainable else None
    return untrained, sorted(trained)


def check_adapter_checkpoint(module: torch.nn.Module, state_dict: dict[str, torch.Tensor], prefix: str) -> None:
    """Refuse a checkpoint whose trained tensors are not those of ``module`` (named under ``prefix``).

    Adapter modules load checkpoints with ``strict=False`` (the frozen base is not in them), so a
    resume with other ``adapter`` settings than the run that saved it (other target modules, say)
    loaded none of the trained adapters and said nothing. Call it from ``on_load_checkpoint``.

    A checkpoint of an ``all-linear`` run written before ``all-linear`` left a multimodal model's
    towers out (Gemma 3's SigLIP tower before commit a8bcd81; Phi-4-multimodal's and GIT's, inside
    ``get_decoder()``, until later) holds adapters on those layers. They never trained (``lora_B``
    all zero), so they are taken out of ``state_dict`` with a warning and the rest loads (a
    ``<layer>.base_layer.bias`` trained with ``adapter.bias: all`` loads as ``<layer>.bias``); a
    tower adapter that did train is refused (:class:`ExcludedAdaptersError`), naming the
    ``target_modules`` list that loads it. A resume also needs :func:`fit_optimizer_states`.

    Raises:
        AdapterError: naming how many trainable tensors are missing and how many are unknown.
    """
    own = {prefix + name for name in module.state_dict()}
    held = [key for key in state_dict if key.startswith(prefix)]
    untrained, trained_layers = _left_out_in_checkpoint(module, [k for k in held if k not in own], state_dict, prefix)
    if untrained and not trained_layers:  # refused below otherwise: state_dict is left as it came
        # Rebuilt in order: the optimizer's saved state follows the order of the trained tensors.
        items = [
            (untrained.get(key) or key, value)
            for key, value in state_dict.items()
            if key not in untrained or untrained[key] is not None
        ]
        state_dict.clear()
        state_dict.update(items)
        dropped = [key for key, target in untrained.items() if target is None]
        layers = {key.split(".lora_")[0].split(".base_layer.")[0] for key in dropped}
        log.warning(
            "the checkpoint holds %d adapter tensor(s) on %d layer(s) that adapter.target_modules no longer adapts "
            "(%s; lightning-agents adapted them before). They never trained (lora_B all zero) and are left out",
            len(dropped),
            len(layers),
            _what_was_left_out(module, layers),
        )
    trainable = {prefix + name for name, p in module.named_parameters() if p.requires_grad}
    held = {key for key in state_dict if key.startswith(prefix)}
    missing, unknown = sorted(trainable - held), sorted(held - own)
    if not missing and not unknown:
        return
    parts = [
        f"{len(keys)} {what} (first: {keys[0]})" for what, keys in (("missing", missing), ("unknown", unknown)) if keys
    ]
    message = "the checkpoint's trained tensors do not fit this module's adapters: " + ", ".join(parts)
    if trained_layers:
        leaves = _targets_of(module, [key.split(".lora_")[0] for key in held if ".lora_A." in key])
        raise ExcludedAdaptersError(
            f"{message}. The checkpoint has trained adapters on {len(trained_layers)} layer(s) that "
            f"adapter.target_modules no longer adapts (first: "
            f"{trained_layers[0]}, in {_what_was_left_out(module, set(trained_layers))}): all-linear now leaves a "
            "multimodal model's vision/audio towers and projectors frozen, and neither all-linear nor a bare name "
            "such as q_proj reaches the decoder blocks that a text-only forward skips (Mllama's cross-attention "
            "layers) any more; they adapted them before. "
            "To resume with them, name the layers the checkpoint adapts: "
            f"adapter.target_modules: [{', '.join(leaves)}]"
        )
    raise AdapterError(
        message + "; resume with the adapter settings the checkpoint was saved with (its hyper_parameters.adapter)"
    )


def _what_was_left_out(module, layers: set[str]) -> str:
    """Name the parts of ``module``'s base that hold the checkpoint ``layers`` (full keys) left out: the
    vision/audio towers and projectors, the decoder blocks skipped without images, or both."""
    base = module.get_base_model()
    blocks = sorted({block for name, block in skipped_without_images(base)}, key=_natural)
    in_blocks = {layer for layer in layers if any(f".{block}." in f".{layer}." for block in blocks)}
    parts = []
    if len(in_blocks) < len(layers):
        parts.append(f"the vision/audio towers and projectors of {type(base).__name__}")
    if in_blocks:
        shown = [block for block in blocks if any(f".{block}." in f".{layer}." for layer in in_blocks)]
        parts.append(
            f"the decoder blocks that {type(base).__name__} skips without image states "
            f"(its config's cross_attention_layers: {', '.join(shown)})"
        )
    return " and ".join(parts)


def _targets_of(module, layers: list[str]) -> list[str]:
    """The ``target_modules`` list that adapts the checkpoint ``layers`` (full keys) again: their leaf
    names, and for those in the decoder blocks a text-only forward skips, which a bare name no longer
    reaches (:func:`apply_adapters`), names that point at them (``cross_attn.q_proj``)."""
    base = module.get_base_model()
    skipped = skipped_without_images(base)
    names = {name for name, _ in skipped}
    inside = sorted({name for name in names if any(layer.endswith("." + name) for layer in layers)}, key=_natural)
    leaves = sorted({layer.rsplit(".", 1)[-1] for layer in layers if not any(layer.endswith("." + n) for n in inside)})
    return leaves + (_names_of_skipped(base, inside, skipped, shown=len(inside)) if inside else [])


def fit_optimizer_states(module: torch.nn.Module, checkpoint: dict[str, Any], prefix: str) -> None:
    """Take the adapters that :func:`check_adapter_checkpoint` leaves out of a checkpoint out of its
    optimizer states too, so that a run written before ``all-linear`` left the towers out resumes.

    Call it from ``on_load_checkpoint`` (before the weights load), with the built ``module`` (the
    peft model, named under ``prefix``). The optimizer's parameters follow the order of the trained
    tensors in ``checkpoint["state_dict"]``; the states are changed only when, with those tensors
    taken out, that order is exactly the trainable parameters of ``module`` (else torch's load
    refuses them as before). AdamW keeps no state for a parameter that never had a gradient, so the
    rest of the state is kept as saved.
    """
    state = checkpoint.get("state_dict") or {}
    optimizers = checkpoint.get("optimizer_states") or []
    own = {prefix + name for name in module.state_dict()}
    keys = [key for key in state if key.startswith(prefix)]
    untrained, trained = _left_out_in_checkpoint(module, [k for k in keys if k not in own], state, prefix)
    if not untrained or trained or not optimizers:  # nothing left out, or refused by check_adapter_checkpoint
        return
    kept = [key not in untrained or untrained[key] is not None for key in keys]
    renamed = [untrained.get(key) or key for key, keep in zip(keys, kept, strict=True) if keep]
    trainable = [prefix + name for name, p in module.named_parameters() if p.requires_grad]
    if renamed != trainable:
        return
    for saved in optimizers:
        groups = saved.get("param_groups") if isinstance(saved, dict) else None
        if not groups or sum(len(group.get("params", ())) for group in groups) != len(keys):
            continue
        flat = [pid for group in groups for pid in group["params"]]
        gone = {pid for pid, keep in zip(flat, kept, strict=True) if not keep}
        for group in groups:
            group["params"] = [pid for pid in group["params"] if pid not in gone]
        saved["state"] = {pid: value for pid, value in saved.get("state", {}).items() if pid not in gone}


def merged_model(model):
    """A plain transformers model with the adapters folded into the base weights (a copy; ``model`` is kept).

    A model without adapters is returned as is.
    """
    if not has_adapters(model):
        return model
    clone = copy.deepcopy(model)
    _untie_adapted_embeddings(clone)
    merged = clone.merge_and_unload()
    _record_untied_head(merged)
    return merged


def _untie_adapted_embeddings(model) -> None:
    """Give the output head its own weight when it is tied to the input embedding and either carries an adapter.

    Merging an adapter into a tied weight changes both ends at once (an ``lm_head`` adapter would
    move the input embeddings too), so the merged model would no longer compute what was trained.
    """
    base = model.get_base_model()
    head, embed = base.get_output_embeddings(), base.get_input_embeddings()
    if head is None or embed is None:
        return
    head_layer = head.get_base_layer() if hasattr(head, "get_base_layer") else head
    embed_layer = embed.get_base_layer() if hasattr(embed, "get_base_layer") else embed
    adapted = any(hasattr(m, "get_base_layer") for m in (head, embed))
    if not adapted or head_layer.weight is not embed_layer.weight:
        return
    head_layer.weight = torch.nn.Parameter(head_layer.weight.detach().clone(), requires_grad=False)
    for config in {id(c): c for c in (base.config, base.config.get_text_config())}.values():
        config.tie_word_embeddings = False


def _record_untied_head(model) -> None:
    """Say ``tie_word_embeddings: false`` in every config of ``model`` whose head no longer shares the embedding.

    A ``modules_to_save`` head of a tied model is a trained copy: peft unties it and sets the flag on
    the top config alone, so a multimodal export (Gemma 3) kept ``text_config.tie_word_embeddings:
    true`` beside a trained ``lm_head.weight``, for any reader building the language model from its
    text config to tie back to the embeddings.
    """
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embed is None or head.weight is embed.weight:
        return
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        if getattr(config, "tie_word_embeddings", False):
            config.tie_word_embeddings = False


def trainable_parameter_count(model: torch.nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
