"""Mends of the sixth sandbox red team's findings P, T and J (session 42, /work/h42/redteam_sandbox6).

P: the candidate's pre-walk marked the first 2,001 exceptions it met breadth first, a group the
reply then sends ``"over"`` included, so an exception the reply did send, past those, was read
after an earlier member's ``__str__`` ran (a WRONG program passed, the RIGHT one failed). T: the
pre-walk's queue took every member of every group, so 300 groups sharing one 1,000,000-member
tuple killed the candidate. J: ``judge`` took a standard-library ``module_name`` that only
``CodeVerifier`` refused.
"""

from __future__ import annotations

import pytest
from sandbox_modes import agrees_with_one_file

from lightning_agents.rewards.verdict import judge

# an "over" group (1,998 members, more than the 1,997 left after the top's three) filled the old
# pre-walk's 2,001 marks before the third member's exceptions were reached; the reply sends them
_BIG = "ExceptionGroup('h', [ValueError(i) for i in range(1998)])"
_HELD = "try:\n    f()\nexcept ExceptionGroup as e:\n    g = e\n"

_PAST_PREWALK = {
    "P1 a later member's class attribute": (
        "class C(ValueError):\n    code = 1\n"
        "class O(ValueError):\n    def __str__(self):\n        C.code = 404\n        return 'o'\n"
        f"def f():\n    raise ExceptionGroup('g', [O(), {_BIG}, ExceptionGroup('y', [C()])])\n",
        _HELD + "assert g.exceptions[2].exceptions[0].code == 404\n",
    ),
    "P2 a later member's instance attribute": (
        "class C(ValueError):\n    pass\n"
        "T = []\n"
        "class O(ValueError):\n    def __str__(self):\n        T[0].code = 404\n        return 'o'\n"
        f"def f():\n    c = C()\n    T.append(c)\n    raise ExceptionGroup('g', [O(), {_BIG}, ExceptionGroup('y', [c])])\n",
        _HELD + "assert g.exceptions[2].exceptions[0].code == 404\n",
    ),
    "P3 a later member's cause": (
        "class C(ValueError):\n    code = 1\n"
        "class O(ValueError):\n    def __str__(self):\n        C.code = 404\n        return 'o'\n"
        f"def f():\n    y = ValueError('y')\n    y.__cause__ = C()\n    raise ExceptionGroup('g', [O(), {_BIG}, y])\n",
        _HELD + "assert g.exceptions[2].__cause__.code == 404\n",
    ),
}


@pytest.mark.parametrize("case", sorted(_PAST_PREWALK))
def test_an_exception_past_an_over_group_is_marked_before_earlier_code(case):
    """P (WRONG): one file never calls ``O.__str__``; the sandbox must read ``C`` before it runs."""
    program, tests = _PAST_PREWALK[case]
    agrees_with_one_file(case, program, tests, passes=False)


def test_an_exception_past_an_over_group_is_read_as_without_it():
    """P (RIGHT, ``code == 1``): the over group no longer changes how ``C`` is read. Without it
    (``O``'s ``__str__`` then runs before ``C`` is sent) the value that code changed goes as a
    stand-in (fail closed, the right program fails on reading it); with it, the same, where before
    the value ``O.__str__`` set (404) crossed as the program's."""
    program, _ = _PAST_PREWALK["P1 a later member's class attribute"]
    tests = _HELD + "assert g.exceptions[-1].exceptions[0].code == 1\n"
    with_over = judge(program, tests, timeout_s=30)
    without = judge(program.replace(f"{_BIG}, ", ""), tests, timeout_s=30)
    assert (with_over.passed, with_over.reason) == (without.passed, without.reason) == (False, "wrong_answer")
    assert "changed by code of the program's" in with_over.detail, with_over
    assert "changed by code of the program's" in without.detail, without


def test_an_exception_the_walk_never_reached_goes_as_stand_ins():
    """P, fail closed (WRONG): an earlier member's ``__str__`` links a new exception as a later
    member's cause; the pre-walk could not read it, so its attributes go as stand-ins (in one file
    nothing calls that ``__str__`` and the cause is ``None``)."""
    program = (
        "class C(ValueError):\n    pass\n"
        "T = []\n"
        "class O(ValueError):\n    def __str__(self):\n        c = C()\n        c.code = 404\n"
        "        T[0].__cause__ = c\n        return 'o'\n"
        "def f():\n    y = ValueError('y')\n    T.append(y)\n    raise ExceptionGroup('g', [O(), y])\n"
    )
    tests = _HELD + "assert g.exceptions[1].__cause__.code == 404\n"
    agrees_with_one_file("unwalked cause", program, tests, passes=False)


def test_groups_sharing_a_huge_tuple_do_not_kill_the_candidate():
    """T: 300 groups sharing one 1,000,000-member tuple: the pre-walk does not walk a group the
    reply sends ``"over"``, so the outer group's 300 members cross (before, the candidate died or
    timed out while the pre-walk queued 300,000,000 members)."""
    program = (
        "def f():\n    v = ValueError('v')\n    t = (v,) * 1_000_000\n"
        "    raise ExceptionGroup('g', [ExceptionGroup('h', t) for _ in range(300)])\n"
    )
    tests = "try:\n    f()\nexcept ExceptionGroup as e:\n    assert len(e.exceptions) == 300\n"
    verdict = judge(program, tests, timeout_s=30)
    assert verdict.passed, verdict


@pytest.mark.parametrize("name", ["builtins", "json", "sys", "typing", "os.path"])
def test_judge_refuses_a_standard_library_module_name(name):
    """J: ``judge`` refuses what ``CodeVerifier`` refuses (the docs say such a name is refused)."""
    with pytest.raises(ValueError, match="standard-library"):
        judge("def f():\n    return 1\n", "assert f() == 1\n", module_name=name)


def test_judge_takes_a_program_module_name():
    """J: a name of the program's own still runs."""
    assert judge("def f():\n    return __name__\n", "assert f() == 'solution'\n", module_name="solution").passed
