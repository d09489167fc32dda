"""HumanEval+ and MBPP+ rows in evalplus's original format through HumanEvalTask and the sandbox.

Before: 1 of 164 HumanEval+ and 0 of 394 MBPP+ canonical solutions scored 1 (their tests import
numpy, which the harness could not; MBPP+ tests define no ``check``), silently, as wrong answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks.code import HumanEvalTask

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
DATA = Path(__file__).resolve().parents[1] / "data" / "code"


@pytest.mark.parametrize("name", ["humanevalplus_original_format.jsonl", "mbppplus_original_format.jsonl"])
def test_canonical_solutions_pass_and_empty_bodies_fail(name):
    task = HumanEvalTask(str(DATA / name), timeout_s=20)
    verifier = CodeVerifier(timeout_s=20)
    reasons = {}
    for problem in task.problems:
        program = problem["prompt"] + problem["canonical_solution"]
        verdict = verifier.verdict(f"```python\n{program}\n```", problem["reference"])
        reasons[problem["task_id"]] = verdict.reason
        stub = f"```python\ndef {problem['entry_point']}(*args, **kwargs):\n    return None\n```"
        # Mbpp/737's test asserts nothing (its `assertion` computes a match and drops it), so any
        # program passes it, in plain Python as here
        assert task.verify(stub, problem) == float(problem["task_id"] == "Mbpp/737"), problem["task_id"]
    # Mbpp/737 returns an re.Match: it crosses as its subject and spans (la_wire.Match)
    assert reasons == {pid: "pass" for pid in reasons}


def test_an_empty_list_does_not_pass_a_float_answer_through_numpys_tolerance_check():
    # evalplus's `assertion` falls back to np.allclose(out, exp) when out == exp fails; an empty
    # array broadcasts against a number and compares nothing, so `return []` scored 1 on every
    # float problem of HumanEval+ (HumanEval/2 here) and MBPP+.
    task = HumanEvalTask(str(DATA / "humanevalplus_original_format.jsonl"), timeout_s=20)
    problem = next(p for p in task.problems if p["task_id"] == "HumanEval/2")
    verifier = CodeVerifier(timeout_s=20)
    for body in ("return []", "return [[]]", "return ()"):
        verdict = verifier.verdict(f"```python\ndef truncate_number(number):\n    {body}\n```", problem["reference"])
        assert (verdict.passed, verdict.reason) == (False, "wrong_answer"), (body, verdict)
    right = "```python\ndef truncate_number(number):\n    return number % 1.0 + 0.0\n```"
    assert verifier.verdict(right, problem["reference"]).passed


def test_entry_points_named_like_builtins_or_shadowed_in_a_helper_are_the_candidates():
    task = HumanEvalTask(str(DATA / "mbppplus_original_format.jsonl"), timeout_s=20)
    verifier = CodeVerifier(timeout_s=20)
    by_id = {p["task_id"]: p for p in task.problems}
    sum_problem = by_id["Mbpp/126"]
    assert sum_problem["reference"].startswith("# la-candidate-names: sum\n")
    # a wrong `sum` must fail: the tests call the candidate's, not Python's
    wrong = "```python\ndef sum(a, b):\n    return 0\n```"
    assert verifier.verdict(wrong, sum_problem["reference"]).reason == "wrong_answer"
    freq = by_id["Mbpp/88"]  # its reference function has a local variable named freq_count
    wrong = "```python\ndef freq_count(xs):\n    return {}\n```"
    assert verifier.verdict(wrong, freq["reference"]).reason == "wrong_answer"


def test_a_recurrence_in_the_docstring_is_not_an_example_when_the_doctest_says_otherwise():
    """MultiPL-E's HumanEval_130_tri (the prompt as MultiPL-E rewords it): ``tri(4) = 3`` is part
    of the recurrence, ``>>> tri(3)`` gives the list the function returns. Keeping the first made
    HFlow's test operator ask for a fix of the canonical solution."""
    from lightning_agents.tasks.code_examples import docstring_examples

    prompt = (
        "from typing import List\n\ndef tri(n: int) -> List[int]:\n"
        '    """Everyone knows Fibonacci sequence, it was studied deeply by mathematicians in \n'
        "    the last couple centuries. However, what people don't know is Tribonacci sequence.\n"
        "    Tribonacci sequence is defined by the recurrence:\n    tri(1) = 3\n"
        "    tri(n) = 1 + n / 2, if n is even.\n"
        "    tri(n) =  tri(n - 1) + tri(n - 2) + tri(n + 1), if n is odd.\n    For example:\n"
        "    tri(2) = 1 + (2 / 2) = 2\n    tri(4) = 3\n    tri(3) = tri(2) + tri(1) + tri(4)\n"
        "           = 2 + 3 + 3 = 8 \n"
        "    You are given a non-negative integer number n, you have to a return a list of the \n"
        "    first n + 1 numbers of the Tribonacci sequence.\n"
        '    Examples:\n    >>> tri(3)\n    [1, 3, 2, 8]\n    """\n'
    )
    assert docstring_examples(prompt, "tri") == [("tri(3)", "[1, 3, 2, 8]")]


def test_site_packages_lets_a_solution_import_numpy():
    """48 of MBPP+'s 394 reference solutions import numpy: with the standard library only they
    score 0; ``site_packages=True`` binds the trainer's packages read-only into the sandbox."""
    program = "```python\nimport numpy as np\n\ndef total(xs):\n    return int(np.sum(xs))\n```"
    tests = "assert total([1, 2, 3]) == 6\n"
    assert CodeVerifier().verdict(program, tests).reason == "load_error"  # ModuleNotFoundError
    assert CodeVerifier(site_packages=True).verdict(program, tests).passed


def test_site_packages_under_tmp_stay_visible(tmp_path, monkeypatch):
    """A venv under /tmp (a CI checkout) was hidden by the sandbox's own /tmp mounted after it."""
    import lightning_agents.rewards.sandbox as sandbox

    packages = tmp_path / "site-packages"
    packages.mkdir()
    (packages / "la_probe_module.py").write_text("VALUE = 42\n")
    monkeypatch.setattr(sandbox, "trainer_site_packages", lambda: [str(packages)])
    result = sandbox.run_python("import la_probe_module\nprint(la_probe_module.VALUE)", site_packages=True)
    assert result.stdout.strip() == "42", result.stderr
