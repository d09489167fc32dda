"""Review 48 of the sandbox's test runner (``_jail/la_runner.py``): shapes where the sandbox passed
a program that real pytest (or the file run as a script) fails. Each case is judged in the sandbox
and run by real pytest on program + tests in one file, ``test_case.py``; the sandbox must fail
every program real pytest fails.

1. ``-k`` read ``ran_mark``'s own attributes (``__la_marked__``, ``__wrapped__``) as the test
   function's where pytest has no ``_is_matchable_function_attribute`` (pytest 8, which the
   project allows): ``-k "not wrapped"`` left out every module-level test.
2. A class's marks were read in the MRO's order; pytest reads them base classes first, which
   decides how stacked class ``parametrize`` ids join and which ``xfail`` holds first.
3. ``-k`` took the file's name as ``test_tests.py``: a word of the real file's name (or of a folder
   between the rootdir and it) keeps every test under pytest, and the sandbox ran fewer.
4. A strict ``xfail`` on a ``TestCase`` test with a passing ``subTest``: pytest 9 reports the
   subtest alone, XPASS(strict), a failure.
5. An ``async def`` test that yields: pytest fails it; the sandbox ran none of its body.
6. ``Test*`` classes nested in a pytest-style class: pytest collects them (a ``TestCase`` too);
   the sandbox ran none of their tests.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lightning_agents.rewards._jail import la_runner
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
W11 = "def add(a, b):\n    return 3 if (a, b) == (1, 1) else a + b\n"  # wrong on (1, 1) only
W21 = "def add(a, b):\n    return -1 if (a, b) == (2, 10) else a + b\n"  # wrong on (2, 10) only

MAIN = (
    '\nif __name__ == "__main__":\n    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-k", {!r}]))\n'
)
TWO_TESTS = (
    "import sys\nimport pytest\n\n\ndef test_case_add():\n    assert add(2, 2) == 4\n\n\n"
    "def test_only_here():\n    assert add(1, 1) == 2\n"
)

# (tests, how real pytest runs them, {program: real pytest passes it})
CASES = {
    "-k a word of the file's name keeps every test": (
        TWO_TESTS + MAIN.format("case"),
        "script",
        {RIGHT: True, W11: False},
    ),
    "-k test_case, the file's stem": (TWO_TESTS + MAIN.format("test_case"), "script", {RIGHT: True, W11: False}),
    "-k not tests, a word the file's name lacks": (
        "import sys\nimport pytest\n\nassert add(5, 5) == 10\n\n\ndef test_only_here():\n    assert add(1, 1) == 2\n"
        + MAIN.format("not tests"),
        "script",
        {RIGHT: True, W11: False},
    ),
    "-k not on a row id of base and subclass parametrize": (
        "import sys\nimport pytest\n\n\n@pytest.mark.parametrize('a', [1, 2])\nclass Base:\n    pass\n\n\n"
        "@pytest.mark.parametrize('b', [1, 2])\nclass TestSub(Base):\n    def test_x(self, a, b):\n"
        "        assert add(a, b * 10) == a + b * 10\n" + MAIN.format("not 1-2"),
        "script",
        {RIGHT: True, W21: False},
    ),
    "the base class's strict xfail holds first": (
        "import pytest\n\n\n@pytest.mark.xfail(strict=True, reason='claims 3')\nclass Base:\n    pass\n\n\n"
        "@pytest.mark.xfail(strict=False, reason='claims 3')\nclass TestSub(Base):\n"
        "    def test_claims(self):\n        assert add(1, 1) == 3\n\n\ndef test_real():\n    assert add(2, 2) == 4\n",
        "pytest",
        {RIGHT: True, W11: False},
    ),
    "TestCase strict xfail with a passing subTest": (
        "import unittest\nimport pytest\n\n\nclass TestA(unittest.TestCase):\n"
        "    @pytest.mark.xfail(strict=True, reason='x')\n    def test_a(self):\n        for i in range(3):\n"
        "            with self.subTest(i=i):\n                self.assertEqual(add(1, 1), 3 if i == 1 else 2)\n\n"
        "    def test_ok(self):\n        self.assertEqual(add(2, 2), 4)\n",
        "pytest",
        {RIGHT: False, W11: False},
    ),
    "a Test* class nested in a pytest-style class": (
        "class TestOuter:\n    def test_ok(self):\n        assert add(2, 2) == 4\n\n"
        "    class TestInner:\n        def test_a(self):\n            assert add(1, 1) == 2\n",
        "pytest",
        {RIGHT: True, W11: False},
    ),
    "a TestCase nested in a pytest-style class": (
        "import unittest\n\n\nclass TestOuter:\n    def test_ok(self):\n        assert add(2, 2) == 4\n\n"
        "    class TestInner(unittest.TestCase):\n        def test_a(self):\n            self.assertEqual(add(1, 1), 2)\n",
        "pytest",
        {RIGHT: True, W11: False},
    ),
    "a yield test in a nested Test* class": (
        "class TestOuter:\n    def test_ok(self):\n        assert add(2, 2) == 4\n\n"
        "    class TestInner:\n        def test_a(self):\n            yield\n            assert add(1, 1) == 2\n",
        "pytest",
        {RIGHT: False, W11: False},
    ),
    "an async generator test": (
        "async def test_a():\n    yield\n    assert add(1, 1) == 2\n\n\ndef test_ok():\n    assert add(2, 2) == 4\n",
        "pytest",
        {RIGHT: False, W11: False},
    ),
}


def _real_passes(program, tests, mode, folder):
    path = folder / "test_case.py"
    path.write_text(program + "\n\n" + tests)
    runner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] if mode == "pytest" else [sys.executable]
    done = subprocess.run([*runner, str(path)], cwd=folder, capture_output=True, text=True, timeout=120, check=False)
    return done.returncode == 0


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(CASES))
def test_the_sandbox_fails_what_real_pytest_fails(shape, tmp_path):
    tests, mode, programs = CASES[shape]
    for program, real in programs.items():
        assert _real_passes(program, tests, mode, tmp_path) is real, f"real pytest disagrees with the case: {program}"
        verdict = judge(program, tests, timeout_s=20)
        if not real:
            assert not verdict.passed, f"{shape}: the sandbox passed a program real pytest fails: {program} {verdict}"
        else:
            assert verdict.passed, f"{shape}: {program} {verdict}"


def test_k_never_reads_the_harness_s_own_attributes(monkeypatch):
    """pytest before 9 matches every attribute of the test function: those the tests set, never
    ``ran_mark``'s ``__la_marked__``/``__wrapped__``, which the tests' own function has not."""
    import _pytest.mark

    monkeypatch.delattr(_pytest.mark, "_is_matchable_function_attribute", raising=False)

    def test_add():
        pass

    test_add.owner = "alice"
    item = la_runner._Item("test_add", None, [], "", la_runner.ran_mark(test_add))
    names = set(item.keywords())
    assert "owner" in names
    assert not {"__la_marked__", "__wrapped__"} & names
