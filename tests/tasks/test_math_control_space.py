"""LaTeX's control space ``\\ `` in a boxed answer, as Llama 3.1 70B writes ordered pairs.

Real answers from tangzhy/RealCritic ``data/{math,college_math}/test.jsonl`` @ b47dab3 (MIT; the
model outputs that repository collected from Llama-3.1-70B-Instruct, MATH and college-math items
85, 106, 185). The fallback dropped the spaces but kept the backslash, ``(10,\\2)``, and scored
these right answers 0; math-verify scored them 1.
"""

from __future__ import annotations

import pytest

from lightning_agents.tasks.math import BoxedMathVerifier, normalize_latex

REAL = [
    ("(-4,1)", "The final answer is: $\\boxed{\\left( -4, \\  1\\right)}$"),
    ("(10,2)", "The final answer is: $\\boxed{\\left( 10, \\  2\\right)}$"),
    ("(3,4)", "The final answer is: $\\boxed{\\left( 3, \\  4\\right)}$"),
]


@pytest.mark.parametrize("use_math_verify", [False, True])
@pytest.mark.parametrize(("gold", "completion"), REAL)
def test_a_control_space_is_a_space(gold, completion, use_math_verify):
    verifier = BoxedMathVerifier(use_math_verify=use_math_verify)
    assert verifier(completion, gold) == 1.0
    # the same pair with a wrong coordinate stays wrong
    assert verifier(completion.replace("\\  ", "\\  9"), gold) == 0.0


def test_a_row_break_keeps_its_backslashes():
    # `\\ ` ends a matrix row: its second backslash is not a control space
    assert normalize_latex("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}") == "\\begin{pmatrix}1\\\\2\\end{pmatrix}"
    verifier = BoxedMathVerifier(use_math_verify=False)
    assert verifier("\\boxed{\\begin{pmatrix} 12 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}") == 0.0
