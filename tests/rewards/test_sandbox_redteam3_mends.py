"""Mends of the third sandbox red team's findings (session 41, /work/h41/redteam_sandbox3).

Each case is a program and its tests, run once in one file (``exec(program + tests)``) and once in
the sandbox: a WRONG case fails in one file and must not pass here, a RIGHT case passes in one file
and must pass here. The one-file outcome is checked in each test, so a case cannot drift from its
label. H1: the class attributes of a program's class (``"cvars"``) are the latest raise's, whole:
a name the program deleted goes from the class the harness made (and from every instance of it
held before, as in one file), and a reply whose class attributes did not come turns the names
known before into stand-ins. M1: a stand-in for a method (a non-data class value) lets an instance's
own attribute of that name win, as in one file. H2: an ``OrderedDict`` whose links miss an entry is
not plain data. H3: ``__notes__`` that the program's class answers with other than a list of
strings comes as a stand-in. M2: ``subprocess.CalledProcessError`` and ``TimeoutExpired`` cross with their
fields (``stdout`` is their property over ``output``), ``None`` ones too.
"""

from __future__ import annotations

import pytest
from sandbox_modes import agrees_with_one_file, score

from lightning_agents.rewards import CodeVerifier

_DELETING = "class E(ValueError):\n    code = 404\ndef f(k):\n    if k:\n        del E.code\n    raise E('x')\n"
_METHOD = (
    "class E(ValueError):\n    def foo(self):\n        return 2\n"
    "def f(k):\n    e = E('x')\n    if k:\n        e.foo = 1\n    raise e\n"
)
# 600 class attributes (past the 500 that cross) once k is set, and code changed to 500
_OVER = (
    "class E(ValueError):\n    code = 404\n"
    "def f(k):\n    if k:\n        E.code = 500\n        for i in range(600):\n"
    "            setattr(E, f'a{i}', i)\n    raise E('x')\n"
)
_UNLINKED = (
    "from collections import OrderedDict\n"
    "def f():\n    o = OrderedDict()\n    dict.__setitem__(o, 'a', 1)\n    return o\n"
    "def g():\n    raise ValueError(f())\n"
)
_CALLED = (
    "import subprocess\n"
    "def f():\n    raise subprocess.CalledProcessError(1, ['ls', '-l'], output='out')\n"
    "def g():\n    raise subprocess.TimeoutExpired('sleep 9', 5, output=b'x')\n"
)
_ANSWERING = "class E(ValueError):\n    def __getattr__(self, n):\n        return 7\ndef f():\n    raise E('bad')\n"

WRONG = {
    # H1: the deleted class attribute stayed on the harness's class
    "class attribute deleted between raises": (
        _DELETING,
        "try:\n    f(0)\nexcept ValueError:\n    pass\ntry:\n    f(1)\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    # H1: in one file the deletion reaches the instance caught before it
    "class attribute deleted, read on the earlier instance": (
        _DELETING,
        "try:\n    f(0)\nexcept ValueError as e:\n    first = e\ntry:\n    f(1)\nexcept ValueError:\n    pass\n"
        "assert first.code == 404\n",
    ),
    # H1: the second raise's class attributes are past the reply's budget: the stale 404 stayed
    "class attributes over budget after a change": (
        _OVER,
        "try:\n    f(0)\nexcept ValueError:\n    pass\ntry:\n    f(1)\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    "class attributes over budget, read on the earlier instance": (
        _OVER,
        "try:\n    f(0)\nexcept ValueError as e:\n    first = e\ntry:\n    f(1)\nexcept ValueError:\n    pass\n"
        "assert first.code == 404\n",
    ),
    # a class attribute of a plain type's subclass that is a descriptor: one file reads its __get__
    "class attribute that is an int descriptor": (
        "class D(int):\n    def __get__(self, obj, kind=None):\n        return 7\n"
        "class E(ValueError):\n    code = D(404)\ndef f():\n    raise E('x')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    # H2: in one file the unlinked entry is not iterated, and the dict is != OrderedDict(a=1)
    "OrderedDict with an unlinked entry": (
        _UNLINKED,
        "from collections import OrderedDict\nassert f() == OrderedDict(a=1)\n",
    ),
    "OrderedDict with an unlinked entry, listed": (_UNLINKED, "assert list(f()) == ['a']\n"),
    "OrderedDict with an unlinked entry in an exception's args": (
        _UNLINKED,
        "from collections import OrderedDict\ntry:\n    g()\nexcept ValueError as e:\n"
        "    assert e.args[0] == OrderedDict(a=1)\n",
    ),
    "OrderedDict with an unlinked entry, the tests swallow everything": (
        _UNLINKED,
        "try:\n    f()\nexcept BaseException:\n    pass\nelse:\n    raise AssertionError('no error')\n"
        "raise AssertionError('not a right program')\n",
    ),
    # M2: stderr is None in one file (so it is there); it must not cross as absent
    "CalledProcessError's None stderr": (
        _CALLED,
        "import subprocess\ntry:\n    f()\nexcept subprocess.CalledProcessError as e:\n"
        "    assert not hasattr(e, 'stderr')\n",
    ),
    "CalledProcessError's None stderr, subprocess not imported by the tests": (
        _CALLED,
        "try:\n    f()\nexcept Exception as e:\n    assert not hasattr(e, 'stderr')\n",
    ),
    # H3: the program's own __getattr__ answers __notes__ (pytest reads it for match=): TypeError
    # in one file; the rebuilt class's dunder misses stayed plain misses
    "own __getattr__ answering dunders, pytest.raises match": (
        _ANSWERING,
        "import pytest\nwith pytest.raises(ValueError, match='bad'):\n    f()\n",
    ),
    "notes that are not a list of str, pytest.raises match": (
        "def f():\n    e = ValueError('bad')\n    e.__notes__ = 7\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError, match='bad'):\n    f()\n",
    ),
    "notes that are not plain data, pytest.raises match": (
        "def f():\n    e = ValueError('bad')\n    e.__notes__ = object()\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError, match='bad'):\n    f()\n",
    ),
    # M2: a field that is not plain data: the fields do not come, and no miss answers "absent"
    "CalledProcessError with a cmd that is not plain data": (
        "import subprocess\nclass C:\n    pass\ndef f():\n    raise subprocess.CalledProcessError(1, C())\n",
        "import subprocess\ntry:\n    f()\nexcept subprocess.CalledProcessError as e:\n"
        "    assert not hasattr(e, 'returncode')\n",
    ),
}

RIGHT = {
    # M1: both orders: the method's stand-in must not hide an instance's own attribute
    "method stand-in vs a later instance's own attribute": (
        _METHOD,
        "for k in (0, 1):\n    try:\n        f(k)\n    except ValueError as e:\n        last = e\nassert last.foo == 1\n",
    ),
    "method stand-in vs an earlier instance's own attribute": (
        _METHOD,
        "for k in (1, 0):\n    try:\n        f(k)\n    except ValueError as e:\n        if k:\n            first = e\n"
        "assert first.foo == 1\n",
    ),
    # H1: the deletion seen, as in one file
    "class attribute deleted between raises, hasattr": (
        _DELETING,
        "try:\n    f(0)\nexcept ValueError:\n    pass\ntry:\n    f(1)\nexcept ValueError as e:\n"
        "    assert not hasattr(e, 'code')\n",
    ),
    "class attribute kept across raises": (
        "class E(ValueError):\n    code = 404\ndef f(k):\n    E.code = 404 + k\n    raise E('x')\n",
        "codes = []\nfor k in (0, 1, 2):\n    try:\n        f(k)\n    except ValueError as e:\n"
        "        codes.append(e.code)\n        last = e\nassert codes == [404, 405, 406] and last.code == 406\n",
    ),
    # M2: the fields and the stdout property
    "CalledProcessError's stdout": (
        _CALLED,
        "import subprocess\ntry:\n    f()\nexcept subprocess.CalledProcessError as e:\n"
        "    assert e.stdout == 'out' and e.returncode == 1 and e.cmd == ['ls', '-l'] and e.stderr is None\n"
        "    assert 'returned non-zero exit status 1' in str(e)\n",
    ),
    "TimeoutExpired's fields": (
        _CALLED,
        "import subprocess\nimport pytest\nwith pytest.raises(subprocess.TimeoutExpired) as info:\n    g()\n"
        "e = info.value\nassert e.stdout == b'x' and e.timeout == 5 and e.cmd == 'sleep 9' and e.stderr is None\n",
    ),
    # H3: a __getattr__ that raises AttributeError for dunders, as a careful one does
    "dunder-safe own __getattr__, pytest.raises match": (
        "class E(ValueError):\n    def __getattr__(self, n):\n        if n.startswith('__'):\n"
        "            raise AttributeError(n)\n        return 7\ndef f():\n    raise E('bad')\n",
        "import pytest\nwith pytest.raises(ValueError, match='bad') as info:\n    f()\n",
    ),
    # traceback shows notes that are not a list (repr(7)) in one file; pytest joins a tuple
    "own __getattr__ answering dunders, traceback": (
        _ANSWERING.replace("ValueError", "AttributeError"),
        "import traceback\ntry:\n    f()\nexcept AttributeError as e:\n"
        "    s = ''.join(traceback.format_exception(e))\n    assert 'bad' in s and '7' in s\n",
    ),
    "notes set to a tuple of str, pytest.raises match": (
        "def f():\n    e = ValueError('bad')\n    e.__notes__ = ('a note',)\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError, match='a note'):\n    f()\n",
    ),
    "own __getattr__ answering dunders, caught and not read": (
        _ANSWERING,
        "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == 'bad'\n",
    ),
    "CalledProcessError's fields, subprocess not imported by the tests": (
        _CALLED,
        "try:\n    f()\nexcept Exception as e:\n    assert e.returncode == 1 and e.output == 'out' and e.stderr is None\n",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_what_fails_in_one_file_fails_here(case):
    agrees_with_one_file(case, *WRONG[case], passes=False)


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_what_passes_in_one_file_passes_here(case):
    agrees_with_one_file(case, *RIGHT[case], passes=True)


def test_unlinked_ordered_dict_is_a_bad_reply():
    """The value is refused as not plain data (``bad_reply``), whatever the tests do with errors."""
    program, tests = WRONG["OrderedDict with an unlinked entry, the tests swallow everything"]
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, "f()\n")
    assert verdict.reason == "bad_reply", verdict


def test_class_attributes_past_the_budget_fail_closed():
    """After a reply whose class attributes did not come, a read of a name known before fails the
    verdict (``LeftOutTouched``), on the new instance and on one caught before."""
    verdict = score(
        CodeVerifier(isolation="process", timeout_s=30), _OVER, WRONG["class attributes over budget after a change"][1]
    )
    assert verdict.reason == "wrong_answer" and verdict.detail.startswith("LeftOutTouched"), verdict


def test_forged_subprocess_error_without_fields_fails_closed():
    """A ``CalledProcessError`` whose args and fields did not come (forged here: no ``args``): a
    miss fails the verdict, and its own ``__str__``, which reads ``returncode``, does so inside the
    harness's report of a failed assert too, never ending the harness without a verdict."""
    from sandbox_attacks import FORGE

    frame = {"raised": "CalledProcessError", "msg": "", "bases": ["subprocess.CalledProcessError", "Exception"]}
    program = FORGE + f"def f(x):\n    forge({frame!r})\n"
    reasons = []
    for tests in (
        "try:\n    f(1)\nexcept Exception as e:\n    assert not hasattr(e, 'returncode')\n",
        "try:\n    f(1)\nexcept Exception as e:\n    assert False, e\n",
    ):
        reasons.append(score(CodeVerifier(isolation="process", timeout_s=30), program, tests).reason)
    assert reasons == ["wrong_answer", "wrong_answer"], reasons
