"""The simulated HumanEval world of benchmarks/hflow_sim_code.py on the real data: its calibration
cache agrees with running the code again, and its vote and test steps behave as the real operators."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


@pytest.fixture(scope="module")
def world(shared_data):
    import hflow_sim_code as W

    data = shared_data / "humaneval" / "HumanEval.jsonl.gz"
    if not data.is_file():
        pytest.skip(f"{data} is absent")
    task = W.SimCodeTask(str(data))
    return W, task, {p["id"]: p for p in task.problems}, data


def test_canonical_solutions_pass_their_examples_and_hidden_tests(world):
    W, _, _, _ = world
    cal = json.loads(W.CALIBRATION.read_text())
    assert len(cal["problems"]) == 164
    assert all(c["canonical"]["hidden"] for c in cal["problems"])
    # HumanEval/47's docstring states a wrong median (15.0 for 8.0) and HumanEval/116's a sort order
    # its canonical solution and hidden test do not follow; every other canonical solution passes
    # its own examples
    failing = [c["id"] for c in cal["problems"] if not c["canonical"]["examples"]]
    assert failing == ["HumanEval/47", "HumanEval/116"] == cal["canonical_failures"]
    # the world is calibrated with the examples the real operators read now (152 of 164 problems):
    # a change to the extraction needs benchmarks/hflow_sim_code_calibrate.py run again
    from lightning_agents.tasks.code_examples import docstring_examples

    _, _, by_id, _ = world
    stale = [
        c["id"]
        for c in cal["problems"]
        if c["examples"] != len(docstring_examples(by_id[c["id"]]["question"], c["entry_point"]))
    ]
    assert stale == []
    assert sum(c["examples"] > 0 for c in cal["problems"]) >= 152


def test_calibration_cache_agrees_with_a_fresh_run(world):
    import hflow_sim_code_calibrate as C

    W, _, _, data = world
    cached = {c["id"]: c for c in json.loads(W.CALIBRATION.read_text())["problems"]}
    rows = {r["task_id"]: r for r in C.load_rows(data)}
    for pid in ("HumanEval/0", "HumanEval/3", "HumanEval/19"):
        fresh = C.calibrate_problem(rows[pid])
        assert fresh == cached[pid], pid
    # the examples of HumanEval/19 miss most of its wrong mutants: the case the test step cannot help
    assert sum(not m["hidden"] and m["examples"] for m in cached["HumanEval/19"]["mutants"]) >= 10


def test_execution_vote_merges_behaviourally_equal_programs(world):
    W, task, by_id, _ = world
    ex = W.SimCodeExecutor(task, W.sim_pool())
    p = by_id["HumanEval/3"]
    right_sig = p["behaviour"][W.RIGHT][0]
    missed = next(m for m in p["wrong"] if p["behaviour"][m] == (right_sig, True))  # wrong, but passes the examples
    caught = [m for m in p["wrong"] if not p["behaviour"][m][1]]
    # the wrong program that behaves like the right one on the examples is one group with it; the
    # group passes the examples, so it beats the two failing ballots; its first program wins
    assert ex.vote(p, [caught[0], caught[0], missed, W.RIGHT]) == missed
    assert ex.vote(p, [caught[0], caught[0], W.RIGHT, missed]) == W.RIGHT
    # two different wrong programs with the same (failing) behaviour merge and outvote a third one
    # seen first; grouping by program instead of behaviour would elect the first ballot
    for q in task.problems:
        sigs: dict[str, list[str]] = {}
        for m in q["wrong"]:
            if not q["behaviour"][m][1]:
                sigs.setdefault(q["behaviour"][m][0], []).append(m)
        pairs = [ms for ms in sigs.values() if len(ms) >= 2]
        if pairs and len(sigs) >= 2:
            a, b = pairs[0][:2]
            c = next(ms[0] for s, ms in sigs.items() if s != q["behaviour"][a][0])
            assert ex.vote(q, [c, a, b]) == a, q["id"]
    # on a problem without examples every program that runs is one group: the first ballot wins
    q = next(q for q in task.problems if q["examples"] == 0 and len(q["wrong"]) >= 2 and q["wrong"] != ["generic"])
    assert ex.vote(q, [q["wrong"][0], W.RIGHT, W.RIGHT]) == q["wrong"][0]
    assert ex.vote(q, [W.CRASHED, W.CRASHED, W.RIGHT]) == W.RIGHT


def test_test_step_never_rejects_a_right_program(world):
    from lightning_agents.hflow import Node, Workflow
    from lightning_agents.hflow.operators import Trace

    W, task, by_id, _ = world
    ex = W.SimCodeExecutor(task, W.sim_pool())
    wf = Workflow([Node("n0", "generate", backbone="cheap"), Node("n1", "test", backbone="o1")], [("n0", "n1")], "n1")
    ctx = {"workflow": wf.hash(), "ids": wf.canonical_ids(), "generation": 0}
    node = wf.node("n1")
    for p in task.problems:
        t = Trace(p["id"])
        out, note = ex.test(node, p, W.RIGHT, t, ctx)
        if p["id"] in ("HumanEval/47", "HumanEval/116"):
            continue  # their docstrings are wrong: the real test operator rejects the canonical solution too
        assert (out, t.cost) == (W.RIGHT, 0.0), p["id"]
        # a wrong program the examples do not catch passes untouched; one they catch costs a fix call
        for m in p["wrong"]:
            t = Trace(p["id"])
            out, _ = ex.test(node, p, m, t, ctx)
            assert (t.cost == 0.0) == p["behaviour"][m][1]
            if p["behaviour"][m][1]:
                assert out == m


def test_the_search_script_can_read_the_calibration_of_the_documented_runs(world):
    """Runs 1-6 in docs/benchmarks.md read the calibration made before session 36's docstring forms
    (126 problems with examples); `hflow_sim_search.py --calibration` builds the world from it."""
    W, _, _, data = world
    old = W.SimTask(str(data), W.CALIBRATION.with_name("hflow_sim_code_calibration_v1.json"))
    assert sum(p["examples"] > 0 for p in old.problems) == 126
    assert sum(p["examples"] > 0 for p in W.SimTask(str(data)).problems) >= 152
