"""The reach child (issue 17 target d, runs 31-32, ``SearchConfig.preference_built_reach``): once a
built pair's answer preferred the edit bringing in a feature the best workflow lacks, each
generation one child is the fresh workflow with the feature that a fitness regression on the
evaluated workflows predicts fittest, among those up to that many structural edits from the best.
Run 32's levers: ``preference_reach_full`` (the child is evaluated on every search problem, never
raced), ``preference_reach_ops`` (operator features only) and ``preference_reach_small`` (the small
shapes are candidates too). With no rater the search is unchanged."""

from __future__ import annotations

import pytest
from test_preference_built_pairs import PLAIN, _cot, _has_cot, _search, _started

from lightning_agents.hflow import Node, SearchConfig, Workflow
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.preferences import Comparison

COT_PRICEY = Workflow([Node("a", "cot", backbone="pricey")], output="a")
COT_FEATURE = "op@backbone:cot@pricey"
LEVERS = {"preference_reach_full": True, "preference_reach_ops": True, "preference_reach_small": 2}


def _likes(search, wf: Workflow, feature: str, answers: int = 3) -> None:
    """Answers preferring ``wf`` (built, not evaluated) to PLAIN, as a built pair about ``feature`` would give."""
    search.built[wf.hash()] = wf
    for k in range(answers):
        search.preferences.add(Comparison(wf.hash(), PLAIN.hash(), f"p{k}", "a", "simulated"))
    search.built_won.add(feature)
    search._fit_preferences()


def test_off_by_default_and_validated():
    cfg = SearchConfig()
    assert (cfg.preference_built_reach, cfg.preference_built_reach_sd) == (0, 0.0)
    assert (cfg.preference_reach_full, cfg.preference_reach_ops, cfg.preference_reach_small) == (False, False, 0)
    with pytest.raises(ConfigError, match="search.preference_built_reach "):
        SearchConfig(preference_built_reach=3)
    with pytest.raises(ConfigError, match="search.preference_built_reach_sd"):
        SearchConfig(preference_built_reach_sd=-0.5)
    with pytest.raises(ConfigError, match="search.preference_reach_small "):
        SearchConfig(preference_built_reach=2, preference_reach_small=4)
    for name, value in LEVERS.items():  # each lever changes the reach child: alone it would do nothing
        with pytest.raises(ConfigError, match=f"search.{name} .*search.preference_built_reach above 0"):
            SearchConfig(**{name: value})
        SearchConfig(preference_built_reach=1, **{name: value})


@pytest.mark.parametrize("reach", [1, 2])
def test_a_feature_two_edits_away_needs_reach_two(reach):
    # one node at most: of PLAIN (programmer@cheap) no single edit brings in cot on pricey
    # (replace gives cot@cheap, backbone gives programmer@pricey); both together do
    search = _started(_search(preference_built_reach=reach), pin=False)
    search.config.max_nodes = 1  # after the seeds (up to three nodes) are evaluated
    assert search.best_by_fitness().hash == PLAIN.hash()
    _likes(search, COT_PRICEY, COT_FEATURE)
    assert search.preference_model.feature_weight(COT_FEATURE) > 0
    got = search._reach_child()
    if reach == 1:
        assert got is None
    else:
        wf, edit, parent = got
        assert wf.hash() == COT_PRICEY.hash() and parent == PLAIN.hash()
        assert edit.startswith("reach:") and len(edit.split("+")) == 2


def test_the_reach_child_is_the_one_predicted_fittest():
    # PLAIN's two-edit workflows with cot@pricey: those keeping programmer@cheap (the one
    # thing every fit evaluated workflow shares) are predicted fitter than those dropping it
    search = _started(_search(max_nodes=3, preference_built_reach=2), pin=False)
    _likes(search, COT_PRICEY, COT_FEATURE)
    wf, edit, _ = search._reach_child()
    assert any(n.op == "cot" and n.backbone == "pricey" for n in wf.nodes)
    assert any(n.op == "programmer" and n.backbone == "cheap" for n in wf.nodes)
    assert wf.hash() not in search.seen
    # and it really is fitter than the cot workflow without the programmer
    fit = search.evaluator.evaluate(wf, search.problems, 0).fitness
    assert fit > search.evaluator.evaluate(COT_PRICEY, search.problems, 0).fitness + 0.3


def test_only_a_feature_a_built_pair_won_is_reached_for():
    search = _started(_search(preference_built_reach=2), pin=False)
    search.config.max_nodes = 1
    _likes(search, COT_PRICEY, COT_FEATURE)
    search.built_won.clear()  # the same answers, not from a built pair
    assert search.preference_model.feature_weight(COT_FEATURE) > 0
    assert search._reach_child() is None
    # a won feature the answers do not like surely enough is not reached for either
    search.built_won.add(COT_FEATURE)
    model = search.preference_model
    sd = model.feature_weight(COT_FEATURE) / model.feature_variance(COT_FEATURE) ** 0.5
    search.config.preference_built_reach_sd = sd + 0.1
    assert search._reach_child() is None
    search.config.preference_built_reach_sd = sd - 0.1
    assert search._reach_child() is not None


@pytest.mark.parametrize("full", [False, True])
def test_a_full_reach_child_is_never_raced(full):
    # cot@pricey (two edits from PLAIN with one node at most) answers only the even problems: a
    # race on the first two problems screens it out; with preference_reach_full it is evaluated
    # on every search problem, enters the lineage as a child of the best and its runs are counted
    search = _started(
        _search(
            preference_built_reach=2,
            preference_reach_full=full,
            screen_problems=2,
            questions_per_generation=0,  # no new answers: the child below is the only reach child
        ),
        pin=False,
    )
    search.config.max_nodes = 1
    _likes(search, COT_PRICEY, COT_FEATURE)
    reached = search._reach_child()
    assert reached[0].hash() == COT_PRICEY.hash()
    search._built_liked.append(reached)
    search.step()
    h = COT_PRICEY.hash()
    cached = [p["id"] for p in search.problems if (h, p["id"]) in search.evaluator.cache]
    if not full:
        assert h in search._screened and h not in search.seen
        assert len(cached) < len(search.problems)
    else:
        assert h not in search._screened and search.seen[h].parent == PLAIN.hash()
        assert len(cached) == len(search.problems)
        assert search.seen[h].edit.startswith("reach:")
    assert search.evaluator.problem_runs == search.spent


def test_the_reach_child_is_evaluated_and_counted():
    # the built pair asks about cot, the rater prefers it, and the same generation also gets the
    # reach child, never raced: both children of the best, their runs counted in `spent`
    settings = dict(rater=_has_cot, preference_built_pairs=1, screen_problems=2)
    reach = _started(_search(preference_built_reach=2, preference_reach_full=True, **settings))
    plain = _started(_search(**settings))
    for search in (reach, plain):
        search.ask_preferences()
        search.queued = [(wf.hash(), edit) for wf, edit, _ in search._built_liked]
    assert reach.built_won == {"op:cot"} == plain.built_won
    assert len(plain.queued) == 1 and len(reach.queued) == 2
    (h, edit) = reach.queued[1]
    assert edit.startswith("reach:") and h != reach.queued[0][0]  # not the built edit again
    reach.step()
    child = reach.seen[h]
    assert child.parent == PLAIN.hash() and _cot(child.workflow)
    assert all((h, p["id"]) in reach.evaluator.cache for p in reach.problems)
    assert reach.evaluator.problem_runs == reach.spent


def test_ops_only_reaches_for_operator_features():
    # the answers like cot@pricey's output step more surely than its operator
    search = _started(_search(preference_built_reach=2, preference_reach_ops=True), pin=False)
    search.config.max_nodes = 1
    _likes(search, COT_PRICEY, "output:cot", answers=6)
    assert search._most_liked_missing(PLAIN) is None  # output:cot is not an operator feature
    search.config.preference_reach_ops = False
    assert search._most_liked_missing(PLAIN) == "output:cot"  # what run 31 reached for
    search.config.preference_reach_ops = True
    search.built_won.add("op:cot")
    assert search._most_liked_missing(PLAIN) == "op:cot"
    assert _cot(search._reach_child()[0])


def test_small_shapes_are_candidates_beyond_the_edits_of_the_best():
    # one node at most and reach 1: no single edit of PLAIN brings in cot@pricey, but the small
    # shapes (every workflow of one node) hold it
    search = _started(_search(preference_built_reach=1), pin=False)
    search.config.max_nodes = 1
    _likes(search, COT_PRICEY, COT_FEATURE)
    assert search._reach_child() is None
    search.config.preference_reach_small = 2
    wf, edit, parent = search._reach_child()
    assert wf.hash() == COT_PRICEY.hash() and edit == "reach:small" and parent == PLAIN.hash()


def test_the_small_shapes_are_every_workflow_of_that_many_nodes():
    search = _search(preference_built_reach=1, preference_reach_small=2, max_nodes=3)
    small = search.small_workflows()
    assert small is search.small_workflows()  # listed once
    hashes = [h for _, h, _ in small]
    assert len(hashes) == len(set(hashes)) and all(wf.hash() == h for wf, h, _ in small)
    assert max(len(wf.nodes) for wf, _, _ in small) == 2
    singles = {(wf.nodes[0].op, wf.nodes[0].backbone) for wf, _, _ in small if len(wf.nodes) == 1}
    assert {("generate", "cheap"), ("cot", "pricey"), ("programmer", "cheap")} <= singles
    # a call then a refine on another backbone: two edits from a single call
    assert any([(n.op, n.backbone) for n in wf.nodes] == [("cot", "pricey"), ("refine", "cheap")] for wf, _, _ in small)
    assert _search(preference_built_reach=1).small_workflows() == []  # off: nothing listed


def test_built_won_survives_a_checkpoint():
    search = _started(_search(preference_built_pairs=1, preference_built_reach=2))
    search.ask_preferences()
    assert search.built_won
    resumed = _search(preference_built_pairs=1, preference_built_reach=2)
    resumed.load_state_dict(search.state_dict())
    assert resumed.built_won == search.built_won


@pytest.mark.parametrize("case", ["no rater", "answers but no rater"])
def test_without_a_rater_the_search_is_unchanged(case):
    runs = []
    for settings in ({"preference_built_pairs": 1, "preference_built_reach": 2, **LEVERS}, {}):
        search = _search(rater=None, questions_per_generation=4, screen_problems=2, **settings)
        search.initialize()
        if case == "answers but no rater":
            _likes(search, COT_PRICEY, COT_FEATURE)
        for _ in range(3):
            search.step()
        runs.append(([i.hash for i in search.population], sorted(search.seen), search.spent, search.questions_asked))
    assert runs[0] == runs[1]
