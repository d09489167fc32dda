"""The ``lightning-agents`` command: LightningCLI with fit/validate/test and the extra tools.

``curate``, ``evolve``, ``rollout``, ``export`` and ``generate`` are registered the Lightning way: they are methods of
:class:`AgentsTrainer` (contributed by mixins in :mod:`lightning_agents.commands`) listed in
:meth:`AgentsCLI.subcommands`, so their arguments, ``--help`` and ``--config`` handling come from
the same jsonargparse machinery as ``fit``. A tool's parser holds ``--config`` and the tool's own
arguments only, not Lightning's fit settings (trainer, model, data, optimizer, lr_scheduler,
seed_everything), which it would ignore; ``teacher_cache``, which reads the fit config it is given,
is the exception.

The help of a dataclass setting of a module is ``fit --model SFTModule --model.adapter.help`` (or
jsonargparse's own form, ``fit --model.help SFTModule --model.adapter.help``): see
:func:`nested_class_help`.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch.cli as lightning_cli
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, instantiate_class

import lightning_agents
from lightning_agents.commands import (
    ConvertCommand,
    CurateCommand,
    EvolveCommand,
    ExportCommand,
    GenerateCommand,
    RolloutCommand,
    TeacherCacheCommand,
)

# Import every LightningModule, DataModule, Callback and Strategy of the package, so configs can
# name them by short class name.
lightning_agents.import_all()

__all__ = ["AgentsCLI", "AgentsTrainer", "cli_main", "main"]

# Subcommands that run a tool rather than a Trainer loop: no model or datamodule is required.
TOOL_SUBCOMMANDS = ("curate", "evolve", "rollout", "export", "generate", "convert", "teacher_cache")
# The tools whose parser holds only their own arguments (and --config): none of Lightning's fit
# settings (seed_everything, trainer, model, data, optimizer, lr_scheduler). teacher_cache is not
# among them: it reads the fit config it is given (model, data, trainer.default_root_dir,
# seed_everything), and must accept all of that config, optimizer sections included.
_TOOLS_WITHOUT_FIT_CONFIG = tuple(t for t in TOOL_SUBCOMMANDS if t != "teacher_cache")
_TEACHER_CACHE_DESCRIPTION = (
    "Pre-generate the teacher pass rates and SFT answers of every training prompt. It takes the fit "
    "config of the run (--config): model (an RSTGModule), data and seed_everything are read; of the "
    "trainer settings only trainer.default_root_dir (the cache's folder when model.teacher_cache is "
    "unset); optimizer and lr_scheduler are accepted so that the same file parses, and ignored."
)


class AgentsTrainer(
    CurateCommand,
    EvolveCommand,
    RolloutCommand,
    ExportCommand,
    GenerateCommand,
    ConvertCommand,
    TeacherCacheCommand,
    Trainer,
):
    """Lightning's Trainer with the package's tool subcommands.

    The tools: curate, evolve, rollout, export, generate, convert and teacher_cache.
    """


def _config_files(args: list[str]) -> list[str]:
    """The ``--config``/``-c`` files named on a command line, in order (later ones win)."""
    files = []
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            files.append(args[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


def setting_location(setting: str) -> str | None:
    """Where a setting's value came from: ``command line``, ``file:line`` of a config file, or ``None``."""
    found = _setting_source(setting)
    if found is None:
        return None
    where, key_node, _ = found
    return where if key_node is None else f"{where}:{key_node.start_mark.line + 1}"


def _setting_value(setting: str) -> tuple[bool, Any]:
    """``(True, value)`` of a setting as the command line or the last config file that sets it
    gives it (parsed as YAML, as jsonargparse does); ``(False, None)`` when neither sets it."""
    import yaml

    found = _setting_source(setting)
    if found is None:
        return False, None
    _, _, value = found
    try:
        return True, yaml.safe_load(value if isinstance(value, str) else yaml.serialize(value))
    except yaml.YAMLError:
        return False, None


def _setting_source(setting: str) -> tuple[str, Any, Any] | None:
    """``("command line", None, text)`` or ``(file, key node, value node)`` of where ``setting``
    was last set; None when nowhere."""
    keys = setting.split(".")
    flags = {"--" + setting, "--" + ".".join(k for k in keys if k != "init_args")}
    line = AgentsArgumentParser.command_line
    for i, arg in reversed(list(enumerate(line))):
        flag, eq, inline = arg.partition("=")
        if flag in flags:
            return "command line", None, inline if eq else (line[i + 1] if i + 1 < len(line) else "")
    return _yaml_source(AgentsArgumentParser.config_files, setting)


def yaml_location(config_files: list[str], setting: str) -> str | None:
    """``file:line`` of ``setting`` (dotted, ``init_args`` optional) in the last config file that sets it."""
    found = _yaml_source(config_files, setting)
    return None if found is None else f"{found[0]}:{found[1].start_mark.line + 1}"


def _yaml_source(config_files: list[str], setting: str) -> tuple[str, Any, Any] | None:
    """``(file, key node, value node)`` of ``setting`` in the last config file that sets it."""
    keys = [k for k in setting.split(".") if k != "init_args"]
    for file, node in _config_trees(config_files):
        pair = _nodes_of_keys(node, keys)
        if pair is not None:
            return file, *pair
    return None


def _config_trees(config_files: list[str]):
    """``(file, YAML node tree)`` of each readable config file, the last one first (it wins)."""
    import yaml

    for file in reversed(config_files):
        # relative to where the command started: jsonargparse changes directory while it parses
        path = Path(file) if Path(file).is_absolute() else Path(AgentsArgumentParser.start_dir) / file
        try:
            yield file, _compose_config(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue


def _nodes_of_keys(node: Any, keys: list[str]) -> tuple[Any, Any] | None:
    """``(key node, value node)`` of the last of ``keys`` under the YAML ``node``; an ``init_args``
    level may be left out, and a list (``callbacks:``) is searched item by item, as jsonargparse
    names its items' settings without an index (``trainer.callbacks.init_args.split``)."""
    import yaml

    if not keys:
        return None
    if isinstance(node, yaml.SequenceNode):
        return next((pair for item in node.value if (pair := _nodes_of_keys(item, keys)) is not None), None)
    if not isinstance(node, yaml.MappingNode):
        return None
    pairs = {k.value: (k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)}
    if keys[0] not in pairs and "init_args" in pairs:
        return _nodes_of_keys(pairs["init_args"][1], keys)
    if keys[0] not in pairs:
        return None
    key_node, value = pairs[keys[0]]
    return (key_node, value) if len(keys) == 1 else _nodes_of_keys(value, keys[1:])


def _literal_choices(type_text: str) -> str | None:
    match = re.search(r"Literal\[(.*)\]", type_text)
    return match.group(1) if match else None


def _type_names(text: str) -> str:
    """``<class 'int'>`` as ``int``: the type as a config's author writes it."""
    return re.sub(r"<class '(?:builtins\.)?([\w.]+)'>", r"\1", text).replace("NoneType", "null")


def one_line_parser_error(message: str, config_files: list[str]) -> str:
    """Condense jsonargparse's multi-line validation report to ``setting: problem (file:line)``."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    keys = re.findall(r'Parser key "([^"]+)"', message)
    unknown = (
        re.search(r"Option '([^']+)' is not accepted", message)
        or re.search(r'No action for key "([^"]+)"', message)
        or re.search(r"Subcommand '\w+' does not accept option '([^']+)'", message)
        # a misspelt key inside a section that is a class's arguments (trainer:, data.selection:)
        or re.search(r"Group '([^']+)' does not accept option '([^']+)'", message)
    )
    union = re.search(r"Union subtypes\s*Subtypes: \[(.*)\]\s*$.*Given value: (.*)", message, re.S | re.M)
    expected = re.search(r"Expected a (.+?)\. Got value: (.*)", message)
    class_path = re.search(r"Problem with given class_path '([^']+)':\s*([^\n]+)", message)
    no_class = re.search(r"Expected a dot import path string: (\S+)", message)
    own = _dataclass_error(message, keys) or _list_item_error(message, keys, unknown)
    if own is not None:
        return own
    problem = None
    if unknown:
        keys.append(".".join(g for g in unknown.groups() if g))
        problem = "no such setting"
        tool = next((a for a in AgentsArgumentParser.command_line if not a.startswith("-")), None)
        if tool in _TOOLS_WITHOUT_FIT_CONFIG and f"--{unknown.group(1).split('.')[0]}" in _FIT_SECTIONS:
            problem = f"an option of fit, which {tool} does not use"
    elif expected and len(keys) >= 1:
        choices = _literal_choices(expected.group(1))
        got = expected.group(2).strip()
        wanted = _type_names(expected.group(1))
        problem = f"{got!r} is not one of {choices}" if choices else f"expected {wanted}, got {got!r}"
    elif class_path and keys:
        problem = f"class_path {class_path.group(1)!r}: {class_path.group(2).split(' - ')[0].strip()}"
    elif no_class and keys:
        problem = f"{no_class.group(1)!r} names no class (a short name such as SFTModule, or module.Class)"
    # last: a class_path section's report is a union report too, with its own cause above
    elif union and keys:
        problem = f"expected {_type_names(union.group(1)).replace(', ', ' or ')}, got {union.group(2).strip()!r}"
    if problem is None or not keys:
        return " ".join(lines)[:400]
    top, inner = keys[0], keys[1:]
    setting = ".".join([top, "init_args", *inner]) if inner and "class_path" in message else ".".join(keys)
    where = setting_location(setting)
    return f"{setting}: {problem}" + (f" ({where})" if where else "")


def _list_item_error(message: str, keys: list[str], unknown: re.Match | None) -> str | None:
    """``backbones[1].output_price (teacher): expected float or null, got 'eight' (file:line)`` for a
    bad value in one item of a list of settings classes written in a config file.

    jsonargparse reports such a value under ``Parser key "backbones"`` with the item's key below it
    and the whole list's value last, which condensed to ``backbones.init_args.output_price`` (a key
    path nobody writes), a cut-off problem and the line of the first item that has the key.
    """
    import yaml

    if not keys or "Problem with given class_path" not in message:
        return None
    found = _yaml_source(AgentsArgumentParser.config_files, keys[0])
    if found is None or not isinstance(found[2], yaml.SequenceNode):
        return None
    file, _, items = found
    if unknown is not None:
        key, value, problem = unknown.groups()[-1], None, "no such setting"
    elif len(keys) == 2:
        key = keys[1]
        inner = message[message.index(f'Parser key "{key}"') :]
        expected = re.search(r"Expected a (.+?)\. Got value: (.*)", inner)
        union = re.search(r"Subtypes: \[([^\n]*)\]\s*$.*?Given value: (.*?)$", inner, re.S | re.M)
        if expected:
            value, wanted = expected.group(2).strip(), expected.group(1)
            choices = _literal_choices(wanted)
            problem = (
                f"{value!r} is not one of {choices}" if choices else f"expected {_type_names(wanted)}, got {value!r}"
            )
        elif union:
            value = union.group(2).strip()
            problem = f"expected {_type_names(union.group(1)).replace(', ', ' or ')}, got {value!r}"
        else:
            return None
    else:
        return None
    candidates = []
    for index, item in enumerate(items.value):
        pairs = _nodes_of_keys(item, [key])
        if pairs is not None and isinstance(item, yaml.MappingNode):
            candidates.append((index, item, pairs))
    # the item whose value jsonargparse quotes; else the first that sets the key
    match = next((c for c in candidates if value is None or getattr(c[2][1], "value", None) == value), None)
    match = match or (candidates[0] if candidates else None)
    if match is None:
        return None
    index, item, (key_node, _) = match
    name = _nodes_of_keys(item, ["name"])
    label = f" ({name[1].value})" if name is not None and isinstance(name[1], yaml.ScalarNode) else ""
    return f"{keys[0]}[{index}].{key}{label}: {problem} ({file}:{key_node.start_mark.line + 1})"


def _dataclass_error(message: str, keys: list[str]) -> str | None:
    """The package's own message for a value that a settings dataclass refuses, with where it was set.

    jsonargparse checks a dataclass field's type before the dataclass sees the value, so
    ``target_modules: q_proj`` (a string where ``list[str] | Literal["all-linear"]`` is wanted) got
    its nested union report, which condensed to nothing useful; the dataclass's own check (here
    ``AdapterConfig``'s, which says to write ``[q_proj]``) is built with that one value to say why.
    """
    import dataclasses
    import importlib

    found = re.findall(r"Problem with given class_path '([^']+)':\s*Parser key \"([^\"]+)\"", message)
    if not found or not keys or keys[-1] != found[-1][1]:
        return None
    module_name, _, name = found[-1][0].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        return None
    if not (dataclasses.is_dataclass(cls) and cls.__module__.startswith("lightning_agents")):
        return None
    setting = ".".join([keys[0], "init_args", *keys[1:]]) if len(keys) > 1 else keys[0]
    is_set, value = _setting_value(setting)
    if not is_set:
        return None
    try:
        cls(**{keys[-1]: value})
    except Exception as exc:  # noqa: BLE001 - only the package's own errors are shown
        if _is_input_error(exc) and type(exc).__module__.startswith("lightning_agents"):
            where = setting_location(setting)
            return str(exc) + (f" ({where})" if where else "")
    return None


class AgentsArgumentParser(LightningArgumentParser):
    """LightningArgumentParser whose errors are one line naming the setting and its YAML file and line."""

    config_files: list[str] = []
    command_line: list[str] = []
    start_dir: str = "."

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # argparse's prefix matching took `evolve --preferences simulated` as `--preferences_file
        # simulated`: a misspelt setting must be refused, never read as another one.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None):
        if getattr(self, "exit_on_error", True) is False:
            return super().error(message, ex)
        print(f"lightning-agents: error: {one_line_parser_error(message, self.config_files)}", file=sys.stderr)
        sys.exit(2)


# Settings that name a checkpoint, checked before anything loads; those that must share the
# model's vocabulary are compared by their tokenizers.
_MODEL_SETTINGS = ("model", "teacher", "reference")
_SAME_VOCAB_AS_MODEL = ("teacher", "reference")


# The listing of `lightning-agents --help` where a method's first docstring line does not read whole.
_SUBCOMMAND_HELP = {"test": "Perform one evaluation epoch over the test set (only once you mean to look at it)."}
_DESCRIPTION = (
    "Post-train LLM agents with Lightning: fit, validate and test a module from a config, and the tools "
    "around training (curate, evolve, rollout, generate, export, convert, teacher_cache). "
    "`lightning-agents SUBCOMMAND --help` lists a subcommand's settings."
)


class _DeferredInit:
    """An ``optimizer:`` or ``lr_scheduler:`` section whose object is built when the Trainer asks for it."""

    def __init__(self, init: dict[str, Any]) -> None:
        self.init = init


class AgentsCLI(LightningCLI):
    """LightningCLI for lightning-agents: fit, validate, test plus curate, evolve, rollout, export, generate, convert.

    Lightning's ``predict`` is not offered: the modules generate and score rather than map batches
    to outputs, and ``generate`` does that over a prompt file from a checkpoint or a model folder.

    Before any class is instantiated it checks the settings that name checkpoints (a missing local
    path is a one-line error), makes ``data.tokenizer`` follow ``model.model`` when it is unset, and
    refuses a data tokenizer, teacher or reference whose vocabulary differs from the model's.
    """

    _building: str | None = None

    def _setting_error(self, setting: str, exc: Exception):
        where = setting_location(setting)
        raise type(exc)(
            f"{setting}: {exc}".replace(f"{setting}: {setting.split('.')[-1]}: ", f"{setting}: ")
            + (f" ({where})" if where else "")
        ) from None

    def _refuse_missing_accelerator(self, trainer: Any) -> None:
        # The GPU and multi-node configs on a machine without a GPU: Lightning's "No supported gpu
        # backend found!" came as a 30-line traceback, after the models had been checked or loaded.
        accelerator = trainer.get("accelerator") if trainer is not None else None
        if not isinstance(accelerator, str) or accelerator not in ("gpu", "cuda"):
            return
        from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator

        if CUDAAccelerator.is_available() or (accelerator == "gpu" and MPSAccelerator.is_available()):
            return
        self._setting_error(
            "trainer.accelerator",
            ValueError(
                f"{accelerator!r}, but this machine has no GPU (torch.cuda.is_available() is False); this config "
                "is for GPUs. To try it here: --trainer.accelerator cpu --trainer.devices 1 --trainer.num_nodes 1 "
                "--trainer.strategy auto --trainer.precision 32-true and a small model"
            ),
        )

    def _refuse_root_dir_that_is_a_file(self, trainer: Any) -> None:
        # Lightning creates the folder when the first checkpoint or log is written: a file there
        # was a FileExistsError traceback from inside fsspec, after the model had loaded.
        root = trainer.get("default_root_dir") if trainer is not None else None
        if isinstance(root, str | os.PathLike) and "://" not in str(root) and Path(root).is_file():
            self._setting_error("trainer.default_root_dir", ValueError(f"{root} is a file, not a folder"))

    def _refuse_automatic_settings_for_rstg(self, config: Any) -> None:
        # Lightning refuses these for any manually optimised module with "switch to automatic
        # optimization", which RSTG cannot do; it has its own setting for each.
        model = config.get("model")
        trainer = config.get("trainer")
        if trainer is None or not str(getattr(model, "class_path", "") or "").endswith("RSTGModule"):
            return
        own = {
            "accumulate_grad_batches": (1, "model.generation_batches_per_step (generation batches per update)"),
            "gradient_clip_val": (None, "model.max_grad_norm (gradient-norm clipping)"),
        }
        for key, (neutral, instead) in own.items():
            value = trainer.get(key)
            if value not in (neutral, 0, 0.0):
                self._setting_error(
                    f"trainer.{key}", ValueError(f"RSTGModule optimises manually and does not read it; use {instead}")
                )

    def before_instantiate_classes(self) -> None:
        from lightning_agents.models import check_model_path, check_same_vocab, load_tokenizer

        config = self.config.get(self.subcommand) if self.subcommand else self.config
        if config is None:
            return
        model_args = _init_args(config.get("model"))
        data_args = _init_args(config.get("data"))
        self._refuse_missing_accelerator(config.get("trainer"))
        self._refuse_root_dir_that_is_a_file(config.get("trainer"))
        self._refuse_automatic_settings_for_rstg(config)
        for key in _MODEL_SETTINGS:
            value = model_args.get(key) if model_args is not None else None
            if isinstance(value, str):
                try:
                    check_model_path(value, key)
                except Exception as exc:  # noqa: BLE001 - re-raised with the setting's location
                    self._setting_error(f"model.init_args.{key}", exc)
        model_name = model_args.get("model") if model_args is not None else None
        tokenizers: dict[str, Any] = {}

        def tokenizer_of(setting: str, name: str):
            if name not in tokenizers:
                try:
                    tokenizers[name] = load_tokenizer(name)
                except Exception as exc:  # noqa: BLE001
                    self._setting_error(setting, exc)
            return tokenizers[name]

        if data_args is not None and "tokenizer" in data_args and isinstance(model_name, str):
            if data_args.get("tokenizer") is None:
                data_args["tokenizer"] = model_name  # one model setting: the data follows it
            elif data_args["tokenizer"] != model_name:
                try:
                    check_model_path(data_args["tokenizer"], "tokenizer")
                except Exception as exc:  # noqa: BLE001
                    self._setting_error("data.init_args.tokenizer", exc)
                model_tok = tokenizer_of("model.init_args.model", model_name)
                data_tok = tokenizer_of("data.init_args.tokenizer", data_args["tokenizer"])
                try:
                    check_same_vocab(model_tok, data_tok, "model.model", "data.tokenizer")
                except Exception as exc:  # noqa: BLE001
                    self._setting_error("data.init_args.tokenizer", exc)
        if model_args is not None and isinstance(model_name, str):
            for key in _SAME_VOCAB_AS_MODEL:
                other = model_args.get(key)
                if isinstance(other, str) and other != model_name:
                    # loaded outside the check's `try`: a model that cannot load is reported once,
                    # under its own setting, not wrapped again as the teacher's vocabulary problem
                    model_tok = tokenizer_of("model.init_args.model", model_name)
                    other_tok = tokenizer_of(f"model.init_args.{key}", other)
                    try:
                        check_same_vocab(model_tok, other_tok, "model.model", f"model.{key}")
                    except Exception as exc:  # noqa: BLE001
                        self._setting_error(f"model.init_args.{key}", _vocab_hint(exc, key))

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        # Lightning builds the `optimizer:` section here from model.parameters(), but the modules
        # create their weights in configure_model, which the Trainer calls later (under the
        # strategy's device, precision and sharding contexts): there are none yet, and torch refuses
        # an empty parameter list. Lightning's method still decides which sections apply and binds
        # configure_optimizers; only the instantiation is deferred to configure_optimizers below.
        config = self.config.get(subcommand) if subcommand else self.config
        if config is not None and config.get("lr_scheduler") and not config.get("optimizer"):
            # Lightning applies an lr_scheduler section only together with an optimizer section;
            # alone it was dropped without a word and the run trained at the module's own rate.
            where = setting_location("lr_scheduler") or "the config"
            print(
                f"lightning-agents: error: lr_scheduler ({where}) needs an optimizer: section to schedule; "
                "the modules' built-in AdamW (model.lr) takes none. Add e.g. `optimizer: {class_path: "
                "torch.optim.AdamW, init_args: {lr: 1.0e-4}}`",
                file=sys.stderr,
            )
            sys.exit(2)
        build = lightning_cli.instantiate_class
        lightning_cli.instantiate_class = lambda args, init: _DeferredInit(init)
        try:
            super()._add_configure_optimizers_method_to_model(subcommand)
        finally:
            lightning_cli.instantiate_class = build

    @staticmethod
    def configure_optimizers(lightning_module: LightningModule, optimizer: Any, lr_scheduler: Any = None) -> Any:
        """Build the config's optimizer (and scheduler) over the module's parameters once they exist."""
        if isinstance(optimizer, _DeferredInit):
            optimizer = instantiate_class(lightning_module.parameters(), optimizer.init)
        if isinstance(lr_scheduler, _DeferredInit):
            lr_scheduler = instantiate_class(optimizer, lr_scheduler.init)
        return LightningCLI.configure_optimizers(lightning_module, optimizer, lr_scheduler)

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        super()._add_subcommands(parser, **kwargs)
        # Lightning lists each subcommand with its method's first docstring line, which for
        # Trainer.test stops mid-sentence ("... make sure you never run on your").
        for action in parser._subcommands_action._choices_actions:
            action.help = _SUBCOMMAND_HELP.get(action.dest, action.help)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Subcommands and the method arguments that come from the config rather than the command line."""
        tool = {"model", "datamodule"}
        trainer_loops = {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}
        return {**trainer_loops, **{name: tool for name in TOOL_SUBCOMMANDS}}

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        if subcommand in _TOOLS_WITHOUT_FIT_CONFIG:
            # Only --config and the tool's own arguments: Lightning's version would first add
            # seed_everything, trainer, model, data, optimizer and lr_scheduler (_add_arguments),
            # which these tools never read, to the parser and so to their --help.
            parser = self.init_parser(**kwargs)
            added = parser.add_method_arguments(klass, subcommand, skip=set(self.subcommands()[subcommand]))
            self._subcommand_method_arguments[subcommand] = added
            return parser
        # Remember which subcommand's parser is being built so the core arguments know whether a
        # model is required (it is not for teacher_cache, which reads a whole fit config).
        self._building = subcommand
        try:
            return super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        finally:
            self._building = None

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        if self._building not in TOOL_SUBCOMMANDS:
            super().add_core_arguments_to_parser(parser)
            return
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({"trainer." + k: v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=True, required=False)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=True, required=False)

    def _parse_ckpt_path(self) -> None:
        # export's and generate's own --ckpt_path: Lightning would parse the checkpoint's
        # hyperparameters into a `model` setting these tools do not have (and build that model just
        # to ignore it). Reading it with weights_only=True still refuses a file that is not a
        # checkpoint before any work starts (cli_main's one-line error).
        if self.config.get("subcommand") not in _TOOLS_WITHOUT_FIT_CONFIG:
            return super()._parse_ckpt_path()
        import torch

        ckpt_path = self.config[self.config.subcommand].get("ckpt_path")
        if ckpt_path and Path(ckpt_path).is_file():
            try:
                torch.load(ckpt_path, weights_only=True, map_location="cpu", mmap=_is_zip_file(ckpt_path))
            except (KeyError, EOFError, RuntimeError, ValueError) as exc:  # other ways a non-checkpoint fails
                raise pickle.UnpicklingError(f"{type(exc).__name__}: {exc}") from exc
        return None

    def _set_seed(self) -> None:
        # The tools without a fit config have no seed_everything (those that sample take --seed).
        if self.config.get("subcommand") not in _TOOLS_WITHOUT_FIT_CONFIG:
            super()._set_seed()

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        if self.subcommand in TOOL_SUBCOMMANDS:
            # The tools do not train: a quiet trainer, with no logger directories created.
            kwargs.setdefault("logger", False)
            kwargs.setdefault("enable_checkpointing", False)
            kwargs.setdefault("enable_progress_bar", False)
        if self.subcommand in _TOOLS_WITHOUT_FIT_CONFIG:
            kwargs.setdefault("callbacks", [])  # no trainer: section, so none from the config
        if self.subcommand not in TOOL_SUBCOMMANDS:
            return super().instantiate_trainer(**kwargs)
        # The trainer's start-up lines (GPU/TPU available, a logging tip) are about training, which
        # the tools do not do; they came before every tool's own output.
        startup = logging.getLogger("lightning.pytorch.utilities.rank_zero")
        level = startup.level
        startup.setLevel(logging.WARNING)
        try:
            return super().instantiate_trainer(**kwargs)
        finally:
            startup.setLevel(level)


# What to do about a model setting whose vocabulary differs from the student's. "Leave it unset"
# is right for the reference (a copy of the student), but an unset teacher is embedded:teacher.
_VOCAB_HINTS = {
    "teacher": (
        "name a teacher that shares the student's tokenizer (e.g. a larger model of the same family), or "
        "set model.guidance: false and model.teacher: null for plain GRPO (left unset, model.teacher is "
        "embedded:teacher)"
    ),
    "reference": "leave model.reference unset to use a copy of the initial student",
}


def _vocab_hint(exc: Exception, key: str) -> Exception:
    """``exc`` (a vocabulary mismatch of ``model.KEY``) with the hint that fits that setting."""
    generic = f"leave model.{key} unset to use the model's tokenizer"
    message = str(exc)
    if key not in _VOCAB_HINTS or not message.endswith(generic):
        return exc
    return type(exc)(message[: -len(generic)] + _VOCAB_HINTS[key])


def _is_zip_file(path: str | Path) -> bool:
    """Whether ``path`` is in torch's zip format, which ``torch.load(mmap=True)`` reads without loading it."""
    import zipfile

    return zipfile.is_zipfile(path)


def _init_args(section: Any):
    """The ``init_args`` namespace of a ``class_path`` section (``None`` when absent)."""
    if section is None:
        return None
    init_args = section.get("init_args") if hasattr(section, "get") else None
    return init_args if init_args is not None else None


def cli_main(args: list[str] | None = None, run: bool = True) -> AgentsCLI:
    """Run the CLI on ``args`` (``sys.argv[1:]`` when None) and return it, for tests and notebooks.

    Bad input (a missing file or checkpoint, a malformed record, an unknown setting or choice, a
    tokenizer whose vocabulary differs from the model's, a ``--config`` file that is not YAML or
    sets a key twice, a GPU config on a machine without one) ends with one line
    ``lightning-agents: error: <setting>: <problem> (<file>:<line>)`` on stderr and ``SystemExit(2)``;
    set ``LIGHTNING_AGENTS_TRACEBACK=1`` to see the traceback instead.
    """
    command_line = [str(a) for a in (sys.argv[1:] if args is None else args)]
    rewritten = nested_class_help(command_line)
    if rewritten != command_line:
        command_line = rewritten
        if args is None:
            sys.argv[1:] = rewritten  # in place, as main() does: LightningCLI warns when given both
        else:
            args = rewritten
    _refuse_unused_trainer_flags(command_line)
    AgentsArgumentParser.start_dir = os.getcwd()
    AgentsArgumentParser.command_line = command_line
    AgentsArgumentParser.config_files = _config_files(command_line)
    _refuse_unreadable_configs(AgentsArgumentParser.config_files)
    try:
        return AgentsCLI(
            trainer_class=AgentsTrainer,
            parser_class=AgentsArgumentParser,
            args=args,
            run=run,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={"description": _DESCRIPTION, "teacher_cache": {"description": _TEACHER_CACHE_DESCRIPTION}},
        )
    except pickle.UnpicklingError as exc:
        # Lightning's CLI reads --ckpt_path's hyperparameters before any command runs
        if os.environ.get("LIGHTNING_AGENTS_TRACEBACK"):
            raise
        ckpt = next((command_line[i + 1] for i, a in enumerate(command_line[:-1]) if a == "--ckpt_path"), "?")
        print(
            f"lightning-agents: error: ckpt_path: {ckpt} is not a checkpoint this package wrote (torch.load with "
            f"weights_only=True refused it: {type(exc).__name__})",
            file=sys.stderr,
        )
        sys.exit(2)
    except Exception as exc:
        # jsonargparse wraps what a constructor raises (e.g. RSTG's num_generations check) in its
        # own "does not validate" report: the package's error inside is the one to show
        cause = _input_error_in(exc)
        if os.environ.get("LIGHTNING_AGENTS_TRACEBACK") or cause is None:
            raise
        print(f"lightning-agents: error: {_located(str(cause))}", file=sys.stderr)
        sys.exit(2)


def _located(message: str) -> str:
    """``message`` with where its setting was set: from the setting it starts with, or else from
    the value it quotes (``conversation file X does not exist`` is about the setting whose value is X)."""
    where = _message_location(message) or _backbone_location(message)
    if where or re.search(r"\(\S+:\d+\)|\(command line\)", message):
        return message + where
    found = _setting_holding(message)
    if found is None:
        return message
    setting, where = found
    named = message.startswith(f"{setting}:") or message.startswith(f"{setting.split('.')[-1]}:")
    return f"{message} ({where})" if named else f"{setting}: {message} ({where})"


def _backbone_location(message: str) -> str:
    """`` (file:line)`` of the backbone a ``backbone 'NAME' has no input_price`` or ``backbone 'NAME':
    output_price must be ...`` message names: the price's line, or the item's ``name:`` line when
    the price is missing; "" when no config file lists that backbone."""
    import yaml

    found = re.match(r"backbone '([^']+)'(?: has no (\w+)|: (\w+))", message)
    if found is None:
        return ""
    name, key = found.group(1), found.group(2) or found.group(3)
    for file, root in _config_trees(AgentsArgumentParser.config_files):
        for item in _backbone_items(root):
            named = _nodes_of_keys(item, ["name"])
            if named is None or not isinstance(named[1], yaml.ScalarNode) or named[1].value != name:
                continue
            node = (_nodes_of_keys(item, [key]) or named)[0]
            return f" ({file}:{node.start_mark.line + 1})"
    return ""


def _backbone_items(node: Any):
    """Every item of a ``backbones:`` list under a YAML node (evolve's top level, or an
    ``HFlowCallback``'s ``init_args`` in ``trainer.callbacks``)."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _backbone_items(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if getattr(key, "value", None) == "backbones" and isinstance(value, yaml.SequenceNode):
                yield from (item for item in value.value if isinstance(item, yaml.MappingNode))
            else:
                yield from _backbone_items(value)


def _setting_holding(message: str) -> tuple[str, str] | None:
    """``(setting, file:line or "command line")`` of the last-set value that ``message`` quotes; None if none does."""
    line = AgentsArgumentParser.command_line
    for flag, value in reversed(list(zip(line, line[1:]))):
        # `curate --rollouts a.json b.json` reaches the parser as `--rollouts "[a.json, b.json]"`
        items = [v.strip() for v in value.strip("[]").split(",")] if value.startswith("[") else [value]
        if flag.startswith("--") and flag != "--config" and any(_quotes(message, v) for v in items):
            return flag[2:], "command line"
    for file, root in _config_trees(AgentsArgumentParser.config_files):
        for setting, node in _scalars(root):
            if _quotes(message, node.value):
                return setting, f"{file}:{node.start_mark.line + 1}"
    return None


def _quotes(message: str, value: str) -> bool:
    """Whether ``message`` names ``value`` as a whole word and it is a path or model name (a ``/``,
    ``:`` or file suffix in it): a short word such as a logger's name ``muzo`` is in many messages."""
    try:
        float(value)
        return False  # a number (`0.002`) is no file or model
    except ValueError:
        pass
    if not re.search(r"[/:\\]|\.\w+$", value):
        return False
    return re.search(rf"(?:^|[\s'\"`(]){re.escape(value)}(?:$|[\s'\"`),;])", message) is not None


def _scalars(node: Any, prefix: str = ""):
    """``(dotted setting, scalar node)`` of every scalar value under a YAML node."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        yield prefix.rstrip("."), node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item, prefix)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _scalars(value, f"{prefix}{key.value}.")


def config_file_problem(path: str) -> str | None:
    """What is wrong with a ``--config`` file, as ``file:line: problem``; None when it reads as settings.

    PyYAML lets the later of two equal keys win without a word, so a config with ``lr:`` twice
    trained at whichever came last; jsonargparse's own messages for a file that is not YAML, or
    not a mapping, named neither the file nor (for the latter) the problem.
    """
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # not a readable file (jsonargparse also takes a config as a string): its own error
    try:
        root = _compose_config(text)
    except yaml.YAMLError as exc:
        if _is_json(text):
            return _json_duplicate_key(text, path)  # JSON that YAML cannot read even without tabs
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{where}: not valid YAML ({problem})"
    if root is None:
        return None
    if not isinstance(root, yaml.MappingNode):
        return (
            f"{path}:{root.start_mark.line + 1}: a config file holds `setting: value` lines, not {text.strip()[:40]!r}"
        )
    return _duplicate_key(root, path)


def _compose_config(text: str) -> Any:
    """The YAML node tree of a config file's text, JSON indented with tabs included.

    YAML forbids tabs in indentation, but ``json.dump(cfg, f, indent="\\t")`` writes valid JSON,
    which jsonargparse reads; JSON allows a tab only as whitespace (inside a string it must be
    escaped), so such a file reads as YAML, with the same lines, once its tabs are spaces.
    Raises ``yaml.YAMLError`` when the text is neither.
    """
    import yaml

    try:
        return yaml.compose(text)
    except yaml.YAMLError:
        if "\t" not in text or not _is_json(text):
            raise
        return yaml.compose(text.replace("\t", " "))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _json_duplicate_key(text: str, path: str) -> str | None:
    """``file:line: key is set twice`` for the first key repeated in one JSON object. The parser
    gives no lines: the line is the key's second ``"key":`` in the text when it occurs just twice,
    and is left out when it occurs more often (other objects may hold the same key)."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in items]
        repeated.extend(name for i, name in enumerate(names) if name in names[:i])
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    if not repeated:
        return None
    name = repeated[0]
    key = re.compile(rf"{re.escape(json.dumps(name, ensure_ascii=False))}\s*:")
    lines = [i + 1 for i, line in enumerate(text.splitlines()) for _ in key.finditer(line)]
    where = f"{path}:{lines[1]}" if len(lines) == 2 else path
    return f"{where}: {name} is set twice in one object; JSON would keep the later value without a word: remove one"


def _duplicate_key(node: Any, path: str, prefix: str = "") -> str | None:
    """``file:line: setting is set twice ...`` for the first key repeated in one YAML mapping."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return next((found for item in node.value if (found := _duplicate_key(item, path, prefix))), None)
    if not isinstance(node, yaml.MappingNode):
        return None
    first: dict[str, int] = {}
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else None
        line = key.start_mark.line + 1
        if name is not None and name in first:
            return (
                f"{path}:{line}: {prefix}{name} is set twice (also at line {first[name]}); YAML would keep "
                "the later value without a word: remove one"
            )
        if name is not None:
            first[name] = line
        found = _duplicate_key(value, path, f"{prefix}{name}." if name is not None else prefix)
        if found:
            return found
    return None


def _refuse_unreadable_configs(files: list[str]) -> None:
    """Exit with one line for the first ``--config`` file that is not YAML settings or repeats a key."""
    for file in files:
        problem = config_file_problem(file)
        if problem:
            print(f"lightning-agents: error: --config {problem}", file=sys.stderr)
            sys.exit(2)


_NESTED_HELP = re.compile(r"--(model|data)\.(?:init_args\.)?(\w+)\.help$")


def nested_class_help(argv: list[str]) -> list[str]:
    """``fit --model SFTModule --model.adapter.help [AdapterConfig]`` rewritten as jsonargparse
    understands it: ``fit --model.help SFTModule --model.adapter.help``.

    The help of a dataclass setting of a module (``adapter``, ``quantization``, a datamodule's
    ``selection``) is an option of the module's own parser that takes no value; jsonargparse (4.53)
    hands every ``--model.*`` option that follows ``--model CLASS`` to that parser *with* a value,
    so ``--model.adapter.help`` alone is "--model: expected one argument" and with the class named
    it is "ignored explicit argument". It only works after ``--model.help CLASS``. The class comes
    from the command line (``--model CLASS``) or the last ``--config`` file that names one.
    """
    subcommand = next((a for a in argv if not a.startswith("-")), None)
    if subcommand not in ("fit", "validate", "test", "teacher_cache"):
        return argv
    for j, arg in enumerate(argv):
        flag, _, inline = arg.partition("=")
        match = _NESTED_HELP.match(flag)
        if match is None:
            continue
        section, setting = match.groups()
        value = inline or None
        if not inline and j + 1 < len(argv) and not argv[j + 1].startswith("-"):
            value = argv[j + 1]
        class_name = _section_class(argv[:j], section)
        dataclass = _dataclass_of(class_name, setting) if class_name else None
        if dataclass is None:
            return argv  # not a dataclass setting: left to jsonargparse
        name, optional = dataclass
        if not optional:
            # a required dataclass is a group of the class's own help (--data.selection.*)
            return [subcommand, f"--{section}.help", class_name]
        if value is not None and value.rsplit(".", 1)[-1] == name:
            value = None  # naming the setting's only type: the nested help takes no value
        return [subcommand, f"--{section}.help", class_name, f"--{section}.{setting}.help"] + (
            [value] if value is not None else []
        )
    return argv


def _section_class(argv: list[str], section: str) -> str | None:
    """The class named for ``model``/``data`` by ``--model CLASS`` or else the config files."""
    import yaml

    names = [
        argv[i + 1] if a == f"--{section}" else a.split("=", 1)[1]
        for i, a in enumerate(argv)
        if (a == f"--{section}" and i + 1 < len(argv)) or a.startswith(f"--{section}=")
    ]
    names = [n for n in names if re.fullmatch(r"[\w.]+", n)]
    if names:
        return names[-1]
    for file in reversed(_config_files(argv)):
        try:
            config = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        value = config.get(section) if isinstance(config, dict) else None
        value = value.get("class_path") if isinstance(value, dict) else value
        if isinstance(value, str) and re.fullmatch(r"[\w.]+", value):
            return value
    return None


def _dataclass_of(class_name: str, setting: str) -> tuple[str, bool] | None:
    """Name of the one dataclass an ``__init__`` argument takes and whether it may be None
    (``AdapterConfig | None``: ``("AdapterConfig", True)``); None for any other argument."""
    import dataclasses
    import importlib
    import typing

    module_name, _, name = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name) if module_name else lightning_agents, name)
        hint = typing.get_type_hints(cls.__init__).get(setting)
    except Exception:  # noqa: BLE001 - unknown class or unresolvable hints: jsonargparse reports it
        return None
    args = typing.get_args(hint) or (hint,)
    types = [t for t in args if t is not type(None)]
    if len(types) == 1 and isinstance(types[0], type) and dataclasses.is_dataclass(types[0]):
        return types[0].__name__, len(types) < len(args)
    return None


# List-valued file flags that accept several paths argparse-style, per subcommand (``export
# --merge false`` is a bool and must stay one value).
_MULTI_VALUE_FLAGS = {"curate": ("--rollouts", "--ground_truth", "--merge")}


def _expand_multi_value_flags(argv: list[str]) -> list[str]:
    """Allow ``curate --rollouts a.json b.json`` (argparse style) besides jsonargparse's
    ``--rollouts '[a, b]'`` (also ``--ground_truth`` and ``--merge``)."""
    subcommand = next((a for a in argv if a in ("fit", "validate", "test", *TOOL_SUBCOMMANDS)), None)
    flags = _MULTI_VALUE_FLAGS.get(subcommand, ())
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in flags:
            values = []
            while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                values.append(argv[i + 1])
                i += 1
            out += [arg, "[" + ", ".join(values) + "]"] if values else [arg]
        else:
            out.append(arg)
        i += 1
    return out


# Settings of Lightning's fit config that the tool subcommands never read (teacher_cache reads
# the fit config it is given, so it is not among them).
_FIT_SECTIONS = ("--trainer", "--model", "--data", "--optimizer", "--lr_scheduler", "--seed_everything")


def _refuse_unused_trainer_flags(command_line: list[str]) -> None:
    """``curate --trainer.max_steps 5`` names an option of ``fit``: refused with one line saying so
    (the tools' parsers do not have those options; jsonargparse alone would say "no such setting")."""
    tool = next((a for a in command_line if not a.startswith("-")), None)
    if tool not in _TOOLS_WITHOUT_FIT_CONFIG:
        return
    unused = [
        a.split("=", 1)[0]
        for a in command_line
        if a.split("=", 1)[0] in _FIT_SECTIONS or a.startswith(tuple(f"{s}." for s in _FIT_SECTIONS))
    ]
    if unused:
        print(
            f"lightning-agents: error: {tool} does not use {', '.join(unused)} (an option of fit; "
            f"`lightning-agents {tool} --help` lists what {tool} reads)",
            file=sys.stderr,
        )
        sys.exit(2)


def _input_error_in(exc: BaseException) -> BaseException | None:
    """The first error about the user's input along ``exc``'s chain of causes (None: a bug, shown
    with its traceback)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _is_input_error(exc):
            return exc
        # only an explicit `raise ... from`: an error raised while handling one (__context__)
        # may be a bug, whose traceback must show
        exc = exc.__cause__
    return None


def _message_location(message: str) -> str:
    """`` (file:line)`` of the setting an error message starts with (``model.num_generations must
    be ...``), when a config file sets it and the message does not say where already."""
    if re.search(r"\(\S+:\d+\)|\(command line\)", message):
        return ""
    match = re.match(r"([A-Za-z_]\w*(?:\.\w+)+)\b", message)
    # a datamodule's or module's own message may name its setting without the section
    prefixes = ("", "data.", "model.")
    if match is None:
        # an optimizer's or scheduler's own message names its class, then the argument
        # (`MUZOAdam: num_queries must be ...`): those sections are the only ones built that way
        match = re.match(r"[A-Z]\w*: ([a-z_]\w*)\b", message)
        prefixes = ("optimizer.", "lr_scheduler.")
    if match is None:
        return ""
    for prefix in prefixes:
        where = setting_location(prefix + match.group(1))
        if where:
            return f" ({where})"
    return ""


def _is_input_error(exc: BaseException) -> bool:
    """Errors about the user's files or settings, raised by this package: shown without a traceback."""
    if isinstance(exc, FileNotFoundError) or type(exc).__module__.startswith("lightning_agents"):
        return True
    if isinstance(exc, ValueError):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and f"{os.sep}lightning_agents{os.sep}" in tb.tb_frame.f_code.co_filename
    return False


def main() -> None:
    """Console entry point ``lightning-agents``.

    Bad input (a missing file, a malformed record, an invalid setting) ends with a one-line
    ``lightning-agents: error: ...`` and exit status 2; set ``LIGHTNING_AGENTS_TRACEBACK=1`` to see
    the traceback instead.
    """
    # Rewrite argv in place rather than passing args, which LightningCLI would warn about.
    sys.argv[1:] = _expand_multi_value_flags(sys.argv[1:])
    cli_main()


if __name__ == "__main__":
    main()
