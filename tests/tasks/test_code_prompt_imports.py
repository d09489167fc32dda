"""A stub prompt that ends at its ``def`` line keeps its imports in the trusted reference.

BigCodeBench's ``code_prompt`` (every one of its 1,140) ends at ``def task_func(...):`` and does not
parse on its own, so ``humaneval_reference`` kept none of the prompt's imports; BigCodeBench/775's
tests use the prompt's ``ascii_lowercase``, and its canonical solution scored 0 (``'Remote' object is
not iterable``). BigCodeBench/775: bigcode-project/bigcodebench-annotation
``hf_data/BigCodeBench.jsonl.gz`` @ d8a1b7b418b5c73b32e6d9731e062f549818c8d9 (Apache-2.0),
``code_prompt``, ``canonical_solution`` and ``test`` verbatim; the unittest runner is ours.
"""

from __future__ import annotations

import pytest

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks.code import humaneval_reference

PROMPT = "from string import ascii_lowercase\nimport re\nfrom collections import Counter\n# Constants\nLETTERS_PATTERN = re.compile(r'^(.*?)-[a-z]$')\nLETTERS = ascii_lowercase\ndef task_func(string):\n"
SOLUTION = "    # Match and extract the portion before the last hyphen\n    match = re.search(r'^(.*)-', string)\n    if match:\n        prefix = match.group(1)\n    else:\n        # If there's no hyphen, the whole string is considered if it is letters only\n        prefix = string if string.isalpha() else \"\"\n\n    # Count each letter in the prefix\n    letter_counts = Counter(prefix)\n    # Initialize a dictionary with all letters set to zero count\n    result = {letter: 0 for letter in ascii_lowercase}\n    # Update this dictionary with the actual counts from the prefix\n    result.update({letter: letter_counts.get(letter, 0) for letter in letter_counts if letter in result})\n\n    return result"
TEST = "import unittest\nclass TestCases(unittest.TestCase):\n    def test_case_1(self):\n        result = task_func('abc-def-ghij')\n        expected = {letter: 1 if letter in 'abcdef' else 0 for letter in ascii_lowercase}\n        self.assertEqual(result, expected)\n    def test_case_2(self):\n        result = task_func('abcdefghij')\n        expected = {letter: 1 if letter in 'abcdefghij' else 0 for letter in ascii_lowercase}\n        self.assertEqual(result, expected)\n    def test_case_3(self):\n        result = task_func('aabbcc-def')\n        expected = {letter: 2 if letter in 'aabbcc' else 0 for letter in ascii_lowercase}\n        self.assertEqual(result, expected)\n    def test_case_4(self):\n        result = task_func('')\n        expected = {letter: 0 for letter in ascii_lowercase}\n        self.assertEqual(result, expected)\n    def test_case_5(self):\n        result = task_func('xyz-abc')\n        expected = {letter: 1 if letter in 'xyz' else 0 for letter in ascii_lowercase}\n        self.assertEqual(result, expected)"
RUNNER = """
import unittest as _unittest
_result = _unittest.TextTestRunner(verbosity=0).run(_unittest.defaultTestLoader.loadTestsFromTestCase(TestCases))
assert _result.wasSuccessful(), [str(err) for _, err in _result.failures + _result.errors]
"""


def test_the_imports_of_a_prompt_without_a_body_reach_the_reference():
    reference = humaneval_reference(TEST + RUNNER, "task_func", PROMPT)
    assert "from string import ascii_lowercase" in reference
    assert "from collections import Counter" in reference


@pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
def test_bigcodebench_775_canonical_solution_passes_and_a_wrong_one_fails():
    verifier = CodeVerifier(timeout_s=10)
    reference = humaneval_reference(TEST + RUNNER, "task_func", PROMPT)
    assert verifier.verdict(f"```python\n{PROMPT}{SOLUTION}\n```", reference).passed
    wrong = SOLUTION.replace("letter_counts.get(letter, 0)", "letter_counts.get(letter, 0) + 1")
    assert not verifier.verdict(f"```python\n{PROMPT}{wrong}\n```", reference).passed
