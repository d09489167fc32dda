"""The sandbox's test runner (``_jail/la_runner.py``) against real pytest on the shapes review 47
left open (F6, F7): each case is judged in the sandbox and, where it applies, run by the real
pytest (or as a script) on program + tests in one file, and both must agree.

1. pytest's ``skip``/``skipif``/``xfail`` marks on ``unittest.TestCase`` methods and classes were
   ignored: the marked test ran as a plain one. pytest honours them (and gives such methods no
   ``parametrize`` rows: the method is called with no arguments and fails).
2. ``pytest.main(["-k", "not wip"])`` did not narrow; now ``-k`` words match the test's names as
   pytest's do. The tests' file has no name of its own here, and pytest matches a word against
   the real file's and folders' names too, so a positive word no known name holds
   (``-k add``) still keeps every test (review 48's F2): stricter than pytest, never looser.
3. ``pytest.param(..., id=...)``, ``ids=[...]`` and the ids pytest generates for plain values are
   known names: ``-k "not wip"`` leaves out the ``wip_row`` row, and ``file::test[1-1-2]`` selects
   that row only (an id not told here keeps the row: fail closed).
4. A string condition may read a global the tests compute from imports and literals alone
   (``PY_VERSION = sys.version_info[:2]``), never one computed from a reply.
5. ``xfail(run=None)`` is not run; a ``yield`` test is pytest 9's collection error; a
   ``pytest.main`` called inside a test does not narrow the tests after it; ``xfail(run=RUNS)``
   with ``RUNS`` from a reply is no evidence (review F1's rule).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
ABS = "def add(a, b):\n    return abs(a) + abs(b)\n"  # wrong on negatives only
NONE = "def add(a, b):\n    return None\n"
BIG = "def add(a, b):\n    return float(a) + b if a > 10**10 else a + b\n"  # wrong on big ints only
PROGRAMS = {"RIGHT": RIGHT, "ABS": ABS, "NONE": NONE, "BIG": BIG}


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


def _real_passes(program, tests, mode, folder):
    """Real pytest (``mode`` "pytest") or Python (``mode`` "script") passes program + tests, written
    to one file, ``test_case.py``."""
    path = folder / "test_case.py"
    path.write_text(program + "\n\n" + tests)
    runner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] if mode == "pytest" else [sys.executable]
    done = subprocess.run([*runner, str(path)], cwd=folder, capture_output=True, text=True, timeout=120, check=False)
    return done.returncode == 0


# (tests, how real pytest runs them, {program: passes}); the sandbox and real pytest agree on each
AGREE = {
    # 1. pytest marks on TestCase methods
    "TestCase: pytest.mark.skip": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(-1, -2), -3)\n\n"
        "    @pytest.mark.skip(reason='broken upstream')\n"
        "    def test_broken(self):\n        self.assertEqual(add(1, 2), 99)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "TestCase: string skipif": (
        "import sys\nimport unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(-1, -2), -3)\n\n"
        "    @pytest.mark.skipif('sys.version_info < (3, 99)', reason='future')\n"
        "    def test_future(self):\n        self.assertEqual(add(1, 2), 99)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "TestCase: a skipped class runs no setUpClass": (
        "import unittest\nimport pytest\n\n\n@pytest.mark.skip(reason='all broken')\n"
        "class TestBroken(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n"
        "        raise RuntimeError('not run')\n\n    def test_b(self):\n        self.assertEqual(add(1, 2), 99)\n\n\n"
        "class TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(-1, -2), -3)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "TestCase: xfail": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(-1, -2), -3)\n\n"
        "    @pytest.mark.xfail(reason='known')\n"
        "    def test_known(self):\n        self.assertEqual(add(1, 2), 99)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "TestCase: strict xfail that passes": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    @pytest.mark.xfail(strict=True, reason='negatives are broken')\n"
        "    def test_known(self):\n        self.assertEqual(add(-1, -2), -3)\n",
        "pytest",
        {"RIGHT": False, "ABS": True},
    ),
    "TestCase: xfail(raises=) against another failure": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    @pytest.mark.xfail(raises=TypeError, reason='known')\n"
        "    def test_known(self):\n        self.assertEqual(add(-1, -2), -3)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "TestCase: xfail(run=None) is not run": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(-1, -2), -3)\n\n"
        "    @pytest.mark.xfail(run=None, reason='hangs')\n"
        "    def test_hang(self):\n        raise SystemExit(3)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "TestCase: parametrize is not supported": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    @pytest.mark.parametrize('a', [1, 2])\n"
        "    def test_double(self, a):\n        self.assertEqual(add(a, a), 2 * a)\n",
        "pytest",
        {"RIGHT": False},
    ),
    "TestCase under unittest.main: the script ignores pytest marks": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    @pytest.mark.skip(reason='broken upstream')\n"
        "    def test_broken(self):\n        self.assertEqual(add(1, 2), 99)\n\n\n"
        "if __name__ == '__main__':\n    unittest.main()\n",
        "script",
        {"RIGHT": False},
    ),
    # 4. string conditions on globals computed from imports and literals
    "a string condition on a computed global": (
        "import sys\nimport pytest\n\nPY_VERSION = sys.version_info[:2]\n\n\n"
        "def test_add():\n    assert add(-1, -2) == -3\n\n\n"
        "@pytest.mark.skipif('PY_VERSION < (3, 99)', reason='future')\ndef test_future():\n    assert add(1, 2) == 99\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "a string condition on a computed global the tests rebind": (
        "import sys\nimport pytest\n\nPY_VERSION = sys.version_info[:2]\n\n\n"
        "def setup_module():\n    global PY_VERSION\n    PY_VERSION = (4, 0)\n\n\n"
        "def test_add():\n    assert add(1, 2) == 3\n\n\n"
        "@pytest.mark.skipif('PY_VERSION < (3, 99)', reason='future')\ndef test_future():\n    assert add(-1, -2) == -3\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    # 5. F7
    "xfail(run=None) is not run": (
        "import pytest\n\n\ndef test_add():\n    assert add(-1, -2) == -3\n\n\n"
        "@pytest.mark.xfail(run=None, reason='hangs')\ndef test_hang():\n    raise SystemExit(3)\n",
        "pytest",
        {"RIGHT": True, "ABS": False},
    ),
    "a yield test": (
        "def test_add():\n    assert add(1, 2) == 3\n\n\ndef test_rows():\n    for a in range(3):\n        yield add(a, a)\n",
        "pytest",
        {"RIGHT": False},
    ),
    "a yield test in a class": (
        "class TestAdd:\n    def test_add(self):\n        assert add(1, 2) == 3\n\n"
        "    def test_rows(self):\n        yield add(1, 1)\n",
        "pytest",
        {"RIGHT": False},
    ),
}

# 2. and 3.: what pytest.main([...]) selects, in a file run as a script
SELECTED = (
    "import sys\nimport pytest\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
    "def test_add_negative():\n    assert add(-1, -2) == -3\n\n\n"
    "@pytest.mark.slow\ndef test_add_big():\n    assert add(10**20, 1) == 10**20 + 1\n\n\n"
    "@pytest.mark.parametrize('a,b,c', [(1, 1, 2), pytest.param(5, 5, 11, id='wip_row')])\n"
    "def test_rows(a, b, c):\n    assert add(a, b) == c\n\n\n"
    "class TestWip:\n    def test_wip(self):\n        assert add(1, 1) == 3\n\n\n"
    "if __name__ == '__main__':\n    sys.exit(pytest.main(ARGS))\n"
)
SELECTIONS = {
    "-k 'not wip' and a param id": ("[__file__, '-k', 'not wip']", {"RIGHT": True, "ABS": False}),
    "-k a word of the file's name": ("[__file__, '-k', 'test']", {"RIGHT": False}),
    "a node id of a generated row": (
        "[__file__ + '::test_rows[1-1-2]', __file__ + '::test_add']",
        {"RIGHT": True, "ABS": True},
    ),
    "a node id of a param id": ("[__file__ + '::test_rows[wip_row]']", {"RIGHT": False}),
    "a node id of no row": ("[__file__ + '::test_rows[nope]', __file__ + '::test_add']", {"RIGHT": False}),
}
for _shape, (_args, _expected) in SELECTIONS.items():
    AGREE[f"pytest.main: {_shape}"] = (SELECTED.replace("ARGS", _args), "script", _expected)

# 2. a positive -k word that no name known here holds may be in the real file's or a folder's name,
# where pytest keeps every test (review 48's F2): the sandbox runs them all, so it fails RIGHT on
# TestWip and the wip_row row, which real pytest leaves out of test_case.py
KEEPS_EVERY_TEST = {
    "-k add": "[__file__, '-k', 'add']",
    "-k add with no path": "['-k', 'add']",
    "-k naming one test": "[__file__, '-k', 'test_add_negative']",
    "-k a generated row id": "[__file__, '-k', '1-1-2 or add']",
}


@pytest.mark.parametrize("shape", sorted(KEEPS_EVERY_TEST))
def test_a_positive_k_word_keeps_every_test(shape, tmp_path):
    tests = SELECTED.replace("ARGS", KEEPS_EVERY_TEST[shape])
    assert _real_passes(RIGHT, tests, "script", tmp_path), "real pytest leaves TestWip out of test_case.py"
    for name in ("RIGHT", "ABS", "BIG"):
        verdict = _verdict(PROGRAMS[name], tests)
        assert not verdict.passed, (name, verdict)


PARAM_IDS = (
    "import sys\nimport pytest\n\n\ndef test_add():\n    assert add(-1, -2) == -3\n\n\n"
    "@pytest.mark.parametrize('a,b,c', ROWS)\ndef test_rows(a, b, c):\n    assert add(a, b) == c\n\n\n"
    "if __name__ == '__main__':\n    sys.exit(pytest.main([__file__, '-k', KEYWORD]))\n"
)
for _shape, (_rows, _keyword) in {
    "ids=[...]": ("[(1, 1, 2), (5, 5, 11)], ids=['ok', 'wip']", "'not wip'"),
    "the same id twice": ("[pytest.param(1, 1, 2, id='x'), pytest.param(5, 5, 11, id='x')]", "'not x1'"),
}.items():
    AGREE[f"-k and {_shape}"] = (
        PARAM_IDS.replace("ROWS", _rows).replace("KEYWORD", _keyword),
        "script",
        {"RIGHT": True, "ABS": False},
    )
# stacked: pytest joins the ids in its order of the marks, the nearest decorator's first
AGREE["-k and stacked parametrize ids"] = (
    PARAM_IDS.replace("'a,b,c', ROWS)", "'k', [0, 1])\n@pytest.mark.parametrize('a,b,c', [(1, 1, 2), (5, 5, 11)])")
    .replace("(a, b, c)", "(a, b, c, k)")
    .replace("KEYWORD", "'not 11-0 and not 11-1'"),
    "script",
    {"RIGHT": True, "ABS": False},
)


@pytest.mark.parametrize("shape", sorted(AGREE))
def test_the_sandbox_judges_as_real_pytest_does(shape, tmp_path):
    tests, mode, expected = AGREE[shape]
    for name, passes in expected.items():
        assert _real_passes(PROGRAMS[name], tests, mode, tmp_path) is passes, (name, "real pytest")
        verdict = _verdict(PROGRAMS[name], tests)
        assert verdict.passed is passes, (name, verdict)


def test_the_yield_test_is_named():
    tests = AGREE["a yield test"][0]
    verdict = _verdict(RIGHT, tests)
    assert verdict.reason == "wrong_answer" and "CollectionError" in verdict.detail, verdict
    assert "test_rows" in verdict.detail, verdict


# where the sandbox is stricter than pytest: a skip or xfail a reply may decide (review 47's F1)

DECIDED_ON_A_REPLY = {
    "a TestCase under a computed module skipif": (
        "import unittest\nimport pytest\n\n"
        "pytestmark = pytest.mark.skipif(add(0, 0) is None, reason='not implemented')\n\n\n"
        "class TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
    "a TestCase method's computed skipif": (
        "import unittest\nimport pytest\n\nSUPPORTED = add(0, 0) is not None\n\n\n"
        "class TestAdd(unittest.TestCase):\n    @pytest.mark.skipif(not SUPPORTED, reason='not implemented')\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
    "xfail(run=RUNS) with RUNS from a reply": (
        "import pytest\n\nRUNS = add(0, 0) is not None\n\n\n"
        "@pytest.mark.xfail(run=RUNS, reason='not implemented')\ndef test_add():\n    assert add(1, 2) == 3\n"
    ),
    "a TestCase's only test under xfail": (
        "import unittest\nimport pytest\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    @pytest.mark.xfail(reason='known')\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(DECIDED_ON_A_REPLY))
def test_a_skip_or_xfail_a_reply_may_decide_is_no_evidence(shape, tmp_path):
    # real pytest passes NONE here ("1 skipped", "1 xfailed"): its only test is left out or
    # expected to fail on what the program returned, so the sandbox gives it a 0
    tests = DECIDED_ON_A_REPLY[shape]
    assert _real_passes(NONE, tests, "pytest", tmp_path)
    verdict = _verdict(NONE, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "NoEvidence" in verdict.detail, verdict
    if "only test under xfail" not in shape:
        assert _verdict(RIGHT, tests).passed


def test_a_string_condition_never_reads_a_global_computed_from_a_reply(tmp_path):
    # BROKEN holds what the program returned for add(0, 0): real pytest skips test_more for a
    # program returning None there, and passes it though it is wrong on negatives; the sandbox
    # cannot tell the condition (BROKEN is not one of its names) and runs the test
    tests = (
        "import pytest\n\nRESULT = add(0, 0)\nBROKEN = RESULT is None\n\n\n"
        "def test_add():\n    assert add(1, 2) == 3\n\n\n"
        "@pytest.mark.skipif('BROKEN', reason='not implemented')\ndef test_more():\n    assert add(-1, -2) == -3\n"
    )
    steering = "def add(a, b):\n    return None if a == b == 0 else abs(a) + abs(b)\n"
    assert _real_passes(steering, tests, "pytest", tmp_path)
    verdict = _verdict(steering, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert _verdict(RIGHT, tests).passed


def test_pytest_main_inside_a_test_does_not_narrow_the_tests_after_it():
    # (no real pytest here: a nested pytest.main of this file runs the test that calls it again)
    tests = (
        "import pytest\n\n\ndef test_first():\n    pytest.main(['-k', 'not second'])\n    assert add(1, 2) == 3\n\n\n"
        "def test_second():\n    assert add(-1, -2) == -3\n"
    )
    assert _verdict(RIGHT, tests).passed
    assert not _verdict(ABS, tests).passed
