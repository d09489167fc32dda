"""Review of red team 48's mends as merged (880ad08): wrong programs that still passed tests real
pytest fails them on, and right programs that scored 0 where pytest passes them.

G1. ``usefixtures`` marks (on a test, its class, the module's ``pytestmark``) were not read: a
    yield fixture's teardown checks never ran (a wrong program passed), and data such a fixture
    makes was missing (a right program failed).
G2. Fixtures of a scope wider than ``function`` were cached by name alone: two classes' own
    class-scoped ``data`` fixtures gave the second class the first one's value, and a wrong
    program passed the checks on the second.
G3. ``parametrize(..., indirect=True)`` handed the raw row to the test instead of the fixture's
    value: a right program failed. A pass now is no verdict (the harness has no ``request.param``).
G4. ``warnings.simplefilter("error")`` and ``pytest.mark.filterwarnings("error")`` never reach the
    sandbox: a program that warns passed. A pass with a call made under an ``error`` filter is no
    verdict now, as R3 does for recorded warnings.
G6. pytest's xunit methods written without the parameter pytest passes only where one is taken
    (``def setup_method(self):``, the usual shape, and ``def setup_class(cls):`` without
    ``@classmethod``) raised TypeError: every program scored 0, a right one too.
G7. A ``test*`` taking a fixture the tests define, also called by hand with a value of their own
    under ``__main__`` (``test_big(5)``), was taken for a helper (R9's guard) and pytest's run
    with the fixture never happened: a program wrong on the fixture's value passed.
G5. A skip mark bound to a name and used only as a decorator (``slow = pytest.mark.skip(...)``,
    ``@slow``) counted as placed on a reply (R1): a right program whose calls were all the
    module's own scored 0 (NoEvidence), where pytest passes it.
"""

from __future__ import annotations

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def my_sort(xs):\n    return sorted(xs)\n"
# right on lists of 3 or more, wrong on shorter ones: what the tests below check apart
SHORT_WRONG = "def my_sort(xs):\n    return list(xs) if len(xs) < 3 else sorted(xs)\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


USEFIXTURES_CHECKS = {
    "on the test": (
        "import pytest\nRESULTS = []\n\n@pytest.fixture\ndef verify():\n    yield\n"
        "    for xs, got in RESULTS:\n        assert got == sorted(xs)\n\n"
        "def test_long():\n    assert my_sort([3, 1, 2, 5]) == [1, 2, 3, 5]\n\n"
        "@pytest.mark.usefixtures('verify')\ndef test_short():\n    RESULTS.append(([2, 1], my_sort([2, 1])))\n"
    ),
    "on the class": (
        "import pytest\nRESULTS = []\n\n@pytest.fixture\ndef verify():\n    yield\n"
        "    assert all(got == sorted(xs) for xs, got in RESULTS)\n\n"
        "@pytest.mark.usefixtures('verify')\nclass TestSort:\n"
        "    def test_long(self):\n        assert my_sort([3, 1, 2, 5]) == [1, 2, 3, 5]\n"
        "    def test_short(self):\n        RESULTS.append(([2, 1], my_sort([2, 1])))\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(USEFIXTURES_CHECKS))
def test_a_usefixtures_fixture_s_teardown_checks_run(shape):
    tests = USEFIXTURES_CHECKS[shape]
    assert _verdict(RIGHT, tests).passed
    verdict = _verdict(SHORT_WRONG, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


def test_a_module_usefixtures_fixture_makes_the_data_a_right_program_needs():
    tests = (
        "import pytest\nDATA = {}\n\n@pytest.fixture\ndef load():\n    DATA['xs'] = [3, 1, 2]\n\n"
        "pytestmark = pytest.mark.usefixtures('load')\n\n"
        "def test_sort():\n    assert my_sort(DATA['xs']) == [1, 2, 3]\n"
    )
    verdict = _verdict(RIGHT, tests)
    assert verdict.passed, verdict


def test_two_classes_class_scoped_fixtures_of_one_name_keep_their_own_values():
    tests = (
        "import pytest\n\nclass TestLong:\n    @pytest.fixture(scope='class')\n    def data(self):\n"
        "        return [5, 3, 1, 4]\n    def test_it(self, data):\n        assert my_sort(data) == sorted(data)\n\n"
        "class TestShort:\n    @pytest.fixture(scope='class')\n    def data(self):\n        return [2, 1]\n"
        "    def test_it(self, data):\n        assert my_sort(data) == sorted(data)\n"
    )
    assert _verdict(RIGHT, tests).passed
    verdict = _verdict(SHORT_WRONG, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


def test_an_indirect_parametrize_makes_a_pass_no_verdict():
    tests = (
        "import pytest\n\n@pytest.fixture\ndef data(request):\n    return list(range(request.param, 0, -1))\n\n"
        "def test_long():\n    assert my_sort([3, 1, 2, 5]) == [1, 2, 3, 5]\n\n"
        "@pytest.mark.parametrize('data', [2], indirect=True)\ndef test_short(data):\n"
        "    assert my_sort(data) == sorted(data)\n"
    )
    with pytest.raises(VerifierError, match="indirectly"):
        _verdict(RIGHT, tests)


WARNS = "import warnings\ndef my_sort(xs):\n    warnings.warn('old api', DeprecationWarning)\n    return sorted(xs)\n"
ERROR_FILTERS = {
    "simplefilter": (
        "import warnings\n\ndef test_no_warning():\n    with warnings.catch_warnings():\n"
        "        warnings.simplefilter('error')\n        assert my_sort([2, 1]) == [1, 2]\n"
    ),
    "filterwarnings mark": (
        "import pytest\n\n@pytest.mark.filterwarnings('error')\ndef test_no_warning():\n"
        "    assert my_sort([2, 1]) == [1, 2]\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(ERROR_FILTERS))
def test_a_pass_under_an_error_warnings_filter_is_no_verdict(shape):
    with pytest.raises(VerifierError, match="warnings into errors"):
        _verdict(WARNS, ERROR_FILTERS[shape])


ALIASED_SKIPS = {
    "pytest": (
        "import pytest\n\nRESULTS = {n: my_sort(list(range(n, 0, -1))) for n in (2, 4)}\n"
        "slow = pytest.mark.skip(reason='slow')\n\n"
        "def test_small():\n    assert RESULTS[2] == [1, 2]\n    assert RESULTS[4] == [1, 2, 3, 4]\n\n"
        "@slow\ndef test_huge():\n    assert my_sort(list(range(10**6, 0, -1)))[0] == 1\n"
    ),
    "unittest": (
        "import unittest\n\nGOT = [my_sort([2, 1]), my_sort([3, 1, 2])]\nskip_slow = unittest.skip('slow')\n\n"
        "class TestSort(unittest.TestCase):\n    def test_values(self):\n"
        "        self.assertEqual(GOT, [[1, 2], [1, 2, 3]])\n\n"
        "    @skip_slow\n    def test_big(self):\n        self.assertEqual(my_sort(list(range(10**6, 0, -1)))[0], 1)\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(ALIASED_SKIPS))
def test_a_skip_mark_aliased_for_a_decorator_is_no_mark_placed_on_a_reply(shape):
    tests = ALIASED_SKIPS[shape]
    verdict = _verdict(RIGHT, tests)
    assert verdict.passed, verdict
    verdict = _verdict(SHORT_WRONG, tests)
    assert not verdict.passed, verdict


def test_an_aliased_skip_applied_under_an_if_on_a_reply_still_steers():
    tests = (
        "import pytest\n\nRESULT = my_sort([])\nslow = pytest.mark.skip(reason='slow')\n"
        "def test_sort():\n    assert my_sort([2, 1]) == [1, 2]\n\n"
        "if RESULT is None:\n    test_sort = slow(test_sort)\n"
    )
    verdict = _verdict("def my_sort(xs):\n    return None\n", tests)
    assert not verdict.passed, verdict


XUNIT_WITHOUT_PARAMETERS = {
    "setup_method(self)": (
        "class TestSort:\n    def setup_method(self):\n        self.data = [3, 1, 2]\n"
        "    def teardown_method(self):\n        self.data = None\n"
        "    def test_sort(self):\n        assert my_sort(self.data) == [1, 2, 3]\n"
    ),
    "setup_class(cls) without classmethod": (
        "class TestSort:\n    def setup_class(cls):\n        cls.data = [3, 1, 2]\n"
        "    def teardown_class(cls):\n        cls.data = None\n"
        "    def test_sort(self):\n        assert my_sort(self.data) == [1, 2, 3]\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(XUNIT_WITHOUT_PARAMETERS))
def test_xunit_methods_are_called_with_the_parameter_they_take_or_none(shape):
    verdict = _verdict(RIGHT, XUNIT_WITHOUT_PARAMETERS[shape])
    assert verdict.passed, verdict


def test_a_test_whose_fixture_the_tests_define_runs_though_also_called_by_hand():
    tests = (
        "import pytest\n\n@pytest.fixture\ndef big():\n    return [5, 4, 3, 2, 1]\n\n"
        "def test_short():\n    assert my_sort([3, 1, 2]) == [1, 2, 3]\n\n"
        "def test_any(big):\n    assert my_sort(big) == sorted(big)\n\n"
        "if __name__ == '__main__':\n    test_short()\n    test_any([3, 2, 1])\n"
    )
    assert _verdict(RIGHT, tests).passed
    wrong_on_long = "def my_sort(xs):\n    return sorted(xs) if len(xs) < 4 else list(xs)\n"
    verdict = _verdict(wrong_on_long, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
