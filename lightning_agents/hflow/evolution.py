"""The HFlow search: population, variation, fitness, preference-steered selection, memory.

Budget unit: a *problem run* (one workflow executed on one problem and not served from the cache).
All search methods here (HFlow, random search, the one-edit hill climber) spend the same unit, so
"equal evaluation budgets" is exact.

Reproducibility: every random choice comes from one seeded ``random.Random``; evaluations of a
generation run in a thread pool, but results are collected in submission order and sampled model
calls are seeded from their content (see :func:`~lightning_agents.hflow.backbones.request_seed`),
so a seed gives the same search whatever the thread timing.
"""

from __future__ import annotations

import logging
import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal

import networkx as nx

from lightning_agents.hflow.backbones import Request, request_seed
from lightning_agents.hflow.genome import BACKBONE_FREE, OPERATORS, Node, Workflow, WorkflowError, operator_arity
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.operators import WorkflowExecutor
from lightning_agents.hflow.preferences import Comparison, PreferenceStore, Rater

log = logging.getLogger(__name__)

__all__ = [
    "EvalResult",
    "Evaluator",
    "HFlowSearch",
    "Individual",
    "Mutator",
    "SearchConfig",
    "hill_climb",
    "pareto_front",
    "random_search",
]

# Template edits for prompt mutation when no optimizer backbone is configured: an instruction
# library per operator (the first entry of each is also the operator default).
PROMPT_LIBRARY: dict[str, list[str]] = {
    "generate": ["", "Answer the question.", "Solve the problem and finish with 'The answer is N.'",
                 "Write Python code that prints the answer."],
    "cot": ["Think step by step, then finish with 'The answer is N.'", "Show the calculation, then state the answer.",
            ""],
    "vote": ["", "Answer the question.", "Write Python code that prints the answer."],
    "programmer": ["Write Python code that prints the answer.", "Write a short Python program; print only the result.",
                   "Write Python code that computes and prints the final number."],
    "refine": ["Check the previous answer. If it is wrong, correct it. Finish with 'The answer is N.'",
               "Verify each step of the answer and restate the final answer.", ""],
    "test": ["The code failed its tests. Fix it and reply with the whole corrected code in a ```python block."],
    "format": ["", "The answer is {answer}."],
}
SOURCE_OPS = [op for op, (lo, _) in OPERATORS.items() if lo == 0]
CHAIN_OPS = ["refine", "format", "test"]
EDIT_KINDS = ["add", "remove", "replace", "prompt", "backbone", "params", "crossover"]


@dataclass
class SearchConfig:
    """Settings of an HFlow search.

    Args:
        population_size: individuals kept each generation.
        offspring: new candidates per generation.
        max_nodes: most nodes in a workflow.
        lambda_cost: fitness = accuracy - lambda_cost * mean cost per problem.
        objective: ``scalar`` (the fitness above) or ``pareto`` (rank by non-domination on
            accuracy and cost, fitness breaking ties within a front).
        preference_weight: weight of the Bradley-Terry score (centred log-strength) in selection;
            0 ignores preferences.
        questions_per_generation: cap on pairwise questions asked each generation.
        crossover_rate: probability an offspring comes from crossover rather than mutation.
        tournament: tournament size for parent selection.
        eval_problems: validation problems each workflow is scored on (None: all).
        workers: threads evaluating workflows in parallel.
        seed: seed of every random choice.
        use_memory_seeds: seed the first population with the domain memory's best workflows.
    """

    population_size: int = 8
    offspring: int = 8
    max_nodes: int = 5
    lambda_cost: float = 0.0
    objective: Literal["scalar", "pareto"] = "scalar"
    preference_weight: float = 0.1
    questions_per_generation: int = 4
    crossover_rate: float = 0.25
    tournament: int = 3
    eval_problems: int | None = 16
    workers: int = 2
    seed: int = 0
    use_memory_seeds: bool = True


@dataclass
class EvalResult:
    """A workflow's score on a problem set.

    Args:
        accuracy: mean task score.
        cost: mean cost per problem.
        fitness: ``accuracy - lambda_cost * cost``.
        new_runs: problem runs that were not cached (the budget spent).
    """

    accuracy: float
    cost: float
    fitness: float
    new_runs: int


@dataclass
class Individual:
    """A population member: its workflow, scores and where it came from."""

    workflow: Workflow
    accuracy: float = 0.0
    cost: float = 0.0
    fitness: float = -math.inf
    edit: str = "seed"
    parent: str = ""
    generation: int = 0

    @property
    def hash(self) -> str:
        """The workflow's content hash."""
        return self.workflow.hash()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (checkpoints, reports)."""
        return {"workflow": self.workflow.to_dict(), "accuracy": self.accuracy, "cost": self.cost,
                "fitness": self.fitness, "edit": self.edit, "parent": self.parent, "generation": self.generation,
                "hash": self.hash}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Individual":
        """Inverse of :meth:`to_dict`."""
        return cls(Workflow.from_dict(d["workflow"]), d["accuracy"], d["cost"], d["fitness"], d["edit"], d["parent"],
                   d["generation"])


class Evaluator:
    """Scores workflows on problems, caching each ``(workflow hash, problem id)`` trace.

    Args:
        executor: runs workflows.
        lambda_cost: cost weight of the fitness.
    """

    def __init__(self, executor: WorkflowExecutor, lambda_cost: float = 0.0) -> None:
        self.executor = executor
        self.lambda_cost = lambda_cost
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.problem_runs = 0

    def traces(self, workflow: Workflow, problems: list[dict[str, Any]], generation: int = 0) -> tuple[list[dict], int]:
        """Plain-data traces of ``workflow`` on ``problems`` (cached ones reused) and the new runs."""
        h = workflow.hash()
        todo = [p for p in problems if (h, p["id"]) not in self.cache]
        if todo:
            for t in self.executor.run(workflow, todo, generation=generation):
                self.cache[(h, t.problem_id)] = t.to_dict()
        self.problem_runs += len(todo)
        return [self.cache[(h, p["id"])] for p in problems], len(todo)

    def evaluate(self, workflow: Workflow, problems: list[dict[str, Any]], generation: int = 0) -> EvalResult:
        """Accuracy, mean cost and fitness of ``workflow`` on ``problems``."""
        traces, new = self.traces(workflow, problems, generation)
        acc = sum(t["score"] for t in traces) / len(traces)
        cost = sum(t["cost"] for t in traces) / len(traces)
        return EvalResult(acc, cost, acc - self.lambda_cost * cost, new)

    def invalidate_backbone(self, backbone: str, workflows: dict[str, Workflow]) -> int:
        """Drop cached traces of workflows that use ``backbone`` (e.g. the model changed by training)."""
        stale = {h for h, wf in workflows.items() if backbone in wf.backbones()}
        keys = [k for k in self.cache if k[0] in stale]
        for k in keys:
            del self.cache[k]
        return len(keys)


def _fresh_id(wf: Workflow, prefix: str = "n") -> str:
    taken = {n.id for n in wf.nodes}
    i = len(taken)
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"


def _weighted(rng: random.Random, items: list[str], weights: dict[str, float] | None) -> str:
    if not weights:
        return rng.choice(items)
    return rng.choices(items, weights=[max(weights.get(i, 1.0), 1e-6) for i in items], k=1)[0]


class Mutator:
    """Variation operators over workflows; every returned workflow is valid.

    Each edit is retried with fresh random choices until the result validates (at most
    ``attempts`` times); if none does, the parent is returned unchanged with edit ``none``.

    Args:
        backbones: pool names nodes may use.
        rng: the search's random generator.
        max_nodes: most nodes in a workflow.
        op_weights: sampling weights of operators (from memory), None for uniform.
        edit_weights: sampling weights of edit kinds (from memory), None for uniform.
        backbone_weights: sampling weights of backbones (from memory), None for uniform.
        optimizer: ``(prompt, op) -> new prompt`` that rewrites prompts (an optimizer backbone),
            None for template edits from :data:`PROMPT_LIBRARY`.
        code_task: allow the ``test`` operator (only useful where problems carry examples).
        attempts: retries per edit.
    """

    def __init__(self, backbones: list[str], rng: random.Random, max_nodes: int = 5,
                 op_weights: dict[str, float] | None = None, edit_weights: dict[str, float] | None = None,
                 backbone_weights: dict[str, float] | None = None,
                 optimizer: Callable[[str, str], str] | None = None, code_task: bool = False, attempts: int = 12) -> None:
        if not backbones:
            raise ValueError("the mutator needs at least one backbone")
        self.backbones = list(backbones)
        self.rng = rng
        self.max_nodes = max_nodes
        self.op_weights = op_weights
        self.edit_weights = edit_weights
        self.backbone_weights = backbone_weights
        self.optimizer = optimizer
        self.chain_ops = CHAIN_OPS if code_task else [op for op in CHAIN_OPS if op != "test"]
        self.attempts = attempts

    def _backbone(self) -> str:
        return _weighted(self.rng, self.backbones, self.backbone_weights)

    def _op(self, candidates: list[str]) -> str:
        return _weighted(self.rng, candidates, self.op_weights)

    def new_node(self, wf: Workflow, op: str) -> Node:
        """A node of ``op`` with a fresh id, a library prompt and a random backbone."""
        params: dict[str, Any] = {}
        if op == "vote":
            params = {"samples": self.rng.choice([3, 5])}
        return Node(_fresh_id(wf), op, prompt=PROMPT_LIBRARY[op][0],
                    backbone=None if op in BACKBONE_FREE else self._backbone(), params=params)

    def random_workflow(self, max_edits: int = 2) -> Workflow:
        """A random valid workflow: one source node plus up to ``max_edits`` additions."""
        first = self.new_node(Workflow([]), self._op(SOURCE_OPS))
        wf = Workflow([first], output=first.id)
        for _ in range(self.rng.randint(0, max_edits)):
            wf, _ = self.mutate(wf, "add")
        return wf

    # ------------------------------------------------------------------------- edits
    def add(self, wf: Workflow) -> tuple[Workflow, str]:
        """Add a node: a parallel branch into a vote, or a refine/format/test step after a node."""
        if len(wf.nodes) >= self.max_nodes:
            raise WorkflowError("workflow is full")
        wf = wf.copy()
        if self.rng.random() < 0.5:
            op = self._op(SOURCE_OPS)
            new = self.new_node(wf, op)
            out = wf.node(wf.output)
            if out.op == "vote":
                wf.nodes.append(new)
                wf.edges.append((new.id, out.id))
            else:
                if len(wf.nodes) + 2 > self.max_nodes:
                    raise WorkflowError("no room for a branch and a vote")
                vote = self.new_node(wf, "vote")
                vote.params = {"samples": 0}
                wf.nodes.append(new)
                vote.id = _fresh_id(wf)
                wf.nodes.append(vote)
                wf.edges += [(wf.output, vote.id), (new.id, vote.id)]
                wf.output = vote.id
            return wf, f"add:{op}"
        op = self._op(self.chain_ops)
        target = self.rng.choice(wf.nodes).id
        new = self.new_node(wf, op)
        wf.nodes.append(new)
        wf.edges = [(new.id, t) if s == target else (s, t) for s, t in wf.edges] + [(target, new.id)]
        if wf.output == target:
            wf.output = new.id
        return wf, f"add:{op}"

    def remove(self, wf: Workflow) -> tuple[Workflow, str]:
        """Remove a node and connect its inputs to its outputs."""
        if len(wf.nodes) < 2:
            raise WorkflowError("cannot remove the only node")
        wf = wf.copy()
        victim = self.rng.choice(wf.nodes)
        preds, succs = wf.predecessors(victim.id), [t for s, t in wf.edges if s == victim.id]
        if victim.id == wf.output:
            if len(preds) != 1:
                raise WorkflowError("output with several inputs")
            wf.output = preds[0]
        edges = [e for e in wf.edges if victim.id not in e]
        for t in succs:
            for s in preds:
                if (s, t) not in edges:
                    edges.append((s, t))
        wf.edges = edges
        wf.nodes = [n for n in wf.nodes if n.id != victim.id]
        return wf, f"remove:{victim.op}"

    def replace(self, wf: Workflow) -> tuple[Workflow, str]:
        """Change one node's operator to another that fits its number of inputs."""
        wf = wf.copy()
        node = self.rng.choice(wf.nodes)
        k = len(wf.predecessors(node.id))
        ops = [op for op in OPERATORS if op != node.op and op in SOURCE_OPS + self.chain_ops
               and operator_arity(op)[0] <= k and (operator_arity(op)[1] is None or k <= operator_arity(op)[1])]
        if not ops:
            raise WorkflowError("no operator fits")
        op = self._op(ops)
        node.op, node.prompt, node.params = op, PROMPT_LIBRARY[op][0], {}
        if op == "vote":
            node.params = {"samples": 0 if k else 3}
        node.backbone = None if op in BACKBONE_FREE else (node.backbone or self._backbone())
        return wf, f"replace:{op}"

    def prompt(self, wf: Workflow) -> tuple[Workflow, str]:
        """Rewrite one node's prompt: by the optimizer backbone, else a template from the library."""
        wf = wf.copy()
        nodes = [n for n in wf.nodes if n.op != "format" or len(PROMPT_LIBRARY["format"]) > 1]
        node = self.rng.choice(nodes)
        if self.optimizer is not None and node.op != "format":
            new = self.optimizer(node.prompt, node.op)
            how = "optimizer"
        else:
            options = [p for p in PROMPT_LIBRARY[node.op] if p != node.prompt]
            if not options:
                raise WorkflowError("no alternative prompt")
            new, how = self.rng.choice(options), "template"
        if new == node.prompt:
            raise WorkflowError("prompt unchanged")
        node.prompt = new
        return wf, f"prompt:{node.op}:{how}"

    def backbone(self, wf: Workflow) -> tuple[Workflow, str]:
        """Move one node to another backbone."""
        wf = wf.copy()
        nodes = [n for n in wf.nodes if n.op not in BACKBONE_FREE]
        if not nodes or len(self.backbones) < 2:
            raise WorkflowError("nothing to move")
        node = self.rng.choice(nodes)
        node.backbone = self.rng.choice([b for b in self.backbones if b != node.backbone])
        return wf, f"backbone:{node.backbone}"

    def params(self, wf: Workflow) -> tuple[Workflow, str]:
        """Change an operator setting: vote samples, sampling temperature, programmer retries."""
        wf = wf.copy()
        node = self.rng.choice([n for n in wf.nodes if n.op not in BACKBONE_FREE] or wf.nodes)
        if node.op == "vote":
            choices = [s for s in (0, 3, 5, 7) if s != node.params.get("samples") and (s or wf.predecessors(node.id))]
            node.params["samples"] = self.rng.choice(choices)
            return wf, "params:vote.samples"
        if node.op in ("programmer", "test"):
            node.params["retries"] = self.rng.choice([r for r in (0, 1, 2) if r != node.params.get("retries", 1)])
            return wf, f"params:{node.op}.retries"
        if node.op == "format":
            raise WorkflowError("format has no settings")
        node.params["temperature"] = self.rng.choice([t for t in (0.0, 0.5, 1.0) if t != node.params.get("temperature", 0.0)])
        return wf, f"params:{node.op}.temperature"

    def crossover(self, a: Workflow, b: Workflow) -> tuple[Workflow, str]:
        """Graft a sub-graph of ``b`` (a node and all its ancestors) in place of one of ``a``.

        The replaced part of ``a`` is a node ``x`` plus the ancestors that feed only ``x``; the
        graft's root takes over ``x``'s outgoing edges, so every other node keeps its inputs.
        """
        ga, gb = a.graph(), b.graph()
        x = self.rng.choice(a.nodes).id
        y = self.rng.choice(b.nodes).id
        rest = ga.copy()
        rest.remove_node(x)
        keep_anc = nx.ancestors(rest, a.output) | {a.output} if a.output != x else set()
        drop = {x} | {v for v in nx.ancestors(ga, x) if v not in keep_anc}
        donor = nx.ancestors(gb, y) | {y}
        wf = Workflow([n for n in a.copy().nodes if n.id not in drop],
                      [e for e in a.edges if e[0] not in drop and e[1] not in drop], a.output, a.name)
        rename = {}
        for v in sorted(donor, key=lambda v: [n.id for n in b.nodes].index(v)):
            donor_node = Node.from_dict(b.node(v).to_dict())
            rename[v] = donor_node.id = _fresh_id(wf, "x")
            wf.nodes.append(donor_node)
        wf.edges += [(rename[s], rename[t]) for s, t in b.edges if s in donor and t in donor]
        wf.edges += [(rename[y], t) for s, t in a.edges if s == x and t not in drop]
        if a.output == x:
            wf.output = rename[y]
        return wf, "crossover"

    def mutate(self, wf: Workflow, kind: str | None = None) -> tuple[Workflow, str]:
        """Apply one edit (``kind`` or a weighted random one); returns ``(valid workflow, edit)``."""
        kinds = ["add", "remove", "replace", "prompt", "backbone", "params"]
        for _ in range(self.attempts):
            k = kind or _weighted(self.rng, kinds, self.edit_weights)
            try:
                child, edit = getattr(self, k)(wf)
                child.validate(self.backbones, self.max_nodes)
            except WorkflowError:
                continue
            if child.hash() != wf.hash():
                child.name = ""  # a label of the parent no longer describes the child
                return child, edit
        return wf.copy(), "none"

    def cross(self, a: Workflow, b: Workflow) -> tuple[Workflow, str]:
        """Crossover with retries; falls back to mutating ``a`` when no graft validates."""
        for _ in range(self.attempts):
            try:
                child, edit = self.crossover(a, b)
                child.validate(self.backbones, self.max_nodes)
            except WorkflowError:
                continue
            if child.hash() not in (a.hash(), b.hash()):
                child.name = ""
                return child, edit
        return self.mutate(a)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Non-domination rank (0 = front) of each ``(accuracy, cost)`` point; higher accuracy and lower cost win."""
    ranks = [0] * len(points)
    remaining = set(range(len(points)))
    rank = 0
    while remaining:
        front = {i for i in remaining
                 if not any(points[j][0] >= points[i][0] and points[j][1] <= points[i][1] and points[j] != points[i]
                            for j in remaining)}
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


def default_seeds(backbones: list[str]) -> list[Workflow]:
    """The single-call baselines: one ``generate`` node per backbone."""
    return [Workflow([Node("n0", "generate", backbone=b)], output="n0", name=f"generate@{b}") for b in backbones]


class HFlowSearch:
    """Evolutionary workflow search with preference-steered selection and experience memory.

    Args:
        executor: runs workflows (task + backbone pool).
        config: search settings.
        problems: validation problems for fitness (default: a seeded sample of the task).
        rater: answers pairwise questions (None: no preferences).
        rater_problems: problems the rater's comparisons use (default: the validation problems);
            a disjoint set shows the rater answers the fitness sample never saw.
        memory: experience memory (None: a fresh in-memory one).
        preferences: comparison store (None: a fresh one).
        optimizer_backbone: pool name of the model that rewrites prompts (None: template edits).
        seeds: extra workflows for the first population.
    """

    def __init__(self, executor: WorkflowExecutor, config: SearchConfig | None = None,
                 problems: list[dict[str, Any]] | None = None, rater: Rater | None = None,
                 rater_problems: list[dict[str, Any]] | None = None, memory: ExperienceMemory | None = None,
                 preferences: PreferenceStore | None = None, optimizer_backbone: str | None = None,
                 seeds: list[Workflow] | None = None) -> None:
        self.config = config or SearchConfig()
        self.executor = executor
        self.task = executor.task
        self.pool = executor.pool
        self.evaluator = Evaluator(executor, self.config.lambda_cost)
        self.problems = problems or self.task.sample(self.config.eval_problems, seed=self.config.seed)
        self.rater = rater
        self.rater_problems = rater_problems or self.problems
        self.memory = memory or ExperienceMemory()
        self.preferences = preferences or PreferenceStore()
        self.optimizer_backbone = optimizer_backbone
        if optimizer_backbone is not None:
            self.pool.get(optimizer_backbone)
        self.extra_seeds = list(seeds or [])
        self.rng = random.Random(self.config.seed)
        self.population: list[Individual] = []
        self.generation = 0
        self.history: list[dict[str, Any]] = []
        self.seen: dict[str, Individual] = {}
        # (problem runs so far, best fitness, its accuracy, its hash) after every evaluation
        self.best_so_far: list[tuple[int, float, float, str]] = []
        self._query = 0

    # ------------------------------------------------------------------------ helpers
    @property
    def backbone_names(self) -> list[str]:
        """Backbones workflows may use (the optimizer too, if it is in the pool)."""
        return self.pool.names

    def _mutator(self) -> Mutator:
        domain = self.task.domain
        use = self.config.use_memory_seeds
        return Mutator(
            self.backbone_names, self.rng, self.config.max_nodes,
            op_weights=self.memory.weights(domain, "op_stats", list(OPERATORS)) if use else None,
            edit_weights=self.memory.weights(domain, "edit_stats", EDIT_KINDS) if use else None,
            backbone_weights=self.memory.weights(domain, "backbone_stats", self.backbone_names) if use else None,
            optimizer=self._rewrite_prompt if self.optimizer_backbone else None,
            code_task=self.task.domain == "code",
        )

    def _rewrite_prompt(self, prompt: str, op: str) -> str:
        """Ask the optimizer backbone for a better instruction (its calls are booked as ``optimizer``)."""
        messages = [
            {"role": "system", "content": "You improve instructions for a language model. Reply with the new instruction only."},
            {"role": "user", "content": f"Task: {self.task.name}. Step type: {op}.\nCurrent instruction: {prompt or '(none)'}\n"
                                         "Write an improved instruction."},
        ]
        req = Request(messages, max_tokens=48, temperature=0.8, seed=request_seed(self.config.seed, self.generation, self._query, prompt))
        self._query += 1
        out = self.pool.complete(self.optimizer_backbone, [req], role="optimizer", generation=self.generation)[0]
        text = out.text.strip().strip('"').strip()
        return text[:400] if text else prompt

    def _evaluate_many(self, workflows: list[Workflow]) -> list[EvalResult]:
        # Distinct workflows only: two threads running the same workflow would both miss the cache.
        unique: dict[str, Workflow] = {}
        for wf in workflows:
            unique.setdefault(wf.hash(), wf)
        items = list(unique.items())
        if self.config.workers > 1 and len(items) > 1:
            with ThreadPoolExecutor(max_workers=self.config.workers) as ex:
                results = list(ex.map(lambda kv: self.evaluator.evaluate(kv[1], self.problems, self.generation), items))
        else:
            results = [self.evaluator.evaluate(wf, self.problems, self.generation) for _, wf in items]
        by_hash = dict(zip(unique, results))
        return [by_hash[wf.hash()] for wf in workflows]

    def _score(self, individuals: list[Individual]) -> list[float]:
        """Selection score: fitness (or Pareto rank) plus the preference weight times the BT score."""
        bt = self.preferences.scores([i.hash for i in individuals]) if self.config.preference_weight else {}
        pref = [self.config.preference_weight * bt.get(i.hash, 0.0) for i in individuals]
        if self.config.objective == "pareto":
            ranks = pareto_front([(i.accuracy, i.cost) for i in individuals])
            return [-r + 0.5 * math.tanh(i.fitness) + p for r, i, p in zip(ranks, individuals, pref)]
        return [i.fitness + p for i, p in zip(individuals, pref)]

    def _record(self, ind: Individual, parent_fitness: float | None, runs: int | None = None) -> None:
        self.seen[ind.hash] = ind
        self.memory.record_evaluation(self.task.name, self.task.domain, ind.workflow, ind.fitness)
        if parent_fitness is not None and ind.edit not in ("seed", "none"):
            self.memory.record_edit(self.task.name, self.task.domain, ind.edit, ind.parent, ind.hash,
                                    ind.fitness - parent_fitness, self.generation)
        best = max(self.seen.values(), key=lambda i: i.fitness)
        at = self.evaluator.problem_runs if runs is None else runs
        self.best_so_far.append((at, best.fitness, best.accuracy, best.hash))

    # ---------------------------------------------------------------------- the loop
    def initialize(self) -> None:
        """Build and evaluate the first population (memory seeds, single-call baselines, random)."""
        mutator = self._mutator()
        seeds: list[Workflow] = list(self.extra_seeds)
        if self.config.use_memory_seeds:
            seeds += self.memory.seeds(self.task.domain, self.backbone_names, self.config.max_nodes)
        seeds += default_seeds(self.backbone_names)
        while len(seeds) < self.config.population_size:
            seeds.append(mutator.random_workflow())
        unique: dict[str, Workflow] = {}
        for wf in seeds:
            wf.validate(self.backbone_names, self.config.max_nodes)
            unique.setdefault(wf.hash(), wf)
        workflows = list(unique.values())[: max(self.config.population_size, len(self.extra_seeds))]
        runs = self.evaluator.problem_runs
        for wf, res in zip(workflows, self._evaluate_many(workflows)):
            ind = Individual(wf, res.accuracy, res.cost, res.fitness, "seed", "", 0)
            runs += res.new_runs
            self.population.append(ind)
            self._record(ind, None, runs)
        self._log_generation()

    def refresh(self, backbone: str) -> int:
        """Re-score after ``backbone`` changed (e.g. the model being trained took optimizer steps).

        Cached traces of workflows that use it are dropped and population members that use it are
        evaluated again, so their fitness reflects the current weights. Returns the members re-scored.
        """
        known = {i.hash: i.workflow for i in self.seen.values()}
        known.update({i.hash: i.workflow for i in self.population})
        self.evaluator.invalidate_backbone(backbone, known)
        stale = [i for i in self.population if backbone in i.workflow.backbones()]
        for ind, res in zip(stale, self._evaluate_many([i.workflow for i in stale])):
            ind.accuracy, ind.cost, ind.fitness = res.accuracy, res.cost, res.fitness
            self.seen[ind.hash] = ind
        # Individuals evaluated with old weights and no longer in the population are forgotten,
        # so best() never reports a score the current model did not earn.
        fresh = {i.hash for i in stale}
        for h in [h for h, i in self.seen.items() if backbone in i.workflow.backbones() and h not in fresh]:
            del self.seen[h]
        return len(stale)

    def ask_preferences(self) -> int:
        """Ask up to ``questions_per_generation`` pairwise questions; returns how many were answered.

        Pairs are drawn among the top half of the population by selection score, on a rater
        problem where their answers differ (a question whose answers agree tells nothing).
        """
        if self.rater is None or self.config.questions_per_generation <= 0 or len(self.population) < 2:
            return 0
        ranked = sorted(self.population, key=lambda i: -i.fitness)
        top = ranked[: max(2, len(ranked) // 2)]
        answered = 0
        asked = 0
        tries = 0
        while asked < self.config.questions_per_generation and tries < 4 * self.config.questions_per_generation:
            tries += 1
            a, b = self.rng.sample(top, 2)
            problem = self.rng.choice(self.rater_problems)
            (ta,), _ = self.evaluator.traces(a.workflow, [problem], self.generation)
            (tb,), _ = self.evaluator.traces(b.workflow, [problem], self.generation)
            if ta["output"] == tb["output"]:
                continue
            asked += 1
            query_id = f"{a.hash}-{b.hash}-{problem['id']}"
            winner = self.rater.compare(problem, ta, tb, query_id)
            if winner is not None:
                self.preferences.add(Comparison(a.hash, b.hash, problem["id"], winner, self.rater.source, self.generation))
                answered += 1
        return answered

    def step(self) -> dict[str, Any]:
        """Run one generation: preferences, offspring, evaluation, survivor selection. Returns its log row."""
        if not self.population:
            self.initialize()
        self.generation += 1
        self.ask_preferences()
        mutator = self._mutator()
        scores = self._score(self.population)

        def pick() -> Individual:
            idx = self.rng.sample(range(len(self.population)), min(self.config.tournament, len(self.population)))
            return self.population[max(idx, key=lambda i: scores[i])]

        children: list[tuple[Workflow, str, Individual]] = []
        for _ in range(self.config.offspring):
            p1 = pick()
            if self.rng.random() < self.config.crossover_rate and len(self.population) > 1:
                p2 = pick()
                wf, edit = mutator.cross(p1.workflow, p2.workflow)
            else:
                wf, edit = mutator.mutate(p1.workflow)
            children.append((wf, edit, p1))
        runs = self.evaluator.problem_runs
        results = self._evaluate_many([c[0] for c in children])
        pool = {i.hash: i for i in self.population}
        counted: set[str] = set()
        for (wf, edit, parent), res in zip(children, results):
            ind = Individual(wf, res.accuracy, res.cost, res.fitness, edit, parent.hash, self.generation)
            # Charge each child's runs in order, so the best-so-far curve is per evaluation even
            # though the generation was evaluated in parallel.
            if ind.hash not in counted:
                counted.add(ind.hash)
                runs += res.new_runs
            self._record(ind, parent.fitness, runs)
            pool.setdefault(ind.hash, ind)
        candidates = list(pool.values())
        cand_scores = self._score(candidates)
        order = sorted(range(len(candidates)), key=lambda i: (-cand_scores[i], candidates[i].cost, candidates[i].hash))
        self.population = [candidates[i] for i in order[: self.config.population_size]]
        return self._log_generation()

    def run(self, generations: int, progress: Callable[[dict[str, Any]], None] | None = None) -> Individual:
        """Run ``generations`` more generations; ``progress`` is called with each log row."""
        if not self.population:
            self.initialize()
        for _ in range(generations):
            row = self.step()
            if progress is not None:
                progress(row)
        return self.best()

    def best(self) -> Individual:
        """The best individual ever evaluated (by fitness, then lower cost)."""
        return max(self.seen.values(), key=lambda i: (i.fitness, -i.cost))

    def diversity(self) -> float:
        """Distinct operator multisets in the population over its size (1 = all different shapes)."""
        shapes = {tuple(sorted(n.op for n in i.workflow.nodes)) + (len(i.workflow.edges),) for i in self.population}
        return len(shapes) / max(len(self.population), 1)

    def _log_generation(self) -> dict[str, Any]:
        best = self.best()
        gen_cost = self.pool.ledger.summary("generation").get(self.generation, {"cost": 0.0})["cost"]
        row = {
            "generation": self.generation, "best_fitness": best.fitness, "best_accuracy": best.accuracy,
            "best_cost": best.cost, "mean_fitness": sum(i.fitness for i in self.population) / len(self.population),
            "diversity": self.diversity(), "generation_cost": gen_cost, "total_cost": self.pool.ledger.total_cost(),
            "problem_runs": self.evaluator.problem_runs, "preferences": len(self.preferences),
            "best_workflow": best.workflow.describe(),
        }
        self.history.append(row)
        return row

    # ------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Population, seen individuals, history, RNG, cache, preferences, memory and ledger."""
        return {
            "config": asdict(self.config),
            "generation": self.generation,
            "population": [i.to_dict() for i in self.population],
            "seen": [i.to_dict() for i in self.seen.values()],
            "history": list(self.history),
            "best_so_far": [list(x) for x in self.best_so_far],
            "rng": _rng_to_json(self.rng.getstate()),
            "query": self._query,
            "cache": [[k[0], k[1], v] for k, v in self.evaluator.cache.items()],
            "problem_runs": self.evaluator.problem_runs,
            "preferences": self.preferences.state_dict(),
            "memory": self.memory.state_dict(),
            "ledger": self.pool.ledger.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.generation = state["generation"]
        self.population = [Individual.from_dict(d) for d in state["population"]]
        self.seen = {d["hash"]: Individual.from_dict(d) for d in state["seen"]}
        self.history = list(state["history"])
        self.best_so_far = [tuple(x) for x in state["best_so_far"]]
        self.rng.setstate(_rng_from_json(state["rng"]))
        self._query = state["query"]
        self.evaluator.cache = {(h, p): v for h, p, v in state["cache"]}
        self.evaluator.problem_runs = state["problem_runs"]
        self.preferences.load_state_dict(state["preferences"])
        self.memory.load_state_dict(state["memory"])
        self.pool.ledger.load_state_dict(state["ledger"])


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _trajectory(evaluator: Evaluator, seen: dict[str, tuple[float, float]], traj: list) -> None:
    best = max(seen.values())
    traj.append((evaluator.problem_runs, best[0], best[1]))


def random_search(executor: WorkflowExecutor, problems: list[dict[str, Any]], budget: int, seed: int = 0,
                  max_nodes: int = 5, lambda_cost: float = 0.0) -> dict[str, Any]:
    """Baseline: evaluate random valid workflows until ``budget`` problem runs are spent.

    Returns ``{"best": workflow dict, "best_fitness", "best_accuracy", "trajectory": [(runs, fitness, acc)]}``.
    """
    rng = random.Random(seed)
    ev = Evaluator(executor, lambda_cost)
    mutator = Mutator(executor.pool.names, rng, max_nodes, code_task=executor.task.domain == "code")
    seen: dict[str, tuple[float, float]] = {}
    wfs: dict[str, Workflow] = {}
    traj: list = []
    stall = 0
    while ev.problem_runs < budget and stall < 50:
        wf = mutator.random_workflow(max_edits=3)
        if wf.hash() in seen:
            stall += 1
            continue
        stall = 0
        r = ev.evaluate(wf, problems)
        seen[wf.hash()], wfs[wf.hash()] = (r.fitness, r.accuracy), wf
        _trajectory(ev, seen, traj)
    h = max(seen, key=lambda k: seen[k])
    return {"best": wfs[h].to_dict(), "best_fitness": seen[h][0], "best_accuracy": seen[h][1], "trajectory": traj,
            "problem_runs": ev.problem_runs}


def hill_climb(executor: WorkflowExecutor, problems: list[dict[str, Any]], budget: int, seed: int = 0,
               max_nodes: int = 5, lambda_cost: float = 0.0, start: Workflow | None = None) -> dict[str, Any]:
    """Baseline in AFlow's style: from the best workflow so far, one edit at a time, keep it if not worse.

    Starts from a single ``generate`` call on the first backbone (or ``start``).
    """
    rng = random.Random(seed)
    ev = Evaluator(executor, lambda_cost)
    mutator = Mutator(executor.pool.names, rng, max_nodes, code_task=executor.task.domain == "code")
    current = start or default_seeds(executor.pool.names)[0]
    r = ev.evaluate(current, problems)
    cur_fit = r.fitness
    seen = {current.hash(): (r.fitness, r.accuracy)}
    wfs = {current.hash(): current}
    traj: list = []
    _trajectory(ev, seen, traj)
    stall = 0
    while ev.problem_runs < budget and stall < 50:
        child, edit = mutator.mutate(current)
        if child.hash() in seen:
            stall += 1
            continue
        stall = 0
        r = ev.evaluate(child, problems)
        seen[child.hash()], wfs[child.hash()] = (r.fitness, r.accuracy), child
        if r.fitness >= cur_fit:
            current, cur_fit = child, r.fitness
        _trajectory(ev, seen, traj)
    h = max(seen, key=lambda k: seen[k])
    return {"best": wfs[h].to_dict(), "best_fitness": seen[h][0], "best_accuracy": seen[h][1], "trajectory": traj,
            "problem_runs": ev.problem_runs}

