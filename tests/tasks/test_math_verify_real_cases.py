"""BoxedMathVerifier on cases from graders' own test suites, and under RewardScorer's thread pool.

Cases marked "Math-Verify" are (gold, prediction) pairs from huggingface/Math-Verify's tests at
5d148cfaaf99214c2e4ffb4bc497ab042c592a7a (Apache-2.0): ``tests/test_open_thoughts.py`` holds
real DeepSeek-R1 (OpenThoughts) outputs, ``tests/test_numina_cases.py`` real NuminaMath ones.
"""

from __future__ import annotations

import importlib.util

import pytest

from lightning_agents.rewards.registry import RewardScorer
from lightning_agents.tasks.math import BoxedMathVerifier

needs_math_verify = pytest.mark.skipif(
    importlib.util.find_spec("math_verify") is None, reason="math-verify not installed"
)


@needs_math_verify
def test_rewards_scored_in_a_thread_pool_are_rewards_not_nan():
    # math-verify's timeouts use signal.alarm, which raises off the main thread: every reward the
    # scorer's thread pool computed was nan (4 of 4 here), so RL on math learned nothing.
    scorer = RewardScorer("lightning_agents.rewards.BoxedMathVerifier", max_workers=4)
    completions = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{\\sqrt{8}}", "\\boxed{3}", "\\boxed{x^2-1}"]
    references = ["0.5", "\\frac12", "2\\sqrt{2}", "4", "(x-1)(x+1)"]
    result = scorer.score(completions, references)
    assert result.rewards == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert result.num_errors == 0


@pytest.mark.parametrize(
    ("completion", "gold", "in_order"),
    [
        # Math-Verify test_numina_cases
        (
            "solutions are:\n\n\\[\n\\boxed{(1, 2)}, \\boxed{(2, 1)}, \\boxed{(-1, -20)}, \\boxed{(-20, -1)}\n\\]",
            "(2,1),(1,2),(-1,-20),(-20,-1)",
            False,
        ),
        # Math-Verify test_open_thoughts (DeepSeek-R1 outputs)
        ("\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}", "(2, 2), (6, 2)", True),
        ("\\boxed{(98, 2)} \\quad \\text{and} \\quad \\boxed{(99, 503)}", "(98, 2), (99, 503)", True),
        ("\\boxed{1},\\boxed{2},\\boxed{3}", "1, 2, 3", True),
        # Math-Verify test_numina_cases: the reference boxes its two parts
        ("\\boxed{-2,1}", "\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", False),
    ],
)
@pytest.mark.parametrize("use_math_verify", [False, True])
def test_an_answer_boxed_in_parts_equals_a_list_reference(completion, gold, in_order, use_math_verify):
    if use_math_verify and importlib.util.find_spec("math_verify") is None:
        pytest.skip("math-verify not installed")
    # graders take the parts in any order by default; only a record whose question asks for an
    # order (any_order=False) refuses them reordered
    assert BoxedMathVerifier(use_math_verify=use_math_verify)(completion, gold) == 1.0
    if not in_order:
        assert BoxedMathVerifier(use_math_verify=use_math_verify, any_order=False)(completion, gold) == 0.0


@pytest.mark.parametrize("use_math_verify", [False, True])
def test_boxing_extra_candidates_or_hedging_with_logic_does_not_pay(use_math_verify):
    if use_math_verify and importlib.util.find_spec("math_verify") is None:
        pytest.skip("math-verify not installed")
    verify = BoxedMathVerifier(use_math_verify=use_math_verify)
    # joined boxes must be the whole list, not contain it
    assert verify("\\boxed{5}\\boxed{4}\\boxed{3}", "3, 5") == 0.0
    # a single answer is still the last box
    assert verify("\\boxed{2} or maybe \\boxed{3}", "3") == 1.0
    assert verify("\\boxed{3} or maybe \\boxed{2}", "3") == 0.0
    # math-verify read `1 \lor 3` and `1 \implies 3` as their last part, 3
    for hedge in ("1 \\lor 3", "1 \\vee 3", "1 \\implies 3", "1 \\Rightarrow 3", "1 \\to 3"):
        assert verify(f"\\boxed{{{hedge}}}", "3") == 0.0, hedge
    # an answer that is a logical statement is still compared
    assert verify("\\boxed{p \\lor q}", "p \\lor q") == 1.0
    # another base is another number (math-verify read `40_9` as 40)
    assert verify("\\boxed{40_9}", "40") == 0.0
    assert verify("\\boxed{40_9}", "40_9") == 1.0
    # an answer longer than any competition answer is no answer
    assert verify("\\boxed{" + "1+" * 600 + "1}", "601") == 0.0


@needs_math_verify
def test_a_partial_parse_is_not_the_answer():
    # Math-Verify test_all: math-verify parsed `1 + \\frac{1}{\\mathrm{e}}` as `1`, equal to `1 - ...`
    verify = BoxedMathVerifier()
    assert verify("\\boxed{1 + \\frac{1}{\\mathrm{e}}}", "1 - \\frac{1}{\\mathrm{e}}") == 0.0
    assert verify("\\boxed{1 - \\frac{1}{e}}", "1 - \\frac{1}{\\mathrm{e}}") == 1.0


@needs_math_verify
def test_false_equations_decimals_and_repeating_decimals():
    verify = BoxedMathVerifier()
    # math-verify kept the last side of `1 = 3`: a false statement scored 1 against 3
    assert verify("\\boxed{1 = 3}", "3") == 0.0
    assert verify("\\boxed{1 = 2 = 3}", "3") == 0.0
    # a true equation, or one with a variable, is still compared by its answer
    assert verify("\\boxed{2 + 1 = 3}", "3") == 1.0
    assert verify("\\boxed{\\frac{6}{2} = 3}", "3") == 1.0
    assert verify("\\boxed{x = 3}", "3") == 1.0
    # a rounded decimal is not the exact value (math-verify rounds to 6 digits by default) ...
    assert verify("\\boxed{0.3333333}", "\\frac{1}{3}") == 0.0
    assert verify("\\boxed{0.5}", "\\frac{1}{2}") == 1.0
    # ... and a repeating decimal is (math-verify read `0.\\overline{3}` as 0)
    assert verify("\\boxed{0.\\overline{3}}", "\\frac{1}{3}") == 1.0
    assert verify("\\boxed{0.1\\overline{6}}", "\\frac{1}{6}") == 1.0
    assert verify("\\boxed{0.\\overline{3}}", "0") == 0.0


@pytest.mark.parametrize("use_math_verify", [False, True])
def test_euler_and_imaginary_constants_and_powers_are_not_units(use_math_verify):
    if use_math_verify and importlib.util.find_spec("math_verify") is None:
        pytest.skip("math-verify not installed")
    verify = BoxedMathVerifier(use_math_verify=use_math_verify)
    # read as a unit `e` with its power dropped, `2\mathrm{e}^{3}` equalled `2\mathrm{e}^{5}` in both backends
    assert verify("\\boxed{2\\mathrm{e}^{3}}", "2\\mathrm{e}^{5}") == 0.0
    assert verify("\\boxed{3\\mathrm{i}}", "3") == 0.0
    assert verify("\\boxed{2\\mathrm{e}}", "2") == 0.0
    assert verify("\\boxed{2\\mathrm{e}^{5}}", "2\\mathrm{e}^{5}") == 1.0
    # a power of a unit is part of the unit; an omitted unit is still accepted
    assert verify("\\boxed{8 \\text{ m}^3}", "8 \\text{ m}^2") == 0.0
    assert verify("\\boxed{864 \\mbox{ inches}^2}", "864") == 1.0
    assert verify("\\boxed{5 \\mathrm{cm}}", "5") == 1.0


@needs_math_verify
@pytest.mark.parametrize(
    ("box", "expected"),
    [
        # each passed the first false-equation guard: braces, units, spacing and display commands
        # read as a variable, `\approx` as no relation, `\infty` as a letter
        ("{1} = 3", 0.0),
        ("1\\% = 3", 0.0),
        ("\\quad 1 = 3", 0.0),
        ("\\displaystyle 1 = 3", 0.0),
        ("1 \\text{ cm} = 3", 0.0),
        ("\\infty = 3", 0.0),
        ("1 \\approx 2 = 3", 0.0),
        # true statements are still compared: `\approx` allows a rounded side (NeMo-Skills' grader accepts it)
        ("\\frac{6}{2} = 3", 1.0),
        ("3 = 3", 1.0),
    ],
)
def test_false_equations_dressed_up_are_no_answer(box, expected):
    assert BoxedMathVerifier()(f"\\boxed{{{box}}}", "3") == expected
    assert BoxedMathVerifier()("\\boxed{\\frac{\\sqrt{3}}{3} \\approx 0.577}", "\\frac{\\sqrt{3}}{3}") == 1.0
