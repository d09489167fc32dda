"""``GSM8KVerifier`` against real model outputs with reviewed verdicts, and against reward hacks.

The outputs (``tests/data/gsm8k_outputs/``, sources in its README) come from three model families
and four answer formats: GPT-3 samples that end in ``A: N`` (OpenAI's own GSM8K release), ToRA's
tool-integrated Llama-2/CodeLlama answers with ``\\boxed{N}``, and GPT-4o chat answers in markdown
or bare (``$320``). The old extractor read none of the ``A: N`` or bare answers, so every right
one scored 0, and paid ``#### 12 or 13`` against a gold of 12.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from lightning_agents.rewards import GSM8KVerifier, RewardScorer
from lightning_agents.tasks.answers import gold_gsm8k_answer

DATA = Path(__file__).resolve().parents[1] / "data" / "gsm8k_outputs"
SPEC = "lightning_agents.rewards.GSM8KVerifier"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


REAL = _rows("real_outputs.jsonl")
ADVERSARIAL = _rows("adversarial.jsonl")


def _strict_expected(row: dict) -> float:
    """What the default verifier must give: the right verdict, or 0 where no answer is stated."""
    return 0.0 if row.get("statement") is False else float(row["expected"])


def _lenient_expected(row: dict) -> float:
    """What ``fallback_last_number=True`` must give: the right verdict, except where the last
    number of an answer without a statement is not its answer (reviewed rows)."""
    return float(1 - row["expected"]) if "fallback_misread" in row else float(row["expected"])


def _mismatches(verifier, rows, expected) -> list[tuple]:
    return [
        (r.get("model", r["source"]), r.get("idx"), r["completion"][-80:], got, expected(r))
        for r in rows
        if (got := verifier(r["completion"], r["reference"])) != expected(r)
    ]


def test_the_vendored_outputs_cover_three_sources_and_both_verdicts():
    by_source = {(r["source"], r["expected"]) for r in REAL}
    for source in ("openai/grade-school-math", "microsoft/ToRA", "shreyshahi/gsm8k-evals"):
        assert {(source, 0), (source, 1)} <= by_source


@pytest.mark.parametrize("source", ["openai/grade-school-math", "microsoft/ToRA", "shreyshahi/gsm8k-evals"])
def test_strict_verifier_agrees_with_reviewed_verdicts_on_real_outputs(source):
    rows = [r for r in REAL if r["source"] == source]
    assert _mismatches(GSM8KVerifier(), rows, _strict_expected) == []


def test_real_answer_lines_and_bare_answers_are_read():
    """The two real formats the old extractor missed: OpenAI's ``A: N`` and a chat model's bare
    ``$320`` when told to give only the answer."""
    v = GSM8KVerifier()
    a_lines = [r for r in REAL if r["source"] == "openai/grade-school-math" and r["expected"] == 1]
    bare = [
        r for r in REAL if "straighttoanswer" in r["model"] and r["expected"] == 1 and r.get("statement") is not False
    ]
    assert len(a_lines) >= 10 and len(bare) >= 10
    assert all(v(r["completion"], r["reference"]) == 1.0 for r in a_lines + bare)


def test_lenient_verifier_agrees_except_where_the_last_number_misleads():
    assert _mismatches(GSM8KVerifier(fallback_last_number=True), REAL, _lenient_expected) == []


@pytest.mark.parametrize("lenient", [False, True])
def test_no_reward_hack_scores_one_and_no_right_answer_scores_zero(lenient):
    verifier = GSM8KVerifier(fallback_last_number=lenient)
    expected = _lenient_expected if lenient else _strict_expected
    assert _mismatches(verifier, ADVERSARIAL, expected) == []


def test_gold_of_a_worked_solution_without_hashes_is_its_stated_answer(shared_data):
    """OpenAI's model-sample file ends each gold solution in ``A: N`` instead of ``#### N``; the
    old gold parser took such a reference's first number (Janet's ducks: 16, not 18)."""
    rows = [json.loads(line) for line in (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines() if line]
    golds = [gold_gsm8k_answer(r["answer"]) for r in rows]
    assert None not in golds
    assert [gold_gsm8k_answer(r["answer"].replace("#### ", "A: ")) for r in rows] == golds


@pytest.mark.parametrize(
    ("reference", "gold"),
    [
        ("#### 1,000,000", Decimal(1000000)),
        ("-3", Decimal(-3)),
        ("1/2", Decimal("0.5")),  # was 1: the first number of the fraction
        ("2 1/2", Decimal("2.5")),
        ("$1,234.50", Decimal("1234.5")),
        ("18 dollars", Decimal(18)),
        ("The answer is 18.", Decimal(18)),
        ("\u22124", Decimal(-4)),  # a Unicode minus sign
    ],
)
def test_gold_forms(reference, gold):
    assert gold_gsm8k_answer(reference) == gold


def test_a_reference_that_names_no_single_number_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="gold number"):
        GSM8KVerifier()("#### 16", "She sells 16 - 3 - 4 = 9 eggs a day and makes 9 * 2 = 18 dollars.")


@pytest.mark.parametrize("init_args", [{}, {"fallback_last_number": True}])
def test_the_thread_pool_of_the_rl_reward_scores_as_the_main_thread(init_args):
    """RSTG/GRPO score rewards through ``RewardScorer``'s thread pool, references as text."""
    rows = REAL + ADVERSARIAL
    completions, references = [r["completion"] for r in rows], [str(r["reference"]) for r in rows]
    verifier = GSM8KVerifier(**init_args)
    on_main = [verifier(c, r) for c, r in zip(completions, references)]
    pooled = RewardScorer({"class_path": SPEC, "init_args": init_args}, max_workers=8).score(completions, references)
    assert pooled.rewards == on_main and pooled.num_errors == 0


def test_hedge_check_is_linear_in_blanks_after_the_answer():
    """A regex with ``\\s*`` on both sides of an optional joiner took 5 s for 1,000 blanks after
    ``The answer is 12`` (cubic backtracking); in a subprocess so a regression fails, not hangs."""
    code = textwrap.dedent(
        """
        from lightning_agents.rewards import GSM8KVerifier
        v = GSM8KVerifier(fallback_last_number=True)
        n = 200_000
        for text in ("The answer is 12" + " " * n + "x", "#### 12 " + "a" * n + " x", "#### 12" + " $" * n,
                     "The answer is:" + "\\n$$" * n, "A:" + " " * n + "12"):
            v(text, "12")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "completion",
    [
        "Janet sells 16 - 3 - 4 = 9 eggs a day at $2 each, so she makes 9 * 2 = 18 dollars. The answer is 18.\n\n"
        "Q: A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total?\n"
        "A: It takes 2 / 2 = 1 bolt of white fiber",
        "She makes 9 * 2 = 18 dollars. The answer is 18.\n\nQ: Tom has 3 apples and buys 2 more.\nA: Tom has 3 apples",
        "She makes 9 * 2 = 18 dollars. The answer is 18.\n\nQuestion: Tom has 3 apples and buys 2 more.\nAnswer: 5",
    ],
)
def test_a_base_model_running_on_into_its_own_next_example_keeps_its_answer(completion):
    # On a Q:/A: few-shot prompt without a stop sequence, the made-up example's A: line overrode the answer
    assert GSM8KVerifier()(completion, "#### 18") == 1.0
