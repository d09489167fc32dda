"""Run 41: the wider reach (``preference_taste_delta``) goes only to the workflows carrying a taste the
answers show (:mod:`lightning_agents.hflow.taste`), and a rater whose flips ignore the workflows'
features widens nothing. Settings HEAD accepted (run 40's gate at its default z 0), so each test
shows what changed: before run 41 any surplus of answers against the objectives over the modelled
flip rate widened every workflow's reach."""

from __future__ import annotations

import pytest

from lightning_agents.hflow import BackbonePool, HFlowSearch, Ledger, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.operators import Trace
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.scripted_search import ScriptedBackbone, ScriptedTask

PLAIN = Workflow([Node("a", "programmer", backbone="cheap")])
# both wrong on one of the 25 search problems: 0.04 below PLAIN, within 0.02 + 0.04
COT = Workflow([Node("a", "cot", backbone="cheap")])
OTHER = Workflow([Node("a", "generate", backbone="cheap")])
WRONG_ON = {PLAIN.hash(): set(), COT.hash(): {0}, OTHER.hash(): {0}}
N_SEARCH = 25


class _Executor:
    """Right on every search problem except those ``WRONG_ON`` names, right on every rater problem;
    every run costs the same, so fitness is accuracy."""

    def __init__(self):
        self.task = ScriptedTask(2 * N_SEARCH)
        self.pool = BackbonePool([ScriptedBackbone("cheap", 1.0, 1.0)], Ledger())

    def run(self, workflow, problems, generation=0, salt=0):
        wrong = WRONG_ON.get(workflow.hash(), set(range(2 * N_SEARCH)))
        out = []
        for p in problems:
            steps = [
                {"node": n.id, "op": n.op, "backbone": n.backbone, "text": n.op, "answer": None} for n in workflow.nodes
            ]
            score = float(int(p["id"][1:]) not in wrong)
            out.append(Trace(p["id"], steps, output=workflow.describe(), answer=None, cost=0.0, score=score))
        return out


def _search(against: dict[str, int], n: int = 10) -> HFlowSearch:
    """A search over PLAIN, COT and OTHER with ``n`` answers PLAIN vs each of COT and OTHER on
    problems not run (read by the workflows' accuracy: PLAIN is the objectives' side), the first
    ``against[hash]`` of them won by the other workflow. Settings HEAD accepts (its run-40 gate at
    the default z 0), so this file shows what changed."""
    ex = _Executor()
    cfg = SearchConfig(
        population_size=3,
        offspring=1,
        max_nodes=3,
        eval_problems=N_SEARCH,
        seed=0,
        workers=1,
        preference_delta=0.02,
        preference_taste_delta=0.04,
        preference_built_pairs=0,
        rater_flip_rate=0.1,
    )
    search = HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:N_SEARCH],
        rater=SimulatedRater(noise=0.0),
        rater_problems=ex.task.problems[N_SEARCH:],
        seeds=[PLAIN, COT, OTHER],
    )
    search.initialize()
    for other in (COT.hash(), OTHER.hash()):
        for k in range(n):
            winner = "b" if k < against[other] else "a"
            search.preferences.add(Comparison(PLAIN.hash(), other, f"x{other[:6]}{k}", winner, "simulated", 1))
    search._fit_preferences()
    return search


def _reach(search: HFlowSearch) -> set[str]:
    return {i.hash for i in search._within_reach(list(search.seen.values()))}


def test_the_reach_widens_for_the_taste_s_workflows_only():
    """8 of 10 answers PLAIN vs COT won by COT, none of 10 PLAIN vs OTHER won by OTHER: a taste for
    the cot step. COT, 0.04 below the best, is within reach; OTHER, as far below but without a cot
    step, is not (before run 41 the taste widened every workflow's reach: OTHER was in too)."""
    assert _reach(_search({COT.hash(): 8, OTHER.hash(): 0}, n=0)) == {PLAIN.hash()}  # no answers: no taste
    search = _search({COT.hash(): 8, OTHER.hash(): 0})
    assert _reach(search) == {PLAIN.hash(), COT.hash()}
    assert ("op:cot", True) in {(t.feature, t.wanted) for t in search._tastes()}
    assert search._reach_delta(COT, search._tastes()) == pytest.approx(0.06)
    assert search._reach_delta(OTHER) == pytest.approx(0.02)
    chosen, report = search.choose()
    assert chosen.hash == COT.hash() and report["contenders"] == 2
    assert report["delta"] == pytest.approx(0.06)  # the widest reach any workflow has


def test_a_rater_who_flips_without_a_taste_widens_nothing():
    """3 of 10 answers against the objectives for each of COT and OTHER: three times the modelled
    flip rate (0.1), which opened run 40's gate for every workflow; flips that fall alike on both
    features are no taste, so the reach stays ``preference_delta`` and the best fitness is returned."""
    search = _search({COT.hash(): 3, OTHER.hash(): 3})
    assert search._answers_against_objectives() == (6, 20)
    assert _reach(search) == {PLAIN.hash()}
    assert search._tastes() == []
    chosen, report = search.choose()
    assert chosen.hash == PLAIN.hash() and report["delta"] == pytest.approx(0.02)


def test_confirming_reaches_only_the_taste_s_workflows():
    """``_to_confirm`` (confirm_top / confirm_final) reads the same per-workflow reach. PLAIN
    confirmed; with a taste for cot (8 and 0 of 10 against), COT is next to confirm. With 4 and 6
    of 10 against for COT and OTHER, run 40's gate opened (10 of 20 above the 2 modelled) and OTHER,
    the model's favourite, was confirmed next; those answers show no taste for a feature
    (OTHER's 6 of 10 against the other 4 of 10: p 0.33), so nothing is."""
    for against, expected in (({COT.hash(): 8, OTHER.hash(): 0}, COT.hash()), ({COT.hash(): 4, OTHER.hash(): 6}, None)):
        search = _search(against)
        search.confirmed.add(PLAIN.hash())
        nxt = search._to_confirm()
        assert (nxt.hash if nxt else None) == expected
