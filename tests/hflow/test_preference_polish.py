"""The preference polish (``SearchConfig.preference_polish``): when the search ends, the best
workflows each get the one-edit child the preference model likes most evaluated, inside the
budget, and the choice rule may return it; off (0), or with no rater, the search is unchanged."""

from __future__ import annotations

import json
import random

import pytest

from lightning_agents.hflow import HFlowSearch, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.mutation import Mutator
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.test_search_logic import _Executor

# The executor scores 1.0 on every problem for any workflow with a programmer node on `cheap`.
PLAIN = Workflow([Node("a", "programmer", backbone="cheap")], output="a")
GEN = Workflow([Node("a", "generate", backbone="cheap")], output="a")
GEN_REFINED = Workflow(
    [Node("a", "generate", backbone="cheap"), Node("r", "refine", backbone="cheap")], [("a", "r")], "r"
)


def _has_refine(problem, trace):
    return float(any(s["op"] == "refine" for s in trace["steps"]))


def _search(polish, rater=True, final_questions=0, seeds=(PLAIN, GEN, GEN_REFINED), **kw):
    ex = _Executor()
    cfg = SearchConfig(
        population_size=3,
        offspring=2,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=0,
        final_questions=final_questions,
        preference_delta=0.02,
        preference_polish=polish,
        **kw,
    )
    return HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=_has_refine) if rater else None,
        rater_problems=ex.task.problems[10:],
        seeds=list(seeds),
    )


def _wants_refine(search, answers=6):
    """Answers of a rater who wants a refine step: the refined generate beat the plain one."""
    for k in range(answers):
        search.preferences.add(Comparison(GEN_REFINED.hash(), GEN.hash(), f"p{10 + k}", "a", "simulated"))
    search._fit_preferences()


def _is_refined_plain(wf: Workflow) -> bool:
    ops = sorted((n.op, n.backbone) for n in wf.nodes)
    return ops == [("programmer", "cheap"), ("refine", "cheap")] and wf.node(wf.output).op == "refine"


def test_the_polish_evaluates_the_liked_edit_of_the_best_workflow_and_the_choice_returns_it():
    search = _search(polish=1)
    search.initialize()
    _wants_refine(search)
    assert search.choose()[0].hash == PLAIN.hash()  # the refined programmer was never evaluated
    before = search.spent
    chosen, report = search.finish()
    (child_hash,) = [h for h in report["polished"].values() if h]
    child = search.seen[child_hash]
    assert report["polished"] == {PLAIN.hash(): child_hash}  # the best by fitness is the one polished
    assert _is_refined_plain(child.workflow) and child.edit == "add:refine" and child.parent == PLAIN.hash()
    assert child.fitness >= search.seen[PLAIN.hash()].fitness - 0.02  # within delta
    assert chosen.hash == child_hash and report["changed_by_preferences"]
    assert search.spent == before + len(search.problems)  # one evaluation on the search problems


def test_without_polish_the_same_answers_leave_the_choice_where_it_was():
    search = _search(polish=0)
    search.initialize()
    _wants_refine(search)
    before = search.spent
    chosen, report = search.finish()
    assert chosen.hash == PLAIN.hash() and search.spent == before and "polished" not in report


def test_no_answers_or_no_rater_polish_nothing():
    search = _search(polish=2)  # a rater, but no answers yet
    search.initialize()
    before = search.spent
    assert search.polish() == [] and search.spent == before
    search = _search(polish=2, rater=False)
    search.initialize()
    _wants_refine(search)  # answers from an earlier run, but nobody to ask: no taste is acted on
    assert search.polish() == [] and search.spent == before


def _run(polish, rater, budget=240, taste=False):
    search = _search(polish, rater=rater, final_questions=2, seeds=(GEN, GEN_REFINED))
    search.config.questions_per_generation = 2
    if taste:  # a taste for the polish to act on whatever the search's own answers were
        _wants_refine(search)
    search.run_until(budget)
    chosen, _ = search.finish()
    return search, chosen


def test_off_or_without_a_rater_the_search_is_unchanged():
    """The reserve and the polish act only with a rater: without one, n = 3 is n = 0 to the digit."""
    off, chosen_off = _run(polish=0, rater=False)
    on, chosen_on = _run(polish=3, rater=False)
    assert (on.spent, chosen_on.hash, on.generation) == (off.spent, chosen_off.hash, off.generation)
    assert sorted(on.seen) == sorted(off.seen) and on.polished == {}
    rated, _ = _run(polish=0, rater=True)
    assert rated.preferences.comparisons and rated.polished == {}  # answers, but n = 0: nothing polished


@pytest.mark.parametrize("budget", [120, 150, 200, 240])
def test_polish_runs_are_counted_and_the_budget_holds(budget):
    # the taste given, not only learned: since run 38 a built pair's answer the fitness explains
    # is not fitted, and at 240 runs this search's own answers left the polish no edit to gain by
    search, _ = _run(polish=2, rater=True, budget=budget, taste=True)
    assert search.questions_asked  # the search asked too
    polished = [h for h in search.polished.values() if h]
    assert polished, "the reserve keeps the polish's runs back, so at least one child fits"
    assert search.spent <= budget
    # the polished children's runs are in spent: each was evaluated on every search problem
    runs = {h for h, _ in search.evaluator.cache if h in polished}
    assert runs == set(polished)
    assert all(search.seen[h].edit != "seed" for h in polished)


def test_the_dollar_limit_stops_the_polish():
    search = _search(polish=2)
    search.initialize()
    _wants_refine(search)
    before = search.spent
    search.finish(max_cost=search.pool.ledger.total_cost())  # the dollars are spent already
    assert search.spent == before and search.polished == {}


def test_state_round_trip_keeps_what_was_polished():
    first = _search(polish=1)
    first.initialize()
    _wants_refine(first)
    chosen, _ = first.finish()
    state = json.loads(json.dumps(first.state_dict()))
    again = _search(polish=1)
    again.load_state_dict(state)
    assert again.polished == first.polished and any(again.polished.values())
    spent = again.spent
    assert again.polish() == [] and again.spent == spent  # a resumed finish does not polish twice
    assert again.choose()[0].hash == chosen.hash


def test_neighbours_are_valid_distinct_single_edits_and_draw_nothing():
    rng = random.Random(5)
    state = rng.getstate()
    m = Mutator(["cheap", "pricey"], rng, max_nodes=3)
    kids = m.neighbours(PLAIN)
    assert rng.getstate() == state
    hashes = [wf.hash() for wf, _ in kids]
    assert len(hashes) == len(set(hashes)) and PLAIN.hash() not in hashes
    for wf, _ in kids:
        wf.validate(["cheap", "pricey"], 3)
    edits = {e for _, e in kids}
    assert {"add:refine", "add:cot", "replace:cot", "backbone:pricey", "prompt:programmer:template"} <= edits
    assert any(_is_refined_plain(wf) for wf, _ in kids)
    # a full workflow gets no additions
    full = Mutator(["cheap", "pricey"], rng, max_nodes=1).neighbours(PLAIN)
    assert not any(e.startswith("add:") for _, e in full)


def test_the_polish_stays_within_run_until_budget_even_when_no_generation_ran():
    search = _search(polish=1)
    search.initialize()
    _wants_refine(search)
    budget = search.spent + 5  # room for no generation, and not for one child on 10 problems
    assert search.run_until(budget) == 0
    search.finish()
    assert search.spent <= budget and not any(search.polished.values())


def test_a_child_already_evaluated_is_not_polished_again():
    refined = Workflow(
        [Node("a", "programmer", backbone="cheap"), Node("r", "refine", backbone="cheap")], [("a", "r")], "r"
    )
    search = _search(polish=1, seeds=(PLAIN, GEN, GEN_REFINED, refined))
    search.initialize()
    _wants_refine(search)
    before = search.spent
    (child,) = search.polish()
    assert child.hash not in (refined.hash(), PLAIN.hash()) and child.parent == PLAIN.hash()
    assert search.spent == before + len(search.problems)  # a new workflow, paid in full
