import math

import networkx as nx
import pytest

from lightning_agents.topology import (
    analyze_task,
    build_quotient_graph,
    error_branch_ratio,
    failure_branches,
    pass_rate,
    path_distance,
    path_diversity,
    reflective_recovery,
    semantic_efficiency,
    shortest_success_length,
    strategic_heterogeneity,
    trajectory_edges,
)


@pytest.fixture
def three_trials(rollout):
    """T0 succeeds via get_a; T1 fails via get_b; T2 starts like T1 (a failure branch) but recovers via get_a.

    Quotient: root -u-> N; N -get_a-> ... (T0); N -get_b-> . -o:2-> M; M -answer-> (T1, fails);
    M -get_a-> ... (T2, succeeds). Branch points: N and M; only M has a failure-only branch.
    """
    return build_quotient_graph(
        [
            rollout("t", 0, 1.0, ["u:hi", "c:get_a", "o:1", "a:The answer is 1."]),
            rollout("t", 1, 0.0, ["u:hi", "c:get_b", "o:2", "a:The answer is 2."]),
            rollout("t", 2, 1.0, ["u:hi", "c:get_b", "o:2", "c:get_a", "o:1", "a:The answer is 1."]),
        ]
    )


def test_pass_rate(three_trials, rollout):
    assert pass_rate(three_trials) == pytest.approx(2 / 3)
    assert pass_rate(build_quotient_graph([rollout("t", 0, None, ["u:x"])])) is None
    # Partial rewards below the threshold are failures.
    graph = build_quotient_graph([rollout("t", 0, 0.5, ["u:x"]), rollout("t", 1, 0.9, ["u:y"])], success_threshold=0.8)
    assert pass_rate(graph) == 0.5


def test_shortest_success_and_efficiency(three_trials):
    assert shortest_success_length(three_trials) == 4
    assert semantic_efficiency(three_trials, 0) == 1.0
    assert semantic_efficiency(three_trials, 2) == pytest.approx(4 / 6)
    assert semantic_efficiency(three_trials, 1) is None  # failures have no efficiency


def test_efficiency_uses_routes_stitched_at_merged_nodes(rollout):
    # T0 reads twice before the write, T1 reads once; both merge after the write, so the
    # shortest route to T0's success goes through T1's shorter prefix.
    graph = build_quotient_graph(
        [
            rollout("t", 0, 1.0, ["c:get_a", "o:a", "c:get_b", "o:b", "c:book", "o:ok", "a:Thanks, bye"]),
            rollout("t", 1, 0.0, ["c:get_a", "o:a", "c:book", "o:ok"]),
        ]
    )
    assert shortest_success_length(graph) == 5
    assert semantic_efficiency(graph, 0) == pytest.approx(5 / 7)


def test_retry_loop_lowers_efficiency_and_counts_as_recovery(rollout):
    graph = build_quotient_graph([rollout("t", 0, 1.0, ["c:book", "e:Error: declined", "c:book", "o:ok", "a:Thanks, bye"])])
    assert shortest_success_length(graph) == 3
    assert semantic_efficiency(graph, 0) == pytest.approx(3 / 5)
    assert reflective_recovery(graph, 0) == 1


def test_error_without_success_is_no_recovery(rollout):
    graph = build_quotient_graph([rollout("t", 0, 0.0, ["c:book", "e:Error: declined", "a:Sorry"])])
    assert graph.graph["trials"][0]["errors"] == [2]
    assert reflective_recovery(graph, 0) == 0


def test_failure_branch_recovery(three_trials):
    # T2 took get_b at N, the edge only the failed T1 took otherwise, while T0 succeeded from N.
    assert failure_branches(three_trials, 2) == [2]
    assert reflective_recovery(three_trials, 2) == 1
    assert reflective_recovery(three_trials, 0) == 0
    assert reflective_recovery(three_trials, 1) == 0


def test_error_branch_ratio(three_trials):
    assert error_branch_ratio(three_trials) == 0.5


def test_error_branch_ratio_on_a_hand_built_graph():
    g = nx.DiGraph()
    # Branch point 0: one failure-only branch. Branch point 1: both branches mixed. Node 4: not a branch.
    g.add_edge(0, 1, success=2, failure=1)
    g.add_edge(0, 2, success=0, failure=3)
    g.add_edge(1, 3, success=1, failure=1)
    g.add_edge(1, 4, success=1, failure=0)
    g.add_edge(4, 5, success=1, failure=0)
    assert error_branch_ratio(g) == 0.5
    assert error_branch_ratio(nx.path_graph(3, create_using=nx.DiGraph)) == 0.0


def test_strategic_heterogeneity(three_trials, rollout):
    distinct, entropy, normalised = strategic_heterogeneity(three_trials)
    assert distinct == 2
    assert entropy == pytest.approx(math.log(2))
    assert normalised == pytest.approx(math.log(2) / math.log(3))
    same = build_quotient_graph([rollout("t", i, 1.0, ["u:hi", "c:get_a", "o:1"]) for i in range(3)])
    assert strategic_heterogeneity(same) == (1, 0.0, 0.0)
    none = build_quotient_graph([rollout("t", 0, 0.0, ["u:hi"])])
    assert strategic_heterogeneity(none) == (0, 0.0, 0.0)


def test_path_distance_and_diversity(rollout):
    a = frozenset({(0, 1), (1, 2)})
    assert path_distance(a, a) == 0.0
    assert path_distance(a, frozenset({(0, 3)})) == 1.0
    assert path_distance(a, frozenset({(0, 1), (1, 3)})) == pytest.approx(1 - 1 / 3)
    graph = build_quotient_graph(
        [
            rollout("t", 0, 1.0, ["u:hi", "c:get_a", "o:1"]),
            rollout("t", 1, 1.0, ["u:hi", "c:get_a", "o:1"]),
            rollout("t", 2, 1.0, ["u:hi", "c:get_b", "o:2"]),
        ]
    )
    # Pairs: (0,1) identical -> 0; (0,2) and (1,2) share 1 of 5 edges -> 0.8 each.
    assert trajectory_edges(graph, 0) == trajectory_edges(graph, 1)
    assert path_diversity(graph) == pytest.approx((0 + 0.8 + 0.8) / 3)
    assert path_diversity(graph, [0]) == 0.0


def test_analyze_task_collects_everything(three_trials):
    task, trajectories = analyze_task(three_trials)
    assert (task.trials, task.successes, task.branch_points, task.recovery_trajectories) == (3, 2, 2, 1)
    assert task.error_branch_ratio == 0.5 and task.shortest_success == 4
    assert [t.trial for t in trajectories] == [0, 1, 2]
    assert [t.steps for t in trajectories] == [4, 4, 6]
    assert trajectories[2].recovery == 1 and trajectories[1].efficiency is None
    with pytest.raises(KeyError, match="trial 7"):
        semantic_efficiency(three_trials, 7)
