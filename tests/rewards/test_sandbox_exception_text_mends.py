"""An exception's text against the values its args store (red-team findings F1, F2, F6, F7 of dcf185a).

Where a built-in exception's ``args`` hold a subclass of a plain type, the candidate checks that
the exception's ``str`` in one file (the value's own ``__str__``/``__repr__``) is the ``str`` the
harness's exception, built from the stored values, would show. Before: only the first 500
characters were compared (F1: a text differing past them kept its args, and the harness showed the
stored text), the program's ``__str__`` was read a second time for the check (F2: one that counts
its calls showed the stored text only to the check), and a ``KeyError`` rebuilt from its message
showed that message quoted (F7: ``str(KeyError(S.NF))`` came as ``"'<S.NF: 404>'"``).
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier

# Programs that fail these tests in one file: each must fail them here too (each passed before).
ONE_FILE_FAILS = {
    # F1: the text is 600 a's and a tail; the stored value is the 600 a's alone
    "a text that differs from its stored args' text past 500 characters": (
        "class Long(str):\n"
        "    def __str__(self):\n"
        "        return str.__str__(self) + 'TAIL'\n"
        "def f():\n"
        "    raise ValueError(Long('a' * 600))\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == 'a' * 600, len(str(e))\n",
    ),
    # F1, in a repr: the args' text differs from the stored one's only past 500 characters
    "args whose repr differs from the stored args' past 500 characters": (
        "class N(int):\n    def __repr__(self):\n        return '5'\ndef f():\n    raise ValueError('x' * 600, N(7))\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == str(('x' * 600, 7))\n",
    ),
    # F2: a __str__ that says 404 on its first call and 5 after: one file reads it once ("404")
    "a __str__ that counts its calls": (
        "class Shown(int):\n"
        "    calls = 0\n"
        "    def __str__(self):\n"
        "        Shown.calls += 1\n"
        "        return '404' if Shown.calls == 1 else '5'\n"
        "def f():\n"
        "    raise ValueError(Shown(5))\n",
        "import pytest\nwith pytest.raises(ValueError, match='^5$'):\n    f()\n",
    ),
    # F2, in a group's member (its message is built apart from the top's)
    "a __str__ that counts its calls, in a group's member": (
        "class Shown(int):\n"
        "    calls = 0\n"
        "    def __str__(self):\n"
        "        Shown.calls += 1\n"
        "        return '404' if Shown.calls == 1 else '5'\n"
        "def f():\n"
        "    raise ExceptionGroup('g', [ValueError(Shown(5))])\n",
        "try:\n    f()\nexcept* ValueError as g:\n    assert str(g.exceptions[0]) == '5'\n",
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_FILE_FAILS))
def test_what_fails_in_one_file_fails_here(case):
    program, tests = ONE_FILE_FAILS[case]
    assert not one_file_passes(program, tests, case)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", (case, verdict)


# A right program: each check passes in one file and here.
RIGHT = r"""
import collections
import enum


class S(enum.IntEnum):
    NF = 404


class O:
    def __repr__(self):
        return "O!"


class Shown(int):
    calls = 0

    def __str__(self):
        Shown.calls += 1
        return "404" if Shown.calls == 1 else "5"


P = collections.namedtuple("P", "x y")


class Long(str):
    def __str__(self):
        return str.__str__(self) + "TAIL"


def bad_status():
    raise ValueError("bad status", S.NF)


def duplicates():
    raise ValueError("dup", collections.Counter("aab"))


def out_of_range():
    raise IndexError(P(1, 2))


def long_text():
    raise ValueError(Long("a" * 600))


def in_a_group():
    raise ExceptionGroup("g", [KeyError(S.NF)])


def missing_status():
    raise KeyError(S.NF)


def missing_object():
    raise KeyError(O())


def counted():
    raise ValueError(Shown(5))
"""

# Checks of the right program, each passing in one file; each failed before (the old failure in
# its comment).
RIGHT_CHECKS = {
    # F7 (before: "'<S.NF: 404>'", the message quoted); e.args (F6, before: ('<S.NF: 404>',))
    "a KeyError whose key's repr is not its stored value's": """
with pytest.raises(KeyError) as e:
    missing_status()
assert str(e.value) == "<S.NF: 404>", str(e.value)
assert e.value.args == (404,)
with pytest.raises(KeyError, match="^<S"):
    missing_status()
""",
    # F7 (before: "'O!'"): args that are not plain data, rebuilt from the message
    "a KeyError of an object of the program's own": """
with pytest.raises(KeyError) as e:
    missing_object()
assert str(e.value) == "O!", str(e.value)
assert repr(e.value) == "KeyError(O!)", repr(e.value)
""",
    # F7 in a group's member, rebuilt from its message (before: "'<S.NF: 404>'")
    "a KeyError member of a group": """
try:
    in_a_group()
except* KeyError as g:
    assert str(g.exceptions[0]) == "<S.NF: 404>", str(g.exceptions[0])
""",
    # F6 (before: e.args == ("('bad status', <S.NF: 404>)",), all args lost)
    "an IntEnum among several args": """
with pytest.raises(ValueError) as e:
    bad_status()
assert e.value.args == ("bad status", 404)
assert str(e.value) == "('bad status', <S.NF: 404>)", str(e.value)
""",
    # F6 (before: IndexError, e.args had one item)
    "a Counter among several args": """
with pytest.raises(ValueError) as e:
    duplicates()
assert e.value.args[1] == {"a": 2, "b": 1}
assert str(e.value) == "('dup', Counter({'a': 2, 'b': 1}))", str(e.value)
""",
    # F6 (before: e.args == ('P(x=1, y=2)',))
    "a namedtuple as the one arg": """
with pytest.raises(IndexError) as e:
    out_of_range()
assert e.value.args[0] == (1, 2)
assert str(e.value) == "P(x=1, y=2)", str(e.value)
""",
    # F1: the whole text past 500 characters (before: cut at 500, match failed)
    "a text longer than 500 characters": """
with pytest.raises(ValueError, match="TAIL$"):
    long_text()
""",
    # F2: the text one file shows, read once (before: "5", the stored value's)
    "a __str__ that counts its calls": """
with pytest.raises(ValueError, match="^404$"):
    counted()
""",
}


@pytest.mark.parametrize("check", sorted(RIGHT_CHECKS))
def test_a_right_program_passes_each_check(check):
    tests = "import pytest\n" + RIGHT_CHECKS[check]
    exec(compile(RIGHT + tests, "one file", "exec"), {})  # noqa: S102 -- passes in one file
    verdict = score(CodeVerifier(isolation="process", timeout_s=60), RIGHT, tests)
    assert verdict.passed, (check, verdict)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_right_program_passes(isolation):
    tests = "import pytest\n" + "".join(RIGHT_CHECKS[check] for check in sorted(RIGHT_CHECKS))
    exec(compile(RIGHT + tests, "one file", "exec"), {})  # noqa: S102 -- passes in one file
    verdict = score(CodeVerifier(isolation=isolation, timeout_s=60), RIGHT, tests)
    assert verdict.passed, verdict
