import json
import math
import random

import pytest

from lightning_agents.hflow import (
    Comparison,
    ExperienceMemory,
    FileRater,
    InteractiveRater,
    Node,
    PreferenceStore,
    SimulatedRater,
    Workflow,
    bradley_terry,
)


def test_bradley_terry_recovers_a_simulated_raters_ordering():
    rng = random.Random(0)
    utility = {f"w{i}": 0.6 * i for i in range(8)}  # w7 best
    names = list(utility)
    comps = []
    for _ in range(600):
        a, b = rng.sample(names, 2)
        p_a = 1 / (1 + math.exp(utility[b] - utility[a]))
        comps.append(Comparison(a, b, "p", "a" if rng.random() < p_a else "b", "simulated"))
    scores = bradley_terry(comps, prior=0.1)
    assert sorted(names, key=scores.get) == names
    assert abs(sum(scores.values())) < 1e-9  # centred
    # Scale check: the fitted gap matches the true log-odds gap within sampling error.
    assert abs((scores["w7"] - scores["w0"]) - 4.2) < 1.0


def test_bradley_terry_stays_finite_for_an_unbeaten_item_and_counts_ties():
    comps = [Comparison("a", "b", "p", "a")] * 5 + [Comparison("b", "c", "p", "tie")] * 4
    s = bradley_terry(comps, items=["d"])
    assert all(math.isfinite(v) for v in s.values())
    assert s["a"] > s["b"] and abs(s["b"] - s["c"]) < 0.5 and "d" in s


def _trace(score, cost, out):
    return {
        "score": score,
        "cost": cost,
        "output": out,
        "steps": [{"node": "n0", "op": "generate", "backbone": "s", "text": out}],
    }


def test_simulated_rater_prefers_correct_then_cheaper():
    r = SimulatedRater()
    assert r.compare({}, _trace(1.0, 5.0, "x"), _trace(0.0, 1.0, "y"), "q") == "a"
    assert r.compare({}, _trace(0.0, 5.0, "x"), _trace(0.0, 1.0, "y"), "q") == "b"
    assert r.compare({}, _trace(1.0, 1.0, "x"), _trace(1.0, 1.01, "y"), "q") == "tie"
    noisy = SimulatedRater(noise=0.5, seed=1)
    flips = sum(noisy.compare({}, _trace(1.0, 1, "x"), _trace(0.0, 1, "y"), "q") == "b" for _ in range(400))
    assert 150 < flips < 250


def test_file_rater_round_trip(tmp_path):
    path = tmp_path / "questions.jsonl"
    problem = {"id": "p1", "question": "2+2?"}
    rater = FileRater(str(path))
    assert rater.compare(problem, _trace(1, 1, "4"), _trace(0, 1, "5"), "q1") is None
    assert rater.compare(problem, _trace(1, 1, "4"), _trace(0, 1, "5"), "q1") is None  # asked once
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["winner"] is None and rows[0]["a"]["output"] == "4"
    rows[0]["winner"] = "a"  # the person answers between runs
    path.write_text(json.dumps(rows[0]) + "\n")
    assert FileRater(str(path)).compare(problem, _trace(1, 1, "4"), _trace(0, 1, "5"), "q1") == "a"
    path.write_text(json.dumps({**rows[0], "winner": "A!"}) + "\n")
    with pytest.raises(ValueError, match="winner must be"):
        FileRater(str(path))
    # a line a person broke while answering is named, not a KeyError
    for broken in ({k: v for k, v in rows[0].items() if k != "query_id"}, ["q1", "a"]):
        path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(broken) + "\n")
        with pytest.raises(ValueError, match=rf"{path}:2: not a question"):
            FileRater(str(path))
    # a question whose append a kill cut short is dropped (asked again); a broken line inside stops
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[0])[:30])
    assert FileRater(str(path)).compare(problem, _trace(1, 1, "4"), _trace(0, 1, "5"), "q1") == "a"
    assert path.read_text() == json.dumps(rows[0]) + "\n"
    path.write_text(json.dumps(rows[0])[:30] + "\n" + json.dumps(rows[0]) + "\n")
    with pytest.raises(ValueError, match=rf"{path}:1: not JSON"):
        FileRater(str(path))


def test_interactive_rater_reads_answers():
    import io

    replies = iter(["maybe", "b"])
    out = io.StringIO()
    r = InteractiveRater(input_fn=lambda _: next(replies), stream=out)
    assert r.compare({"id": "p", "question": "q?"}, _trace(1, 1, "A-out"), _trace(0, 1, "B-out"), "q") == "b"
    assert "A-out" in out.getvalue() and "B-out" in out.getvalue()
    assert (
        InteractiveRater(input_fn=lambda _: "s", stream=out).compare(
            {"id": "p", "question": "q"}, _trace(1, 1, "x"), _trace(0, 1, "y"), "q"
        )
        is None
    )


def test_preference_store_keeps_every_answer(tmp_path):
    store = PreferenceStore(str(tmp_path / "p.jsonl"))
    store.add(Comparison("a", "b", "p", "a", "simulated", 1))
    store.add(Comparison("a", "c", "p", "tie", "simulated", 2))
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 2
    again = PreferenceStore()
    again.load_state_dict(store.state_dict())
    assert again.comparisons == store.comparisons


def test_memory_levels_persist_and_seed(tmp_path):
    good = Workflow([Node("n0", "programmer", backbone="student")])
    bad = Workflow([Node("n0", "generate", backbone="teacher")])
    mem = ExperienceMemory(str(tmp_path / "m.json"))
    mem.record_evaluation("t1", "math", bad, 0.2)
    mem.record_evaluation("t1", "math", good, 1.0)
    mem.record_edit("t1", "math", "replace:programmer", bad.hash(), good.hash(), 0.8, 1)
    mem.record_edit("t1", "math", "add:refine", good.hash(), "x", -0.3, 2)
    mem.consolidate("t1")
    mem.consolidate("t1")  # idempotent
    mem.save()
    loaded = ExperienceMemory(str(tmp_path / "m.json"))
    assert loaded.data["lineage"][0]["delta"] == 0.8
    assert loaded.data["tasks"]["t1"]["best"][0]["hash"] == good.hash()
    assert [w.hash() for w in loaded.seeds("math", ["student", "teacher"])][0] == good.hash()
    assert [w.hash() for w in loaded.seeds("math", ["teacher"])] == [bad.hash()]  # only seeds the pool can run
    assert loaded.seeds("code") == []
    w = loaded.weights("math", "edit_stats", ["replace", "add", "remove"])
    assert w["replace"] > w["remove"] > w["add"]  # unseen gets the mean
    ops = loaded.weights("math", "op_stats", ["programmer", "generate"])
    assert ops["programmer"] > ops["generate"]
    assert loaded.data["domains"]["math"]["edit_stats"]["replace"] == [1, 0.8]
