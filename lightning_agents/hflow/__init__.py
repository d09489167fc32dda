"""HFlow: evolve agentic workflows (structure, prompts, backbones) with human preferences and memory.

Pure logic with no Lightning import; :class:`lightning_agents.callbacks.HFlowCallback` and
``lightning-agents evolve`` are the adapters on top.
"""

from lightning_agents.hflow.backbones import (
    Backbone,
    BackboneError,
    BackbonePool,
    BackboneSpec,
    Completion,
    ConfigError,
    Ledger,
    LocalHFBackbone,
    OpenAIBackbone,
    Request,
    build_backbone,
)
from lightning_agents.hflow.evolution import (
    Evaluator,
    HFlowSearch,
    Individual,
    Mutator,
    SearchConfig,
    hill_climb,
    pareto_front,
    random_search,
)
from lightning_agents.hflow.genome import OPERATORS, Node, Workflow, WorkflowError
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.operators import Trace, WorkflowExecutor
from lightning_agents.hflow.preferences import (
    Comparison,
    FileRater,
    InteractiveRater,
    PreferenceStore,
    SimulatedRater,
    bradley_terry,
)
from lightning_agents.tasks import ArithmeticTask, GSM8KTask, HumanEvalTask, Task, build_task

__all__ = [
    "OPERATORS",
    "ArithmeticTask",
    "Backbone",
    "BackboneError",
    "BackbonePool",
    "BackboneSpec",
    "Comparison",
    "Completion",
    "ConfigError",
    "Evaluator",
    "ExperienceMemory",
    "FileRater",
    "GSM8KTask",
    "HFlowSearch",
    "HumanEvalTask",
    "Individual",
    "InteractiveRater",
    "Ledger",
    "LocalHFBackbone",
    "Mutator",
    "Node",
    "OpenAIBackbone",
    "PreferenceStore",
    "Request",
    "SearchConfig",
    "SimulatedRater",
    "Task",
    "Trace",
    "Workflow",
    "WorkflowError",
    "WorkflowExecutor",
    "bradley_terry",
    "build_backbone",
    "build_task",
    "hill_climb",
    "pareto_front",
    "random_search",
]
