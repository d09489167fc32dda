"""benchmarks/hflow_sim_oracle.py on the simulated GSM8K world (real items): the oracle scores what
a search would measure, and its preference pick follows the delta window (issue 17, run 23)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from lightning_agents.hflow import HFlowSearch, SearchConfig, Workflow
from lightning_agents.hflow.genome import Node


def _wf(*steps: tuple[str, str]) -> Workflow:
    """A chain of (op, backbone) steps, each reading the one before."""
    nodes = [Node(f"n{i}", op, backbone=b) for i, (op, b) in enumerate(steps)]
    edges = [(f"n{i - 1}", f"n{i}") for i in range(1, len(nodes))]
    return Workflow(nodes, edges, nodes[-1].id)


WORKFLOWS = [
    _wf(("generate", "cheap")),
    _wf(("generate", "mid")),
    _wf(("cot", "mid")),
    _wf(("programmer", "mid")),
    _wf(("programmer", "mid"), ("refine", "cheap")),
    _wf(("cot", "cheap"), ("refine", "mid")),
]


@pytest.fixture(scope="module")
def world(shared_data):
    import hflow_sim_search as sim

    sim.use_world("gsm8k")
    task, heldout, pool_rest = sim.load_world("gsm8k", 0, 60)
    rows = sorted(
        (
            {
                "workflow": wf.to_dict(),
                **sim.heldout_score(task, heldout, wf, 0),
                "shows": sim.workflow_shows_working(wf),
            }
            for wf in WORKFLOWS
        ),
        key=lambda r: -r["fitness"],
    )
    return sim, task, pool_rest, rows


def test_seed_sets_are_disjoint_and_fixed_by_the_seed(world):
    sim, _, pool_rest, _ = world
    search, rater = sim.seed_sets(pool_rest, 3, 20)
    assert len(search) == len(rater) == 20
    assert not {id(p) for p in search} & {id(p) for p in rater}
    assert sim.seed_sets(pool_rest, 3, 20) == (search, rater)
    assert sim.seed_sets(pool_rest, 4, 20) != (search, rater)


def _search_fitness(sim, task, problems, wf) -> float:
    """What an HFlow search with the benchmark's cost weight records for ``wf`` on ``problems``."""
    cfg = SearchConfig(lambda_cost=sim.LAMBDA, workers=1, rater="none")
    search = HFlowSearch(sim.SimExecutor(task, sim.sim_pool(), 0), cfg, problems=problems)
    return search.evaluator.evaluate(wf, problems, 0).fitness


def test_oracle_pick_is_the_best_by_the_searchs_own_fitness(world):
    """The oracle's search fitness is the number an HFlow search records for the same workflow on
    the same problems, so its pick is the one a search that evaluated everything would return."""
    sim, task, pool_rest, rows = world
    import hflow_sim_oracle as oracle

    for seed in (0, 1):
        search, _ = sim.seed_sets(pool_rest, seed, 30)
        measured = [_search_fitness(sim, task, search, Workflow.from_dict(r["workflow"])) for r in rows]
        pick = max(range(len(rows)), key=lambda i: measured[i])
        order = sorted(range(len(rows)), key=lambda i: -measured[i])
        out = oracle.oracle_seed(task, pool_rest, seed, 30, 0, rows, [0.0, 10.0])
        assert out["search_pick_gap_points"] == round(100 * (rows[0]["fitness"] - rows[pick]["fitness"]), 2)
        assert out["search_pick_within_1pt"] == (rows[pick]["fitness"] >= rows[0]["fitness"] - 0.01)
        first = next(k for k, i in enumerate(order) if rows[i]["fitness"] >= rows[0]["fitness"] - 0.01)
        assert out["search_rank_of_first_within_1pt"] == first + 1
        # delta 0 leaves the plain pick; a window wide enough takes in a workflow that shows working
        assert out["plain_pick_shows_working"] == rows[pick]["shows"]
        assert out["preferred_pick_shows_working@0.0"] == rows[pick]["shows"]
        assert out["preferred_minus_plain_accuracy_points@0.0"] == 0.0
        assert out["preferred_pick_shows_working@10.0"] is True
