"""benchmarks/hflow_sim_compare.py: pairing two simulated-search results on the same seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hflow_sim_compare.py"
SEEDS = [100, 101, 102, 103]


def _result(path: Path, per_seed: dict[str, list[float]], prefs: bool) -> str:
    """A result file as ``hflow_sim_search.py`` writes it: ``per_seed`` maps a method to its
    held-out fitness per seed; ``prefs`` False: the empty lists of ``--no-preference-benchmark``."""

    def rows(fits):
        return [
            {"seed": s, "fitness": f, "accuracy": f + 0.01, "cost": 0.002, "runs_to_optimum": None, "runs": 90}
            | {"dollars": 1.0, "shows_working": 0.0}
            for s, f in zip(SEEDS, fits)
        ]

    def pref_rows(shows):
        return [{"seed": s, "accuracy": 0.8, "shows_working": w} for s, w in zip(SEEDS, shows)]

    path.write_text(
        json.dumps(
            {
                "world": "gsm8k",
                "seeds": SEEDS,
                "budget_problem_runs": 100,
                "expensive_single_call": {"accuracy": 0.9, "cost": 0.04},
                "per_seed": {m: rows(f) for m, f in per_seed.items()},
                "preference_per_seed": {
                    "with_rater": pref_rows([1.0, 1.0, 0.0, 1.0]) if prefs else [],
                    "without_rater": pref_rows([0.0, 0.0, 0.0, 1.0]) if prefs else [],
                },
            }
        )
    )
    return str(path)


def _compare(a: str, b: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = subprocess.run([sys.executable, str(SCRIPT), a, b], capture_output=True, text=True, timeout=120)
    return proc, json.loads(proc.stdout) if proc.returncode == 0 else None


def test_hflow_only_files_without_the_preference_benchmark_are_compared(tmp_path):
    """Before: two ``--methods hflow --no-preference-benchmark`` files (run 34's development rows)
    stopped the script with ``KeyError`` / ``StatisticsError`` instead of pairing the HFlow rows;
    now it reports what the files have and names the parts they lack."""
    a = _result(tmp_path / "old.json", {"hflow": [0.80, 0.82, 0.84, 0.86]}, prefs=False)
    b = _result(tmp_path / "new.json", {"hflow": [0.78, 0.80, 0.84, 0.86]}, prefs=False)
    proc, out = _compare(a, b)
    assert proc.returncode == 0, proc.stderr
    assert abs(out["B_minus_A_hflow"]["fitness"]["mean"] + 0.01) < 1e-9
    assert abs(out["A"]["hflow"]["heldout_fitness"] - 0.83) < 1e-9
    for part in ("target_a", "best_baseline_1x", "target_d_A", "target_d_B"):
        assert part not in out
    absent = " ".join(out["absent"])
    assert "no preference benchmark" in absent and "target_d_A" in absent and "target_d_B" in absent
    assert "old.json: no random_search rows" in absent


def test_a_full_file_keeps_every_part(tmp_path):
    """A file with random search and the preference benchmark still gets targets (a) and (d) and
    no ``absent`` note (the mend changes nothing for such files)."""
    a = _result(tmp_path / "a.json", {"hflow": [0.8] * 4, "random_search": [0.75] * 4}, prefs=True)
    b = _result(tmp_path / "b.json", {"hflow": [0.81] * 4}, prefs=True)
    proc, out = _compare(a, b)
    assert proc.returncode == 0, proc.stderr
    assert "absent" not in out
    assert abs(out["target_a"]["A"]["mean"] - 0.05) < 1e-9
    assert out["best_baseline_1x"]["method"] == "random_search"
    assert abs(out["target_d_A"]["shows_working"]["mean"] - 0.5) < 1e-9
    assert out["target_d_B"]["with_rate"] == 0.75
