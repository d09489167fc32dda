"""Sandbox wire and boot, session 48: a bytearray the tests exported, deque arguments, core dumps.

- F4 (review of the argument send-back): a bytearray the tests hold a ``memoryview`` of cannot be
  resized in one file, so the candidate's ``append`` raises ``BufferError`` where the program may
  catch it. Before, the candidate's copy resized freely and the harness's write-back raised
  ``BufferError`` in the tests after the earlier objects of the same reply were written. Now the
  export is held in the sandbox for the call (the candidate gets the error as in one file), and one
  the tests made while a coroutine ran is caught before anything is written.
- ``collections.deque`` arguments (and values) cross, ``maxlen`` kept, their in-place changes come
  back like a list's, and a subclass overriding a mutating method fails closed (``guarded``).
  Before, passing a deque raised ``TypeError`` into the tests and returning one was ``bad_reply``.
- W6 (red team 46): a crash inside the sandbox ran the host's ``core_pattern`` pipe helper (as host
  root), which ``RLIMIT_CORE`` 0 does not stop. Now the limit is 1 byte (the kernel refuses pipe
  dumps then), set before bubblewrap starts, and seccomp refuses changing it.

Every verdict case is checked against one file first (``one_file_passes``).
"""

from __future__ import annotations

import json

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.errors import VerifierError
from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards._jail import la_wire


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=30), program, tests)


def _agrees(program, tests, passes, isolation="process"):
    """One file and the sandbox (``isolation``) give ``passes`` for ``program`` under ``tests``."""
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests, isolation)
    assert verdict.passed is passes, verdict
    return verdict


# -- F4: a bytearray the tests exported ---------------------------------------------------------

EXPORT_CASES = {
    # the review's repro: the program catches the BufferError its resize raises; a change that
    # keeps the length is no resize (it goes through, and the view shows it); once the tests
    # release their view, the next call resizes as any
    "caught": (
        "def f(b, a):\n    b[0] = 65\n    a.append(1)\n    try:\n        b.append(1)\n    except BufferError:\n"
        "        return 'refused'\n    return 'ok'\n",
        "a = []\nb = bytearray(b'x')\nm = memoryview(b)\nassert f(b, a) == 'refused'\n"
        "assert a == [1] and b == bytearray(b'A') and m[0] == 65\n"
        "m.release()\nassert f(b, a) == 'ok' and b == bytearray(b'A\\x01') and a == [1, 1]\n",
        True,
    ),
    # the resize raises before the list is changed: in one file the list stays empty (before, the
    # harness wrote the list, then failed on the bytearray)
    "uncaught, list after": (
        "def f(a, b):\n    b.append(1)\n    a.append(1)\n",
        "a, b = [], bytearray(b'x')\nm = memoryview(b)\ntry:\n    f(a, b)\nexcept BufferError:\n    pass\n"
        "else:\n    raise AssertionError('no BufferError')\nassert a == [] and b == bytearray(b'x'), (a, b)\n",
        True,
    ),
    # the tests expect the BufferError themselves, after the list was changed (before, the harness
    # wrote its objects in their numbers' order, so the bytearray's refusal came first)
    "the tests catch it": (
        "def pad(b, a):\n    a.append(0)\n    b.extend(b'00')\n",
        "b, a = bytearray(b'12'), []\nm = memoryview(b)\ntry:\n    pad(b, a)\nexcept BufferError:\n    pass\n"
        "else:\n    raise AssertionError('no BufferError')\nassert a == [0] and b == bytearray(b'12'), (a, b)\n",
        True,
    ),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", list(EXPORT_CASES))
def test_a_bytearray_the_tests_exported_cannot_be_resized_by_the_candidate(case, isolation):
    program, tests, passes = EXPORT_CASES[case]
    _agrees(program, tests, passes, isolation)


ASYNC_EXPORT = """
import asyncio
async def main():
    a, b = [], bytearray(b'x')
    c = f(a, b)
    m = memoryview(b)  # made after the call, before its coroutine runs
    try:
        await c
    except BufferError:
        pass
    else:
        raise AssertionError('no BufferError')
    assert a == [] and b == bytearray(b'x'), (a, b)
    m.release()
    d = f(a, b)
    await d
    assert a == [1] and b == bytearray(b'x\\x01'), (a, b)
asyncio.run(main())
"""
ASYNC_RESIZER = "import asyncio\nasync def f(a, b):\n    await asyncio.sleep(0)\n    b.append(1)\n    a.append(1)\n"


def test_an_export_made_before_a_coroutine_runs_is_held_for_its_run():
    _agrees(ASYNC_RESIZER, ASYNC_EXPORT, True)


LATE_EXPORT = """
import asyncio
async def main():
    a, b = [], bytearray(b'x')
    views = []
    async def export_soon():
        views.append(memoryview(b))  # while the candidate's coroutine is running
    task = asyncio.ensure_future(export_soon())
    try:
        await f(a, b)
    except BufferError:
        outcome = 'BufferError'
    else:
        outcome = 'returned'
    await task
    return outcome, list(a), bytes(b)
result = asyncio.run(main())
"""


def test_an_export_made_while_the_coroutine_ran_refuses_the_write_and_writes_nothing():
    # In one file the program's resize raises after export_soon ran (the sleep lets it), after it
    # changed the list: the sandbox cannot replay that order, so it raises the BufferError into the
    # tests with nothing written (fails closed: the list's change is lost, never a resize let through)
    program = "import asyncio\nasync def f(a, b):\n    a.append(1)\n    await asyncio.sleep(0.2)\n    b.append(1)\n"
    one = {}
    exec(compile(program + LATE_EXPORT, "one file", "exec"), one)  # noqa: S102
    assert one["result"] == ("BufferError", [1], b"x")
    tests = LATE_EXPORT + "assert result == ('BufferError', [], b'x'), result\n"
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict


def test_the_wire_marks_an_exported_bytearray_and_the_decoder_holds_an_export():
    b, c = bytearray(b"ab"), bytearray(b"cd")
    view = memoryview(b)
    frames, _named, objects = la_wire.encode_call([b, c], {})
    assert frames == [{"bx": "6162"}, {"ba": "6364"}] and objects == [b, c]
    assert b == bytearray(b"ab") and la_wire.exported(b) and not la_wire.exported(c)  # the probe leaves it as it was
    held = []
    (theirs_b, theirs_c), _, _ = la_wire.decode_call(*json.loads(json.dumps([frames, []])), held)
    with pytest.raises(BufferError):
        theirs_b.append(1)
    theirs_c.append(1)
    for h in held:
        h.release()
    theirs_b.append(1)
    # a "bx" frame anywhere but a call's arguments is not plain data
    with pytest.raises(la_wire.WireError):
        la_wire.decode({"bx": "00"})
    # a late export: the resize is found before anything is written
    writes, _ = la_wire.decode_moved([b, c], [[1, "00"], [0, "00"]])
    assert la_wire.resize_refused(writes) is b
    view.release()
    assert la_wire.resize_refused(writes) is None


# -- deque arguments and values -------------------------------------------------------------------

DEQUE_CASES = {
    "sum of a deque": (
        "def f(d):\n    return sum(d)\n",
        "from collections import deque\nassert f(deque([1, 2, 3])) == 6\n",
    ),
    "rotate in place": (
        "def f(d, k):\n    d.rotate(k)\n",
        "from collections import deque\nd = deque([1, 2, 3, 4])\nkeep = d\nf(d, 1)\n"
        "assert d == deque([4, 1, 2, 3]) and keep is d\n",
    ),
    "appendleft and popleft (a BFS queue)": (
        "def f(q):\n    first = q.popleft()\n    q.appendleft(0)\n    q.append(first)\n    return first\n",
        "from collections import deque\nq = deque([5, 6])\nassert f(q) == 5\nassert list(q) == [0, 6, 5]\n",
    ),
    "maxlen kept both ways": (
        "from collections import deque\ndef f(d):\n    d.append(9)\n    return deque(d, maxlen=d.maxlen), d.maxlen\n",
        "from collections import deque\nd = deque([1, 2], maxlen=2)\nr, n = f(d)\n"
        "assert n == 2 and r.maxlen == 2 and d.maxlen == 2 and list(d) == [2, 9] == list(r)\n",
    ),
    "returned deque": (
        "from collections import deque\ndef f(n):\n    return deque(range(n), maxlen=5)\n",
        "from collections import deque\nr = f(3)\nassert r == deque([0, 1, 2]) and type(r) is deque and r.maxlen == 5\n",
    ),
    "return the argument itself": (
        "def f(d):\n    d.append(1)\n    return d\n",
        "from collections import deque\nd = deque()\nassert f(d) is d and d == deque([1])\n",
    ),
    "a deque holding itself and a shared list": (
        "def f(d):\n    d[1].append(2)\n    return len(d)\n",
        "from collections import deque\nlst = [1]\nd = deque([0, lst])\nd.append(d)\nassert f(d) == 3\n"
        "assert lst == [1, 2] and d[2] is d and d[1] is lst\n",
    ),
    "a plain subclass comes back into the tests' object": (
        "def f(d):\n    d.extendleft([1, 2])\n",
        "from collections import deque\nclass Q(deque):\n    pass\nq = Q([3], maxlen=3)\nf(q)\n"
        "assert type(q) is Q and list(q) == [2, 1, 3] and q.maxlen == 3\n",
    ),
    "type-strict deque items": (
        "from collections import deque\ndef f():\n    return deque([True])\n",
        "from collections import deque\nassert f() != deque([1])\n",
    ),
}
# the type-strict ``==`` of the harness (True is not 1) goes further than one file: there it fails
ONE_FILE_DIFFERS = {"type-strict deque items"}


@pytest.mark.parametrize("case", list(DEQUE_CASES))
def test_deque_arguments_and_values_cross_and_their_changes_come_back(case):
    program, tests = DEQUE_CASES[case]
    if case in ONE_FILE_DIFFERS:
        assert not one_file_passes(program, tests)
        assert _verdict(program, tests).passed
        return
    _agrees(program, tests, True)


def test_a_program_that_empties_its_deque_fails_a_keep_input_test():
    tests = "from collections import deque\nd = deque([1, 2])\nassert f(d) == 2\nassert d == deque([1, 2])\n"
    _agrees("def f(d):\n    return len(d)\n", tests, True)
    verdict = _agrees("def f(d):\n    n = len(d)\n    d.clear()\n    return n\n", tests, False)
    assert verdict.reason == "wrong_answer", verdict


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_deque_rotation_agrees_under_each_isolation(isolation):
    program, tests = DEQUE_CASES["rotate in place"]
    _agrees(program, tests, True, isolation)


GUARDED_DEQUE = """
from collections import deque
class Frozen(deque):
    def rotate(self, n=1):
        raise TypeError('frozen')
d = Frozen([1, 2, 3])
try:
    f(d)
except TypeError:
    pass
else:
    raise AssertionError('the guard did not fire')
assert list(d) == [1, 2, 3]
"""


def test_a_guarded_deque_subclass_fails_closed():
    # in one file the tests' rotate raises; here the candidate rotated a plain copy, so the harness
    # refuses the change (TypeError, nothing written), as for a guarded list; the tests pass on it,
    # as in one file, but the TypeError is the harness's guess at the tests' method: no verdict
    assert one_file_passes("def f(d):\n    d.rotate(1)\n", GUARDED_DEQUE)
    with pytest.raises(VerifierError, match="changed an argument of the tests' class Frozen"):
        _verdict("def f(d):\n    d.rotate(1)\n", GUARDED_DEQUE)
    verdict = _verdict("def f(d):\n    d.rotate(1)\n", GUARDED_DEQUE.replace("except TypeError", "except KeyError"))
    assert not verdict.passed and "overrides deque.rotate" in verdict.detail, verdict
    # a program that does not change it passes the guard's test as in one file
    assert not one_file_passes("def f(d):\n    return sum(d)\n", GUARDED_DEQUE)
    assert not _verdict("def f(d):\n    return sum(d)\n", GUARDED_DEQUE).passed


def test_a_deque_raised_in_an_exception_keeps_its_kind():
    program = "from collections import deque\ndef f():\n    raise ValueError(deque([1, 2], maxlen=4))\n"
    tests = (
        "from collections import deque\ntry:\n    f()\nexcept ValueError as e:\n"
        "    assert e.args[0] == deque([1, 2]) and e.args[0].maxlen == 4, e.args\n"
    )
    _agrees(program, tests, True)


def test_the_wire_refuses_a_deque_past_its_maxlen():
    assert la_wire.decode(la_wire.encode(__import__("collections").deque([1], maxlen=1))).maxlen == 1
    for bad in ({"dq": [[1, 2], 1]}, {"dq": [[], -1]}, {"dq": [[], "1"]}, {"dq": [[]]}):
        with pytest.raises(la_wire.WireError):
            la_wire.decode(bad)


# -- W6: RLIMIT_CORE of 1 byte, set before bwrap, kept by seccomp ---------------------------------

CORE_PROGRAM = """
import os, resource
def core():
    return resource.getrlimit(resource.RLIMIT_CORE)
def proc_limits():
    with open('/proc/self/limits') as fh:
        return [line.split()[-3:] for line in fh if line.startswith('Max core file size')][0]
def refused(name, *args):
    call = {'set': resource.setrlimit, 'prlimit': lambda *a: resource.prlimit(0, *a)}[name]
    which = resource.RLIMIT_CORE if args[0] == 'core' else resource.RLIMIT_NOFILE
    try:
        call(which, *args[1:])
    except (OSError, ValueError):
        return True
    return False
def crash():
    os.abort()
"""
CORE_TESTS = """
assert core() == (1, 1), core()
assert proc_limits() == ['1', '1', 'bytes'], proc_limits()
assert refused('set', 'core', (0, 0)) is {lower}
assert refused('set', 'core', (1 << 20, 1 << 20))
assert refused('prlimit', 'core', (0, 0)) is {lower}
assert not refused('prlimit', 'core')  # reading it works
assert not refused('set', 'nofile', (64, 64))  # other limits stay the program's to lower
"""
LAUNCH_PATHS = ["as run here", "no uid drop", "no uid drop, no cgroup"]


def _launch_path(monkeypatch, path):
    """Make the sandboxes start as ``path`` says: the uid-drop launcher (a root trainer), or the
    plain one (a non-root trainer, a root one whose drop is off or failed), with or without a
    cgroup to join."""
    from lightning_agents.rewards import isolation

    isolation.isolation_report()
    if path != "as run here":
        monkeypatch.setitem(isolation._probed, "sandbox_ids", None)
    if path == "no uid drop, no cgroup":
        monkeypatch.setitem(isolation._probed, "cgroups", None)
        monkeypatch.setitem(isolation._probed, "root", False)


@pytest.mark.parametrize("path", LAUNCH_PATHS)
def test_bwrap_sandboxes_run_with_a_core_limit_of_one_byte_they_cannot_change(path, monkeypatch):
    from lightning_agents.rewards.isolation import isolation_report

    if not isolation_report()["bwrap_works"]:
        pytest.skip("bubblewrap is unavailable here")
    _launch_path(monkeypatch, path)
    verdict = _verdict(CORE_PROGRAM, CORE_TESTS.format(lower=True), "bwrap")
    assert verdict.passed, verdict
    # a crash still ends in the verdict it had (the limit only keeps the host's core helper away)
    crashed = _verdict(CORE_PROGRAM, "crash()\n", "bwrap")
    assert not crashed.passed and crashed.reason == "candidate_died", crashed


def test_the_process_mode_sets_the_core_limit_which_a_program_may_lower():
    # no seccomp in the weaker mode: the boot sets 1 byte, a program may lower it to 0 (documented)
    verdict = _verdict(CORE_PROGRAM, CORE_TESTS.format(lower=False), "process")
    assert verdict.passed, verdict
    crashed = _verdict(CORE_PROGRAM, "crash()\n", "process")
    assert not crashed.passed and crashed.reason == "candidate_died", crashed


def test_a_launcher_that_cannot_raise_a_hard_core_limit_of_zero_starts_the_sandbox_anyway(monkeypatch):
    # A non-root trainer (or a container's root without CAP_SYS_RESOURCE) whose hard RLIMIT_CORE is
    # 0 cannot raise it to 1: the launcher leaves it (no worse than before) instead of failing.
    import sys
    import types

    from lightning_agents.rewards import isolation

    calls = []

    def refuse(which, limits):
        calls.append((which, limits))
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setitem(sys.modules, "resource", types.SimpleNamespace(RLIMIT_CORE=4, setrlimit=refuse))
    namespace = {}
    exec(isolation._CORE_LIMITED + "limit_core()\n", namespace)  # noqa: S102
    assert calls == [(4, (1, 1))]
