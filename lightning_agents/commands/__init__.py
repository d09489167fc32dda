"""Extra CLI subcommands, each a mixin that contributes one method to ``AgentsTrainer``."""

from lightning_agents.commands.convert import ConvertCommand
from lightning_agents.commands.curate import CurateCommand
from lightning_agents.commands.evolve import EvolveCommand
from lightning_agents.commands.export import ExportCommand
from lightning_agents.commands.generate import GenerateCommand
from lightning_agents.commands.rollout import RolloutCommand
from lightning_agents.commands.teacher_cache import TeacherCacheCommand

__all__ = [
    "ConvertCommand",
    "CurateCommand",
    "EvolveCommand",
    "ExportCommand",
    "GenerateCommand",
    "RolloutCommand",
    "TeacherCacheCommand",
]
