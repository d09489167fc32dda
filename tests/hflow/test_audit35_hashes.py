"""Workflows that compute the same thing hash the same (session-35 audit, /work/h35/hflow/hashes.py):
a vote that draws no samples makes no model call, so its backbone and temperature do not count,
and with one input it passes that input's result on, so it hashes as the workflow without it."""

from __future__ import annotations

import pytest

from lightning_agents.hflow import BackbonePool, Ledger, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.backbones import Backbone, Completion
from lightning_agents.tasks import build_task


def _chain(*nodes):
    return Workflow(list(nodes), [(a.id, b.id) for a, b in zip(nodes, nodes[1:])], nodes[-1].id)


def test_a_vote_over_one_input_hashes_as_the_input_alone_whatever_its_backbone():
    alone = _chain(Node("p", "programmer", backbone="student"))
    for backbone in ("student", "teacher"):
        voted = _chain(Node("p", "programmer", backbone="student"), Node("v", "vote", backbone=backbone))
        assert voted.hash() == alone.hash()
    # inside a chain too, and a chain of them
    refined = _chain(Node("p", "programmer", backbone="s"), Node("r", "refine", backbone="t"))
    twice = _chain(
        Node("p", "programmer", backbone="s"),
        Node("v1", "vote", backbone="t"),
        Node("v2", "vote", backbone="s", params={"samples": 0, "temperature": 0.9}),
        Node("r", "refine", backbone="t"),
    )
    assert twice.hash() == refined.hash()
    assert twice.canonical_ids()["r"] == refined.canonical_ids()["r"]  # same seeds for its calls
    # a vote that samples does call its backbone: that one still counts
    sampled = _chain(Node("p", "programmer", backbone="s"), Node("v", "vote", backbone="t", params={"samples": 3}))
    assert sampled.hash() != _chain(Node("p", "programmer", backbone="s")).hash()


def test_the_backbone_of_a_vote_over_several_inputs_without_samples_does_not_count():
    def two(vote_backbone, temperature=0.7, prompt=""):
        return Workflow(
            [
                Node("g", "generate", backbone="s"),
                Node("c", "cot", backbone="t"),
                Node("v", "vote", prompt=prompt, backbone=vote_backbone, params={"temperature": temperature}),
            ],
            [("g", "v"), ("c", "v")],
            "v",
        )

    # its prompt and temperature are for samples it does not draw
    assert two("s").hash() == two("t").hash() == two("t", 0.2).hash() == two("s", prompt="Answer.").hash()
    # the order of its ballots still counts (a tie goes to the first)
    swapped = Workflow(two("s").nodes, [("c", "v"), ("g", "v")], "v")
    assert swapped.hash() != two("s").hash()


class _Programmer(Backbone):
    kind = "scripted"

    def __init__(self):
        super().__init__("coder", 1.0, 1.0)

    def _complete(self, requests):
        return [Completion("```python\nprint(6 * 7)\n```", 10, 10) for _ in requests]


def test_a_vote_over_one_input_computes_what_the_workflow_without_it_computes():
    # before: the vote kept the answer but dropped the program, so a test step after it had
    # nothing to run; now its input's result goes on as it was
    task = build_task("embedded:arithmetic/val", None, n=2)
    pool = BackbonePool([_Programmer()], Ledger())
    executor = WorkflowExecutor(task, pool, sandbox_workers=1)
    alone = _chain(Node("p", "programmer", backbone="coder"), Node("t", "test", backbone="coder"))
    voted = _chain(
        Node("p", "programmer", backbone="coder"),
        Node("v", "vote", backbone="coder"),
        Node("t", "test", backbone="coder"),
    )
    assert voted.hash() == alone.hash()
    for a, b in zip(executor.run(alone, task.problems), executor.run(voted, task.problems)):
        assert (a.output, a.answer, a.score) == (b.output, b.answer, b.score)
        assert a.steps[-1]["note"] == b.steps[-1]["note"] == "tests pass (round 0)"
        assert b.steps[1]["code"] == a.steps[0]["code"]


class _Scored:
    """An executor that scores nothing, for a search whose saved state is all that matters."""

    def __init__(self):
        from lightning_agents.hflow.operators import Trace

        self.trace = Trace
        self.task = type("T", (), {"name": "t", "domain": "math", "problems": [{"id": "p0", "question": "q"}]})()
        self.pool = BackbonePool([_Programmer()], Ledger())

    def run(self, workflow, problems, generation=0, salt=0):
        return [self.trace(p["id"], [], output="", answer=None, cost=1e-4, score=0.5) for p in problems]


def test_a_search_state_filed_under_hashes_of_another_version_is_refused_on_resume():
    from lightning_agents.hflow import ConfigError, HFlowSearch, SearchConfig

    cfg = SearchConfig(population_size=2, offspring=2, max_nodes=3, eval_problems=1, workers=1, rater="none")
    ex = _Scored()
    search = HFlowSearch(ex, cfg, problems=ex.task.problems)
    search.initialize()
    state = search.state_dict()
    state["seen"][0]["hash"] = "0123456789abcdef"  # as an older hashing filed it
    # before: loaded as is, so the individual's key and its workflow's hash disagreed, and its
    # traces and answers were filed under a hash no workflow has any more
    with pytest.raises(ConfigError, match="hashes this version computes otherwise.*start afresh"):
        HFlowSearch(ex, cfg, problems=ex.task.problems).load_state_dict(state)
