"""Verifiable rewards: the embedded task, GSM8K, boxed math, sandboxed code, and parallel scoring."""

from lightning_agents.rewards.code import CodeVerifier, ProgramOutputVerifier
from lightning_agents.rewards.registry import RewardScorer, ScoreResult, resolve_verifier
from lightning_agents.rewards.sandbox import SandboxResult, run_python
from lightning_agents.tasks.arithmetic import ArithmeticVerifier
from lightning_agents.tasks.gsm8k import GSM8KVerifier
from lightning_agents.tasks.math import BoxedMathVerifier

__all__ = [
    "ArithmeticVerifier",
    "BoxedMathVerifier",
    "CodeVerifier",
    "GSM8KVerifier",
    "ProgramOutputVerifier",
    "RewardScorer",
    "SandboxResult",
    "ScoreResult",
    "resolve_verifier",
    "run_python",
]
