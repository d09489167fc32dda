"""Verifiers on real data (GSM8K, HumanEval) and on hand-made edge cases."""

from __future__ import annotations

import json
import math

import pytest

from lightning_agents.rewards import (
    ArithmeticVerifier,
    BoxedMathVerifier,
    CodeVerifier,
    GSM8KVerifier,
    ProgramOutputVerifier,
    RewardScorer,
    resolve_verifier,
)
from lightning_agents.rewards.code import extract_program


def test_every_gold_gsm8k_solution_scores_one(shared_data):
    rows = [
        json.loads(line) for line in (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines() if line.strip()
    ]
    assert len(rows) == 1319
    v = GSM8KVerifier()
    assert all(v(r["answer"], r["answer"]) == 1.0 for r in rows)
    assert all(v("", r["answer"]) == 0.0 for r in rows)
    # A different number must not match: the verifier is not trivially true.
    wrong = sum(
        v(f"The answer is {int(float(r['answer'].split('####')[-1].replace(',', ''))) + 1}", r["answer"]) for r in rows
    )
    assert wrong == 0


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("so 3 + 4 = 7.\n#### 7", "#### 7", 1.0),
        ("The answer is $1,234.", "blah\n#### 1234", 1.0),
        ("The answer is 18 dollars.", "18", 1.0),
        ("The final answer is \\boxed{42}", "42", 1.0),
        ("Answer: 18.00", "18", 1.0),
        ("She has 5 apples then 7.", "7", 0.0),  # no final-answer statement: strict
        ("The answer is 8.", "7", 0.0),
        ("", "7", 0.0),
        ("#### -3", "#### -3", 1.0),
    ],
)
def test_gsm8k_extraction(completion, reference, expected):
    assert GSM8KVerifier()(completion, reference) == expected


def test_gsm8k_lenient_fallback():
    assert GSM8KVerifier(fallback_last_number=True)("She has 5 apples then 7.", "7") == 1.0
    with pytest.raises(ValueError, match="gold"):
        GSM8KVerifier()("1", "no number here")


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}}", "\\frac12", 1.0),
        ("\\boxed{0.5}", "\\dfrac{1}{2}", 1.0),
        ("\\boxed{\\text{(B)}}", "(B)", 1.0),
        ("\\boxed{3}", "The solution ... \\boxed{3}.", 1.0),
        ("\\boxed{4}", "3", 0.0),
        ("no box, 3", "3", 0.0),
        ("\\boxed{", "3", 0.0),
    ],
)
def test_boxed_math_fallback(completion, reference, expected):
    assert BoxedMathVerifier(use_math_verify=False)(completion, reference) == expected


# The HumanEval sweeps (canonical, empty bodies, generic attacks) live in test_verdict.py.


def test_code_extraction_and_output_verifier():
    assert extract_program("text\n```python\nprint(2)\n```\nmore") == "print(2)\n"
    assert extract_program("```python\nprint(3)") == "print(3)"
    assert ProgramOutputVerifier()("```python\nprint(12 + 30)\n```", "42") == 1.0
    assert ProgramOutputVerifier()("```python\nprint(12 + 31)\n```", "42") == 0.0
    assert CodeVerifier()("", "assert True") == 0.0


class _Crashes:
    def __call__(self, completion, reference):
        raise RuntimeError("verifier bug")


class _OutOfRange:
    def __call__(self, completion, reference):
        return 2.0


def test_scorer_parallel_and_crash_counting():
    scorer = RewardScorer("lightning_agents.rewards.ArithmeticVerifier", max_workers=4)
    out = scorer.score(["The answer is 3.", "The answer is 4.", "x"], ["3", "3", "3"])
    assert out.rewards == [1.0, 0.0, 0.0] and out.num_errors == 0
    path = f"{__name__}._Crashes"
    out = scorer.score(["The answer is 3.", "a", "b"], ["3", "3", "3"], [None, path, f"{__name__}._OutOfRange"])
    # A verifier that cannot verify gives no reward (nan), not a wrong-answer 0.
    assert out.rewards[0] == 1.0 and all(math.isnan(r) for r in out.rewards[1:])
    assert out.num_errors == 2 and scorer.total_errors == 2
    assert out.reasons == {"pass": 1, "verifier_error": 2}


def test_resolve_verifier_forms():
    assert isinstance(resolve_verifier("GSM8KVerifier"), GSM8KVerifier)
    v = resolve_verifier({"class_path": "lightning_agents.rewards.CodeVerifier", "init_args": {"timeout_s": 3}})
    assert isinstance(v, CodeVerifier) and v.timeout_s == 3
    a = ArithmeticVerifier()
    assert resolve_verifier(a) is a
    with pytest.raises(ValueError, match="cannot import"):
        resolve_verifier("nope.Missing")
    with pytest.raises(ValueError, match="class_path"):
        resolve_verifier({"init_args": {}})
