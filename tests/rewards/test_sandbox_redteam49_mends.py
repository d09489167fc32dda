"""Red team 49 of the sandbox's test runner and harness: wrong programs that pass tests which fail
them in one file (real pytest).

X1. A pytest-style ``Test*`` class the tests name anywhere is never run: ``TestAdd.CASES`` read in
    its own method, ``TestAdd.big = ...`` in its ``setup_class``, ``super(TestAdd, self)``,
    ``TestData.cases`` read by another test, ``TestAdd().test_small()`` under ``__main__``. The
    harness takes any named ``Test*`` class for a helper the tests run themselves (red team 48's R2
    mend covered module-level ``def test*`` only). A wrong program passes what pytest fails.
X2. An argument the wire cannot carry (``object()``, a ``Decimal``, an instance of the tests' own
    class) makes the harness raise ``TypeError`` into the tests before the candidate is asked.
    ``pytest.raises(TypeError)``, ``assertRaises(TypeError)`` or ``except TypeError`` then take the
    harness's error for the candidate's: a program that accepts anything passes an input check.
X3. Effects the watches missed: ``builtins.print`` replaced by hand (no ``unittest.mock``), and a
    coroutine made before ``redirect_stdout`` and awaited under it (the await was not checked).
X4. A module's function the tests replace by hand (``os.remove = removed.append``,
    ``pytest.MonkeyPatch.context()``'s ``setattr``): the candidate's
    ``os`` is its own, so ``removed == []`` passed a program that deletes on a dry run.
X5. A ``TestCase`` class one of whose tests the tests ran themselves (``TestAdd("test_small").run()``,
    a suite of that one test under ``__main__``) never ran its other tests.
X6. ``doctest.testmod()`` read ``sys.modules["__main__"]``, the harness: the tests' own examples never
    ran, and ``testmod(raise_on_error=True)`` passed a program they fail.
X10. Memory the tests trace (``tracemalloc``) holds none of the candidate's allocations: a program
    that builds a 10**5 list passed ``peak < 1_000_000``.
X12. CPU time the tests read (``time.process_time()``) holds none of the candidate's: a slow program
    passed ``time.process_time() - start < 0.5``.
"""

from __future__ import annotations

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
# right on small numbers, wrong on big ones: what the tests below check apart
SMALL_ONLY = "def add(a, b):\n    return a + b if abs(a) < 1000 else 0\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


# X1 ----------------------------------------------------------------------------------------------

NAMED_CLASSES = {
    "class constant read by its own method": (
        "class TestAdd:\n    CASES = [(1, 2, 3), (5000, 1, 5001)]\n\n"
        "    def test_all(self):\n        for a, b, c in TestAdd.CASES:\n            assert add(a, b) == c\n\n\n"
        "def test_small():\n    assert add(1, 1) == 2\n"
    ),
    "setup_class sets an attribute on the class by name": (
        "class TestAdd:\n    @classmethod\n    def setup_class(cls):\n        TestAdd.big = 5000\n\n"
        "    def test_big(self):\n        assert add(self.big, 1) == 5001\n\n\n"
        "def test_small():\n    assert add(1, 1) == 2\n"
    ),
    "python 2 style super": (
        "class TestBase:\n    def setup_method(self, method):\n        self.big = 5000\n\n\n"
        "class TestAdd(TestBase):\n    def setup_method(self, method):\n"
        "        super(TestAdd, self).setup_method(method)\n\n"
        "    def test_big(self):\n        assert add(self.big, 1) == 5001\n\n\n"
        "def test_small():\n    assert add(1, 1) == 2\n"
    ),
    "another test reads the class's data": (
        "class TestData:\n    cases = [(1, 2, 3), (5000, 1, 5001)]\n\n"
        "    def test_each(self):\n        for a, b, c in self.cases:\n            assert add(a, b) == c\n\n\n"
        "def test_first():\n    assert add(*TestData.cases[0][:2]) == 3\n"
    ),
    "a smoke run of one method under __main__": (
        "class TestAdd:\n    def test_small(self):\n        assert add(1, 1) == 2\n\n"
        "    def test_big(self):\n        assert add(5000, 1) == 5001\n\n\n"
        'if __name__ == "__main__":\n    TestAdd().test_small()\n'
    ),
}


@pytest.mark.parametrize("shape", sorted(NAMED_CLASSES))
def test_a_pytest_class_the_tests_name_still_runs(shape):
    tests = NAMED_CLASSES[shape]
    assert _verdict(RIGHT, tests).passed  # pytest: all passed
    wrong = _verdict(SMALL_ONLY, tests)  # pytest: 1 failed
    assert not wrong.passed and wrong.reason == "wrong_answer", wrong


# X2 ----------------------------------------------------------------------------------------------

CHECKS_TYPE = (
    "def double(x):\n    if type(x) is not int:\n        raise TypeError('x must be an int')\n    return 2 * x\n"
)
ACCEPTS_ANYTHING = "def double(x):\n    if type(x) is not int:\n        return None\n    return 2 * x\n"

UNSENDABLE = {
    "pytest.raises, object()": (
        "import pytest\n\n\ndef test_double():\n    assert double(2) == 4\n\n\n"
        "def test_rejects_non_int():\n    with pytest.raises(TypeError):\n        double(object())\n"
    ),
    "assertRaises, Decimal": (
        "import unittest\nfrom decimal import Decimal\n\n\nclass T(unittest.TestCase):\n"
        "    def test_double(self):\n        self.assertEqual(double(2), 4)\n\n"
        "    def test_rejects(self):\n        with self.assertRaises(TypeError):\n"
        '            double(Decimal("1.5"))\n'
    ),
    "except TypeError, the tests' own class": (
        "def check(candidate):\n    assert candidate(3) == 6\n\n    class Foo:\n        pass\n\n"
        "    try:\n        candidate(Foo())\n    except TypeError:\n        pass\n    else:\n"
        '        raise AssertionError("no TypeError")\n\n\ncheck(double)\n'
    ),
}


@pytest.mark.parametrize("shape", sorted(UNSENDABLE))
def test_a_pass_past_an_argument_the_sandbox_cannot_send_is_no_verdict(shape):
    tests = UNSENDABLE[shape]
    # one file: the program that accepts anything fails; here neither program was asked, so no
    # program may pass (a failure elsewhere in the tests stays a 0)
    for program in (ACCEPTS_ANYTHING, CHECKS_TYPE):
        with pytest.raises(VerifierError, match="cannot pass"):
            _verdict(program, tests)


def test_an_argument_the_sandbox_cannot_send_leaves_a_failure_a_zero():
    tests = (
        "import pytest\n\n\ndef test_double():\n    assert double(2) == 5\n\n\n"
        "def test_rejects_non_int():\n    with pytest.raises(TypeError):\n        double(object())\n"
    )
    verdict = _verdict(CHECKS_TYPE, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


# X3 ----------------------------------------------------------------------------------------------

PRINTS = "def total(xs):\n    print('debug', xs)\n    return sum(xs)\n"
SILENT = "def total(xs):\n    return sum(xs)\n"

UNSEEN_EFFECTS = {
    "builtins.print replaced without unittest.mock": (
        PRINTS,
        SILENT,
        (
            "import builtins\n\n\ndef test_total_silent():\n    printed = []\n    original = builtins.print\n"
            "    builtins.print = lambda *a, **k: printed.append(a)\n    try:\n"
            "        assert total([1, 2, 3]) == 6\n    finally:\n        builtins.print = original\n"
            "    assert printed == []\n"
        ),
    ),
    "a coroutine made outside redirect_stdout, awaited inside it": (
        "async def total(xs):\n    print('debug')\n    return sum(xs)\n",
        "async def total(xs):\n    return sum(xs)\n",
        (
            "import asyncio\nimport contextlib\nimport io\n\n\nasync def main():\n    coro = total([1, 2])\n"
            "    buf = io.StringIO()\n    with contextlib.redirect_stdout(buf):\n        r = await coro\n"
            '    assert r == 3\n    assert buf.getvalue() == ""\n\n\ndef test_it():\n    asyncio.run(main())\n'
        ),
    ),
}


@pytest.mark.parametrize("shape", sorted(UNSEEN_EFFECTS))
def test_a_pass_resting_on_an_effect_the_watches_missed_is_no_verdict(shape):
    wrong, right, tests = UNSEEN_EFFECTS[shape]
    # one file: the printing program fails; the sandbox sees neither program's output
    for program in (wrong, right):
        with pytest.raises(VerifierError, match="not as in one file"):
            _verdict(program, tests)


# X4 ----------------------------------------------------------------------------------------------

DELETES_ON_DRY_RUN = (
    "import os\n\n\ndef cleanup(paths, dry_run=False):\n    for p in paths:\n        try:\n"
    "            os.remove(p)\n        except OSError:\n            pass\n    return len(paths)\n"
)
HONOURS_DRY_RUN = (
    "import os\n\n\ndef cleanup(paths, dry_run=False):\n    if not dry_run:\n        for p in paths:\n"
    "            os.remove(p)\n    return len(paths)\n"
)
PATCHED_BY_HAND = (
    "import os\n\n\ndef test_dry_run_deletes_nothing():\n    removed = []\n    original = os.remove\n"
    "    os.remove = removed.append\n    try:\n"
    '        assert cleanup(["/tmp/a.log", "/tmp/b.log"], dry_run=True) == 2\n'
    "    finally:\n        os.remove = original\n    assert removed == []\n"
)


PATCHED_BY_MONKEYPATCH_CONTEXT = (
    "import os\n\nimport pytest\n\n\ndef test_dry_run_deletes_nothing():\n    removed = []\n"
    "    with pytest.MonkeyPatch.context() as mp:\n        mp.setattr(os, 'remove', removed.append)\n"
    '        assert cleanup(["/tmp/a.log"], dry_run=True) == 1\n    assert removed == []\n'
)


@pytest.mark.parametrize("tests", [PATCHED_BY_HAND, PATCHED_BY_MONKEYPATCH_CONTEXT], ids=["assignment", "MonkeyPatch"])
def test_a_pass_under_a_module_function_the_tests_replaced_by_hand_is_no_verdict(tests):
    # one file: the program that deletes on a dry run fails (removed holds the paths)
    for program in (DELETES_ON_DRY_RUN, HONOURS_DRY_RUN):
        with pytest.raises(VerifierError, match=r"replaced os\.remove by hand"):
            _verdict(program, tests)


def test_a_module_function_replaced_and_restored_before_the_call_changes_nothing():
    tests = (
        "import os\nimport time\n\noriginal = time.sleep\ntime.sleep = lambda s: None\ntime.sleep = original\n\n\n"
        'def test_dry_run():\n    assert cleanup(["/tmp/a.log"], dry_run=True) == 1\n'
    )
    assert _verdict(HONOURS_DRY_RUN, tests).passed


# X5 ----------------------------------------------------------------------------------------------

CASE_CLASS = (
    "import unittest\n\n\nclass TestAdd(unittest.TestCase):\n    def test_small(self):\n"
    "        self.assertEqual(add(1, 1), 2)\n\n    def test_big(self):\n        self.assertEqual(add(5000, 1), 5001)\n"
)
PARTLY_RUN = {
    "a suite of one test under __main__": CASE_CLASS
    + '\n\nif __name__ == "__main__":\n    suite = unittest.TestSuite()\n'
    '    suite.addTest(TestAdd("test_small"))\n    unittest.TextTestRunner().run(suite)\n',
    "one test run at module level": CASE_CLASS + '\n\nTestAdd("test_small").run()\n',
}


@pytest.mark.parametrize("shape", sorted(PARTLY_RUN))
def test_the_tests_a_testcase_class_ran_only_some_of_still_run(shape):
    tests = PARTLY_RUN[shape]
    assert _verdict(RIGHT, tests).passed  # pytest: 2 passed
    wrong = _verdict(SMALL_ONLY, tests)  # pytest: 1 failed
    assert not wrong.passed and wrong.reason == "wrong_answer", wrong


# X6 ----------------------------------------------------------------------------------------------

DOCTESTS = (
    'def examples():\n    """\n    >>> add(5000, 1)\n    5001\n    """\n\n\nassert add(2, 2) == 4\n\n'
    'if __name__ == "__main__":\n    import doctest\n\n    doctest.testmod(raise_on_error=True)\n'
)


def test_doctest_testmod_runs_the_tests_own_examples():
    # one file (the script): the wrong program raises DocTestFailure; before, testmod() looked at the
    # harness's __main__ and ran none of the tests' examples, and the wrong program passed
    wrong = _verdict(SMALL_ONLY, DOCTESTS)
    assert not wrong.passed and wrong.reason == "wrong_answer" and "DocTestFailure" in wrong.detail, wrong
    # doctest compares what it captures of stdout, which never holds the candidate's prints: no verdict
    with pytest.raises(VerifierError, match="redirected sys.stdout"):
        _verdict(RIGHT, DOCTESTS)


# X10 ---------------------------------------------------------------------------------------------

MEMORY_BOUND = (
    "import tracemalloc\n\n\ndef test_constant_memory():\n    tracemalloc.start()\n    try:\n"
    "        assert count_evens(200000) == 100000\n        _, peak = tracemalloc.get_traced_memory()\n"
    "    finally:\n        tracemalloc.stop()\n    assert peak < 1_000_000, peak\n"
)
LIST_BUILDER = "def count_evens(n):\n    return len([i for i in list(range(n)) if i % 2 == 0])\n"
GENERATOR = "def count_evens(n):\n    return sum(1 for i in range(n) if i % 2 == 0)\n"


def test_a_pass_under_the_tests_memory_tracing_is_no_verdict():
    # one file: the list builder's peak is about 8 MB and fails; its allocations are not the harness's
    for program in (LIST_BUILDER, GENERATOR):
        with pytest.raises(VerifierError, match="traced memory allocations"):
            _verdict(program, MEMORY_BOUND)


# X12 ---------------------------------------------------------------------------------------------

CPU_BOUND = (
    "import time\n\n\ndef test_fast():\n    start = time.process_time()\n"
    "    assert count_evens(200000) == 100000\n    assert time.process_time() - start < 0.5\n"
)
SLOW = "def count_evens(n):\n    return sum(1 for i in range(n * 400) if i % 800 == 0)\n"


def test_a_pass_resting_on_the_tests_cpu_clock_is_no_verdict():
    # one file: the slow program's CPU time shows in process_time; here it is the sandbox's own
    for program in (SLOW, GENERATOR):
        with pytest.raises(VerifierError, match=r"read time\.process_time after calling the candidate"):
            _verdict(program, CPU_BOUND)


def test_the_tests_cpu_clock_read_before_any_call_changes_nothing():
    tests = "import time\n\nSTART = time.process_time()\n\n\ndef test_count():\n    assert count_evens(10) == 5\n"
    assert _verdict(GENERATOR, tests).passed
