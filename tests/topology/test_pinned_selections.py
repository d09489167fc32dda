"""Curation results on the real tau-bench and BFCL files, pinned so that a speed change cannot silently change them.

The pinned files hold everything curation decides for each file: every task's and trajectory's
metrics, TopoCurate's SFT and RL picks (with scores) and every size-matched baseline. They were
written by the code before the hot-path rewrite of issue 15; to re-pin after a deliberate change
of the topology, run ``python tests/topology/test_pinned_selections.py`` and review the diff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology import curate_rollouts

PINNED = Path(__file__).parent / "pinned"
CASES = {
    "tau_bench_airline": ("tau_bench/gpt-4o-airline.json", ()),
    "bfcl_multi_turn_base": (
        "bfcl/claude_multi_turn_base_result.json",
        ("bfcl/BFCL_v4_multi_turn_base_possible_answer.json",),
    ),
}


def _rounded(value):
    # Floats to 12 digits: enough to catch any change of a count or a choice, immune to summation order.
    if isinstance(value, float):
        return round(value, 12)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def curation_outcome(data: Path, name: str, keep_graphs: bool = False, workers: int = 0) -> dict:
    """Everything curation decides on one real file, as plain JSON data."""
    path, ground_truth = CASES[name]
    rollouts = load_rollouts(data / path, ground_truth=[data / g for g in ground_truth])
    result = curate_rollouts(rollouts, keep_graphs=keep_graphs, workers=workers)
    return _rounded(
        {
            "tasks": [a.task.as_dict() for a in result.analyses],
            "trajectories": [t.as_dict() for a in result.analyses for t in a.trajectories],
            "sft": result.sft,
            "rl": [vars(score) for score in result.rl],
            "baselines": result.baselines,
        }
    )


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("keep_graphs", [False, True], ids=["default", "keep_graphs"])
def test_curation_of_real_files_is_unchanged(shared_data, name, keep_graphs):
    expected = json.loads((PINNED / f"{name}.json").read_text())
    got = curation_outcome(shared_data, name, keep_graphs=keep_graphs)
    assert got["sft"] == expected["sft"]
    assert got["rl"] == expected["rl"]
    assert got["baselines"] == expected["baselines"]
    for task_got, task_expected in zip(got["tasks"], expected["tasks"], strict=True):
        assert task_got == task_expected
    for traj_got, traj_expected in zip(got["trajectories"], expected["trajectories"], strict=True):
        assert traj_got == traj_expected


def test_metrics_of_the_plain_form_equal_those_of_the_networkx_graph(shared_data):
    # Curation reads the plain Quotient; users read DiGraphs: both must give the same metrics.
    from lightning_agents.topology import analyze_task, build_quotient_graph, group_by_task
    from lightning_agents.topology.graph import build_quotient

    rollouts = load_rollouts(shared_data / CASES["tau_bench_airline"][0])
    for trials in group_by_task(rollouts).values():
        plain, graph = build_quotient(trials), build_quotient_graph(trials)
        assert analyze_task(plain) == analyze_task(graph)
        assert sorted(plain.edges) == sorted(graph.edges)
        assert [plain.nodes[n] for n in graph.nodes] == [
            [graph.nodes[n][k] for k in ("success", "failure", "unscored", "ends_success", "ends_failure", "error")]
            for n in graph.nodes
        ]


if __name__ == "__main__":
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[3] / "shared" / "data"
    PINNED.mkdir(exist_ok=True)
    for case in CASES:
        (PINNED / f"{case}.json").write_text(json.dumps(curation_outcome(data, case), indent=0) + "\n")
        print("pinned", case)
