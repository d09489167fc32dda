"""Red team 50's reproducers: each test fails on HEAD (58a2a4f) and states what one file does.

RT50-4 (a call's cost grew with every argument the program kept) is measured in
benchmarks, not here: a timed unit test would be flaky on a shared machine.
"""

from __future__ import annotations

import pytest
from sandbox_modes import one_file_passes, score

from lightning_agents.rewards import CodeVerifier


def _verdict(program, tests):
    return score(CodeVerifier(isolation="process", timeout_s=30), program, tests)


def _agrees(program, tests, passes):
    """One file and the sandbox give ``passes``; the sandbox's verdict."""
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests)
    assert verdict.passed is passes, verdict
    return verdict


# -- RT50-1: a dict's views as arguments and return values ---------------------------------------

VIEWS = {
    # name: (right program, wrong program, tests)
    "values_argument": (
        "def total(xs):\n    return sum(xs)\n",
        "def total(xs):\n    return 0\n",
        "d = {'a': 1, 'b': 2}\nassert total(d.values()) == 3\n",
    ),
    "items_argument": (
        "def best(items):\n    return max(items, key=lambda kv: kv[1])[0]\n",
        "def best(items):\n    return next(iter(items))[0]\n",
        "scores = {'a': 3, 'b': 5}\nassert best(scores.items()) == 'b'\n",
    ),
    "keys_set_operations_and_len": (
        "def common(a, b):\n    return sorted(a & b), len(a)\n",
        "def common(a, b):\n    return sorted(a), len(a)\n",
        "d1, d2 = {'x': 1, 'y': 2}, {'y': 0, 'z': 0}\nassert common(d1.keys(), d2.keys()) == (['y'], 2)\n",
    ),
    "values_lists_changed_in_place": (
        "def clear_all(vals):\n    for v in vals:\n        v.clear()\n",
        "def clear_all(vals):\n    for v in list(vals)[:1]:\n        v.clear()\n",
        "d = {'a': [1], 'b': [2]}\nclear_all(d.values())\nassert d == {'a': [], 'b': []}\n",
    ),
    "ordered_dict_values": (
        "def total(xs):\n    return sum(xs)\n",
        "def total(xs):\n    return 0\n",
        "from collections import OrderedDict\nassert total(OrderedDict(a=1, b=2).values()) == 3\n",
    ),
    "keys_returned": (
        "def keys_of(d):\n    return d.keys()\n",
        "def keys_of(d):\n    return list(d.values())\n",
        "assert sorted(keys_of({'b': 1, 'a': 2})) == ['a', 'b']\n",
    ),
}


@pytest.mark.parametrize("case", sorted(VIEWS))
def test_rt50_1_a_dict_view_crosses_as_in_one_file(case):
    """HEAD: ``TypeError: cannot send a value of type dict_values`` (a right program's 0), and a
    returned view is ``bad_reply``."""
    right, wrong, tests = VIEWS[case]
    _agrees(right, tests, True)
    _agrees(wrong, tests, False)


# -- RT50-2: the harness's TypeError for a change to a tests' guarded subclass -------------------

LOGGER = """
class Log:
    def __init__(self, lines):
        self.lines = lines
    def add(self, x):
        if not isinstance(x, str):
            raise TypeError('str only')
        self.lines.append(x)
"""
LOGGER_WRONG = LOGGER.replace("raise TypeError('str only')", "x = str(x)")
BOUNDED = """
import pytest
class Lines(list):
    def append(self, x):
        if len(self) >= 10:
            raise OverflowError("full")
        list.append(self, x)
lines = Lines()
log = Log(lines)
with pytest.raises(TypeError):
    log.add(3)
"""


def test_rt50_2_a_guard_refusal_is_no_pass_for_a_program_that_raises_nothing():
    """The tests' ``Lines.append`` lets the append through in one file, so the wrong program
    (accepts an int) raises nothing there and fails ``pytest.raises(TypeError)``. HEAD: the harness
    refuses the change to the tests' subclass with its own ``TypeError``, which
    ``pytest.raises(TypeError)`` takes: a pass. Patched: no verdict (the guess is the harness's)."""
    assert one_file_passes(LOGGER, BOUNDED)
    assert not one_file_passes(LOGGER_WRONG, BOUNDED)
    assert _verdict(LOGGER, BOUNDED).passed  # the right program changes nothing
    try:
        verdict = _verdict(LOGGER_WRONG, BOUNDED)
    except Exception as err:  # noqa: BLE001 -- no verdict (VerifierError) is the patched answer
        assert "changed an argument of the tests' class Lines" in str(err), err
    else:
        assert not verdict.passed, verdict


# -- RT50-3: a reply the harness takes but cannot send back ---------------------------------------


def _deep(levels):
    return (
        f"def build(n):\n    x = []\n    for _ in range({levels}):\n        x = [x]\n    return x\n"
        "def insert(tree, v):\n    return tree\n"
    )


PASSED_BACK = "import pytest\nt = build(3)\nwith pytest.raises(TypeError):\n    insert(t, 'x')\n"


@pytest.mark.parametrize("levels", [199, 200])
def test_rt50_3_a_program_cannot_turn_its_zero_into_no_verdict_with_a_deep_reply(levels):
    """``insert`` should raise ``TypeError`` and does not: one file fails. HEAD: a reply 200 lists
    deep decodes (values from depth 0) but cannot be sent back as an argument (from depth 1), so the
    harness's own ``TypeError`` satisfies ``pytest.raises`` and the X2 mark makes the pass no verdict,
    which training leaves out: the program chose NaN over its 0. Patched: such a reply is
    ``bad_reply``, a 0; 199 levels go both ways as before."""
    assert not one_file_passes(_deep(levels), PASSED_BACK)
    verdict = _verdict(_deep(levels), PASSED_BACK)  # raises VerifierError on HEAD for 200
    assert not verdict.passed, verdict


# -- RT50-5: an async def given an iterator argument ----------------------------------------------

ASYNC_TOTAL = "async def total(xs):\n    return sum(xs)\n"


@pytest.mark.parametrize(
    "argument", ["iter([1, 2, 3])", "(x for x in [1, 2, 3])", "map(int, '123')"], ids=["iter", "genexpr", "map"]
)
def test_rt50_5_an_async_def_given_an_iterator_is_judged(argument):
    """HEAD: the candidate marks ``rest`` when the call returns the coroutine, which has read
    nothing yet, so every pass (the right program's) is no verdict: ``VerifierError: total left
    part of an iterator argument unread``. One file passes it; a wrong program still fails."""
    tests = f"import asyncio\nassert asyncio.run(total({argument})) == 6\n"
    _agrees(ASYNC_TOTAL, tests, True)
    _agrees("async def total(xs):\n    return 0\n", tests, False)
