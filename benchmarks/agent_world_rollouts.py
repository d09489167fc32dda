"""Agent-world rollouts of an embedded model: the spread TopoCurate needs to have something to curate.

Reads a rollout file written by ``lightning-agents rollout --task embedded:agent_world`` and prints
one JSON line: per-task pass rates (distinct values, histogram), the share of trajectories with a
tool error, the share of those that recovered (the episode went on to pass the final-state check)
and the share where a later call at least succeeded,
TopoCurate's own recovery count and strategic heterogeneity, and the pass rate per problem kind.

    lightning-agents rollout --task embedded:agent_world --split test --num_tasks 256 --trials 8 \
        --max_turns 7 --max_new_tokens 48 --temperature 0.5 --batch_size 512 --seed 0 \
        --output runs/agent_world/rollouts.json
    python benchmarks/agent_world_rollouts.py runs/agent_world/rollouts.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path


def summarise(rollouts: list[dict]) -> dict:
    """The figures of one rollout file (see the module docstring)."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in rollouts:
        by_task[r["task_id"]].append(r)
    rates = {t: sum(r["reward"] >= 1.0 for r in rs) / len(rs) for t, rs in by_task.items()}
    with_error = [r for r in rollouts if r["info"].get("tool_errors", 0) > 0]
    recovered = [r for r in with_error if r["reward"] >= 1.0]

    def resumed(r: dict) -> bool:
        # A tool error followed later in the episode by a call that succeeded.
        seen_error = False
        for m in r["traj"]:
            if m["role"] == "tool":
                is_error = str(m.get("content", "")).startswith("error:")
                if seen_error and not is_error:
                    return True
                seen_error = seen_error or is_error
        return False

    kinds: dict[str, list[float]] = defaultdict(list)
    for r in rollouts:
        kinds[r["info"].get("problem", {}).get("kind", "?")].append(r["reward"])
    return {
        "tasks": len(by_task),
        "trials": len(rollouts) // max(len(by_task), 1),
        "mean_reward": round(sum(r["reward"] for r in rollouts) / len(rollouts), 4),
        "distinct_pass_rates": len(set(rates.values())),
        "pass_rate_histogram": {f"{k:.3f}": v for k, v in sorted(Counter(rates.values()).items())},
        "trajectories_with_tool_error": round(len(with_error) / len(rollouts), 4),
        "errors_followed_by_recovery": round(len(recovered) / max(len(with_error), 1), 4),
        "errors_followed_by_a_successful_call": round(sum(map(resumed, with_error)) / max(len(with_error), 1), 4),
        "pass_rate_by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(kinds.items())},
        "mean_turns": round(sum(r["info"]["turns"] for r in rollouts) / len(rollouts), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rollouts", help="rollout file from `lightning-agents rollout --task embedded:agent_world`")
    args = parser.parse_args()
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.topology import curate_rollouts

    rollouts = json.loads(Path(args.rollouts).read_text())
    figures = summarise(rollouts)
    result = curate_rollouts(load_rollouts(args.rollouts))
    analyses = [result.analysis(t) for t in {r["task_id"] for r in rollouts}]
    figures["topocurate_recovery_trajectories"] = sum(a.task.recovery_trajectories for a in analyses)
    figures["topocurate_tasks_with_two_or_more_success_paths"] = sum(
        a.task.distinct_success_paths >= 2 for a in analyses
    )
    figures["topocurate_rl_tasks"] = len(result.rl)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
