"""A candidate's exception reaches the tests with its notes and its chain, as in one file.

Before, neither ``__notes__`` nor ``__cause__``/``__context__`` was sent: ``raise ParseError(...)
from err`` came with ``__cause__`` ``None``, and a right solution failed tests that check what an
error was caused by (``assert isinstance(info.value.__cause__, ValueError)``) or what note it
carries (``add_note``). Each is now sent whole or not at all (a chain cut short could end where a
test that walks it to its root expects; not sent at all is what the tests saw before), inside the
reply's existing budgets (links count as members and levels, notes as text).
"""

from __future__ import annotations

import pytest
from sandbox_attacks import FORGE
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier

PROGRAM = r"""
class ParseError(ValueError):
    pass


def parse(text):
    try:
        return int(text)
    except ValueError as err:
        raise ParseError(f"not a number: {text!r}") from err


def lookup(table, key):
    try:
        return table[key]
    except KeyError:
        raise LookupError("missing " + key)


def hidden(x):
    try:
        {}[x]
    except KeyError:
        raise ValueError("clean") from None


def noted(x):
    err = ValueError(x)
    err.add_note("while checking the input")
    err.add_note(f"value {x}")
    raise err


def deep(n):
    try:
        if n == 0:
            raise KeyError("root")
        deep(n - 1)
    except KeyError as err:
        raise KeyError(f"level {n}") from err
"""

TESTS = r"""
import pytest

with pytest.raises(ValueError) as info:
    parse("x")
assert type(info.value).__name__ == "ParseError"
assert isinstance(info.value.__cause__, ValueError), info.value.__cause__
assert "invalid literal" in str(info.value.__cause__)
assert info.value.__context__ is info.value.__cause__ and info.value.__suppress_context__ is True

with pytest.raises(LookupError) as info:
    lookup({}, "a")
assert info.value.__cause__ is None and not info.value.__suppress_context__
assert isinstance(info.value.__context__, KeyError) and info.value.__context__.args == ("a",)

with pytest.raises(ValueError) as info:
    hidden(1)
assert info.value.__cause__ is None and info.value.__suppress_context__
assert isinstance(info.value.__context__, KeyError)

with pytest.raises(ValueError) as info:
    noted(3)
assert info.value.__notes__ == ["while checking the input", "value 3"]

with pytest.raises(KeyError) as info:
    deep(20)
err, links = info.value, 0
while err.__cause__ is not None:
    err, links = err.__cause__, links + 1
assert links == 21 and err.args == ("root",), (links, err)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_notes_and_chains_reach_the_tests(isolation):
    # before: "AssertionError: None" at the first check of __cause__
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), PROGRAM, TESTS)
    assert verdict.passed, verdict


WRONG = {
    "another cause": PROGRAM.replace(
        'raise ParseError(f"not a number: {text!r}") from err', "raise ParseError(text) from TypeError(text)"
    ),
    "no cause": PROGRAM.replace('raise ParseError(f"not a number: {text!r}") from err', "raise ParseError(text)"),
    "another note": PROGRAM.replace('err.add_note(f"value {x}")', 'err.add_note("value")'),
    "a shorter chain": PROGRAM.replace('raise KeyError("root")', 'raise KeyError("root") from None').replace(
        "if n == 0:", "if n == 1:"
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_chains_and_notes_fail(case):
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), WRONG[case], TESTS)
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_what_does_not_fit_is_left_out_whole():
    # 40 links are past the reply's 32 levels: no link of the program's comes (a chain cut at 32
    # would end at a "root" that is not the program's), but a stand-in link does (ChainLeftOut, a
    # CandidateRaised), so `__cause__ is None` fails as in one file; a note past the text budget:
    # the one note NOTES_LEFT_OUT, not none (pytest 8 matches the notes with str(e)); a cycle set
    # by hand: a stand-in link, and no hang
    program = PROGRAM + (
        "def noisy(x):\n"
        "    err = ValueError(x)\n"
        "    err.add_note('n' * 200_000)\n"
        "    raise err\n"
        "def cycle(x):\n"
        "    a, b = ValueError('a'), KeyError('b')\n"
        "    a.__context__, b.__context__ = b, a\n"
        "    raise a\n"
    )
    tests = (
        "import pytest\n"
        "with pytest.raises(KeyError) as info:\n    deep(40)\n"
        "cause = info.value.__cause__\n"
        "assert info.value.args == ('level 40',)\n"
        "assert type(cause).__name__ == 'CandidateRaised' and 'ChainLeftOut' in str(cause), repr(cause)\n"
        "assert cause.__cause__ is None and not isinstance(cause, KeyError)\n"
        "with pytest.raises(ValueError) as info:\n    noisy(1)\n"
        "assert len(info.value.__notes__) == 1 and 'left out' in info.value.__notes__[0]\n"
        "with pytest.raises(ValueError, match='^1$'):\n    noisy(1)\n"
        "with pytest.raises(ValueError) as info:\n    cycle(1)\n"
        "assert type(info.value.__context__).__name__ == 'CandidateRaised'\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), program, tests)
    assert verdict.reason == "wrong_answer" and "notes left out" in verdict.detail, verdict
    # everything before the anchored match holds
    verdict = score(
        CodeVerifier(isolation="process", timeout_s=60), program, tests.split("with pytest.raises(ValueError, match")[0]
    )
    assert verdict.passed, verdict


MALFORMED = {
    "notes not a list": {"raised": "ValueError", "msg": "m", "notes": "n"},
    "a note not a str": {"raised": "ValueError", "msg": "m", "notes": ["n", 1]},
    "cause malformed": {"raised": "ValueError", "msg": "m", "cause": {"ok": 1}},
    "context not a reply": {"raised": "ValueError", "msg": "m", "context": "KeyError"},
    "same without a cause": {"raised": "ValueError", "msg": "m", "same": True},
    "same and a context": {
        "raised": "ValueError",
        "msg": "m",
        "cause": {"raised": "KeyError", "msg": "k"},
        "context": {"raised": "KeyError", "msg": "k"},
        "same": True,
    },
    "same not true": {"raised": "ValueError", "msg": "m", "cause": {"raised": "KeyError", "msg": "k"}, "same": 1},
    "suppress not true": {"raised": "ValueError", "msg": "m", "suppress": False},
    "chained 100 deep": None,
}
NESTED = (
    "frame = {'raised': 'ValueError', 'msg': 'm'}\n"
    "for _ in range(100):\n"
    "    frame = {'raised': 'KeyError', 'msg': 'm', 'cause': frame}\n"
)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_notes_and_links_break_the_channel(case):
    frame = "frame" if MALFORMED[case] is None else repr(MALFORMED[case])
    program = FORGE + NESTED + f"def f(x):\n    forge({frame})\n"
    tests = "try:\n    f(1)\nexcept BaseException:\n    pass\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "bad_reply", (case, verdict)


def test_a_forged_link_is_rebuilt_as_any_exception():
    # a link is an exception reply like any other: a StopIteration in it is the candidate's
    # error, and its own "over" adds no note
    frame = {
        "raised": "ValueError",
        "msg": "m",
        "args": ["m"],
        "cause": {"raised": "StopIteration", "msg": "", "over": True},
    }
    tests = (
        "try:\n    f(1)\nexcept ValueError as err:\n"
        "    assert isinstance(err.__cause__, StopIteration) or getattr(err.__cause__, '__notes__', None)\n"
    )
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", verdict
