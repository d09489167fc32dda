"""Questions about pairs the search builds (issue 17 target d, run 29,
``SearchConfig.preference_built_pairs``): the best workflow against its unevaluated structural
edit that brings in the feature the answers pinned least, asked on a search problem (the edit's
runs paid and counted); an edit the rater prefers becomes one of the generation's children. With
no rater the search is unchanged."""

from __future__ import annotations

import pytest
from test_preference_polish import GEN, GEN_REFINED, PLAIN, _wants_refine

from lightning_agents.hflow import HFlowSearch, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.test_search_logic import TASTE_OFF, _Executor

# The executor scores 1.0 everywhere for a workflow with programmer@cheap (PLAIN is the best by
# fitness, the cheapest of those); a lone cheap call of anything else scores 1.0 only on p0, p5, ...


def _chain(op: str) -> Workflow:
    return Workflow([Node("a", "programmer", backbone="cheap"), Node("b", op, backbone="cheap")], [("a", "b")], "b")


# a vote over a programmer and a generate branch: lets answers pin op:vote
VOTE = Workflow(
    [
        Node("a", "programmer", backbone="cheap"),
        Node("g", "generate", backbone="cheap"),
        Node("v", "vote", backbone="cheap"),
    ],
    [("a", "v"), ("g", "v")],
    "v",
)
SEEDS = (PLAIN, GEN, GEN_REFINED, _chain("test"), _chain("format"), VOTE)


def _has_cot(problem, trace):
    return float(any(s["op"] == "cot" for s in trace["steps"]))


def _no_cot(problem, trace):
    return -_has_cot(problem, trace)


def _search(rater=_has_cot, **kw) -> HFlowSearch:
    ex = _Executor()
    cfg = dict(
        population_size=3,
        offspring=2,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=1,
        final_questions=0,
        **TASTE_OFF,
    )
    cfg.update(kw)
    return HFlowSearch(
        ex,
        SearchConfig(**cfg),
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=rater) if rater else None,
        rater_problems=ex.task.problems[10:],
        seeds=list(SEEDS),
    )


def _pin_all_but_cot(search: HFlowSearch) -> None:
    """Answers that contrast every operator the neighbours of PLAIN bring in except cot:
    refine (generate+refine against generate), programmer (against generate), test, format and
    vote (a programmer with one against one without). No cot workflow was ever evaluated."""
    _wants_refine(search)
    for k in range(4):
        search.preferences.add(Comparison(PLAIN.hash(), GEN.hash(), f"p{20 + k}", "a", "simulated"))
        for other in (_chain("test"), _chain("format"), VOTE):
            search.preferences.add(Comparison(other.hash(), PLAIN.hash(), f"p{20 + k}", "a", "simulated"))
    search._fit_preferences()


def _started(search: HFlowSearch, pin: bool = True) -> HFlowSearch:
    search.initialize()
    search.population = sorted(search.population, key=lambda i: (-i.fitness, i.cost, i.hash))[:3]
    if pin:
        _pin_all_but_cot(search)
    return search


def _cot(wf: Workflow) -> bool:
    return any(n.op == "cot" for n in wf.nodes)


def test_on_by_default():
    assert SearchConfig().preference_built_pairs == 1  # run 33


def test_a_negative_count_is_refused():
    with pytest.raises(ConfigError, match="search.preference_built_pairs"):
        SearchConfig(preference_built_pairs=-1)


def test_the_built_pair_brings_in_the_feature_no_answer_pinned():
    search = _started(_search(preference_built_pairs=1))
    assert not any(_cot(i.workflow) for i in search.seen.values())  # nothing to ask about by itself
    model = search.preference_model
    assert model.feature_variance("op:cot") > max(
        model.feature_variance(f"op:{op}") for op in ("refine", "programmer", "generate", "test", "format", "vote")
    )
    best = search.best_by_fitness()
    assert best.hash == PLAIN.hash()
    feature, child, edit = search._built_pair(best, set())
    assert feature == "op:cot" and _cot(child) and child.hash() not in search.seen
    assert edit.split(":")[0] in ("add", "replace")
    # a feature already tried this round is skipped, and an edit already built is not built
    # again: the next pair is another feature on another edit
    search.built[child.hash()] = child
    feature2, child2, _ = search._built_pair(best, {"op:cot"})
    assert feature2 != "op:cot" and child2.hash() != child.hash()


def test_the_search_asks_the_built_pair_and_pays_only_the_edits_runs():
    built, plain = _started(_search(preference_built_pairs=1)), _started(_search())
    for search in (built, plain):
        before = len(search.preferences.comparisons)
        # the built pair asks on top of the generation's one contender question (run 38), first
        assert search.ask_preferences() == (2 if search is built else 1)
        search.asked = search.preferences.comparisons[before]
    asked = built.asked
    assert PLAIN.hash() in {asked.a, asked.b}
    (other,) = {asked.a, asked.b} - {PLAIN.hash()}
    child = built.built[other]
    assert _cot(child) and other not in built.seen  # asked about, not evaluated
    assert asked.problem_id in {p["id"] for p in built.problems}  # a search problem
    # PLAIN's traces there are cached: only the edit's runs are paid (one per problem tried)
    assert 1 <= sum(h == other for h, _ in built.evaluator.cache) <= 4
    assert built.evaluator.problem_runs == built.spent
    # the answer teaches the model the taste: op:cot now has a positive weight
    assert built.preference_model.feature_weight("op:cot") > 0
    assert [wf.hash() for wf, _, _ in built._built_liked] == [other]
    # the ordinary question is about evaluated contenders: no cot workflow was ever asked about
    assert not any(_cot(plain._known_workflows()[h]) for h in (plain.asked.a, plain.asked.b))
    assert plain.preference_model.feature_weight("op:cot") == 0


def test_a_built_pair_goes_to_a_problem_both_answer_right():
    search = _started(_search(preference_built_pairs=1), pin=False)
    cot = Workflow([Node("a", "cot", backbone="cheap")], output="a")
    # PLAIN is right everywhere, cot@cheap only on p0 and p5
    p = {q["id"]: q for q in search.problems}
    for _ in range(5):  # whatever order the draw puts them in
        problem, tp, tc = search._question_problem(PLAIN, cot, [p["p1"], p["p5"], p["p2"], p["p3"]])
        assert problem["id"] == "p5" and tp["score"] == tc["score"] == 1.0
    # none right for both: a problem whose answers differ all the same
    problem, _, tc = search._question_problem(PLAIN, cot, [p["p1"], p["p2"]])
    assert problem["id"] in ("p1", "p2") and tc["score"] == 0.0


def test_a_preferred_edit_becomes_a_child_and_a_rejected_one_does_not():
    # no racing: the cot edit (0.2) would be dropped after a few problems, as any weak child is
    liked = _started(_search(preference_built_pairs=1, screen_problems=0))
    disliked = _started(_search(rater=_no_cot, preference_built_pairs=1, screen_problems=0))
    for search in (liked, disliked):
        search.step()
    (built_liked,) = list(liked.built)
    # evaluated on every search problem as one of the generation's children of the best workflow
    child = liked.seen[built_liked]
    assert child.parent == PLAIN.hash() and child.generation == 1 and _cot(child.workflow)
    assert all((built_liked, p["id"]) in liked.evaluator.cache for p in liked.problems)
    (built_disliked,) = list(disliked.built)
    assert built_disliked not in disliked.seen and built_disliked not in disliked._screened
    assert liked._built_liked == [] and disliked._built_liked == []


def test_the_built_workflows_survive_a_checkpoint():
    search = _started(_search(preference_built_pairs=1))
    search.ask_preferences()
    state = search.state_dict()
    resumed = _search(preference_built_pairs=1)
    resumed.load_state_dict(state)
    assert set(resumed.built) == set(search.built)
    # the answer about the unevaluated edit still counts after the restart
    assert resumed.preference_model.feature_weight("op:cot") == pytest.approx(
        search.preference_model.feature_weight("op:cot")
    )
    assert resumed.preference_model.feature_weight("op:cot") > 0


@pytest.mark.parametrize("case", ["no rater", "answers but no rater"])
def test_without_a_rater_the_search_is_unchanged(case):
    runs = []
    for settings in ({"preference_built_pairs": 2}, {}):
        search = _search(rater=None, questions_per_generation=4, **settings)
        search.initialize()
        if case == "answers but no rater":
            _pin_all_but_cot(search)  # answers in the store, but no rater to ask
        for _ in range(3):
            search.step()
        runs.append(([i.hash for i in search.population], sorted(search.seen), search.spent, search.questions_asked))
        assert search.built == {}
    assert runs[0] == runs[1]
