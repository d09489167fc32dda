"""What degenerate model and tool output does to every parser it reaches: no crash, no hang, no
silent misreading. RL policies emit such output (thousands of blanks or digits, unbalanced
brackets, stacked operators); one uncaught exception ends a rollout, a curation run or a search."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from lightning_agents.rollout.tool_calls import parse_tool_calls
from lightning_agents.tasks.answers import extract_stated_answer, last_number
from lightning_agents.tasks.arithmetic import calculator
from lightning_agents.tasks.code_examples import docstring_examples
from lightning_agents.tasks.tools import parse_arguments
from lightning_agents.topology.signatures import canonical_arguments, hash_observation, is_error_text

HUGE = "1" * 5000  # past Python's 4300-digit limit for int <-> str
DEEP = "[" * 3000  # past the recursion limit of json.loads


def test_tool_calls_with_huge_numbers_or_deep_nesting_stay_in_the_content():
    for payload in ('{"name": "f", "arguments": {"x": ' + HUGE + "}}", DEEP):
        content, calls = parse_tool_calls(f"<tool_call>{payload}</tool_call>")
        assert calls == [] and content.startswith("<tool_call>")
    # ordinary calls are unchanged: two calls, whitespace around the JSON, an unterminated last one
    _, calls = parse_tool_calls(
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>{"name": "g", "arguments": {}}'
    )
    assert [c["function"]["name"] for c in calls] == ["f", "g"]


def test_tool_arguments_and_observations_that_cannot_be_parsed_are_errors_not_crashes():
    for raw in ('{"x": ' + HUGE + "}", DEEP):
        args, error = parse_arguments(raw)
        assert args is None and error.startswith("error: arguments are not valid JSON")
        assert isinstance(canonical_arguments(raw), str) and isinstance(hash_observation(raw), str)
    assert is_error_text('{"error": ' + DEEP) is False


def test_answers_of_thousands_of_digits_are_read_not_raised():
    assert extract_stated_answer("The answer is " + HUGE + ".") == HUGE
    assert last_number("2" * 5000) == "2" * 5000


def test_the_calculator_answers_stacked_operators_with_an_error():
    assert calculator("-" * 6000 + "1").startswith("error:")
    assert calculator("37 + 48") == "85"


def test_true_and_false_become_python_names_but_not_inside_strings():
    doc = "def f(s):\n    \"\"\"\n    >>> f('true')\n    'false'\n    >>> f('x')\n    true\n    \"\"\"\n"
    assert docstring_examples(doc, "f") == [("f('true')", "'false'"), ("f('x')", "True")]


def test_parsers_are_linear_on_long_blank_and_digit_runs():
    """Each of these backtracked quadratically: 39 s for 500 blanks after "answer is" in the GSM8K
    reward, 70 s for a tool call padded with 100,000 blanks. In a subprocess, so a regression fails
    here instead of stalling the suite."""
    code = textwrap.dedent(
        """
        from lightning_agents.rollout.tool_calls import parse_tool_calls
        from lightning_agents.tasks.answers import extract_gsm8k_answer, extract_stated_answer
        from lightning_agents.tasks.math import BoxedMathVerifier, normalize_latex
        from lightning_agents.topology.signatures import is_error_text
        n = 100_000
        for text in ("answer is " + " " * n + "x", "#### " + " " * n + "x", "answer is " + "$ " * n + "x",
                     "\\\\boxed{" + "\\\\( " * n, "x" + " " * n + "x"):
            extract_gsm8k_answer(text, fallback_last_number=True)
            extract_stated_answer(text)
        is_error_text(" " * n + "x")
        parse_tool_calls('<tool_call>{"name": "f",' + ' ' * n + '"arguments": {}}</tool_call>')
        parse_tool_calls('<tool_call>a' + ' ' * n + 'b')
        normalize_latex('\\\\text{' + ' ' * n + '{')
        BoxedMathVerifier(False)('\\\\boxed{' + '3' * n + 'x}', '5')
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_tool_call_blocks_are_read_as_written():
    # an unterminated call does not swallow the complete one after it
    content, calls = parse_tool_calls(
        '<tool_call>{"name": "f", "arg<tool_call>{"name": "g", "arguments": {"a": 1}}</tool_call>'
    )
    assert [c["function"]["name"] for c in calls] == ["g"] and content.startswith('<tool_call>{"name": "f"')
    # Llama 3.1 calls them "parameters"; they are the arguments, not nothing
    _, calls = parse_tool_calls('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>')
    assert calls[0]["function"]["arguments"] == '{"a": 1}'
    # NaN is not JSON: the block is not a call
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": {"a": NaN}}</tool_call>')[1] == []


def test_a_boxed_answer_without_braces_is_the_token_after_it():
    from lightning_agents.tasks.answers import last_boxed

    assert last_boxed("So it is \\boxed 5. The set {1, 2} has 2 elements.") == "5"
    assert last_boxed("\\boxed {18}") == "18" and last_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"


def test_a_comma_after_an_example_result_ends_it_rather_than_making_a_tuple():
    doc = 'def f(x):\n    """For example: f(1) == 2, f(2) == 3\n    """\n'
    assert docstring_examples(doc, "f") == [("f(1)", "2")]
    # a tuple written without parentheses as the whole result stays a tuple
    assert docstring_examples('def f(x):\n    """\n    >>> f(1)\n    1, 2\n    """\n', "f") == [("f(1)", "(1, 2)")]


def test_absurdly_deep_example_and_ground_truth_calls_are_refused_not_raised():
    from lightning_agents.tasks.tau_actions import ActionReferenceError, parse_call_string

    deep = 'def f(x):\n    """\n    >>> f(' + "1+" * 5000 + '1)\n    2\n    """\n'
    assert docstring_examples(deep, "f") == []
    try:
        parse_call_string("f(x=" + "-" * 10000 + "1)")
    except ActionReferenceError as exc:
        assert "does not parse" in str(exc)
    else:
        raise AssertionError("a call nested past the parser's limits was accepted")
