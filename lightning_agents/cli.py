"""The ``lightning-agents`` command: LightningCLI with fit/validate/test and the extra tools.

``curate``, ``evolve``, ``rollout``, ``export`` and ``generate`` are registered the Lightning way: they are methods of
:class:`AgentsTrainer` (contributed by mixins in :mod:`lightning_agents.commands`) listed in
:meth:`AgentsCLI.subcommands`, so their arguments, ``--help`` and ``--config`` handling come from
the same jsonargparse machinery as ``fit``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

import lightning_agents
from lightning_agents.commands import CurateCommand, EvolveCommand, ExportCommand, GenerateCommand, RolloutCommand

# Import every LightningModule, DataModule, Callback and Strategy of the package, so configs can
# name them by short class name.
lightning_agents.import_all()

__all__ = ["AgentsCLI", "AgentsTrainer", "cli_main", "main"]

# Subcommands that run a tool rather than a Trainer loop: no model or datamodule is required.
TOOL_SUBCOMMANDS = ("curate", "evolve", "rollout", "export", "generate")


class AgentsTrainer(CurateCommand, EvolveCommand, RolloutCommand, ExportCommand, GenerateCommand, Trainer):
    """Lightning's Trainer plus the ``curate``, ``evolve``, ``rollout``, ``export`` and ``generate`` tools."""


class AgentsCLI(LightningCLI):
    """LightningCLI for lightning-agents: fit, validate, test plus curate, evolve, rollout, export, generate.

    Lightning's ``predict`` is not offered: the modules generate and score rather than map batches
    to outputs, and ``generate`` does that over a prompt file from a checkpoint or a model folder.
    """

    _building: str | None = None

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Subcommands and the method arguments that come from the config rather than the command line."""
        tool = {"model", "datamodule"}
        trainer_loops = {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}
        return {**trainer_loops, **{name: tool for name in TOOL_SUBCOMMANDS}}

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        # Remember which subcommand's parser is being built so the core arguments know whether a
        # model is required (it is not for the tool subcommands).
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

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        if self.subcommand in TOOL_SUBCOMMANDS:
            # The tools do not train: a quiet CPU trainer, with no logger directories created.
            kwargs.setdefault("logger", False)
            kwargs.setdefault("enable_checkpointing", False)
            kwargs.setdefault("enable_progress_bar", False)
        return super().instantiate_trainer(**kwargs)


def cli_main(args: list[str] | None = None, run: bool = True) -> AgentsCLI:
    """Run the CLI on ``args`` (``sys.argv[1:]`` when None) and return it, for tests and notebooks."""
    return AgentsCLI(
        trainer_class=AgentsTrainer,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
    )


# List-valued file flags that accept several paths argparse-style.
_MULTI_VALUE_FLAGS = ("--rollouts", "--ground_truth", "--merge")


def _expand_multi_value_flags(argv: list[str]) -> list[str]:
    """Allow ``--rollouts a.json b.json`` (argparse style) besides jsonargparse's ``--rollouts '[a, b]'``
    (also ``--ground_truth`` and ``--merge``)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _MULTI_VALUE_FLAGS:
            values = []
            while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                values.append(argv[i + 1])
                i += 1
            out += [arg, "[" + ", ".join(values) + "]"] if values else [arg]
        else:
            out.append(arg)
        i += 1
    return out


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
    try:
        cli_main()
    except Exception as exc:
        if os.environ.get("LIGHTNING_AGENTS_TRACEBACK") or not _is_input_error(exc):
            raise
        print(f"lightning-agents: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
