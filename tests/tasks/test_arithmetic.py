"""The embedded task: seeded splits, the exact verifier, the calculator tool, the chat formats."""

import json

import pytest

from lightning_agents.tasks.arithmetic import (
    ArithmeticVerifier,
    arithmetic_conversation,
    calculator,
    extract_final_answer,
    make_arithmetic_split,
)


def test_splits_are_seeded_and_disjoint():
    train = make_arithmetic_split("train")
    val, test = make_arithmetic_split("val"), make_arithmetic_split("test")
    assert (len(train), len(val), len(test)) == (20000, 200, 500)
    assert make_arithmetic_split("test") == test
    questions = [set(r["question"] for r in split) for split in (train, val, test)]
    assert not questions[0] & questions[1] and not questions[0] & questions[2] and not questions[1] & questions[2]
    assert {r["kind"] for r in test} == {"add1", "mul1", "add21", "sub21", "add22"}


def test_answers_are_the_expression_values():
    for record in make_arithmetic_split("val"):
        assert record["answer"] == str(eval(record["expression"]))  # noqa: S307 - trusted generator output
        assert int(record["answer"]) >= 0


def test_unknown_split_is_rejected():
    with pytest.raises(ValueError, match="unknown split"):
        make_arithmetic_split("dev")


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("The answer is 85.", 1.0),
        ("I think 3. The answer is 85", 1.0),
        ("The answer is 84.", 0.0),
        ("85", 0.0),  # a bare number is not a stated answer
        ("", 0.0),
        ("The answer is 8,5.", 1.0),
        ("The answer is 85. No wait, the answer is 86.", 0.0),  # the last statement counts
    ],
)
def test_verifier_is_exact(completion, score):
    assert ArithmeticVerifier()(completion, "85") == score


def test_extract_final_answer():
    assert extract_final_answer("so the answer is -12.") == "-12"
    assert extract_final_answer("no answer here") is None


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("37 + 48", "85"),
        ("6 * 22", "132"),
        ("(2 + 3) * 4", "20"),
        ("7 / 2", "3.5"),
        ("8 / 2", "4"),
        ("-3 + 1", "-2"),
        ("1,000 + 1", "1001"),
    ],
)
def test_calculator(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize("expression", ["__import__('os').system('true')", "2 ** 100000", "1 / 0", "abc", "1 +"])
def test_calculator_refuses_unsafe_or_invalid_input(expression):
    assert calculator(expression).startswith("error:")


def test_conversation_styles():
    record = make_arithmetic_split("val")[0]
    direct = arithmetic_conversation(record, "direct")
    assert (
        direct["messages"][-1]["content"]
        == f"{record['expression']} = {record['answer']}. The answer is {record['answer']}."
    )
    tool = arithmetic_conversation(record, "tool")
    call = tool["messages"][1]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"expression": record["expression"]}
    assert calculator(record["expression"]) == tool["messages"][2]["content"] == record["answer"]
    assert tool["tools"][0]["function"]["name"] == "calculator"
    program = arithmetic_conversation(record, "program")
    assert f"print({record['expression']})" in program["messages"][-1]["content"]
    with pytest.raises(ValueError):
        arithmetic_conversation(record, "essay")
