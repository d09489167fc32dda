"""One task layer for every method: problems per split, prompts, verification, tools and worlds.

A task is a :class:`Task`; RSTG's prompt data, HFlow's evaluation, ``lightning-agents rollout`` and
TopoCurate's RL output take one by class path. Pure Python: importing this package loads neither
torch nor Lightning.
"""

from lightning_agents.tasks.answers import (
    extract_code,
    extract_gsm8k_answer,
    extract_program,
    extract_stated_answer,
    last_boxed,
    strip_reasoning,
)
from lightning_agents.tasks.arithmetic import (
    CALCULATOR_TOOL,
    ArithmeticTask,
    ArithmeticVerifier,
    CalculatorTask,
    CalculatorWorld,
    arithmetic_conversation,
    calculator,
    make_arithmetic_split,
)
from lightning_agents.tasks.base import Problem, Task, class_path
from lightning_agents.tasks.code import HumanEvalTask
from lightning_agents.tasks.gsm8k import GSM8KTask, GSM8KVerifier
from lightning_agents.tasks.math import BoxedMathTask, BoxedMathVerifier
from lightning_agents.tasks.registry import TaskSpecError, build_task, load_task
from lightning_agents.tasks.tools import ToolWorld

__all__ = [
    "ArithmeticTask",
    "ArithmeticVerifier",
    "BoxedMathTask",
    "BoxedMathVerifier",
    "CALCULATOR_TOOL",
    "CalculatorTask",
    "CalculatorWorld",
    "GSM8KTask",
    "GSM8KVerifier",
    "HumanEvalTask",
    "Problem",
    "Task",
    "TaskSpecError",
    "ToolWorld",
    "arithmetic_conversation",
    "build_task",
    "calculator",
    "class_path",
    "extract_code",
    "extract_gsm8k_answer",
    "extract_program",
    "extract_stated_answer",
    "last_boxed",
    "strip_reasoning",
    "load_task",
    "make_arithmetic_split",
]
