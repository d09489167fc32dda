"""Competition-math answers as real MATH, MATH-500 and AIME items write them.

Each gold answer below is copied from a real item (MATH-500 numbers are positions in the
HuggingFaceH4 MATH-500 order; MATH test numbers are positions in hendrycks' test split; AIME 2024
numbers are the Qwen2.5-Math evaluation ids). An audit scored every gold answer of those files
(5,000 + 500 + 30 items); these are the forms the fallback verifier got wrong, in both directions.
"""

from __future__ import annotations

import json

import pytest

from lightning_agents.hflow import Backbone, BackbonePool, Completion, Node, Workflow, WorkflowExecutor
from lightning_agents.tasks._files import TaskDataError
from lightning_agents.tasks.math import BoxedMathTask, BoxedMathVerifier


@pytest.mark.parametrize(
    ("gold", "predicted"),
    [
        ("\\frac 59", "\\frac{5}{9}"),  # MATH-500 #235
        ("\\frac 34", "3/4"),  # MATH-500 #393
        ("\\$36", "36"),  # MATH-500 #488
        ("\\$18.90", "18.90"),  # MATH-500 #459
        ("\\$32,\\!348", "32348"),  # MATH-500 #242
        ("5.4 \\text{ cents}", "5.4"),  # MATH-500 #301
        ("864 \\mbox{ inches}^2", "864"),  # MATH-500 #257
        ("18\\text{ ways.}", "18"),  # MATH test #1309
        ("90\\text{ square\nunits}", "90"),  # MATH test #4134
        ("\\text{(C)}", "C"),  # MATH-500 #227
        ("\\textbf{(113) }", "113"),  # AIME 2024 #61, the AoPS solution's box
        ("\\mathbf{127}", "127"),  # AIME 2024 #88
        ("1,000", "1000"),
        ("x=5", "5"),  # a model may leave the variable out
        ("y = 2x + 3", "2x+3"),  # MATH-500 #454
    ],
)
def test_fallback_accepts_the_same_answer_written_otherwise(gold, predicted):
    assert BoxedMathVerifier(use_math_verify=False)(f"\\boxed{{{predicted}}}", gold) == 1.0


@pytest.mark.parametrize(
    ("gold", "predicted"),
    [
        ("3, 5, 7", "357"),  # MATH-500 #36: commas are not thousands separators here
        ("-2,1", "-21"),  # MATH-500 #456
        ("0,1", "1"),  # MATH test #2223: one of two solutions
        ("x=5", "y=5"),  # MATH-500 #23: another line
        ("y = 2x + 3", "x = 2x + 3"),  # MATH-500 #454
        ("85\\text{ feet}", "85\\text{ m}"),  # another unit
        ("(15,-29)", "[15,-29]"),  # MATH-500 #144: an ordered pair, not an interval
        ("(-\\infty, 0]", "[-\\infty,0]"),  # MATH-500 #307
    ],
)
def test_both_backends_refuse_a_different_answer(gold, predicted):
    # The unit and bracket checks come before either backend; math-verify, when installed, would
    # otherwise equate the last three (it drops units and reads pairs as intervals).
    for verifier in (BoxedMathVerifier(use_math_verify=False), BoxedMathVerifier()):
        assert verifier(f"\\boxed{{{predicted}}}", gold) == 0.0, verifier.backend


def test_answer_is_stated_again_as_written_and_votes_group_equal_answers(tmp_path):
    """HFlow states an extracted answer again (``format_answer``) and votes on it: the answer must
    survive the round trip (normalising dropped the dollar sign's ``$`` and every space)."""
    path = tmp_path / "math.jsonl"
    rows = [
        {"problem": "How much?", "solution": "It costs $\\boxed{\\$36}$.", "id": "488"},
        {"problem": "Area?", "solution": "So $\\boxed{864 \\mbox{ inches}^2}$.", "id": "257"},
        {"problem": "Compute 1-1.", "answer": 0, "id": "zero"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = BoxedMathTask(str(path))
    problems = {p["id"]: p for p in task.problems}
    for pid in ("488", "257"):
        answer = task.extract_answer(problems[pid]["solution"])
        assert task.verify(task.format_answer(answer), problems[pid]) == 1.0, answer
    assert problems["zero"]["reference"] == "0"  # an answer of 0 is an answer
    assert task.answer_key("\\dfrac{1}{2}") == task.answer_key("\\frac12")
    with pytest.raises(TaskDataError, match=r"bad\.jsonl:2: .*needs 'problem'.*it has \['id', 'question'\]"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"id": 1, "question": "q"}) + "\n")
        _ = BoxedMathTask(str(bad)).problems


def test_vote_counts_one_answer_in_different_latex_once_and_states_it_as_written(tmp_path):
    class Voters(Backbone):
        replies = ["$\\boxed{\\$36}$", "$\\boxed{36}$", "$\\boxed{\\$ 36}$"]

        def __init__(self):
            super().__init__("voters", 1.0, 1.0)
            self.calls = 0

        def _complete(self, requests):
            out = []
            for _ in requests:
                out.append(Completion(self.replies[self.calls % 3], 10, 5))
                self.calls += 1
            return out

    path = tmp_path / "math.jsonl"
    path.write_text(json.dumps({"problem": "How much?", "answer": "\\$36", "id": "488"}) + "\n")
    task = BoxedMathTask(str(path))
    [trace] = WorkflowExecutor(task, BackbonePool([Voters()])).run(
        Workflow([Node("v", "vote", backbone="voters", params={"samples": 3})]), task.problems
    )
    assert trace.steps[0]["note"] == "votes {'36': 3}"
    assert trace.answer == "\\$36" and trace.score == 1.0


def test_a_word_problem_file_in_another_format_is_refused_naming_its_fields(tmp_path):
    """SVAMP's rows (``Body``, ``Question``, ``Answer``) are not GSM8K's; the error says what the row has."""
    from lightning_agents.tasks.gsm8k import GSM8KTask

    path = tmp_path / "svamp.jsonl"
    row = {"ID": "chal-1", "Body": "Each pack of dvds costs 76 dollars.", "Question": "How much?", "Answer": 76.0}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskDataError, match=r"svamp\.jsonl:1: .*it has \['Answer', 'Body', 'ID', 'Question'\]"):
        _ = GSM8KTask(str(path)).problems
