"""Mends of the red team's findings on the exception attributes that cross (session 41).

Each case is a program and its tests, run once in one file (``exec(program + tests)``) and once in
the sandbox: a WRONG case fails in one file and must come out ``wrong_answer`` here, a RIGHT case
passes in one file and must pass here. The one-file outcome is checked in each test, so a case
cannot drift from its label. The cases are the red team's (/work/h41/redteam_sandbox, cases A, B,
D), with real shapes: werkzeug's ``class NotFound(HTTPException): code = 404``
(pallets/werkzeug src/werkzeug/exceptions.py) and cloud-init's ``e = OSError(msg); e.errno =
errno.ENOENT; raise e`` (canonical/cloud-init tests/unittests/config/test_cc_growpart.py).
"""

from __future__ import annotations

import pytest
import sandbox_modes
from sandbox_modes import score

from lightning_agents.rewards import CodeVerifier

# F1: an instance-dict value the program's class hides in one file (a data descriptor of its own
# class or a mixin, a __slots__ member, its own __getattribute__) comes as a stand-in
HIDDEN = {
    "property": (
        "class E(ValueError):\n    @property\n    def code(self):\n        return 500\n"
        "def f():\n    e = E('m')\n    vars(e)['code'] = 404\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError) as e:\n    f()\nassert e.value.code == 404\n",
    ),
    "slots member": (
        "class E(ValueError):\n    __slots__ = ('code',)\n"
        "def f():\n    e = E('m')\n    e.code = 500\n    vars(e)['code'] = 404\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError) as e:\n    f()\nassert e.value.code == 404\n",
    ),
    "own __getattribute__": (
        "class E(ValueError):\n    def __getattribute__(self, name):\n"
        "        return 500 if name == 'code' else super().__getattribute__(name)\n"
        "def f():\n    e = E('m')\n    e.code = 404\n    raise e\n",
        "import pytest\nwith pytest.raises(ValueError) as e:\n    f()\nassert e.value.code == 404\n",
    ),
    "mixin property": (
        "class Mixin:\n    @property\n    def status(self):\n        return 'failed'\n"
        "class E(Mixin, RuntimeError):\n    pass\n"
        "def f():\n    e = E('m')\n    e.__dict__['status'] = 'ok'\n    raise e\n",
        "try:\n    f()\nexcept RuntimeError as e:\n    assert e.status == 'ok'\n",
    ),
}

# F2: checks that look at a stand-in's type alone
INSPECTED = {
    "callable of an object": (
        "class Token:\n    pass\ndef f():\n    e = ValueError('m')\n    e.retry = Token()\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert callable(e.retry)\n",
    ),
    "sys.getsizeof": (
        "def f():\n    e = ValueError('m')\n    e.payload = 'x' * (1 << 20)\n    raise e\n",
        "import sys\ntry:\n    f()\nexcept ValueError as e:\n    assert sys.getsizeof(e.payload) < 10_000\n",
    ),
    "abc isinstance": (
        "class Opaque:\n    pass\ndef f():\n    e = ValueError('m')\n    e.rows = Opaque()\n    raise e\n",
        "import collections.abc\ntry:\n    f()\nexcept ValueError as e:\n"
        "    assert isinstance(e.rows, collections.abc.Collection)\n",
    ),
    "not isinstance str": (
        "def f():\n    e = ValueError('m')\n    e.text = 'x' * (1 << 20)\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert not isinstance(e.text, str)\n",
    ),
    "inspect.isawaitable": (
        "def f():\n    e = ValueError('m')\n    e.job = object()\n    raise e\n",
        "import inspect\ntry:\n    f()\nexcept ValueError as e:\n    assert inspect.isawaitable(e.job)\n",
    ),
    "its own attributes": (
        "def f():\n    e = ValueError('m')\n    e.handler = lambda: None\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.handler._name == 'handler' and e.handler.__doc__ is not None\n",
    ),
}

# F3, F4, F6, F7, F8
OTHER_WRONG = {
    "over keeps the class": (
        "def f():\n    e = KeyError('k')\n    setattr(e, 'n' * 140_000, object())\n    raise e\n",
        "try:\n    f()\nexcept KeyError:\n    raise AssertionError('leaked a KeyError')\nexcept Exception:\n    pass\n",
    ),
    "over: a dropped name is not absent": (
        "def f():\n    e = KeyError('k')\n    for i in range(100_000):\n        setattr(e, f'x{i}', i)\n    raise e\n",
        "try:\n    f()\nexcept KeyError as e:\n    assert getattr(e, 'x99999', None) is None\n",
    ),
    "class attribute is not absent": (
        "class E(ValueError):\n    response = 'stale'\ndef f():\n    raise E('m')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert getattr(e, 'response', None) is None\n",
    ),
    "property is not absent": (
        "class E(ValueError):\n    @property\n    def retry_after(self):\n        return 30\ndef f():\n    raise E('m')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert not hasattr(e, 'retry_after')\n",
    ),
    "own __getattr__: a miss is not absent": (
        "class E(ValueError):\n    def __getattr__(self, name):\n        return 1\ndef f():\n    raise E('m')\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert not hasattr(e, 'code')\n",
    ),
    "non-str key that lookup finds": (
        "class K:\n    def __hash__(self):\n        return hash('code')\n"
        "    def __eq__(self, other):\n        return other == 'code'\n"
        "def f():\n    e = ValueError('m')\n    vars(e)[K()] = 5\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert not hasattr(e, 'code')\n",
    ),
    "OSError errno changed": (
        "def f():\n    e = OSError(2, 'No such file')\n    e.errno = 13\n    raise e\n",
        "try:\n    f()\nexcept OSError as e:\n    assert e.errno == 2\n",
    ),
    "SystemExit code changed": (
        "def main():\n    e = SystemExit(0)\n    e.code = 1\n    raise e\n",
        "import pytest\nwith pytest.raises(SystemExit) as e:\n    main()\nassert e.value.code == 0\n",
    ),
    "UnicodeDecodeError reason changed": (
        "def f():\n    try:\n        b'\\xff'.decode('utf-8')\n    except UnicodeDecodeError as e:\n"
        "        e.reason = 'truncated data'\n        raise\n",
        "import pytest\nwith pytest.raises(UnicodeDecodeError, match='invalid start byte'):\n    f()\n",
    ),
    "pytest.raises(Exception) around a stand-in": (
        "class Detail:\n    pass\n"
        "class ValidationError(ValueError):\n    def __init__(self, errors):\n"
        "        super().__init__('errors')\n        self.errors = errors\n"
        "def validate(data):\n    raise ValidationError([Detail() for k in data])\n",
        "import pytest\nwith pytest.raises(ValueError) as e:\n    validate({'a': 1})\n"
        "with pytest.raises(Exception):\n    e.value.errors.append('x')\n",
    ),
    "except BaseException around a stand-in (sticky)": (
        "class Detail:\n    ok = False\ndef f():\n    e = ValueError('m')\n    e.detail = Detail()\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    try:\n        ok = e.detail.ok\n    except BaseException:\n"
        "        ok = True\n    assert ok\n",
    ),
    "stand-in passed back": (
        "class Cursor:\n    pass\n"
        "def fetch(cursor=None):\n    if cursor is not None and not isinstance(cursor, Cursor):\n"
        "        raise TypeError('bad cursor')\n    e = LookupError('more')\n    e.cursor = Cursor()\n    raise e\n",
        "import pytest\nwith pytest.raises(LookupError) as e:\n    fetch()\n"
        "with pytest.raises(TypeError):\n    fetch(e.value.cursor)\n",
    ),
}

RIGHT = {
    "over keeps the class (pytest.raises, match)": (
        "def f():\n    e = KeyError('k')\n    setattr(e, 'n' * 140_000, 1)\n    raise e\n",
        "import pytest\nwith pytest.raises(KeyError, match='k') as e:\n    f()\n"
        "assert type(e.value).__name__ == 'KeyError' and e.value.args == ('k',)\n",
    ),
    "cloud-init errno after construction": (
        "import errno\ndef f(path):\n    e = OSError(f'cannot open {path}')\n    e.errno = errno.ENOENT\n"
        "    e.filename = path\n    raise e\n",
        "import errno\ntry:\n    f('x')\nexcept OSError as e:\n"
        "    assert e.errno == errno.ENOENT and e.filename == 'x' and str(e) == \"[Errno 2] None: 'x'\"\n",
    ),
    "OSError class from args, fields after": (
        "def f():\n    e = OSError(2, 'No such file')\n    e.errno, e.strerror = 13, 'denied'\n    raise e\n",
        "try:\n    f()\nexcept FileNotFoundError as e:\n    assert e.errno == 13 and str(e) == '[Errno 13] denied'\n",
    ),
    "SyntaxError fields after construction": (
        "def f():\n    e = SyntaxError('bad token')\n    e.lineno = 1\n    e.offset = 7\n    e.text = 'x = $'\n    raise e\n",
        "import pytest\nwith pytest.raises(SyntaxError) as e:\n    f()\n"
        "assert e.value.offset == 7 and e.value.lineno == 1 and e.value.text == 'x = $' and e.value.msg == 'bad token'\n",
    ),
    "SystemExit code after construction": (
        "def main():\n    e = SystemExit(0)\n    e.code = 3\n    raise e\n",
        "import pytest\nwith pytest.raises(SystemExit) as e:\n    main()\nassert e.value.code == 3\n",
    ),
    "werkzeug class attributes": (
        "class HTTPException(Exception):\n    code = None\n"
        "class NotFound(HTTPException):\n    code = 404\n    description = 'not found'\n"
        "def f():\n    raise NotFound()\n",
        "try:\n    f()\nexcept Exception as e:\n    assert e.code == 404 and e.description == 'not found'\n",
    ),
    "instance attribute over a class attribute": (
        "class E(ValueError):\n    code = 500\n    def __init__(self, code):\n"
        "        super().__init__('m')\n        self.code = code\ndef f():\n    raise E(404)\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.code == 404 and type(e).code == 500\n",
    ),
    "callable stand-in": (
        "def f():\n    e = ValueError('m')\n    e.handler = lambda: None\n    e.token = object()\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert callable(e.handler) and not callable(e.token)\n",
    ),
    "built-in descriptor names stay the harness's": (
        "def f():\n    e = ValueError('real')\n    vars(e)['args'] = ('forged',)\n    e.ok = 1\n    raise e\n",
        "try:\n    f()\nexcept ValueError as e:\n    assert e.args == ('real',) and e.__dict__['args'] == ('forged',) and e.ok == 1\n",
    ),
}


def one_file_passes(program: str, tests: str) -> bool:
    return sandbox_modes.one_file_passes(program, tests, namespace={"__name__": "__main__"})


WRONG = {**HIDDEN, **INSPECTED, **OTHER_WRONG}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_what_fails_in_one_file_fails_here(case):
    program, tests = WRONG[case]
    assert not one_file_passes(program, tests)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer", (case, verdict)


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_what_passes_in_one_file_passes_here(case):
    program, tests = RIGHT[case]
    assert one_file_passes(program, tests)
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.passed, (case, verdict)


def test_a_stand_ins_use_names_it_and_is_no_exception():
    """The verdict names the stand-in's error, a ``BaseException`` (``LeftOutTouched``), whatever
    the tests made of it."""
    program = "def f():\n    e = ValueError('m')\n    e.node = object()\n    raise e\n"
    tests = (
        "try:\n    f()\nexcept ValueError as e:\n    try:\n        e.node.label\n    except Exception:\n"
        "        raise AssertionError('caught as an Exception')\n"
    )
    verdict = score(CodeVerifier(isolation="process", timeout_s=30), program, tests)
    assert verdict.reason == "wrong_answer" and verdict.detail.startswith("LeftOutTouched"), verdict


def test_forged_class_attributes_reach_no_built_in_class_and_no_hook():
    """A forged ``"cvars"`` sets nothing on a built-in class (``KeyError`` itself) and no dunder
    name on a class the harness made: only what a program could define in its own class body."""
    from sandbox_attacks import FORGE

    frames = (
        {"raised": "KeyError", "msg": "'k'", "args": ["k"], "cvars": [["code", 404]]},
        {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "args": ["m"], "cvars": [["__eq__", None, "x"]]},
        {"raised": "Mine", "msg": "m", "bases": ["ValueError"], "args": ["m"], "cvars": [["code", 1, "int"]]},
    )
    tests = (
        "try:\n    f(1)\nexcept KeyError as e:\n    assert e.code == 404\n",
        "try:\n    f(1)\nexcept ValueError as e:\n    assert e == e and not hasattr(KeyError, 'code')\n",
        "try:\n    f(1)\nexcept BaseException:\n    pass\n",
    )
    reasons = []
    for frame, test in zip(frames, tests):
        program = FORGE + f"def f(x):\n    forge({frame!r})\n"
        reasons.append(score(CodeVerifier(isolation="process", timeout_s=30), program, test).reason)
    assert reasons == ["wrong_answer", "pass", "bad_reply"], reasons
