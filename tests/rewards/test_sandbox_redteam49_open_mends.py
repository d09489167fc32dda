"""Red team 49's findings X8 and X11, mended: each test states what one file (real pytest) does.

X8. ``range``, iterators, generators and ``map``/``filter``/``zip`` objects could not be passed
    (``TypeError: cannot send a value of type range``): a right program scored 0. A ``range`` now
    crosses exactly; a built-in iterator is read to its end by the harness (up to a bound) and
    rebuilt with ``iter()`` in the sandbox. Where the program leaves part of it unread, the tests'
    own iterator is not as one file leaves it, so a pass is no verdict.
X11. A candidate function's stand-in answered ``__doc__`` with the harness's own docstring (a program
    with no docstring passed "is documented"), ``__name__`` raised and ``inspect.signature`` gave
    ``(*args, **kwargs)``. The candidate now reports each global function's name, qualified name,
    docstring and parameters; malformed reports fail closed (``bad_reply``).
"""

from __future__ import annotations

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

TOTAL = "def total(xs):\n    return sum(xs)\n"
OFF_BY_ONE = "def total(xs):\n    return sum(xs) + 1\n"


def _verdict(program, tests):
    return judge(program, tests, timeout_s=20)


# ---- X8: range and iterators as arguments -------------------------------------------------------

ITERABLES = {
    "range": "range(10)",
    "range_step": "range(9, -1, -1)",
    "iter_list": "iter(list(range(10)))",
    "generator": "(x for x in range(10))",
    "map": "map(int, '0123456789')",
    "filter": "filter(None, range(10))",
    "reversed": "reversed(range(10))",
    "islice": "__import__('itertools').islice(__import__('itertools').count(), 10)",
    "dict_values": "iter({'a': 4, 'b': 5, 'c': 36}.values())",
}


@pytest.mark.parametrize("shape", sorted(ITERABLES))
def test_x8_a_range_or_an_iterator_is_passed(shape):
    tests = f"assert total({ITERABLES[shape]}) == 45\n"
    right = _verdict(TOTAL, tests)  # one file: passes
    assert right.passed, right
    wrong = _verdict(OFF_BY_ONE, tests)  # one file: fails
    assert not wrong.passed and wrong.reason == "wrong_answer", wrong


def test_x8_a_range_crosses_exactly_both_ways():
    program = "def span(n):\n    return range(1, n, 2)\n\n\ndef last(r):\n    return (r.start, r.stop, r.step, r[-1])\n"
    tests = "assert span(8) == range(1, 8, 2)\nassert last(range(3, 30, 4)) == (3, 30, 4, 27)\n"
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict


def test_x8_zip_and_enumerate_items_keep_their_lists_shared():
    # the lists inside the iterator's items are the tests' own: in place changes come back
    program = "def fill(pairs):\n    for i, acc in pairs:\n        acc.append(i)\n"
    tests = "a, b = [], []\nfill(enumerate([a, b]))\nassert a == [0] and b == [1]\n"
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict


def test_x8_an_iterator_the_program_reads_whole_leaves_the_tests_one_empty():
    tests = "it = iter([1, 2, 3])\nassert total(it) == 6\nassert list(it) == []\n"
    verdict = _verdict(TOTAL, tests)  # one file: passes
    assert verdict.passed, verdict


def test_x8_an_iterator_the_program_reads_in_part_is_no_verdict_on_a_pass():
    # one file: the program reads one item, so list(it) == [2, 3] and the tests fail; here the
    # harness read all three: without the mark "list(it) == []" would pass a program it fails
    program = "def first(it):\n    return next(it)\n"
    tests = "it = iter([1, 2, 3])\nassert first(it) == 1\nassert list(it) == []\n"
    with pytest.raises(VerifierError, match="left part of an iterator argument unread"):
        _verdict(program, tests)


def test_x8_an_endless_iterator_fails_closed_past_the_bound():
    # one file: passes (the program reads three); here the harness cannot read it whole
    program = "def first3(it):\n    return [next(it) for _ in range(3)]\n"
    tests = "import itertools\n\nassert first3(itertools.count()) == [0, 1, 2]\n"
    verdict = _verdict(program, tests)
    assert not verdict.passed and "over 1000000 items" in verdict.detail, verdict


def test_x8_an_iterator_passed_twice_fails_closed():
    # one file: one object, so zip(it, it) pairs neighbours; a second, empty copy would not
    program = "def pairs(a, b):\n    return list(zip(a, b))\n"
    tests = "it = iter([1, 2, 3, 4])\nassert pairs(it, it) == [(1, 2), (3, 4)]\n"
    verdict = _verdict(program, tests)
    assert not verdict.passed and "cannot send one list_iterator twice" in verdict.detail, verdict


# ---- X11: the candidate function's own name, docstring and signature -----------------------------

DOC_CHECK = "assert add(1, 2) == 3\nassert add.__doc__ is not None and len(add.__doc__.strip()) > 5\n"


def test_x11_a_program_with_no_docstring_fails_a_docstring_check():
    wrong = _verdict("def add(a, b):\n    return a + b\n", DOC_CHECK)  # one file: AssertionError
    assert not wrong.passed and wrong.reason == "wrong_answer", wrong


def test_x11_a_program_with_a_docstring_passes_it_and_reads_as_its_own():
    program = 'def add(a, b):\n    """Add two numbers."""\n    return a + b\n'
    verdict = _verdict(program, DOC_CHECK + "assert add.__doc__ == 'Add two numbers.'\n")
    assert verdict.passed, verdict


def test_x11_the_name_qualname_and_signature_are_the_program_s():
    program = "def _impl(a, /, b, c=1, *rest, d, e=2, **more):\n    return a + b\n\n\nadd = _impl\n"
    tests = (
        "import inspect\n\nassert add(1, 2, d=0) == 3\n"
        "assert (add.__name__, add.__qualname__) == ('_impl', '_impl')\n"
        "ps = inspect.signature(add).parameters\n"
        "assert list(ps) == ['a', 'b', 'c', 'rest', 'd', 'e', 'more']\n"
        "assert [p.kind.name for p in ps.values()] == ['POSITIONAL_ONLY', 'POSITIONAL_OR_KEYWORD',\n"
        "    'POSITIONAL_OR_KEYWORD', 'VAR_POSITIONAL', 'KEYWORD_ONLY', 'KEYWORD_ONLY', 'VAR_KEYWORD']\n"
        "E = inspect.Parameter.empty\n"
        "assert [p.default is E for p in ps.values()] == [True, True, False, True, True, False, True]\n"
    )
    verdict = _verdict(program, tests)  # one file: passes
    assert verdict.passed, verdict
    wrong = _verdict("def add(x, y):\n    return x + y\n", tests)  # one file: fails (its names)
    assert not wrong.passed, wrong


def test_x11_an_async_def_s_signature_and_docstring():
    program = 'async def fetch(url, retries=3):\n    """Fetch it."""\n    return url\n'
    tests = (
        "import asyncio, inspect\n\nassert asyncio.run(fetch('u')) == 'u'\n"
        "assert inspect.iscoroutinefunction(fetch) and fetch.__doc__ == 'Fetch it.'\n"
        "assert str(inspect.signature(fetch)).startswith('(url, retries=')\n"
    )
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict


FORGED = {
    "doc_type": "{'add': ['add', 'add', 123, []]}",
    "doc_over_cap": "{'add': ['add', 'add', 'x' * 70000, []]}",
    "name_type": "{'add': [1, 'add', None, []]}",
    "kind": "{'add': ['add', 'add', None, [['a', 9, False]]]}",
    "parameter_name": "{'add': ['add', 'add', None, [['1a', 1, False]]]}",
    "duplicate": "{'add': ['add', 'add', None, [['a', 1, False], ['a', 1, False]]]}",
    "order": "{'add': ['add', 'add', None, [['a', 1, True], ['b', 1, False]]]}",
    "shape": "{'add': ['add', 'add', None]}",
    "not_a_dict": "[['add']]",
}


@pytest.mark.parametrize("shape", sorted(FORGED))
def test_x11_forged_metadata_fails_closed(shape):
    # the program replaces the candidate's report (la_candidate's globals: it runs from main())
    program = (
        "import sys\n\n"
        f"sys._getframe(1).f_globals['function_metadata'] = lambda namespace: {FORGED[shape]}\n\n\n"
        "def add(a, b):\n    return a + b\n"
    )
    verdict = _verdict(program, "assert add(1, 2) == 3\n")
    assert not verdict.passed and verdict.reason == "bad_reply", verdict


def test_x11_tests_the_metadata_steers_past_every_call_are_the_program_s_zero():
    # the tests call add only where it takes two parameters: a program with three makes them call
    # nothing; its metadata chose that path, so a 0 (as a module reported for a name), not no verdict
    tests = "import inspect\n\nif len(inspect.signature(add).parameters) == 2:\n    assert add(1, 2) == 3\n"
    wrong = _verdict("def add(a, b, c):\n    return a + b + c\n", tests)
    assert not wrong.passed and wrong.reason == "wrong_answer" and "reported" in wrong.detail, wrong
    right = _verdict("def add(a, b):\n    return a + b\n", tests)
    assert right.passed, right


def test_x11_an_async_def_with_no_docstring_fails_a_docstring_check():
    # its stand-in's class has a docstring of its own, which f.__doc__ gave before
    tests = "import asyncio\n\nassert asyncio.run(fetch('u')) == 'u'\nassert fetch.__doc__\n"
    wrong = _verdict("async def fetch(url):\n    return url\n", tests)  # one file: AssertionError
    assert not wrong.passed and wrong.reason == "wrong_answer", wrong
