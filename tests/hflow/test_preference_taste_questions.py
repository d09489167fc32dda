"""Questions that teach the rater's taste (issue 17 target d, run 28,
``SearchConfig.taste_questions``): of each generation's questions, some go to the feature the
answers have pinned least, contrasted by any two evaluated workflows (not only the contenders
near the best), asked where both answers are right. With no rater the search is unchanged."""

from __future__ import annotations

import pytest
from test_preference_polish import GEN, GEN_REFINED, PLAIN, _wants_refine

from lightning_agents.hflow import HFlowSearch, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.preference_model import workflow_features
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.test_search_logic import _Executor

# The executor scores 1.0 everywhere for a workflow with programmer@cheap; a lone cheap call of
# anything else scores 1.0 only on problems p0, p5, p10, ... (0.2 overall).
COT = Workflow([Node("a", "cot", backbone="cheap")], output="a")


def _fit_chain(op: str, backbone: str) -> Workflow:
    return Workflow([Node("a", "programmer", backbone="cheap"), Node("b", op, backbone=backbone)], [("a", "b")], "b")


# Thirteen workflows fitter than COT: with them evaluated, COT is no contender (near the best, in
# the population or among the best dozen), so the ordinary questions never reach it.
FIT = [PLAIN] + [_fit_chain(op, bb) for op in ("refine", "format", "test") for bb in ("cheap", "pricey")]
FIT += [
    Workflow([Node("a", "programmer", backbone="cheap", prompt=f"Solve it, style {k}.")], output="a") for k in range(6)
]


def _has_cot(problem, trace):
    return float(any(s["op"] == "cot" for s in trace["steps"]))


def _search(rater=True, seeds=(*FIT, GEN, GEN_REFINED, COT), **kw) -> HFlowSearch:
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
    )
    cfg.update(kw)
    return HFlowSearch(
        ex,
        SearchConfig(**cfg),
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=_has_cot) if rater else None,
        rater_problems=ex.task.problems[10:],
        seeds=list(seeds),
    )


def _started(search: HFlowSearch) -> HFlowSearch:
    """``search`` initialized, its population cut to the fittest three as selection would (the
    first population holds every seed)."""
    search.initialize()
    search.population = sorted(search.population, key=lambda i: (-i.fitness, i.cost, i.hash))[:3]
    return search


def _pin_all_but_cot(search: HFlowSearch) -> None:
    """Answers that contrast refine (generate+refine against generate), programmer (against
    generate), test and format (a programmer with one against one without): every operator the
    seeds have is pinned somewhat, except cot."""
    _wants_refine(search)
    for k in range(4):
        search.preferences.add(Comparison(PLAIN.hash(), GEN.hash(), f"p{20 + k}", "a", "simulated"))
        for op in ("test", "format"):
            search.preferences.add(
                Comparison(_fit_chain(op, "cheap").hash(), PLAIN.hash(), f"p{20 + k}", "a", "simulated")
            )
    search._fit_preferences()


def test_off_by_default():
    assert SearchConfig().taste_questions == 0


def test_a_negative_count_is_refused():
    with pytest.raises(ConfigError, match="search.taste_questions"):
        SearchConfig(taste_questions=-1)


def test_the_taste_question_contrasts_the_feature_no_answer_pinned():
    taste, plain = _search(taste_questions=1), _search()
    for search in (taste, plain):
        _started(search)
        _pin_all_but_cot(search)
        assert COT.hash() in search.seen
        assert COT.hash() not in {i.hash for i in search._contenders()}
    model = taste.preference_model
    assert model.feature_variance("op:cot") > max(
        model.feature_variance(f"op:{op}") for op in ("refine", "programmer", "generate", "test", "format")
    )
    feature, a, b = taste._taste_pair(set(), set())
    # the cot workflow against the evaluated one that differs least from it (the fittest of those)
    assert (feature, a.hash, b.hash) == ("op:cot", COT.hash(), PLAIN.hash())
    for search in (taste, plain):
        before = len(search.preferences.comparisons)
        assert search.ask_preferences() == 1
        (asked,) = search.preferences.comparisons[before:]
        search.asked_pair = {asked.a, asked.b}
    assert taste.asked_pair == {COT.hash(), PLAIN.hash()}
    # the ordinary question is about contenders only: the cot workflow is never asked about
    assert COT.hash() not in plain.asked_pair


def test_the_next_taste_question_moves_to_another_feature():
    search = _started(_search(taste_questions=2, questions_per_generation=2))
    _pin_all_but_cot(search)
    before = len(search.preferences.comparisons)
    search.ask_preferences()
    first, second = search.preferences.comparisons[before:]
    assert {first.a, first.b} == {COT.hash(), PLAIN.hash()}
    assert {second.a, second.b} != {first.a, first.b}


def test_a_taste_question_goes_where_both_answers_are_right():
    search = _search(taste_questions=1)
    search.initialize()
    cot, plain = search.seen[COT.hash()], search.seen[PLAIN.hash()]
    # cot@cheap is right only on p10, p15, ...; programmer@cheap on every problem
    problems = [search.rater_problems[k] for k in (1, 2, 5, 3)]  # p11, p12, p15, p13
    ((chosen, ta, tb),) = search._question_problem(cot, plain, problems, both_right=True)
    assert chosen["id"] == "p15" and ta["score"] == tb["score"] == 1.0
    # the ordinary questions take the first problem whose answers differ
    ((first, _, _),) = search._question_problem(cot, plain, problems, both_right=False)
    assert first["id"] == "p11"
    # none right for both: the first that differs
    ((fallback, _, _),) = search._question_problem(cot, plain, problems[:2], both_right=True)
    assert fallback["id"] == "p11"


def test_a_prompt_alone_is_no_taste_contrast():
    search = _started(_search(taste_questions=1))
    # two evaluated workflows that differ only in a prompt: a rewritten prompt belongs to one
    # workflow (its offset learns it), so no taste question is about it
    kept = [search.seen[PLAIN.hash()], search.seen[FIT[-1].hash()]]
    assert any(k.startswith("prompt:") for k in workflow_features(FIT[-1]))
    search.seen, search.population = {i.hash: i for i in kept}, kept
    assert search._taste_pair(set(), set()) is None
    # a third that differs in an operator is
    search.seen[COT.hash()] = _started(_search()).seen[COT.hash()]
    feature, a, b = search._taste_pair(set(), set())
    assert feature.split(":")[0] in {"op", "output"} and COT.hash() in {a.hash, b.hash}


@pytest.mark.parametrize("case", ["no rater", "answers but no rater"])
def test_without_a_rater_the_search_is_unchanged(case):
    runs = []
    for settings in ({"taste_questions": 2}, {}):
        search = _search(rater=False, questions_per_generation=4, **settings)
        search.initialize()
        if case == "answers but no rater":
            _pin_all_but_cot(search)  # answers in the store, but no rater to ask
        for _ in range(3):
            search.step()
        runs.append(([i.hash for i in search.population], sorted(search.seen), search.spent, search.questions_asked))
    assert runs[0] == runs[1]
