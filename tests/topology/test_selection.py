import pytest

from lightning_agents.topology import (
    SelectionConfig,
    TaskAnalysis,
    analyze_task,
    build_quotient_graph,
    curate_rollouts,
    outcome_filter,
    pass_rate_filter,
    rl_score,
    select_rl,
    select_sft,
)
from lightning_agents.topology.pipeline import CurationError
from lightning_agents.topology.selection import size_matched_baselines


def _analysis(trials):
    graph = build_quotient_graph(trials)
    task, trajectories = analyze_task(graph)
    return TaskAnalysis(graph, task, trajectories)


@pytest.fixture
def tasks(rollout):
    """a: p=2/3, T2 recovers from a failure branch; b: p=1; c: p=0; d: p=1/2 with both trials on one path."""
    a = _analysis(
        [
            rollout("a", 0, 1.0, ["u:hi", "c:get_a", "o:1", "a:The answer is 1."]),
            rollout("a", 1, 0.0, ["u:hi", "c:get_b", "o:2", "a:The answer is 2."]),
            rollout("a", 2, 1.0, ["u:hi", "c:get_b", "o:2", "c:get_a", "o:1", "a:The answer is 1."]),
        ]
    )
    b = _analysis([rollout("b", i, 1.0, ["u:hi", f"c:get_{i}", "o:1"]) for i in range(3)])
    c = _analysis([rollout("c", i, 0.0, ["u:hi", f"c:get_{i}", "o:1"]) for i in range(3)])
    d = _analysis([rollout("d", 0, 1.0, ["u:hi", "c:get_a", "o:1"]), rollout("d", 1, 0.0, ["u:hi", "c:get_a", "o:1"])])
    return [a, b, c, d]


def test_sft_ranks_recovery_first_then_diversity(tasks):
    picked = select_sft(tasks, SelectionConfig(sft_per_task=2))
    # a: T2 (recovered, score 1 + 4/6) before T0 (score 1.0); b: T0 first (all score 1.0, lowest
    # trial), then the farthest: every other path is equally far, so the next by rank (T1).
    assert picked[:2] == [("a", 2), ("a", 0)]
    assert picked[2:4] == [("b", 0), ("b", 1)]
    assert ("d", 0) in picked and not any(t == "c" for t, _ in picked)
    assert select_sft(tasks, SelectionConfig(sft_per_task=1))[0] == ("a", 2)


def test_sft_never_takes_a_duplicate_path(rollout):
    same = _analysis([rollout("s", i, 1.0, ["u:hi", "c:get_a", "o:1"]) for i in range(4)])
    assert select_sft([same], SelectionConfig(sft_per_task=3)) == [("s", 0)]


def test_sft_min_distance(rollout):
    # User text is context: T1 shares 2 of 5 edges with T0 (distance 0.6); T2 shares none (1.0).
    analysis = _analysis(
        [
            rollout("s", 0, 1.0, ["u:hi", "c:get_a", "o:1", "a:The answer is 1."]),
            rollout("s", 1, 1.0, ["u:hi", "c:get_a", "o:1", "a:ok then", "a:The answer is 1."]),
            rollout("s", 2, 1.0, ["u:hi", "c:get_b", "o:7", "a:ok then", "a:The answer is 1."]),
        ]
    )
    assert select_sft([analysis], SelectionConfig(sft_per_task=3)) == [("s", 0), ("s", 2), ("s", 1)]
    assert select_sft([analysis], SelectionConfig(sft_per_task=3, sft_min_distance=0.7)) == [("s", 0), ("s", 2)]


def test_rl_excludes_degenerate_tasks_and_scores(tasks):
    a, b, c, d = tasks
    assert rl_score(b.task) is None and rl_score(c.task) is None
    # a: p=2/3, EBR=1/2, het=log2/log3
    expected_a = (2 / 3) * (1 / 3) * 1.5 * (1 + a.task.heterogeneity)
    assert rl_score(a.task) == pytest.approx(expected_a)
    # d: p=1/2; both trials share one path, so no branch point (EBR 0) and one success path (het 0).
    assert rl_score(d.task) == pytest.approx(0.25)
    picked = select_rl(tasks)
    assert [s.task_id for s in picked] == ["a", "d"]
    assert [s.task_id for s in select_rl(tasks, SelectionConfig(rl_top_n=1))] == ["a"]
    assert [s.task_id for s in select_rl(tasks, SelectionConfig(rl_min_score=0.3))] == ["a"]
    # With the structure terms off the score is p(1-p): d (0.25) beats a (2/9).
    assert [s.task_id for s in select_rl(tasks, SelectionConfig(rl_alpha=0, rl_beta=0))] == ["d", "a"]


def test_baselines(tasks):
    sft, rl = outcome_filter(tasks)
    assert sft == [("a", 0), ("a", 2), ("b", 0), ("b", 1), ("b", 2), ("d", 0)]
    assert rl == ["a", "b", "d"]
    sft, rl = pass_rate_filter(tasks, 0.5, 0.7)
    assert rl == ["a", "d"] and sft == [("a", 0), ("a", 2), ("d", 0)]


def test_size_matched_baselines_have_the_selection_size(tasks):
    sft = select_sft(tasks, SelectionConfig(sft_per_task=1))  # one per task with a success: a, b, d
    rl = select_rl(tasks, SelectionConfig(rl_top_n=1))
    assert len(sft) == 3 and len(rl) == 1
    baselines = size_matched_baselines(tasks, sft, rl)
    for name, keys in baselines["sft"].items():
        assert len(keys) == 3, name
        assert all(dict(((t.task_id, t.trial), t.success) for a in tasks for t in a.trajectories)[k] for k in keys)
    # k per task matches TopoCurate's per-task counts; shortest_k takes the fewest steps.
    assert sorted(t for t, _ in baselines["sft"]["random_k"]) == sorted(t for t, _ in sft)
    assert ("a", 0) in baselines["sft"]["shortest_k"]  # 3 steps, against trial 2's 5
    assert baselines["rl"]["uncertainty"] == ["d"]  # p(1-p): 1/4 for d beats 2/9 for a
    assert all(len(v) == 1 for v in baselines["rl"].values())
    # The draw is a stable function of the seed: the same again, another with another seed.
    assert size_matched_baselines(tasks, sft, rl) == baselines
    many = [("b", i) for i in range(3)]
    draws = {
        tuple(size_matched_baselines(tasks, many[:1], rl, SelectionConfig(baseline_seed=seed))["sft"]["outcome"])
        for seed in range(8)
    }
    assert len(draws) > 1


def test_config_validation():
    with pytest.raises(ValueError, match="sft_per_task"):
        SelectionConfig(sft_per_task=0)
    with pytest.raises(ValueError, match="pass_rate_low"):
        SelectionConfig(pass_rate_low=0.8, pass_rate_high=0.2)
    with pytest.raises(ValueError, match="rl_top_n"):
        SelectionConfig(rl_top_n=0)


def test_curation_is_independent_of_input_order(rollout):
    trials = [
        rollout(t, i, float((i + len(t)) % 2), ["u:hi", f"c:get_{i % 2}", "o:1", "a:The answer is 1."])
        for t in ("x", "yy", "zzz")
        for i in range(4)
    ]
    verifier = "lightning_agents.tasks.tau_actions.TauActionVerifier"
    one, two = curate_rollouts(trials, verifier=verifier), curate_rollouts(trials[::-1], verifier=verifier)
    assert one.sft == two.sft and [s.task_id for s in one.rl] == [s.task_id for s in two.rl]
    assert one.baselines == two.baselines
    assert one.sft_conversations()[0]["task_id"] == one.sft[0][0]
    record = one.rl_records()[0]
    assert set(record) >= {
        "id",
        "prompt",
        "policy",
        "user_goal",
        "user_turns",
        "tools",
        "environment",
        "ground_truth",
        "reference",
        "verifier",
        "score",
        "pass_rate",
    }
    assert record["verifier"] == verifier


def test_a_missing_verifier_is_an_error_not_a_fallback(rollout):
    trials = [rollout("x", i, float(i % 2), ["u:hi", f"c:get_{i}", "o:1"]) for i in range(2)]
    result = curate_rollouts(trials)
    assert [s.task_id for s in result.rl] == ["x"]
    with pytest.raises(CurationError, match="no verifier"):
        result.rl_records()


def test_dropping_graphs_keeps_every_metric_and_selection(rollout):
    trials = [
        rollout(t, i, float((i + len(t)) % 2), ["u:hi", f"c:get_{i % 3}", "o:1", "a:The answer is 1."])
        for t in ("x", "yy", "zzz")
        for i in range(5)
    ]
    kept, dropped = curate_rollouts(trials), curate_rollouts(trials, keep_graphs=False)
    assert kept.sft == dropped.sft and kept.rl == dropped.rl and kept.baselines == dropped.baselines
    assert [a.task for a in kept.analyses] == [a.task for a in dropped.analyses]
    assert all(a.graph is None for a in dropped.analyses)
    # A dropped graph is rebuilt on demand, identical to the one kept.
    again = dropped.graph("yy")
    assert sorted(again.edges(data=True)) == sorted(kept.graph("yy").edges(data=True))
    assert again.graph["trials"] == kept.analysis("yy").graph.graph["trials"]
    with pytest.raises(ValueError, match="keep_graphs=False"):
        select_sft(dropped.analyses)


def test_paused_gc_restores_collection_and_promotes_what_it_made():
    import gc

    from lightning_agents.topology.pipeline import paused_gc

    assert gc.isenabled()
    with paused_gc():
        with paused_gc():  # nested: only the outer one re-enables
            assert not gc.isenabled()
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]
    assert gc.isenabled()
    # Promoted to the oldest generation, so the next young collection does not rescan them.
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(made[0]) in oldest and id(made[-1]) in oldest
