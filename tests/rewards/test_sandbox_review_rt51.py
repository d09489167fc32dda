"""Review of a8e6a21 (RT51-3: a call's value numbers its containers): right programs the new
numbering fails. Each case states what one file does; each fails on a8e6a21.

F1: a getter of the program's own rows read twice over the rows (``return self.rows[i]``): every row
named again once quiet stays live for the rest of the verdict (``Session.woke``), so every later call
compares all of them on both sides: quadratic (2,000 rows, 2 passes: 1.9 s -> 15.4 s, past the
default 10 s timeout).
F2: a function returning many fresh containers (65,000 pairs): the reply's ``"dropped"`` names each one, number by
number, so a value that fit under ``max_reply_bytes`` (1 MiB) no longer does (``candidate_died``).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

import lightning_agents

_REWARDS_TESTS = pathlib.Path(lightning_agents.__file__).resolve().parent.parent / "tests" / "rewards"
if str(_REWARDS_TESTS) not in sys.path:
    sys.path.insert(0, str(_REWARDS_TESTS))

from sandbox_modes import one_file_passes, score  # noqa: E402

from lightning_agents.rewards import CodeVerifier  # noqa: E402


def _agrees(program, tests, passes, **verifier):
    """One file and the sandbox (the process mode, default limits unless ``verifier``) give ``passes``."""
    assert one_file_passes(program, tests) is passes
    verdict = score(CodeVerifier(isolation="process", **verifier), program, tests)
    assert verdict.passed is passes, verdict
    return verdict


ROWS = """
class M:
    def __init__(self, n):
        self.rows = [[i, i + 1] for i in range(n)]
    def row(self, i):
        return self.rows[i]
"""

LIVE = """
def live():
    import gc
    return [len(o.snaps) for o in gc.get_objects() if type(o).__name__ == "Session"]
"""


def test_f1_rows_read_twice_do_not_all_stay_live():
    """F1, deterministic: after two passes of a getter over 300 rows the tests let go, the
    candidate still compares every row on every call (a8e6a21: ``[300]``-ish); a bounded few now."""
    tests = "m = M(300)\nfor _ in range(2):\n    for i in range(300):\n        assert m.row(i)[0] == i\nn = live()\nassert n[0] <= 64, n\n"
    _agrees(ROWS + LIVE, tests.replace("n = live()\nassert n[0] <= 64, n\n", ""), True)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), ROWS + LIVE, tests)
    assert verdict.passed, verdict


def test_f1_a_getter_of_own_rows_read_twice_stays_linear():
    """F1, as a verdict: 2,500 rows read twice (5,001 calls) pass within the default 10 s, as on
    a7dd0b2 (about 2.5 s here); a8e6a21 times out (quadratic)."""
    tests = "m = M(2500)\nfor _ in range(2):\n    for i in range(2500):\n        assert m.row(i)[0] == i\n"
    _agrees(ROWS, tests, True, timeout_s=10)


BIG = """
def pairs(n):
    return [[i, i + 1] for i in range(n)]
"""


def test_f2_a_value_of_many_fresh_lists_still_fits_the_reply_cap():
    """F2: 65,000 fresh pairs (about 880 kB as JSON) fit the default 1 MiB reply cap on a7dd0b2;
    on a8e6a21 the reply also names each pruned pair in ``"dropped"`` (about 430 kB more)."""
    _agrees(BIG, "r = pairs(65000)\nassert len(r) == 65000 and r[7] == [7, 8]\n", True, timeout_s=30)


@pytest.mark.parametrize("n", [1, 3])
def test_f2_fresh_results_keep_their_own_identity(n):
    """The runs of ``"dropped"`` drop what they name and no more: a kept list next to fresh ones
    stays the program's own (one file: True)."""
    program = "class K:\n    def __init__(self):\n        self.own = []\n    def get(self, n):\n        return [[i] for i in range(n)] + [self.own] + [[0]] * n\n    def add(self, x):\n        self.own.append(x)\n"
    tests = f"k = K()\nr = k.get({n})\nk.add(1)\nassert r[{n}] == [1] and r[0] == [0]\n"
    _agrees(program, tests, True, timeout_s=30)


# -- the runs of a reply's "dropped" (F2's patch) ------------------------------------------------

from lightning_agents.rewards._jail import la_wire  # noqa: E402


def test_dropped_runs_round_trip_in_the_order_given():
    numbers = [3, 7, 8, 9, 12, 13, 5, 6, 20]
    runs = la_wire.dropped_runs(numbers)
    assert runs == [3, [7, 9], [12, 13], [5, 6], 20]
    assert la_wire.dropped_numbers(runs, 21) == numbers


def test_dropped_runs_leave_what_is_not_an_int_for_the_harness_to_refuse():
    assert la_wire.dropped_runs([True, 1, 1, "2"]) == [True, 1, 1, "2"]
    assert la_wire.dropped_runs("x") == "x"  # refused whole, as "bad dropped numbers"


@pytest.mark.parametrize(
    "dropped",
    [[[0, 10**9]], [[2, 1]], [[1, 1]], [[-1, 2]], [[0, 1, 2]], [[0, True]], [[0, 4]] * 3, "x"],
)
def test_a_forged_dropped_run_is_refused_before_it_is_spelled_out(dropped):
    """A run past the table, backwards, of one number, malformed, or repeated past the table's
    length (a memory bomb: ``[[0, 4]] * 3`` names 15 numbers of a 5-number table) is a
    ``WireError`` (the harness's ``bad_reply``)."""
    with pytest.raises(la_wire.WireError, match="dropped"):
        la_wire.dropped_numbers(dropped, 5)


def test_a_forged_run_over_numbers_never_given_is_bad_reply():
    """The candidate's prune, forged (as test_sandbox_kept_arguments' forgeries are) to name a run
    past what the harness numbered: the verdict is ``bad_reply``; one file passes."""
    program = (
        "import sys\n"
        "_wire = sys.modules['la_wire'] if sys.argv[0].endswith('la_candidate.py') else None\n"
        "if _wire is not None and hasattr(_wire, 'Session'):\n"
        "    _wire.Session.prune = lambda self: [[0, 99]]\n"
        "def f(a):\n"
        "    return [a]\n"
    )
    tests = "assert f([1]) == [[1]]\n"
    assert one_file_passes(program, tests)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
    assert "dropped" in verdict.detail, verdict
