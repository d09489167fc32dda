"""The attack suite: hostile programs with wrong solutions score 0 and leave nothing behind.

Runs against the real HumanEval/0 tests. The same file is run as a non-root user (see
docs/sandbox.md, "Testing as another user").
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sandbox_attacks import (
    ATTACKS,  # tests/rewards is on sys.path (rootdir conftest, no packages)
)

from lightning_agents.rewards import CodeVerifier, run_python
from lightning_agents.rewards.isolation import isolation_report

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


@pytest.fixture(scope="module")
def humaneval0(shared_data):
    with gzip.open(shared_data / "humaneval" / "HumanEval.jsonl.gz", "rt") as fh:
        row = json.loads(fh.readline())
    return row, f"{row['test']}\n\ncheck({row['entry_point']})\n"


class _Listener:
    """Host-side TCP listeners on 127.0.0.1 and ::1 and an abstract unix socket; count connections."""

    def __init__(self, marker: str) -> None:
        self.count = 0
        self.socks = []
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.socks.append(self.tcp)
        try:
            tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            tcp6.bind(("::1", self.port))
            self.socks.append(tcp6)
        except OSError:
            pass
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind("\0" + marker)
        self.socks.append(unix)
        for s in self.socks:
            s.listen(8)
            s.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for s in self.socks:
                try:
                    conn, _ = s.accept()
                    self.count += 1
                    conn.close()
                except OSError:
                    continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for s in self.socks:
            s.close()


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _host_files_with(marker: str) -> list[str]:
    found = []
    for root in ("/tmp", "/var/tmp", "/dev/shm", "/usr", "/root", "/work", "/proc"):
        try:
            found += [str(p) for p in Path(root).glob(f"{marker}*")]
            found += [str(p) for p in Path(root).glob(f"*/{marker}*")] if root in ("/tmp",) else []
        except OSError:
            continue
    return found


def _leftover_cgroups() -> list[str]:
    mine = f"la-sbx-{os.getpid()}-"
    out = []
    for base in ("/sys/fs/cgroup",):
        for dirpath, dirnames, _ in os.walk(base):
            out += [os.path.join(dirpath, d) for d in dirnames if d.startswith(mine)]
    return out


def test_the_suite_is_big_and_covers_every_category():
    categories = {c for c, _ in ATTACKS.values()}
    assert len(ATTACKS) >= 30
    assert categories == {"exit", "tamper", "read", "forge", "resource", "escape"}


def test_every_attack_scores_zero_and_leaves_nothing_behind(humaneval0):
    row, reference = humaneval0
    verifier = CodeVerifier(timeout_s=4.0, memory_mb=512)
    # The genuine solution passes through the same verifier (the suite is not passing by breakage).
    assert verifier(row["prompt"] + row["canonical_solution"], reference) == 1.0
    marker = f"la-attack-{uuid.uuid4().hex}"
    listener = _Listener(marker)
    try:
        programs = {
            name: src.replace("{marker}", marker)
            .replace("{pid}", str(os.getpid()))
            .replace("{port}", str(listener.port))
            for name, (_, src) in ATTACKS.items()
        }
        with ThreadPoolExecutor(4) as pool:
            verdicts = dict(zip(programs, pool.map(lambda n: verifier.verdict(programs[n], reference), programs)))
    finally:
        listener.close()
    forged = {name: v for name, v in verdicts.items() if v.passed}
    assert not forged, forged
    assert verdicts["busy_entry_point"].reason == "timeout"
    assert verdicts["always_equal_object"].reason in ("wrong_answer", "bad_reply")
    assert _host_processes_with(marker) == []
    assert _host_files_with(marker) == []
    assert listener.count == 0
    assert _leftover_cgroups() == []
    assert os.getpid() in [int(p) for p in os.listdir("/proc") if p.isdigit()]  # we were not killed


def test_probe_sees_only_its_own_world():
    secret = f"la-secret-{uuid.uuid4().hex}"
    os.environ["LA_TEST_SECRET"] = secret
    try:
        r = run_python(
            "import os, socket\n"
            "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "blob = b''\n"
            "for p in pids:\n"
            "    for n in ('environ', 'cmdline'):\n"
            "        try:\n            blob += open(f'/proc/{p}/{n}', 'rb').read()\n"
            "        except OSError:\n            pass\n"
            "print('PIDS', len(pids))\n"
            "print('ENV', blob.decode('latin-1'))\n"
            "print('CAPS', [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])\n"
            "print('ROOT', sorted(os.listdir('/')))\n"
            "print('IFACES', [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])\n"
            "for fam in (socket.AF_INET, socket.AF_UNIX, socket.AF_INET6):\n"
            "    try:\n        socket.socket(fam)\n        print('SOCKET', fam)\n"
            "    except PermissionError:\n        pass\n"
            "for p in ('/etc/shadow', '/root', '/work', '/home'):\n"
            "    print('EXISTS', p, os.path.exists(p))\n"
            "writable = []\n"
            "for d in ('/', '/dev', '/dev/shm', '/tmp', '/sandbox', '/sandbox/boot', '/usr', '/proc', '/root'):\n"
            "    try:\n        open(d.rstrip('/') + '/probe', 'w').close()\n        writable.append(d)\n"
            "    except OSError:\n        pass\n"
            "print('WRITABLE', writable)\n"
        )
    finally:
        del os.environ["LA_TEST_SECRET"]
    assert r.ok, r.stderr
    assert secret not in r.stdout
    lines = dict(
        line.split(" ", 1) for line in r.stdout.splitlines() if " " in line and line.split(" ", 1)[0] != "EXISTS"
    )
    assert int(lines["PIDS"]) <= 3  # bwrap's init, the program (and nothing of the host)
    assert int(lines["CAPS"], 16) == 0
    assert "SOCKET" not in r.stdout
    assert "work" not in lines["ROOT"] and "home" not in lines["ROOT"]
    assert lines["IFACES"].strip() in ("['lo']", "[]")
    for p in ("/etc/shadow", "/work", "/home"):
        assert f"EXISTS {p} False" in r.stdout
    assert lines["WRITABLE"] == "['/dev/shm', '/tmp']"  # both private and size-capped


def test_kernel_settings_are_read_only_inside(tmp_path):
    # Run as root (as trainers often are), bwrap left /proc/sys writable: a candidate could set
    # kernel.core_pattern to a pipe, which the host kernel runs as root at the next crash. The
    # probe writes only the value a file already holds, so nothing on the host changes.
    r = run_python(
        "import os\n"
        "found = []\n"
        "for root, dirs, files in os.walk('/proc'):\n"
        "    if root.split('/')[2:3] and (root.split('/')[2].isdigit() or root.split('/')[2] in ('self', 'thread-self')):\n"
        "        dirs[:] = []\n"
        "        continue\n"
        "    found += [os.path.join(root, f) for f in files if os.access(os.path.join(root, f), os.W_OK)]\n"
        "print('WRITABLE', len(found), found[:5])\n"
        "for p in ('/proc/sys/kernel/core_pattern', '/proc/sys/kernel/pid_max', '/proc/sys/vm/panic_on_oom'):\n"
        "    try:\n"
        "        value = open(p).read()\n"
        "        with open(p, 'w') as fh:\n"
        "            fh.write(value)\n"
        "        print('WROTE', p)\n"
        "    except OSError as exc:\n"
        "        print('REFUSED', p, exc.strerror)\n"
    )
    assert r.ok, r.stderr
    assert "WRITABLE 0 []" in r.stdout and "WROTE" not in r.stdout, r.stdout
    assert r.stdout.count("REFUSED") == 3


def test_whole_sandbox_memory_and_process_caps():
    # Four children of 150 MiB each under a 256 MiB cap: per-process limits would let them all live;
    # the whole-sandbox cap lets at most one hold its memory. Each child reports when its pages are
    # touched, so a slow machine cannot make the count early.
    r = run_python(
        "import os, select, time\n"
        "r, w = os.pipe()\n"
        "kids, dead = [], set()\n"
        "def alive():\n"
        "    for k in kids:\n"
        "        if k not in dead and os.waitpid(k, os.WNOHANG) != (0, 0):\n"
        "            dead.add(k)\n"
        "    return [k for k in kids if k not in dead]\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        b = bytearray(150 * 2**20)\n"
        "        b[::4096] = b'x' * len(b[::4096])\n"
        "        os.write(w, b'!')\n"
        "        time.sleep(30)\n"
        "    kids.append(pid)\n"
        "done, deadline = 0, time.monotonic() + 20\n"
        "while time.monotonic() < deadline:\n"
        "    living = alive()\n"
        "    if select.select([r], [], [], 0.2)[0]:\n"
        "        done += len(os.read(r, 16))\n"
        "    if done + (4 - len(living)) >= 4:\n"
        "        break\n"
        "time.sleep(0.5)\n"
        "print('HOLDING', len(alive()), 'TOUCHED', done)\n",
        memory_mb=256,
        timeout_s=25,
    )
    if r.ok:  # a cgroup: the kernel killed the children over the cap
        assert int(r.stdout.split()[1]) <= 1, r.stdout
    else:  # no cgroup (non-root): the watchdog killed the whole sandbox
        assert r.killed and not r.timed_out, r
    r = run_python(
        "import os, time\nn = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n            time.sleep(3)\n            os._exit(0)\n"
        "        n += 1\n"
        "except OSError:\n    pass\n"
        "print('FORKED', n)\n",
        max_processes=16,
        timeout_s=8,
    )
    assert r.ok, r.stderr
    assert int(r.stdout.split()[-1]) < 16
