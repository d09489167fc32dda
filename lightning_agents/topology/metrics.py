"""Trajectory and task metrics on a quotient graph (:func:`~lightning_agents.topology.build_quotient_graph`).

Trajectory level:

- **reflective recovery**: a successful trial that met an error observation, or that took a
  *failure branch* (an edge every other trial through which failed, leaving a node from which
  another trial succeeded) and still succeeded. Counted per event.
- **semantic efficiency**: the shortest path in the quotient from the root to a node where a
  successful trial ended, over the trial's own number of steps. 1.0 is a trial that took the
  shortest known route; loops and detours (repeated signatures included) lower it.
- **path**: the trial's edge set, compared by Jaccard distance for diversity.

Task level: pass rate, error branch ratio (branch points, nodes with two or more successors,
that have at least one failure-only branch, over all branch points), strategic heterogeneity
(the entropy of successful trials over their distinct paths, normalised by ``log`` of the trial
count so it lies in [0, 1]), path diversity (mean pairwise Jaccard distance between successful
trials' paths).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import asdict, dataclass

import networkx as nx

__all__ = [
    "TaskMetrics",
    "TrajectoryMetrics",
    "analyze_task",
    "branch_points",
    "error_branch_ratio",
    "failure_branches",
    "pass_rate",
    "path_distance",
    "path_diversity",
    "reflective_recovery",
    "semantic_efficiency",
    "shortest_success_length",
    "strategic_heterogeneity",
    "trajectory_edges",
]


def _trial(graph: nx.DiGraph, trial: int) -> dict:
    try:
        return graph.graph["trials"][trial]
    except KeyError:
        raise KeyError(f"trial {trial!r} is not in the graph of task {graph.graph.get('task_id')!r}") from None


def pass_rate(graph: nx.DiGraph) -> float | None:
    """Fraction of scored trials that succeeded; ``None`` when no trial is scored."""
    outcomes = [t["outcome"] for t in graph.graph["trials"].values() if t["outcome"] is not None]
    if not outcomes:
        return None
    return sum(outcomes) / len(outcomes)


def shortest_success_length(graph: nx.DiGraph) -> int | None:
    """Fewest steps from the root to a node where a successful trial ended (``None`` without successes).

    Any route through the quotient counts, including one stitched from different trials at
    merged nodes: merged nodes are the same situation, so the stitched route is feasible.
    """
    cached = graph.graph.get("_shortest_success")
    if cached is not None or "_shortest_success" in graph.graph:
        return cached
    goals = [n for n, ends in graph.nodes(data="ends_success") if ends]
    best = None
    if goals:
        distances = nx.single_source_shortest_path_length(graph, graph.graph["root"])
        reachable = [distances[g] for g in goals if g in distances]
        best = min(reachable) if reachable else None
    graph.graph["_shortest_success"] = best
    return best


def semantic_efficiency(graph: nx.DiGraph, trial: int) -> float | None:
    """Shortest successful path length over the trial's length, for a successful trial; else ``None``."""
    info = _trial(graph, trial)
    steps = len(info["path"]) - 1
    if info["outcome"] is not True or steps == 0:
        return None
    shortest = shortest_success_length(graph)
    return shortest / steps if shortest is not None else None


def failure_branches(graph: nx.DiGraph, trial: int) -> list[int]:
    """Positions in the trial's path where it took a failure branch (see the module docstring).

    Only meaningful for a successful trial; counts exclude the trial itself.
    """
    info = _trial(graph, trial)
    if info["outcome"] is not True:
        return []
    path = info["path"]
    found = []
    succ, nodes = graph.succ, graph.nodes
    for position in range(1, len(path)):
        u, v = path[position - 1], path[position]
        edge = succ[u][v]
        others_succeeding_on_edge = edge["success"] - 1
        others_succeeding_at_node = nodes[u]["success"] - 1
        if edge["failure"] >= 1 and others_succeeding_on_edge == 0 and others_succeeding_at_node >= 1:
            found.append(position)
    return found


def reflective_recovery(graph: nx.DiGraph, trial: int) -> int:
    """Number of recovery events of a trial: error observations plus failure branches, if it succeeded.

    A failed or unscored trial recovered from nothing and scores 0.
    """
    info = _trial(graph, trial)
    if info["outcome"] is not True:
        return 0
    return len(info["errors"]) + len(failure_branches(graph, trial))


def trajectory_edges(graph: nx.DiGraph, trial: int) -> frozenset[tuple[int, int]]:
    """The set of quotient edges a trial traversed."""
    path = _trial(graph, trial)["path"]
    return frozenset(zip(path, path[1:]))


def path_distance(a: frozenset, b: frozenset) -> float:
    """Jaccard distance between two edge sets: 0 for the same path, 1 for disjoint paths."""
    union = len(a | b)
    if union == 0:
        return 0.0
    return 1.0 - len(a & b) / union


def path_diversity(graph: nx.DiGraph, trials: list[int] | None = None) -> float:
    """Mean pairwise Jaccard distance between the paths of ``trials`` (default: the successful ones).

    0.0 with fewer than two trials.
    """
    if trials is None:
        trials = [t for t, info in graph.graph["trials"].items() if info["outcome"] is True]
    edges = [trajectory_edges(graph, t) for t in trials]
    if len(edges) < 2:
        return 0.0
    pairs = list(itertools.combinations(edges, 2))
    return sum(path_distance(a, b) for a, b in pairs) / len(pairs)


def branch_points(graph: nx.DiGraph) -> list[int]:
    """Nodes with two or more successors: where trials took different next steps."""
    return [n for n, successors in graph.succ.items() if len(successors) >= 2]


def error_branch_ratio(graph: nx.DiGraph, points: list[int] | None = None) -> float:
    """Branch points with at least one failure-only branch over all branch points (0.0 without any).

    A failure-only branch is an out-edge that failed trials took and no successful one did.

    Args:
        graph: a quotient graph.
        points: its :func:`branch_points`, when the caller has them already.
    """
    if points is None:
        points = branch_points(graph)
    if not points:
        return 0.0
    bad = sum(
        1
        for node in points
        if any(attrs["failure"] > 0 and attrs["success"] == 0 for _, _, attrs in graph.out_edges(node, data=True))
    )
    return bad / len(points)


def strategic_heterogeneity(graph: nx.DiGraph) -> tuple[int, float, float]:
    """``(distinct successful paths, entropy in nats of successes over them, normalised entropy)``.

    The normalised value divides by ``log(number of scored trials)``: 1.0 when every trial
    succeeded along its own path, 0.0 with one path (or one trial).
    """
    trials = graph.graph["trials"].values()
    counts = Counter(tuple(t["path"]) for t in trials if t["outcome"] is True)
    scored = sum(1 for t in trials if t["outcome"] is not None)
    total = sum(counts.values())
    if total == 0:
        return 0, 0.0, 0.0
    # One path has zero entropy; computing it would give -0.0, which prints oddly in reports.
    entropy = -sum((c / total) * math.log(c / total) for c in counts.values()) if len(counts) > 1 else 0.0
    normalised = entropy / math.log(scored) if scored > 1 else 0.0
    return len(counts), entropy, normalised


@dataclass
class TrajectoryMetrics:
    """Metrics of one trial.

    Args:
        task_id: the task.
        trial: the trial number.
        reward: its reward (``None`` unscored).
        success: reward reached the success threshold (``None`` unscored).
        steps: number of signed steps.
        errors: error observations met.
        recovery: reflective recovery events (0 unless it succeeded).
        efficiency: semantic efficiency (``None`` unless it succeeded).
    """

    task_id: str
    trial: int
    reward: float | None
    success: bool | None
    steps: int
    errors: int
    recovery: int
    efficiency: float | None

    def as_dict(self) -> dict:
        """Plain dict for CSV/JSON output."""
        return asdict(self)


@dataclass
class TaskMetrics:
    """Metrics of one task's quotient graph.

    Args:
        task_id: the task.
        trials: number of trials.
        successes: successful trials.
        pass_rate: successes over scored trials (``None`` when none is scored).
        nodes: quotient nodes.
        edges: quotient edges.
        branch_points: nodes with two or more successors.
        error_branch_ratio: see :func:`error_branch_ratio`.
        distinct_success_paths: see :func:`strategic_heterogeneity`.
        success_entropy: entropy (nats) of successes over their paths.
        heterogeneity: normalised entropy in [0, 1].
        path_diversity: mean pairwise Jaccard distance of successful paths.
        shortest_success: fewest steps to a success (``None`` without one).
        recovery_trajectories: successful trials with at least one recovery event.
    """

    task_id: str
    trials: int
    successes: int
    pass_rate: float | None
    nodes: int
    edges: int
    branch_points: int
    error_branch_ratio: float
    distinct_success_paths: int
    success_entropy: float
    heterogeneity: float
    path_diversity: float
    shortest_success: int | None
    recovery_trajectories: int

    def as_dict(self) -> dict:
        """Plain dict for CSV/JSON output."""
        return asdict(self)


def analyze_task(graph: nx.DiGraph) -> tuple[TaskMetrics, list[TrajectoryMetrics]]:
    """All task and trajectory metrics of one quotient graph."""
    task_id = graph.graph["task_id"]
    trajectories = []
    for trial, info in sorted(graph.graph["trials"].items()):
        trajectories.append(
            TrajectoryMetrics(
                task_id=task_id,
                trial=trial,
                reward=info["reward"],
                success=info["outcome"],
                steps=len(info["path"]) - 1,
                errors=len(info["errors"]),
                recovery=reflective_recovery(graph, trial),
                efficiency=semantic_efficiency(graph, trial),
            )
        )
    distinct, entropy, normalised = strategic_heterogeneity(graph)
    points = branch_points(graph)
    task = TaskMetrics(
        task_id=task_id,
        trials=len(trajectories),
        successes=sum(1 for t in trajectories if t.success),
        pass_rate=pass_rate(graph),
        nodes=graph.number_of_nodes(),
        edges=len(graph.edges),  # cheaper than number_of_edges(), which sums every node's degree
        branch_points=len(points),
        error_branch_ratio=error_branch_ratio(graph, points),
        distinct_success_paths=distinct,
        success_entropy=entropy,
        heterogeneity=normalised,
        path_diversity=path_diversity(graph),
        shortest_success=shortest_success_length(graph),
        recovery_trajectories=sum(1 for t in trajectories if t.recovery > 0),
    )
    return task, trajectories
