"""``SearchConfig.preference_delta_se``: a workflow whose fitness gap to the best is within that many
paired standard errors counts as within reach of the best (the choice, the questions, the final
round), so gaps the search problems cannot resolve are traded for the rater's taste and gaps they
do resolve are not."""

from __future__ import annotations

import pytest

from lightning_agents.hflow import BackbonePool, HFlowSearch, Ledger, Node, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.operators import Trace
from tests.hflow.scripted_search import ScriptedBackbone, ScriptedTask

PLAIN = Workflow([Node("a", "programmer", backbone="cheap")])
# shows its working, wrong on one of the ten search problems: a gap of 0.1, one standard error
NEAR = Workflow([Node("a", "cot", backbone="cheap")])
# shows its working, wrong on five of ten: a gap of 0.5, three standard errors
FAR = Workflow([Node("a", "cot", backbone="cheap"), Node("b", "format")], [("a", "b")], "b")
WRONG_ON = {PLAIN.hash(): set(), NEAR.hash(): {0}, FAR.hash(): {0, 2, 4, 6, 8}}


class _Executor:
    """Right on every problem except the ones ``WRONG_ON`` names for the workflow (any other
    workflow: wrong everywhere); every run costs the same, so fitness is accuracy."""

    def __init__(self):
        self.task = ScriptedTask()
        self.pool = BackbonePool([ScriptedBackbone("cheap", 1.0, 1.0)], Ledger())

    def run(self, workflow, problems, generation=0, salt=0):
        wrong = WRONG_ON.get(workflow.hash(), set(range(100)))
        out = []
        for p in problems:
            i = int(p["id"][1:])
            steps = [
                {"node": n.id, "op": n.op, "backbone": n.backbone, "text": n.op, "answer": None} for n in workflow.nodes
            ]
            out.append(
                Trace(
                    p["id"], steps, output=workflow.describe(), answer=None, cost=0.0, score=float(i % 10 not in wrong)
                )
            )
        return out


def _likes_cot(problem, trace):
    return float(any(s["op"] == "cot" for s in trace["steps"]))


def _search(z: float, final_questions: int = 4) -> HFlowSearch:
    ex = _Executor()
    cfg = SearchConfig(
        population_size=3,
        offspring=1,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=0,  # only the final round asks
        final_questions=final_questions,
        preference_delta=0.02,
        preference_delta_se=z,
        rater_flip_rate=0.15,
    )
    search = HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=_likes_cot),
        rater_problems=ex.task.problems[10:],
        seeds=[PLAIN, NEAR, FAR],
    )
    search.initialize()
    return search


def _reach(search: HFlowSearch) -> set[str]:
    return {i.hash for i in search._within_reach(list(search.seen.values()))}


def test_off_by_default_a_gap_above_delta_is_out_of_reach():
    assert SearchConfig().preference_delta_se == 0.0
    search = _search(0.0)
    assert _reach(search) == {PLAIN.hash()}
    chosen, report = search.finish()
    assert chosen.hash == PLAIN.hash() and report["contenders"] == 1
    assert search.questions_asked == 0  # one finalist: nothing to ask


def test_a_gap_within_the_standard_errors_is_traded_for_the_raters_taste():
    search = _search(1.5)
    # NEAR's gap, 0.1, is one paired standard error (sd of [1, 0 x 9] is sqrt(0.1)); FAR's, 0.5, is
    # three (sd of five ones and five zeros, 0.527, over sqrt(10))
    assert _reach(search) == {PLAIN.hash(), NEAR.hash()}
    chosen, report = search.finish()
    asked = {frozenset((c.a, c.b)) for c in search.preferences.comparisons}
    assert asked == {frozenset((PLAIN.hash(), NEAR.hash()))}
    assert chosen.hash == NEAR.hash() and report["changed_by_preferences"]
    assert report["fitness_given_up"] == pytest.approx(0.1)


@pytest.mark.parametrize(("z", "near_in_reach"), [(0.99, False), (1.01, True), (2.99, True)])
def test_the_reach_is_z_paired_standard_errors(z, near_in_reach):
    reach = _reach(_search(z))
    assert (NEAR.hash() in reach) is near_in_reach
    assert FAR.hash() not in reach  # three standard errors


def test_a_workflow_whose_traces_were_dropped_falls_back_to_delta():
    search = _search(1.5)
    for key in [k for k in search.evaluator.cache if k[0] == NEAR.hash()][:1]:
        del search.evaluator.cache[key]
    assert _reach(search) == {PLAIN.hash()}


def test_a_negative_value_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match=r"search\.preference_delta_se"):
        SearchConfig(preference_delta_se=-1.0)
