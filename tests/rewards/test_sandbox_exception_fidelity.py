"""A candidate's exception reaches the tests as the interpreter sees it in one file (session 40).

The red team of 4101bcb (own exception classes, notes, chains) found that the candidate side read
``err.args``, ``kind.__mro__`` and ``kind.__str__`` through lookups the program controls (a
property named ``args``, a metaclass ``__mro__`` property or ``__getattribute__``), while
``except``, ``isinstance`` and ``str()`` use the C-level MRO, args slot and ``tp_str``; that an own
``__str__`` that raised became ``str(e) == ""``; that standard-library classes
(``json.JSONDecodeError``) came as look-alikes the tests' ``pytest.raises(json.JSONDecodeError)``
missed; that classes were merged by name (and made anew per raise for an own ``__str__``); that
notes and chains left out looked like none; that an own ``__str__`` was cut at 500 characters; and
that a class of the program's named ``MemoryError`` relabelled the verdict. Each case below is one
of those attacks (``/work/h40/redteam_sandbox/aNN_*.py``) run through the real sandbox, with what
the same program and tests do in one file.
"""

from __future__ import annotations

import re

import pytest
from sandbox_attacks import FORGE
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=60), program, tests)


# Wrong programs whose exception lies to the candidate side's introspection: in one file each
# fails these tests (a01.1-a01.3 of the red team); before, the sandbox passed all three.
LIES = {
    "args property": (
        "class E(ValueError):\n"
        "    @property\n"
        "    def args(self):\n"
        "        return ('must be positive',)\n"
        "def f(x):\n"
        "    raise E('totally wrong')\n",
        "import pytest\nwith pytest.raises(ValueError, match='must be positive'):\n    f(-1)\n",
    ),
    "metaclass __mro__": (
        "class M(type):\n"
        "    @property\n"
        "    def __mro__(cls):\n"
        "        return (cls, KeyError, LookupError, Exception, BaseException, object)\n"
        "class E(ValueError, metaclass=M):\n"
        "    pass\n"
        "def f(x):\n"
        "    raise E('nope')\n",
        "try:\n    f(1)\nexcept KeyError:\n    pass\n",
    ),
    "metaclass __getattribute__ of __str__": (
        "class M(type):\n"
        "    def __getattribute__(cls, name):\n"
        "        if name == '__str__':\n"
        "            return BaseException.__str__\n"
        "        return type.__getattribute__(cls, name)\n"
        "class E(ValueError, metaclass=M):\n"
        "    def __str__(self):\n"
        "        return 'real text'\n"
        "def f(x):\n"
        "    raise E('forged text')\n",
        "try:\n    f(1)\nexcept ValueError as e:\n    assert str(e) == 'forged text', str(e)\n",
    ),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", sorted(LIES))
def test_introspection_lies_fail_as_in_one_file(case, isolation):
    # before: passed (the reply was built from the property / the metaclass's answer)
    program, tests = LIES[case]
    verdict = _verdict(program, tests, isolation)
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_the_real_args_mro_and_str_cross():
    # the right program for the same classes: what the interpreter sees comes through
    program = "\n".join(
        re.sub(r"\b(E|M|f)\b", rf"\g<1>{i}", program)
        for i, (program, _) in enumerate((LIES[case] for case in sorted(LIES)), 1)
    )
    tests = (
        "import pytest\n"
        "with pytest.raises(ValueError, match='^totally wrong$'):\n    f1(1)\n"
        "with pytest.raises(ValueError, match='^real text$'):\n    f2(1)\n"
        "with pytest.raises(ValueError) as info:\n    f3(1)\n"
        "assert not isinstance(info.value, KeyError) and str(info.value) == 'nope'\n"
    )
    assert _verdict(program, tests).passed


# An own __str__ that raises or returns no str: in one file str(e), print(e) and match= raise
# (a01.4, a01.5); before, the sandbox gave str(e) == "" and these passed.
BROKEN_STR = {
    "raises": "class E(ValueError):\n    def __str__(self):\n        raise RuntimeError('boom')\n",
    "returns an int": "class E(ValueError):\n    def __str__(self):\n        return 42\n",
}


@pytest.mark.parametrize("case", sorted(BROKEN_STR))
def test_an_own_str_that_fails_fails_in_the_tests_too(case):
    program = BROKEN_STR[case] + "def f(x):\n    raise E('x')\n"
    for tests in (
        "try:\n    f(1)\nexcept ValueError as e:\n    assert str(e) == ''\n",
        "import pytest\nwith pytest.raises(ValueError, match=''):\n    f(1)\n",
        "try:\n    f(1)\nexcept ValueError as e:\n    print(e)\n",
    ):
        verdict = _verdict(program, tests)
        assert verdict.reason == "wrong_answer", (case, tests, verdict)
    # the class still crosses: tests that never take its str pass, as in one file
    verdict = _verdict(program, "import pytest\nwith pytest.raises(ValueError):\n    f(1)\n")
    assert verdict.passed, verdict
    # and an uncaught one still gives a verdict (its detail cannot hold its str)
    verdict = _verdict(program, "f(1)\n")
    assert verdict.reason == "wrong_answer" and verdict.detail.startswith("E: "), verdict


# Real suites that catch the standard library's classes by class: pypyr/pypyr
# tests/unit/pypyr/context/json_test.py at c4c7f43 (`with pytest.raises(json.JSONDecodeError)` around
# parsing 'value 1,value 2, value3'), sjlva/johnson
# tests/test_read_json.py (`raises(json.decoder.JSONDecodeError)` then `error.value.args[0]`),
# Lpshkn/timetable-classes tests/test_read_data.py (assertRaises(json.decoder.JSONDecodeError)).
STDLIB_PROGRAM = """
import json
import re
import statistics


def parse(text):
    return json.loads(text)


def mid(xs):
    return statistics.median(xs)


def pattern(text):
    return re.compile(text)
"""

STDLIB_TESTS = """
import json
import re
import statistics
import unittest

import pytest

with pytest.raises(json.JSONDecodeError):
    parse("value 1,value 2")
with pytest.raises(json.decoder.JSONDecodeError) as error:
    parse('{"a": x}')
assert error.value.args[0] == "Expecting value: line 1 column 7 (char 6)"
assert type(error.value) is json.JSONDecodeError
try:
    parse("[1,\\n 2,")
except ValueError as e:
    assert (e.msg, e.doc, e.pos, e.lineno, e.colno) == ("Expecting value", "[1,\\n 2,", 7, 2, 4), vars(e)
unittest.TestCase().assertRaises(json.decoder.JSONDecodeError, parse, "{")
with pytest.raises(statistics.StatisticsError, match="no median"):
    mid([])
with pytest.raises(re.error) as error:
    pattern("a(b")
assert (error.value.pos, error.value.pattern) == (1, "a(b"), vars(error.value)
"""


def test_stdlib_exceptions_cross_as_the_tests_classes():
    # before: "Failed: DID NOT RAISE <class 'json.decoder.JSONDecodeError'>" (a look-alike class
    # of that name over ValueError came)
    verdict = _verdict(STDLIB_PROGRAM, STDLIB_TESTS)
    assert verdict.passed, verdict


def test_a_stdlib_class_the_tests_did_not_import_falls_back_to_its_builtin_bases():
    # the harness never imports a module on the candidate's word: statistics is not imported by
    # these tests, so StatisticsError comes as a class of that name over ValueError, as before
    tests = (
        "import sys\nimport pytest\n"
        "with pytest.raises(ValueError, match='no median') as info:\n    mid([])\n"
        "assert type(info.value).__name__ == 'StatisticsError'\n"
        "assert 'statistics' not in sys.modules\n"
    )
    verdict = _verdict(STDLIB_PROGRAM, tests)
    assert verdict.passed, verdict


FORGED_STDLIB = {
    # a dotted name off the allowlist builds nothing (zipfile is never imported)
    "not allowlisted": (
        {"raised": "BadZipFile", "msg": "", "bases": ["zipfile.BadZipFile"]},
        "import sys\ntry:\n    f(1)\nexcept Exception as e:\n    assert type(e).__name__ == 'CandidateRaised', e\n"
        "assert 'zipfile' not in sys.modules\n",
        "pass",
    ),
    # fields of the wrong type are not set
    "fields of the wrong type": (
        {
            "raised": "JSONDecodeError",
            "msg": "m",
            "bases": ["json.decoder.JSONDecodeError", "ValueError"],
            "args": ["m"],
            "attrs": {"d": [["pos", "x"], ["doc", 5], ["__class__", "x"]]},
        },
        "import json\ntry:\n    f(1)\nexcept json.JSONDecodeError as e:\n"
        "    assert type(e) is json.JSONDecodeError and str(e) == 'm', e\n"
        "    assert not hasattr(e, 'pos') and not hasattr(e, 'doc') and vars(e) == {}, vars(e)\n",
        "pass",
    ),
    # an own __str__ over the real class stays a subclass of it (type(e) is not the stdlib's)
    "own str": (
        {"raised": "JSONDecodeError", "msg": "forged", "bases": ["json.decoder.JSONDecodeError"], "str": True},
        "import json\ntry:\n    f(1)\nexcept json.JSONDecodeError as e:\n    assert type(e) is json.JSONDecodeError\n",
        "wrong_answer",
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED_STDLIB))
def test_forged_stdlib_bases_grant_nothing(case):
    # the checks of "pass" cases hold where nothing was granted (a granted class or field fails them)
    frame, tests, reason = FORGED_STDLIB[case]
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    verdict = _verdict(program, tests)
    assert verdict.reason == reason, (case, verdict)


def test_one_class_per_program_class():
    # two classes of one name from a factory stay two (a06.1/a06.2: before, merged into one, so
    # a wrong program passed `type(a) is type(b)`); one class with its own __str__ is one class
    # over its bases for every raise (a05.8-a05.10: before, a fresh subclass per raise)
    program = (
        "def make():\n"
        "    class ParseError(ValueError):\n"
        "        pass\n"
        "    return ParseError\n"
        "A, B = make(), make()\n"
        "class Amount(ValueError):\n"
        "    def __str__(self):\n"
        "        return f'invalid amount: {self.args[0]}'\n"
        "def fa(x):\n    raise A('a')\n"
        "def fb(x):\n    raise B('b')\n"
        "def pay(x):\n    raise Amount(x)\n"
    )
    tests = (
        "import pytest\n"
        "def err(fn, x=1):\n"
        "    try:\n        fn(x)\n    except ValueError as e:\n        return e\n"
        "assert type(err(fa)) is not type(err(fb)) and type(err(fa)) is type(err(fa))\n"
        "first, second = err(pay, -1), err(pay, -2)\n"
        "assert type(first) is type(second) and type(first).__bases__ == (ValueError,)\n"
        "assert (str(first), str(second)) == ('invalid amount: -1', 'invalid amount: -2')\n"
        "with pytest.raises(type(first), match='-3'):\n    pay(-3)\n"
    )
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict
    wrong = tests.replace("type(err(fa)) is not type(err(fb))", "type(err(fa)) is type(err(fb))")
    assert _verdict(program, wrong).reason == "wrong_answer"


def test_an_own_str_comes_whole_within_the_budget():
    # a05.11 / a01.7: before, cut at 500 characters (a right program failed str(e) == expected, a
    # wrong one passed len(str(e)) <= 500)
    program = (
        "class Report(ValueError):\n"
        "    def __str__(self):\n"
        "        return '; '.join(f'item {i} invalid' for i in range(self.args[0]))\n"
        "def check(n):\n    raise Report(n)\n"
    )
    tests = (
        "import pytest\n"
        "expected = '; '.join(f'item {i} invalid' for i in range(60))\n"
        "with pytest.raises(ValueError) as info:\n    check(60)\n"
        "assert str(info.value) == expected and len(expected) > 500\n"
    )
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict
    verdict = _verdict(program, "try:\n    check(60)\nexcept ValueError as e:\n    assert len(str(e)) <= 500\n")
    assert verdict.reason == "wrong_answer", verdict
    # 300 KB, past the 128 KiB text budget: the class crosses (pytest.raises(ValueError) passes, as
    # in one file; before, by its name only, it failed), and reading its str in the tests raises
    tests = "import pytest\nwith pytest.raises(ValueError):\n    check(20_000)\n"
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict
    tests = "import pytest\nwith pytest.raises(ValueError, match='item 19999 invalid$'):\n    check(20_000)\n"
    verdict = _verdict(program, tests)
    assert verdict.reason == "wrong_answer" and "longer than the sandbox carries" in verdict.detail, verdict


LEFT_OUT = {
    # a01.6 / a01.6b: pytest 8 matches str(e) with the notes; before, notes left out matched
    "a note not a str": "    e.__notes__ = ['fine', 3]\n",
    "a note past the budget": "    e.add_note('x' * 200_000)\n",
}


@pytest.mark.parametrize("case", sorted(LEFT_OUT))
def test_notes_left_out_do_not_look_like_none(case):
    program = "def f(x):\n    e = ValueError('bad input')\n" + LEFT_OUT[case] + "    raise e\n"
    verdict = _verdict(program, "import pytest\nwith pytest.raises(ValueError, match='^bad input$'):\n    f(1)\n")
    assert verdict.reason == "wrong_answer", (case, verdict)


def test_a_chain_left_out_does_not_look_like_none():
    # a06.6: a context cycle set by hand; before, left out whole, and `__context__ is None` passed
    program = (
        "def f(x):\n    a, b = ValueError('a'), KeyError('b')\n    a.__context__, b.__context__ = b, a\n    raise a\n"
    )
    verdict = _verdict(program, "try:\n    f(1)\nexcept ValueError as e:\n    assert e.__context__ is None\n")
    assert verdict.reason == "wrong_answer", verdict


def test_an_own_class_named_memory_error_is_a_wrong_answer():
    # verdict.py relabelled a wrong_answer whose detail began "MemoryError" as "memory": a class
    # of the program's own named so (over ValueError) now crosses by that name and relabelled the
    # verdict's reason; the built-in MemoryError still gives "memory"
    own = "class MemoryError(ValueError):\n    pass\ndef f(x):\n    raise MemoryError('m')\n"
    verdict = _verdict(own, "f(1)\n")
    assert (verdict.reason, verdict.detail) == ("wrong_answer", "MemoryError: m"), verdict
    verdict = _verdict("def f(x):\n    raise MemoryError('m')\n", "f(1)\n")
    assert verdict.reason == "memory", verdict


MALFORMED = {
    "cls not an int": {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "cls": "1"},
    "cls negative": {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "cls": -1},
    "cls past 2**31": {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "cls": 1 << 31},
    "str another word": {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "str": "yes"},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_class_numbers_and_str_marks_break_the_channel(case):
    program = FORGE + f"def f(x):\n    forge({MALFORMED[case]!r})\n"
    verdict = _verdict(program, "try:\n    f(1)\nexcept BaseException:\n    pass\n")
    assert verdict.reason == "bad_reply", (case, verdict)
