"""The sandbox's test runner (``_jail/la_runner.py``): what session 46 left (its reports' "Left /
risky"), each a way to fail a right program or, for ``xfail``, to pass a wrong one.

1. A string ``skipif`` condition (``"sys.platform == 'win32'"``) was not evaluated: the test ran
   (a test pytest skips failed a right program). It is evaluated as pytest does, with ``os``,
   ``sys``, ``platform`` and those globals of the tests' the candidate cannot have reached (bound by
   an import or to a literal only); anything else fails closed (the test runs).
2. ``xfail`` tests were not run, so a file of only those was a verifier error. They run as in
   pytest (a failure is expected, ``raises=`` narrows it, a strict mark fails on a pass,
   ``run=False`` is not run, ``pytest.param(..., marks=...)`` too), and the candidate's calls in an
   xfail, ``expectedFailure`` or skipped test are no evidence: tests with no other call of it are a
   0 (``NoEvidence``), for a wrong program, which fails such a test as pytest expects, too.
3. ``pytest.main([...])``'s selection was ignored: every ``test*`` ran. ``-k`` (and/or/not,
   substring), ``-m`` and node ids ``file::name`` are read; a ``-k`` word may match the file's own
   name (unknown here), so only a test the expression leaves out whatever that name is (``not
   slow``) is left out; anything not read selects everything.
4. The record of a ``test*`` the tests ran themselves missed a test wrapped by a decorator without
   ``functools.wraps`` and one defined in a module-level ``if``: it ran twice.
"""

from __future__ import annotations

import pytest

from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
# WRONG passes a check of add(0, 0) only: where that is the tests' only other evidence, what the
# xfail tests make of it decides the verdict
ZERO = WRONG
HEADER = "import sys\nimport pytest\n\n\ndef test_add():\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n\n\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


def _passes(program, tests):
    return _verdict(program, tests).passed


# 1. string skipif conditions -------------------------------------------------------------------

STRING_SKIPS = {
    "sys": "@pytest.mark.skipif(\"sys.version_info >= (3,)\", reason='py2 only')\n",
    "os and platform": "@pytest.mark.skipif(\"os.sep and platform.system() != 'no such system'\", reason='x')\n",
    "condition=": "@pytest.mark.skipif(condition=\"sys.platform != 'no-such-platform'\", reason='x')\n",
    "an import of the tests'": "@pytest.mark.skipif(\"json.dumps(1) == '1'\", reason='x')\n",
    "a literal of the tests'": "@pytest.mark.skipif('not HAS_FEATURE', reason='x')\n",
    "a literal set beside an import": "@pytest.mark.skipif('not HAS_NOPE', reason='x')\n",
    "a class's mark": "@pytest.mark.skipif(\"sys.maxsize > 0\", reason='x')\nclass TestBroken:\n    ",
}


@pytest.mark.parametrize("shape", sorted(STRING_SKIPS))
def test_a_string_skipif_that_holds_skips_the_test(shape):
    # pytest skips test_broken (or the class) and passes RIGHT; the harness ran it and failed RIGHT
    mark = STRING_SKIPS[shape]
    broken = (
        "def test_broken(self):\n        assert add(1, 2) == 99\n"
        if "class" in mark
        else ("def test_broken():\n    assert add(1, 2) == 99\n")
    )
    tests = (
        HEADER + "import json\n\nHAS_FEATURE = False\ntry:\n    import no_such_module_here\n    HAS_NOPE = True\n"
        "except ImportError:\n    HAS_NOPE = False\n\n\n" + mark + broken
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_a_string_skipif_that_does_not_hold_or_cannot_be_told_runs_the_test():
    # `config` is pytest's, RESULT holds what the candidate returned, `broken(` does not compile:
    # each fails closed (the test runs); pytest would skip the RESULT one for WRONG, a pass
    tests = (
        "import sys\nimport pytest\n\nRESULT = add(1, 2)\n\n\n"
        "@pytest.mark.skipif(\"sys.platform == 'no-such-platform'\", reason='x')\ndef test_a():\n    assert add(2, 2) == 4\n\n\n"
        "@pytest.mark.skipif('RESULT != 3', reason='the candidate may not say')\ndef test_b():\n    assert add(2, 3) == 5\n\n\n"
        "@pytest.mark.skipif('config.getoption(\"x\")', reason='x')\ndef test_c():\n    assert add(3, 3) == 6\n\n\n"
        "@pytest.mark.skipif('broken(', reason='x')\ndef test_d():\n    assert add(4, 4) == 8\n\n\n"
        "@pytest.mark.skipif(\"sys.version_info >= (3,)\", reason='x')\ndef test_broken():\n    assert add(1, 2) == 99\n"
    )
    assert _passes(RIGHT, tests)  # test_broken skipped (the harness failed RIGHT here before)
    for program in (
        "def add(a, b):\n    return 0 if a == 2 else a + b\n",  # only test_a catches it
        "def add(a, b):\n    return 0 if (a, b) == (2, 3) else a + b\n",  # only test_b catches it
        "def add(a, b):\n    return 0 if a == 3 else a + b\n",  # only test_c catches it
        "def add(a, b):\n    return 0 if a == 4 else a + b\n",  # only test_d catches it
    ):
        assert not _passes(program, tests), program


def test_a_string_condition_cannot_see_a_global_computed_from_the_candidate():
    # pytest skips test_b for any program whose add(1, 2) is not 3, and so passes this WRONG; the
    # harness's condition sees no RESULT (fails closed), so test_b runs
    tests = (
        "import pytest\n\nRESULT = add(1, 2)\n\n\n"
        "@pytest.mark.skipif(\"sys.version_info >= (3,)\", reason='x')\ndef test_broken():\n    assert add(1, 2) == 99\n\n\n"
        "@pytest.mark.skipif('RESULT != 3', reason='x')\ndef test_b():\n    assert add(2, 2) == 4\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes("def add(a, b):\n    return 7\n", tests)


# 2. xfail ---------------------------------------------------------------------------------------


def test_xfail_tests_run_as_pytest_runs_them():
    # test_known fails for every program (an xfail pytest expects); test_raises expects a
    # TypeError only, so ZERO's AssertionError there is a failure; run=False is never run;
    # test_xpass passes for RIGHT (XPASS, no failure when not strict)
    tests = (
        "import pytest\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert add(1, 2) == 99\n\n\n"
        "@pytest.mark.xfail(raises=TypeError, reason='x')\ndef test_raises():\n    assert add(2, 2) == 4\n"
        "    raise TypeError('expected')\n\n\n"
        "@pytest.mark.xfail(run=False, reason='hangs')\ndef test_not_run():\n    raise SystemExit(3)\n\n\n"
        "@pytest.mark.xfail(reason='x')\ndef test_xpass():\n    assert add(3, 3) == 6\n"
    )
    assert _passes(RIGHT, tests)
    verdict = _verdict(ZERO, tests)
    assert not verdict.passed and "AssertionError" in verdict.detail, verdict


def test_a_strict_xfail_that_passes_fails_the_tests():
    tests = HEADER + "@pytest.mark.xfail(strict=True, reason='x')\ndef test_xpass():\n    assert add(3, 3) == 6\n"
    verdict = _verdict(RIGHT, tests)
    assert not verdict.passed and "XPassStrict" in verdict.detail, verdict
    assert _passes(RIGHT, tests.replace("strict=True", "strict=False"))


def test_xfail_conditions_and_param_marks():
    # a false condition is no xfail; a pytest.param's own xfail/skip marks hold for that row only
    tests = (
        HEADER + "@pytest.mark.xfail(\"sys.platform == 'no-such-platform'\", reason='x')\n"
        "def test_not_xfail():\n    assert add(5, 5) == 10\n\n\n"
        "@pytest.mark.parametrize('a, b, total', [(1, 1, 2), pytest.param(1, 2, 99, marks=pytest.mark.xfail),"
        " pytest.param(1, 2, 98, marks=pytest.mark.skip)])\n"
        "def test_rows(a, b, total):\n    assert add(a, b) == total\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes("def add(a, b):\n    return 0 if a == 5 else a + b\n", tests)


ONLY_UNPROVEN = {
    "xfail tests only": (
        "import pytest\n\n\n@pytest.mark.xfail(reason='x')\ndef test_a():\n    assert add(1, 2) == 3\n\n\n"
        "@pytest.mark.xfail(reason='x')\ndef test_b():\n    assert add(2, 2) == 4\n"
    ),
    "a class's xfail mark": (
        "import pytest\n\n\n@pytest.mark.xfail(reason='x')\nclass TestAdd:\n    def test_a(self):\n"
        "        assert add(1, 2) == 3\n"
    ),
    "a skip after the call": (
        "import pytest\n\n\ndef test_a():\n    if add(1, 2) != 3:\n        pytest.skip('not implemented yet')\n"
    ),
    "unittest's expectedFailure": (
        "import unittest\n\n\nclass T(unittest.TestCase):\n    @unittest.expectedFailure\n    def test_a(self):\n"
        "        self.assertEqual(add(1, 2), 4)\n"
    ),
    "unittest's skipTest after the call": (
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        if add(1, 2) != 3:\n"
        "            self.skipTest('not implemented yet')\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(ONLY_UNPROVEN))
def test_calls_in_xfail_or_skipped_tests_alone_never_pass_a_wrong_program(shape):
    # pytest (or unittest) passes WRONG here: it fails the xfail test as expected, or makes the
    # test skip; before, WRONG passed ("2 calls") or the tests were a verifier error (not run)
    tests = ONLY_UNPROVEN[shape]
    verdict = _verdict(WRONG, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "NoEvidence" in verdict.detail, verdict
    if "skip" in shape:
        assert _passes(RIGHT, tests)  # it does not skip: its calls are the evidence


def test_the_candidates_exit_in_an_xfail_test_still_fails_the_tests():
    # an xfail test expects a failure (an Exception), not the candidate's SystemExit; before, the
    # xfail test was not run and the tests were a verifier error
    tests = "import pytest\n\n\n@pytest.mark.xfail(reason='x')\ndef test_a():\n    assert add(1, 2) == 3\n"
    verdict = _verdict("def add(a, b):\n    raise SystemExit(0)\n", tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "SystemExit" in verdict.detail, verdict


# 3. pytest.main's selection ---------------------------------------------------------------------

WIP = (
    "@pytest.mark.slow\ndef test_wip_slow():\n    assert add(1, 2) == 99\n\n\n"
    "class TestWip:\n    def test_not_yet(self):\n        assert add(1, 2) == 98\n\n\n"
)
SELECTIONS = {
    "-k 'not wip'": "[__file__, '-k', 'not wip']",
    "-k'not wip' with flags": "['-q', '-p', 'no:cacheprovider', \"-knot wip\", __file__]",
    "-k 'add and not (slow or Wip)'": "['-k', 'add and not (slow or Wip)', __file__]",
    "a node id": "[__file__ + '::test_add']",
    "two node ids": "[f'{__file__}::test_add', f'{__file__}::test_add_more']",
    "-m 'not slow' and a -k": "['-m', 'not slow', '-k', 'not Wip', __file__]",
}


@pytest.mark.parametrize("shape", sorted(SELECTIONS))
def test_pytest_main_runs_what_its_arguments_select(shape):
    # `python tests.py` runs test_add (and test_add_more), so RIGHT passes and WRONG fails; the
    # harness ran every test* and failed RIGHT
    tests = HEADER + "def test_add_more():\n    assert add(3, 3) == 6\n\n\n" + WIP
    tests += f"if __name__ == '__main__':\n    sys.exit(pytest.main({SELECTIONS[shape]}))\n"
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


FAILS_CLOSED = {
    "a -k word the file's name may hold": "[__file__, '-k', 'add']",
    "an option not read here": "[__file__, '--deselect', 'x::test_wip_slow']",
    "a node id that names nothing": "[__file__ + '::test_nothing_by_this_name']",
    "-m with mark arguments": "['-m', 'slow(level=1)', __file__]",
    "a bad expression": "['-k', 'not (wip', __file__]",
}


@pytest.mark.parametrize("shape", sorted(FAILS_CLOSED))
def test_a_selection_not_read_runs_every_test(shape):
    # what is not understood never leaves a test out: test_only_here is WRONG2's only failure
    tests = (
        HEADER + "def test_only_here():\n    assert add(5, 0) == 5\n\n\n"
        "@pytest.mark.skipif(\"sys.version_info >= (3,)\", reason='x')\ndef test_broken():\n    assert add(1, 2) == 99\n\n\n"
        f"if __name__ == '__main__':\n    pytest.main({FAILS_CLOSED[shape]})\n"
    )
    assert _passes(RIGHT, tests)  # test_broken is skipped by its string condition (ran before)
    assert not _passes("def add(a, b):\n    return 0 if a == 5 else a + b\n", tests)


def test_pytest_main_selects_among_unittest_cases_too():
    tests = (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n    def test_add(self):\n"
        "        self.assertEqual(add(1, 2), 3)\n\n    def test_wip(self):\n        self.fail('not yet')\n\n\n"
        "if __name__ == '__main__':\n    pytest.main([__file__, '-k', 'not wip'])\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


# 4. the record of tests the tests ran themselves ------------------------------------------------


RAN_BY_THE_TESTS = {
    "a decorator without functools.wraps": (
        "def plain(f):\n    def wrapper():\n        return f()\n    return wrapper\n\n\n@plain\n"
        "def test_once():\n    ran.append(1)\n    assert len(ran) == 1, 'ran twice'\n    assert add(1, 2) == 3\n"
    ),
    "a def in a module-level if": (
        "if True:\n    def test_once():\n        ran.append(1)\n        assert len(ran) == 1, 'ran twice'\n"
        "        assert add(1, 2) == 3\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(RAN_BY_THE_TESTS))
def test_a_test_the_tests_ran_themselves_is_not_run_again(shape):
    tests = (
        "ran = []\n\n\n"
        + RAN_BY_THE_TESTS[shape]
        + "\n\nfor _name, _f in list(globals().items()):\n    if _name.startswith('test_'):\n        _f()\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_a_decorator_holding_another_test_does_not_hide_this_one():
    # test_b's wrapper holds test_a (ran) and test_b (not run by the tests): test_b still runs
    tests = (
        "def after(other):\n    def decorate(f):\n        def wrapper():\n            assert other is not None\n"
        "            return f()\n        return wrapper\n    return decorate\n\n\n"
        "def test_a():\n    assert add(1, 2) == 3\n\n\n@after(test_a)\ndef test_b():\n    assert add(5, 5) == 10\n\n\n"
        "test_a()\n\n\n"
        "@pytest.mark.skipif(\"sys.version_info >= (3,)\", reason='x')\ndef test_broken():\n    assert add(1, 2) == 99\n"
    )
    tests = "import pytest\n\n\n" + tests
    assert _passes(RIGHT, tests)  # test_broken skipped (it ran before)
    assert not _passes("def add(a, b):\n    return 0 if a == 5 else a + b\n", tests)
