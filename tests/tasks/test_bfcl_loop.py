"""The BFCL loop rollout -> curate -> RL: our own BFCL rollouts offer each episode its record's tools
and record the world's state per user turn, hashed as the BFCL reader hashes a result file's
``state_info``, and curate's records of those rollouts run as episodes again.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("bfcl_eval", reason="BFCLWorldTask runs BFCL's API classes (pip install --no-deps bfcl-eval)")

from bfcl_episodes import ScriptedPolicy, claude_rollouts, ground_truth_plan, logged_plan, play, records  # noqa: E402
from bfcl_glyphh import glyphh_rollouts  # noqa: E402

from lightning_agents.datamodules.trajectories import load_rollouts  # noqa: E402
from lightning_agents.hflow import BackbonePool, Completion, Node, Workflow, WorkflowExecutor  # noqa: E402
from lightning_agents.hflow.backbones import Backbone  # noqa: E402
from lightning_agents.rollout.agent_loop import run_agent_loop  # noqa: E402
from lightning_agents.tasks.bfcl_world import BFCLWorldTask  # noqa: E402


def _names(tools) -> list[str]:
    return sorted(t["function"]["name"] for t in tools or [])


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> list[dict]:
    """The RL records of glyphh-ada's 9 committed trials (curate --bfcl_verifier execution)."""
    return records(glyphh_rollouts("execution").values(), tmp_path_factory.mktemp("bfcl") / "rl_tasks.jsonl")


class RecordingPolicy(ScriptedPolicy):
    """A scripted policy that notes the tools each ``generate`` call offered, per conversation."""

    def __init__(self, plan) -> None:
        super().__init__(plan)
        self.offered: list[list[str]] = []

    def generate(self, prompts, num_samples=1, sampling=None, tools=None):
        self.offered += [_names(tools)] * len(prompts)
        return super().generate(prompts, num_samples, sampling, tools)


def test_rollouts_offer_each_episode_its_records_tools(problems):
    # Two records with different tools in one batch: each conversation is offered its own record's
    # tools (18 and 32 functions here), never BFCLWorldTask.tools' 128.
    two = [p for p in problems if p["id"] in ("multi_turn_base_0", "multi_turn_base_113")]
    assert _names(two[0]["tools"]) != _names(two[1]["tools"])
    policy = RecordingPolicy([])
    out = run_agent_loop(policy, two, trials=2, task=BFCLWorldTask(), max_turns=2)
    assert {tuple(names) for names in policy.offered} == {tuple(_names(p["tools"])) for p in two}
    assert all(len(names) < len(BFCLWorldTask.tools) for names in policy.offered)
    assert [_names(o["tools"]) for o in out] == [_names(p["tools"]) for p in two for _ in range(2)]


class RecordingBackbone(Backbone):
    """Answers every request without a call and keeps the requests."""

    kind = "scripted"

    def __init__(self) -> None:
        super().__init__("scripted", 1.0, 2.0)
        self.requests = []

    def _complete(self, requests):
        self.requests += requests
        return [Completion("Done.", input_tokens=1, output_tokens=1) for _ in requests]


def test_hflow_agent_and_verify_offer_each_episode_its_records_tools(problems):
    task = BFCLWorldTask()
    backbone = RecordingBackbone()
    chained = Workflow(
        [
            Node("a", "agent", backbone="scripted", params={"max_turns": 1}),
            Node("v", "verify", backbone="scripted", params={"when": "always", "max_turns": 1}),
        ],
        [("a", "v")],
        output="v",
    )
    WorkflowExecutor(task, BackbonePool([backbone])).run(chained, problems[:3])
    by_question = {task.user_message(p): _names(p["tools"]) for p in problems[:3]}
    assert len(backbone.requests) == 6  # one agent and one verify turn per problem
    for request in backbone.requests:
        question = next(m["content"] for m in request.messages if m["role"] == "user")
        assert _names(request.tools) == by_question[question]


class PlanBackbone(RecordingBackbone):
    """Plays each problem's plan (by its first user turn), as :class:`ScriptedPolicy` does."""

    def __init__(self, plans: dict[str, list]) -> None:
        super().__init__()
        self.plans = {q: ScriptedPolicy(plan) for q, plan in plans.items()}

    def _complete(self, requests):
        self.requests += requests
        out = []
        for r in requests:
            question = next(m["content"] for m in r.messages if m["role"] == "user")
            (text,) = self.plans[question].generate([r.messages]).texts
            out.append(Completion(text, input_tokens=1, output_tokens=1))
        return out


def test_hflow_agent_hears_every_user_turn_and_the_ground_truth_scores_one(problems):
    # base tasks only: miss_param repeats their first questions
    base = [p for p in problems if p["id"].startswith("multi_turn_base")]
    task = BFCLWorldTask()
    backbone = PlanBackbone({task.user_message(p): ground_truth_plan(p) for p in base})
    # room for every call: past max_tool_calls (8 by default) calls are not run, and not replayed
    wf = Workflow([Node("a", "agent", backbone="scripted", params={"max_turns": 40, "max_tool_calls": 40})], output="a")
    traces = WorkflowExecutor(task, BackbonePool([backbone])).run(wf, base)
    assert [t.score for t in traces] == [1.0] * len(base)


def test_the_world_reports_bfcls_state_and_equal_states_hash_equal(problems):
    problem = next(p for p in problems if p["id"] == "multi_turn_base_0")
    a, b = BFCLWorldTask().environment(problem), BFCLWorldTask().environment(problem)
    state = a.state()
    assert sorted(s["class_name"] for s in state) == ["GorillaFileSystem", "TwitterAPI"]
    assert all(s["role"] == "state_info" and not any(k.startswith("_") for k in s["content"]) for s in state)
    json.dumps(state)  # JSON-able, as a rollout file holds it
    assert a.state_hash() == b.state_hash()
    # A read leaves the state as it was; a write changes it, and the same write on the other
    # world (after another read) gives the same state again.
    a.execute("ls", {})
    assert a.state_hash() == b.state_hash()
    a.execute("mkdir", {"dir_name": "temp"})
    assert a.state_hash() != b.state_hash()
    b.execute("pwd", {})
    b.execute("mkdir", {"dir_name": "temp"})
    assert a.state_hash() == b.state_hash()


def test_rollouts_record_a_state_per_user_turn(problems):
    # K=4 trials per task: glyphh's logged calls, the ground truth twice, no call at all.
    real = glyphh_rollouts("execution")
    plans = {
        "logged": [logged_plan(real[p["id"]]) for p in problems],
        "truth": [ground_truth_plan(p) for p in problems],
        "truth again": [ground_truth_plan(p) for p in problems],
        "silent": [[] for _ in problems],
    }
    out = {name: play(plan, problems) for name, plan in plans.items()}
    for i, problem in enumerate(problems):
        turns = len(problem["user_turns"])
        states = {name: out[name][i]["info"]["states"] for name in plans}
        for name, recorded in states.items():
            # One per user turn, on the turn's last message: the assistant's answer without a call.
            assert [k.split(":")[0] for _, k in recorded] == [str(t) for t in range(1, turns + 1)], name
            traj = out[name][i]["traj"]
            assert all(traj[at]["role"] == "assistant" and not traj[at].get("tool_calls") for at, _ in recorded)
        # The same calls land on the same states.
        assert [k for _, k in states["truth"]] == [k for _, k in states["truth again"]]
    # Doing nothing never leaves the initial state; the ground truth changes it in every task, and
    # glyphh's calls reach the ground truth's state at 38 of the 39 turn ends.
    initial = {p["id"]: BFCLWorldTask().environment(p).state_hash() for p in problems}
    for o in out["silent"]:
        assert {k.split(":")[1] for _, k in o["info"]["states"]} == {initial[o["task_id"]]}
    assert all(o["info"]["states"][-1][1].split(":")[1] != initial[o["task_id"]] for o in out["truth"])
    pairs = [
        (a, b) for x, y in zip(out["logged"], out["truth"]) for a, b in zip(x["info"]["states"], y["info"]["states"])
    ]
    assert (sum(a[1] == b[1] for a, b in pairs), len(pairs)) == (38, 39)


def test_our_states_are_the_keys_the_bfcl_reader_gives_a_result_files_snapshots(shared_data, tmp_path):
    # Claude's two real trials with their inference_log, replayed through the agent loop: the
    # states the loop records are, turn by turn, the reader's keys of the file's state_info.
    rollouts = claude_rollouts(shared_data / "bfcl")
    out = play([logged_plan(r) for r in rollouts], records(rollouts, tmp_path / "rl_tasks.jsonl"))
    logged = [[s.state for s in r.steps if s.state is not None] for r in rollouts]
    ours = [[k for _, k in o["info"]["states"]] for o in out]
    assert [len(x) for x in logged] == [4, 4] and ours == logged


def test_curated_records_of_our_own_rollouts_run_as_episodes_again(problems, tmp_path):
    # rollout -> curate -> RL: the records of our rollouts rebuild the world (environment) and hear
    # every user turn (user_turns as the messages' text); the ground truth scores 1 on them again.
    out = play([ground_truth_plan(p) for p in problems], problems)
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(out))
    again = records(load_rollouts([str(path)]), tmp_path / "rl_again.jsonl")
    assert [r["id"] for r in again] == [p["id"] for p in problems]
    assert all(r["environment"] == p["environment"] for r, p in zip(again, problems))
    replay = play([ground_truth_plan(p) for p in again], again)
    assert [o["reward"] for o in replay] == [1.0] * len(problems)


def test_a_world_without_state_hash_records_no_states():
    from lightning_agents.tasks import CalculatorTask

    task = CalculatorTask()
    out = run_agent_loop(ScriptedPolicy([]), task.get_problems("train", n=1), trials=1, task=task, max_turns=1)
    assert "states" not in out[0]["info"]


def test_the_reader_puts_our_recorded_states_on_the_turns_and_trials_merge_on_them(problems, tmp_path):
    # rollout -> curate: the openai reader dropped info.states, so TopoCurate never saw our worlds' states
    from lightning_agents.topology.graph import build_quotient_graph

    out = [o for plan in ("truth", "again") for o in play([ground_truth_plan(p) for p in problems], problems)]
    for k, o in enumerate(out):
        o["trial"] = k // len(problems)
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(out))
    loaded = load_rollouts([str(path)])
    for rollout, o in zip(loaded, out):
        assert [s.state for s in rollout.steps if s.state is not None] == [k for _, k in o["info"]["states"]]
    # two trials that make the same calls reach the same states: one path through the graph
    task = problems[0]["id"]
    graph = build_quotient_graph([r for r in loaded if r.task_id == task])
    trials = graph.graph["trials"]
    assert len(trials) == 2 and trials[0]["path"] == trials[1]["path"]
    # and the path passes through the state nodes: as many nodes as the steps, no more
    assert graph.number_of_nodes() == len(trials[0]["path"])
