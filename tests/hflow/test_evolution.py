import json

import pytest

from lightning_agents.hflow import (
    ArithmeticTask,
    ExperienceMemory,
    HFlowSearch,
    SearchConfig,
    SimulatedRater,
    Workflow,
    WorkflowExecutor,
    hill_climb,
    pareto_front,
    random_search,
)


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask("val", n=20)


def _search(pool_factory, task, seed=0, **kw):
    val, rest = task.split(6, seed=0)
    cfg = SearchConfig(
        population_size=4,
        offspring=4,
        eval_problems=6,
        seed=seed,
        lambda_cost=50.0,
        workers=2,
        questions_per_generation=2,
        **kw,
    )
    return HFlowSearch(
        WorkflowExecutor(task, pool_factory()), cfg, problems=val, rater=SimulatedRater(seed=seed), rater_problems=rest
    )


def test_search_is_seeded_and_reproducible(embedded_pool_factory, task):
    a = _search(embedded_pool_factory, task)
    a.run(2)
    b = _search(embedded_pool_factory, task)
    b.run(2)
    assert [r["best_workflow"] for r in a.history] == [r["best_workflow"] for r in b.history]
    assert [i.hash for i in a.population] == [i.hash for i in b.population]
    assert len(a.preferences) > 0 and a.memory.data["lineage"]
    # offspring were evaluated, not only the seeds
    assert any(i.edit != "seed" for i in a.seen.values())
    # the cache really serves repeated evaluations
    runs = a.evaluator.problem_runs
    a.evaluator.evaluate(a.best().workflow, a.problems)
    assert a.evaluator.problem_runs == runs


def test_state_dict_round_trip_continues_identically(embedded_pool_factory, task):
    a = _search(embedded_pool_factory, task, seed=1)
    a.run(1)
    state = json.loads(json.dumps(a.state_dict()))  # must be plain JSON
    b = _search(embedded_pool_factory, task, seed=1)
    b.load_state_dict(state)
    a.step()
    b.step()
    assert [i.hash for i in a.population] == [i.hash for i in b.population]
    assert b.pool.ledger.summary()["total"]["calls"] == a.pool.ledger.summary()["total"]["calls"]


def test_memory_seeds_a_related_task(embedded_pool_factory, task):
    first = _search(embedded_pool_factory, task, seed=2)
    first.run(2)
    first.memory.consolidate(task.name)
    related = ArithmeticTask("test", n=20)
    val, _ = related.split(6, seed=0)
    cfg = SearchConfig(population_size=4, offspring=4, eval_problems=6, seed=3, lambda_cost=50.0)
    warm = HFlowSearch(WorkflowExecutor(related, embedded_pool_factory()), cfg, problems=val, memory=ExperienceMemory())
    warm.memory.load_state_dict(first.memory.state_dict())
    warm.initialize()
    seeded = {w.hash() for w in first.memory.seeds("math")}
    assert seeded & {i.hash for i in warm.population}


def test_pareto_front_ranks():
    pts = [(1.0, 2.0), (0.5, 1.0), (0.4, 3.0), (1.0, 1.0)]
    assert pareto_front(pts) == [1, 1, 2, 0]


def test_baselines_respect_the_budget(embedded_pool_factory, task):
    ex = WorkflowExecutor(task, embedded_pool_factory())
    probs = task.problems[:4]
    for fn in (random_search, hill_climb):
        out = fn(ex, probs, budget=16, seed=0)
        assert 16 <= out["problem_runs"] < 16 + 4 + 1
        assert Workflow.from_dict(out["best"]).is_valid(["student", "teacher"])
        assert [t[0] for t in out["trajectory"]] == sorted(t[0] for t in out["trajectory"])
