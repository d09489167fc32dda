"""Search-level levers for the rater's taste (issue 17 target d, run 27): a taste lineage kept
alive (``SearchConfig.preference_lineage``, with ``preference_lineage_children``) and taste
children every generation (``preference_children``). Both act only with a rater and answers;
off (the default), or with no rater, the search is unchanged."""

from __future__ import annotations

import pytest
from test_preference_polish import GEN, GEN_REFINED, PLAIN, _wants_refine

from lightning_agents.hflow import HFlowSearch, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.preference_model import workflow_features
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.test_search_logic import TASTE_OFF, _Executor

COT = Workflow([Node("a", "cot", backbone="cheap")], output="a")
WITH_COT = (PLAIN, GEN, COT)  # the answers' workflows must be known to the model


def _has_refine(problem, trace):
    return float(any(s["op"] == "refine" for s in trace["steps"]))


def _search(rater=True, seeds=(PLAIN, GEN, GEN_REFINED), **kw) -> HFlowSearch:
    ex = _Executor()
    cfg = dict(
        population_size=3,
        offspring=2,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=0,
        final_questions=0,
        ranked_structural_share=0.5,  # one ranked slot of two children
        **TASTE_OFF,
    )
    cfg.update(kw)
    return HFlowSearch(
        ex,
        SearchConfig(**cfg),
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=_has_refine) if rater else None,
        rater_problems=ex.task.problems[10:],
        seeds=list(seeds),
    )


def _children(search: HFlowSearch) -> list:
    return [i for i in search.seen.values() if i.generation == search.generation and i.edit != "seed"]


def test_on_by_default():
    cfg = SearchConfig()  # run 33
    settings = (cfg.preference_lineage, cfg.preference_lineage_children, cfg.preference_children)
    assert settings + (cfg.preference_children_explore,) == (0.08, 1, 1, 1.0)


@pytest.mark.parametrize(
    "setting,value",
    [
        ("preference_lineage", -0.1),
        ("preference_children", -1),
        ("preference_lineage_children", -1),
        ("preference_children_explore", -0.5),
    ],
)
def test_negative_settings_are_refused(setting, value):
    with pytest.raises(ConfigError, match=f"search.{setting}"):
        SearchConfig(**{setting: value})


def _wants_cot(search: HFlowSearch, answers: int = 6) -> None:
    """Answers of a rater who wants a step-by-step (cot) step: a cot call beat a plain generate."""
    for k in range(answers):
        search.preferences.add(Comparison(COT.hash(), GEN.hash(), f"p{10 + k}", "a", "simulated"))
    search._fit_preferences()


def _cot_children_of_plain(search: HFlowSearch) -> list:
    return [
        c
        for c in _children(search)
        if c.parent == PLAIN.hash() and c.edit.endswith(":cot") and any(n.op == "cot" for n in c.workflow.nodes)
    ]


def test_the_taste_child_is_the_best_workflows_most_liked_structural_edit():
    taste, plain = _search(preference_children=1, seeds=WITH_COT), _search(seeds=WITH_COT)
    for search in (taste, plain):
        search.initialize()
        _wants_cot(search)
        assert search.best_by_fitness().hash == PLAIN.hash()
    # the model's most liked structural edit of the best, before the generation that makes it
    model = taste.preference_model
    edits = [
        c
        for c, e in taste._mutator().neighbours(PLAIN)
        if e.split(":")[0] in {"add", "replace", "remove", "backbone"} and c.hash() not in taste.seen  # fresh only
    ]
    expected = max(edits, key=model.score)  # a cot branch voted in (a lone cot call was evaluated)
    assert model.score(expected) > model.score(PLAIN) and any(n.op == "cot" for n in expected.nodes)
    for search in (taste, plain):
        search.step()
    (child,) = _cot_children_of_plain(taste)
    assert child.hash == expected.hash()
    # without the setting the ranked slot is memory's pick (neighbours' first: a refine step)
    assert _cot_children_of_plain(plain) == []


def test_a_failed_taste_edit_is_not_made_again():
    search = _search(preference_children=1, seeds=WITH_COT)
    search.initialize()
    _wants_cot(search)
    first = search._taste_child(search._mutator(), search.seen[PLAIN.hash()], set())
    assert first is not None
    search._failed.setdefault(PLAIN.hash(), set()).add(first[1])  # as if it had lost fitness
    again = search._taste_child(search._mutator(), search.seen[PLAIN.hash()], set())
    assert again is None or again[1] != first[1]


def test_exploring_taste_children_try_a_feature_no_answer_touched():
    picks = {}
    for k in (0.0, 1.0):
        search = _search(preference_children=1, preference_children_explore=k)
        search.initialize()
        _wants_refine(search)
        picks[k] = search._taste_child(search._mutator(), search.seen[PLAIN.hash()], set())
    model = search.preference_model
    assert picks[0.0][1] == "add:refine"  # the gain alone: the taste the answers showed
    child, edit = picks[1.0]
    untouched = set(workflow_features(child)) - set(workflow_features(PLAIN)) - set(model.vocab)
    assert edit != "add:refine" and untouched  # optimism: something the rater was never asked about
    assert search._taste_spread(child, PLAIN) > search._taste_spread(picks[0.0][0], PLAIN)


def test_the_lineage_keeps_the_most_liked_workflow_within_the_band():
    kept = _search(preference_lineage=1.0, population_size=2)
    plain = _search(population_size=2)
    for search in (kept, plain):
        search.initialize()
        _wants_refine(search)
        for _ in range(2):
            search.step()
    # the most liked workflow evaluated (band 1.0: all of them), scored independently of the lever
    liked = max(kept.seen.values(), key=lambda i: (kept.preference_score(i), i.fitness, -i.cost, i.hash))
    assert any(n.op == "refine" for n in liked.workflow.nodes)
    assert liked.hash in {i.hash for i in kept.population}
    assert len(kept.population) == 2
    # fitness ranking alone drops the liked low-fitness generate + refine
    assert GEN_REFINED.hash() not in {i.hash for i in plain.population}


def test_the_lineage_keeps_nothing_outside_its_band():
    search = _search(preference_lineage=1e-6, population_size=2)
    search.initialize()
    _wants_refine(search)
    search.step()
    top = max(i.fitness for i in search.seen.values())
    assert all(i.fitness >= top - 1e-6 - 1e-12 for i in [search._taste_lineage()])
    assert GEN_REFINED.hash() not in {i.hash for i in search.population}


def test_the_lineage_child_takes_the_lineage_as_its_parent():
    search = _search(preference_lineage=1.0, preference_lineage_children=1, population_size=2)
    search.initialize()
    _wants_refine(search)
    lineage = search._taste_lineage()
    assert lineage.hash != search.best_by_fitness().hash  # a tasteful line below the best
    search.step()
    assert any(c.parent == lineage.hash for c in _children(search))


@pytest.mark.parametrize("case", ["no rater", "no answers", "answers but no rater"])
def test_without_a_rater_or_answers_the_search_is_unchanged(case):
    on = dict(preference_lineage=1.0, preference_lineage_children=1, preference_children=1)
    runs = []
    for settings in (on, {}):
        search = _search(rater=case == "no answers", **settings)
        search.initialize()
        if case == "answers but no rater":
            _wants_refine(search)  # answers in the store, but no rater: nothing to steer by
        for _ in range(3):
            search.step()
        runs.append(([i.hash for i in search.population], sorted(search.seen), search.spent))
    assert runs[0] == runs[1]
