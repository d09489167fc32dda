import math

import pytest

from lightning_agents.topology import (
    analyze_task,
    branch_points,
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
from lightning_agents.topology.metrics import trial_choices
from lightning_agents.topology.records import Step


@pytest.fixture
def three_trials(rollout):
    """T0 succeeds via get_a; T1 fails via get_b; T2 starts like T1 (a failure branch) but recovers via get_a.

    Quotient (user text is context): root -get_a-> ... (T0); root -get_b-> . -o:2-> M;
    M -answer-> (T1, fails); M -get_a-> ... (T2, succeeds). Branch points: root and M; only at M
    was one choice made by failed trials only while another led to success.
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
    assert shortest_success_length(three_trials) == 3
    assert semantic_efficiency(three_trials, 0) == 1.0
    assert semantic_efficiency(three_trials, 2) == pytest.approx(3 / 5)
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
    graph = build_quotient_graph(
        [rollout("t", 0, 1.0, ["c:book", "e:Error: declined", "c:book", "o:ok", "a:Thanks, bye"])]
    )
    assert shortest_success_length(graph) == 3
    assert semantic_efficiency(graph, 0) == pytest.approx(3 / 5)
    assert reflective_recovery(graph, 0) == 1


def test_error_without_success_is_no_recovery(rollout):
    graph = build_quotient_graph([rollout("t", 0, 0.0, ["c:book", "e:Error: declined", "a:Sorry"])])
    assert graph.graph["trials"][0]["errors"] == [2]
    assert reflective_recovery(graph, 0) == 0


def test_failure_branch_recovery(three_trials):
    # T2 took get_b at the root, the edge only the failed T1 took otherwise, while T0 succeeded from there.
    assert failure_branches(three_trials, 2) == [1]
    assert reflective_recovery(three_trials, 2) == 1
    assert reflective_recovery(three_trials, 0) == 0
    assert reflective_recovery(three_trials, 1) == 0


def test_an_error_counts_as_recovered_only_when_the_agent_fixed_it(rollout):
    # Rejected twice, then apologised: it scored 1 because the task wanted no write (as retail
    # task 65 on tau2), which is no recovery to teach.
    gave_up = rollout("t", 0, 1.0, ["c:modify", "e:Error: not pending", "c:cancel", "e:Error: not pending", "a:Sorry"])
    # A different write that worked is a fix; a read of something else afterwards is not.
    other_write = rollout("t", 1, 1.0, ["c:modify", "e:Error: not pending", "c:return_items", "o:ok"])
    read_after = rollout("t", 2, 1.0, ["c:modify", "e:Error: not pending", "c:get_order", "o:{}", "a:Sorry"])
    # A hand-off after the error is giving up, not a write that fixes it.
    handed_off = rollout("t", 3, 1.0, ["c:modify", "e:Error: x", "c:transfer_to_human_agents", "o:Transfer successful"])
    # A failed read fixed by the same read with other arguments.
    reread = rollout("t", 4, 1.0, ['c:get_order{"id": 1}', "e:Error: no such order", 'c:get_order{"id": 2}', "o:{}"])
    graph = build_quotient_graph([gave_up, other_write, read_after, handed_off, reread])
    trials = graph.graph["trials"]
    assert [trials[t]["errors"] for t in range(5)] == [[2, 4], [2], [2], [2], [2]]
    assert [trials[t]["recovered"] for t in range(5)] == [[], [2], [], [], [2]]
    assert [reflective_recovery(graph, t) for t in range(5)] == [0, 1, 0, 0, 1]


def test_the_simulated_users_failed_calls_are_not_the_agents_errors(rollout):
    spec = ["c:get_a", "o:1", "a:Please toggle it"]
    trial = rollout("t", 0, 1.0, spec)
    trial.steps.append(Step("call", "user", name="toggle_airplane_mode", arguments={}))
    trial.steps.append(Step("observation", "tool", name="toggle_airplane_mode", content="Error: no SIM", error=True))
    trial.steps.append(Step("call", "user", name="toggle_airplane_mode", arguments={}))
    trial.steps.append(Step("observation", "tool", name="toggle_airplane_mode", content="ok"))
    graph = build_quotient_graph([trial])
    assert graph.graph["trials"][0]["errors"] == [] and reflective_recovery(graph, 0) == 0


def test_wording_and_read_order_are_not_failure_branches(rollout):
    # T0 asks, T1 and T2 make a statement (the text classes differ); only T1 failed. T2 read the
    # order before the user, as the failure did, while the other success read them the other way.
    graph = build_quotient_graph(
        [
            rollout("t", 0, 1.0, ["a:Which order?", "c:get_user", "o:u", "c:get_order", "o:o", "c:refund", "o:ok"]),
            rollout("t", 1, 0.0, ["a:I will look.", "c:get_order", "o:o", "c:get_user", "o:u", "c:cancel", "o:ok"]),
            rollout("t", 2, 1.0, ["a:I will look.", "c:get_order", "o:o", "c:get_user", "o:u", "c:refund", "o:ok"]),
        ]
    )
    assert failure_branches(graph, 2) == [] and reflective_recovery(graph, 2) == 0
    # The write only the failure made is a wrong turn: a success that made it and then fixed
    # things with the right one recovered.
    graph = build_quotient_graph(
        [
            rollout("t", 0, 1.0, ["c:get_order", "o:o", "c:refund", "o:ok"]),
            rollout("t", 1, 0.0, ["c:get_order", "o:o", "c:cancel", "o:ok"]),
            rollout("t", 2, 1.0, ["c:get_order", "o:o", "c:cancel", "o:ok", "c:reinstate", "o:ok", "c:refund", "o:ok"]),
        ]
    )
    assert failure_branches(graph, 2) == [3] and reflective_recovery(graph, 2) == 1


def test_error_branch_ratio(three_trials):
    assert error_branch_ratio(three_trials) == 0.5


def test_a_retry_loop_inside_one_failing_trial_is_a_loop_not_a_branch(rollout):
    # One failing trial retries a write 3 times, then gives up: before, each retry made the node a
    # branch point with a failure-only branch (EBR 1.0 from one trajectory).
    retry = [
        "c:get_a",
        "o:1",
        'c:book{"f": 1}',
        "e:Error: declined",
        'c:book{"f": 1}',
        "e:Error: declined",
        'c:book{"f": 1}',
        "e:Error: declined",
        "a:Sorry, I cannot.",
    ]
    graph = build_quotient_graph([rollout("t", 0, 0.0, retry), rollout("t", 1, 0.0, retry)])
    assert branch_points(graph) == [] and error_branch_ratio(graph) == 0.0
    _, trajectories = analyze_task(graph)
    assert [t.loops for t in trajectories] == [5, 5]  # back at the write node 3 times, at the pending call 2 times
    # A second trial that decides differently at the same node makes it a branch point.
    ok = build_quotient_graph(
        [rollout("t", 0, 0.0, retry), rollout("t", 1, 1.0, ["c:get_a", "o:1", 'c:book{"f": 2}', "o:ok"])]
    )
    (point,) = branch_points(ok)
    assert error_branch_ratio(ok) == 1.0
    assert set(trial_choices(ok)[point]) == {ok.graph["trials"][0]["path"][-1], ok.graph["trials"][1]["path"][3]}


def test_strategic_heterogeneity(rollout):
    # Same pass rate (2/4), different heterogeneity: the two successes made the same writes in one
    # task and different writes in the other. Reads never make a different strategy.
    one = build_quotient_graph(
        [
            rollout("t", 0, 1.0, ["c:get_a", "o:1", 'c:book{"f": 1}', "o:ok"]),
            rollout("t", 1, 1.0, ['c:book{"f": 1}', "o:ok"]),
            rollout("t", 2, 0.0, ['c:book{"f": 2}', "o:ok"]),
            rollout("t", 3, 0.0, ["a:Sorry"]),
        ]
    )
    two = build_quotient_graph(
        [
            rollout("t", 0, 1.0, ['c:book{"f": 1}', "o:ok"]),
            rollout("t", 1, 1.0, ['c:cancel{"r": 9}', "o:ok", 'c:book{"f": 1}', "o:ok"]),
            rollout("t", 2, 0.0, ['c:book{"f": 2}', "o:ok"]),
            rollout("t", 3, 0.0, ["a:Sorry"]),
        ]
    )
    assert pass_rate(one) == pass_rate(two) == 0.5
    assert strategic_heterogeneity(one) == (1, 0.0, 0.0)
    distinct, entropy, normalised = strategic_heterogeneity(two)
    assert distinct == 2 and entropy == pytest.approx(math.log(2)) and normalised == pytest.approx(1.0)
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
            rollout("t", 0, 1.0, ["a:hi", "c:get_a", "o:1"]),
            rollout("t", 1, 1.0, ["a:hi", "c:get_a", "o:1"]),
            rollout("t", 2, 1.0, ["a:hi", "c:get_b", "o:2"]),
        ]
    )
    # Pairs: (0,1) identical -> 0; (0,2) and (1,2) share 1 of 5 edges -> 0.8 each.
    assert trajectory_edges(graph, 0) == trajectory_edges(graph, 1)
    assert path_diversity(graph) == pytest.approx((0 + 0.8 + 0.8) / 3)
    assert path_diversity(graph, [0]) == 0.0


def test_analyze_task_collects_everything(three_trials):
    task, trajectories = analyze_task(three_trials)
    assert (task.trials, task.successes, task.branch_points, task.recovery_trajectories) == (3, 2, 2, 1)
    assert task.error_branch_ratio == 0.5 and task.shortest_success == 3
    assert [t.trial for t in trajectories] == [0, 1, 2]
    assert [t.steps for t in trajectories] == [3, 3, 5]
    assert trajectories[2].recovery == 1 and trajectories[1].efficiency is None
    with pytest.raises(KeyError, match="trial 7"):
        semantic_efficiency(three_trials, 7)


def test_the_same_write_made_again_at_once_is_no_other_strategy(rollout):
    # A pooled tau2 airline run sent one baggage update twice in a row and still passed: the
    # repeat changed nothing, but it made a second strategy (heterogeneity 1.0 for two successes).
    # The same write again after another one is kept: it may undo the one between.
    bags = 'c:update_baggages{"n": 0}'
    graph = build_quotient_graph(
        [
            rollout("t", 0, 1.0, [bags, "o:ok", "a:Done."]),
            rollout("t", 1, 1.0, [bags, "o:ok", "a:Let me check.", bags, "o:ok", "a:Done."]),
        ]
    )
    assert strategic_heterogeneity(graph) == (1, 0.0, 0.0)
    other = build_quotient_graph(
        [
            rollout("t", 0, 1.0, [bags, "o:ok"]),
            rollout("t", 1, 1.0, [bags, "o:ok", 'c:update_baggages{"n": 1}', "o:ok", bags, "o:ok"]),
        ]
    )
    assert strategic_heterogeneity(other)[0] == 2


def test_a_hand_off_and_the_users_own_calls_are_not_a_strategy(rollout):
    from lightning_agents.topology import Rollout, Step

    # Identical successes but for a transfer_to_human_agents at the end: counted as a write, it
    # made them two strategies (heterogeneity 1.0; on the tau-bench airline file every task that
    # scored above 0 did so this way).
    done = ["u:hi", 'c:cancel{"order": 1}', "o:ok", "a:Done."]
    graph = build_quotient_graph(
        [
            rollout("t", 0, 1.0, done),
            rollout("t", 1, 1.0, [*done, 'c:transfer_to_human_agents{"summary": "x"}', "o:ok"]),
        ]
    )
    assert strategic_heterogeneity(graph)[0] == 1
    # tau2 telecom: the simulated user's calls (requestor "user") change the environment but are
    # not the agent's decisions.
    steps = lambda toggles: [  # noqa: E731
        Step("text", "user", content="no signal"),
        *[
            s
            for _ in range(toggles)
            for s in (
                Step("call", "user", name="toggle_airplane_mode", arguments={}),
                Step("observation", "tool", name="toggle_airplane_mode", content="ok"),
            )
        ],
        Step("call", "assistant", name="refuel_data", arguments={"gb": 2}),
        Step("observation", "tool", name="refuel_data", content="ok"),
    ]
    graph = build_quotient_graph([Rollout("t", 0, 1.0, steps(0)), Rollout("t", 1, 1.0, steps(2))])
    assert strategic_heterogeneity(graph)[0] == 1
