import math

import pytest

from lightning_agents.hflow import (
    ArithmeticTask,
    Backbone,
    BackbonePool,
    ConfigError,
    HumanEvalTask,
    Ledger,
    LocalHFBackbone,
    Node,
    Workflow,
    WorkflowExecutor,
)
from lightning_agents.hflow.operators import execute_python


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask("val", n=12)


@pytest.fixture(scope="module")
def pool(embedded_pool_factory):
    return embedded_pool_factory()


def _run(pool, task, nodes, edges=(), output=None):
    wf = Workflow(nodes, list(edges), output or nodes[-1].id)
    traces = WorkflowExecutor(task, pool).run(wf, task.problems)
    return wf, traces, sum(t.score for t in traces) / len(traces)


def test_generate_and_cot(pool, task):
    _, traces, acc = _run(pool, task, [Node("g", "generate", backbone="teacher")])
    assert all("The answer is" in t.output for t in traces)
    assert 0.0 < acc <= 1.0
    _, traces, _ = _run(pool, task, [Node("c", "cot", backbone="student")])
    assert all(t.input_tokens > 0 and t.steps[0]["op"] == "cot" for t in traces)


def test_programmer_really_executes_code_and_beats_direct(pool, task):
    _, direct, direct_acc = _run(pool, task, [Node("g", "generate", backbone="student")])
    _, traces, acc = _run(pool, task, [Node("p", "programmer", backbone="student")])
    assert acc > direct_acc
    for t, p in zip(traces, task.problems):
        if t.score:
            assert t.steps[0]["note"].startswith("ran ok")
            assert t.answer == p["answer"]


def test_programmer_output_comes_from_running_the_program(task):
    # The program prints a number that is NOT in its text: only executing it yields the answer.
    class Scripted(Backbone):
        def __init__(self):
            super().__init__("scripted", 1.0, 1.0)
            self.seen = []

        def _complete(self, requests):
            from lightning_agents.hflow import Completion

            out = []
            for r in requests:
                self.seen.append(r.messages)
                if len(r.messages) <= 2:
                    out.append(Completion("```python\nprint(undefined_name)\n```", 10, 5))
                else:
                    out.append(Completion("```python\nprint(sum(range(5)) * 3)\n```", 20, 5))
            return out

    scripted = Scripted()
    one = ArithmeticTask("val", n=1)
    traces = WorkflowExecutor(one, BackbonePool([scripted])).run(
        Workflow([Node("p", "programmer", backbone="scripted", params={"retries": 1})]), one.problems
    )
    assert traces[0].answer == "30" and "attempt 2" in traces[0].steps[0]["note"]
    assert "NameError" in scripted.seen[1][-1]["content"]  # the error went back to the model
    assert execute_python("print(6*7)").stdout.strip() == "42"


def test_programmer_runs_an_unfenced_program_without_the_reasoning_block(task):
    # A reasoning model served without a reasoning parser writes its drafts in <think>; an unfenced
    # program after it is the program, the drafts are not Python.
    from lightning_agents.hflow import Completion

    class Reasoner(Backbone):
        def __init__(self):
            super().__init__("reasoner", 1.0, 1.0)

        def _complete(self, requests):
            return [Completion("<think>\nMaybe 3 * 10? Let me write it.\n</think>\nprint(sum(range(5)) * 3)", 10, 5)]

    one = ArithmeticTask("val", n=1)
    traces = WorkflowExecutor(one, BackbonePool([Reasoner()])).run(
        Workflow([Node("p", "programmer", backbone="reasoner", params={"retries": 0})]), one.problems
    )
    assert traces[0].answer == "30" and traces[0].steps[0]["note"].startswith("ran ok")


def test_vote_refine_format(pool, task):
    _, traces, _ = _run(pool, task, [Node("v", "vote", backbone="student", params={"samples": 3, "temperature": 0.8})])
    assert all(t.steps[0]["note"].startswith("votes") or t.steps[0]["note"] == "no ballots" for t in traces)
    assert traces[0].input_tokens > 0 and traces[0].output_tokens > 0
    nodes = [
        Node("p", "programmer", backbone="student"),
        Node("g", "generate", backbone="student"),
        Node("v", "vote", backbone="student", params={"samples": 0}),
    ]
    _, traces, acc = _run(pool, task, nodes, [("p", "v"), ("g", "v")], "v")
    # two upstream ballots per problem, counted in the vote's note
    import ast

    for t in traces:
        upstream = sum(s["answer"] is not None for s in t.steps[:2])
        if upstream:
            assert sum(ast.literal_eval(t.steps[-1]["note"][len("votes ") :]).values()) == upstream
    _, traces, _ = _run(
        pool, task, [Node("g", "generate", backbone="student"), Node("r", "refine", backbone="teacher")], [("g", "r")]
    )
    assert all(t.steps[1]["note"] in ("changed", "confirmed", "refine unusable; kept input") for t in traces)
    _, traces, _ = _run(
        pool,
        task,
        [Node("p", "programmer", backbone="student"), Node("f", "format", prompt="Final: the answer is {answer}.")],
        [("p", "f")],
    )
    assert traces[0].output.startswith("Final: the answer is") and traces[0].steps[1]["backbone"] is None
    # format makes no call: its cost equals the programmer's alone
    _, alone, _ = _run(pool, task, [Node("p", "programmer", backbone="student")])
    assert [t.cost for t in traces] == [t.cost for t in alone]


def test_test_operator_fixes_code_against_examples(shared_data):
    he = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    he.problems = [p for p in he.problems if p["id"] == "HumanEval/0"]
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    right = (
        "```python\ndef has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold "
        "for i, a in enumerate(numbers) for j, b in enumerate(numbers) if i != j)\n```"
    )

    class Coder(Backbone):
        def __init__(self):
            super().__init__("coder", 1.0, 1.0)

        def _complete(self, requests):
            from lightning_agents.hflow import Completion

            return [Completion(right if "failed" in r.messages[-1]["content"] else wrong, 50, 20) for r in requests]

    ex = WorkflowExecutor(he, BackbonePool([Coder()]))
    wf = Workflow([Node("g", "generate", backbone="coder"), Node("t", "test", backbone="coder")], [("g", "t")], "t")
    (trace,) = ex.run(wf, he.problems)
    assert trace.score == 1.0 and trace.steps[1]["note"].startswith("tests pass")
    (plain,) = ex.run(Workflow([Node("g", "generate", backbone="coder")]), he.problems)
    assert plain.score == 0.0


def test_cost_accounting_sums_exactly(embedded_pool_factory, task):
    ledger = Ledger()
    pool = embedded_pool_factory(ledger)
    ex = WorkflowExecutor(task, pool)
    wfs = [
        Workflow([Node("g", "generate", backbone="student")]),
        Workflow(
            [Node("p", "programmer", backbone="teacher"), Node("v", "vote", backbone="student", params={"samples": 2})],
            [("p", "v")],
            "v",
        ),
    ]
    per_wf = {}
    for gen, wf in enumerate(wfs):
        traces = ex.run(wf, task.problems, generation=gen)
        per_wf[wf.hash()] = traces
    by_wf = ledger.summary("workflow")
    for h, traces in per_wf.items():
        assert by_wf[h]["input_tokens"] == sum(t.input_tokens for t in traces)
        assert by_wf[h]["output_tokens"] == sum(t.output_tokens for t in traces)
        assert math.isclose(by_wf[h]["cost"], math.fsum(t.cost for t in traces), rel_tol=1e-12)
    total = ledger.summary()["total"]
    by_backbone = ledger.summary("backbone")
    assert total["input_tokens"] == sum(v["input_tokens"] for v in by_backbone.values())
    assert math.isclose(total["cost"], math.fsum(v["cost"] for v in by_wf.values()), rel_tol=1e-12)
    exact = math.fsum(
        (v["input_tokens"] * p[0] + v["output_tokens"] * p[1]) / 1e6
        for b, v in by_backbone.items()
        for p in [ledger.prices[b]]
    )
    assert math.isclose(total["cost"], exact, rel_tol=1e-12)
    assert set(ledger.summary("generation")) == {0, 1}
    assert ledger.summary("generation")[1]["calls"] == 3 * len(task.problems)
    restored = Ledger()
    restored.load_state_dict(ledger.state_dict())
    assert restored.summary("workflow") == by_wf


def test_unknown_price_is_a_configuration_error():
    with pytest.raises(ConfigError, match="output_price"):
        LocalHFBackbone("x", "embedded:student", input_price=1.0)
    with pytest.raises(ConfigError, match="input_price"):
        BackbonePool.from_specs(
            [{"name": "x", "model": "m", "kind": "openai", "base_url": "http://h", "output_price": 1}]
        )
    with pytest.raises(ConfigError, match=">= 0"):
        LocalHFBackbone("x", "embedded:student", input_price=-1.0, output_price=1.0)


def test_a_program_that_exits_before_its_examples_did_not_pass_them(shared_data):
    """A `__main__` block that calls sys.exit(0) ended the run before the appended examples: exit
    status 0 read as "tests pass" for a wrong function."""
    he = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    he.problems = [p for p in he.problems if p["id"] == "HumanEval/0"]
    quits = (
        "```python\nimport sys\n\ndef has_close_elements(numbers, threshold):\n    return False\n\n"
        "if __name__ == '__main__':\n    sys.exit(0)\n```"
    )

    class Quitter(Backbone):
        def __init__(self):
            super().__init__("quitter", 1.0, 1.0)

        def _complete(self, requests):
            from lightning_agents.hflow import Completion

            return [Completion(quits, 50, 20) for _ in requests]

    ex = WorkflowExecutor(he, BackbonePool([Quitter()]))
    wf = Workflow(
        [Node("g", "generate", backbone="quitter"), Node("t", "test", backbone="quitter", params={"retries": 0})],
        [("g", "t")],
        "t",
    )
    (trace,) = ex.run(wf, he.problems)
    # it never reached its examples, so it passed none of them
    assert trace.steps[1]["note"] == "tests fail; kept round 0 (it does not reach the examples)"
