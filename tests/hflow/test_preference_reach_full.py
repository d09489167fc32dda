"""The reach child (issue 17 target d, runs 31-32, ``SearchConfig.preference_built_reach``): once a
built pair's answer preferred the edit bringing in a feature the best workflow lacks, each
generation one child is the fresh workflow with the feature that a fitness regression on the
evaluated workflows predicts fittest, among those up to that many structural edits from the best.
Run 32's levers: the child is evaluated on every search problem, never raced (now always),
``preference_reach_ops`` (operator features only) and ``preference_reach_small`` (the small shapes are
candidates too). Run 33's: ``preference_reach_as_op`` (a won ``op@backbone:X@b`` or
``output:X`` counts as ``op:X``) and ``preference_reach_anchor`` (predictions anchored on the nearest
evaluated workflow).
With no rater the search is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from test_preference_built_pairs import PLAIN, _cot, _has_cot, _started
from test_preference_built_pairs import _search as _built_pairs_search

from lightning_agents.hflow import HFlowSearch, Node, SearchConfig, Workflow
from lightning_agents.hflow import search as search_module
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.preference_model import workflow_features
from lightning_agents.hflow.preferences import Comparison

COT_PRICEY = Workflow([Node("a", "cot", backbone="pricey")], output="a")
COT_FEATURE = "op@backbone:cot@pricey"
LEVERS = {
    "preference_reach_ops": True,
    "preference_reach_small": 2,
    "preference_reach_as_op": True,
    "preference_reach_anchor": True,
}


# every taste setting off (run 33 turned them on by default): each test turns on what it is about
OFF = dict(
    preference_lineage=0.0,
    preference_lineage_children=0,
    preference_children=0,
    preference_children_explore=0.0,
    preference_built_pairs=0,
    preference_built_reach=0,
    preference_reach_ops=False,
    preference_reach_small=0,
    preference_reach_as_op=False,
    preference_reach_anchor=False,
)


def _search(rater=_has_cot, **kw) -> HFlowSearch:
    """The built-pairs tests' search with every taste setting off but those in ``kw``."""
    return _built_pairs_search(rater, **{**OFF, **kw})


def _likes(search, wf: Workflow, feature: str, answers: int = 3) -> None:
    """Answers preferring ``wf`` (built, not evaluated) to PLAIN, as a built pair about ``feature`` would give."""
    search.built[wf.hash()] = wf
    for k in range(answers):
        search.preferences.add(Comparison(wf.hash(), PLAIN.hash(), f"p{k}", "a", "simulated"))
    search.built_won.add(feature)
    search._fit_preferences()


def test_on_by_default_and_validated():
    # run 33 adopted the pick (docs/benchmarks.md): run 29's built pairs with run 27's taste
    # children and lineage, and the reach child with all its levers
    cfg = SearchConfig()
    assert (cfg.preference_built_pairs, cfg.preference_children, cfg.preference_lineage_children) == (1, 1, 1)
    assert (cfg.preference_lineage, cfg.preference_children_explore) == (0.08, 1.0)
    assert (cfg.preference_built_reach, cfg.preference_reach_small) == (2, 3)
    assert cfg.preference_reach_ops and cfg.preference_reach_as_op and cfg.preference_reach_anchor
    with pytest.raises(ConfigError, match="search.preference_built_reach "):
        SearchConfig(preference_built_reach=3)
    with pytest.raises(ConfigError, match="search.preference_reach_small "):
        SearchConfig(preference_reach_small=4)
    SearchConfig(preference_built_reach=0)  # the levers then do nothing


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
    search.built_won.add(COT_FEATURE)
    assert search._reach_child() is not None
    # nor a won feature the answers, all told, do not like
    search.preferences.add(Comparison(PLAIN.hash(), COT_PRICEY.hash(), "p9", "a", "simulated"))
    for k in range(6):
        search.preferences.add(Comparison(PLAIN.hash(), COT_PRICEY.hash(), f"q{k}", "a", "simulated"))
    search._fit_preferences()
    assert search.preference_model.feature_weight(COT_FEATURE) < 0
    assert search._reach_child() is None


@pytest.mark.parametrize("reach", [False, True])
def test_the_reach_child_is_never_raced(reach):
    # cot@pricey (two edits from PLAIN with one node at most) answers only the even problems: a
    # race on the first two problems screens it out as a built edit; as the reach child it is
    # evaluated on every search problem, enters the lineage as a child of the best, runs counted
    search = _started(
        _search(
            preference_built_reach=2,
            screen_problems=2,
            questions_per_generation=0,  # no new answers: the child below is the only reach child
        ),
        pin=False,
    )
    search.config.max_nodes = 1
    _likes(search, COT_PRICEY, COT_FEATURE)
    wf, edit, parent = search._reach_child()
    assert wf.hash() == COT_PRICEY.hash() and edit.startswith("reach:")
    search._built_liked.append((wf, edit if reach else "replace:cot", parent))
    search.step()
    h = COT_PRICEY.hash()
    cached = [p["id"] for p in search.problems if (h, p["id"]) in search.evaluator.cache]
    if not reach:
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
    reach = _started(_search(preference_built_reach=2, **settings))
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
    for settings in ({"preference_built_pairs": 1, "preference_built_reach": 2, **LEVERS}, OFF):
        search = _search(rater=None, questions_per_generation=4, screen_problems=2, **settings)
        search.initialize()
        if case == "answers but no rater":
            _likes(search, COT_PRICEY, COT_FEATURE)
        for _ in range(3):
            search.step()
        runs.append(([i.hash for i in search.population], sorted(search.seen), search.spent, search.questions_asked))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("won", [COT_FEATURE, "output:cot"])
def test_a_won_operator_on_a_backbone_or_output_counts_as_the_operator(won):
    # run 32 made no reach child when the built pairs had won only op@backbone:cot@... or
    # output:cot with ops-only on; with preference_reach_as_op they stand for op:cot
    search = _started(_search(preference_built_reach=2, preference_reach_ops=True), pin=False)
    search.config.max_nodes = 1
    _likes(search, COT_PRICEY, won)
    search.built_won = {won}
    assert search._most_liked_missing(PLAIN) is None and search._reach_child() is None
    search.config.preference_reach_as_op = True
    assert search._most_liked_missing(PLAIN) == "op:cot"
    wf, edit, parent = search._reach_child()
    assert _cot(wf) and edit.startswith("reach:") and parent == PLAIN.hash()
    assert search._most_liked_missing(COT_PRICEY) is None  # a best with cot lacks nothing


def test_the_anchor_predicts_an_evaluated_workflow_as_its_own_fitness():
    # the ridge shrinks: on its own it misses an evaluated workflow's fitness; the nearest
    # evaluated workflow of an evaluated one is itself, so the anchor adds back its residual
    search = _started(_search(preference_built_reach=2), pin=False)
    seen = [i for i in search.seen.values()]
    feats = [workflow_features(i.workflow) for i in seen]
    fitness = [i.fitness for i in seen]
    ridge = search._predicted_fitness(feats)
    assert max(abs(p - f) for p, f in zip(ridge, fitness)) > 0.01
    search.config.preference_reach_anchor = True
    assert search._predicted_fitness(feats) == pytest.approx(fitness, abs=1e-9)


def test_the_nearest_residual_averages_ties():
    rows = [{"op:a": 1}, {"op:b": 1}, {"op:a": 1, "op:c": 2}]
    got = search_module._nearest_residual(
        [{"op:a": 1}, {"op:d": 1}, {"op:a": 1, "op:c": 1}], rows, np.array([0.1, -0.3, 0.5])
    )
    # itself; op:d is 2 from op:a and op:b alike (mean of their residuals); 1 from both op:a rows
    assert got == pytest.approx([0.1, -0.1, 0.3])
