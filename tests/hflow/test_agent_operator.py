"""HFlow's agent operator: episodes in the shop world through the backbone pool, scored by the world's state."""

from __future__ import annotations

import json
import random

import pytest

from lightning_agents.hflow import BackbonePool, Completion, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.backbones import Backbone
from lightning_agents.hflow.genome import WorkflowError
from lightning_agents.hflow.mutation import Mutator, default_seeds
from lightning_agents.tasks.agent_world import AgentWorldTask, shop_conversation


def _render(message):
    """An assistant message as the text a local model writes (the embedded chat template's calls)."""
    if not message.get("tool_calls"):
        return message["content"]
    fn = message["tool_calls"][0]["function"]
    return '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'.format(fn["name"], fn["arguments"])


class ScriptedBackbone(Backbone):
    """Replays each problem's gold episode turn by turn; ``malformed`` breaks the first call's JSON."""

    kind = "scripted"

    def __init__(self, problems, malformed=False):
        super().__init__("scripted", 1.0, 2.0)
        self.plans = {
            p["question"]: [m for m in shop_conversation(p, "direct")["messages"] if m["role"] == "assistant"]
            for p in problems
        }
        self.malformed = malformed
        self.requests = []

    def _complete(self, requests):
        out = []
        for r in self.requests_seen(requests):
            question = next(m["content"] for m in r.messages if m["role"] == "user")
            turn = sum(m["role"] == "assistant" for m in r.messages)
            gold = self.plans[question]
            text = _render(gold[min(turn, len(gold) - 1)])
            if self.malformed and turn == 0:
                text = text.replace('"arguments": ', '"arguments": {{')  # JSON that does not parse
            out.append(Completion(text, input_tokens=10 + turn, output_tokens=5))
        return out

    def requests_seen(self, requests):
        self.requests += requests
        return requests


def _problems(n=4, kinds=("pay", "cancel-shipped", "cancel-pending", "cancel-paid")):
    task = AgentWorldTask("val")
    return task, [next(p for p in task.problems if p["kind"] == k) for k in kinds][:n]


def test_agent_operator_solves_scripted_problems_and_books_every_turn():
    task, problems = _problems()
    backbone = ScriptedBackbone(problems)
    pool = BackbonePool([backbone])
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    traces = WorkflowExecutor(task, pool).run(wf, problems)
    assert [t.score for t in traces] == [1.0] * len(problems)
    # the model saw the task's tools on every turn, and every turn is one booked call
    assert all(r.tools == task.tools for r in backbone.requests)
    turns = len(backbone.requests)
    assert turns == sum(len(backbone.plans[p["question"]]) for p in problems)
    ledger = pool.ledger.summary()["total"]
    assert ledger["calls"] == turns and ledger["output_tokens"] == 5 * turns
    assert sum(t.input_tokens for t in traces) == ledger["input_tokens"]
    # the trace a rater and the optimizer read shows the calls and what the world answered
    shipped = traces[1].steps[0]["text"]
    assert "call cancel_order" in shipped and "-> error: order" in shipped and "call return_order" in shipped
    assert traces[0].answer and traces[0].steps[0]["note"].endswith("answered")


def test_a_malformed_call_is_an_observation_and_the_episode_goes_on():
    # cancellations of unshipped orders: without their first call (cancel_order) nothing is cancelled
    task, problems = _problems(2, kinds=("cancel-pending", "cancel-paid"))
    backbone = ScriptedBackbone(problems, malformed=True)
    wf = Workflow([Node("a", "agent", backbone="scripted", params={"max_turns": 12})], output="a")
    traces = WorkflowExecutor(task, BackbonePool([backbone])).run(wf, problems)
    for t in traces:
        # the broken call got an error observation and the episode went on to a reply
        assert "-> error: malformed tool call" in t.steps[0]["text"]
        assert t.steps[0]["note"].endswith("answered") and not t.steps[0]["note"].startswith("1 turns")
    # the replayed plan resumes one call late (the first gold call never ran), so the final state
    # misses the goal: a failure the checker sees, not a crash
    assert [t.score for t in traces] == [0.0, 0.0]
    tight = Workflow([Node("a", "agent", backbone="scripted", params={"max_turns": 1})], output="a")
    cut = WorkflowExecutor(task, BackbonePool([ScriptedBackbone(problems, malformed=True)])).run(tight, problems)
    assert [t.score for t in cut] == [0.0, 0.0]  # out of turns after the malformed call: unanswered
    assert all("ran out of turns" in t.steps[0]["note"] for t in cut)


def test_verify_continues_unfinished_episodes_in_the_same_world():
    task, problems = _problems(2)
    backbone = ScriptedBackbone(problems)
    short = Node("a", "agent", backbone="scripted", params={"max_turns": 1})
    alone = WorkflowExecutor(task, BackbonePool([backbone])).run(Workflow([short], output="a"), problems)
    assert [t.score for t in alone] == [0.0, 0.0]
    chained = Workflow(
        [short, Node("v", "verify", backbone="scripted", params={"max_turns": 6})], [("a", "v")], output="v"
    )
    backbone = ScriptedBackbone(problems)
    traces = WorkflowExecutor(task, BackbonePool([backbone])).run(chained, problems)
    # the verify step saw the first turn's call and observation plus its instruction, and finished
    assert [t.score for t in traces] == [1.0, 1.0]
    assert any(m["role"] == "user" and "Check with the tools" in m["content"] for m in backbone.requests[-1].messages)
    # {question} in a verify prompt makes the request again, in the problem's own words
    again = Node("v", "verify", prompt="Once more: {question}", backbone="scripted", params={"when": "always"})
    backbone = ScriptedBackbone(problems)
    WorkflowExecutor(task, BackbonePool([backbone])).run(Workflow([short, again], [("a", "v")], output="v"), problems)
    follow_ups = [m["content"] for r in backbone.requests for m in r.messages[1:] if m["role"] == "user"]
    assert set(follow_ups) == {f"Once more: {p['question']}" for p in problems}


def test_agent_genome_rules_seeds_and_mutations():
    with pytest.raises(WorkflowError, match="episodes"):
        Workflow(
            [Node("g", "generate", backbone="b"), Node("v", "verify", backbone="b")], [("g", "v")], output="v"
        ).validate()
    with pytest.raises(WorkflowError, match="inputs"):
        Workflow(
            [Node("g", "generate", backbone="b"), Node("a", "agent", backbone="b")], [("g", "a")], output="a"
        ).validate()
    # spelled-out defaults compute the same thing, so they hash the same
    plain = Workflow([Node("a", "agent", backbone="b")], output="a")
    spelled = Workflow([Node("x", "agent", backbone="b", params={"max_turns": 7, "temperature": 0.0})], output="x")
    assert plain.hash() == spelled.hash()
    assert plain.hash() != Workflow([Node("a", "agent", backbone="b", params={"max_turns": 5})]).hash()
    assert [w.name for w in default_seeds(["s", "t"], agent=True)] == ["agent@s", "agent@t"]
    mutator = Mutator(["s", "t"], random.Random(0), max_nodes=3, agent_task=True)
    edits, ops = set(), set()
    wf = default_seeds(["s"], agent=True)[0]
    for _ in range(60):
        child, edit = mutator.mutate(wf)
        child.validate(["s", "t"], 3)
        edits.add(edit)
        ops |= {n.op for n in child.nodes}
        wf = child if len(child.nodes) < 3 else wf
    assert ops <= {"agent", "verify"} and "verify" in ops
    assert {"add:verify", "params:agent.max_turns"} <= edits and any(e.startswith("prompt:agent") for e in edits)
    crossed, _ = mutator.cross(
        Workflow([Node("a", "agent", backbone="s"), Node("v", "verify", backbone="t")], [("a", "v")], output="v"),
        Workflow([Node("a", "agent", backbone="t", prompt="Look things up first.")], output="a"),
    )
    crossed.validate(["s", "t"], 3)
    # single-turn tasks keep their operators
    single = Mutator(["s"], random.Random(0), max_nodes=3)
    assert {n.op for _ in range(30) for n in single.random_workflow().nodes}.isdisjoint({"agent", "verify"})


def test_a_task_scored_by_episodes_rejects_a_single_turn_output():
    task, problems = _problems(1)
    wf = Workflow([Node("g", "generate", backbone="scripted")], output="g")
    with pytest.raises(WorkflowError, match="agent or verify"):
        WorkflowExecutor(task, BackbonePool([ScriptedBackbone(problems)])).run(wf, problems)


def test_agent_at_student_matches_the_rollout_loop(embedded_pool_factory):
    """The real student: a workflow's agent node and run_agent_loop take the same turns (one turn function)."""
    from lightning_agents.rollout.agent_loop import run_agent_loop
    from lightning_agents.rollout.hf_engine import SamplingConfig

    task = AgentWorldTask("test")
    problems = task.get_problems("test", n=8)
    pool = embedded_pool_factory()
    wf = Workflow([Node("a", "agent", backbone="student", params={"max_turns": 7})], output="a")
    traces = WorkflowExecutor(task, pool).run(wf, problems)
    engine = pool.get("student")._ensure_engine()
    rollouts = run_agent_loop(
        engine, problems, trials=1, task=task, sampling=SamplingConfig(max_new_tokens=48, do_sample=False), max_turns=7
    )
    assert [t.score for t in traces] == [r["reward"] for r in rollouts]
    assert sum(t.score for t in traces) > 0
    from lightning_agents.hflow.operators import episode_transcript

    assert [t.steps[0]["text"] for t in traces] == [episode_transcript(r["traj"]) for r in rollouts]
    calls = pool.ledger.summary()["total"]["calls"]
    assert calls == sum(r["info"]["turns"] for r in rollouts)
    assert json.loads(json.dumps(traces[0].to_dict()))["score"] == traces[0].score


def test_raters_and_the_optimizer_see_the_calls_and_observations_of_failing_episodes():
    from lightning_agents.hflow.preferences import _show
    from lightning_agents.hflow.reflection import AGENT_STRUCTURE_EDITS, ReflectiveOptimizer

    task, problems = _problems(2, kinds=("cancel-pending", "cancel-paid"))
    pool = BackbonePool([ScriptedBackbone(problems, malformed=True)])
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    traces = [t.to_dict() for t in WorkflowExecutor(task, pool).run(wf, problems)]
    optimizer = ReflectiveOptimizer(pool, "scripted", task.name, structure_edits=AGENT_STRUCTURE_EDITS)
    evidence = optimizer._evidence(wf, 0.0, list(zip(problems, traces)), None, set())
    assert "-> error: malformed tool call" in evidence and "call confirm {}" in evidence
    shown = _show(traces[0], "A")
    assert "-> error: malformed tool call" in shown and "call confirm" in shown
