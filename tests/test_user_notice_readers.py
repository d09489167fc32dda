"""Every reader of stored episodes takes a malformed call's notice the same whichever role the chat
template needed (``model_notice_role``: a user message on Gemma 4, Ministral-3 Reasoning, MiniMax-M2,
Gemma 3 pythonic). As a user notice it was a user turn: TopoCurate left it out, so the trial read as
error-free and more efficient (curation preferred it); RL records listed it among ``user_turns``;
HFlow's transcripts showed raters the environment's error as something the user said."""

from __future__ import annotations

import json

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.hflow.operators import episode_transcript
from lightning_agents.topology.graph import build_quotient
from lightning_agents.topology.metrics import analyze_task
from lightning_agents.topology.pipeline import rl_prompt_record

NOTICE = 'error: malformed tool call; write <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
CALL = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "17*23"}'}}


def _traj(role: str) -> list[dict]:
    notice = {"role": "user", "content": NOTICE}
    if role == "tool":
        notice = {"role": "tool", "tool_call_id": "call_1_invalid", "name": "invalid", "content": NOTICE}
    return [
        {"role": "user", "content": "What is 17*23?"},
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23"</tool_call>',
        },
        notice,
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "391"},
        {"role": "assistant", "content": "The answer is 391."},
    ]


def test_a_user_notice_is_an_error_to_topocurate_as_a_tool_notice_is(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    rows = [
        {"task_id": "t", "trial": i, "reward": 1.0, "traj": _traj(r), "info": {"reference": "391"}}
        for i, r in enumerate(("tool", "user"))
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    rollouts = list(getattr(load_rollouts(path), "rollouts", None) or load_rollouts(path))
    _, per_trial = analyze_task(build_quotient(rollouts))
    tool, user = sorted(per_trial, key=lambda m: m.trial)
    assert (user.errors, user.recovery, user.efficiency) == (tool.errors, tool.recovery, tool.efficiency)


def test_an_rl_record_lists_no_notice_among_the_user_turns(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    row = {"task_id": "t", "trial": 0, "reward": 1.0, "traj": _traj("user"), "info": {"reference": "391"}}
    path.write_text(json.dumps(row) + "\n")
    (rollout,) = list(getattr(load_rollouts(path), "rollouts", None) or load_rollouts(path))
    record = rl_prompt_record(rollout, verifier="lightning_agents.tasks.CalculatorTask")
    assert record["user_turns"] == ["What is 17*23?"]


def test_a_transcript_shows_a_user_notice_as_the_environments_answer():
    lines = episode_transcript(_traj("user")).splitlines()
    assert lines[2] == f"  -> {NOTICE}"
    assert episode_transcript(_traj("tool")).splitlines()[2] == lines[2]
