"""review_final 48's G8 and G9: wrong programs that passed tests real pytest / one file fails them on.

G8. pytest applies the module's ``autouse`` fixtures (function-scoped around each test, wider ones
    once) and ``setup_module``/``teardown_module`` to ``unittest.TestCase`` tests too; the harness
    applied them to pytest-style tests only, so a ``yield`` autouse fixture's teardown check never
    ran for a ``TestCase`` test (a wrong program passed) and data ``setup_module`` made was missing
    (a right program failed). Under ``unittest.main()`` (a script) none of them runs, as before.
G9. A ``logging.Handler`` the tests add themselves (their own class collecting records, a
    ``BufferingHandler``, ``basicConfig(stream=buf)``) never sees the sandboxed candidate's logs, so
    ``assertEqual(h.records, [])`` passed a program that logs. A pass after a call made while such
    a handler was in force is no verdict now (as R3's invisible effects); a fail stays a 0.

Each case is checked against real pytest (or Python, for a script) on program + tests in one file.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def my_sort(xs):\n    return sorted(xs)\n"
# right on lists of 3 or more, wrong on shorter ones: what the tests below check apart
SHORT_WRONG = "def my_sort(xs):\n    return list(xs) if len(xs) < 3 else sorted(xs)\n"

QUIET = "def parse(s):\n    return int(s)\n"
# right value, but logs what the tests say it must not
LOUD = "import logging\n\ndef parse(s):\n    logging.getLogger('parser').warning('parsing %s', s)\n    return int(s)\n"
WRONG_VALUE = "def parse(s):\n    return 0\n"


def _real_passes(program, tests, mode, folder):
    """Real pytest (``mode`` "pytest") or Python (``mode`` "script") passes program + tests, written
    to one file, ``test_case.py``."""
    path = folder / "test_case.py"
    path.write_text(program + "\n\n" + tests)
    runner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] if mode == "pytest" else [sys.executable]
    done = subprocess.run([*runner, str(path)], cwd=folder, capture_output=True, text=True, timeout=120, check=False)
    return done.returncode == 0


def _sandbox(program, tests):
    """``"pass"``, ``"wrong_answer"`` or ``"no verdict"`` (a ``VerifierError``) for program + tests."""
    try:
        verdict = judge(program, tests, timeout_s=20)
    except VerifierError:
        return "no verdict"
    return "pass" if verdict.passed else verdict.reason


TESTCASE_SORT = (
    "class TestSort(unittest.TestCase):\n"
    "    def test_long(self):\n        self.assertEqual(my_sort([3, 1, 2, 5]), [1, 2, 3, 5])\n"
    "    def test_short(self):\n        RESULTS.append(([2, 1], my_sort([2, 1])))\n"
)

# name: (tests, mode, {program: (real pytest / one file passes, the sandbox's outcome)})
CASES = {
    "G8: yield autouse fixture checks after each TestCase test": (
        "import unittest, pytest\nRESULTS = []\n\n@pytest.fixture(autouse=True)\ndef verify():\n    yield\n"
        "    for xs, got in RESULTS:\n        assert got == sorted(xs)\n\n" + TESTCASE_SORT,
        "pytest",
        {RIGHT: (True, "pass"), SHORT_WRONG: (False, "wrong_answer")},
    ),
    "G8: module-scoped yield autouse fixture checks once at the end": (
        "import unittest, pytest\nRESULTS = []\n\n@pytest.fixture(autouse=True, scope='module')\ndef verify():\n"
        "    yield\n    assert RESULTS and all(got == sorted(xs) for xs, got in RESULTS)\n\n" + TESTCASE_SORT,
        "pytest",
        {RIGHT: (True, "pass"), SHORT_WRONG: (False, "wrong_answer")},
    ),
    "G8: teardown_module checks the TestCase tests' results": (
        "import unittest\nRESULTS = []\n\ndef teardown_module(module):\n"
        "    assert RESULTS and all(got == sorted(xs) for xs, got in RESULTS)\n\n" + TESTCASE_SORT,
        "pytest",
        {RIGHT: (True, "pass"), SHORT_WRONG: (False, "wrong_answer")},
    ),
    "G8: setup_module makes the TestCase test's data": (
        "import unittest\nDATA = {}\n\ndef setup_module(module):\n    DATA['xs'] = [2, 1]\n\n"
        "class TestSort(unittest.TestCase):\n"
        "    def test_sort(self):\n        self.assertEqual(my_sort(DATA['xs']), [1, 2])\n",
        "pytest",
        {RIGHT: (True, "pass"), SHORT_WRONG: (False, "wrong_answer")},
    ),
    "G8: a module autouse fixture runs before setUpClass": (
        "import unittest, pytest\nDATA = {}\n\n@pytest.fixture(autouse=True, scope='module')\ndef load():\n"
        "    DATA['xs'] = [2, 1]\n\nclass TestSort(unittest.TestCase):\n"
        "    @classmethod\n    def setUpClass(cls):\n        cls.xs = list(DATA['xs'])\n"
        "    def test_sort(self):\n        self.assertEqual(my_sort(self.xs), [1, 2])\n",
        "pytest",
        {RIGHT: (True, "pass"), SHORT_WRONG: (False, "wrong_answer")},
    ),
    "G8: a usefixtures mark on a TestCase class": (
        "import unittest, pytest\nRESULTS = []\n\n@pytest.fixture\ndef verify():\n    yield\n"
        "    assert all(got == sorted(xs) for xs, got in RESULTS)\n\n"
        "@pytest.mark.usefixtures('verify')\n" + TESTCASE_SORT,
        "pytest",
        {RIGHT: (True, "pass"), SHORT_WRONG: (False, "wrong_answer")},
    ),
    # pytest gives setup_function to test functions only: a TestCase test runs without it
    "G8: setup_function does not run for a TestCase test": (
        "import unittest\n\ndef setup_function(function):\n    raise RuntimeError('not for TestCase')\n\n"
        "class TestSort(unittest.TestCase):\n"
        "    def test_sort(self):\n        self.assertEqual(my_sort([2, 1, 3]), [1, 2, 3])\n",
        "pytest",
        {RIGHT: (True, "pass")},
    ),
    # a script: unittest.main() runs the cases, pytest's fixtures are not there (a wrong program
    # passes Python itself, so it passes here too)
    "G8: under unittest.main() the autouse fixture does not run": (
        "import unittest, pytest\nRESULTS = []\n\n@pytest.fixture(autouse=True)\ndef verify():\n    yield\n"
        "    for xs, got in RESULTS:\n        assert got == sorted(xs)\n\n" + TESTCASE_SORT + "\n"
        "if __name__ == '__main__':\n    unittest.main()\n",
        "script",
        {RIGHT: (True, "pass"), SHORT_WRONG: (True, "pass")},
    ),
    "G9: the tests' own handler class collects the logger's records": (
        "import logging, unittest\n\nclass Collect(logging.Handler):\n    def __init__(self):\n"
        "        super().__init__()\n        self.records = []\n    def emit(self, record):\n"
        "        self.records.append(record)\n\nclass TestParse(unittest.TestCase):\n"
        "    def test_quiet(self):\n        h = Collect()\n        logging.getLogger('parser').addHandler(h)\n"
        "        self.assertEqual(parse('12'), 12)\n        self.assertEqual(h.records, [])\n",
        "pytest",
        {QUIET: (True, "no verdict"), LOUD: (False, "no verdict"), WRONG_VALUE: (False, "wrong_answer")},
    ),
    "G9: a BufferingHandler on the root logger": (
        "import logging, logging.handlers, unittest\n\nclass TestParse(unittest.TestCase):\n"
        "    def test_quiet(self):\n        h = logging.handlers.BufferingHandler(100)\n"
        "        logging.getLogger().addHandler(h)\n        try:\n"
        "            self.assertEqual(parse('7'), 7)\n        finally:\n"
        "            logging.getLogger().removeHandler(h)\n        self.assertEqual(h.buffer, [])\n",
        "pytest",
        {QUIET: (True, "no verdict"), LOUD: (False, "no verdict"), WRONG_VALUE: (False, "wrong_answer")},
    ),
    "G9: basicConfig with a stream the tests read back": (
        "import io, logging, unittest\nBUF = io.StringIO()\nlogging.basicConfig(stream=BUF, force=True)\n\n"
        "class TestParse(unittest.TestCase):\n    def test_quiet(self):\n"
        "        self.assertEqual(parse('3'), 3)\n        self.assertEqual(BUF.getvalue(), '')\n\n"
        "if __name__ == '__main__':\n    unittest.main()\n",
        "script",
        {QUIET: (True, "no verdict"), LOUD: (False, "no verdict"), WRONG_VALUE: (False, "wrong_answer")},
    ),
    # no fire: logging named, basicConfig on stderr (nothing the tests read back), a handler taken
    # off before the candidate's call
    "G9: basicConfig(level=...) and a handler removed before the call score as before": (
        "import logging, logging.handlers, unittest\nlogging.basicConfig(level=logging.INFO)\n\n"
        "class TestParse(unittest.TestCase):\n    def test_value(self):\n"
        "        h = logging.handlers.MemoryHandler(10)\n        logging.getLogger().addHandler(h)\n"
        "        logging.getLogger().removeHandler(h)\n        self.assertEqual(parse('5'), 5)\n",
        "pytest",
        {QUIET: (True, "pass"), LOUD: (True, "pass"), WRONG_VALUE: (False, "wrong_answer")},
    ),
}


@pytest.mark.parametrize("shape", sorted(CASES))
def test_the_sandbox_scores_as_real_pytest_or_refuses(shape, tmp_path):
    tests, mode, programs = CASES[shape]
    for program, (real, expected) in programs.items():
        assert _real_passes(program, tests, mode, tmp_path) is real, f"real {mode} disagrees with the case: {program}"
        assert _sandbox(program, tests) == expected, program
