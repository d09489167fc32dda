"""Under a root trainer the bwrap sandbox runs as an unprivileged outside uid (session 47).

Before, bwrap mapped the sandbox user to the root trainer's uid 0 outside: it owned the host's
device nodes bound in by ``--dev`` (red team 46's W1: ``os.chmod("/dev/null", 0)`` broke the host's
``/dev/null``), so under root chmod and the xattr calls were made no-ops, which failed right
programs (the review of b43161f's R7: a script made executable does not run, ``tarfile`` drops x
bits), and root-only files in the read-only trees were readable. Now a launcher joins the cgroups
as root, binds the trees the sandbox uid cannot reach (the interpreter under ``/root``) where it
can, drops to that uid and execs bwrap: chmod works on the program's own files and fails on the
host's.
"""

from __future__ import annotations

import ast
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_agents.rewards import run_python
from lightning_agents.rewards.isolation import Jail, Limits, isolation_report, sandbox_python
from lightning_agents.rewards.verdict import judge

_REPORT = isolation_report()
pytestmark = [
    pytest.mark.skipif(not _REPORT["bwrap_works"], reason="bubblewrap is unavailable here"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop applies under a root trainer only"),
    # a host where the drop cannot work keeps the root sandbox (with a warning naming why)
    pytest.mark.skipif(
        bool(_REPORT.get("uid_drop_error")), reason=f"no uid drop here: {_REPORT.get('uid_drop_error')}"
    ),
]

# the host's nodes bwrap's --dev binds in
_NODES = tuple(
    n for n in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty") if os.path.exists(n)
)
CHECK = "assert add(1, 2) == 3\n"


def _uids(pid: int) -> tuple[int, ...]:
    """The real, effective, saved and file-system uids of ``pid`` as the host sees them."""
    for line in open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith("Uid:"):
            return tuple(int(u) for u in line.split()[1:])
    raise AssertionError(f"no Uid line for {pid}")


def _jail_run(code: str, ro_paths: tuple[str, ...] = (), while_running=None) -> tuple[int, str, object]:
    """Run ``code`` (``python -I -S -c``) in a bwrap :class:`Jail`; ``while_running(jail)`` is
    called once the program has printed its first line. Returns (exit status, output, what
    ``while_running`` returned)."""
    jail = Jail("bwrap", Limits(), ro_paths=ro_paths)
    out_r, out_w = os.pipe()
    try:
        with open(os.devnull, "rb") as devnull:
            jail.start(
                [sandbox_python(), "-I", "-S", "-c", code], stdin=devnull, stdout=out_w, stderr=out_w, pass_fds=()
            )
        os.close(out_w)
        out_w = -1
        with os.fdopen(out_r, "r") as out:
            out_r = -1
            first = out.readline()
            seen = while_running(jail) if while_running else None
            rest = out.read()
        jail.proc.wait(timeout=20)
        return jail.proc.returncode, first + rest, seen
    finally:
        for fd in (out_r, out_w):
            if fd >= 0:
                os.close(fd)
        jail.close()


def test_every_process_of_the_sandbox_is_the_unprivileged_uid_outside():
    # before: bwrap and the program were uid 0 on the host
    def host_view(jail):
        return {pid: _uids(pid) for pid in jail._descendants()}

    code = (
        "import subprocess, time\nchild = subprocess.Popen(['sleep', '5'])\nprint('ready', flush=True)\n"
        "time.sleep(1)\nchild.kill()\n"
    )
    status, out, seen = _jail_run(code, while_running=host_view)
    assert status == 0 and out.startswith("ready"), out
    assert len(seen) >= 3, seen  # bwrap, the program, its sleep
    uids = {u for ids in seen.values() for u in ids}
    assert len(uids) == 1 and 0 not in uids, seen
    # one of the range's uids: each live sandbox holds its own (tests/rewards/test_sandbox_uid_slots.py)
    (uid,) = uids
    assert 0 <= uid - _REPORT["sandbox_ids"][0] < _REPORT["sandbox_id_count"], (uid, _REPORT["sandbox_ids"])


def test_a_program_can_make_its_own_script_executable_and_run_it():
    # R7: chmod was a no-op under a root trainer, so exec raised PermissionError
    program = (
        "import os, subprocess\n"
        "open('/tmp/hello.sh', 'w').write('#!/bin/sh\\necho hi\\n')\n"
        "os.chmod('/tmp/hello.sh', 0o755)\n"
        "print(oct(os.stat('/tmp/hello.sh').st_mode & 0o777))\n"
        "print(subprocess.run(['/tmp/hello.sh'], capture_output=True, text=True).stdout.strip())\n"
    )
    result = run_python(program, timeout_s=20)
    assert result.ok, result.stderr
    assert result.stdout.split() == ["0o755", "hi"]


def test_tarfile_extraction_keeps_the_x_bits():
    # R7: a member of mode 0o755 came out 0o644
    program = (
        "import io, os, tarfile\n"
        "buf = io.BytesIO()\n"
        "with tarfile.open(fileobj=buf, mode='w') as tar:\n"
        "    data = b'#!/bin/sh\\necho ok\\n'\n"
        "    info = tarfile.TarInfo('bin/run.sh')\n"
        "    info.size, info.mode = len(data), 0o755\n"
        "    tar.addfile(info, io.BytesIO(data))\n"
        "buf.seek(0)\n"
        "with tarfile.open(fileobj=buf) as tar:\n"
        "    tar.extractall('/tmp/out', filter='data')\n"
        "print(oct(os.stat('/tmp/out/bin/run.sh').st_mode & 0o777), os.access('/tmp/out/bin/run.sh', os.X_OK))\n"
    )
    result = run_python(program, timeout_s=20)
    assert result.ok, result.stderr
    assert result.stdout.split() == ["0o755", "True"]


def test_the_hosts_device_nodes_refuse_chmod_and_stay_unchanged():
    # W1: the host's nodes belong to root, which the sandbox no longer is: EPERM, not a silent no-op
    program = (
        "import os, stat\n"
        "refused = []\n"
        f"for node in {_NODES!r}:\n"
        "    for name, change in (('chmod', lambda: os.chmod(node, 0)),\n"
        "                         ('chown', lambda: os.chown(node, 65534, 65534)),\n"
        "                         ('acl', lambda: os.removexattr(node, 'system.posix_acl_access')),\n"
        "                         ('xattr', lambda: os.setxattr(node, 'user.x', b'1'))):\n"
        "        try:\n"
        "            change()\n"
        "        except OSError as err:\n"
        "            refused.append(err.errno)\n"
        "try:\n"
        "    os.fchmod(os.open('/dev/null', os.O_RDONLY), 0)\n"
        "except OSError as err:\n"
        "    refused.append(err.errno)\n"
        "print(refused)\n"
    )
    before = {node: (os.stat(node).st_mode, os.stat(node).st_ctime_ns) for node in _NODES}
    result = run_python(program, timeout_s=10)
    assert result.ok, result.stderr
    assert {node: (os.stat(node).st_mode, os.stat(node).st_ctime_ns) for node in _NODES} == before
    assert stat.S_IMODE(os.stat("/dev/null").st_mode) == 0o666
    assert eval(result.stdout) == [1] * (4 * len(_NODES) + 1), result.stdout  # noqa: S307 -- a list of ints


def test_a_program_can_reopen_its_standard_streams_by_path():
    # /dev/stdin and friends go through /proc/self/fd, which checks the file's mode: the root
    # trainer's 0600 temporary files refused the sandbox uid until they were handed over to it
    # (HEAD passes this: it pins what the drop must keep, as a non-root trainer has it)
    program = (
        "import subprocess, sys\n"
        "print(open('/dev/stdin').read().strip(), flush=True)\n"
        "with open('/dev/stdout', 'a') as f:\n    f.write('stdout by path\\n')\n"
        "with open('/dev/stderr', 'a') as f:\n    f.write('stderr by path\\n')\n"
        "subprocess.run(['sh', '-c', 'echo shell >>/dev/stderr'], check=True)\n"
    )
    before = {node: os.stat(node) for node in _NODES}
    result = run_python(program, stdin="hello", timeout_s=10)
    assert result.ok, result.stderr
    assert result.stdout.split("\n")[:2] == ["hello", "stdout by path"], result.stdout
    assert result.stderr == "stderr by path\nshell\n"
    verdict = judge("print('x', file=open('/dev/stderr', 'w'))\ndef add(a, b):\n    return a + b\n", CHECK)
    assert verdict.passed, verdict
    # the host's nodes (the verdict's stdin is /dev/null) are never handed over
    assert {node: (os.stat(node).st_uid, os.stat(node).st_ctime_ns) for node in _NODES} == {
        node: (st.st_uid, st.st_ctime_ns) for node, st in before.items()
    }


def test_a_root_only_file_in_a_read_only_tree_is_unreadable(tmp_path):
    # root-only files in the trees bound in (/usr, the interpreter's, site-packages) were readable.
    # tmp_path lies under pytest's 0700 folder: the sandbox uid reaches the tree through a bind mount
    tree = tmp_path / "tree"
    tree.mkdir(mode=0o755)
    (tree / "public.txt").write_text("public")
    (tree / "secret.txt").write_text("secret")
    os.chmod(tree / "secret.txt", 0o600)
    code = (
        "import sys\nprint('ready', flush=True)\n"
        f"print(open({str(tree / 'public.txt')!r}).read())\n"
        "try:\n"
        f"    print(open({str(tree / 'secret.txt')!r}).read())\n"
        "except PermissionError:\n    print('refused')\n"
    )
    status, out, _ = _jail_run(code, ro_paths=(str(tree),))
    assert status == 0, out
    assert out.split() == ["ready", "public", "refused"]


def test_the_drop_can_be_switched_off_and_then_warns_once(tmp_path):
    # LIGHTNING_AGENTS_SANDBOX_UID=off keeps the root sandbox (with chmod a no-op) and says why
    script = (
        "import logging, os\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "from lightning_agents.rewards import run_python\n"
        "from lightning_agents.rewards.isolation import check_isolation\n"
        "check_isolation('bwrap')\n"
        "r = run_python(\"import os\\nos.chmod('/dev/null', 0)\\nprint('chmod returned')\", timeout_s=10)\n"
        "print(r.stdout.strip(), oct(os.stat('/dev/null').st_mode & 0o777))\n"
    )
    env = {**os.environ, "LIGHTNING_AGENTS_SANDBOX_UID": "off"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["chmod", "returned", "0o666"]
    assert run.stderr.count("run as root outside") == 1, run.stderr
    assert "LIGHTNING_AGENTS_SANDBOX_UID=off" in run.stderr


def _closed_above(path: str) -> bool:
    """Whether a folder above ``path`` is closed to other users (as ``/root`` is)."""
    parents = Path(os.path.realpath(path)).parents
    return any(not os.stat(parent).st_mode & stat.S_IXOTH for parent in parents)


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs util-linux's setpriv to drop CAP_SYS_ADMIN")
@pytest.mark.skipif(not _closed_above(sys.base_prefix), reason="the interpreter needs no mount namespace here")
def test_where_the_drop_cannot_work_the_sandbox_stays_root_and_warns_why():
    # a root trainer without CAP_SYS_ADMIN cannot make the mount namespace that reaches the
    # interpreter under /root: today's behaviour (chmod a no-op), with a warning naming the cause
    script = (
        "import logging, os\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "from lightning_agents.rewards import run_python\n"
        "from lightning_agents.rewards.isolation import check_isolation\n"
        "report = check_isolation('bwrap')\n"
        "r = run_python(\"import os\\nopen('/tmp/a', 'w').close()\\nos.chmod('/tmp/a', 0o755)\\n"
        "print(oct(os.stat('/tmp/a').st_mode & 0o777))\", timeout_s=10)\n"
        "print(report['sandbox_ids'], r.stdout.strip())\n"
    )
    cmd = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", sys.executable, "-c", script]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["None", "0o644"], run.stdout
    assert run.stderr.count("run as root outside") == 1, run.stderr
    assert "unshare(CLONE_NEWNS): Operation not permitted" in run.stderr, run.stderr


def test_a_bad_sandbox_uid_setting_is_refused_by_name():
    script = (
        "from lightning_agents.rewards.isolation import IsolationUnavailable, check_isolation\n"
        "try:\n    check_isolation('bwrap')\nexcept IsolationUnavailable as err:\n    print(err)\n"
    )
    env = {**os.environ, "LIGHTNING_AGENTS_SANDBOX_UID": "nobody"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "LIGHTNING_AGENTS_SANDBOX_UID='nobody'" in run.stdout, run.stdout


def test_a_chosen_uid_is_the_one_the_sandbox_runs_as():
    script = (
        "import os, subprocess\n"
        "from lightning_agents.rewards.isolation import Jail, Limits, sandbox_python\n"
        "jail = Jail('bwrap', Limits())\n"
        "jail.start([sandbox_python(), '-I', '-S', '-c', 'print(1, flush=True); import time; time.sleep(2)'],\n"
        "           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None, pass_fds=())\n"
        "jail.proc.stdout.readline()\n"
        "ids = {(l.split()[1], g.split()[1]) for pid in jail._descendants()\n"
        "       for l in open(f'/proc/{pid}/status') if l.startswith('Uid:')\n"
        "       for g in open(f'/proc/{pid}/status') if g.startswith('Gid:')}\n"
        "jail.close()\n"
        "print(sorted(ids))\n"
    )
    env = {**os.environ, "LIGHTNING_AGENTS_SANDBOX_UID": "1999999999:1999999998"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    # the k-th uid and gid of the ranges from the chosen ones: the same k, inside the range
    ((uid, gid),) = ast.literal_eval(run.stdout.strip())
    k = int(uid) - 1999999999
    assert int(gid) - 1999999998 == k and 0 <= k < _REPORT["sandbox_id_count"], run.stdout
