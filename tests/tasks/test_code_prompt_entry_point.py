"""A code prompt names the function its tests call.

MBPP+ in evalplus's original format (``tests/data/code/README.md``) prompts with the task's
description alone: 386 of the 399 prompts of ``MbppPlus.jsonl`` @ 767efcc never name the entry
point, so the rendered prompt asked for "the following Python function" and the hidden tests called
``similar_elements``, a name the model was never told: any answer under another name scored 0.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightning_agents.tasks.code import HumanEvalTask

CODE = Path(__file__).resolve().parents[1] / "data" / "code"


@pytest.mark.parametrize("name", ["mbppplus_original_format.jsonl", "mbppplus_limits_original_format.jsonl"])
def test_a_prompt_without_the_function_name_gets_it_with_the_canonical_signature(name):
    task = HumanEvalTask(str(CODE / name))
    for problem in task.problems:
        text = task.prompt(problem)[-1]["content"]
        assert problem["prompt"] in text
        # the name and the argument order the tests call it with (Mbpp/126 is `sum(a, b)`)
        signature = re.search(r"Name the function `(\w+)`: `def (\w+)\((.*)\):`\.$", text)
        assert signature and signature[1] == signature[2] == problem["entry_point"], (problem["task_id"], text)
    by_id = {p["task_id"]: p for p in task.problems}
    if "Mbpp/126" in by_id:
        assert task.user_message(by_id["Mbpp/126"]).endswith("Name the function `sum`: `def sum(a, b):`.")


def test_prompts_that_define_or_call_the_function_are_left_as_they_are(shared_data):
    # HumanEval's stubs define it; MBPP+'s release prompts call it in their example assert
    for path in [shared_data / "humaneval" / "HumanEval.jsonl.gz", CODE / "mbppplus_release_prompts" / "rows.jsonl"]:
        task = HumanEvalTask(str(path))
        for problem in task.problems:
            assert "Name the function" not in task.user_message(problem), problem["task_id"]


def test_a_word_of_the_description_is_not_the_function_named():
    from lightning_agents.tasks.code import names_entry_point

    description = "'''\nWrite a python function to find the sum of common divisors of two given numbers.\n'''"
    assert not names_entry_point(description, "sum")
    assert names_entry_point("'''\nassert sum(10, 15) == 6\n'''", "sum")
    assert names_entry_point("def sum (a, b):\n", "sum")
    assert not names_entry_point("x = math.sum(3)", "sum")
