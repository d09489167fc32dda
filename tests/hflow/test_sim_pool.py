"""benchmarks/hflow_sim_pool.py: pooling replications of the simulated search benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hflow_sim_pool.py"


def _result(path: Path, seeds: list[int], hflow: list[tuple], rnd: list[tuple], budget: int = 100) -> str:
    def rows(vals):
        return [
            {"seed": s, "fitness": f, "accuracy": a, "cost": c, "runs_to_optimum": r, "runs": 1, "dollars": 0.0}
            for s, (f, a, c, r) in zip(seeds, vals)
        ]

    path.write_text(
        json.dumps(
            {
                "world": "gsm8k",
                "budget_problem_runs": budget,
                "budget_dollars": 1.0,
                "search_size": 10,
                "heldout": 40,
                "lambda_cost": 5.0,
                "hflow_settings": {},
                "seeds": seeds,
                "expensive_single_call": {"accuracy": 0.9, "cost": 0.04},
                "per_seed": {"hflow": rows(hflow), "random_search": rows(rnd)},
                "preference_per_seed": {"with_rater": [], "without_rater": []},
            }
        )
    )
    return str(path)


def _pool(*files: str):
    return subprocess.run([sys.executable, str(SCRIPT), *files], capture_output=True, text=True)


def test_pooling_takes_every_seed_and_counts_unreached_as_twice_the_budget(tmp_path):
    a = _result(
        tmp_path / "a.json", [0, 1], [(0.8, 0.9, 0.01, 30), (0.7, 0.8, 0.01, None)], [(0.6, 0.7, 0.0, None)] * 2
    )
    b = _result(tmp_path / "b.json", [2], [(0.9, 0.89, 0.005, 50)], [(0.6, 0.7, 0.0, 90)])
    out = _pool(a, b)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout)
    s = line["summary"]
    assert s["hflow"]["reached_optimum"] == 2 and s["hflow"]["median_runs_to_optimum"] == 50
    assert s["random_search"]["median_runs_to_optimum"] == 200  # two of three never got there
    # within 1 point of 0.9 at <= 0.01: seed 0 (0.9, 0.01) and seed 2 (0.89, 0.005)
    assert s["hflow"]["seeds_near_o1_at_quarter_cost"] == 2
    paired = line["minus_random_paired_bootstrap_95"]["hflow"]["accuracy"]["mean"]
    assert abs(paired - (0.2 + 0.1 + 0.19) / 3) < 1e-9


def test_pooling_refuses_overlapping_seeds_and_different_settings(tmp_path):
    a = _result(tmp_path / "a.json", [0], [(0.8, 0.9, 0.01, 30)], [(0.6, 0.7, 0.0, None)])
    same_seed = _result(tmp_path / "b.json", [0], [(0.8, 0.9, 0.01, 30)], [(0.6, 0.7, 0.0, None)])
    out = _pool(a, same_seed)
    assert out.returncode != 0 and "seeds overlap: [0]" in out.stderr
    other_budget = _result(tmp_path / "c.json", [1], [(0.8, 0.9, 0.01, 30)], [(0.6, 0.7, 0.0, None)], budget=200)
    out = _pool(a, other_budget)
    assert out.returncode != 0 and "budget_problem_runs is 200" in out.stderr


def test_reach_ratio_divides_by_the_fastest_baseline_and_needs_the_same_seeds(tmp_path):
    seeds = [0, 1, 2]
    hflow = [(0.8, 0.9, 0.01, 30), (0.8, 0.9, 0.01, 40), (0.8, 0.9, 0.01, None)]
    main = _result(tmp_path / "a.json", seeds, hflow, [(0.6, 0.7, 0.0, None)] * 3)
    # baselines alone at 4x the budget: random search reaches at 100, 80, never (counted as 800)
    larger = _result(tmp_path / "b.json", seeds, [(0, 0, 0, None)] * 3, [(0, 0, 0, r) for r in (100, 80, None)], 400)
    data = json.loads(Path(larger).read_text())
    slower = [dict(row, runs_to_optimum=r) for row, r in zip(data["per_seed"]["random_search"], (200, 300, 250))]
    data["per_seed"] = {"random_search": data["per_seed"]["random_search"], "hill_climb": slower}
    Path(larger).write_text(json.dumps(data))
    out = _pool(main, "--reach-against", larger)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)["reach_ratio"]
    assert r["hflow_median"] == 40 and r["baseline_medians"] == {"random_search": 100, "hill_climb": 250}
    assert r["ratio"] == 0.4 and r["lo"] <= 0.4 <= r["hi"]
    other = _result(tmp_path / "c.json", [0, 1], [(0, 0, 0, 1)] * 2, [(0, 0, 0, 1)] * 2, 400)
    out = _pool(main, "--reach-against", other)
    assert out.returncode != 0 and "not run on exactly the seeds" in out.stderr
