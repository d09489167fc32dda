"""Taste the fitness already measures steers nothing (issue 17, run 35). A built pair's edit the
rater preferred because it was right where the best workflow was wrong, or cheaper at the same
score, becomes no child and its feature no won taste for the reach child; an edit preferred
against the objectives (dearer, or wrong) still counts. The population steering (taste children,
the taste lineage) acts only once more answers go against the objectives than the modelled flip
rate explains. A rater who prefers the right answer, then the cheaper (the main benchmark's),
agrees with the fitness: run 34 found the run-33 defaults spending GSM8K's children and dollars
on what the fitness already ranks."""

from __future__ import annotations

from test_preference_polish import GEN, GEN_REFINED, PLAIN

from lightning_agents.hflow import HFlowSearch, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.test_search_logic import TASTE_OFF, _Executor

# _Executor: a workflow with programmer@cheap is right on every problem; one with a pricey node
# on p0, p2, ...; any other on p0, p5. A pricey node costs ten cheap ones.
CHAIN = Workflow([Node("a", "programmer", backbone="cheap"), Node("r", "refine", backbone="cheap")], [("a", "r")], "r")


def _has_refine(problem, trace):
    return float(any(s["op"] == "refine" for s in trace["steps"]))


def _search(keep: tuple[Workflow, ...], criterion=None, problems=None) -> HFlowSearch:
    """A search whose evaluated workflows are ``keep`` only (the first the best by fitness), with
    built pairs on and a noiseless simulated rater (``criterion``: its hidden taste, or none)."""
    ex = _Executor()
    settings = dict(TASTE_OFF, preference_built_pairs=1, preference_built_reach=2)
    cfg = SearchConfig(
        population_size=3,
        offspring=3,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=1,
        final_questions=0,
        screen_problems=0,
        **settings,
    )
    search = HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=criterion),
        rater_problems=ex.task.problems[10:],
        seeds=list(keep),
    )
    search.initialize()
    search.seen = {wf.hash(): search.seen[wf.hash()] for wf in keep}
    search.population = list(search.seen.values())
    assert search.best_by_fitness().hash == keep[0].hash()
    if problems is not None:
        search.problems = [p for p in search.problems if p["id"] in problems]
    return search


def _ask(search: HFlowSearch, rounds: int = 6) -> list[str]:
    """Ask ``rounds`` rounds of built pairs; the winners of their decided answers ("edit"/"best"),
    the contender questions asked on top of them (run 38) left out."""
    for _ in range(rounds):
        search.ask_preferences()
    built = set(search.built)
    return [
        "edit" if {"a": c.a, "b": c.b}[c.winner] in built else "best"
        for c in search.preferences.comparisons
        if c.winner != "tie" and built & {c.a, c.b}
    ]


def test_an_edit_liked_for_being_right_is_no_child():
    """Before: GEN's edits to a programmer or a pricey backbone, right where GEN is wrong, won
    their built pairs and became children (and won features for the reach child)."""
    search = _search((GEN, GEN_REFINED), problems=("p1", "p2", "p3", "p4", "p6", "p7", "p8", "p9"))
    assert "edit" in _ask(search)  # the rater did prefer edits, for their right answers
    assert search._built_liked == [] and search.built_won == set()


def test_an_edit_liked_for_being_cheaper_is_no_child():
    """Before: CHAIN's edit dropping the refine (right as well, half the cost) won and became a
    child: the fitness's cost term a second time."""
    search = _search((CHAIN, GEN))

    def drop_the_refine(parent, skip):  # the built pair asked: CHAIN against itself less the refine
        return None if "output:programmer" in skip else ("output:programmer", PLAIN.copy(), "remove:r")

    search._built_pair = drop_the_refine
    assert _ask(search) == ["edit"] * 6
    assert search._built_liked == [] and search.built_won == set()


def test_an_edit_liked_against_the_objectives_still_counts():
    """A rater who wants a refine step prefers PLAIN's refine edit though it costs more: a taste
    the fitness does not measure, so the edit is a child and ``op:refine`` a won feature."""
    search = _search((PLAIN, GEN), criterion=_has_refine)
    assert "edit" in _ask(search)
    assert search._built_liked and all(any(n.op == "refine" for n in wf.nodes) for wf, _, _ in search._built_liked)
    assert any("refine" in f for f in search.built_won)


def _steering_search(taste: bool = True, seeds=(PLAIN, GEN, GEN_REFINED), **kw) -> HFlowSearch:
    ex = _Executor()
    cfg = dict(
        population_size=3,
        offspring=3,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=0,  # the answers are the test's own
        final_questions=0,
        ranked_structural_share=0.67,  # two ranked slots of three children
        rater_flip_rate=0.1,
        **({} if taste else TASTE_OFF),
    )
    cfg.update(kw)
    search = HFlowSearch(
        ex,
        SearchConfig(**cfg),
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0),  # no hidden criterion: right first, then cheaper
        rater_problems=ex.task.problems[10:],
        seeds=list(seeds),
    )
    search.initialize()
    return search


def _answers(search: HFlowSearch, with_fitness: int, against: int) -> None:
    """``with_fitness`` answers preferring PLAIN (right everywhere) to GEN and ``against`` answers
    preferring GEN, on search problems GEN gets wrong (both traces cached)."""
    for k in range(with_fitness + against):
        pid = f"p{1 + k % 4}"  # p1..p4: PLAIN right, GEN wrong
        winner = "a" if k < with_fitness else "b"
        search.preferences.add(Comparison(PLAIN.hash(), GEN.hash(), pid, winner, "simulated"))
    search._fit_preferences()


def _children_after_a_step(search: HFlowSearch) -> list[str]:
    search.step()
    return sorted(i.workflow.describe() for i in search.seen.values() if i.generation == 1)


def test_answers_the_fitness_explains_steer_nothing():
    """Before: any answer opened the taste parts, so a rater who only prefers the right answer
    (the main benchmark's) got a taste lineage and taste children built on what the fitness
    already ranks; now the search steps exactly as with the taste settings off."""
    gated = _steering_search()
    _answers(gated, with_fitness=8, against=0)
    assert gated.preference_model.feature_weight("op:programmer") > 0  # the model learned accuracy
    assert gated._taste_lineage() is None
    off = _steering_search(taste=False)
    _answers(off, with_fitness=8, against=0)
    assert _children_after_a_step(gated) == _children_after_a_step(off)
    assert gated._answers_against_objectives()[0] == 0 and not gated._has_taste()


def test_answers_against_the_objectives_open_the_gate_beyond_the_flip_rate():
    """One answer against the objectives in ten is what a flip rate of 0.1 explains (closed);
    five in ten is a taste (open: the lineage keeps the liked GEN line, the children differ)."""
    flipped = _steering_search()
    _answers(flipped, with_fitness=9, against=1)
    assert flipped._taste_lineage() is None
    assert flipped._answers_against_objectives() == (1, 10) and not flipped._has_taste()
    taste = _steering_search(preference_lineage=1.0)
    _answers(taste, with_fitness=5, against=5)
    assert taste._taste_lineage() is not None
    off = _steering_search(taste=False, preference_lineage=1.0)
    _answers(off, with_fitness=5, against=5)
    assert _children_after_a_step(taste) != _children_after_a_step(off)
    assert taste._answers_against_objectives() == (5, 10) and taste._has_taste()


def test_a_cheaper_answer_at_the_same_score_is_explained_too():
    """Both right: the rater's pick of the cheaper side is the fitness's cost term again."""
    search = _steering_search()
    for _ in range(4):  # p0: GEN right as well; GEN_REFINED costs two calls, GEN one
        search.preferences.add(Comparison(GEN.hash(), GEN_REFINED.hash(), "p0", "a", "simulated"))
    search._fit_preferences()
    assert search._taste_lineage() is None
    assert search._answers_against_objectives() == (0, 4) and not search._has_taste()


def test_what_the_objectives_explain():
    from lightning_agents.hflow.search import _for_the_objectives

    right, wrong = {"score": 1.0, "cost": 2.0}, {"score": 0.0, "cost": 1.0}
    assert _for_the_objectives(right, wrong)  # right where the other is wrong, though dearer
    assert _for_the_objectives({"score": 1.0, "cost": 1.0}, right)  # the same score, cheaper
    assert not _for_the_objectives(right, {"score": 1.0, "cost": 1.0})  # dearer at the same score
    assert not _for_the_objectives(wrong, right)  # wrong where the other is right
    assert not _for_the_objectives(right, dict(right))  # a tie on both: a taste (or a flip)
