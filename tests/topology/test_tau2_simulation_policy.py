"""A tau2 simulation's own ``policy`` (tau2's ``SimulationRun.policy``, "the policy/system prompt
used for this simulation") is the agent's system message of its SFT data and RL prompt.

Before, only the file's ``info.environment_info.policy`` was read: the adaptive-agent submission
(sierra-research/tau2-bench @ 59b1453, tests/data/tau2_runs and tests/data/tau2_pooled_ground_truth
READMEs) writes no ``info`` and the policy in each simulation, so its SFT data had no system
prompt; in tau2's knowledge domain the policy differs per simulation.
"""

import json
from pathlib import Path

from lightning_agents.datamodules.trajectories import load_rollouts

DATA = Path(__file__).resolve().parents[1] / "data"
ADAPTIVE = DATA / "tau2_runs" / "adaptive-agent-airline.json"
WHISSLE = DATA / "tau2_runs" / "whissle-airline.json"


def _first(rollout):
    return list(rollout.messages)[0]


def test_a_simulation_policy_is_the_system_message_when_the_file_has_none():
    policies = {s["task_id"]: s.get("policy") for s in json.loads(ADAPTIVE.read_text())["simulations"]}
    rollouts = load_rollouts(ADAPTIVE, ground_truth=DATA / "tau2_runs" / "airline-tasks-100c40a.json")
    assert rollouts
    for rollout in rollouts:
        assert policies[rollout.task_id].startswith("# Airline Agent Policy")
        # Before: the first message was the agent's greeting, with no policy anywhere.
        assert _first(rollout) == {"role": "system", "content": policies[rollout.task_id]}
        assert rollout.steps[0].actor == "system"


def test_a_simulation_policy_comes_before_the_files(tmp_path):
    data = json.loads(WHISSLE.read_text())
    file_policy = data["info"]["environment_info"]["policy"]
    (rollout,) = load_rollouts(WHISSLE)
    assert _first(rollout)["content"] == file_policy  # whissle writes the same policy in both places
    data["simulations"][0]["policy"] = "# Knowledge policy for this simulation"
    path = tmp_path / "per_simulation.json"
    path.write_text(json.dumps(data))
    (rollout,) = load_rollouts(path)
    assert _first(rollout) == {"role": "system", "content": "# Knowledge policy for this simulation"}
    data["simulations"][0]["policy"] = None  # tau2's default: the file's policy
    path.write_text(json.dumps(data))
    (rollout,) = load_rollouts(path)
    assert _first(rollout)["content"] == file_policy
