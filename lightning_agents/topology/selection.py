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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import networkx as nx

from lightning_agents.topology.metrics import TaskMetrics, TrajectoryMetrics, path_distance, trajectory_edges

__all__ = [
    "RLTaskScore",
    "SelectionConfig",
    "TaskAnalysis",
    "outcome_filter",
    "pass_rate_filter",
    "rl_score",
    "select_rl",
    "select_sft",
]


@dataclass
class TaskAnalysis:
    """One task's quotient graph with its metrics, the unit every selection works on.

    Args:
        graph: the quotient graph (``None`` once dropped by ``curate_rollouts(keep_graphs=False)``).
        task: task metrics.
        trajectories: per-trial metrics, sorted by trial.
    """

    graph: nx.DiGraph | None
    task: TaskMetrics
    trajectories: list[TrajectoryMetrics]


@dataclass
class SelectionConfig:
    """Settings of TopoCurate's selections and of the pass-rate baseline.

    Args:
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
    """

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

    def __post_init__(self) -> None:
        if self.sft_per_task < 1:
            raise ValueError(f"sft_per_task must be at least 1, got {self.sft_per_task}")
        if not 0.0 <= self.sft_min_distance < 1.0:
            raise ValueError(f"sft_min_distance must be in [0, 1), got {self.sft_min_distance}")
        if self.rl_top_n is not None and self.rl_top_n < 1:
            raise ValueError(f"rl_top_n must be at least 1 or None, got {self.rl_top_n}")
        if not 0.0 <= self.pass_rate_low <= self.pass_rate_high <= 1.0:
            raise ValueError(f"need 0 <= pass_rate_low <= pass_rate_high <= 1, got {self.pass_rate_low}, {self.pass_rate_high}")

    def as_dict(self) -> dict:
        """Plain dict (for cache keys and reports)."""
        return asdict(self)


def _rank_key(t: TrajectoryMetrics, config: SelectionConfig) -> tuple:
    score = config.recovery_weight * (1.0 if t.recovery > 0 else 0.0) + config.efficiency_weight * (t.efficiency or 0.0)
    # Ties fall to more recovery events, then the lower trial number, so the pick is deterministic.
    return (-score, -t.recovery, t.trial)


def select_sft(analyses: list[TaskAnalysis], config: SelectionConfig = SelectionConfig()) -> list[tuple[str, int]]:
    """TopoCurate's SFT pick: ``(task_id, trial)`` pairs, tasks in input order, best first within a task."""
    chosen: list[tuple[str, int]] = []
    for analysis in analyses:
        candidates = sorted((t for t in analysis.trajectories if t.success), key=lambda t: _rank_key(t, config))
        if not candidates:
            continue
        if analysis.graph is None:
            raise ValueError(f"task {analysis.task.task_id!r} has no graph (dropped by keep_graphs=False); select before dropping it")
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


def select_rl(analyses: list[TaskAnalysis], config: SelectionConfig = SelectionConfig()) -> list[RLTaskScore]:
    """TopoCurate's RL task pick, highest score first (ties by task order)."""
    scored = []
    for order, analysis in enumerate(analyses):
        score = rl_score(analysis.task, config.rl_alpha, config.rl_beta)
        if score is None or score < config.rl_min_score:
            continue
        task = analysis.task
        scored.append((-score, order, RLTaskScore(task.task_id, task.pass_rate, task.error_branch_ratio, task.heterogeneity, score)))
    scored.sort(key=lambda x: (x[0], x[1]))
    picked = [x[2] for x in scored]
    return picked[: config.rl_top_n] if config.rl_top_n is not None else picked


def outcome_filter(analyses: list[TaskAnalysis]) -> tuple[list[tuple[str, int]], list[str]]:
    """Outcome-filtering baseline: every successful trial (SFT) and every task with a success (RL)."""
    sft = [(a.task.task_id, t.trial) for a in analyses for t in a.trajectories if t.success]
    rl = [a.task.task_id for a in analyses if a.task.successes > 0]
    return sft, rl


def pass_rate_filter(analyses: list[TaskAnalysis], low: float = 0.25, high: float = 0.75) -> tuple[list[tuple[str, int]], list[str]]:
    """Pass-rate baseline: tasks with ``low <= p <= high``; for SFT their successful trials."""
    tasks = [a for a in analyses if a.task.pass_rate is not None and low <= a.task.pass_rate <= high]
    sft = [(a.task.task_id, t.trial) for a in tasks for t in a.trajectories if t.success]
    return sft, [a.task.task_id for a in tasks]
