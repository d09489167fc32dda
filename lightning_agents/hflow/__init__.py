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
from lightning_agents.hflow.baselines import (
    aflow_search,
    hill_climb,
    random_search,
    regularized_evolution,
)
from lightning_agents.hflow.config import SearchConfig
from lightning_agents.hflow.evaluation import EvalResult, Evaluator, Individual
from lightning_agents.hflow.factory import build_rater, build_search, split_problems
from lightning_agents.hflow.genome import AGENT_OPERATORS, OPERATORS, Node, Workflow, WorkflowError, operators_for
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.mutation import Mutator
from lightning_agents.hflow.operators import Trace, WorkflowExecutor, episode_transcript
from lightning_agents.hflow.preference_model import PreferenceModel
from lightning_agents.hflow.preferences import (
    Comparison,
    FileRater,
    InteractiveRater,
    PreferenceStore,
    SimulatedRater,
    bradley_terry,
)
from lightning_agents.hflow.reflection import ReflectiveOptimizer
from lightning_agents.hflow.search import HFlowSearch
from lightning_agents.hflow.selection import choose_workflow, pareto_front
from lightning_agents.tasks import (
    ArithmeticTask,
    GSM8KTask,
    HumanEvalTask,
    Task,
    build_task,
)

__all__ = [
    "AGENT_OPERATORS",
    "OPERATORS",
    "ArithmeticTask",
    "Backbone",
    "BackboneError",
    "BackbonePool",
    "BackboneSpec",
    "Comparison",
    "Completion",
    "ConfigError",
    "EvalResult",
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
    "PreferenceModel",
    "PreferenceStore",
    "ReflectiveOptimizer",
    "Request",
    "SearchConfig",
    "SimulatedRater",
    "Task",
    "Trace",
    "Workflow",
    "WorkflowError",
    "WorkflowExecutor",
    "aflow_search",
    "bradley_terry",
    "build_backbone",
    "build_rater",
    "build_search",
    "build_task",
    "choose_workflow",
    "episode_transcript",
    "hill_climb",
    "operators_for",
    "pareto_front",
    "random_search",
    "regularized_evolution",
    "split_problems",
]
