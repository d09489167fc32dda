"""Pool construction of benchmarks/topocurate_rl_pools.py (issue 15, 5b): no training."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lightning_agents.topology import SelectionConfig, TaskAnalysis, TaskMetrics, select_rl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import topocurate_rl_pools as pools_mod  # noqa: E402


def _task(task_id: str, successes: int, ebr: float = 0.0, het: float = 0.0, trials: int = 8) -> TaskAnalysis:
    metrics = TaskMetrics(
        task_id=task_id,
        trials=trials,
        successes=successes,
        pass_rate=successes / trials,
        nodes=1,
        edges=0,
        branch_points=0,
        error_branch_ratio=ebr,
        distinct_success_paths=min(successes, 1),
        distinct_strategies=min(successes, 1),
        success_entropy=0.0,
        heterogeneity=het,
        path_diversity=0.0,
        shortest_success=None,
        recovery_trajectories=0,
    )
    return TaskAnalysis(None, metrics, [])


@pytest.fixture
def analyses() -> list[TaskAnalysis]:
    # p(1-p): t0 0.25, t1 0.25 (tie with t0), t2 0.1875, t3 0.1875, t4 0.1094, t5/t6 0 (p in {0, 1}).
    # TopoCurate's score multiplies in (1 + EBR)(1 + het): t3 and t4 overtake t0 and t1.
    return [
        _task("t0", 4),
        _task("t1", 4),
        _task("t2", 2),
        _task("t3", 6, ebr=1.0, het=1.0),
        _task("t4", 1, ebr=1.0, het=1.0),
        _task("t5", 0),
        _task("t6", 8),
    ]


def test_pools_have_equal_sizes_and_the_pq_pool_is_the_top_by_pq(analyses):
    pools = pools_mod.build_pools(analyses, 3)
    assert len(pools["pq"]) == len(pools["topocurate"]) == 3
    # Highest p(1-p) first; the tie of t0 and t1, and of t2 and t3, goes to task order.
    assert pools["pq"] == ["t0", "t1", "t2"]
    pq = {a.task.task_id: pools_mod.pq(a.task.pass_rate) for a in analyses}
    outside = [t for t in pq if t not in pools["pq"]]
    assert min(pq[t] for t in pools["pq"]) >= max(pq[t] for t in outside)


def test_topocurate_pool_is_the_library_rl_pick(analyses):
    pools = pools_mod.build_pools(analyses, 3)
    assert pools["topocurate"] == [s.task_id for s in select_rl(analyses)][:3] == ["t3", "t4", "t0"]
    # The two pools are built differently: same size, different tasks.
    assert pools["topocurate"] != pools["pq"]
    assert set(pools["topocurate"]) != set(pools["pq"])
    # TopoCurate's weights matter: with a = b = 0 its score is p(1-p) and the pools agree up to ties.
    flat = SelectionConfig(rl_alpha=0.0, rl_beta=0.0)
    assert pools_mod.build_pools(analyses, 2, flat) == {"pq": ["t0", "t1"], "topocurate": ["t0", "t1"]}


def test_pool_figures_and_size_check(analyses):
    pools = pools_mod.build_pools(analyses, 3)
    figures = pools_mod.pool_figures(analyses, pools["topocurate"])
    assert figures["tasks"] == 3
    assert figures["mean_ebr"] == pytest.approx(2 / 3, abs=1e-4)
    assert pools_mod.pool_figures(analyses, pools["pq"])["mean_pq"] == pytest.approx(
        (0.25 + 0.25 + 0.1875) / 3, abs=1e-4
    )
    # Only five tasks have 0 < p < 1: a pool of six cannot be size-matched.
    with pytest.raises(ValueError, match="TopoCurate scores only 5"):
        pools_mod.build_pools(analyses, 6)
    assert pools_mod.eval_steps(40, 20) == [20, 40]
    assert pools_mod.eval_steps(5, 2) == [2, 4, 5]
