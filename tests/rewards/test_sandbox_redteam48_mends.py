"""Red team 48 of the sandbox's test runner and harness: wrong programs that passed tests which fail
them in one file (real pytest, or the script run as a file), and right programs that failed.

R1. A skip or xfail mark with no condition (``pytest.mark.skip``, a bare ``xfail``,
    ``unittest.skip``) put on the tests under an ``if`` that reads a reply (``if add(0, 0) is None:
    pytestmark = pytest.mark.skip``) skipped the only test, and the module's call counted as
    evidence: a program returning ``None`` passed. Such marks made outside a plain decorator now
    steer, as computed conditions did.
R2. A module-level ``test*`` function the tests only name (``test_big = pytest.mark.slow(test_big)``,
    ``test_big.timeout = 5``, a local of that name, a pytest-style class named as a base) was
    never run: the harness took any name for a helper the tests call themselves.
R3. ``unittest.mock`` patches, a redirected ``sys.stdout``, recorded warnings and ``assertNoLogs``
    live in the harness; the candidate's calls never reach them, so ``mock.assert_not_called()``,
    ``buf.getvalue() == ""``, ``caught == []`` and ``assertNoLogs`` passed a program that calls,
    prints, warns or logs what it must not. A pass with such a call is now no verdict.
R4. A test taking a fixture was left out silently: the tests' own ``@pytest.fixture`` values are now
    given, and a test wanting one the harness cannot give (``capsys``, ``tmp_path``) turns a pass
    into no verdict.
R6. The tests' module was not in ``sys.modules``: ``sys.modules[__name__]`` raised ``KeyError``
    (a right program's 0) and unittest never ran ``setUpModule``/``tearDownModule``.
R7. pytest's xunit-style ``setup_module``/``teardown_module``/``setup_function``/
    ``teardown_function`` never ran: a right program failed on the data they make, and
    ``teardown_module``'s checks passed a wrong one.
R8. A pytest-style ``Test*`` class nested in another was never run.
R9. A ``test*`` function the tests called by hand with arguments of their own (one ``parametrize``
    row under ``__main__``, a value over its default) was taken as run: pytest's own calls of it
    never ran.
R10. A call's arguments were encoded before it waited for the channel's lock: a second thread's
    call sharing a list took its copy before the first call's changes came back, and its own
    write-back dropped them (two threads appending kept one item).
"""

from __future__ import annotations

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
NONE = "def add(a, b):\n    return None\n"
# right on small numbers, wrong on big ones: what the tests below check apart
SMALL_ONLY = "def add(a, b):\n    return a + b if abs(a) < 1000 else 0\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


# R1 ----------------------------------------------------------------------------------------------

PLACED_ON_A_REPLY = {
    "pytestmark skip": (
        "import pytest\n\nRESULT = add(0, 0)\nif RESULT is None:\n"
        "    pytestmark = pytest.mark.skip(reason='not implemented')\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n"
    ),
    "a bare skip mark": (
        "import pytest\n\nif add(0, 0) is None:\n    pytestmark = pytest.mark.skip\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n"
    ),
    "an xfail put on the test": (
        "import pytest\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "if add(0, 0) is None:\n    test_add = pytest.mark.xfail(reason='todo')(test_add)\n"
    ),
    "unittest.skip on the class": (
        "import unittest\n\nHAS_ADD = add(0, 0) is not None\n\n\n"
        "class TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
        "if not HAS_ADD:\n    TestAdd = unittest.skip('add missing')(TestAdd)\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(PLACED_ON_A_REPLY))
def test_a_skip_mark_placed_on_a_reply_leaves_no_evidence(shape):
    tests = PLACED_ON_A_REPLY[shape]
    assert _verdict(RIGHT, tests).passed
    verdict = _verdict(NONE, tests)
    assert not verdict.passed and "NoEvidence" in verdict.detail, verdict


# R2 ----------------------------------------------------------------------------------------------

NAMED_TESTS = {
    "an old-style mark": (
        "import pytest\n\n\ndef test_small():\n    assert add(2, 3) == 5\n\n\n"
        "def test_big():\n    assert add(10**6, 1) == 10**6 + 1\n\n\ntest_big = pytest.mark.slow(test_big)\n"
    ),
    "an attribute set on it": (
        "def test_small():\n    assert add(2, 3) == 5\n\n\n"
        "def test_big():\n    assert add(10**6, 1) == 10**6 + 1\n\n\ntest_big.timeout = 5\n"
    ),
    "a local of its name": (
        "def test_small():\n    assert add(2, 3) == 5\n\n\n"
        "def test_big():\n    assert add(10**6, 1) == 10**6 + 1\n\n\n"
        "def test_report():\n    test_big = add(1, 1)\n    assert test_big == 2\n"
    ),
    "a base class": (
        "class TestAdd:\n    def test_big(self):\n        assert add(10**6, 1) == 10**6 + 1\n\n\n"
        "class TestAddSmall(TestAdd):\n    def test_big(self):\n        assert add(2, 3) == 5\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(NAMED_TESTS))
def test_a_test_the_tests_only_name_still_runs(shape):
    tests = NAMED_TESTS[shape]
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(SMALL_ONLY, tests).passed


def test_a_helper_test_the_tests_call_themselves_runs_once():
    # counted by the tests: a second run by the runner would fail them
    tests = (
        "RUNS = []\n\n\ndef test_add():\n    RUNS.append(1)\n    assert len(RUNS) == 1\n    assert add(2, 3) == 5\n\n\n"
        "test_add()\n"
    )
    assert _verdict(RIGHT, tests).passed


# R3 ----------------------------------------------------------------------------------------------

REMOVER = (
    "import os\n\n\ndef task_func(path):\n    try:\n        os.remove(path)\n    except OSError:\n        pass\n"
    "    if not path.endswith('.txt'):\n        raise ValueError('not a text file')\n    return True\n"
)
MOCKED = (
    "import unittest\nfrom unittest.mock import patch\n\n\nclass TestCases(unittest.TestCase):\n"
    "    @patch('os.remove')\n    def test_rejects(self, mock_remove):\n"
    "        with self.assertRaises(ValueError):\n            task_func('/tmp/data.csv')\n"
    "        mock_remove.assert_not_called()\n"
)
PRINTER = (
    "def greet(name):\n    print('debug')\n    if not name:\n        raise ValueError('empty')\n    return len(name)\n"
)
REDIRECTED = (
    "import io\nimport unittest\nfrom contextlib import redirect_stdout\n\n\n"
    "class TestGreet(unittest.TestCase):\n    def test_silent(self):\n        buf = io.StringIO()\n"
    "        with redirect_stdout(buf):\n            with self.assertRaises(ValueError):\n                greet('')\n"
    "        self.assertEqual(buf.getvalue(), '')\n"
)


WARNER = (
    "import logging\nimport warnings\n\n\ndef parse(s):\n    warnings.warn('slow', UserWarning)\n"
    "    logging.getLogger('parser').warning('parse called')\n    return int(s)\n"
)
RECORDED = (
    "import warnings\n\n\ndef test_quiet():\n    with warnings.catch_warnings(record=True) as caught:\n"
    "        warnings.simplefilter('always')\n        assert parse('12') == 12\n    assert caught == []\n"
)
NO_LOGS = (
    "import unittest\n\n\nclass TestParse(unittest.TestCase):\n    def test_quiet(self):\n"
    "        with self.assertNoLogs('parser', level='WARNING'):\n            self.assertEqual(parse('12'), 12)\n"
)


@pytest.mark.parametrize(
    ("program", "tests"),
    [(REMOVER, MOCKED), (PRINTER, REDIRECTED), (WARNER, RECORDED), (WARNER, NO_LOGS)],
    ids=["mock", "stdout", "warnings", "logs"],
)
def test_a_pass_resting_on_effects_the_harness_cannot_see_is_no_verdict(program, tests):
    with pytest.raises(VerifierError, match="not as in one file"):
        _verdict(program, tests)


# R4 ----------------------------------------------------------------------------------------------

WITH_FIXTURE = (
    "import pytest\n\n\n@pytest.fixture\ndef big():\n    yield 10**6\n\n\n"
    "def test_small():\n    assert add(2, 3) == 5\n\n\n"
    "def test_big(big):\n    assert add(big, 1) == big + 1\n"
)
WITH_BUILTIN_FIXTURE = (
    "def test_small():\n    assert add(2, 3) == 5\n\n\ndef test_big(tmp_path):\n    assert add(10**6, 1) == 10**6 + 1\n"
)


def test_a_test_taking_a_fixture_of_the_tests_runs():
    assert _verdict(RIGHT, WITH_FIXTURE).passed
    assert not _verdict(SMALL_ONLY, WITH_FIXTURE).passed


def test_a_test_taking_a_fixture_the_harness_cannot_give_makes_a_pass_no_verdict():
    with pytest.raises(VerifierError, match="fixture 'tmp_path'"):
        _verdict(SMALL_ONLY, WITH_BUILTIN_FIXTURE)


# R6 ----------------------------------------------------------------------------------------------


def test_the_tests_module_is_in_sys_modules():
    tests = (
        "import sys\nimport unittest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
        "suite = unittest.TestLoader().loadTestsFromModule(sys.modules[__name__])\n"
        "assert unittest.TextTestRunner().run(suite).wasSuccessful()\n"
    )
    assert _verdict(RIGHT, tests).passed


def test_tear_down_module_runs():
    tests = (
        "import unittest\n\n\ndef tearDownModule():\n    assert add(10**6, 1) == 10**6 + 1\n\n\n"
        "class TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(SMALL_ONLY, tests).passed


# R7 ----------------------------------------------------------------------------------------------

XUNIT = {
    "setup_module": (
        "DATA = []\n\n\ndef setup_module(module):\n    DATA.extend([(2, 3, 5), (10**6, 1, 10**6 + 1)])\n\n\n"
        "def test_all():\n    assert DATA\n    for a, b, s in DATA:\n        assert add(a, b) == s\n"
    ),
    "teardown_module": (
        "def teardown_module(module):\n    assert add(10**6, 1) == 10**6 + 1\n\n\n"
        "def test_small():\n    assert add(2, 3) == 5\n"
    ),
    "setup_function": (
        "STATE = {}\n\n\ndef setup_function(function):\n    STATE['pair'] = (10**6, 1)\n\n\n"
        "def test_big():\n    a, b = STATE['pair']\n    assert add(a, b) == a + b\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(XUNIT))
def test_pytest_s_xunit_module_and_function_fixtures_run(shape):
    tests = XUNIT[shape]
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(SMALL_ONLY, tests).passed


# R8 ----------------------------------------------------------------------------------------------


def test_a_test_class_nested_in_a_test_class_runs():
    tests = (
        "class TestAdd:\n    def test_small(self):\n        assert add(2, 3) == 5\n\n"
        "    class TestBig:\n        def test_big(self):\n            assert add(10**6, 1) == 10**6 + 1\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(SMALL_ONLY, tests).passed


# R2 and R8 meet the runner's collection error: pytest 9 stops at a yield test wherever it collects
# one, in a nested class or a test the tests only name too, and runs no test of the file
YIELD_TESTS_R2_R8_REACH = {
    "in a nested class": (
        "class TestAdd:\n    def test_small(self):\n        assert add(2, 3) == 5\n\n"
        "    class TestMore:\n        def test_gen(self):\n            yield\n"
    ),
    "a test the tests only name": (
        "def test_small():\n    assert add(2, 3) == 5\n\n\ndef test_gen():\n    yield\n\n\ntest_gen.timeout = 5\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(YIELD_TESTS_R2_R8_REACH))
def test_a_yield_test_the_mends_reach_stops_collection(shape):
    verdict = _verdict(RIGHT, YIELD_TESTS_R2_R8_REACH[shape])
    assert not verdict.passed
    assert "CollectionError" in verdict.detail


# R9 ----------------------------------------------------------------------------------------------

CALLED_BY_HAND = {
    "one parametrize row": (
        "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 10**6])\ndef test_add(n):\n"
        "    assert add(n, 1) == n + 1\n\n\nif __name__ == '__main__':\n    test_add(1)\n"
    ),
    "over a default": (
        "def test_add(n=10**6):\n    assert add(n, 1) == n + 1\n\n\nif __name__ == '__main__':\n    test_add(n=1)\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(CALLED_BY_HAND))
def test_a_test_the_tests_called_with_their_own_arguments_still_runs_as_pytest_would(shape):
    tests = CALLED_BY_HAND[shape]
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(SMALL_ONLY, tests).passed


def test_a_test_named_helper_the_tests_call_with_arguments_stays_a_helper():
    # pytest would stop at its missing fixtures; as a script it is a helper: not a verifier error
    tests = "def test_case(a, b, expected):\n    assert add(a, b) == expected\n\n\ntest_case(2, 3, 5)\n"
    assert _verdict(RIGHT, tests).passed


# R10 ---------------------------------------------------------------------------------------------


def test_two_threads_of_the_tests_changing_one_list_keep_both_changes():
    program = (
        "import time\n\n\ndef record(log, item):\n    time.sleep(0.2)\n    log.append(item)\n    return len(log)\n"
    )
    tests = (
        "import threading\n\nlog = []\n"
        "threads = [threading.Thread(target=record, args=(log, name)) for name in 'ab']\n"
        "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
        "assert sorted(log) == ['a', 'b'], log\n"
    )
    assert _verdict(program, tests).passed
