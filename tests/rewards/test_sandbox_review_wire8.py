"""Review of wire8 (red team 49's X8/X11 mends): each test states what one file (real pytest) does."""

from __future__ import annotations

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

PROG = "def double(x):\n    return 2 * x\n\n\ndef total(xs):\n    return sum(xs)\n"


@pytest.mark.parametrize(
    "argument", ["map(double, [1, 2, 3])", "(double(x) for x in [1, 2, 3])", "iter([double(1), double(2), double(3)])"]
)
def test_f1_an_iterator_that_calls_the_candidate_is_passed(argument):
    # one file: passes. Drained under the channel's lock, the tests' map(double, ...) called
    # double, which waited on that lock: a deadlock, reason "timeout" (the candidate's 0)
    verdict = judge(PROG, f"assert total({argument}) == 12\n", timeout_s=8)
    assert verdict.passed, verdict


def test_f1_a_nested_iterator_that_calls_the_candidate_does_not_hang():
    # nested in a list it is still read under the lock: it fails closed, never a timeout
    verdict = judge(PROG, "assert total(*[map(double, [1, 2, 3])]) == 12\nassert total([1]) == 1\n", timeout_s=8)
    assert verdict.passed, verdict
    nested = judge(
        "def total(xs):\n    return sum(sum(x) for x in xs)\n\n\n" + PROG.split("\n\n\n")[0] + "\n",
        "assert total([map(double, [1, 2, 3])]) == 12\n",
        timeout_s=8,
    )
    assert not nested.passed and nested.reason != "timeout", nested


KEEP = "KEPT = []\n\n\ndef keep(xs):\n    global KEPT\n    KEPT = xs\n\n\ndef seen(it):\n    n = len(list(it))\n    return n, KEPT[:]\n"


def test_f2_a_generator_that_changes_a_kept_list_pushes_the_change():
    # one file: the program reads the generator, which appends to the list the program kept, so it
    # sees [0, 1, 2]. The harness computed the pushed changes before it read the generator: the
    # sandbox's copy stayed [] and a right program failed
    tests = (
        "log = []\nkeep(log)\n\n\ndef gen():\n    for i in range(3):\n        log.append(i)\n        yield i\n\n\n"
        "assert seen(gen()) == (3, [0, 1, 2])\nassert log == [0, 1, 2]\n"
    )
    verdict = judge(KEEP, tests, timeout_s=20)
    assert verdict.passed, verdict


def test_f1_groupby_groups_read_before_the_lock_keep_their_items():
    # guard for the patch: the groups of itertools.groupby are spent by the next read
    program = "def sizes(groups):\n    return [(k, len(list(g))) for k, g in groups]\n"
    tests = "import itertools\nassert sizes(itertools.groupby('aabccc')) == [('a', 2), ('b', 1), ('c', 3)]\n"
    verdict = judge(program, tests, timeout_s=20)
    assert verdict.passed, verdict


FORGER = '''def f(x):
    """
    >>> import sys
    >>> H = [m for m in list(sys.modules.values()) if hasattr(m, "Remote") and hasattr(m, "Channel")][0]
    >>> H.Remote.__call__ = (lambda call: lambda self, *a, **k: (call(self, *a, **k), 4)[1])(H.Remote.__call__)
    """
    return 0
'''


def test_x11_doctest_examples_of_the_reported_docstring_do_not_run_in_the_harness():
    # one file: the examples run in the program's process, find no harness (IndexError, reported
    # by doctest) and f(2) == 0 fails. Here they ran in the harness and rewrote its stand-ins
    tests = "import doctest\ndoctest.run_docstring_examples(f, globals())\nassert f(2) == 4\n"
    verdict = judge(FORGER, tests, timeout_s=20)
    assert not verdict.passed, verdict


def test_x11_a_docstring_with_examples_read_by_the_tests_is_no_verdict_on_a_pass():
    program = 'def f(x):\n    """Double.\n\n    >>> f(2)\n    4\n    """\n    return 2 * x\n'
    with pytest.raises(VerifierError, match="doctest examples"):  # bad_tests: no verdict
        judge(program, "assert 'Double' in f.__doc__\nassert f(2) == 4\n", timeout_s=20)
    plain = judge(program.replace("    >>> f(2)\n    4\n", ""), "assert 'Double' in f.__doc__\nassert f(2) == 4\n")
    assert plain.passed, plain
