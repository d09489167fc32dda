"""Trajectory and task metrics on a quotient graph (:func:`~lightning_agents.topology.build_quotient_graph`).

Trajectory level:

- **reflective recovery**: a successful trial that fixed an error of its own (a later call of
  the same tool, or a later write, came back without an error), or that took a *failure branch*
  and still succeeded. A failure branch is a tool call of the agent's that, among the other
  trials, only failed ones made (there, and anywhere else in a successful trial's path), taken
  from a node another trial succeeded from. Counted per event. Only tool calls are decisions
  here: the wording of a message ("question" where a success made a "statement") split real
  tau2 trials by chance and made 13 of 15 failure branches on the tau-bench file, and the same
  reads in another order made most of the rest.
- **semantic efficiency**: the shortest path in the quotient from the root to a node where a
  successful trial ended, over the trial's own number of steps. 1.0 is a trial that took the
  shortest known route; loops and detours (repeated signatures included) lower it.
- **path**: the trial's edge set, compared by Jaccard distance for diversity.

Task level, defined so that each carries information that the pass rate p does not:

- **branch points**: nodes where trials made different *choices*. A trial's choice at a node is
  the edge it left by the last time it was there (or ending there): an error call that came back
  to the node, or a repeated read, is a *loop* inside that trial, recorded in ``loops``, and is
  not a second strategy. So a retry loop inside one failing trial never makes a branch point.
- **error branch ratio (EBR)**: branch points where one choice was made only by failed trials and
  another by a successful trial (the decision there separated success from failure), over all
  branch points. Two tasks with the same p differ in it: where trials split early on an
  unimportant order of reads and then all fail on the same write, EBR is low; where the failures
  are each a wrong decision at a point others passed, it is high.
- **strategic heterogeneity**: the entropy of successful trials over their *strategies* (the
  sequence of successful state-changing calls), normalised by ``log`` of the number of
  successes, in [0, 1]: 0 when every success made the same writes in the same order, 1 when
  each made different ones; 0 with fewer than two successes. Dividing by the successes rather
  than the trial count is what keeps it from being a function of p (normalised by the trial
  count it was exactly ``{0.25: 0, 0.5: 0.5, 0.75: 0.79, 1.0: 1.0}`` on tau-bench).
- **path diversity**: mean pairwise Jaccard distance between successful trials' paths.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import asdict, dataclass

import networkx as nx

from lightning_agents.topology.graph import Quotient
from lightning_agents.topology.records import CALL

__all__ = [
    "TaskMetrics",
    "TrajectoryMetrics",
    "analyze_task",
    "branch_points",
    "error_branch_ratio",
    "failure_branches",
    "loop_count",
    "pass_rate",
    "path_distance",
    "path_diversity",
    "reflective_recovery",
    "semantic_efficiency",
    "shortest_success_length",
    "strategic_heterogeneity",
    "trajectory_edges",
    "trial_choices",
]


Graph = nx.DiGraph | Quotient


def _plain(graph: Graph) -> Quotient:
    # Every metric reads the plain form; a DiGraph is converted once and the result cached on it.
    if isinstance(graph, Quotient):
        return graph
    plain = graph.graph.get("_plain")
    if plain is None:
        plain = graph.graph["_plain"] = Quotient.from_networkx(graph)
    return plain


def _trial(graph: Graph, trial: int) -> dict:
    try:
        return graph.graph["trials"][trial]
    except KeyError:
        raise KeyError(f"trial {trial!r} is not in the graph of task {graph.graph.get('task_id')!r}") from None


def pass_rate(graph: Graph) -> float | None:
    """Fraction of scored trials that succeeded; ``None`` when no trial is scored."""
    outcomes = [t["outcome"] for t in graph.graph["trials"].values() if t["outcome"] is not None]
    if not outcomes:
        return None
    return sum(outcomes) / len(outcomes)


def shortest_success_length(graph: Graph) -> int | None:
    """Fewest steps from the root to a node where a successful trial ended (``None`` without successes).

    A success that took no agent-side step ends at the root and is no route (see
    :func:`lightning_agents.topology.selection.sft_candidate`). Any route through the quotient
    counts, including one stitched from different trials at merged nodes: merged nodes are the same
    situation, so the stitched route is feasible.
    """
    graph = _plain(graph)
    cached = graph.graph.get("_shortest_success")
    if cached is not None or "_shortest_success" in graph.graph:
        return cached
    # A success that ended at the root took no agent-side step (a record cut before the agent's
    # first reply): no route of the agent's, and as a 0-step "shortest" it zeroed every real
    # success's efficiency.
    root = graph.graph["root"]
    goals = {n for n, counts in enumerate(graph.nodes) if counts[3] and n != root}
    best = None
    if goals:
        # Breadth-first search from the root, stopping at the first level that holds a goal.
        successors = graph.successors
        seen = {root}
        level = [root]
        depth = 0
        while level:
            if not goals.isdisjoint(level):
                best = depth
                break
            following = []
            for u in level:
                for v in successors[u]:
                    if v not in seen:
                        seen.add(v)
                        following.append(v)
            level = following
            depth += 1
    graph.graph["_shortest_success"] = best
    return best


def semantic_efficiency(graph: Graph, trial: int) -> float | None:
    """Shortest successful path length over the trial's length, for a successful trial; else ``None``."""
    info = _trial(graph, trial)
    steps = len(info["path"]) - 1
    if info["outcome"] is not True or steps == 0:
        return None
    shortest = shortest_success_length(graph)
    return shortest / steps if shortest is not None else None


def _calls_of_successes(graph: Quotient) -> Counter:
    """How many successful trials made each call signature, anywhere in their path (cached)."""
    cached = graph.graph.get("_success_calls")
    if cached is None:
        cached = graph.graph["_success_calls"] = Counter()
        for info in graph.graph["trials"].values():
            if info["outcome"] is True:
                cached.update({sig for sig in info["signatures"] if sig[0] == CALL})
    return cached


def failure_branches(graph: Graph, trial: int) -> list[int]:
    """Positions in the trial's path where it took a failure branch (see the module docstring).

    Only meaningful for a successful trial; counts exclude the trial itself.
    """
    graph = _plain(graph)
    info = _trial(graph, trial)
    if info["outcome"] is not True:
        return []
    path = info["path"]
    signatures = info["signatures"]
    made_by_successes = _calls_of_successes(graph)
    found = []
    edges, nodes = graph.edges, graph.nodes
    for position in range(1, len(path)):
        step = signatures[position - 1]
        # A call another success also made, earlier or later, is a matter of order (reads in
        # another order, a write after a read the others skipped), not a wrong turn: on pooled
        # tau2 airline runs most "failure branches" were the same reads in another order.
        if step[0] != CALL or step[1] == "user" or made_by_successes[step] > 1:
            continue
        u = path[position - 1]
        edge = edges[(u, path[position])]
        others_succeeding_on_edge = edge[0] - 1
        others_succeeding_at_node = nodes[u][0] - 1
        if edge[1] >= 1 and others_succeeding_on_edge == 0 and others_succeeding_at_node >= 1:
            found.append(position)
    return found


def reflective_recovery(graph: Graph, trial: int) -> int:
    """Number of recovery events of a trial: errors it fixed plus failure branches, if it succeeded.

    A failed or unscored trial recovered from nothing and scores 0.
    """
    info = _trial(graph, trial)
    if info["outcome"] is not True:
        return 0
    return len(info["recovered"]) + len(failure_branches(graph, trial))


def trajectory_edges(graph: Graph, trial: int) -> frozenset[tuple[int, int]]:
    """The set of quotient edges a trial traversed."""
    path = _trial(graph, trial)["path"]
    return frozenset(zip(path, path[1:]))


def path_distance(a: frozenset, b: frozenset) -> float:
    """Jaccard distance between two edge sets: 0 for the same path, 1 for disjoint paths."""
    union = len(a | b)
    if union == 0:
        return 0.0
    return 1.0 - len(a & b) / union


def path_diversity(graph: Graph, trials: list[int] | None = None) -> float:
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


def trial_choices(graph: Graph) -> dict[int, dict[object, set[int]]]:
    """Per node, each choice made there and the trials that made it.

    A trial's choice at a node is the node it went to when it left for the last time, or
    ``None`` when it ended there; earlier departures came back (loops) and are not choices.
    Cached on the graph.
    """
    graph = _plain(graph)
    cached = graph.graph.get("_choices")
    if cached is not None:
        return cached
    # (node, choice) -> trials first, grouped by node after: same content and order as nesting
    # setdefault calls per step, at half the cost.
    made: dict[tuple[int, object], set[int]] = {}
    for trial, info in graph.graph["trials"].items():
        path = info["path"]
        end = len(path) - 1
        last = {node: position for position, node in enumerate(path)}
        for node, position in last.items():
            key = (node, path[position + 1] if position < end else None)
            trials = made.get(key)
            if trials is None:
                made[key] = {trial}
            else:
                trials.add(trial)
    choices: dict[int, dict[object, set[int]]] = {}
    for (node, nxt), trials in made.items():
        found = choices.get(node)
        if found is None:
            choices[node] = {nxt: trials}
        else:
            found[nxt] = trials
    graph.graph["_choices"] = choices
    return choices


def loop_count(graph: Graph, trial: int) -> int:
    """How often a trial came back to a node it had been at (retry loops, repeated reads)."""
    path = _trial(graph, trial)["path"]
    return len(path) - len(set(path))


def branch_points(graph: Graph) -> list[int]:
    """Nodes where trials made two or more different choices (see :func:`trial_choices`)."""
    return sorted(n for n, made in trial_choices(graph).items() if len(made) >= 2)


def error_branch_ratio(graph: Graph, points: list[int] | None = None) -> float:
    """Branch points that separate failure from success, over all branch points (0.0 without any).

    A branch point separates them when one choice there was made only by failed trials and
    another by at least one successful trial.

    Args:
        graph: a quotient graph.
        points: its :func:`branch_points`, when the caller has them already.
    """
    if points is None:
        points = branch_points(graph)
    if not points:
        return 0.0
    outcomes = {t: info["outcome"] for t, info in graph.graph["trials"].items()}
    choices = trial_choices(graph)
    bad = 0
    for node in points:
        kinds = [{outcomes[t] for t in trials} for trials in choices[node].values()]
        if any(k == {False} for k in kinds) and any(True in k for k in kinds):
            bad += 1
    return bad / len(points)


def strategic_heterogeneity(graph: Graph) -> tuple[int, float, float]:
    """``(distinct strategies of successes, entropy in nats, normalised entropy)``.

    A strategy is a trial's sequence of successful state-changing calls. The normalised value
    divides by ``log(number of successes)``: 1.0 when every success used its own strategy, 0.0
    with one strategy or fewer than two successes.
    """
    trials = graph.graph["trials"].values()
    counts = Counter(t.get("strategy", tuple(t["path"])) for t in trials if t["outcome"] is True)
    total = sum(counts.values())
    if total == 0:
        return 0, 0.0, 0.0
    # One strategy has zero entropy; computing it would give -0.0, which prints oddly in reports.
    entropy = -sum((c / total) * math.log(c / total) for c in counts.values()) if len(counts) > 1 else 0.0
    normalised = entropy / math.log(total) if total > 1 else 0.0
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
        loops: returns to a node already visited (retry loops, repeated reads).
        writes: successful state-changing calls (the length of its strategy).
    """

    task_id: str
    trial: int
    reward: float | None
    success: bool | None
    steps: int
    errors: int
    recovery: int
    efficiency: float | None
    loops: int = 0
    writes: int = 0

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
        branch_points: nodes where trials made different choices.
        error_branch_ratio: see :func:`error_branch_ratio`.
        distinct_success_paths: distinct node paths of successful trials.
        distinct_strategies: distinct strategies (write sequences) of successful trials.
        success_entropy: entropy (nats) of successes over their strategies.
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
    distinct_strategies: int
    success_entropy: float
    heterogeneity: float
    path_diversity: float
    shortest_success: int | None
    recovery_trajectories: int

    def as_dict(self) -> dict:
        """Plain dict for CSV/JSON output."""
        return asdict(self)


def analyze_task(graph: Graph) -> tuple[TaskMetrics, list[TrajectoryMetrics]]:
    """All task and trajectory metrics of one quotient graph (a DiGraph or its :class:`Quotient` form)."""
    graph = _plain(graph)
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
                loops=len(info["path"]) - len(set(info["path"])),
                writes=len(info.get("strategy", ())),
            )
        )
    distinct, entropy, normalised = strategic_heterogeneity(graph)
    points = branch_points(graph)
    task = TaskMetrics(
        task_id=task_id,
        trials=len(trajectories),
        successes=sum(1 for t in trajectories if t.success),
        pass_rate=pass_rate(graph),
        nodes=len(graph.nodes),
        edges=len(graph.edges),
        branch_points=len(points),
        error_branch_ratio=error_branch_ratio(graph, points),
        distinct_success_paths=len({tuple(t["path"]) for t in graph.graph["trials"].values() if t["outcome"] is True}),
        distinct_strategies=distinct,
        success_entropy=entropy,
        heterogeneity=normalised,
        path_diversity=path_diversity(graph),
        shortest_success=shortest_success_length(graph),
        recovery_trajectories=sum(1 for t in trajectories if t.recovery > 0),
    )
    return task, trajectories
