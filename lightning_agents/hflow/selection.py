"""Ranking and the final choice: Pareto fronts and the preference-aware pick of the returned workflow."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["choose_workflow", "pareto_front"]


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Non-domination rank (0 = front) of each ``(accuracy, cost)`` point; higher accuracy and lower cost win."""
    ranks = [0] * len(points)
    remaining = set(range(len(points)))
    rank = 0
    while remaining:
        front = {
            i
            for i in remaining
            if not any(
                points[j][0] >= points[i][0] and points[j][1] <= points[i][1] and points[j] != points[i]
                for j in remaining
            )
        }
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


def choose_workflow(
    individuals: Sequence[Any],
    preference: Callable[[Any], float] | None,
    delta: float,
    has_preferences: bool,
    contenders: Sequence[Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The workflow to return and a report of how preferences changed the choice.

    Contenders are the individuals whose fitness is within ``delta`` of the best; among them the
    one the preference model scores highest wins (fitness, then lower cost, break ties). Without
    any answered preference the best fitness wins.

    Args:
        individuals: objects with ``fitness``, ``accuracy``, ``cost``, ``hash`` and ``workflow``.
        preference: ``individual -> predicted preference score``.
        delta: fitness slack that preferences may trade away.
        has_preferences: whether any comparison was answered.
        contenders: the individuals within reach of the best, when the caller decides that
            (``SearchConfig.preference_delta_se``); default: fitness within ``delta`` of the best.
    """
    if not individuals:
        raise ValueError("nothing to choose from")
    by_fitness = max(individuals, key=lambda i: (i.fitness, -i.cost, i.hash))
    if contenders is None:
        contenders = [i for i in individuals if i.fitness >= by_fitness.fitness - delta - 1e-12]
    elif not contenders:
        raise ValueError("no contenders to choose from")
    if preference is None or not has_preferences:
        chosen = by_fitness
        scores: dict[str, float] = {}
    else:
        scores = {i.hash: preference(i) for i in contenders}
        chosen = max(contenders, key=lambda i: (scores[i.hash], i.fitness, -i.cost, i.hash))
    report = {
        "chosen": chosen.hash,
        "by_fitness": by_fitness.hash,
        "changed_by_preferences": chosen.hash != by_fitness.hash,
        "delta": delta,
        "contenders": len(contenders),
        "fitness_given_up": by_fitness.fitness - chosen.fitness,
        "preference_scores": {h: round(v, 4) for h, v in sorted(scores.items(), key=lambda kv: -kv[1])[:10]},
    }
    return chosen, report
