"""HFlow's ``test`` operator keeps the attempt that passed the most examples when none passes all.

Before, when the input and every fix failed the examples, the operator kept the last fix. With a
docstring that contradicts the hidden tests (HumanEval/47, /116) or a bad fixer that replaced a
right (or better) program with a worse one. Now each example runs on its own, the run reports how
many passed (a count line with a fresh marker, written only when the run got through every
example), and the best attempt is kept, ties to the earliest (the input). The simulated HumanEval
world (benchmarks/hflow_sim_code.py) models the same rule from its calibration's counts.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from lightning_agents.hflow import Backbone, BackbonePool, Completion, HumanEvalTask, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.operators import Trace, execute_python
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks.code_examples import docstring_examples, example_assertions

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
MBPP = Path(__file__).resolve().parents[1] / "data" / "code" / "mbppplus_release_prompts" / "rows.jsonl"
needs_sandbox = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

PROMPT = '''def add_one(x):
    """Return x plus one.
    >>> add_one(1)
    2
    >>> add_one(2)
    3
    >>> add_one(3)
    4
    """
'''
# the hidden test: what "right" means for the score (the examples' own answers)
HIDDEN = "def check(candidate):\n    assert candidate(1) == 2 and candidate(2) == 3 and candidate(3) == 4\n"


def fenced(body: str) -> str:
    return f"```python\n{body}```"


RIGHT = "def add_one(x):\n    return x + 1\n"
TWO_OF_THREE = "def add_one(x):\n    return x + 1 if x < 3 else 0\n"
ONE_OF_THREE = "def add_one(x):\n    return x + 1 if x < 2 else 0\n"
NONE_OF_THREE = "def add_one(x):\n    return 0\n"


@pytest.fixture
def task(tmp_path):
    row = {"task_id": "Toy/0", "prompt": PROMPT, "canonical_solution": "    return x + 1\n", "test": HIDDEN}
    row["entry_point"] = "add_one"
    path = tmp_path / "toy.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(row) + "\n")
    return HumanEvalTask(str(path))


class Scripted(Backbone):
    """Writes ``first`` when asked for a program, then the fixes in order when a test step asks."""

    def __init__(self, first: str, fixes: list[str]):
        super().__init__("coder", 1.0, 1.0)
        self.first, self.fixes, self.asked = first, list(fixes), 0

    def _complete(self, requests):
        out = []
        for r in requests:
            if "failed its tests" in r.messages[-1]["content"]:
                out.append(Completion(fenced(self.fixes[min(self.asked, len(self.fixes) - 1)]), 50, 20))
                self.asked += 1
            else:
                out.append(Completion(fenced(self.first), 50, 20))
        return out


def run_test_node(task, first: str, fixes: list[str], retries: int = 1, timeout_s: float = 5.0):
    coder = Scripted(first, fixes)
    ex = WorkflowExecutor(task, BackbonePool([coder]), sandbox_timeout_s=timeout_s)
    wf = Workflow(
        [Node("g", "generate", backbone="coder"), Node("t", "test", backbone="coder", params={"retries": retries})],
        [("g", "t")],
        "t",
    )
    (trace,) = ex.run(wf, task.problems)
    return trace, trace.steps[1], coder


@needs_sandbox
def test_a_worse_fix_does_not_replace_the_input(task):
    # the input passes 2 of 3 examples (and the hidden test's first two calls), the fix only 1
    trace, step, coder = run_test_node(task, TWO_OF_THREE, [ONE_OF_THREE])
    assert coder.asked == 1
    assert step["code"].strip() == TWO_OF_THREE.strip()  # before: the fix (1 of 3)
    assert step["note"] == "tests fail; kept round 0 (2/3 examples pass)"


@needs_sandbox
def test_a_fix_that_passes_more_is_kept_and_a_later_worse_one_is_not(task):
    # input 0 of 3, first fix 2 of 3, second fix 1 of 3: the first fix is kept (before: the second)
    _, step, coder = run_test_node(task, NONE_OF_THREE, [TWO_OF_THREE, ONE_OF_THREE], retries=2)
    assert coder.asked == 2
    assert step["code"].strip() == TWO_OF_THREE.strip()
    assert step["note"] == "tests fail; kept round 1 (2/3 examples pass)"
    # one retry: the better fix is also the last one
    _, step, _ = run_test_node(task, NONE_OF_THREE, [TWO_OF_THREE])
    assert step["code"].strip() == TWO_OF_THREE.strip() and step["note"].startswith("tests fail; kept round 1")


@needs_sandbox
def test_ties_go_to_the_earliest_attempt(task):
    other = "def add_one(x):\n    return {1: 2, 2: 0, 3: 4}[x]\n"  # also 2 of 3, another program
    _, step, _ = run_test_node(task, TWO_OF_THREE, [other])
    assert step["code"].strip() == TWO_OF_THREE.strip() and step["note"].startswith("tests fail; kept round 0")


@needs_sandbox
def test_a_passing_fix_still_wins(task):
    trace, step, _ = run_test_node(task, ONE_OF_THREE, [RIGHT])
    assert step["note"] == "tests pass (round 1)" and trace.score == 1.0


FORGERS = {
    # prints what a count line looks like, then leaves before the examples run
    "prints a count and exits": "import sys\nprint('__hflow_examples_ran_0123456789abcdef__ 3 3')\n"
    "def add_one(x):\n    return 0\nsys.exit(0)\n",
    # passes two examples, then leaves without an error on the third
    "sys.exit on an example": "import sys\ndef add_one(x):\n    if x == 3:\n        sys.exit(0)\n    return x + 1\n",
    "os._exit on an example": "import os\ndef add_one(x):\n    if x == 3:\n        print('3 3')\n"
    "        os._exit(0)\n    return x + 1\n",
    # prints lines with the example's own words on every call
    "prints pass lines": "def add_one(x):\n    print('__hflow_examples_ran__ 3 3')\n    print('passed 3 3')\n"
    "    return 0\n",
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(FORGERS))
def test_a_program_cannot_fake_its_count(task, name):
    # the input passes 1 of 3; a fix that fakes a count or exits early is not better than that
    trace, step, _ = run_test_node(task, ONE_OF_THREE, [FORGERS[name]])
    assert step["code"].strip() == ONE_OF_THREE.strip(), step
    assert step["note"] == "tests fail; kept round 0 (1/3 examples pass)"


@needs_sandbox
def test_a_fix_that_hangs_on_an_example_counts_nothing(task):
    hangs = "def add_one(x):\n    while x == 3:\n        pass\n    return x + 1\n"  # 2 of 3, then forever
    _, step, _ = run_test_node(task, ONE_OF_THREE, [hangs], timeout_s=5.0)
    assert step["code"].strip() == ONE_OF_THREE.strip() and step["note"].endswith("(1/3 examples pass)")


@needs_sandbox
def test_the_harness_counts_each_example_on_its_own():
    from lightning_agents.hflow.operators import _example_harness, _examples_passed

    tests = example_assertions(PROMPT, "add_one")
    harness, total = _example_harness(tests, "__mark__")
    assert total == 3
    middle_raises = "def add_one(x):\n    if x == 2:\n        raise ValueError('two')\n    return x + 1\n"
    run = execute_python(middle_raises + harness)
    # the third example still ran; the first failure is what the fixer reads
    assert _examples_passed(run.stdout, "__mark__", 3) == 2 and run.returncode == 1
    assert run.stderr.strip().endswith("ValueError: two")
    run = execute_python(RIGHT + harness)
    assert run.returncode == 0 and _examples_passed(run.stdout, "__mark__", 3) == 3
    # a program that hides print and sys.stdout does not hide the count
    hides = "import io, sys\nsys.stdout = io.StringIO()\ndef print(*a, **k):\n    pass\n" + RIGHT
    assert _examples_passed(execute_python(hides + harness).stdout, "__mark__", 3) == 3
    # another marker or no line at all: never started (-1); another total: started, no count (0)
    assert _examples_passed(run.stdout, "__other__", 3) == -1
    assert _examples_passed(run.stdout, "__mark__", 4) == 0
    assert _examples_passed("", "__mark__", 3) == -1
    # a forged line: a second count, or digits int() refuses, is no count and no crash
    assert _examples_passed(run.stdout + "\n__mark__ 3 3\n", "__mark__", 3) == 0
    assert _examples_passed("__mark__ start\n__mark__ \u00b2 3\n", "__mark__", 3) == 0


@needs_sandbox
def test_a_fix_that_runs_beats_an_input_that_does_not_when_both_pass_no_example(task):
    # HumanEval/116's right program passes none of its (wrong) examples; an input that does not
    # even import must not win the tie against it (review of d6c31d6: it did, and scored 0)
    crashing = "import no_such_module_here\n" + RIGHT
    trace, step, _ = run_test_node(task, crashing, [NONE_OF_THREE])
    assert step["code"].strip() == NONE_OF_THREE.strip()
    assert step["note"] == "tests fail; kept round 1 (0/3 examples pass)"
    # both do not run: the input is kept, and the note says why
    _, step, _ = run_test_node(task, crashing, [crashing.replace("here", "there")])
    assert (
        step["code"].strip() == crashing.strip()
        and step["note"] == "tests fail; kept round 0 (it does not reach the examples)"
    )


@needs_sandbox
def test_the_first_failure_stays_in_the_fixers_tail_when_the_program_writes_to_stderr():
    from lightning_agents.hflow.operators import _error_tail, _example_harness

    harness, _ = _example_harness(example_assertions(PROMPT, "add_one"), "__mark__")
    # three lines of debug output per call: later calls' lines would fill the three-line tail
    noisy = "import sys\ndef add_one(x):\n    print('debug', x, 'a\\nb\\nc', file=sys.stderr)\n    return x\n"
    tail = _error_tail(execute_python(noisy + harness))
    assert "add_one(1) returned 1, expected 2" in tail, tail


@needs_sandbox
def test_examples_that_cannot_be_written_back_still_run():
    # ast.unparse refuses an int literal over Python's 4,300-digit limit (and deep nesting): the
    # harness runs the tests as they stand, as one example, instead of failing the workflow run
    from lightning_agents.hflow.operators import _example_harness, _examples_passed

    big = "0x" + "f" * 4000
    tests = f"assert add_one(1) == 2\nassert add_one({big}) == {big} + 1\n"
    harness, total = _example_harness(tests, "__mark__")
    assert total == 1
    assert _examples_passed(execute_python(RIGHT + harness).stdout, "__mark__", 1) == 1
    assert _examples_passed(execute_python(NONE_OF_THREE + harness).stdout, "__mark__", 1) == 0


@needs_sandbox
def test_a_failure_before_a_hang_is_what_the_fixer_reads():
    from lightning_agents.hflow.operators import _error_tail, _example_harness

    harness, _ = _example_harness(example_assertions(PROMPT, "add_one"), "__mark__")
    # wrong on the first example, forever on the third: before the harness, the first failure
    # stopped the run; now the later examples run, and the timeout must not hide that failure
    wrong_then_hangs = "def add_one(x):\n    while x == 3:\n        pass\n    return x\n"
    run = execute_python(wrong_then_hangs + harness, timeout_s=5.0)
    assert run.timed_out
    tail = _error_tail(run)
    assert tail.startswith("the program timed out after this error:") and "add_one(1) returned 1, expected 2" in tail


def test_the_harness_counts_every_example_the_reader_finds():
    """Every example form (doctest, one-line separators, Input/Output, MBPP's asserts with set(),
    math.isclose tolerances and truthiness) is one counted example of the harness."""
    from lightning_agents.hflow.operators import _example_harness

    rows = [json.loads(x) for x in MBPP.read_text().splitlines()]
    he = Path(__file__).resolve().parents[3] / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
    if he.is_file():
        with gzip.open(he, "rt") as f:
            rows += [json.loads(x) for x in f if x.strip()]
    expected = len(rows) if not he.is_file() else len(rows) - 164 + 152  # 152 of HumanEval's 164 state examples
    checked = 0
    for r in rows:
        tests = example_assertions(r["prompt"], r["entry_point"])
        if tests:
            assert _example_harness(tests, "m")[1] == len(docstring_examples(r["prompt"], r["entry_point"])), r
            checked += 1
    assert checked == expected


@needs_sandbox
def test_humaneval_47_canonical_solution_survives_a_wrong_fix(shared_data):
    """HumanEval/47's docstring states a wrong median (15.0 for 8.0): its canonical solution passes
    1 of its 2 examples and the hidden tests. A fix that passes no more (1 of 2) is wrong on the
    hidden tests; before, it replaced the canonical solution and the workflow scored 0."""
    data = shared_data / "humaneval" / "HumanEval.jsonl.gz"
    if not data.is_file():
        pytest.skip(f"{data} is absent")
    he = HumanEvalTask(str(data))
    he.problems = [p for p in he.problems if p["id"] == "HumanEval/47"]
    (p,) = he.problems
    canonical = p["prompt"] + p["canonical_solution"]
    wrong = "def median(l: list):\n    return sorted(l)[len(l) // 2]\n"  # 3 for the first example, 10 for the second
    coder = Scripted(canonical, [wrong])
    ex = WorkflowExecutor(he, BackbonePool([coder]))
    wf = Workflow([Node("g", "generate", backbone="coder"), Node("t", "test", backbone="coder")], [("g", "t")], "t")
    (trace,) = ex.run(wf, he.problems)
    assert coder.asked == 1
    assert trace.score == 1.0  # before: 0.0, the wrong fix was kept
    assert trace.steps[1]["note"] == "tests fail; kept round 0 (1/2 examples pass)"
    assert he.verify(fenced(wrong), p) == 0.0  # the fix really is wrong


# ------------------------------------------------------------------------- the simulated world
@pytest.fixture
def sim():
    sys.path.insert(0, str(BENCHMARKS))
    import hflow_sim_code as W

    return W


def _sim_problem(W, passed):
    return {
        "id": "Sim/0",
        "difficulty": 0.0,
        "examples": 2,
        "q_tokens": 100,
        "gold_tokens": 40,
        "code_tokens": 60,
        "behaviour": {
            W.RIGHT: ("right-sig", False),  # a docstring that contradicts the hidden tests
            W.CRASHED: ("!crashed", False),
            "m0": ("m0-sig", False),
            "m1": ("m1-sig", False),
        },
        "passed": passed,
        "wrong": ["m0", "m1"],
    }


def _sim_test(W, monkeypatch, p, prev, fixes, retries):
    """The world's test step on ``prev`` with every fix wrong, drawn from ``fixes`` in order."""
    monkeypatch.setattr(W, "TEST_FIX_KNOWN", 0.0)
    monkeypatch.setattr(W, "TEST_FIX_GUESS", 0.0)
    ex = W.SimCodeExecutor(None, W.sim_pool())
    drawn = iter(fixes)
    monkeypatch.setattr(ex, "_wrong", lambda p, backbone, key: next(drawn))
    wf = Workflow(
        [Node("n0", "generate", backbone="cheap"), Node("n1", "test", backbone="mid", params={"retries": retries})],
        [("n0", "n1")],
        "n1",
    )
    ctx = {"workflow": wf.hash(), "ids": wf.canonical_ids(), "generation": 0}
    return ex.test(wf.node("n1"), p, prev, Trace(p["id"]), ctx)


def test_sim_world_test_step_keeps_the_attempt_that_passes_most(sim, monkeypatch):
    W = sim
    passed = {W.RIGHT: 1, W.CRASHED: -1, "m0": 0, "m1": 1}
    p = _sim_problem(W, passed)
    # the right program passes 1 of 2 (a wrong docstring); a fix passing 0 does not replace it
    assert _sim_test(W, monkeypatch, p, W.RIGHT, ["m0"], 1) == (W.RIGHT, "tests fail; kept round 0 (1/2 examples pass)")
    # a tie (1 of 2) goes to the input too
    assert _sim_test(W, monkeypatch, p, W.RIGHT, ["m1"], 1)[0] == W.RIGHT
    # a better fix is kept, a later worse one is not
    assert _sim_test(W, monkeypatch, p, W.CRASHED, ["m1", "m0"], 2) == (
        "m1",
        "tests fail; kept round 1 (1/2 examples pass)",
    )
    # a program that does not run is below one that runs and passes nothing (review of d6c31d6:
    # on HumanEval/116 the right program passes 0 of 2, and a crashing input beat it)
    assert _sim_test(W, monkeypatch, p, W.CRASHED, ["m0"], 1) == ("m0", "tests fail; kept round 1 (0/2 examples pass)")
    # a calibration without counts (v1, v2: runs 1-7) keeps the last fix, as the operator did then
    old = _sim_problem(W, None)
    assert _sim_test(W, monkeypatch, old, W.RIGHT, ["m0"], 1) == ("m0", "tests fail")
    assert _sim_test(W, monkeypatch, old, W.CRASHED, ["m1", "m0"], 2) == ("m0", "tests fail")


def test_sim_world_right_program_is_never_replaced_by_a_worse_one(sim, shared_data):
    """On the real calibration: a test step never leaves a program that passes fewer examples than
    the right one it was given (HumanEval/47 and /116: the right program fails its examples)."""
    W = sim
    data = shared_data / "humaneval" / "HumanEval.jsonl.gz"
    if not data.is_file():
        pytest.skip(f"{data} is absent")
    task = W.SimCodeTask(str(data))
    for pid in ("HumanEval/47", "HumanEval/116"):
        p = next(q for q in task.problems if q["id"] == pid)
        for seed in range(20):
            ex = W.SimCodeExecutor(task, W.sim_pool(), world_seed=seed)
            for b in ("cheap", "mid", "o1"):
                wf = Workflow(
                    [Node("n0", "generate", backbone="cheap"), Node("n1", "test", backbone=b, params={"retries": 2})],
                    [("n0", "n1")],
                    "n1",
                )
                ctx = {"workflow": wf.hash(), "ids": wf.canonical_ids(), "generation": 0}
                out, note = ex.test(wf.node("n1"), p, W.RIGHT, Trace(p["id"]), ctx)
                assert out == W.RIGHT or p["behaviour"][out][1], (pid, seed, b, out, note)
    assert task.counts
    # a program that does not run ranks below one that runs and passes no example
    assert all(q["passed"]["crashed"] == -1 for q in task.problems)
    # the calibrations of runs 1-7 have no counts and still load
    for name in ("hflow_sim_code_calibration_v1.json", "hflow_sim_code_calibration_v2.json"):
        old = W.SimCodeTask(str(data), W.CALIBRATION.with_name(name))
        assert not old.counts and all(q["passed"] is None for q in old.problems)
