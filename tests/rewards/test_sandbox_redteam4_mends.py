"""Mends of the fourth sandbox red team's findings (session 42, /work/h42/redteam_sandbox4).

Each case is a program and its tests, run once in one file (``exec(program + tests)``) and once in
the sandbox: a WRONG case fails in one file and must not pass here, a RIGHT case passes in one file
and must pass here. The one-file outcome is checked in each test, so a case cannot drift from its
label. R1: notes of a list, tuple or ``str`` subclass come as a stand-in, never as the items they
store (pytest and ``traceback`` read them through the subclass). N1: notes that are ``None`` (set,
or the answer of the program's ``__getattr__``) come as ``None``, not as no notes. R2: a
``CalledProcessError``/``TimeoutExpired`` field of any plain type comes, never left absent. R3: such
a class's subclass with a property over a field can be raised twice. D1: a class attribute whose
type has ``__set__`` but no ``__get__`` is a stand-in. C3: a reply whose class attributes are past
its budget makes every miss of the class fail, on instances held from before too. C6: members and
links of one class in one reply send its class attributes once. C1: a change of a program class's
attributes seen at one class's raise reaches the other classes made from it (its base, its other
subclasses), with their held instances. S1: what the program's code that the candidate runs to build
a reply (its ``__str__``) changes in the exception's or its classes' dicts comes as stand-ins.
"""

from __future__ import annotations

import pytest
from sandbox_modes import agrees_with_one_file, score

from lightning_agents.rewards import CodeVerifier

_MATCH = "import pytest\nwith pytest.raises(ValueError, match='bad'):\n    f()\n"
_PROPERTY_FIELD = (
    "import subprocess\nclass E(subprocess.CalledProcessError):\n    @property\n    def returncode(self):\n"
    "        return 3\n    @returncode.setter\n    def returncode(self, v):\n        pass\n"
    "def f():\n    raise E(1, 'cmd')\n"
)
_OUTPUT_INT = (
    "import subprocess\ndef f():\n    e = subprocess.CalledProcessError(1, 'cmd')\n    e.output = 5\n    raise e\n"
)
_BASE_AND_SUB = "class A(ValueError):\n    code = 404\nclass B(A):\n    pass\n"
_NOTES_NONE = "def f():\n    e = ValueError('bad')\n    e.__notes__ = None\n    raise e\n"
# 600 class attributes (past the 500 that cross) once k is set, code among them
_OVER_NEW = (
    "class E(ValueError):\n    pass\n"
    "def f(k):\n    if k:\n        E.code = 1\n        for i in range(600):\n            setattr(E, f'a{i}', i)\n"
    "    raise E('x')\n"
)

WRONG = {
    # N1: pytest's *getattr(e, "__notes__", []) raises TypeError on None in one file; the candidate
    # read None as "no notes"
    "notes set to None, pytest.raises match": (_NOTES_NONE, _MATCH),
    "own __getattr__ answering None, pytest.raises match": (
        "class E(ValueError):\n    def __getattr__(self, n):\n        return None\ndef f():\n    raise E('bad')\n",
        _MATCH,
    ),
    # R1: notes of a list/tuple subclass crossed by their stored items; pytest iterates the subclass
    "list-subclass notes with their own __iter__, pytest.raises match": (
        "class L(list):\n    def __iter__(self):\n        return iter(['other'])\n"
        "def f():\n    e = ValueError('x')\n    e.__notes__ = L(['bad'])\n    raise e\n",
        _MATCH,
    ),
    "tuple-subclass notes with their own __iter__, pytest.raises match": (
        "class T(tuple):\n    def __iter__(self):\n        return iter(['other'])\n"
        "def f():\n    e = ValueError('x')\n    e.__notes__ = T(('bad',))\n    raise e\n",
        _MATCH,
    ),
    # R1: traceback shows str(note), the subclass's own __str__
    "str-subclass note with its own __str__, traceback": (
        "class S(str):\n    def __str__(self):\n        return 'shown'\n"
        "def f():\n    e = ValueError('x')\n    e.__notes__ = [S('stored')]\n    raise e\n",
        "import traceback\ntry:\n    f()\nexcept ValueError as e:\n"
        "    assert 'stored' in ''.join(traceback.format_exception(e))\n",
    ),
    # R2: a field of a type the harness did not take was dropped: a plain miss, hasattr False
    "CalledProcessError output set to an int, not hasattr": (
        _OUTPUT_INT,
        "try:\n    f()\nexcept Exception as e:\n    assert not hasattr(e, 'output')\n",
    ),
    "CalledProcessError returncode a bool, not hasattr": (
        "import subprocess\ndef f():\n    raise subprocess.CalledProcessError(True, 'cmd')\n",
        "try:\n    f()\nexcept Exception as e:\n    assert not hasattr(e, 'returncode')\n",
    ),
    "CalledProcessError cmd a dict, not hasattr": (
        "import subprocess\ndef f():\n    raise subprocess.CalledProcessError(1, {'a': 1})\n",
        "try:\n    f()\nexcept Exception as e:\n    assert not hasattr(e, 'cmd')\n",
    ),
    "TimeoutExpired timeout a str, not hasattr": (
        "import subprocess\ndef f():\n    raise subprocess.TimeoutExpired('c', '5')\n",
        "try:\n    f()\nexcept Exception as e:\n    assert not hasattr(e, 'timeout')\n",
    ),
    # D1: one file's e.code = 5 goes to the int subclass's __set__; the value crossed as plain data
    "class attribute of an int subclass with __set__, assigned": (
        "class D(int):\n    def __set__(self, obj, v):\n        pass\n"
        "class E(ValueError):\n    code = D(404)\ndef f():\n    raise E('x')\n",
        "try:\n    f()\nexcept ValueError as e:\n    e.code = 5\n    assert e.code == 5\n",
    ),
    # C1: a subclass's raise changes its base's attribute; the base's made class kept its copy
    "base attribute deleted before a subclass raise, held base instance": (
        _BASE_AND_SUB + "def fa():\n    raise A('a')\ndef fb():\n    del A.code\n    raise B('b')\n",
        "try:\n    fa()\nexcept ValueError as e:\n    a = e\ntry:\n    fb()\nexcept ValueError:\n    pass\n"
        "assert a.code == 404\n",
    ),
    "base attribute changed by a base raise, held subclass instance": (
        _BASE_AND_SUB + "def fb():\n    raise B('b')\ndef fa():\n    A.code = 500\n    raise A('a')\n",
        "try:\n    fb()\nexcept ValueError as e:\n    b = e\ntry:\n    fa()\nexcept ValueError:\n    pass\n"
        "assert b.code == 404\n",
    ),
    "base attribute changed by a sibling's raise, held sibling instance": (
        _BASE_AND_SUB + "class C(A):\n    pass\n"
        "def fb():\n    raise B('b')\ndef fc():\n    A.code = 500\n    raise C('c')\n",
        "try:\n    fb()\nexcept ValueError as e:\n    b = e\ntry:\n    fc()\nexcept ValueError:\n    pass\n"
        "assert b.code == 404\n",
    ),
    # S1: the candidate calls the program's __str__ to build the reply, before it read the
    # attributes; in one file nothing calls it
    "own __str__ that adds a class attribute": (
        "class E(ValueError):\n    def __str__(self):\n        E.code = 404\n        return 'x'\n"
        "def f():\n    raise E('x')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    "own __str__ that sets an instance attribute": (
        "class E(ValueError):\n    def __str__(self):\n        self.code = 404\n        return 'x'\n"
        "def f():\n    raise E('x')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    "own __str__ that deletes a class attribute, held instance": (
        "class E(ValueError):\n    code = 404\n    def __str__(self):\n        if self.args[0]:\n"
        "            del E.code\n        return 'x'\n"
        "def f(k):\n    raise E(k)\n",
        "try:\n    f(0)\nexcept ValueError as e:\n    first = e\ntry:\n    f(1)\nexcept ValueError:\n    pass\n"
        "assert not hasattr(first, 'code')\n",
    ),
    "subclass __str__ that sets its base's attribute, held base instance": (
        "class A(ValueError):\n    pass\nclass B(A):\n    def __str__(self):\n        A.code = 404\n"
        "        return 'x'\ndef fa():\n    raise A('a')\ndef fb():\n    raise B('b')\n",
        "try:\n    fa()\nexcept ValueError as e:\n    a = e\ntry:\n    fb()\nexcept ValueError:\n    pass\n"
        "assert a.code == 404\n",
    ),
    # C3: a name only a reply past the budget holds never reached the class an earlier instance has
    "new class attribute only in a reply past the budget, earlier instance": (
        _OVER_NEW,
        "try:\n    f(0)\nexcept ValueError as e:\n    first = e\ntry:\n    f(1)\nexcept ValueError:\n    pass\n"
        "assert not hasattr(first, 'code')\n",
    ),
    "new class attribute only in a reply past the budget, getattr default": (
        _OVER_NEW,
        "try:\n    f(0)\nexcept ValueError as e:\n    first = e\ntry:\n    f(1)\nexcept ValueError:\n    pass\n"
        "assert getattr(first, 'code', None) is None\n",
    ),
}

RIGHT = {
    # N1: notes that are None, read as such (pytest.raises without match never reads them)
    "notes set to None, read": (
        _NOTES_NONE,
        "import pytest\nwith pytest.raises(ValueError) as info:\n    f()\nassert info.value.__notes__ is None\n",
    ),
    # R1: notes of exact str still cross
    "notes of plain str, pytest.raises match": (
        "def f():\n    e = ValueError('x')\n    e.add_note('bad')\n    raise e\n",
        _MATCH,
    ),
    # R3: the first raise put a stand-in for returncode on the made class; the second rebuild's
    # object.__setattr__ of the field ran its __set__ (LeftOutTouched)
    "CalledProcessError subclass with a property field, raised twice": (
        _PROPERTY_FIELD,
        "import pytest\nfor _ in range(2):\n    with pytest.raises(Exception):\n        f()\n",
    ),
    "TimeoutExpired subclass with a property field, raised twice": (
        "import subprocess\nclass E(subprocess.TimeoutExpired):\n    @property\n    def timeout(self):\n"
        "        return 3\n    @timeout.setter\n    def timeout(self, v):\n        self._t = v\n"
        "def f():\n    raise E('c', 1)\n",
        "for _ in range(2):\n    try:\n        f()\n    except Exception:\n        pass\n",
    ),
    # R2: the field of another type was dropped; stdout reads it
    "CalledProcessError output an int, read": (
        _OUTPUT_INT,
        "try:\n    f()\nexcept Exception as e:\n    assert e.output == 5 and e.stdout == 5\n",
    ),
    "CalledProcessError cmd a dict, str": (
        "import subprocess\ndef f():\n    raise subprocess.CalledProcessError(1, {'a': 1})\n",
        "import subprocess\ntry:\n    f()\nexcept subprocess.CalledProcessError as e:\n"
        "    assert e.cmd == {'a': 1} and str(e).startswith(\"Command '{'a': 1}' returned\")\n",
    ),
    "TimeoutExpired timeout a str, str": (
        "import subprocess\ndef f():\n    raise subprocess.TimeoutExpired('c', '5')\n",
        "try:\n    f()\nexcept Exception as e:\n    assert e.timeout == '5' and str(e) == \"Command 'c' timed out after 5 seconds\"\n",
    ),
    # C6: members past the reply's budget sent their class attributes as stand-ins, set on the
    # class every member shares
    "group of 1500 same-class members with a class attribute": (
        "class E(ValueError):\n    code = 404\n"
        "def f():\n    raise ExceptionGroup('g', [E(str(i) * 30) for i in range(1500)])\n",
        "try:\n    f()\nexcept ExceptionGroup as g:\n    assert g.exceptions[0].code == 404\n",
    ),
    "group of members with big own attributes and a class attribute": (
        "class E(ValueError):\n    code = 404\n    def __init__(self, i):\n        super().__init__(i)\n"
        "        self.blob = 'z' * 2000\n"
        "def f():\n    raise ExceptionGroup('g', [E(i) for i in range(200)])\n",
        "try:\n    f()\nexcept ExceptionGroup as g:\n    assert g.exceptions[0].code == 404\n",
    ),
    "chain of one class past the budget, class attribute on the first": (
        "class E(ValueError):\n    code = 404\ndef f():\n    raise E('x' * 131030) from E('inner')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404 and e.__cause__.code == 404\n",
    ),
    # C1: the change reaches the other class's held instance, as in one file
    "base attribute changed by a subclass raise, held base instance reads it": (
        _BASE_AND_SUB + "def fa():\n    raise A('a')\ndef fb():\n    A.code = 500\n    raise B('b')\n",
        "try:\n    fa()\nexcept ValueError as e:\n    a = e\ntry:\n    fb()\nexcept ValueError as e:\n    b = e\n"
        "assert a.code == 500 and b.code == 500 and not hasattr(a, 'x')\n",
    ),
    "base and subclasses raised in turn, each held instance read": (
        "class A(ValueError):\n    code = 500\nclass B(A):\n    code = 404\nclass C(A):\n    pass\n"
        "def f(k):\n    raise [A, B, C][k]('x')\n",
        "es = []\nfor k in (0, 1, 2, 1, 0):\n    try:\n        f(k)\n    except ValueError as e:\n        es.append(e)\n"
        "assert [e.code for e in es] == [500, 404, 500, 404, 500]\n",
    ),
    # S1: what the program set before its __str__ ran still crosses as it was
    "own __str__ that caches its text, attributes set before read": (
        "class E(ValueError):\n    code = 404\n    def __init__(self, m):\n        super().__init__(m)\n"
        "        self.hint = 'h'\n    def __str__(self):\n        self._text = 'x'\n        return self._text\n"
        "def f():\n    raise E('x')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404 and e.hint == 'h' and str(e) == 'x'\n",
    ),
    # C3: a later reply whose class attributes came whole ends the stand-in for misses
    "class attributes past the budget, then whole again": (
        "class E(ValueError):\n    pass\n"
        "def f(k):\n    if k == 1:\n        for i in range(600):\n            setattr(E, f'a{i}', i)\n"
        "    if k == 2:\n        for i in range(600):\n            delattr(E, f'a{i}')\n    raise E('x')\n",
        "es = []\nfor k in (0, 1, 2):\n    try:\n        f(k)\n    except ValueError as e:\n        es.append(e)\n"
        "assert not hasattr(es[0], 'code') and not hasattr(es[2], 'a1')\n",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_what_fails_in_one_file_fails_here(case):
    agrees_with_one_file(case, *WRONG[case], passes=False)


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_what_passes_in_one_file_passes_here(case):
    agrees_with_one_file(case, *RIGHT[case], passes=True)


_FORGED_AFTER_ONE = (
    "class E(ValueError):\n    code = 404\n"
    "def f(k, frame=None):\n    if frame is not None:\n        forge(frame)\n    raise E('x')\n"
)
_HELD_THEN_FORGED = (
    "try:\n    f(0)\nexcept ValueError as e:\n    first = e\n"
    "try:\n    f(1, {frame!r})\nexcept ValueError:\n    pass\nassert first.code == 404\n"
)


def _forged_peers(peers):
    from sandbox_attacks import FORGE

    frame = {"raised": "E", "msg": "", "bases": ["ValueError"], "cls": 1, "cvars": [], "peers": peers}
    program = FORGE + _FORGED_AFTER_ONE
    return score(CodeVerifier(isolation="process", timeout_s=30), program, _HELD_THEN_FORGED.format(frame=frame))


def test_forged_peers_malformed_are_a_bad_reply():
    """``"peers"`` are untrusted data: a number that is not an int, or items that are not well-formed
    ``"cvars"``, break the channel."""
    reasons = [_forged_peers(peers).reason for peers in ([["0", []]], [[0, [["code"]]]], [[0]], "all")]
    assert reasons == ["bad_reply"] * 4, reasons


def test_forged_peers_over_fail_closed():
    """``"peers": "over"`` (peers past the reply's budget) turns every class made before into
    stand-ins: a held instance's read fails the verdict, whatever it was."""
    verdict = _forged_peers("over")
    assert verdict.reason == "wrong_answer" and verdict.detail.startswith("LeftOutTouched"), verdict


def test_forged_peers_set_only_what_a_program_could():
    """A peer's items set the class made for that number as its own ``cvars`` would: ``E.code =
    500`` in one file (the forged frame's program could have done so itself)."""
    verdict = _forged_peers([[0, [["code", 500]]]])
    assert verdict.reason == "wrong_answer" and "AssertionError" in verdict.detail, verdict
