"""Mends of the review of b43161f (session 46, /work/h46/review_sandbox/REPORT.md): the harness as
a test runner (``_jail/la_runner.py``).

R1 ``sys.exit(0)`` / ``raise SystemExit(0)`` in an ``if __name__ == "__main__":`` block ends a
   script with success; the harness ran the block and failed every program (a right program that
   passed before b43161f, where the checks were at module level, scored 0). The candidate's own
   ``SystemExit(0)`` still fails the tests.
R2 a ``__main__`` block saw the harness's own ``sys.argv`` (its path and two descriptor numbers):
   ``argparse`` there exited 2 and failed every program.
R3 ``pytest.main([__file__])`` under the guard: ``__file__`` was taken for a name of the
   candidate's (a stand-in), so every program failed; ``pytest.main([...])`` without a file
   collected the trainer's working directory and ran its test files inside the trusted harness.
R4 a failure in ``tearDownClass`` or a class cleanup (under ``unittest.main()`` or the tests' own
   ``TextTestRunner``) was dropped: a wrong program passed.
R5 pytest's skip marks beyond a function's own ``skip``/``skipif(True)`` (``skipif(condition=True)``,
   a class's mark, a module's ``pytestmark``) were ignored: a test pytest skips ran and failed
   every program.
R6 a ``test_*`` function the tests already ran (through ``globals()``) ran again.
R7 under a root trainer ``chmod`` did nothing: a program that writes a script, ``chmod +x``es it
   and runs it failed. The sandbox now runs as an unprivileged uid outside there, and chmod works
   (skipped only on a root host where that drop cannot work, which keeps the no-op and warns).
R8 ``unittest.main(argv=[prog, "TestA"])``, ``defaultTest="TestA"`` or ``-k`` ran every TestCase.
"""

from __future__ import annotations

import os

import pytest

from lightning_agents.rewards import run_python
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"


def _passes(program, tests):
    return judge(program, tests, timeout_s=20).passed


SCRIPT_ENDINGS = {
    "sys.exit(0) after check in the block": CHECK
    + "import sys\n\nif __name__ == '__main__':\n    check(add)\n    sys.exit(0)\n",
    "checks at module level, SystemExit(0) in the block": (
        CHECK + "check(add)\n\nif __name__ == '__main__':\n    print('all passed')\n    raise SystemExit(0)\n"
    ),
    "argparse in the block": (
        CHECK + "if __name__ == '__main__':\n    import argparse\n    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('-v', action='store_true')\n    parser.parse_args()\n    check(add)\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(SCRIPT_ENDINGS))
def test_a_main_block_runs_as_in_a_script(shape):
    # R1, R2: `python tests.py` exits 0 for RIGHT and 1 for WRONG with each of these
    tests = SCRIPT_ENDINGS[shape]
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


PYTEST_MAINS = {
    "pytest.main([__file__])": "pytest.main([__file__])",
    "pytest.main(['-q', __file__])": "pytest.main(['-q', __file__])",
    "sys.exit(pytest.main([__file__]))": "sys.exit(pytest.main([__file__]))",
}


@pytest.mark.parametrize("call", sorted(PYTEST_MAINS))
def test_pytest_main_under_the_guard_runs_the_tests_own_functions(call):
    # R3: the most common way a pytest file makes itself runnable as a script
    tests = (
        "import sys\nimport pytest\n\ndef test_add():\n    assert add(1, 2) == 3\n\n"
        f"if __name__ == '__main__':\n    {PYTEST_MAINS[call]}\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_pytest_main_does_not_collect_the_trainers_working_directory(tmp_path, monkeypatch):
    # R3: the harness runs in the trainer's working directory; pytest.main() with no file there
    # imported and ran the trainer's own test files inside the trusted harness process
    marker = tmp_path / "marker.txt"
    (tmp_path / "test_trainer_side.py").write_text(
        f"open({str(marker)!r}, 'a').write('collected')\n\ndef test_nothing():\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    tests = (
        "import pytest\n\ndef test_add():\n    assert add(1, 2) == 3\n\n"
        "if __name__ == '__main__':\n    pytest.main(['-q', '-p', 'no:cacheprovider'])\n"
    )
    judge(RIGHT, tests, timeout_s=20)
    assert not marker.exists()


CLASS_FIXTURES = {
    "tearDownClass": (
        "    @classmethod\n    def tearDownClass(cls):\n        assert add(2, 2) == 4, 'teardown check'\n"
    ),
    "addClassCleanup": (
        "    @classmethod\n    def setUpClass(cls):\n"
        "        cls.addClassCleanup(lambda: None if add(2, 2) == 4 else 1 / 0)\n"
    ),
}


@pytest.mark.parametrize("fixture", sorted(CLASS_FIXTURES))
def test_a_failing_class_fixture_under_unittest_main_fails_the_tests(fixture):
    # R4: unittest.main() exits 1 on it; the harness dropped TestsExited's code
    tests = (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        + CLASS_FIXTURES[fixture]
        + "\nif __name__ == '__main__':\n    unittest.main()\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes("def add(a, b):\n    return 3\n", tests)


SKIPPED_BY_PYTEST = {
    "skipif(condition=True)": "@pytest.mark.skipif(condition=True, reason='not here')\ndef test_skipped():\n    assert False\n",
    "a class's skip mark": "@pytest.mark.skip(reason='wip')\nclass TestSkipped:\n    def test_a(self):\n        assert False\n",
    "a class's skip mark, its setup_class": (
        "@pytest.mark.skip(reason='wip')\nclass TestSkipped:\n    @classmethod\n    def setup_class(cls):\n"
        "        assert False\n\n    def test_a(self):\n        pass\n"
    ),
    "a module's pytestmark": "pytestmark = pytest.mark.skip(reason='wip')\n\ndef test_skipped():\n    assert False\n",
}


@pytest.mark.parametrize("shape", sorted(SKIPPED_BY_PYTEST))
def test_the_tests_pytest_skips_are_not_run(shape):
    # R5: pytest passes RIGHT and fails WRONG here (the module's own check)
    tests = "import pytest\n\n" + SKIPPED_BY_PYTEST[shape] + "\nassert add(1, 2) == 3\n"
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_a_test_function_the_tests_ran_themselves_is_not_run_again():
    # R6: passed RIGHT before b43161f; a second run fails its own bookkeeping
    tests = (
        "ran = []\n\ndef test_once():\n    ran.append(1)\n    assert len(ran) == 1, 'ran twice'\n"
        "    assert add(1, 2) == 3\n\n"
        "for _name, _f in list(globals().items()):\n    if _name.startswith('test_'):\n        _f()\n"
    )
    assert _passes(RIGHT, tests)


@pytest.mark.skipif(
    os.geteuid() == 0 and bool(isolation_report().get("uid_drop_error")),
    reason=f"a root sandbox here (chmod a no-op): {isolation_report().get('uid_drop_error')}",
)
def test_a_program_can_make_its_own_script_executable_and_run_it():
    # R7: worked before b43161f and under a non-root trainer; under a root one since the sandbox
    # runs as an unprivileged uid outside (test_sandbox_unprivileged_uid.py)
    program = (
        "import os, subprocess\n"
        "open('/tmp/hello.sh', 'w').write('#!/bin/sh\\necho hi\\n')\n"
        "os.chmod('/tmp/hello.sh', 0o755)\n"
        "print(subprocess.run(['/tmp/hello.sh'], capture_output=True, text=True).stdout.strip())\n"
    )
    result = run_python(program, timeout_s=20)
    assert result.ok, result.stderr
    assert result.stdout.strip() == "hi"


@pytest.mark.parametrize("selection", ["argv=['prog', 'TestA']", "defaultTest='TestA'"])
def test_unittest_main_runs_the_tests_it_names(selection):
    # R8: the script runs TestA only and exits 0 for RIGHT; the harness ran every TestCase
    tests = (
        "import unittest\n\nclass TestA(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "class TestWip(unittest.TestCase):\n    def test_b(self):\n        self.fail('not selected')\n\n"
        f"if __name__ == '__main__':\n    unittest.main({selection})\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_a_test_function_under_a_decorator_of_the_tests_still_runs():
    # R6's record must not hide a test behind a functools.wraps decorator of the tests' own
    tests = (
        "import functools\n\ndef logged(f):\n    @functools.wraps(f)\n    def inner(*a, **k):\n"
        "        return f(*a, **k)\n    return inner\n\n@logged\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_an_async_test_the_tests_called_without_awaiting_still_runs():
    # calling an async def test only makes its coroutine: none of its checks ran
    tests = (
        "import asyncio\n\nasync def test_add():\n    await asyncio.sleep(0)\n    assert add(1, 2) == 3\n\n"
        "for _name, _f in list(globals().items()):\n    if _name.startswith('test_'):\n        _f().close()\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


def test_a_failing_class_fixture_under_the_tests_own_runner_fails_the_tests():
    # R4: the tests run their suite and ignore the result; the runner still reports the failure
    tests = (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    @classmethod\n    def tearDownClass(cls):\n        assert add(2, 2) == 4, 'teardown check'\n\n"
        "unittest.TextTestRunner(stream=open('/dev/null', 'w')).run(unittest.defaultTestLoader.loadTestsFromTestCase(T))\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes("def add(a, b):\n    return 3\n", tests)


def test_unittest_main_keeps_the_tests_k_selects():
    # R8: `-k TestA` keeps TestA's tests only, as unittest's parser does
    tests = (
        "import unittest\n\nclass TestA(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "class TestWip(unittest.TestCase):\n    def test_b(self):\n        self.fail('not selected')\n\n"
        "if __name__ == '__main__':\n    unittest.main(argv=['prog', '-k', 'test_a'])\n"
    )
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


@pytest.mark.parametrize("mark", ["skipif(False, reason='x')", "skipif(condition=False, reason='x')"])
def test_a_false_skipif_runs_the_test(mark):
    tests = f"import pytest\n\n@pytest.mark.{mark}\ndef test_add():\n    assert add(1, 2) == 3\n"
    assert _passes(RIGHT, tests)
    assert not _passes(WRONG, tests)


@pytest.mark.parametrize("raised", ["raise SystemExit(0)", "import sys; sys.exit(0)", "raise SystemExit(None)"])
def test_the_candidates_exit_0_still_fails_the_tests(raised):
    # R1 lets the tests' own exit 0 end them; the program's is not the tests' own
    tests = "assert add(1, 2) == 3\n\nif __name__ == '__main__':\n    raise SystemExit(0)\n"
    assert not _passes(f"def add(a, b):\n    {raised}\n", tests)
