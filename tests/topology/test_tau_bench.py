"""TopoCurate on real tau-bench rollouts: 50 airline tasks x 4 GPT-4o trials."""

import itertools
import json
from collections import Counter

import pytest

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology import (
    SelectionConfig,
    build_prefix_tree,
    build_quotient_graph,
    curate_rollouts,
    group_by_task,
    select_rl,
    trajectory_signatures,
)


@pytest.fixture(scope="module")
def tau_file(shared_data):
    return shared_data / "tau_bench" / "gpt-4o-airline.json"


@pytest.fixture(scope="module")
def raw(tau_file):
    return json.loads(tau_file.read_text())


@pytest.fixture(scope="module")
def rollouts(tau_file):
    return load_rollouts(tau_file)


@pytest.fixture(scope="module")
def result(rollouts):
    return curate_rollouts(rollouts)


def test_every_record_reads(raw, rollouts):
    assert len(rollouts) == len(raw) == 200 and rollouts.skipped_count == 0
    assert Counter(r.task_id for r in rollouts) == Counter({str(i): 4 for i in range(50)})
    for record, rollout in zip(raw, rollouts):
        assert rollout.trial == record["trial"] and rollout.reward == record["reward"]
        calls = sum(len(m.get("tool_calls") or []) for m in record["traj"])
        assert sum(s.kind == "call" for s in rollout.steps) == calls
        assert sum(s.kind == "observation" for s in rollout.steps) == sum(m["role"] == "tool" for m in record["traj"])


def test_pass_rates_match_the_rewards(raw, result):
    rewards: dict[str, list[float]] = {}
    for record in raw:
        rewards.setdefault(str(record["task_id"]), []).append(record["reward"])
    for analysis in result.analyses:
        values = rewards[analysis.task.task_id]
        assert analysis.task.pass_rate == pytest.approx(sum(values) / len(values))
    # The file's documented distribution: 14 tasks 0/4, 12 1/4, 10 2/4, 4 3/4, 10 4/4.
    histogram = Counter(a.task.successes for a in result.analyses)
    assert histogram == {0: 14, 1: 12, 2: 10, 3: 4, 4: 10}


def test_trials_share_the_root_and_diverge_at_real_branch_points(rollouts):
    for task_id, trials in group_by_task(rollouts).items():
        tree = build_prefix_tree(trials)
        paths = tree.graph["paths"]
        signatures = {r.trial: [s for s, _ in trajectory_signatures(r)] for r in trials}
        assert {p[0] for p in paths.values()} == {tree.graph["root"]}
        for a, b in itertools.combinations(sorted(paths), 2):
            common = 0
            for x, y in zip(signatures[a], signatures[b]):
                if x != y:
                    break
                common += 1
            # They share exactly the nodes of their common signature prefix and split right after.
            assert paths[a][: common + 1] == paths[b][: common + 1]
            if common < min(len(signatures[a]), len(signatures[b])):
                split = paths[a][common]
                assert paths[a][common + 1] != paths[b][common + 1]
                assert tree.out_degree(split) >= 2, f"task {task_id}: trials {a} and {b} split at a non-branch node"


def test_a_real_error_then_recovery(result):
    # Task 11, trial 0: book_reservation fails ("payment amount does not add up"), the agent
    # fixes the payment split and books again successfully; the trial is rewarded 1.0.
    rollout = result.rollouts[("11", 0)]
    errors = [i for i, s in enumerate(rollout.steps) if s.kind == "observation" and s.error]
    assert errors, "the trial should contain an error observation"
    first = errors[0]
    assert rollout.steps[first].name == "book_reservation"
    assert rollout.steps[first].content.startswith("Error: payment amount does not add up")
    later_ok = [
        s
        for s in rollout.steps[first + 1 :]
        if s.kind == "observation" and s.name == "book_reservation" and not s.error
    ]
    assert later_ok and rollout.reward == 1.0
    metrics = next(t for t in result.analysis("11").trajectories if t.trial == 0)
    assert metrics.errors >= 1 and metrics.recovery >= 1 and metrics.success
    # TopoCurate picks it for SFT: it is the task's only success and it recovered.
    assert ("11", 0) in result.sft
    # Recoveries are rare and real: only successful trials with an error or failure branch.
    recovered = [(t.task_id, t.trial) for a in result.analyses for t in a.trajectories if t.recovery]
    assert 5 <= len(recovered) < 84


def test_real_errors_that_were_never_fixed_are_no_recovery(result):
    # Task 13 trial 2: update_reservation_flights rejected four times, then a transfer to a
    # human; task 15 trial 2: one rejected downgrade, then an apology. Both score 1 (tau-bench's
    # reward ignores the transfer; task 15 wanted no write) and were counted as 4 and 1
    # recoveries, which put task 13's give-up loop first in the SFT ranking.
    for task, trial, errors in (("13", 2, 4), ("15", 2, 1)):
        metrics = next(t for t in result.analysis(task).trajectories if t.trial == trial)
        assert metrics.success and metrics.errors == errors and metrics.recovery == 0
    recovered = sorted((t.task_id, t.trial) for a in result.analyses for t in a.trajectories if t.recovery)
    # Each of these was rejected on a write and then made it work with the same write.
    assert recovered == [("11", 0), ("20", 1), ("20", 3), ("26", 0), ("26", 2)]


@pytest.mark.parametrize("alpha, beta, top_n", [(1.0, 1.0, None), (5.0, 0.0, 10), (0.0, 5.0, 3), (0.0, 0.0, None)])
def test_rl_selection_never_includes_pass_rate_0_or_1(result, alpha, beta, top_n):
    picked = select_rl(result.analyses, SelectionConfig(rl_alpha=alpha, rl_beta=beta, rl_top_n=top_n))
    rates = {a.task.task_id: a.task.pass_rate for a in result.analyses}
    assert picked and all(0.0 < rates[s.task_id] < 1.0 for s in picked)
    if top_n is None:
        assert len(picked) == 26  # 12 + 10 + 4 tasks with 1, 2 or 3 successes of 4
    scores = [s.score for s in picked]
    assert scores == sorted(scores, reverse=True)


def test_sft_selection_is_successful_and_within_budget(result):
    rewards = {k: r.reward for k, r in result.rollouts.items()}
    assert all(rewards[k] == 1.0 for k in result.sft)
    assert max(Counter(t for t, _ in result.sft).values()) <= 2
    assert len(result.sft) < sum(a.task.successes for a in result.analyses)
    assert all(len(keys) == len(result.sft) for name, keys in result.baselines["sft"].items() if name != "pass_rate")


def test_forked_workers_give_the_same_curation(rollouts, result, monkeypatch):
    import lightning_agents.topology.pipeline as pipeline

    # 50 tasks are below the per-worker minimum, which would keep them in process: no fork.
    forks = []
    real_context = pipeline.multiprocessing.get_context
    monkeypatch.setattr(
        pipeline.multiprocessing, "get_context", lambda method: forks.append(method) or real_context(method)
    )
    assert curate_rollouts(rollouts, keep_graphs=False, workers=2).sft == result.sft and forks == []
    monkeypatch.setattr(pipeline, "_MIN_TASKS_PER_WORKER", 1)
    parallel = curate_rollouts(rollouts, keep_graphs=False, workers=2)
    assert forks == ["fork"]
    assert parallel.sft == result.sft and parallel.rl == result.rl and parallel.baselines == result.baselines
    assert [a.task for a in parallel.analyses] == [a.task for a in result.analyses]
    assert [a.trajectories for a in parallel.analyses] == [a.trajectories for a in result.analyses]


def test_workers_refuse_what_they_cannot_reproduce(rollouts):
    from lightning_agents.topology import EncoderTextAbstractor, SignatureConfig

    with pytest.raises(ValueError, match="keep_graphs=False"):
        curate_rollouts(rollouts, workers=2)
    encoder = SignatureConfig(text_abstractor=EncoderTextAbstractor(lambda texts: [[1.0, 0.0]] * len(texts)))
    with pytest.raises(ValueError, match="default text abstraction"):
        curate_rollouts(rollouts, signatures=encoder, keep_graphs=False, workers=2)
    with pytest.raises(ValueError, match="workers must be"):
        curate_rollouts(rollouts, workers=-1)


def _user_text_branch_share(rollouts, config):
    from lightning_agents.topology.metrics import branch_points, trial_choices

    points = on_user = 0
    for trials in group_by_task(rollouts).values():
        graph = build_quotient_graph(trials, config)
        choices = trial_choices(graph)
        for node in branch_points(graph):
            points += 1
            edges = [graph.edges[node, nxt]["signatures"] for nxt in choices[node] if nxt is not None]
            on_user += any(sig[1] == "user" for signatures in edges for sig in signatures)
    return on_user / points, points


def test_branch_points_are_agent_decisions(rollouts):
    from lightning_agents.topology import SignatureConfig

    # The defaults the command, the DataModule and curate_rollouts use.
    share, points = _user_text_branch_share(rollouts, SelectionConfig().signature_config())
    assert points > 100 and share < 0.10
    assert _user_text_branch_share(rollouts, SignatureConfig()) == (share, points)
    # Reading the user's wording as decisions, as before, puts a third of the branch points on it.
    old_share, _ = _user_text_branch_share(rollouts, SignatureConfig(user_text="abstract", free_text_words=0))
    assert old_share > 0.3


def test_heterogeneity_counts_the_agents_writes_not_hand_offs(result):
    # Normalised over trials and paths, heterogeneity was a function of p here. Over strategies it
    # is not, and here it is 0 for every task: GPT-4o's successes of a task share one write
    # sequence. Three tasks scored above 0 while a transfer_to_human_agents counted as a write
    # (task 13: one success also transferred).
    assert {round(a.task.heterogeneity, 6) for a in result.analyses} == {0.0}
    task13 = result.analysis("13")
    assert task13.task.successes == 2 and task13.task.distinct_strategies == 1


def test_rl_top_10_is_not_pass_rate_ranking(result):
    top = [s.task_id for s in select_rl(result.analyses, SelectionConfig(rl_top_n=10))]
    pure = [s.task_id for s in select_rl(result.analyses, SelectionConfig(rl_top_n=10, rl_alpha=0, rl_beta=0))]
    assert set(pure) == {a.task.task_id for a in result.analyses if a.task.pass_rate == 0.5}
    assert set(top) != set(pure)
    # The tasks that moved in did so on EBR or heterogeneity, not on p(1-p).
    moved_in = [result.analysis(t).task for t in set(top) - set(pure)]
    assert moved_in and all(t.error_branch_ratio > 0.5 or t.heterogeneity > 0 for t in moved_in)


def test_retry_loops_in_one_trial_are_loops_not_branch_points(result):
    # Task 11: trial 2 retries book_reservation four times; those retries were 7 of the task's 10
    # branch points. Now they are loops of that trial.
    trials = {t.trial: t for t in result.analysis("11").trajectories}
    assert trials[2].errors == 4 and trials[2].loops >= 4
    assert result.analysis("11").task.branch_points <= 3
