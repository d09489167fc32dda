"""The learning benchmark's bookkeeping: a partial run (killed mid-seed) still yields a paired
table over the seeds every recipe finished, and a restart resumes from the JSON lines."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rstg_learning", ROOT / "benchmarks" / "rstg_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROTO = {"setting": "arithmetic", "steps": 150, "test_size": 500, "batch_size": 8, "num_generations": 8, "pass_k": 8}


def run(recipe, seed, greedy, **extra):
    return {
        **PROTO,
        "recipe": recipe,
        "seed": seed,
        "lr": 5e-4,
        "beta": None if recipe == "grpo" else "paper",
        "greedy": greedy,
        "pass@8": greedy + 0.1,
        "frac_negative_zero_var": 0.2,
        **extra,
    }


def partial_run():
    # Seeds 0 and 1 complete, seed 2 stopped after GRPO: seed 2 must not enter any mean.
    return [
        {**PROTO, "recipe": "initial_student", "greedy": 0.2, "pass@8": 0.5},
        run("grpo", 0, 0.40),
        run("naive_opd", 0, 0.46),
        run("rstg", 0, 0.50),
        run("grpo", 1, 0.42),
        run("naive_opd", 1, 0.45),
        run("rstg", 1, 0.54),
        run("grpo", 2, 0.99),
    ]


def test_summary_pairs_only_completed_seeds(bench):
    s = bench.summarize(partial_run(), PROTO, ["grpo", "naive_opd", "rstg"])
    assert s["seeds"] == [0, 1] and s["pending_seeds"] == [2]
    grpo, rstg = s["recipes"]["grpo"], s["recipes"]["rstg"]
    assert grpo["greedy_mean"] == pytest.approx(0.41)  # 0.99 of the unfinished seed left out
    # Paired differences 0.10 and 0.12: mean 0.11, t(1 df) = 12.706, sd 0.01414 / sqrt(2).
    half = 12.706 * 0.02 / math.sqrt(2) / math.sqrt(2)
    assert rstg["vs_grpo"]["diff"] == pytest.approx(0.11)
    assert rstg["vs_grpo"]["lo"] == pytest.approx(0.11 - half) and rstg["vs_grpo"]["hi"] == pytest.approx(0.11 + half)
    assert rstg["vs_previous"]["diff"] == pytest.approx(((0.50 - 0.46) + (0.54 - 0.45)) / 2)  # vs naive_opd
    assert rstg["vs_initial"]["diff"] == pytest.approx(0.52 - 0.2)


def test_table_from_a_partial_jsonl_with_a_torn_line(bench, tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in partial_run()) + '{"recipe": "rst')
    lines = bench.read_lines(path)
    assert len(lines) == 8
    args = type("Args", (), {"settings": ["arithmetic"], "recipes": list(bench.RECIPES), "table": None})()
    bench.write_table(args, lines)
    table = capsys.readouterr().out
    assert "paired seeds [0, 1]; seeds [2] pending" in table
    assert "| rstg | 0.0005 | paper | 0.520 |" in table
    # A restart ends the torn line first, so the next line it appends stays parseable.
    log = bench.Log(str(path))
    log.emit(run("naive_opd", 2, 0.5))
    assert bench.read_lines(path)[-1]["recipe"] == "naive_opd"
    assert log.find(**PROTO, recipe="grpo", seed=2)["greedy"] == 0.99
