"""Code voting where a HumanEval docstring states no example (31 of 164): behaviour cannot tell
candidates apart, so copies of one program are grouped by shape (session-35 audit:
/work/h35/hflow/vote_no_examples.py; before, the first ballot won on all 31, a stub included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_agents.hflow.operators import WorkflowExecutor
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks.code_examples import docstring_examples

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"

ADD = "def add(a, b):\n    return a + b\n"


def test_layout_comments_docstrings_hints_and_bound_names_do_not_change_a_shape():
    from lightning_agents.hflow.operators import code_shape

    same = [
        "def add(a, b):\n\n    # sum\n    return a + b   # done\n",
        'def add(x: int, y: int) -> int:\n    """Add."""\n    return x + y\n',
        "import math\ndef add(a, b):\n    'not first, still a docstring'\n    total = a + b\n    return total\n",
    ]
    assert code_shape(same[0], "add") == code_shape(ADD, "add") == code_shape(same[1], "add")
    # an extra local is a different program text, and so is what an import brings
    assert code_shape(same[2], "add") != code_shape(ADD, "add")
    for other in (
        "def add(a, b):\n    return a - b\n",  # computes something else
        "def add(a, b):\n    return b + a\n",  # the same for numbers, not for lists: kept apart
        "def plus(a, b):\n    return a + b\n",  # does not define the function asked for
        "def add(a, b):\n    return math.fsum([a, b])\n",
    ):
        assert code_shape(other, "add") != code_shape(ADD, "add"), other
    assert code_shape("def add(:", "add") == "def add(:"  # does not parse: its text


@pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
def test_two_copies_of_the_right_program_outvote_a_stub_on_a_problem_without_examples():
    if not DATA.is_file():
        pytest.skip(f"{DATA} is not there")
    from lightning_agents.tasks import HumanEvalTask

    task = HumanEvalTask(str(DATA))
    problem = next(p for p in task.problems if p["id"] == "HumanEval/83")
    assert docstring_examples(problem["prompt_text"], "starts_one_ends") == []  # its docstring gives none
    right = problem["prompt_text"] + problem["canonical_solution"]
    renamed = (
        "def starts_one_ends(digits):\n    # 1 for one digit, else 18 * 10 ** (digits - 2)\n"
        "    if digits == 1:\n        return 1\n\n    return 18 * (10 ** (digits - 2))\n"
    )
    canonical_renamed = right.replace("n ==", "k ==").replace("(n -", "(k -").replace("ends(n)", "ends(k)")
    stub = "def starts_one_ends(n):\n    return None\n"
    executor = WorkflowExecutor(task, pool=None, sandbox_workers=1)
    (result,) = executor._vote_by_behaviour([problem], [[stub, renamed, canonical_renamed, right]], [[]])
    # the three right ballots are one program written three ways: one group, which outvotes the stub
    assert result.answer != stub and "behaviour groups [1, 3]" in result.note
    assert task.verify(result.text, problem) == 1.0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # names a star import brings are free, not the program's own: floor and ceil stay apart
        (
            "from math import *\ndef f(x):\n    return floor(x / 2)\n",
            "from math import *\ndef f(x):\n    return ceil(x / 2)\n",
        ),
        # a method renamed where it is defined but still called through self
        (
            "class S:\n    def solve(self, x):\n        return 2 * x\ndef f(x):\n    return S().solve(x)\n",
            "class S:\n    def work(self, x):\n        return 2 * x\ndef f(x):\n    return S().solve(x)\n",
        ),
        # a helper called with a keyword its renamed parameter no longer has
        (
            "def helper(n):\n    return n + 1\ndef f(x):\n    return helper(n=x)\n",
            "def helper(m):\n    return m + 1\ndef f(x):\n    return helper(n=x)\n",
        ),
    ],
)
def test_programs_that_behave_differently_get_different_shapes(a, b):
    """Before: each pair shared a shape, so a wrong program could outvote right ones."""
    from lightning_agents.hflow.operators import code_shape

    assert code_shape(a, "f") != code_shape(b, "f")
    renamed = a.replace("(x", "(value").replace(" x", " value").replace("x)", "value)")
    assert code_shape(renamed, "f") == code_shape(a, "f")  # its own names still do not count
