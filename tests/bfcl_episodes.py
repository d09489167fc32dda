"""Scripted BFCL episodes shared by the BFCL world and loop tests: a policy that plays fixed calls
per user turn, plans from a real trial or from the ground truth, and records read back as problems."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.rollout.agent_loop import run_agent_loop
from lightning_agents.tasks.bfcl_world import BFCLWorldTask
from lightning_agents.tasks.tau_actions import parse_call_string
from lightning_agents.topology.pipeline import rl_prompt_record


def records(rollouts, path: Path) -> list[dict]:
    """The rollouts' RL records (what curate writes), read back as the task's problems."""
    path.write_text("".join(json.dumps(rl_prompt_record(r)) + "\n" for r in rollouts))
    return BFCLWorldTask(str(path)).problems


def _call_text(name: str, arguments: dict) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(arguments)}}}</tool_call>'


class ScriptedPolicy:
    """Plays, for each user turn, a list of replies (each a list of ``(name, arguments)`` calls),
    then answers the turn without a call."""

    def __init__(self, plan: list[list[list[tuple[str, dict]]]]) -> None:
        self.plan = plan

    def generate(self, prompts, num_samples=1, sampling=None, tools=None):
        texts = []
        for messages in prompts:
            users = [i for i, m in enumerate(messages) if m["role"] == "user"]
            turn, step = len(users) - 1, sum(m["role"] == "assistant" for m in messages[users[-1] :])
            replies = self.plan[turn] if turn < len(self.plan) else []
            texts.append("".join(_call_text(*c) for c in replies[step]) if step < len(replies) else "Done.")
        return SimpleNamespace(texts=texts)


def logged_plan(rollout) -> list[list[list[tuple[str, dict]]]]:
    """A trial's own replies per user turn, as its result file logged them."""
    turns: list[list] = []
    for m in rollout.messages:
        if m["role"] == "user":
            turns.append([])
        elif m.get("tool_calls"):
            turns[-1].append([(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]])
    return turns


def play(plans, problems, max_turns=60):
    """One episode per problem, each with its own plan (miss_param repeats base's questions)."""
    task = BFCLWorldTask()
    return [
        run_agent_loop(ScriptedPolicy(plan), [problem], trials=1, task=task, max_turns=max_turns)[0]
        for plan, problem in zip(plans, problems)
    ]


def ground_truth_plan(problem: dict) -> list[list[list[tuple[str, dict]]]]:
    reference = json.loads(problem["reference"])
    order = reference["parameter_order"]
    return [[[parse_call_string(c, order) for c in turn]] if turn else [] for turn in reference["ground_truth"]]


def claude_rollouts(bfcl: Path):
    """The shared Claude result file's two trials (with ``inference_log``), read for execution."""
    return load_rollouts(
        [str(bfcl / "claude_multi_turn_base_result.json")],
        ground_truth=[
            str(bfcl / "BFCL_v4_multi_turn_base.json"),
            str(bfcl / "BFCL_v4_multi_turn_base_possible_answer.json"),
        ],
        bfcl_verifier="execution",
    )
