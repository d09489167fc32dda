"""Docstring examples, behaviour voting and the code task on real benchmarks beyond HumanEval.

MBPP+ as evalplus releases it states one example per problem as an ``assert`` line of its prompt
(``tests/data/code/mbppplus_release_prompts/README.md``). Before: 1 of the 399 MBPP+ prompts gave
an example (Mbpp/162, through its prose "for instance"), so HFlow's ``test`` operator only checked
that code runs and behaviour voting put every candidate in one group (the first ballot won, a
``return None`` stub included). Scripts and figures: the session-33 code audit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_agents.hflow.operators import WorkflowExecutor, execute_python
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks.code import HumanEvalTask
from lightning_agents.tasks.code_examples import docstring_examples, example_assertions, generated_calls

MBPP = Path(__file__).resolve().parents[1] / "data" / "code" / "mbppplus_release_prompts" / "rows.jsonl"
needs_sandbox = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


def _rows() -> dict[str, dict]:
    return {r["task_id"]: r for r in map(json.loads, MBPP.read_text().splitlines())}


def test_every_assert_form_of_mbpp_prompts_is_an_example():
    got = {pid: docstring_examples(r["prompt"], r["entry_point"]) for pid, r in _rows().items()}
    assert got == {
        # the set() on both sides stays: the test compares sets, so does the example
        "Mbpp/2": [("set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10)))", "{4, 5}")],
        "Mbpp/3": [("is_not_prime(2)", "False")],
        # math.isclose keeps its tolerance: 62.830000000000005 is 2 * 3.1415 * 10, within rel_tol of 2 * pi * 10
        "Mbpp/82": [("volume_sphere(10)", "4188.790204786391", (0.001, 0.0))],
        "Mbpp/139": [("circle_circumference(10)", "62.830000000000005", (0.001, 0.0))],
        # `assert f(x)` / `assert not f(x)` ask for a truthy / falsy value (an re.Match, None)
        "Mbpp/737": [("bool(check_str('annie'))", "True")],
        "Mbpp/787": [("bool(text_match_three('ac'))", "False")],
        "Mbpp/769": [("Diff([10, 15, 20, 25, 30, 35, 40], [25, 40, 35])", "[10, 20, 30, 15]")],
        "Mbpp/86": [("centered_hexagonal_number(10)", "271")],
    }


def test_assert_lines_that_are_not_examples_are_dropped():
    prompt = '"""\n{}\n"""\n'
    for line in (
        "assert f(x) == 2",  # a name, not a literal
        "assert g(1) == 2",  # another function
        "assert f(1) < 2",  # not a statement of the result
        "assert set(f(1)) == set([[1]])",  # unhashable: no value to state
        "assert math.isclose(f(1), 2, rel_tol=eps)",
    ):
        assert docstring_examples(prompt.format(line), "f") == [], line


@needs_sandbox
def test_canonical_solutions_pass_their_examples_and_the_task_reward():
    task = HumanEvalTask(str(MBPP), timeout_s=20)
    for p in task.problems:
        program = task.program_for(p["prompt_text"] + p["canonical_solution"], p)
        tests = example_assertions(p["prompt_text"], p["entry_point"])
        assert tests, p["task_id"]
        run = execute_python(program + "\n\n" + tests + "\nprint('examples ran')\n", 20, 1024)
        assert run.returncode == 0 and "examples ran" in run.stdout, (p["task_id"], run.stderr[-300:])
        assert task.verify(f"```python\n{program}\n```", p) == 1.0, p["task_id"]
        stub = f"```python\ndef {p['entry_point']}(*args, **kwargs):\n    return None\n```"
        assert task.verify(stub, p) == 0.0, p["task_id"]


@needs_sandbox
def test_behaviour_voting_groups_a_renamed_copy_and_splits_a_stub_off():
    task = HumanEvalTask(str(MBPP), timeout_s=20)
    executor = WorkflowExecutor(task, pool=None, sandbox_timeout_s=20, sandbox_memory_mb=1024, sandbox_workers=2)
    problems, ballots = [], []
    renamed = {
        "Mbpp/3": "import math\ndef is_not_prime(k):\n    return k == 1 or any(k % d == 0 for d in range(2, math.isqrt(k) + 1))\n",
        "Mbpp/139": "import math\ndef circle_circumference(radius):\n    return math.tau * radius\n",
    }
    for p in task.problems:
        if p["task_id"] in renamed:
            stub = f"def {p['entry_point']}(*args, **kwargs):\n    return None\n"
            problems.append(p)
            # the stub first: ties go to the first ballot seen
            ballots.append([stub, p["canonical_solution"], renamed[p["task_id"]]])
    results = executor._vote_by_behaviour(problems, ballots, [[""] * 3 for _ in problems])
    assert len(results) == 2
    for p, b, r in zip(problems, ballots, results):
        assert r.note.startswith("behaviour groups [1, 2]"), (p["task_id"], r.note)
        assert r.answer == b[1], p["task_id"]


HUMANEVAL_X = Path(__file__).resolve().parents[1] / "data" / "code" / "humanevalx_python" / "rows.jsonl"


def test_humaneval_x_rows_load_with_the_entry_point_their_test_checks():
    # Before: every HumanEval-X row was rejected (no `entry_point` field)
    task = HumanEvalTask(str(HUMANEVAL_X))
    by_id = {p["task_id"]: p for p in task.problems}
    assert {pid: p["entry_point"] for pid, p in by_id.items()} == {
        "Python/0": "has_close_elements",
        "Python/32": "find_zero",
        "Python/53": "add",
        "Python/120": "maximum",
    }
    # the test's own check(...) call is the only one: the hidden tests run once
    assert all(p["reference"].count("\ncheck(") == 1 for p in task.problems)


def test_a_row_without_entry_point_or_a_check_call_is_rejected_with_its_line(tmp_path):
    row = json.loads(HUMANEVAL_X.read_text().splitlines()[0])
    row["test"] = row["test"].replace("check(has_close_elements)", "")
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(Exception, match=r"x\.jsonl:1: .*needs string fields \['entry_point'\]"):
        _ = HumanEvalTask(str(path)).problems


def test_leetcode_input_output_pairs_are_examples_in_parameter_order():
    # Before: none of HumanEval's `Input: ... / Output: ...` pairs was read (68, 107, 120, 122, 129,
    # 143, 147 had no example at all); named inputs follow the signature, not the text's order
    task = HumanEvalTask(str(HUMANEVAL_X))
    p = next(p for p in task.problems if p["task_id"] == "Python/120")
    assert docstring_examples(p["prompt"], "maximum") == [
        ("maximum([-3, -4, 5], 3)", "[-4, -3, 5]"),
        ("maximum([4, -4, 4], 2)", "[4, 4]"),
        ("maximum([-3, 2, 1, 2, -1, -2, 1], 1)", "[2]"),
    ]
    doc = 'def f(a, b):\n    """\n    Input: b = 1, a = 2\n    Output: 3\n    Input: c = 1, a = 2\n    Output: 3\n    """\n'
    assert docstring_examples(doc, "f") == []  # names out of order, or not the function's: no guess
    one = 'def g(xs):\n    """\n    Example 1:\n        Input: [4,2,3]\n        Output: [2, 1] # the smallest even\n    """\n'
    assert docstring_examples(one, "g") == [("g([4, 2, 3])", "[2, 1]")]


@needs_sandbox
def test_humaneval_x_canonical_solutions_score_and_a_stub_does_not():
    task = HumanEvalTask(str(HUMANEVAL_X), timeout_s=20)
    for p in task.problems:
        program = p["prompt"] + p["canonical_solution"]
        assert task.verify(f"```python\n{program}\n```", p) == 1.0, p["task_id"]
        tests = example_assertions(p["prompt"], p["entry_point"])
        if tests:  # Python/32's docstring states no literal example
            run = execute_python(program + "\n\n" + tests + "\nprint('examples ran')\n", 20, 1024)
            assert "examples ran" in run.stdout, (p["task_id"], run.stderr[-300:])
        assert task.verify(f"```python\ndef {p['entry_point']}(*a, **k):\n    return 0\n```", p) == 0.0


def test_generated_inputs_vary_each_argument_of_the_examples():
    rows = _rows()
    got = generated_calls(rows["Mbpp/2"]["prompt"], "similar_elements", 4)
    # the wrapper set(...) is the example's comparison, not part of the input
    assert got == [
        "similar_elements((6, 5, 4, 3), (5, 7, 4, 10))",
        "similar_elements((3, 4, 5, 6), (10, 4, 7, 5))",
        "similar_elements((3, 4, 5), (5, 7, 4, 10))",
        "similar_elements((3, 4, 5, 6), (5, 7, 4))",
    ]
    assert generated_calls('"""\nno examples\n"""\n', "f") == []


@needs_sandbox
def test_voting_splits_a_candidate_right_only_on_the_stated_example():
    # Mbpp/86 states one example; a candidate that hard-codes it behaved like the right ones on it,
    # was one group with them, and won when seen first
    task = HumanEvalTask(str(MBPP), timeout_s=20)
    p = next(p for p in task.problems if p["task_id"] == "Mbpp/86")
    memo = "def centered_hexagonal_number(n):\n    return 271 if n == 10 else 0\n"
    right = "def centered_hexagonal_number(n):\n    return 3 * n * (n - 1) + 1\n"
    strict = (
        "def centered_hexagonal_number(n):\n    if n < 1:\n        raise ValueError(n)\n"
        "    return 3 * n * n - 3 * n + 1\n"
    )
    executor = WorkflowExecutor(task, pool=None, sandbox_timeout_s=20, sandbox_memory_mb=1024, sandbox_workers=2)
    (r,) = executor._vote_by_behaviour([p], [[memo, right, strict]], [[""] * 3])
    # `strict` raises on the generated n = 0 where `right` returns 1: three groups of one, but the
    # two right ones agree on every other generated input, so they outvote `memo`
    assert r.note.startswith("behaviour groups [1, 1, 1]"), r.note
    assert r.answer == right, r.note
