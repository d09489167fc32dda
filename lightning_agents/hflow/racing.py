"""Racing children on the search problems: a child clearly worse than its parent, or far below the
population's best, on the problems run so far is not run on the rest.

Most children of an evolutionary search are worse than their parents, and a full evaluation of
each is most of a search's budget. Racing (Maron and Moore's Hoeffding races; irace) runs
children in stages of ``first``, ``2 first``, ``4 first`` ... problems, then all, and drops a child
once it is clearly behind. Parents and the leader are already evaluated on every search problem,
so each comparison reads the cache and costs nothing; the margin shrinks like a standard error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from lightning_agents.hflow.evaluation import EvalResult
from lightning_agents.hflow.genome import Workflow

__all__ = ["race"]


def race(
    children: list[tuple[Workflow, Workflow]],
    leader: Workflow,
    problems: list[dict[str, Any]],
    first: int,
    margin: float,
    evaluate_many: Callable[[list[Workflow], list[dict[str, Any]]], list[EvalResult]],
    evaluate: Callable[[Workflow, list[dict[str, Any]]], EvalResult],
) -> tuple[set[str], dict[str, int]]:
    """Race ``children`` (``(child, parent)`` pairs) on prefixes of ``problems``.

    Args:
        children: each child with the parent it is compared with.
        leader: the population's best; a child more than twice the margin below it on the
            problems run so far cannot become the best.
        problems: the search problems, in the order the stages take them.
        first: problems in the first stage (0: no racing).
        margin: how far below its parent a child may fall at the first stage and still go on;
            at ``m`` problems the margin is ``margin * sqrt(first / m)``.
        evaluate_many: scores several workflows on some problems (in parallel where it can).
        evaluate: scores one workflow on some problems (cached for parents and the leader).

    Returns:
        The hashes of the children screened out, and the new problem runs spent per child hash
        (a child listed twice is run and charged once).
    """
    screened_out: set[str] = set()
    runs: dict[str, int] = {}
    live = list(children)
    m = first
    while 0 < m < len(problems) and live:
        head = problems[:m]
        stage_margin = margin * math.sqrt(first / m)
        quick = evaluate_many([child for child, _ in live], head)
        best_ref = evaluate(leader, head).fitness
        survivors = []
        charged: set[str] = set()
        for (child, parent), res in zip(live, quick):
            h = child.hash()
            if h not in charged:
                charged.add(h)
                runs[h] = runs.get(h, 0) + res.new_runs
            ref = evaluate(parent, head).fitness
            if res.fitness < ref - stage_margin or res.fitness < best_ref - 2 * stage_margin:
                screened_out.add(h)
            elif h not in screened_out:
                survivors.append((child, parent))
        live = survivors
        m *= 2
    return screened_out, runs
