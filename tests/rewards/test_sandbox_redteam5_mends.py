"""Mends of the fifth sandbox red team's findings (session 42, /work/h42/redteam_sandbox5).

Each case is a program and its tests, run once in one file (``exec(program + tests)``) and once in
the sandbox: a WRONG case fails in one file and must not pass here, a RIGHT case passes in one file
and must pass here. The one-file outcome is checked in each test. X1: a class whose first exception
in a reply went in a chain link later cut whole (``ChainLeftOut``: a cycle, or past 32 levels)
sends its class attributes with its next exception of that reply (it said ``"same"``, and the
harness kept the previous reply's). X2: a change of a base class seen at a link then cut reaches
the held subclass instances at a later raise (the candidate's snapshot of the base had moved on,
and the change was never sent). S: the program's code that building a reply runs (an outer
exception's or an earlier member's ``__str__``) changes what is sent for a later link or member, or
changes a value in place, or a class's ``__bases__``: every exception of the reply is read before
any such code runs, with its values' plain-data forms, and what that code changed comes as a
stand-in (a changed ``__bases__``: the class as it was). M1: ``module_name`` is the program's
``__name__`` from its first statement on (a statement sharing the docstring's line saw
``"__main__"``).
"""

from __future__ import annotations

import sys
import types

import pytest
from sandbox_modes import agrees_with_one_file, one_file_passes, score

from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards.verdict import judge

# c1's chain is a cycle, so that link is cut whole; c2, a later link, is of its class
_CUT_THEN_SAME = (
    "class C(ValueError):\n    code = 1\n"
    "def f():\n    raise C()\n"
    "def g():\n    {change}\n    c1 = C()\n    c1.__cause__ = c1\n    c2 = C()\n"
    "    e = ValueError('top')\n    e.__cause__ = c1\n    e.__context__ = c2\n    raise e\n"
)
_HELD_THEN_SECOND = (
    "try:\n    f()\nexcept ValueError as e:\n    first = e\ntry:\n    g()\nexcept ValueError as e:\n    second = e\n"
)
# past 32 levels instead of a cycle: the cause is cut, the context comes
_DEEP_THEN_SAME = (
    "class C(ValueError):\n    code = 1\n"
    "def f():\n    raise C()\n"
    "def g():\n    C.code = 2\n    c1 = C()\n    link = c1\n"
    "    for _ in range(40):\n        nxt = C()\n        link.__cause__ = nxt\n        link = nxt\n"
    "    c2 = C()\n    e = ValueError('top')\n    e.__cause__ = c1\n    e.__context__ = c2\n    raise e\n"
)
# A's change is seen (and B's attributes read as its peers) at a link that is then cut
_PEERS_CUT = (
    "class A(ValueError):\n    code = 1\nclass B(A):\n    pass\n"
    "def f():\n    raise B()\n"
    "def g():\n    A.code = 2\n    a1 = A()\n    a1.__cause__ = a1\n"
    "    e = ValueError('top')\n    e.__cause__ = a1\n    raise e\n"
    "def h():\n    raise A()\n"
)
# a retry wrapper: `raise AppError() from e`, e heading a chain of more than 32 A links
_PEERS_DEEP = (
    "class A(ValueError):\n    code = 1\nclass B(A):\n    pass\nclass AppError(Exception):\n    pass\n"
    "def f():\n    raise B()\n"
    "def g():\n    A.code = 2\n    head = link = A()\n"
    "    for _ in range(40):\n        nxt = A()\n        link.__context__ = nxt\n        link = nxt\n"
    "    raise AppError('retry') from head\n"
    "def h():\n    raise A()\n"
)
_PEERS_TESTS = (
    "try:\n    f()\nexcept ValueError as e:\n    b = e\n"
    "try:\n    g()\nexcept Exception:\n    pass\n"
    "try:\n    h()\nexcept ValueError as e:\n    a = e\n"
)
_OTHER_STR = "class O(ValueError):\n    def __str__(self):\n        C.code = 404\n        return 'o'\n"
_READ = "try:\n    f()\nexcept ValueError as e:\n    assert {check}\n"
_BASES_CHANGED = (
    "class M:\n    code = 404\nclass Base(ValueError):\n    pass\n"
    "class E(Base):\n    def __str__(self):\n        E.__bases__ = (M, Base)\n        return 'e'\n"
    "def f():\n    raise E()\n"
)
_CLASS_SWAPPED = (
    "class C(ValueError):\n    pass\nclass F(ValueError):\n    code = 404\n"
    "class O(ValueError):\n    def __init__(self, c):\n        self.c = c\n"
    "    def __str__(self):\n        self.c.__class__ = F\n        return 'o'\n"
    "def f():\n    c = C()\n    raise ExceptionGroup('g', [O(c), c])\n"
)

WRONG = {
    "X1: class attr changed, first link of the class cut (a cycle), a later link": (
        _CUT_THEN_SAME.format(change="C.code = 2"),
        _HELD_THEN_SECOND + "assert second.__context__.code == 1 and first.code == 1\n",
    ),
    "X1: class attr deleted, first link of the class cut (a cycle), a later link": (
        _CUT_THEN_SAME.format(change="del C.code"),
        _HELD_THEN_SECOND + "assert second.__context__.code == 1\n",
    ),
    "X1: class attr changed, first link of the class cut (past 32 levels), a later link": (
        _DEEP_THEN_SAME,
        _HELD_THEN_SECOND + "assert second.__context__.code == 1\n",
    ),
    "X2: base changed, its peers read in a cut link (a cycle)": (
        _PEERS_CUT,
        _PEERS_TESTS + "assert b.code == 1\n",
    ),
    "X2: base changed, its peers read in a cut link (past 32 levels)": (
        _PEERS_DEEP,
        _PEERS_TESTS + "assert b.code == 1\n",
    ),
    # S: the program's code that building a reply runs (an outer or earlier exception's __str__)
    # changed what is sent for a later link or member of the same reply
    "S3: outer __str__ sets the cause's class attr": (
        "class C(ValueError):\n    pass\n" + _OTHER_STR + "def f():\n    raise O() from C()\n",
        _READ.format(check="e.__cause__.code == 404"),
    ),
    "S4: outer __str__ sets the cause's own attr": (
        "class O(ValueError):\n    def __str__(self):\n        self.__cause__.code = 404\n        return 'o'\n"
        "def f():\n    raise O() from ValueError('c')\n",
        _READ.format(check="e.__cause__.code == 404"),
    ),
    "S5: a member's __str__ sets a later member's class attr": (
        "class C(ValueError):\n    pass\n" + _OTHER_STR + "def f():\n    raise ExceptionGroup('g', [O(), C()])\n",
        "try:\n    f()\nexcept ExceptionGroup as g:\n    assert g.exceptions[1].code == 404\n",
    ),
    # S: ... or changed a value in place, or the class's bases (the same objects by identity)
    "S7: own __str__ appends to a class list": (
        "class E(ValueError):\n    codes = [1]\n    def __str__(self):\n        E.codes.append(2)\n        return 'e'\n"
        "def f():\n    raise E()\n",
        _READ.format(check="e.codes == [1, 2]"),
    ),
    "S8: own __str__ appends to an instance list": (
        "class E(ValueError):\n    def __init__(self):\n        self.codes = [1]\n"
        "    def __str__(self):\n        self.codes.append(2)\n        return 'e'\n"
        "def f():\n    raise E()\n",
        _READ.format(check="e.codes == [1, 2]"),
    ),
    "S9: own __str__ sets a key of a class dict": (
        "class E(ValueError):\n    info = {}\n    def __str__(self):\n        E.info['code'] = 404\n        return 'e'\n"
        "def f():\n    raise E()\n",
        _READ.format(check="e.info == {'code': 404}"),
    ),
    "S9: a member's __str__ appends to a later member's instance list": (
        "class C(ValueError):\n    def __init__(self):\n        self.codes = [1]\n"
        "class O(ValueError):\n    def __init__(self, c):\n        self.c = c\n"
        "    def __str__(self):\n        self.c.codes.append(2)\n        return 'o'\n"
        "def f():\n    c = C()\n    raise ExceptionGroup('g', [O(c), c])\n",
        "try:\n    f()\nexcept ExceptionGroup as g:\n    assert g.exceptions[1].codes == [1, 2]\n",
    ),
    "S10: own __str__ puts a mixin with the attr in __bases__": (
        _BASES_CHANGED,
        _READ.format(check="e.code == 404"),
    ),
    "S11: a member's __str__ sets a later member's __class__": (
        _CLASS_SWAPPED,
        "try:\n    f()\nexcept ExceptionGroup as g:\n    assert g.exceptions[1].code == 404\n",
    ),
}

RIGHT = {
    "S11: a member's __str__ sets a later member's __class__, the member is of its class": (
        _CLASS_SWAPPED,
        "try:\n    f()\nexcept ExceptionGroup as g:\n"
        "    assert type(g.exceptions[1]).__name__ == 'C' and not hasattr(g.exceptions[1], 'code')\n",
    ),
    "S10: own __str__ puts a mixin with the attr in __bases__, the attr is absent": (
        _BASES_CHANGED,
        _READ.format(check="not hasattr(e, 'code') and str(e) == 'e'"),
    ),
    "S: lists and dicts of members and classes no code changed cross as they are": (
        "class C(ValueError):\n    codes = [1, [2]]\n    info = {'a': (1, 2)}\n"
        "    def __init__(self, n):\n        self.n = [n, {'k': n}]\n"
        "class O(ValueError):\n    def __str__(self):\n        return 'o'\n"
        "def f():\n    raise ExceptionGroup('g', [O(), C(1), C(2)]) from C(3)\n",
        "try:\n    f()\nexcept ExceptionGroup as g:\n"
        "    a, b = g.exceptions[1], g.exceptions[2]\n"
        "    assert a.codes == [1, [2]] and a.info == {'a': (1, 2)} and a.n == [1, {'k': 1}]\n"
        "    assert b.n == [2, {'k': 2}] and g.__cause__.n == [3, {'k': 3}] and str(g.exceptions[0]) == 'o'\n",
    ),
    "X1: class attr changed, first link of the class cut, a later link reads it": (
        _CUT_THEN_SAME.format(change="C.code = 2"),
        _HELD_THEN_SECOND + "assert second.__context__.code == 2 and first.code == 2\n",
    ),
    "X1: class attr deleted, first link of the class cut, a later link misses it": (
        _CUT_THEN_SAME.format(change="del C.code"),
        _HELD_THEN_SECOND + "assert not hasattr(second.__context__, 'code') and not hasattr(first, 'code')\n",
    ),
    "X1: class attr changed, first link cut past 32 levels, a later link reads it": (
        _DEEP_THEN_SAME,
        _HELD_THEN_SECOND + "assert second.__context__.code == 2\n",
    ),
    "X2: base changed, peers read in a cut link, held subclass reads it": (
        _PEERS_CUT,
        _PEERS_TESTS + "assert b.code == 2 and a.code == 2\n",
    ),
    "X2: base changed in a retry chain past 32 levels, held subclass reads it": (
        _PEERS_DEEP,
        _PEERS_TESTS + "assert b.code == 2 and a.code == 2\n",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_what_fails_in_one_file_fails_here(case):
    agrees_with_one_file(case, *WRONG[case], passes=False)


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_what_passes_in_one_file_passes_here(case):
    agrees_with_one_file(case, *RIGHT[case], passes=True)


_EVALPLUS_TESTS = "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(f)\n"
_MAIN_FIXES = "def f(x):\n    return x\n\nif _main:\n    def f(x):\n        return x + 1\n"
_HEADS = [
    '"""Add one."""; _main = __name__ == "__main__"\n',
    'from __future__ import annotations; _main = __name__ == "__main__"\n',
    '_main = __name__ == "__main__"\n',
]


@pytest.mark.parametrize("head", _HEADS)
def test_module_name_is_the_name_of_the_program_from_its_first_statement(head):
    """M1: human-eval and evalplus ``exec`` the program in a fresh dict, so a main block never runs
    there; a statement sharing the docstring's or a ``__future__`` import's line ran before an
    inserted ``__name__ = 'solution'`` and saw ``"__main__"``. The candidate's namespace now has
    the name before the program's first statement, and the program's text is not edited."""
    program = head + _MAIN_FIXES
    with pytest.raises(AssertionError):
        exec(compile(program + _EVALPLUS_TESTS, "evalplus", "exec"), {})  # noqa: S102 -- the graders' own run
    assert not judge(program, _EVALPLUS_TESTS, isolation="process", timeout_s=30, module_name="solution").passed
    # the default is still __main__: its main block runs
    assert judge(program, _EVALPLUS_TESTS, isolation="process", timeout_s=30).passed


def test_module_name_reaches_the_programs_functions_and_docstring():
    """The program's functions and classes take their ``__module__`` from the name, and a leading
    docstring stays the program's ``__doc__`` (nothing is inserted before or after it)."""
    program = (
        '"""Doc."""\nfrom __future__ import annotations\ndef f(x):\n    return [__name__, f.__module__, __doc__]\n'
    )
    tests = "assert f(0) == ['solution', 'solution', 'Doc.']\n"
    assert judge(program, tests, isolation="process", timeout_s=30, module_name="solution").passed
    tests_main = "assert f(0) == ['__main__', '__main__', 'Doc.']\n"
    assert judge(program, tests_main, isolation="process", timeout_s=30).passed


def test_module_name_must_be_a_name():
    with pytest.raises(ValueError, match="module_name"):
        judge("def f():\n    pass\n", "f()\n", isolation="process", module_name="")


@pytest.mark.parametrize("head", _HEADS)
def test_codeverifier_module_name_is_the_name_from_the_first_statement(head):
    """M1 through :class:`CodeVerifier` (HumanEvalTask's path): ``module_name="solution"`` reaches
    the candidate's namespace; a main block that fixes a wrong function does not run, whatever
    shares the docstring's or a ``__future__`` import's line."""
    program = head + _MAIN_FIXES
    assert not one_file_passes(program, _EVALPLUS_TESTS)
    verifier = CodeVerifier(isolation="process", timeout_s=30, module_name="solution")
    assert not score(verifier, program, _EVALPLUS_TESTS).passed
    assert score(CodeVerifier(isolation="process", timeout_s=30), program, _EVALPLUS_TESTS).passed


_DATACLASS = (
    "from __future__ import annotations\nfrom dataclasses import dataclass, fields\nfrom typing import ClassVar, List\n"
    "@dataclass\nclass P:\n    x: int = 0\n    ys: List[int] = None\n    kind: ClassVar[str] = 'p'\n"
    "def f():\n    return (P(5).x, len(fields(P)))\n"
)


@pytest.mark.parametrize("module_name", ["solution", "__main__"])
def test_a_dataclass_under_future_annotations_loads_as_in_one_file(module_name):
    """Red team 6's M2 and D1: the program runs in a real module in ``sys.modules`` (as
    ``python solution.py`` and evalplus's ``exec`` see it). Under "solution" dataclasses looked up
    ``sys.modules["solution"]``, found nothing and the program did not load; under "__main__" they
    read the candidate script's globals, so a ``ClassVar`` field counted as a field (3, not 2)."""
    tests = "def check(candidate):\n    assert candidate() == (5, 2)\n\ncheck(f)\n"
    reference = types.ModuleType("la_one_file_reference")  # `python solution.py`: a module in sys.modules
    sys.modules[reference.__name__] = reference
    try:
        assert one_file_passes(_DATACLASS, tests, namespace=reference.__dict__)
    finally:
        del sys.modules[reference.__name__]
    assert judge(_DATACLASS, tests, isolation="process", timeout_s=30, module_name=module_name).passed
