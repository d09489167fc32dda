"""Mends of the seventh sandbox red team's findings W0, W1, W2 and W4 (session 46, /work/h46/redteam).

W0: tests whose checks sit where executing the file never reaches (pytest-style ``test_*``
functions, a ``unittest.TestCase`` with no runner line as BigCodeBench writes them,
``unittest.main()`` or ``check(f)`` under ``if __name__ == "__main__":``) ended without calling the
candidate, and "the tests ran to their end" passed any program (``detail='0 calls'``). The harness
now runs them as a test runner or the script would; tests that still never call the candidate are
a verifier error, unless the candidate's ``ready`` frame had a say (then its 0).
W1: ``--dev`` binds the host's device nodes, which a root trainer's sandbox user owns outside:
``os.chmod("/dev/null", 0)`` changed the host's node. W2: epoll watches past the descriptor
bound, charged to the trainer user's quota. W4: ``/dev/ptmx`` drew on the kernel-wide pty counter.
"""

from __future__ import annotations

import os
import stat

import pytest
from sandbox_modes import ISOLATIONS

from lightning_agents.errors import VerifierError
from lightning_agents.rewards import run_python
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import judge

BWRAP = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
_CASE = "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"

# Each passes RIGHT and fails WRONG under pytest or as a script; each passed WRONG before.
RUNNER_SHAPES = {
    "pytest function": "def test_add():\n    assert add(1, 2) == 3\n",
    "pytest async function": (
        "import asyncio\n\nasync def test_add():\n    await asyncio.sleep(0)\n    assert add(1, 2) == 3\n"
    ),
    "pytest parametrize": (
        "import pytest\n\n"
        "@pytest.mark.parametrize('a, b, total', [(0, 0, 0), pytest.param(2, 2, 4), (1, 2, 3)])\n"
        "def test_add(a, b, total):\n    assert add(a, b) == total\n"
    ),
    "pytest class": (
        "class TestAdd:\n    def setup_method(self, method):\n        self.one = 1\n\n"
        "    def test_add(self):\n        assert add(self.one, 2) == 3\n"
    ),
    "TestCase with no runner (BigCodeBench)": _CASE,
    "unittest.main() under the __main__ guard": _CASE + "\nif __name__ == '__main__':\n    unittest.main()\n",
    "check(f) under the __main__ guard": "def check(f):\n    assert f(1, 2) == 3\n\nif __name__ == '__main__':\n    check(add)\n",
    "one call, the rest in test functions": "assert add(0, 0) == 0\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "a runner whose result the tests ignore": (
        _CASE + "\nunittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(TestAdd))\n"
    ),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("shape", sorted(RUNNER_SHAPES))
def test_what_a_test_runner_would_run_is_run(shape, isolation):
    """W0: a wrong program passed each shape with 0 calls; now it fails as under a runner."""
    tests = RUNNER_SHAPES[shape]
    right = judge(RIGHT, tests, isolation=isolation)
    assert right.passed and right.detail != "0 calls", right
    wrong = judge(WRONG, tests, isolation=isolation)
    assert not wrong.passed and wrong.reason == "wrong_answer", wrong


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_bigcodebench_row_as_it_comes_scores_its_test_cases(isolation):
    """W0 through the task's reference: BigCodeBench's ``test`` is a ``TestCase`` class with no
    runner, which ``humaneval_reference`` keeps as it is (no ``check`` to append)."""
    from lightning_agents.tasks.code import humaneval_reference

    prompt = "import math\n\ndef task_func(n):\n"
    test = (
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_case_1(self):\n        self.assertEqual(task_func(5), 120)\n"
        "    def test_case_2(self):\n        self.assertEqual(task_func(0), 1)\n"
    )
    reference = humaneval_reference(test, "task_func", prompt)
    right = judge(prompt + "    return math.factorial(n)\n", reference, isolation=isolation, module_name="solution")
    assert right.passed and right.detail == "2 calls", right
    wrong = judge(prompt + "    return -1\n", reference, isolation=isolation, module_name="solution")
    assert not wrong.passed and "2 failed" in wrong.detail, wrong


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_candidates_system_exit_does_not_end_a_unittest_main_script(isolation):
    """``unittest.main()`` ends the tests with a ``SystemExit`` of the harness's own; the
    candidate's ``SystemExit(0)`` inside a test case is that test's error, not the script's end."""
    tests = RUNNER_SHAPES["unittest.main() under the __main__ guard"]
    verdict = judge("def add(a, b):\n    raise SystemExit(0)\n", tests, isolation=isolation)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


FORGED_SKIPS = {
    "unittest.SkipTest in a TestCase": (
        "import unittest\n\ndef add(a, b):\n    raise unittest.SkipTest('skip me')\n",
        RUNNER_SHAPES["TestCase with no runner (BigCodeBench)"],
    ),
    "unittest.SkipTest in a pytest function": (
        "import unittest\n\ndef add(a, b):\n    raise unittest.SkipTest('skip me')\n",
        RUNNER_SHAPES["pytest function"],
    ),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", sorted(FORGED_SKIPS))
def test_the_candidate_cannot_skip_a_test(case, isolation):
    """A skip counts only as the runner's own class (by identity); the candidate's ``SkipTest``
    comes as a class of its own and fails the test."""
    program, tests = FORGED_SKIPS[case]
    verdict = judge(program, tests, isolation=isolation)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


NEVER_CALLING = {
    "a function nothing runs": "def verify():\n    assert add(1, 2) == 3\n",
    # a fixture of pytest's own, which the harness cannot give (one the tests define is given)
    "a test taking a fixture": "def test_add(tmp_path):\n    assert add(1, 2) == 3\n",
    "a skipped test": "import pytest\n\n@pytest.mark.skip\ndef test_add():\n    assert add(1, 2) == 3\n",
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", sorted(NEVER_CALLING))
@pytest.mark.parametrize("program", [RIGHT, WRONG], ids=["right", "wrong"])
def test_tests_that_never_call_the_candidate_are_a_verifier_error(case, program, isolation):
    """W0: what a runner would not run either never calls the candidate: no program can pass
    (before: any did, ``0 calls``), and no program can change that, so it is the tests' fault."""
    with pytest.raises(VerifierError, match="without calling the candidate"):
        judge(program, NEVER_CALLING[case], isolation=isolation)


SWAYED = {
    "a name it reports as a module": (
        "import heapq\n\ndef add(a, b):\n    return a + b\n",
        "if callable(heapq):\n    assert add(heapq(1), 2) == 3\n",
    ),
    "a name it reports as an async def": (
        "async def add(a, b):\n    return a + b\n",
        "import inspect\n\nif not inspect.iscoroutinefunction(add):\n    assert add(1, 2) == 3\n",
    ),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", sorted(SWAYED))
def test_zero_calls_the_candidate_had_a_say_in_are_its_zero(case, isolation):
    """W0's threat-model side: zero calls must not turn a candidate's 0 into "no reward". Before
    its first call it tells the harness only which free names are modules or ``async def``s;
    where that changed the tests' path to no call, the verdict is a wrong answer."""
    program, tests = SWAYED[case]
    verdict = judge(program, tests, isolation=isolation)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


@BWRAP
def test_the_hosts_device_nodes_cannot_be_chmodded():
    """W1: a same-mode chmod (or ACL change) of the host's nodes changes nothing: they keep their
    ctime (before, under a root trainer every one went through, and a real chmod outlived the call;
    now the sandbox runs as an unprivileged uid outside that owns none of them, or, where that drop
    cannot work, such calls succeed without effect)."""
    program = (
        "import os, stat\n"
        "allowed = []\n"
        f"for node in {_NODES!r}:\n"
        "    mode = stat.S_IMODE(os.stat(node).st_mode)\n"
        "    for name, change in (('chmod', lambda: os.chmod(node, mode)),\n"
        "                         ('acl', lambda: os.removexattr(node, 'system.posix_acl_access'))):\n"
        "        try:\n"
        "            change()\n"
        "            allowed.append((name, node))\n"
        "        except OSError as err:\n"
        "            if err.errno != 1 and name == 'acl':\n"
        "                allowed.append((name, node, err.errno))\n"
        "try:\n"
        "    os.fchmod(0, stat.S_IMODE(os.fstat(0).st_mode))\n"
        "    allowed.append('fchmod stdin')\n"
        "except OSError:\n"
        "    pass\n"
        "print(allowed)\n"
    )
    before = {node: os.stat(node).st_ctime_ns for node in _NODES}
    result = run_python(program, timeout_s=10)
    assert result.ok, result.stderr
    assert {node: os.stat(node).st_ctime_ns for node in _NODES} == before
    assert stat.S_IMODE(os.stat("/dev/null").st_mode) == 0o666


@BWRAP
def test_a_program_that_copies_files_with_their_mode_still_runs():
    """W1's mend must not fail right programs: shutil.copy, copy2 and copytree copy the mode after the
    data (an EPERM from chmod made them raise PermissionError)."""
    program = (
        "import os, shutil\n"
        "os.makedirs('/tmp/src/sub')\n"
        "open('/tmp/src/sub/a.txt', 'w').write('data')\n"
        "shutil.copy('/tmp/src/sub/a.txt', '/tmp/b.txt')\n"
        "shutil.copy2('/tmp/src/sub/a.txt', '/tmp/c.txt')\n"
        "shutil.copytree('/tmp/src', '/tmp/dst')\n"
        "os.chmod('/tmp/b.txt', 0o600)\n"
        "print(open('/tmp/dst/sub/a.txt').read(), open('/tmp/c.txt').read())\n"
    )
    result = run_python(program, timeout_s=10)
    assert result.ok, result.stderr
    assert result.stdout.strip() == "data data"


@BWRAP
def test_epoll_watches_cannot_pile_up_past_the_descriptor_cap():
    """W2: a watch is kept per (file, descriptor number) and outlives close() of a dup: 60 epolls x
    120 files x 60 numbers held 400,000 in a second (before), beside the cap's (256 / 2) ** 2."""
    program = (
        "import os, select\n"
        "files = [fd for _ in range(60) for fd in os.pipe()]\n"
        "count = 0\n"
        "try:\n"
        "    eps = [select.epoll() for _ in range(60)]\n"
        "    used = set(files) | {e.fileno() for e in eps} | {0, 1, 2}\n"
        "    free = [n for n in range(3, 256) if n not in used][:60]\n"
        "    for ep in eps:\n"
        "        for f in files:\n"
        "            for n in free:\n"
        "                os.dup2(f, n)\n"
        "                ep.register(n, select.EPOLLIN)\n"
        "                os.close(n)\n"
        "                count += 1\n"
        "except OSError:\n"
        "    pass\n"
        "print(count)\n"
    )
    result = run_python(program, timeout_s=20)
    assert result.ok, result.stderr
    assert int(result.stdout) == 0


@BWRAP
def test_asyncio_runs_on_poll_without_epoll():
    """W2's cost: selectors finds epoll refused when it is imported and asyncio uses poll."""
    program = (
        "import asyncio, selectors\n"
        "async def twice(x):\n    await asyncio.sleep(0.01)\n    return 2 * x\n"
        "async def main():\n    return await asyncio.gather(*(twice(i) for i in range(5)))\n"
        "print(selectors.DefaultSelector.__name__, asyncio.run(main()))\n"
    )
    result = run_python(program, timeout_s=20)
    assert result.ok, result.stderr
    assert result.stdout.strip() == "PollSelector [0, 2, 4, 6, 8]"


@BWRAP
def test_a_sandbox_cannot_hold_the_hosts_ptys():
    """W4: kernel.pty.max is one counter for every devpts instance (a channel between sandboxes,
    and ~40 KiB of unaccounted kernel memory per pty); the sandbox's /dev/pts is now empty."""
    program = (
        "import os\n"
        "held = []\n"
        "try:\n"
        "    while len(held) < 50:\n"
        "        held.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))\n"
        "except OSError:\n"
        "    pass\n"
        "try:\n"
        "    os.openpty()\n"
        "    held.append('openpty')\n"
        "except OSError:\n"
        "    pass\n"
        "print(len(held))\n"
    )
    result = run_python(program, timeout_s=10)
    assert result.ok, result.stderr
    assert int(result.stdout) == 0
