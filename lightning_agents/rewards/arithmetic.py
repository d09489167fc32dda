"""Old home of the embedded task; it lives in :mod:`lightning_agents.tasks.arithmetic` now.

Re-exports only, so that configs and rollout files naming
``lightning_agents.rewards.arithmetic.ArithmeticVerifier`` and older imports keep working.
"""

from lightning_agents.tasks.arithmetic import (
    CALCULATOR_TOOL,
    PROGRAM_SYSTEM_PROMPT,
    SPLIT_SIZES,
    ArithmeticVerifier,
    arithmetic_conversation,
    calculator,
    extract_final_answer,
    make_arithmetic_split,
)

__all__ = [
    "ArithmeticVerifier",
    "CALCULATOR_TOOL",
    "PROGRAM_SYSTEM_PROMPT",
    "SPLIT_SIZES",
    "arithmetic_conversation",
    "calculator",
    "extract_final_answer",
    "make_arithmetic_split",
]
