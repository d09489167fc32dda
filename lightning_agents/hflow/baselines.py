"""Baseline searches HFlow is compared with, all spending the same budget units.

Each takes an executor and the search problems and stops when ``budget`` problem runs or
``cost_budget`` (ledger dollars, when given) are spent. Each returns ``{"best", "best_fitness",
"best_accuracy", "trajectory": [(problem runs, best fitness, its accuracy, dollars so far, its hash)], "workflows": {hash: dict},
"problem_runs", "cost"}``.

- :func:`random_search`: random valid workflows.
- :func:`hill_climb`: one random edit at a time from the current best, kept if not worse.
- :func:`regularized_evolution`: aging evolution (Real et al., 2019): tournament parent, one
  edit, the oldest member dies.
- :func:`aflow_search`: AFlow's loop without its LLM optimizer: a parent drawn from the top
  workflows by a mix of uniform and score-softmax probabilities, one edit, experience that forbids
  repeating an edit that failed on the same parent.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any

from lightning_agents.hflow.evaluation import Evaluator
from lightning_agents.hflow.genome import Workflow, has_tools
from lightning_agents.hflow.mutation import Mutator, default_seeds
from lightning_agents.hflow.operators import WorkflowExecutor

__all__ = ["aflow_search", "hill_climb", "random_search", "regularized_evolution"]


class _Run:
    def __init__(
        self,
        executor: WorkflowExecutor,
        problems,
        budget: int,
        cost_budget: float | None,
        seed: int,
        max_nodes: int,
        lambda_cost: float,
    ) -> None:
        self.rng = random.Random(seed)
        self.ev = Evaluator(executor, lambda_cost)
        self.problems = problems
        self.budget, self.cost_budget = budget, cost_budget
        self.ledger = executor.pool.ledger
        self.cost0 = self.ledger.total_cost()
        self.agent_task = has_tools(executor.task)
        self.mutator = Mutator(
            executor.pool.names,
            self.rng,
            max_nodes,
            code_task=executor.task.domain == "code",
            agent_task=self.agent_task,
        )
        self.seen: dict[str, tuple[float, float]] = {}
        self.wfs: dict[str, Workflow] = {}
        self.traj: list[tuple[int, float, float, float]] = []
        self.stall = 0

    def cost(self) -> float:
        return self.ledger.total_cost() - self.cost0

    def left(self) -> bool:
        if self.stall >= 50 or self.ev.problem_runs >= self.budget:
            return False
        return self.cost_budget is None or self.cost() < self.cost_budget

    def evaluate(self, wf: Workflow) -> tuple[float, float] | None:
        h = wf.hash()
        if h in self.seen:
            self.stall += 1
            return None
        self.stall = 0
        r = self.ev.evaluate(wf, self.problems)
        self.seen[h], self.wfs[h] = (r.fitness, r.accuracy), wf
        best = max(self.seen, key=lambda k: (self.seen[k], k))
        self.traj.append((self.ev.problem_runs, self.seen[best][0], self.seen[best][1], self.cost(), best))
        return r.fitness, r.accuracy

    def result(self) -> dict[str, Any]:
        h = max(self.seen, key=lambda k: (self.seen[k], k))
        return {
            "best": self.wfs[h].to_dict(),
            "best_fitness": self.seen[h][0],
            "best_accuracy": self.seen[h][1],
            "trajectory": self.traj,
            "problem_runs": self.ev.problem_runs,
            "cost": self.cost(),
            "workflows": {k: w.to_dict() for k, w in self.wfs.items()},
        }


def random_search(
    executor: WorkflowExecutor,
    problems: list[dict[str, Any]],
    budget: int,
    seed: int = 0,
    max_nodes: int = 5,
    lambda_cost: float = 0.0,
    cost_budget: float | None = None,
) -> dict[str, Any]:
    """Evaluate random valid workflows (one source node plus up to three additions)."""
    run = _Run(executor, problems, budget, cost_budget, seed, max_nodes, lambda_cost)
    while run.left():
        run.evaluate(run.mutator.random_workflow(max_edits=3))
    return run.result()


def hill_climb(
    executor: WorkflowExecutor,
    problems: list[dict[str, Any]],
    budget: int,
    seed: int = 0,
    max_nodes: int = 5,
    lambda_cost: float = 0.0,
    start: Workflow | None = None,
    cost_budget: float | None = None,
) -> dict[str, Any]:
    """One random edit at a time from the current workflow, kept if not worse; starts from a
    single ``generate`` call (an ``agent`` for tasks with tools) on the first backbone (or ``start``)."""
    run = _Run(executor, problems, budget, cost_budget, seed, max_nodes, lambda_cost)
    current = start or default_seeds(executor.pool.names, agent=run.agent_task)[0]
    cur_fit = run.evaluate(current)[0]
    while run.left():
        child, _ = run.mutator.mutate(current)
        r = run.evaluate(child)
        if r is not None and r[0] >= cur_fit:
            current, cur_fit = child, r[0]
    return run.result()


def regularized_evolution(
    executor: WorkflowExecutor,
    problems: list[dict[str, Any]],
    budget: int,
    seed: int = 0,
    max_nodes: int = 5,
    lambda_cost: float = 0.0,
    population: int = 8,
    sample: int = 3,
    cost_budget: float | None = None,
) -> dict[str, Any]:
    """Aging evolution: the best of a random sample is mutated, the oldest member is removed."""
    run = _Run(executor, problems, budget, cost_budget, seed, max_nodes, lambda_cost)
    pop: deque[tuple[Workflow, float]] = deque()
    starts = default_seeds(executor.pool.names, agent=run.agent_task)
    while len(pop) < population and run.left():
        wf = starts.pop(0) if starts else run.mutator.random_workflow()
        r = run.evaluate(wf)
        if r is not None:
            pop.append((wf, r[0]))
    while run.left() and pop:
        parent = max(run.rng.sample(list(pop), min(sample, len(pop))), key=lambda x: x[1])
        child, _ = run.mutator.mutate(parent[0])
        r = run.evaluate(child)
        if r is not None:
            pop.append((child, r[0]))
            pop.popleft()
    return run.result()


def aflow_search(
    executor: WorkflowExecutor,
    problems: list[dict[str, Any]],
    budget: int,
    seed: int = 0,
    max_nodes: int = 5,
    lambda_cost: float = 0.0,
    top_k: int = 3,
    uniform_mix: float = 0.2,
    temperature: float = 0.3,
    cost_budget: float | None = None,
) -> dict[str, Any]:
    """AFlow's selection and experience loop with random edits in place of its LLM optimizer.

    Parent: one of the ``top_k`` best workflows (plus the root), drawn with probability
    ``uniform_mix`` uniform + ``1 - uniform_mix`` softmax of fitness / ``temperature``.
    Experience: an edit that made a parent worse is not tried on that parent again.
    """
    run = _Run(executor, problems, budget, cost_budget, seed, max_nodes, lambda_cost)
    root = default_seeds(executor.pool.names, agent=run.agent_task)[0]
    run.evaluate(root)
    failed: dict[str, set[str]] = {}

    def reject(parent: Workflow, child: Workflow, edit: str) -> bool:
        return child.hash() in run.seen or edit in failed.get(parent.hash(), set())

    run.mutator.reject = reject
    while run.left():
        ranked = sorted(run.seen, key=lambda h: -run.seen[h][0])
        cands = list(dict.fromkeys(ranked[:top_k] + [root.hash()]))
        scores = [run.seen[h][0] for h in cands]
        top = max(scores)
        soft = [math.exp((s - top) / temperature) for s in scores]
        z = sum(soft)
        probs = [uniform_mix / len(cands) + (1 - uniform_mix) * s / z for s in soft]
        h = run.rng.choices(cands, weights=probs, k=1)[0]
        child, edit = run.mutator.mutate(run.wfs[h])
        r = run.evaluate(child)
        if r is not None and r[0] < run.seen[h][0]:
            failed.setdefault(h, set()).add(edit)
    return run.result()
