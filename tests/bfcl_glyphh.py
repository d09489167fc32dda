"""glyphh-ada-1.1's committed BFCL results (tests/data/bfcl_results) and BFCL's own verdicts on them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lightning_agents.datamodules.trajectories import load_rollouts

DATA = Path(__file__).resolve().parent / "data" / "bfcl_results"

# BFCL's verdicts, from score/glyphh-ada-1.1/multi_turn/BFCL_v4_multi_turn_{base,miss_param}_score.json @55e023f.
BFCL_VALID = {
    "multi_turn_base_0": True,
    "multi_turn_base_113": True,
    "multi_turn_base_143": True,
    "multi_turn_base_159": True,
    "multi_turn_base_170": True,
    "multi_turn_base_180": True,
    "multi_turn_miss_param_0": True,
    "multi_turn_miss_param_133": False,
    "multi_turn_miss_param_145": True,
}


def glyphh_rollouts(bfcl_verifier: str = "call_match") -> dict:
    """The subset's trials by task id, read with the question and possible-answer files."""
    rollouts = {}
    for category in ("base", "miss_param"):
        truth = [
            str(DATA / f"BFCL_v4_multi_turn_{category}.json"),
            str(DATA / f"BFCL_v4_multi_turn_{category}_possible_answer.json"),
        ]
        for rollout in load_rollouts(
            [str(DATA / f"glyphh-ada-1.1_BFCL_v4_multi_turn_{category}_result.json")],
            ground_truth=truth,
            bfcl_verifier=bfcl_verifier,
        ):
            rollouts[rollout.task_id] = rollout
    return rollouts


def turn_messages(turns, result: Callable[[tuple], str] = lambda call: "{}") -> list[dict]:
    """Chat messages of calls grouped per turn: a user message per turn, then each call and its tool
    result (``result(call)``, an empty JSON object by default)."""
    messages = []
    for t, turn in enumerate(turns):
        messages.append({"role": "user", "content": f"turn {t}"})
        for i, call in enumerate(turn):
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": f"{t}_{i}", "function": {"name": call[0], "arguments": json.dumps(call[1])}}],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"{t}_{i}", "content": result(call)})
    return messages
