"""``SearchConfig.preference_taste_delta`` (run 40): once the rater's answers show a taste the fitness
does not measure, workflows within ``preference_delta`` plus this of the best fitness are within
reach (the returned workflow, the questions, the final round). A rater who agrees with the fitness
(right, then cheaper: the main benchmark's) never opens it. Since run 41 the taste is a feature's
(``preference_taste_alpha``, test_taste_test.py) and only its workflows get the wider reach
(test_taste_reach.py)."""

from __future__ import annotations

import pytest

from lightning_agents.hflow import BackbonePool, HFlowSearch, Ledger, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.operators import Trace
from lightning_agents.hflow.preferences import Comparison
from tests.hflow.scripted_search import ScriptedBackbone, ScriptedTask

PLAIN = Workflow([Node("a", "programmer", backbone="cheap")])
# shows its working, wrong on one of the 25 search problems: 0.04 below PLAIN
NEAR = Workflow([Node("a", "cot", backbone="cheap")])
# shows its working, wrong on three: 0.12 below PLAIN
FAR = Workflow([Node("a", "cot", backbone="cheap"), Node("b", "format")], [("a", "b")], "b")
WRONG_ON = {PLAIN.hash(): set(), NEAR.hash(): {0}, FAR.hash(): {0, 1, 2}}
N_SEARCH = 25


class _Executor:
    """Right on every search problem except those ``WRONG_ON`` names (any other workflow: wrong
    everywhere), right on every rater problem; every run costs the same, so fitness is accuracy."""

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


def _likes_cot(problem, trace):
    return float(any(s["op"] == "cot" for s in trace["steps"]))


def _search(taste_delta: float, criterion=_likes_cot) -> HFlowSearch:
    ex = _Executor()
    cfg = SearchConfig(
        population_size=3,
        offspring=1,
        max_nodes=3,
        eval_problems=N_SEARCH,
        seed=0,
        workers=1,
        questions_per_generation=2,
        final_questions=4,
        preference_delta=0.02,
        preference_taste_delta=taste_delta,
        preference_built_pairs=0,
        rater_flip_rate=0.15,
    )
    search = HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:N_SEARCH],
        rater=SimulatedRater(noise=0.0, criterion=criterion),
        rater_problems=ex.task.problems[N_SEARCH:],
        seeds=[PLAIN, NEAR, FAR],
    )
    search.initialize()
    return search


def _reach(search: HFlowSearch) -> set[str]:
    return {i.hash for i in search._within_reach(list(search.seen.values()))}


def _ask_and_finish(search: HFlowSearch):
    search.ask_preferences()  # about the population: PLAIN, NEAR, FAR
    return search.finish()


def test_the_defaults():
    """Run 41: the taste test needs no flip rate, so the wider reach is on by default again."""
    cfg = SearchConfig()
    assert (cfg.preference_taste_delta, cfg.preference_taste_alpha, cfg.preference_taste_z) == (0.04, 0.05, None)


def test_off_the_taste_is_learned_but_a_gap_above_delta_is_out_of_reach():
    search = _search(0.0)
    chosen, report = _ask_and_finish(search)
    assert search._has_taste()  # the rater preferred cot against the objectives
    assert search.preference_score(search.seen[NEAR.hash()]) > search.preference_score(chosen)
    assert chosen.hash == PLAIN.hash() and report["contenders"] == 1


def test_a_shown_taste_widens_the_reach_and_the_choice_takes_the_liked_workflow():
    """Before run 40: PLAIN was returned although the model preferred NEAR, 0.04 below it.
    Run 41's test needs answers that tell the cot step from the rest: besides the search's own
    questions (equal scores and costs: no side for the objectives, left out), 8 answers PLAIN vs
    NEAR won by NEAR (against the objectives) and 8 NEAR vs FAR won by NEAR (for them), on problems
    not run (read by the workflows' accuracy)."""
    search = _search(0.04)
    assert _reach(search) == {PLAIN.hash()}  # no answer yet: no taste shown
    for k in range(8):
        search.preferences.add(Comparison(PLAIN.hash(), NEAR.hash(), f"x{k}", "b", "simulated", 1))
        search.preferences.add(Comparison(NEAR.hash(), FAR.hash(), f"y{k}", "a", "simulated", 1))
    chosen, report = _ask_and_finish(search)
    assert ("op:cot", True) in {(t.feature, t.wanted) for t in search._tastes()}
    assert _reach(search) == {PLAIN.hash(), NEAR.hash()}  # FAR, 0.12 below, stays out
    assert chosen.hash == NEAR.hash() and report["changed_by_preferences"]
    assert report["delta"] == pytest.approx(0.06)
    assert report["fitness_given_up"] == pytest.approx(0.04)


def test_a_rater_who_agrees_with_the_fitness_never_opens_it():
    """The main benchmark's rater (right, then cheaper, no flips): every answer the objectives
    explain, so the reach stays ``preference_delta`` and the choice is the best by fitness."""
    search = _search(0.04, criterion=None)
    chosen, report = _ask_and_finish(search)
    assert search.preferences.comparisons  # it did answer
    assert search._answers_against_objectives()[0] == 0 and not search._has_taste(0.0)
    assert _reach(search) == {PLAIN.hash()}
    assert chosen.hash == PLAIN.hash() and report["delta"] == pytest.approx(0.02)


def test_a_count_above_the_flips_alone_no_longer_opens_it():
    """20 decided answers PLAIN vs NEAR on problems not run (read by the workflows' accuracy), 4 of
    them for NEAR (against the objectives): above the 3 that a flip rate of 0.15 explains, which
    opened run 40's gate (z 0). Every answer is about the same two workflows, so nothing tells a
    taste for NEAR's features from flips (run 41): the reach stays ``preference_delta``."""
    search = _search(0.04)
    plain, near = PLAIN.hash(), NEAR.hash()
    for k in range(20):
        winner = "b" if k < 4 else "a"
        search.preferences.add(Comparison(plain, near, f"x{k}", winner, "simulated", 1))
    search._fit_preferences()
    assert search._answers_against_objectives() == (4, 20) and search._has_taste(0.0)
    assert search._tastes() == [] and NEAR.hash() not in _reach(search)


@pytest.mark.parametrize("name", ["preference_taste_delta", "preference_taste_alpha"])
def test_a_negative_value_is_refused_naming_the_setting(name):
    with pytest.raises(ConfigError, match=rf"search\.{name}"):
        SearchConfig(**{name: -0.01})
