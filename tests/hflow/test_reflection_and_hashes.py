"""The reflective optimizer sees the evidence and is billed; equivalent workflows hash the same;
docstring examples in every HumanEval form; voting on code by behaviour."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lightning_agents.hflow import (
    BackbonePool,
    Ledger,
    Node,
    ReflectiveOptimizer,
    Workflow,
    WorkflowExecutor,
)
from lightning_agents.hflow.backbones import Backbone, Completion
from lightning_agents.tasks.code_examples import docstring_examples, example_assertions

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"


class _Recorder(Backbone):
    kind = "recorder"

    def __init__(self, reply):
        super().__init__("opt", 1.0, 2.0)
        self.reply, self.seen = reply, []

    def _complete(self, requests):
        self.seen += requests
        return [Completion(self.reply, 100, 20) for _ in requests]


def test_reflective_optimizer_sees_score_failures_and_second_parent_and_is_billed():
    rec = _Recorder("The step ignores units. <instruction>Convert every quantity to the same unit first.</instruction>")
    pool = BackbonePool([rec], Ledger())
    opt = ReflectiveOptimizer(pool, "opt", "gsm8k")
    parent = Workflow([Node("n0", "cot", prompt="Think.", backbone="opt")])
    other = Workflow([Node("n0", "programmer", prompt="Write code.", backbone="opt")])
    problem = {"id": "p7", "question": "A train goes 3 km in 30 minutes. Speed in km/h?", "reference": "6"}
    trace = {
        "steps": [{"node": "n0", "op": "cot", "backbone": "opt", "text": "3/30 = 0.1", "note": ""}],
        "answer": "0.1",
        "score": 0.0,
    }
    new = opt.propose_prompt(parent, parent.nodes[0], 0.42, [(problem, trace)], (other, 0.61), {"add:vote"}, 3)
    assert new == "Convert every quantity to the same unit first."
    shown = rec.seen[0].messages[1]["content"]
    for needle in (
        "0.420",
        "A train goes 3 km",
        "3/30 = 0.1",
        "expected answer: 6",
        "0.610",
        "Write code.",
        "add:vote",
    ):
        assert needle in shown
    assert pool.ledger.summary("role")["optimizer"]["calls"] == 1 and opt.calls == 1
    rec.reply = "Add a program. <edit>add:programmer</edit>"
    assert opt.propose_edit(parent, 0.42, [(problem, trace)]) == "add:programmer"


def test_equivalent_workflows_hash_the_same():
    a = Workflow(
        [
            Node("x", "generate", backbone="s"),
            Node("y", "cot", backbone="t"),
            Node("v", "vote", backbone="s", params={"samples": 0}),
        ],
        [("x", "v"), ("y", "v")],
        "v",
    )
    # same computation: other names, nodes listed in another order, default params spelled out
    b = Workflow(
        [
            Node("vv", "vote", backbone="s"),
            Node("g", "generate", backbone="s", params={"temperature": 0.0}),
            Node("c", "cot", backbone="t"),
        ],
        [("g", "vv"), ("c", "vv")],
        "vv",
    )
    assert a.hash() == b.hash()
    # but input order (ballot order) and real param changes are part of what it computes
    c = Workflow(a.nodes, [("y", "v"), ("x", "v")], "v")
    assert c.hash() != a.hash()
    d = a.copy()
    d.node("x").params = {"temperature": 0.7}
    assert d.hash() != a.hash()


def test_docstring_examples_in_humaneval_forms():
    prompt = '''def f(x, y):
    """Add. For example:
    f(1, 2) ==> 3
    f(2, 2) ➞ 4
    f(0, 0) should return 0.
    f(a) => True
    >>> f(1,
    ... 1)
    2
    """
'''
    ex = docstring_examples(prompt, "f")
    assert ("f(1, 2)", "3") in ex and ("f(2, 2)", "4") in ex and ("f(0, 0)", "0") in ex
    assert ("f(1, 1)", "2") in ex and not any("a" in call for call, _ in ex)


@pytest.mark.slow
def test_examples_cover_humaneval_and_reject_no_canonical_solution():
    from lightning_agents.rewards.sandbox import run_python

    if not DATA.is_file():
        pytest.skip(f"{DATA} is not there")
    with gzip.open(DATA, "rt") as f:
        rows = [json.loads(x) for x in f]
    covered, rejected = 0, []
    for r in rows:
        tests = example_assertions(r["prompt"], r["entry_point"])
        if tests is None:
            continue
        covered += 1
        res = run_python(r["prompt"] + r["canonical_solution"] + "\n\n" + tests, timeout_s=10)
        if res.returncode != 0:
            rejected.append(r["task_id"])
    # two docstrings contradict their own canonical solution and hidden test: HumanEval/47 says
    # median([-10, 4, 6, 1000, 10, 20]) is 15.0 (it is 8.0), HumanEval/116 that sort_array sorts
    # [1, 5, 2, 3, 4] to [1, 2, 3, 4, 5] (by the count of ones it is [1, 2, 4, 3, 5]); a faithful
    # reader of the docstring rejects both, every other canonical solution passes its examples
    assert covered >= 152 and rejected == ["HumanEval/47", "HumanEval/116"]


def _humaneval0():
    from lightning_agents.tasks import HumanEvalTask

    if not DATA.is_file():
        pytest.skip(f"{DATA} is not there")
    task = HumanEvalTask(str(DATA))
    return task, next(p for p in task.problems if p["id"] == "HumanEval/0")


class _Scripted(Backbone):
    """A backbone that answers with the given programs in turn, each in a Python fence."""

    kind = "scripted"

    def __init__(self, programs):
        super().__init__("coder", 1.0, 1.0)
        self.programs, self.n = programs, 0

    def _complete(self, requests):
        out = []
        for _ in requests:
            out.append(Completion("```python\n" + self.programs[self.n % len(self.programs)] + "```", 10, 10))
            self.n += 1
        return out


def test_code_vote_groups_candidates_by_behaviour():
    task, problem = _humaneval0()
    body = problem["prompt"]
    wrong = body + "    return False\n"
    right1 = body + (
        "    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
        "            if i != j and abs(a - b) < threshold:\n                return True\n    return False\n"
    )
    right2 = body + ("    s = sorted(numbers)\n    return any(b - a < threshold for a, b in zip(s, s[1:]))\n")

    pool = BackbonePool([_Scripted([wrong, right1, right2])], Ledger())
    wf = Workflow([Node("v", "vote", backbone="coder", params={"samples": 3})])
    (trace,) = WorkflowExecutor(task, pool, sandbox_workers=1).run(wf, [problem])
    # an exact-string vote would take the first (wrong) candidate: all three strings differ
    assert trace.score == 1.0 and "behaviour groups" in trace.steps[0]["note"]


def test_programs_that_print_the_probes_lines_themselves_do_not_pass_the_examples():
    # A wrong program that printed the test step's marker (or the vote's JSON line) and exited
    # was taken as passing the examples: the marker and the lines now carry a fresh random tag.
    task, problem = _humaneval0()
    body = problem["prompt"]
    right = body + ("    s = sorted(numbers)\n    return any(b - a < threshold for a, b in zip(s, s[1:]))\n")
    forged = (
        body
        + "    return False\n\nimport json, os\n"
        + (
            "print('__hflow_examples_ran__', flush=True)\n"
            "print(json.dumps({'t': '', 'r': 'True', 'ok': True}), flush=True)\n"
            "print(json.dumps({'t': '', 'done': True}), flush=True)\n"
            "os._exit(0)\n"
        )
    )

    # the vote: two forged ballots against one right one
    pool = BackbonePool([_Scripted([forged, forged, right])], Ledger())
    wf = Workflow([Node("v", "vote", backbone="coder", params={"samples": 3})])
    (trace,) = WorkflowExecutor(task, pool, sandbox_workers=1).run(wf, [problem])
    assert trace.score == 1.0
    # the test step: the forged program must not be reported as passing its examples
    pool = BackbonePool([_Scripted([forged])], Ledger())
    wf = Workflow(
        [Node("g", "generate", backbone="coder"), Node("t", "test", backbone="coder", params={"retries": 0})],
        [("g", "t")],
        output="t",
    )
    (trace,) = WorkflowExecutor(task, pool, sandbox_workers=1).run(wf, [problem])
    assert not any("tests pass" in str(step.get("note")) for step in trace.steps), trace.steps
