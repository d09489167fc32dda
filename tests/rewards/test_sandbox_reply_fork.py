"""The candidate runs the program's code that building a reply needs (its ``__str__``, an
argument's ``__str__``, a ``__getattr__`` answering ``__notes__``) in a forked child of its own,
one per piece of such code, so what that code changes dies with the child (session 43).

Red team 5's S1, S2 and S6 (/work/h42/redteam_sandbox5, ``scripts/cases8.py``): a ``__str__``
that set ``O.code`` or another class's ``C.code`` left it set in the candidate, so a later reply
read it as the program's own. Red team 6's W (/work/h42/redteam_sandbox6, ``scripts/cases11.py``):
within one reply, a later exception's text was built after an earlier one's ``__str__`` ran (it
changed the later one's ``__class__``, its class's ``__str__``, a global or a counter). In one
file nothing calls that code unless the tests do, so each of these WRONG programs fails there.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, agrees_with_one_file, one_file_passes, score

from lightning_agents.rewards import CodeVerifier

_HELD = "try:\n    f()\nexcept ExceptionGroup as e:\n    g = e\n"

_ACROSS_REPLIES = {
    "S1 own __str__ sets its class's attribute, raised again": (
        "class O(ValueError):\n    def __str__(self):\n        O.code = 404\n        return 'o'\n"
        "def f():\n    raise O()\n",
        "try:\n    f()\nexcept ValueError:\n    pass\ntry:\n    f()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    "S2 own __str__ sets another class's attribute, that one raised later": (
        "class C(ValueError):\n    pass\n"
        "class O(ValueError):\n    def __str__(self):\n        C.code = 404\n        return 'o'\n"
        "def f():\n    raise O()\ndef g():\n    raise C()\n",
        "try:\n    f()\nexcept ValueError:\n    pass\ntry:\n    g()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
    "S6 an argument's __str__ sets a class's attribute, that one raised later": (
        "class C(ValueError):\n    pass\n"
        "class T:\n    def __str__(self):\n        C.code = 404\n        return 't'\n"
        "def f():\n    raise ValueError(T())\ndef g():\n    raise C()\n",
        "try:\n    f()\nexcept ValueError:\n    pass\ntry:\n    g()\nexcept ValueError as e:\n    assert e.code == 404\n",
    ),
}

_WITHIN_ONE_REPLY = {
    "W1 an earlier member sets a later member's __class__": (
        "class C(ValueError):\n    def __str__(self):\n        return 'bad'\n"
        "class F(ValueError):\n    def __str__(self):\n        return 'good'\n"
        "T = []\n"
        "class O(ValueError):\n    def __str__(self):\n        T[0].__class__ = F\n        return 'o'\n"
        "def f():\n    c = C()\n    T.append(c)\n    raise ExceptionGroup('g', [O(), c])\n",
        _HELD + "assert str(g.exceptions[1]) == 'good'\n",
    ),
    "W2 an earlier member sets a later member's class's __str__": (
        "class C(ValueError):\n    def __str__(self):\n        return 'bad'\n"
        "class O(ValueError):\n    def __str__(self):\n        C.__str__ = lambda self: 'good'\n        return 'o'\n"
        "def f():\n    raise ExceptionGroup('g', [O(), C()])\n",
        _HELD + "assert str(g.exceptions[1]) == 'good'\n",
    ),
    "W3 an earlier member sets a global a later member's __str__ reads": (
        "MODE = ['bad']\n"
        "class C(ValueError):\n    def __str__(self):\n        return MODE[0]\n"
        "class O(ValueError):\n    def __str__(self):\n        MODE[0] = 'good'\n        return 'o'\n"
        "def f():\n    raise ExceptionGroup('g', [O(), C()])\n",
        _HELD + "assert str(g.exceptions[1]) == 'good'\n",
    ),
    "W4 the outer exception sets a global its cause's __str__ reads": (
        "MODE = ['bad']\n"
        "class C(ValueError):\n    def __str__(self):\n        return MODE[0]\n"
        "class O(ValueError):\n    def __str__(self):\n        MODE[0] = 'good'\n        return 'o'\n"
        "def f():\n    raise O() from C()\n",
        "try:\n    f()\nexcept ValueError as e:\n    top = e\nassert str(top.__cause__) == 'good'\n",
    ),
    "W5 a counter in __str__, two members of one class": (
        "N = [0]\n"
        "class C(ValueError):\n    def __str__(self):\n        N[0] += 1\n        return f'call {N[0]}'\n"
        "def f():\n    raise ExceptionGroup('g', [C(), C()])\n",
        _HELD + "assert str(g.exceptions[1]) == 'call 2'\n",
    ),
}


@pytest.mark.parametrize("case", sorted(_ACROSS_REPLIES))
def test_what_reply_code_changes_does_not_reach_a_later_reply(case):
    """S1, S2, S6 (WRONG): the change a reply's ``__str__`` made is not the program's own later."""
    program, tests = _ACROSS_REPLIES[case]
    agrees_with_one_file(case, program, tests, passes=False)


@pytest.mark.parametrize("case", sorted(_WITHIN_ONE_REPLY))
def test_each_text_is_built_before_any_other_code_of_the_reply(case):
    """W1 to W5 (WRONG): a later exception's text is its own as the program raised it."""
    program, tests = _WITHIN_ONE_REPLY[case]
    agrees_with_one_file(case, program, tests, passes=False)


def test_what_a_str_changes_still_goes_as_a_stand_in_in_its_own_reply():
    """The fork keeps the candidate as it was, yet what the reply's ``__str__`` changed comes as
    a stand-in in that reply (fail closed): the tests may call ``str(e)`` first, as here, and in
    one file then read the changed value; a WRONG program must not pass on the value before."""
    program = (
        "class E(ValueError):\n    code = None\n"
        "    def __str__(self):\n        if self.code is None:\n            self.code = 400\n"
        "        return f'{self.code}: bad'\n"
        "def f():\n    raise E()\n"
    )
    tests = "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == '400: bad'\n    assert e.code is None\n"
    agrees_with_one_file("lazy code, read as before", program, tests, passes=False)


def test_right_programs_with_their_own_str_pass():
    """RIGHT: group members, a chain and an argument with texts of their own, each read as one
    file gives it; a counter that each text reads once (no text sees another's call)."""
    program = (
        "class C(ValueError):\n    code = 7\n    def __str__(self):\n        return f'c{self.args[0]}'\n"
        "class T:\n    def __str__(self):\n        return 't'\n"
        "def f():\n    raise ExceptionGroup('g', [C(1), C(2), ValueError(T())])\n"
        "def h():\n    raise C(3) from C(4)\n"
    )
    tests = (
        _HELD + "assert [str(x) for x in g.exceptions] == ['c1', 'c2', 't']\nassert g.exceptions[1].code == 7\n"
        "try:\n    h()\nexcept ValueError as e:\n    assert str(e) == 'c3' and str(e.__cause__) == 'c4'\n"
    )
    agrees_with_one_file("right texts", program, tests, passes=True)


def test_a_right_program_whose_str_caches_state():
    """A RIGHT program whose ``__str__`` caches what the tests then read (a
    ``functools.cached_property`` read by ``__str__``). It still fails closed: a property's value is
    never computed by the sandbox (docs/sandbox.md), fork or not; this records that it does."""
    program = (
        "import functools\n"
        "class E(ValueError):\n"
        "    @functools.cached_property\n    def detail(self):\n        return 'd'\n"
        "    def __str__(self):\n        return 'E: ' + self.detail\n"
        "def f():\n    raise E()\n"
    )
    tests = "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == 'E: d'\n    assert e.detail == 'd'\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert not verdict.passed
    assert "LeftOutTouched" in (verdict.detail or ""), verdict


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("the child exits", "import os\n        os._exit(3)"),
        ("the child never answers", "while True:\n            pass"),
    ],
)
def test_a_child_that_gives_no_answer_fails_closed(case, body):
    """A ``__str__`` that ends its process, or never returns, ends or holds only the child: the
    text fails closed (reading it fails the tests) and the candidate goes on, so tests that never
    read it pass, as in one file (before, the candidate died with it, or hung to the deadline)."""
    program = (
        f"class E(ValueError):\n    code = 1\n    def __str__(self):\n        {body}\n        return 'x'\n"
        "def f():\n    raise E()\ndef ok():\n    return 5\n"
    )
    verifier = CodeVerifier(isolation="process", timeout_s=30)
    if case == "the child exits":  # the one that never answers costs 5 s a reply: read once
        reads = "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == 'x'\n"
        assert not score(verifier, program, reads).passed, case
    held = "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 1\nassert ok() == 5\n"
    verdict = score(verifier, program, held)
    assert verdict.passed, (case, verdict)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_each_isolation_forks_the_child(isolation):
    """Under ``bwrap`` (seccomp, the ``pids`` cgroup) as under ``process`` (the audit hook's gate) the
    candidate can fork its child: a right group of texts passes, and W3 and S1 fail, as in one file."""
    verifier = CodeVerifier(isolation=isolation, timeout_s=30)
    program, tests = _WITHIN_ONE_REPLY["W3 an earlier member sets a global a later member's __str__ reads"]
    right = _HELD + "assert str(g.exceptions[1]) == 'bad'\nassert str(g.exceptions[0]) == 'o'\n"
    assert one_file_passes(program, right)
    assert score(verifier, program, right).passed
    assert not score(verifier, program, tests).passed
    program, tests = _ACROSS_REPLIES["S1 own __str__ sets its class's attribute, raised again"]
    assert not score(verifier, program, tests).passed


def test_a_class_attribute_over_a_standard_library_field_is_read_as_lookup_gives_it():
    """RIGHT (red team 4's P13, /work/h42/redteam_sandbox4/scripts/cases5.py): the fields of an
    allowlisted standard-library class are read from the dicts, where no code of the program's
    runs; a plain class attribute of the program's named as one does not hide the instance's."""
    program = (
        "import subprocess\nclass E(subprocess.CalledProcessError):\n    output = 'cls'\n"
        "def f():\n    raise E(1, 'c')\n"
    )
    tests = "try:\n    f()\nexcept Exception as e:\n    assert e.output is None and e.stdout is None\n"
    agrees_with_one_file("P13", program, tests, passes=True)


def test_the_process_guard_lets_only_the_candidates_own_fork_through():
    """Under ``process`` isolation the audit hook opens for the candidate's own fork once, and is
    closed again before the fork's at-fork hooks run: one the program registered may not fork or
    kill through it (nothing forks in one file, so the hook never ran there)."""
    program = (
        "import os\nTRIED = []\n"
        "def before():\n"
        "    for call in (lambda: os.kill(os.getpid(), 0), os.fork):\n"
        "        try:\n            pid = call()\n        except PermissionError:\n            TRIED.append('denied')\n"
        "        else:\n            TRIED.append('allowed')\n            if pid == 0:\n                os._exit(0)\n"
        "os.register_at_fork(before=before)\n"
        "class E(ValueError):\n    def __str__(self):\n        return 'e'\n"
        "def f():\n    raise E()\ndef tried():\n    return TRIED\n"
    )
    tests = "try:\n    f()\nexcept ValueError as e:\n    assert str(e) == 'e'\nassert tried() == ['denied', 'denied'], tried()\n"
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed, verdict
