"""Accuracy of a model on verifiable problems, through the shared generation path."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig

__all__ = ["evaluate_accuracy"]


def evaluate_accuracy(
    engine: HFGenerationEngine,
    prompts: Sequence,
    references: Sequence[str],
    verifier: Callable[[str, str], float],
    batch_size: int = 64,
    max_new_tokens: int = 32,
) -> dict[str, float]:
    """Greedy-decode every prompt and average the verifier's scores.

    Args:
        engine: the generation engine wrapping the model under test.
        prompts: prompt strings or message lists.
        references: the gold reference of each prompt, handed to ``verifier``.
        verifier: ``verifier(completion, reference) -> float`` in [0, 1].
        batch_size: prompts per ``generate`` call.
        max_new_tokens: completion length limit.

    Returns:
        ``{"accuracy", "truncated", "n"}``: mean score, fraction of completions cut at the limit,
        number of problems.
    """
    if len(prompts) != len(references):
        raise ValueError(f"{len(prompts)} prompts but {len(references)} references")
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, do_sample=False)
    total, truncated = 0.0, 0
    for start in range(0, len(prompts), batch_size):
        out = engine.generate(list(prompts[start : start + batch_size]), sampling=sampling)
        total += sum(verifier(text, ref) for text, ref in zip(out.texts, references[start : start + batch_size]))
        truncated += int(out.truncated.sum())
    n = len(prompts)
    return {"accuracy": total / max(n, 1), "truncated": truncated / max(n, 1), "n": float(n)}
