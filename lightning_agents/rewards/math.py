"""``\\boxed{}`` answer checking; the verifier and its extractor live in :mod:`lightning_agents.tasks.math`."""

from lightning_agents.tasks.math import BoxedMathVerifier, last_boxed, normalize_latex

__all__ = ["BoxedMathVerifier", "last_boxed", "normalize_latex"]
