"""evalplus release rows (``HumanEvalPlus.jsonl`` / ``MbppPlus.jsonl``) graded on their plus tests.

The rows (``tests/data/code/evalplus_release.jsonl``, see ``tests/data/code/README.md``) are in the
release schema: the extra tests are only ``plus_input``; their expected outputs are the canonical
solution's, computed in the sandbox at load (``lightning_agents.tasks.evalplus``). Before, a
HumanEval+ row was refused (its ``test`` is HumanEval's base ``check()`` alone) and an MBPP+ row
had no ``test`` at all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks import HumanEvalTask
from lightning_agents.tasks._files import TaskDataError

DATA = Path(__file__).resolve().parents[1] / "data" / "code" / "evalplus_release.jsonl"

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


def _fence(code: str) -> str:
    return f"```python\n{code}\n```"


def _rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines()]


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return HumanEvalTask(str(DATA), evalplus_cache=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def problems(task):
    return {p["id"]: p for p in task.problems}


def test_every_canonical_solution_passes_its_plus_tests(task, problems):
    assert sorted(problems) == sorted(r["task_id"] for r in _rows())
    for pid, p in problems.items():
        assert len(p["plus_input"]) > 20, pid
        assert task.verify(_fence(p["prompt"] + p["canonical_solution"]), p) == 1.0, pid


# Wrong programs that pass the base tests (HumanEval's check(), MBPP's base inputs) and fail a plus input.
WRONG = {
    # `<=` for `<`: equal gaps count as close; plus input [[10.5, 20.5, 30.5, 25.5, 40.5], 5.0]
    "HumanEval/0": "def has_close_elements(numbers, threshold):\n"
    "    s = sorted(numbers)\n    return any(b - a <= threshold for a, b in zip(s, s[1:]))\n",
    # trial division by 2 and 5 only: right on 1, 2, 10, 35, 37; 7921 = 89 * 89 is called prime
    "Mbpp/3": "def is_not_prime(n):\n    return n == 1 or (n > 2 and (n % 2 == 0 or n % 5 == 0))\n",
}


@pytest.mark.parametrize("pid", sorted(WRONG))
def test_a_solution_right_on_base_inputs_and_wrong_on_a_plus_input_scores_0(tmp_path, task, problems, pid):
    assert task.verify(_fence(WRONG[pid]), problems[pid]) == 0.0
    # the same program on the row without its plus inputs: what was scored before (base tests only)
    row = next(r for r in _rows() if r["task_id"] == pid)
    base = HumanEvalTask(_write(tmp_path / "base.jsonl", [{**row, "plus_input": []}]), evalplus_cache=None)
    assert base.verify(_fence(WRONG[pid]), base.problems[0]) == 1.0
    if "test" in row:  # HumanEval's own check() passes it too
        own = {k: v for k, v in row.items() if k not in ("base_input", "plus_input")}
        plain = HumanEvalTask(_write(tmp_path / "own.jsonl", [own]), evalplus_cache=None)
        assert plain.verify(_fence(WRONG[pid]), plain.problems[0]) == 1.0


def test_outputs_are_compared_as_evalplus_compares_them(task, problems):
    verify = lambda pid, code: task.verify(_fence(code), problems[pid])  # noqa: E731
    # atol 1e-6 (HumanEval/2's): off by under 5e-8 passes, rounded to 2 places fails
    assert verify("HumanEval/2", "def truncate_number(number):\n    return round(number - int(number), 7)\n") == 1.0
    assert verify("HumanEval/2", "def truncate_number(number):\n    return round(number - int(number), 2)\n") == 0.0
    # MBPP's set oracle (Mbpp/2): another order, duplicates kept
    assert verify("Mbpp/2", "def similar_elements(a, b):\n    return tuple(sorted(x for x in a if x in b))\n") == 1.0
    # a float answer given as an int: not equal, and not the same type for the tolerance
    assert verify("Mbpp/139", "import math\ndef circle_circumference(r):\n    return round(2 * math.pi * r)\n") == 0.0
    # MBPP's not-None oracle (Mbpp/787): an re.Match is compared by `is not None`, None everywhere fails
    assert verify("Mbpp/787", "def text_match_three(text):\n    return None\n") == 0.0
    # HumanEval/32 by evalplus's oracle |poly(xs, out)| <= atol: Newton's method from another start
    # passes, a point that is no root fails
    newton = (
        "def find_zero(xs):\n    x = 5.0\n    for _ in range(10000):\n"
        "        f = sum(c * x**i for i, c in enumerate(xs))\n"
        "        d = sum(i * c * x ** (i - 1) for i, c in enumerate(xs) if i)\n"
        "        if abs(f) < 1e-10 or d == 0:\n            break\n        x -= f / d\n    return x\n"
    )
    assert verify("HumanEval/32", newton) == 1.0
    assert verify("HumanEval/32", "def find_zero(xs):\n    return -xs[0] / xs[1]\n") == 0.0
    # an exception on an input is a failure
    assert verify("HumanEval/58", "def common(l1, l2):\n    return sorted(set(l1) & set(l2)) if l1 else 1 / 0\n") == 0.0


def test_expected_outputs_are_cached_by_file_content(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    cache = tmp_path / "cache"
    rows = _rows()[:2]
    first = _write(tmp_path / "a.jsonl", rows)
    n = len(HumanEvalTask(first, evalplus_cache=str(cache)).problems)
    assert n == 2 and len(list(cache.glob("*.json"))) == 1

    def no_sandbox(*args, **kwargs):
        raise AssertionError("the canonical solution ran again")

    monkeypatch.setattr(evalplus, "_run_reference", no_sandbox)
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    # the same bytes under another name: read from the disk cache
    moved = tmp_path / "moved.jsonl"
    shutil.copy(first, moved)
    assert [p["id"] for p in HumanEvalTask(str(moved), evalplus_cache=str(cache)).problems] == [
        "HumanEval/0",
        "HumanEval/2",
    ]
    # an edited file is another key
    rows[1]["plus_input"] = rows[1]["plus_input"][:-1]
    with pytest.raises(AssertionError, match="ran again"):
        _ = HumanEvalTask(_write(tmp_path / "edited.jsonl", rows), evalplus_cache=str(cache)).problems


def test_malformed_release_rows_are_refused_naming_file_and_line(tmp_path):
    good = {
        "task_id": "HumanEval/900",
        "prompt": "def div(a, b):\n    '''a / b'''\n",
        "entry_point": "div",
        "canonical_solution": "    return a / b\n",
        "base_input": [[1, 2]],
        "plus_input": [[3, 4]],
        "atol": 0,
    }
    cases = [
        ({"plus_input": [3, 4]}, r"bad\.jsonl:2: 'plus_input' must be a list of argument lists"),
        ({"plus_input": [[1, 0]]}, r"bad\.jsonl:2: the canonical solution of HumanEval/900 .*ZeroDivisionError"),
        ({"canonical_solution": None}, r"bad\.jsonl:2: .*needs string fields \['canonical_solution'\]"),
        ({"atol": "x"}, r"bad\.jsonl:2: 'atol' must be a number"),
    ]
    for change, message in cases:
        path = _write(tmp_path / "bad.jsonl", [good, {**good, **change}])
        with pytest.raises(TaskDataError, match=message):
            _ = HumanEvalTask(path, evalplus_cache=None).problems


def test_a_release_row_outside_humaneval_task_is_still_refused():
    from lightning_agents.tasks.code import humaneval_problem

    row = {**_rows()[0]}
    with pytest.raises(TaskDataError, match=r"here:1: an evalplus release record .*HumanEvalTask"):
        humaneval_problem(row, "here:1")


def test_an_entry_point_named_like_a_test_helper_is_still_the_candidates(tmp_path):
    # MBPP+'s Mbpp/56 is named `check` (HumanEval's tests define a `check`): the harness sends the
    # names the tests use without binding to the candidate, so the tests bind none of the kind.
    # The row: MbppPlus.jsonl @ 767efcc (evalplus/evalplus), its first 8 plus inputs.
    row = {
        "task_id": "Mbpp/56",
        "prompt": "'''\nWrite a python function to check if a given number is one less than twice its reverse.\n'''",
        "entry_point": "check",
        "canonical_solution": "\ndef check(n):    \n    return n == 2 * int(str(n)[::-1]) - 1\n",
        "base_input": [[70], [23], [73]],
        "plus_input": [[0], [1], [9], [10], [20], [100], [1000], [11]],
        "atol": 0,
    }
    task = HumanEvalTask(_write(tmp_path / "mbpp56.jsonl", [row]), evalplus_cache=None)
    (problem,) = task.problems
    assert task.verify(_fence(row["canonical_solution"]), problem) == 1.0
    assert task.verify(_fence("def check(n):\n    return n == 73\n"), problem) == 0.0


def test_a_row_whose_reference_run_hits_a_limit_is_skipped_with_one_warning(tmp_path, monkeypatch, caplog):
    # MBPP+'s Mbpp/255 returns about 1 GB for one input: a limit of this machine, not a broken row,
    # so the rest of the file is still graded (a canonical solution that raises refuses the file)
    from lightning_agents.tasks import evalplus

    monkeypatch.setitem(evalplus.REFERENCE_LIMITS, "timeout_s", 3.0)
    hang = {
        "task_id": "HumanEval/901",
        "prompt": "def spin(n):\n    '''never returns'''\n",
        "entry_point": "spin",
        "canonical_solution": "    while True:\n        n += 1\n",
        "base_input": [[1]],
        # MbppPlus.jsonl @ 767efcc stores Mbpp/793's plus inputs as {}: evalplus iterates it as none
        "plus_input": {},
        "atol": 0,
    }
    path = _write(tmp_path / "two.jsonl", [hang, _rows()[1]])
    with caplog.at_level("WARNING", logger="lightning_agents.tasks.evalplus"):
        problems = HumanEvalTask(path, evalplus_cache=None).problems
    assert [p["id"] for p in problems] == ["HumanEval/2"]
    assert "two.jsonl: skipped 1 evalplus row(s)" in caplog.text
    assert "two.jsonl:1: the canonical solution of HumanEval/901" in caplog.text and "timed out" in caplog.text
