"""The preference benchmark keeps the issue's cap of 4 questions a generation with the built pairs
asked on top of the contender questions (run 38): the with-rater search, built as
benchmarks/hflow_sim_search.py and hflow_sim_contenders.py build it, asks no generation more."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


@pytest.fixture
def sim(shared_data, monkeypatch):
    import hflow_sim_search as sim

    if not (shared_data / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"{shared_data / 'gsm8k' / 'test.jsonl'} is absent")
    monkeypatch.setattr(sim, "DATA", shared_data / "gsm8k" / "test.jsonl")
    monkeypatch.setitem(sim.WORLDS, "gsm8k", ("hflow_sim", shared_data / "gsm8k" / "test.jsonl", 400))
    monkeypatch.setattr(sim, "HFLOW_SETTINGS", {})
    sim.use_world("gsm8k")
    return sim


@pytest.mark.parametrize("built", [0, 1, 2])
def test_the_contender_questions_leave_room_for_the_built_pairs(sim, built):
    sim.HFLOW_SETTINGS["preference_built_pairs"] = built
    assert sim.preference_questions() + built == sim.PREFERENCE_QUESTIONS


def test_no_generation_of_the_preference_benchmark_asks_more_than_four(sim):
    import hflow_sim_contenders as contenders

    task, _, pool_rest = sim.load_world("gsm8k", 0, 400)
    search_set, rater_set = sim.seed_sets(pool_rest, 0, 40)
    search, _ = contenders.build(task, search_set, rater_set, 0, True, 900, 20.0)
    asked = [row["questions_asked"] for row in search.history]
    per_generation = [b - a for a, b in zip([0] + asked, asked)]
    assert len(per_generation) >= 3
    assert max(per_generation) <= sim.PREFERENCE_QUESTIONS
    # the built pairs did ask on top (a generation used the whole cap), so the cap is what held
    assert sim.PREFERENCE_QUESTIONS in per_generation
