"""Selection of training data from analysed tasks: TopoCurate for SFT and RL, and two baselines.

- :func:`select_sft`: per task, successful trials ranked by ``recovery_weight * [recovered] +
  efficiency_weight * efficiency``; the best is taken, then greedily the candidate whose path is
  farthest (Jaccard distance) from everything already taken, until the per-task budget is spent
  or no candidate is farther than ``min_distance`` (duplicates are never taken twice).
- :func:`select_rl`: tasks with pass rate strictly between 0 and 1 (a group of all-equal rewards
  gives GRPO no signal), scored ``p(1-p) * (1 + a*EBR) * (1 + b*heterogeneity)``, kept from the
  top down by ``top_n`` and/or ``min_score``.
- Baselines in the same terms: :func:`outcome_filter` (every success, for SFT; every task with a
  success, for RL) and :func:`pass_rate_filter` (tasks whose pass rate lies in a band).
- :func:`size_matched_baselines`: the baselines a selection must beat, each of exactly the size of
  TopoCurate's pick, so a difference in a mean is not a difference in set size.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Literal

import networkx as nx

from lightning_agents.errors import LightningAgentsError
from lightning_agents.topology.graph import Quotient
from lightning_agents.topology.metrics import TaskMetrics, TrajectoryMetrics, path_distance, trajectory_edges
from lightning_agents.topology.signatures import SignatureConfig

__all__ = [
    "RLTaskScore",
    "SelectionConfig",
    "SelectionError",
    "TaskAnalysis",
    "outcome_filter",
    "pass_rate_filter",
    "rl_score",
    "select_rl",
    "select_sft",
    "size_matched_baselines",
]


class SelectionError(LightningAgentsError, ValueError):
    """A selection setting out of its range (the message names the setting)."""


@dataclass
class TaskAnalysis:
    """One task's quotient graph with its metrics, the unit every selection works on.

    Args:
        graph: the quotient graph (``None`` once dropped by ``curate_rollouts(keep_graphs=False)``;
            its plain :class:`~lightning_agents.topology.graph.Quotient` form while curation works on it).
        task: task metrics.
        trajectories: per-trial metrics, sorted by trial.
    """

    graph: nx.DiGraph | Quotient | None
    task: TaskMetrics
    trajectories: list[TrajectoryMetrics]


@dataclass
class SelectionConfig:
    """Every setting that changes what TopoCurate selects, declared once.

    The ``curate`` command and ``TopoCurateDataModule`` both take it as one argument group
    (``--selection.sft_per_task 2``; ``selection: {sft_per_task: 2}`` in YAML), the way litgpt
    passes ``train: TrainArgs``; it is also part of the DataModule's cache key.

    Args:
        success_threshold: reward at or above which a trial is a success.
        read_only_tools: tools that never change the environment (default: guessed from the
            name: ``get_*``, ``search_*``, ``list_*``, ``calculate``, ``think``, ``ls``, ...).
        user_text: ``context`` (user messages are context, not decisions: no signature) or
            ``abstract`` (classed like the assistant's text, the behaviour before).
        free_text_words: a string tool argument of at least this many words is free text,
            compared as ``"<text>"``; ``0`` compares every argument verbatim.
        sft_per_task: most successful trials kept per task for SFT.
        sft_min_distance: a further pick must be farther than this (Jaccard distance of paths)
            from every earlier pick of its task; 0.0 only rules out identical paths.
        recovery_weight: weight of "recovered at least once" in the SFT rank.
        efficiency_weight: weight of semantic efficiency in the SFT rank.
        rl_alpha: ``a``, weight of the error branch ratio in the RL score.
        rl_beta: ``b``, weight of strategic heterogeneity in the RL score.
        rl_top_n: keep at most this many RL tasks (``None``: no cap).
        rl_min_score: keep RL tasks scoring at least this.
        pass_rate_low: lower bound (inclusive) of the pass-rate baseline's band.
        pass_rate_high: upper bound (inclusive) of the pass-rate baseline's band.
        baseline_seed: seed of the random draws of the size-matched baselines (a stable hash of
            seed, task and trial, so the draw is the same on any machine and in any shard).
    """

    success_threshold: float = 1.0
    read_only_tools: list[str] | None = None
    user_text: Literal["context", "abstract"] = "context"
    free_text_words: int = 6
    sft_per_task: int = 2
    sft_min_distance: float = 0.0
    recovery_weight: float = 1.0
    efficiency_weight: float = 1.0
    rl_alpha: float = 1.0
    rl_beta: float = 1.0
    rl_top_n: int | None = None
    rl_min_score: float = 0.0
    pass_rate_low: float = 0.25
    pass_rate_high: float = 0.75
    baseline_seed: int = 0

    def __post_init__(self) -> None:
        if self.read_only_tools is not None:
            self.read_only_tools = sorted(self.read_only_tools)
        if self.user_text not in ("context", "abstract"):
            raise SelectionError(f"selection.user_text must be 'context' or 'abstract', got {self.user_text!r}")
        if self.free_text_words < 0:
            raise SelectionError(f"selection.free_text_words must be 0 (off) or more, got {self.free_text_words}")
        if self.sft_per_task < 1:
            raise SelectionError(f"selection.sft_per_task must be at least 1, got {self.sft_per_task}")
        if not 0.0 <= self.sft_min_distance < 1.0:
            raise SelectionError(f"selection.sft_min_distance must be in [0, 1), got {self.sft_min_distance}")
        if self.rl_top_n is not None and self.rl_top_n < 1:
            raise SelectionError(f"selection.rl_top_n must be at least 1 or None, got {self.rl_top_n}")
        if not 0.0 <= self.pass_rate_low <= self.pass_rate_high <= 1.0:
            raise SelectionError(
                f"selection: need 0 <= pass_rate_low <= pass_rate_high <= 1, got {self.pass_rate_low}, {self.pass_rate_high}"
            )

    def as_dict(self) -> dict:
        """Plain dict (for cache keys and reports)."""
        return asdict(self)

    def signature_config(self) -> SignatureConfig:
        """The signature settings these options describe (default text abstraction)."""
        read_only = frozenset(self.read_only_tools) if self.read_only_tools is not None else None
        return SignatureConfig(
            read_only_tools=read_only, user_text=self.user_text, free_text_words=self.free_text_words
        )


def sft_candidate(t: TrajectoryMetrics) -> bool:
    """Whether a trial can be an SFT example: a success with at least one agent-side step.

    A success whose record ends before the agent's first step (a run cut short; a task whose
    ground truth passes untouched) holds no assistant message: SFT on it teaches nothing, and
    every SFT pick and baseline would spend a slot of its budget on it.
    """
    return bool(t.success) and t.steps > 0


def _rank_key(t: TrajectoryMetrics, config: SelectionConfig) -> tuple:
    score = config.recovery_weight * (1.0 if t.recovery > 0 else 0.0) + config.efficiency_weight * (t.efficiency or 0.0)
    # Ties fall to more recovery events, then the lower trial number, so the pick is deterministic.
    return (-score, -t.recovery, t.trial)


def select_sft(analyses: list[TaskAnalysis], config: SelectionConfig | None = None) -> list[tuple[str, int]]:
    """TopoCurate's SFT pick: ``(task_id, trial)`` pairs, tasks in input order, best first within a task."""
    config = config or SelectionConfig()
    chosen: list[tuple[str, int]] = []
    for analysis in analyses:
        candidates = sorted((t for t in analysis.trajectories if sft_candidate(t)), key=lambda t: _rank_key(t, config))
        if not candidates:
            continue
        if analysis.graph is None:
            raise ValueError(
                f"task {analysis.task.task_id!r} has no graph (dropped by keep_graphs=False); select before dropping it"
            )
        edges = {t.trial: trajectory_edges(analysis.graph, t.trial) for t in candidates}
        picked = [candidates[0]]
        remaining = candidates[1:]
        while remaining and len(picked) < config.sft_per_task:
            best, best_distance = None, -1.0
            for candidate in remaining:  # in rank order, so the better-ranked wins a tie
                distance = min(path_distance(edges[candidate.trial], edges[p.trial]) for p in picked)
                if distance > best_distance:
                    best, best_distance = candidate, distance
            if best_distance <= config.sft_min_distance:
                break
            picked.append(best)
            remaining.remove(best)
        chosen += [(analysis.task.task_id, t.trial) for t in picked]
    return chosen


@dataclass
class RLTaskScore:
    """A task's RL score and its parts.

    Args:
        task_id: the task.
        pass_rate: p.
        error_branch_ratio: EBR.
        heterogeneity: normalised strategic heterogeneity.
        score: ``p(1-p)(1 + a EBR)(1 + b het)``.
    """

    task_id: str
    pass_rate: float
    error_branch_ratio: float
    heterogeneity: float
    score: float


def rl_score(task: TaskMetrics, alpha: float = 1.0, beta: float = 1.0) -> float | None:
    """``p(1-p)(1 + alpha*EBR)(1 + beta*het)``, or ``None`` for a task with p in {0, 1} or unscored."""
    p = task.pass_rate
    if p is None or p <= 0.0 or p >= 1.0:
        return None
    return p * (1.0 - p) * (1.0 + alpha * task.error_branch_ratio) * (1.0 + beta * task.heterogeneity)


def select_rl(analyses: list[TaskAnalysis], config: SelectionConfig | None = None) -> list[RLTaskScore]:
    """TopoCurate's RL task pick, highest score first (ties by task order)."""
    config = config or SelectionConfig()
    scored = []
    for order, analysis in enumerate(analyses):
        score = rl_score(analysis.task, config.rl_alpha, config.rl_beta)
        if score is None or score < config.rl_min_score:
            continue
        task = analysis.task
        scored.append(
            (
                -score,
                order,
                RLTaskScore(task.task_id, task.pass_rate, task.error_branch_ratio, task.heterogeneity, score),
            )
        )
    scored.sort(key=lambda x: (x[0], x[1]))
    picked = [x[2] for x in scored]
    return picked[: config.rl_top_n] if config.rl_top_n is not None else picked


def outcome_filter(analyses: list[TaskAnalysis]) -> tuple[list[tuple[str, int]], list[str]]:
    """Outcome-filtering baseline: every successful trial (SFT; see :func:`sft_candidate`) and every task with a success (RL)."""
    sft = [(a.task.task_id, t.trial) for a in analyses for t in a.trajectories if sft_candidate(t)]
    rl = [a.task.task_id for a in analyses if a.task.successes > 0]
    return sft, rl


def pass_rate_filter(
    analyses: list[TaskAnalysis], low: float = 0.25, high: float = 0.75
) -> tuple[list[tuple[str, int]], list[str]]:
    """Pass-rate baseline: tasks with ``low <= p <= high``; for SFT their successful trials."""
    tasks = [a for a in analyses if a.task.pass_rate is not None and low <= a.task.pass_rate <= high]
    sft = [(a.task.task_id, t.trial) for a in tasks for t in a.trajectories if sft_candidate(t)]
    return sft, [a.task.task_id for a in tasks]


def _draw_key(seed: int, *parts: object) -> bytes:
    # A stable pseudo-random order: the same on every machine, shard and Python process.
    return hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8).digest()


def size_matched_baselines(
    analyses: list[TaskAnalysis],
    sft: list[tuple[str, int]],
    rl: list[RLTaskScore],
    config: SelectionConfig | None = None,
) -> dict[str, dict[str, list]]:
    """Baselines of exactly the size of TopoCurate's picks, to compare selections by their content.

    SFT, ``n = len(sft)`` trajectories:

    - ``outcome``: ``n`` successes drawn at random from all successes (outcome filtering);
    - ``random_k``: per task, as many random successes as TopoCurate took from it (k per task);
    - ``shortest_k``: per task, as many of its shortest successes (fewest steps) as TopoCurate took;
    - ``pass_rate``: ``n`` successes drawn at random from tasks inside the pass-rate band.

    RL, ``m = len(rl)`` tasks:

    - ``uncertainty``: the ``m`` tasks of highest ``p(1-p)`` (ties by task order), TopoCurate's
      score without its topology terms;
    - ``pass_rate``: ``m`` random tasks inside the pass-rate band;
    - ``outcome``: ``m`` random tasks with at least one success.

    A band or pool smaller than the size gives all it has.

    Returns:
        ``{"sft": {name: [(task_id, trial), ...]}, "rl": {name: [task_id, ...]}}``.
    """
    config = config or SelectionConfig()
    seed = config.baseline_seed
    order = {a.task.task_id: i for i, a in enumerate(analyses)}
    successes = [(a.task.task_id, t.trial) for a in analyses for t in a.trajectories if sft_candidate(t)]
    n = len(sft)
    per_task: dict[str, int] = {}
    for task_id, _ in sft:
        per_task[task_id] = per_task.get(task_id, 0) + 1

    def drawn(keys: list[tuple[str, int]], count: int) -> list[tuple[str, int]]:
        chosen = sorted(keys, key=lambda k: _draw_key(seed, *k))[:count]
        return sorted(chosen, key=lambda k: (order[k[0]], k[1]))

    random_k, shortest_k = [], []
    for a in analyses:
        k = per_task.get(a.task.task_id, 0)
        wins = [t for t in a.trajectories if sft_candidate(t)]
        if not k or not wins:
            continue
        random_k += sorted(
            (
                (a.task.task_id, t.trial)
                for t in sorted(wins, key=lambda t: _draw_key(seed, a.task.task_id, t.trial))[:k]
            ),
            key=lambda x: x[1],
        )
        shortest_k += [(a.task.task_id, t.trial) for t in sorted(wins, key=lambda t: (t.steps, t.trial))[:k]]
    band = {
        a.task.task_id
        for a in analyses
        if a.task.pass_rate is not None and config.pass_rate_low <= a.task.pass_rate <= config.pass_rate_high
    }
    m = len(rl)
    uncertain = [a for a in analyses if a.task.pass_rate is not None and 0.0 < a.task.pass_rate < 1.0]
    uncertain.sort(key=lambda a: (-(a.task.pass_rate * (1.0 - a.task.pass_rate)), order[a.task.task_id]))

    def drawn_tasks(task_ids: list[str], count: int) -> list[str]:
        chosen = sorted(task_ids, key=lambda t: _draw_key(seed, t))[:count]
        return sorted(chosen, key=lambda t: order[t])

    return {
        "sft": {
            "outcome": drawn(successes, n),
            "random_k": random_k,
            "shortest_k": shortest_k,
            "pass_rate": drawn([k for k in successes if k[0] in band], n),
        },
        "rl": {
            "uncertainty": [a.task.task_id for a in uncertain[:m]],
            "pass_rate": drawn_tasks([a.task.task_id for a in analyses if a.task.task_id in band], m),
            "outcome": drawn_tasks([a.task.task_id for a in analyses if a.task.successes > 0], m),
        },
    }
