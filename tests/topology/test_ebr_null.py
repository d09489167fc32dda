"""benchmarks/topocurate_ebr_null.py: the permutation null's pieces and one small pool end to end."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import topocurate_ebr_null as ebr_null  # noqa: E402


def test_assignments_exact_then_sampled():
    sets, exact = ebr_null.assignments(7, 3, 1000, random.Random(0))
    assert exact and len(sets) == math.comb(7, 3) == len(set(sets))
    sets, exact = ebr_null.assignments(12, 6, 100, random.Random(0))
    assert not exact and len(sets) == 100 and all(len(s) == 6 for s in sets)


def test_p_values_exact_and_sampled():
    null = [0.0, 0.5, 0.5, 1.0]
    assert ebr_null.null_p(1.0, null, exact=True) == 0.25
    assert ebr_null.null_p(1.0, null, exact=False) == 2 / 5
    # The smallest p a 4-assignment null allows is 1/4: no task of 4 such assignments reaches 0.05.
    assert min(ebr_null.p_values_of_null(null, exact=True)) == 0.25
    assert ebr_null.p_values_of_null(null, exact=True) == [1.0, 0.75, 0.75, 0.25]


def test_tau_bench_pool_end_to_end(shared_data, tmp_path, monkeypatch):
    out = tmp_path / "r.jsonl"
    argv = [
        "x",
        str(shared_data / "tau_bench" / "gpt-4o-airline.json"),
        "--name",
        "t",
        "--jsonl",
        str(out),
        "--bootstrap",
        "200",
        "--pooled_draws",
        "200",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    ebr_null.main()  # raises SystemExit if the shuffled copies and the from-scratch rebuilds disagree
    line = json.loads(out.read_text())
    s = line["summary"]
    assert s["tested"] == len(line["per_task"]) > 0
    for row in line["per_task"]:
        assert 0 < row["pass_rate"] < 1 and row["branch_points"] >= 2 and row["exact"]
        assert row["assignments"] == math.comb(row["trials"], row["successes"])
    # 4 trials per task: no task's null allows p < 0.05, so the count test cannot fire.
    assert s["ebr"]["tasks_able_to_reach_005"] == 0
    assert line["command"] and line["versions"]["networkx"]
