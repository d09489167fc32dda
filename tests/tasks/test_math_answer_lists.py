"""Math records whose answer or solution is a JSON list, as OlympiadBench writes them.

OlympiadBench's records hold the final answer as a list of LaTeX strings (``["$2^{1009}$"]``) and
the solution as a list of texts; copies reshaped for MATH-style harnesses keep the lists under
``answer`` and ``solution`` (friedeggs01/riemannian-activation-steering
``data/olympiadbench/test.jsonl`` @ 9d27cbf, 675 items). ``BoxedMathTask`` read the list with
``str()``, so the reference was its Python repr ``['$2^{1009}$']``: on that file the fallback scored
0 of 675 gold answers 1 and math-verify 470 (and one wrong answer 1), with no error. The records
below have that shape (the problems are made up; that file states no licence, so none of it is
copied here).
"""

from __future__ import annotations

import json

import pytest

from lightning_agents.tasks._files import TaskDataError
from lightning_agents.tasks.math import BoxedMathTask, BoxedMathVerifier

ROWS = [
    # one answer, wrapped in math delimiters, a solution of several texts
    {"id": 1, "problem": "Find the largest n.", "solution": ["First way.", "Second way."], "answer": ["$2^{10}$"]},
    # two values in one item, each in its own delimiters (OlympiadBench writes `$69$,$84$`)
    {"id": 2, "problem": "Find a and b.", "solution": ["Work."], "answer": ["$7$,$12$"]},
    {"id": 3, "problem": "Find f.", "solution": ["Work."], "answer": ["$f(x)=2 x$"]},
    {"id": 4, "problem": "Find the ratio.", "solution": ["Work."], "answer": ["$\\frac{1}{2 n+2}$"]},
    # several items: compared as the list they make
    {"id": 5, "problem": "Find all pairs.", "solution": ["Work."], "answer": ["$(1,2)$", "$(3,4)$"]},
    {"id": 6, "problem": "Count them.", "solution": ["Work."], "answer": [6]},
]
# What a model writes for each: the answer without delimiters, in one box.
MODEL_ANSWERS = ["2^{10}", "7, 12", "f(x)=2x", "\\frac{1}{2n+2}", "(1,2), (3,4)", "6"]


def _task(tmp_path, rows, use_math_verify):
    path = tmp_path / "olympiad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = BoxedMathTask(str(path))
    task._verifier = BoxedMathVerifier(use_math_verify=use_math_verify)
    return task


@pytest.mark.parametrize("use_math_verify", [False, True])
def test_a_list_answer_is_the_reference_and_its_gold_scores_one(tmp_path, use_math_verify):
    task = _task(tmp_path, ROWS, use_math_verify)
    problems = task.problems
    for problem, answer in zip(problems, MODEL_ANSWERS):
        assert task.verify(f"So the answer is $\\boxed{{{answer}}}$.", problem) == 1.0, problem["id"]
    # another item's answer is wrong
    for problem, other in zip(problems, MODEL_ANSWERS[1:] + MODEL_ANSWERS[:1]):
        assert task.verify(f"\\boxed{{{other}}}", problem) == 0.0, (problem["id"], other)
    assert [p["reference"] for p in problems] == [
        "$2^{10}$",
        "$7$,$12$",
        "$f(x)=2 x$",
        "$\\frac{1}{2 n+2}$",
        "$(1,2)$, $(3,4)$",
        "6",
    ]


def test_a_list_solution_is_read_for_its_box_when_there_is_no_answer(tmp_path):
    rows = [{"problem": "Add.", "solution": ["So it is $\\boxed{5}$.", "Check: 2+3=5."], "answer": []}]
    task = _task(tmp_path, rows, False)
    (problem,) = task.problems
    assert problem["reference"] == "So it is $\\boxed{5}$.\n\nCheck: 2+3=5."
    assert task.verify("\\boxed{5}", problem) == 1.0
    assert task.verify("\\boxed{3}", problem) == 0.0


def test_an_answer_that_is_not_text_a_number_or_a_list_of_them_is_refused_naming_the_line(tmp_path):
    rows = [ROWS[0], {"problem": "Find x.", "answer": {"value": "5"}}]
    with pytest.raises(TaskDataError, match=r"olympiad\.jsonl:2: .*'answer' must be text, a number or a list"):
        _ = _task(tmp_path, rows, False).problems
