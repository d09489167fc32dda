import json
from types import SimpleNamespace

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.commands.rollout import RolloutCommand
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.rollout.agent_loop import CalculatorWorld, run_agent_loop
from lightning_agents.topology import curate_rollouts


def test_calculator_world():
    world = CalculatorWorld()
    assert world.execute("calculator", '{"expression": "37 + 48"}') == ("85", False)
    assert world.execute("calculator", {"expression": "7 * 6"}) == ("42", False)
    for name, arguments in [
        ("search", "{}"),
        ("calculator", "{bad"),
        ("calculator", "{}"),
        ("calculator", '{"expression": "1/0"}'),
    ]:
        content, error = world.execute(name, arguments)
        assert error and content.startswith("error:")


class ScriptedEngine:
    """Stands in for HFGenerationEngine: replies from a script per (question, trial), by turn.

    The loop keeps one message list per episode, so a list seen for the first time is the next
    trial of its question.
    """

    def __init__(self, scripts):
        self.scripts = scripts
        self.calls = []
        self.trial_of = {}
        self.seen = {}

    def generate(self, prompts, num_samples=1, sampling=None, tools=None):
        assert num_samples == 1 and tools and tools[0]["function"]["name"] == "calculator"
        self.calls.append(len(prompts))
        texts = []
        for messages in prompts:
            question = messages[0]["content"]
            if id(messages) not in self.trial_of:
                self.seen[question] = self.seen.get(question, -1) + 1
                self.trial_of[id(messages)] = self.seen[question]
            turn = sum(m["role"] == "assistant" for m in messages)
            texts.append(self.scripts[(question, self.trial_of[id(messages)])][turn])
        return SimpleNamespace(texts=texts)


def _call(expression):
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


def test_agent_loop_multi_turn_with_error_and_retry(tmp_path):
    tasks = [{"id": "t0", "question": "Q0", "answer": "5"}, {"id": "t1", "question": "Q1", "answer": "9"}]
    scripts = {
        ("Q0", 0): [_call("2 + 3"), "The answer is 5."],
        ("Q0", 1): [_call("2 +"), _call("2 + 3"), "The answer is 5."],  # error, then retry
        ("Q1", 0): ["The answer is 8."],  # no tool, wrong
        ("Q1", 1): [_call("4 + 5"), _call("4 + 5"), _call("4 + 5")],  # never answers
    }
    engine = ScriptedEngine(scripts)
    rollouts = run_agent_loop(engine, tasks, trials=2, max_turns=3, batch_size=3)
    by_key = {(r["task_id"], r["trial"]): r for r in rollouts}
    assert [by_key[k]["reward"] for k in [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]] == [1.0, 1.0, 0.0, 0.0]
    retry = by_key[("t0", 1)]["traj"]
    assert [m["role"] for m in retry] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert retry[2]["content"].startswith("error:") and retry[4]["content"] == "5"
    assert by_key[("t1", 1)]["info"]["finished"] is False and by_key[("t1", 1)]["info"]["turns"] == 3
    assert engine.calls == [3, 1, 3, 2]  # 4, 3, then 2 open conversations, in batches of at most 3
    # The rollout format reads back, and TopoCurate finds the error-then-recovery.
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rollouts))
    result = curate_rollouts(load_rollouts(path))
    t0 = {t.trial: t for t in result.analysis("t0").trajectories}
    assert t0[1].errors == 1 and t0[1].recovery >= 1 and t0[0].efficiency == 1.0


class _Tools(RolloutCommand, CurateCommand):
    pass


def test_rollout_command_with_the_embedded_student_then_curate(tmp_path, capsys):
    out = tmp_path / "rollouts.json"
    _Tools().rollout(output=str(out), num_tasks=6, trials=3, max_turns=2, max_new_tokens=40, progress=False, seed=0)
    records = json.loads(out.read_text())
    assert len(records) == 18 and {r["trial"] for r in records} == {0, 1, 2}
    assert all(r["traj"][0]["role"] == "user" and r["info"]["verifier"].endswith("ArithmeticVerifier") for r in records)
    assert any(m.get("tool_calls") for r in records for m in r["traj"])  # the student uses the tool
    assert "6 tasks x 3 trials" in capsys.readouterr().out
    rollouts = load_rollouts(out)
    assert len(rollouts) == 18 and rollouts.skipped_count == 0
    _Tools().curate(rollouts=[str(out)], output=str(tmp_path / "curated"), draw_tasks=1)
    sft = (tmp_path / "curated" / "sft.jsonl").read_text().splitlines()
    assert len(sft) == len(curate_rollouts(rollouts).sft)
    # Same seed, same rollouts.
    again = tmp_path / "again.json"
    _Tools().rollout(output=str(again), num_tasks=6, trials=3, max_turns=2, max_new_tokens=40, progress=False, seed=0)
    assert json.loads(again.read_text()) == records


def test_rollout_rejects_greedy_sampling(tmp_path):
    with pytest.raises(ValueError, match="temperature"):
        _Tools().rollout(output=str(tmp_path / "x.json"), temperature=0.0)
