"""Review of the sandbox's test runner (``_jail/la_runner.py``) at 4764795: what its ``NoEvidence``
rule, its ``parametrize`` reading and its ``pytest.main`` options still got wrong.

1. A skip or an xfail decided on a value the candidate returned outside the test (at module level,
   in a ``setUpClass``) skipped the only test of a wrong program, and the call that decided it
   counted as evidence: ``SUPPORTED = add(0, 0) is not None`` with ``skipif(not SUPPORTED)``
   passed a program returning ``None``. Such calls are no evidence once a test was skipped or taken
   as xfail on a computed condition, a skip raised in a test, or a unittest skip.
2. ``parametrize(("a",), [(1,), (2,)])``: pytest takes each row as a tuple of values where the
   names are not one ``str``; the harness passed ``a=(1,)`` and failed a right program.
3. ``pytest.main([..., "-k=not wip"])``: argparse reads ``-k=expr`` as ``-k expr``; the harness took
   ``=not wip`` for a bad expression and ran every test. ``-o xfail_strict=on`` is true for pytest.
4. A ``skipif`` condition that is numpy's bool (``np.int64(1) > 0``) did not hold: the test ran.
"""

from __future__ import annotations

import pytest

from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
NONE = "def add(a, b):\n    return None\n"
ABS = "def add(a, b):\n    return abs(a) + abs(b)\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


# 1. skips and xfails decided outside the test ---------------------------------------------------

DECIDED_OUTSIDE = {
    "a computed skipif": (
        "import pytest\n\nSUPPORTED = add(0, 0) is not None\n\n\n"
        "@pytest.mark.skipif(not SUPPORTED, reason='not implemented')\n"
        "def test_add():\n    assert add(1, 2) == 3\n"
    ),
    "a module's pytestmark": (
        "import pytest\n\npytestmark = pytest.mark.skipif(add(0, 0) is None, reason='not implemented')\n\n\n"
        "def test_add():\n    assert add(1, 2) == 3\n"
    ),
    "a computed xfail": (
        "import pytest\n\nIMPLEMENTED = add(0, 0) is not None\n\n\n"
        "@pytest.mark.xfail(not IMPLEMENTED, reason='not implemented')\n"
        "def test_add():\n    assert add(1, 2) == 3\n"
    ),
    "pytest.skip on a module's value": (
        "import pytest\n\nRESULT = add(0, 0)\n\n\n"
        "def test_add():\n    if RESULT is None:\n        pytest.skip('not implemented')\n    assert add(1, 2) == 3\n"
    ),
    "unittest.skipIf on a TestCase no runner line runs": (
        "import unittest\n\nBROKEN = add(0, 0) is None\n\n\n"
        "class TestAdd(unittest.TestCase):\n"
        "    @unittest.skipIf(BROKEN, 'not implemented')\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
    "unittest.skipUnless under unittest.main": (
        "import unittest\n\nHAS_ADD = add(0, 0) is not None\n\n\n"
        "class TestAdd(unittest.TestCase):\n"
        "    @unittest.skipUnless(HAS_ADD, 'not implemented')\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n\n"
        "if __name__ == '__main__':\n    unittest.main()\n"
    ),
    "a setUpClass's SkipTest": (
        "import unittest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    @classmethod\n    def setUpClass(cls):\n"
        "        if add(0, 0) is None:\n            raise unittest.SkipTest('not implemented')\n\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(DECIDED_OUTSIDE))
def test_a_skip_decided_on_a_reply_outside_the_test_is_no_evidence(shape):
    # pytest skips (or xfails) the one test for NONE: "1 skipped", and the harness passed it with
    # the deciding call as its evidence
    tests = DECIDED_OUTSIDE[shape]
    assert _verdict(RIGHT, tests).passed
    verdict = _verdict(NONE, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "NoEvidence" in verdict.detail, verdict


def test_calls_outside_tests_stay_evidence_where_no_skip_could_be_steered():
    # an unconditional skip and a string condition (on names the candidate cannot reach) decide
    # nothing on a reply: the module's own check is still the evidence, for RIGHT
    tests = (
        "import sys\nimport pytest\n\nassert add(1, 2) == 3\n\n\n"
        "@pytest.mark.skip(reason='slow')\ndef test_slow():\n    assert add(1, 2) == 99\n\n\n"
        "@pytest.mark.skipif(\"sys.maxsize > 0\", reason='x')\ndef test_other():\n    assert add(1, 2) == 99\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(NONE, tests).passed


UNSTEERED = {
    "made before the first reply": (
        "import sys\nimport pytest\n\nPY2_ONLY = pytest.mark.skipif(sys.version_info >= (3,), reason='py2 only')\n"
        "RESULT = add(-1, -2)\n\n\ndef test_result():\n    assert RESULT == -3\n\n\n"
        "@PY2_ONLY\ndef test_py2():\n    assert False\n"
    ),
    "reading only imports": (
        "import sys\nimport pytest\n\nRESULT = add(-1, -2)\n\n\ndef test_result():\n    assert RESULT == -3\n\n\n"
        "@pytest.mark.skipif(sys.version_info >= (3,), reason='py2 only')\ndef test_py2():\n    assert False\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(UNSTEERED))
def test_a_computed_skip_no_reply_can_decide_leaves_the_module_s_calls_as_evidence(shape):
    # the condition was computed before the candidate's first reply, or reads only the tests'
    # imports: it decides nothing on a reply, and the module's answer, checked in a test, is evidence
    tests = UNSTEERED[shape]
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(ABS, tests).passed


def test_a_unittest_skip_decided_before_any_reply_leaves_a_class_fixture_s_calls_as_evidence():
    # BigCodeBench's shape: the answer computed once in setUpClass, checked in the tests; a skip
    # decorator decided before the candidate replied (unconditional, or on os.name) steers nothing
    tests = (
        "import os\nimport unittest\n\n\nclass TestCases(unittest.TestCase):\n"
        "    @classmethod\n    def setUpClass(cls):\n        cls.result = add(-1, -2)\n\n"
        "    def test_sum(self):\n        self.assertEqual(self.result, -3)\n\n"
        "    @unittest.skip('todo')\n    def test_todo(self):\n        self.fail('todo')\n\n"
        "    @unittest.skipIf(os.name == 'posix', 'not on posix')\n    def test_windows(self):\n        self.fail('no')\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(ABS, tests).passed


# 2. parametrize with the names as a tuple or a list ---------------------------------------------


@pytest.mark.parametrize("names", ['("a",)', '["a"]', '("a", "b")'])
def test_parametrize_names_not_a_str_take_each_row_as_its_values(names):
    rows = "[(1, 2), (-2, -3)]" if "b" in names else "[(1,), (-2,)]"
    tests = f"import pytest\n\n\n@pytest.mark.parametrize({names}, {rows})\n" + (
        "def test_add(a, b):\n    assert add(a, b) == a + b\n"
        if "b" in names
        else "def test_inc(a):\n    assert add(a, 1) == a + 1\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(ABS, tests).passed


# 3. -k=expr ---------------------------------------------------------------------------------------


def test_a_short_option_with_an_equals_sign_selects_as_argparse_reads_it():
    tests = (
        "import sys\nimport pytest\n\n\ndef test_add():\n    assert add(-1, -2) == -3\n\n\n"
        "def test_wip():\n    assert add(1, 1) == 3\n\n\n"
        "if __name__ == '__main__':\n    sys.exit(pytest.main([__file__, '-k=not wip']))\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(ABS, tests).passed


def test_an_ini_bool_is_read_as_pytest_reads_it():
    # -o xfail_strict=on is strict for pytest: a program that passes the xfail test fails
    tests = (
        "import sys\nimport pytest\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
        "@pytest.mark.xfail(reason='negatives are refused')\ndef test_refuses_negatives():\n    assert add(-1, -2) == -3\n\n\n"
        "if __name__ == '__main__':\n    sys.exit(pytest.main([__file__, '-o', 'xfail_strict=on']))\n"
    )
    verdict = _verdict(RIGHT, tests)
    assert not verdict.passed and "XPassStrict" in verdict.detail, verdict
    assert _verdict(ABS, tests).passed


# 4. numpy's bool as a condition -------------------------------------------------------------------


def test_a_numpy_bool_condition_is_taken_as_pytest_takes_it():
    pytest.importorskip("numpy")
    tests = (
        "import numpy as np\nimport pytest\n\n\n"
        "@pytest.mark.skipif(np.int64(1) > 0, reason='always')\ndef test_never():\n    assert add(1, 2) == 99\n\n\n"
        "def test_add():\n    assert add(-1, -2) == -3\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(ABS, tests).passed
