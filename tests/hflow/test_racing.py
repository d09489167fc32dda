"""lightning_agents.hflow.racing.race on a table of per-problem scores (no models)."""

from __future__ import annotations

from lightning_agents.hflow.evaluation import EvalResult
from lightning_agents.hflow.genome import Node, Workflow
from lightning_agents.hflow.racing import race


def _wf(backbone: str) -> Workflow:
    return Workflow([Node("n0", "generate", backbone=backbone)], output="n0")


def _table(scores: dict[str, list[float]]):
    """evaluate / evaluate_many over fixed per-problem scores, charging each (workflow, problem) once."""
    seen: set[tuple[str, int]] = set()

    def evaluate(wf: Workflow, problems):
        name = wf.nodes[0].backbone
        new = [(name, p["id"]) for p in problems if (name, p["id"]) not in seen]
        seen.update(new)
        vals = [scores[name][p["id"]] for p in problems]
        return EvalResult(sum(vals) / len(vals), 0.0, sum(vals) / len(vals), len(new))

    return evaluate, lambda wfs, problems: [evaluate(w, problems) for w in wfs]


def test_a_child_is_stopped_at_the_first_stage_it_falls_clearly_behind():
    problems = [{"id": i} for i in range(16)]
    scores = {
        "parent": [1.0] * 16,
        "bad": [0.0] * 16,  # behind at once
        "late": [1.0] * 4 + [0.0] * 12,  # level on 2 and 4 problems, behind on 8
        "good": [1.0] * 16,
    }
    evaluate, evaluate_many = _table(scores)
    for name in ("parent",):
        evaluate(_wf(name), problems)  # parents and the leader are evaluated before racing
    parent = _wf("parent")
    children = [(_wf("bad"), parent), (_wf("late"), parent), (_wf("good"), parent), (_wf("bad"), parent)]
    out, runs = race(children, parent, problems, 2, 0.1, evaluate_many, evaluate)
    assert out == {_wf("bad").hash(), _wf("late").hash()}
    # runs are charged once per distinct child: bad stopped at 2, late at 8, good raced to 8
    assert runs == {_wf("bad").hash(): 2, _wf("late").hash(): 8, _wf("good").hash(): 8}


def test_no_racing_when_the_first_stage_is_zero_or_covers_every_problem():
    problems = [{"id": i} for i in range(4)]
    evaluate, evaluate_many = _table({"parent": [1.0] * 4, "bad": [0.0] * 4})
    parent = _wf("parent")
    for first in (0, 4):
        assert race([(_wf("bad"), parent)], parent, problems, first, 0.1, evaluate_many, evaluate) == (set(), {})
