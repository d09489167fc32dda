"""Ranked structural children (``SearchConfig.ranked_structural_share``, issue 17 run 17): a share of
each generation's children is not a random draw but the parent's untried structural single edit
(:meth:`Mutator.neighbours`: add, remove, replace, backbone) that memory expects to gain the most.
On by default since run 18 (0.34); with it off (0) the search is the old one."""

from __future__ import annotations

import pytest
from test_search_logic import _Executor

from lightning_agents.hflow import HFlowSearch, SearchConfig
from lightning_agents.hflow.backbones import ConfigError

PROBLEMS = 10
STRUCTURAL = {"add", "remove", "replace", "backbone"}


def _search(seed: int = 0, **kw) -> HFlowSearch:
    ex = _Executor(two_steps=True)
    cfg = dict(population_size=4, offspring=4, max_nodes=3, eval_problems=PROBLEMS, seed=seed, workers=1, rater="none")
    cfg.update(kw)
    return HFlowSearch(ex, SearchConfig(**cfg), problems=ex.task.problems[:PROBLEMS])


def _children(search: HFlowSearch) -> list:
    return [i for i in search.seen.values() if i.generation == search.generation]


def test_on_by_default_and_off_never_ranks(monkeypatch):
    # 0.34 since run 18 (docs/benchmarks.md: test seeds 0-29, both simulated worlds)
    assert SearchConfig().ranked_structural_share == 0.34

    def boom(*_a, **_k):
        raise AssertionError("ranked a child with the setting off")

    monkeypatch.setattr(HFlowSearch, "_ranked_structural", boom)
    search = _search(ranked_structural_share=0.0)
    for _ in range(3):
        search.step()


@pytest.mark.parametrize("share,offspring,ranked", [(0.5, 4, 2), (0.34, 6, 2), (1.0, 4, 4), (0.1, 4, 0)])
def test_the_share_of_children_that_are_ranked(monkeypatch, share, offspring, ranked):
    calls: list[int] = []
    real = HFlowSearch._ranked_structural

    def counted(self, *a):
        calls.append(self.generation)
        return real(self, *a)

    monkeypatch.setattr(HFlowSearch, "_ranked_structural", counted)
    search = _search(ranked_structural_share=share, offspring=offspring)
    search.initialize()
    search.step()
    assert len(calls) == ranked


def test_ranked_children_are_fresh_distinct_structural_single_edits():
    for seed in range(3):
        search = _search(seed, ranked_structural_share=1.0)
        search.initialize()
        mutator = search._mutator()
        before = set(search.seen) | set(search._screened)
        taken: set[str] = set()
        for parent in list(search.population):
            got = search._ranked_structural(mutator, parent, taken)
            assert got is not None
            child, edit = got
            assert edit.split(":")[0] in STRUCTURAL, edit
            near = {c.hash(): e for c, e in mutator.neighbours(parent.workflow)}
            assert near.get(child.hash()) == edit
            assert child.hash() not in before and child.hash() not in taken
            taken.add(child.hash())


def test_ranking_follows_memory_and_draws_nothing():
    """With no experience the first structural neighbour wins (fixed order); once memory says an
    edit choice gains, that choice is taken, and the search's generator is never touched."""
    search = _search(ranked_structural_share=1.0)
    search.initialize()
    parent = search.population[0]
    mutator = search._mutator()
    first = search._ranked_structural(mutator, parent, set())
    structural = [
        e for c, e in mutator.neighbours(parent.workflow) if e.split(":")[0] in STRUCTURAL and search._fresh(c)
    ]
    target = next(e for e in reversed(structural) if e != first[1])
    for _ in range(6):  # memory's estimates are relative: one choice gained, the first one lost
        search.memory.record_edit(search.task.name, search.task.domain, target, "a", "b", 0.3, 1)
        search.memory.record_edit(search.task.name, search.task.domain, first[1], "a", "c", -0.3, 1)
    state = search.rng.getstate()
    child, edit = search._ranked_structural(search._mutator(), parent, set())
    assert edit == target != first[1]
    assert search.rng.getstate() == state


def test_failed_edits_and_seen_children_are_skipped():
    search = _search(ranked_structural_share=1.0)
    search.initialize()
    parent = search.population[0]
    mutator = search._mutator()
    child, edit = search._ranked_structural(mutator, parent, set())
    search._failed.setdefault(parent.hash, set()).add(edit)
    again = search._ranked_structural(mutator, parent, set())
    assert again is not None and again[1] != edit
    search._screened.add(again[0].hash())  # a child racing screened out counts as seen
    third = search._ranked_structural(mutator, parent, set())
    assert third is not None and third[0].hash() != again[0].hash() and third[1] != edit


def test_no_structural_neighbour_left_falls_back_to_the_draw(monkeypatch):
    monkeypatch.setattr(HFlowSearch, "_ranked_structural", lambda *a: None)
    search = _search(ranked_structural_share=1.0)
    search.initialize()
    search.step()
    assert len(_children(search)) >= 1


def test_prompt_edits_are_never_ranked_even_when_memory_favours_them():
    search = _search(ranked_structural_share=1.0)
    search.initialize()
    parent = search.population[0]
    mutator = search._mutator()
    prompts = [e for _, e in mutator.neighbours(parent.workflow) if e.startswith("prompt:")]
    assert prompts, "the premise: the parent has prompt neighbours"
    for _ in range(6):
        search.memory.record_edit(search.task.name, search.task.domain, prompts[0], "a", "b", 0.5, 1)
        search.memory.record_edit(search.task.name, search.task.domain, "add:refine", "a", "c", -0.5, 1)
    child, edit = search._ranked_structural(search._mutator(), parent, set())
    assert edit.split(":")[0] in STRUCTURAL, edit


def test_a_generation_never_ranks_the_same_child_twice():
    search = _search(ranked_structural_share=1.0)
    search.initialize()
    parent = search.population[0]
    mutator = search._mutator()
    first, _ = search._ranked_structural(mutator, parent, set())
    second, _ = search._ranked_structural(mutator, parent, {first.hash()})
    assert second.hash() != first.hash()


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_bad_shares_are_refused(value):
    with pytest.raises(ConfigError, match="ranked_structural_share"):
        SearchConfig(ranked_structural_share=value)


def test_preference_steering_reaches_the_ranked_children():
    """With ``preference_steering`` on, the ranking weighs what the rater likes as the drawn
    children do: after answers that always prefer a workflow holding the operator the ranking's
    first pick does not bring in, the ranked edit brings that operator in (memory neutral). Off,
    the same answers change nothing (before run 19 they never did: ranked children ignored them)."""
    from lightning_agents.hflow import Comparison, Node, Workflow
    from lightning_agents.hflow.evaluation import Individual

    def ranked(steering: float) -> str:
        search = _search(ranked_structural_share=1.0, preference_steering=steering, preference_weight=0.15)
        search.initialize()
        parent = search.population[0]
        mutator = search._mutator()
        options = [e for c, e in mutator.neighbours(parent.workflow) if e.split(":")[0] in ("add", "replace")]
        first = search._ranked_structural(mutator, parent, set())[1]
        liked = next(e.split(":")[1] for e in reversed(options) if e.split(":")[1] != first.split(":")[1])
        singles = [Workflow([Node("n0", op, backbone="cheap")], output="n0") for op in search.operators]
        for wf in singles:
            res = search.evaluator.evaluate(wf, search.problems)
            search.seen[wf.hash()] = Individual(wf, res.accuracy, res.cost, res.fitness, "seed", "", 0)
        good = next(w for w in singles if w.nodes[0].op == liked)
        for k, other in enumerate(w for w in singles if w.nodes[0].op != liked):
            for _ in range(3):
                search.preferences.add(Comparison(good.hash(), other.hash(), search.problems[k % 5]["id"], "a"))
        search._fit_preferences()
        edit = search._ranked_structural(search._mutator(), parent, set())[1]
        return first, liked, edit

    first, liked, edit = ranked(1.0)
    assert edit != first and edit.split(":")[1] == liked, (first, liked, edit)
    first_off, _, edit_off = ranked(0.0)
    assert edit_off == first_off
