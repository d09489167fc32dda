"""Review of red team 49's mends (X1, X4, X6, X12): holes left and what they made too strict.

V1. X1 runs every pytest-style ``Test*`` class, named or not, but skipped only a class with an
    ``__init__`` of its own. pytest collects no class with any ``__init__`` or ``__new__`` but
    ``object``'s, nor one whose ``__test__`` is false: a ``NamedTuple`` row or a subclass of a helper
    that takes arguments was instantiated bare (its ``TypeError``), and a template base class with
    ``__test__ = False`` ran with its unset values, each failing a right program pytest passes.
V2. X4 watched only the modules imported, not a submodule reached through its parent's attribute:
    ``import os`` then ``os.path.exists = ...`` passed a program that stats what it must not.
V3. X4 noted every public callable of every module imported while the tests ran (numpy's 130
    submodules, 2,900 names), compared at each call: about 300 us a call. It now notes only the
    names the tests' source spells (``la_harness.source_names``).
V4. X12 watched ``process_time``, ``thread_time`` and ``getrusage``; ``os.times()`` and
    ``time.clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`` read the same CPU time and passed a slow program.
V5. X6 mapped ``doctest.testmod()`` with no module only: ``import __main__; testmod(__main__)``
    still tested the harness, so its examples never ran.
"""

from __future__ import annotations

import ast

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards._jail import la_harness
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

DOUBLE = "def double(x):\n    return 2 * x\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


# V1 ----------------------------------------------------------------------------------------------

CONSTRUCTED_CLASSES = {
    "subclass of a helper that takes arguments": (
        "class Checker:\n    def __init__(self, func):\n        self.func = func\n\n\n"
        "class TestRunner(Checker):\n    def test_cases(self):\n"
        "        for a, b in [(1, 2), (3, 6)]:\n            assert self.func(a) == b\n\n\n"
        "def test_main():\n    TestRunner(double).test_cases()\n"
    ),
    "NamedTuple row with a test method": (
        "from typing import NamedTuple\n\n\nclass TestRow(NamedTuple):\n    x: int\n    want: int\n\n"
        "    def test_row(self):\n        assert double(self.x) == self.want\n\n\n"
        "def test_rows():\n    for row in [TestRow(1, 2), TestRow(3, 6)]:\n        row.test_row()\n"
    ),
    "template with __test__ = False": (
        "class TestTemplate:\n    __test__ = False\n    expected = None\n\n"
        "    def test_value(self):\n        assert double(1) == self.expected\n\n\n"
        "class TestTwo(TestTemplate):\n    __test__ = True\n    expected = 2\n\n\n"
        "def test_direct():\n    assert TestTemplate.expected is None\n"
    ),
}


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(CONSTRUCTED_CLASSES))
def test_a_test_class_with_an_inherited_constructor_is_not_collected(shape):
    # one file (pytest 9): "cannot collect test class ... because it has a __init__/__new__
    # constructor", 1 passed
    assert _verdict(DOUBLE, CONSTRUCTED_CLASSES[shape]).passed


# V2 ----------------------------------------------------------------------------------------------

STAT_BY_HAND = (
    "import os\n\n\ndef test_no_stat():\n    seen = []\n    orig = os.path.exists\n"
    "    os.path.exists = lambda p: seen.append(p) or False\n    try:\n"
    '        assert plan(["a", "b"]) == ["a", "b"]\n    finally:\n        os.path.exists = orig\n'
    "    assert seen == []\n"
)
STATS = "import os\n\n\ndef plan(paths):\n    return [p for p in paths if not os.path.exists(p)]\n"


@needs_bwrap
def test_a_submodule_function_replaced_through_its_parent_is_no_verdict():
    # one file: the stub records both paths and the program fails; here it stats its own os.path
    with pytest.raises(VerifierError, match=r"replaced posixpath\.exists by hand"):
        _verdict(STATS, STAT_BY_HAND)


# V3 ----------------------------------------------------------------------------------------------


def test_only_the_names_the_tests_spell_are_watched():
    tree = ast.parse(
        'import os\nfrom os import path\nos.remove = f\nsetattr(os, "unlink", g)\nmp.setattr("os.rmdir", h)'
    )
    names = la_harness.source_names(tree)
    assert {"os", "path", "remove", "unlink", "rmdir", "f", "setattr"} <= names
    assert "listdir" not in names


# V4 ----------------------------------------------------------------------------------------------

CPU_READS = {
    "os.times": "t0 = os.times()\n    {call}\n    assert os.times().user - t0.user < 0.5\n",
    "clock_gettime": (
        "t0 = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)\n    {call}\n"
        "    assert time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - t0 < 0.5\n"
    ),
}
SLOW = "def count_evens(n):\n    return sum(1 for i in range(n * 400) if i % 800 == 0)\n"


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(CPU_READS))
def test_a_pass_resting_on_another_cpu_clock_is_no_verdict(shape):
    body = CPU_READS[shape].format(call="assert count_evens(200000) == 100000")
    tests = f"import os\nimport time\n\n\ndef test_fast():\n    {body}"
    with pytest.raises(VerifierError, match="after calling the candidate"):
        _verdict(SLOW, tests)


@needs_bwrap
def test_a_wall_clock_read_through_clock_gettime_changes_nothing():
    tests = (
        "import time\n\n\ndef test_fast():\n    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)\n"
        "    assert double(2) == 4\n    assert time.clock_gettime(time.CLOCK_MONOTONIC) - t0 < 10\n"
    )
    assert _verdict(DOUBLE, tests).passed


# V5 ----------------------------------------------------------------------------------------------

MAIN_DOCTEST = (
    'import doctest\nimport __main__\n\n\ndef example():\n    """\n    >>> double(3)\n    6\n    """\n\n\n'
    'if __name__ == "__main__":\n    doctest.testmod(__main__, raise_on_error=True)\n    assert double(2) == 4\n'
)


@needs_bwrap
def test_doctest_testmod_of_main_runs_the_tests_own_examples():
    # one file (script): DocTestFailure for the program wrong off 2; here it tested the harness
    wrong = "def double(x):\n    return 4 if x == 2 else x\n"
    assert not _verdict(wrong, MAIN_DOCTEST).passed


# V6 ----------------------------------------------------------------------------------------------

CLASS_PATCHED_BY_HAND = (
    "import logging\n\n\ndef test_no_warning():\n    warned = []\n    orig = logging.Logger.warning\n"
    "    logging.Logger.warning = lambda self, *a, **k: warned.append(a)\n    try:\n"
    "        assert double(2) == 4\n    finally:\n        logging.Logger.warning = orig\n    assert warned == []\n"
)
WARNS = "import logging\n\n\ndef double(x):\n    logging.getLogger('x').warning('doubling %s', x)\n    return 2 * x\n"


@needs_bwrap
def test_a_method_of_a_module_class_replaced_by_hand_is_no_verdict():
    # one file: the stub records the warning and the program fails; here it logs in its own process
    with pytest.raises(VerifierError, match=r"replaced Logger\.warning by hand"):
        _verdict(WARNS, CLASS_PATCHED_BY_HAND)
