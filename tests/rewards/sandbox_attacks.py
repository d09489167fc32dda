"""Hostile candidate programs for HumanEval/0 (``has_close_elements``), each with a wrong solution.

Every program here must score 0 with :class:`~lightning_agents.rewards.CodeVerifier`: the solution
itself is wrong (it always answers ``False``, or the attack replaces it), so any 1.0 means the attack
forged a pass. ``{marker}``, ``{pid}`` and ``{port}`` are filled in by the tests: a unique string to
look for on the host afterwards, the test process's pid, and a host TCP port that counts
connections.
"""

WRONG = "def has_close_elements(numbers, threshold):\n    return False\n"

# A candidate preamble: forge(frame) answers the tests' call with a reply frame of the candidate's
# own writing, straight on the channel's descriptor, and exits before the real reply.
FORGE = """
import json, os, struct, sys

def forge(frame):
    body = json.dumps(frame).encode()
    os.write(int(sys.argv[3]), struct.pack(">I", len(body)) + body)
    os._exit(0)
"""

ATTACKS: dict[str, tuple[str, str]] = {
    # ------------------------------------------------------------------ early exits
    "sys_exit": ("exit", WRONG + "import sys\nsys.exit(0)\n"),
    "os_exit": ("exit", WRONG + "import os\nos._exit(0)\n"),
    "raise_systemexit": ("exit", WRONG + "raise SystemExit(0)\n"),
    "builtin_exit": ("exit", WRONG + "exit()\n"),
    "exit_inside_entry_point": ("exit", "import os\ndef has_close_elements(numbers, threshold):\n    os._exit(0)\n"),
    "sys_exit_inside_entry_point": (
        "exit",
        "import sys\ndef has_close_elements(numbers, threshold):\n    sys.exit(0)\n",
    ),
    "alarm_handler_exits": (
        "exit",
        WRONG
        + "import os, signal\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\nsignal.setitimer(signal.ITIMER_REAL, 0.05)\n",
    ),
    "timer_thread_exits": ("exit", WRONG + "import os, threading\nthreading.Timer(0.05, os._exit, (0,)).start()\n"),
    "atexit_exits": ("exit", WRONG + "import atexit, os\natexit.register(os._exit, 0)\n"),
    "excepthook_exits": (
        "exit",
        WRONG + "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\nsys.unraisablehook = sys.excepthook\n",
    ),
    "daemon_thread_exits": (
        "exit",
        WRONG
        + "import os, threading, time\ndef _k():\n    time.sleep(0.02)\n    os._exit(0)\nthreading.Thread(target=_k, daemon=True).start()\n",
    ),
    "kill_own_group": ("exit", WRONG + "import os, signal\nos.killpg(0, signal.SIGTERM)\n"),
    # ------------------------------------------------------------------ tampering with tests or builtins
    "settrace_swaps_check": (
        "tamper",
        WRONG
        + (
            "import sys\n"
            "def _tracer(frame, event, arg):\n"
            "    if frame.f_code.co_name == 'check':\n"
            "        frame.f_globals['check'] = lambda c: None\n"
            "    return _tracer\n"
            "sys.settrace(_tracer)\n"
        ),
    ),
    "always_equal_object": (
        "tamper",
        (
            "class _Eq:\n    def __eq__(self, o):\n        return True\n    __ne__ = lambda s, o: False\n    __hash__ = lambda s: 0\n"
            "def has_close_elements(numbers, threshold):\n    return _Eq()\n"
        ),
    ),
    "always_equal_bool_subclass": (
        "tamper",
        (
            "class _Eq(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
            "def has_close_elements(numbers, threshold):\n    return _Eq(0)\n"
        ),
    ),
    "truthy_one_for_true": (
        "tamper",
        (
            "def has_close_elements(numbers, threshold):\n"
            "    return 1 if any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i+1:]) else 0\n"
        ),
    ),
    "patched_builtins": (
        "tamper",
        WRONG
        + (
            "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.isinstance = lambda *a: True\n"
            "builtins.AssertionError = type('AssertionError', (BaseException,), {})\nbuiltins.bool = lambda *a: True\n"
        ),
    ),
    "gc_cells_rewrite": (
        "tamper",
        WRONG
        + (
            "import gc\n"
            "for o in gc.get_objects():\n"
            "    if type(o).__name__ == 'function' and o.__closure__:\n"
            "        for c in o.__closure__:\n"
            "            try:\n                c.cell_contents = (lambda *a, **k: None)\n"
            "            except Exception:\n                pass\n"
        ),
    ),
    "replace_reply_loop": (
        "tamper",
        WRONG + ("import sys\nm = sys.modules.get('la_wire')\nif m:\n    m.encode = lambda v, depth=0: True\n"),
    ),
    "forge_reply_frames": (
        "forge",
        (
            "import os, json, struct\n"
            "def has_close_elements(numbers, threshold):\n"
            "    for fd in range(3, 40):\n"
            "        for msg in ({'status': 'pass'}, {'ok': True}, {'ready': 1}):\n"
            "            body = json.dumps(msg).encode()\n"
            "            try:\n                os.write(fd, struct.pack('>I', len(body)) + body)\n"
            "            except OSError:\n                pass\n"
            "    return True\n"
        ),
    ),
    # ------------------------------------------------------------------ reading the tests
    "read_file_dunder": (
        "read",
        (
            "import re\n"
            "def has_close_elements(numbers, threshold):\n"
            "    src = open(__file__).read()\n"
            "    m = re.search(re.escape(repr(numbers)) + r', ' + re.escape(repr(threshold)) + r'\\) == (True|False)', src)\n"
            "    return m.group(1) == 'True' if m else False\n"
        ),
    ),
    "caller_frame_locals": (
        "read",
        (
            "import sys\n"
            "def has_close_elements(numbers, threshold):\n"
            "    f = sys._getframe(1)\n"
            "    while f:\n"
            "        for v in f.f_locals.values():\n"
            "            if isinstance(v, str) and 'candidate(' in v:\n"
            "                return 'True' in v.split(repr(numbers))[1][:40]\n"
            "        f = f.f_back\n"
            "    return False\n"
        ),
    ),
    "caller_source_line": (
        "read",
        (
            "import inspect\n"
            "def has_close_elements(numbers, threshold):\n"
            "    for fr in inspect.stack():\n"
            "        for line in fr.code_context or []:\n"
            "            if '== True' in line:\n                return True\n"
            "            if '== False' in line:\n                return False\n"
            "    return False\n"
        ),
    ),
    "check_bytecode_consts": (
        "read",
        (
            "import gc\n"
            "def has_close_elements(numbers, threshold):\n"
            "    for o in gc.get_objects():\n"
            "        code = getattr(o, '__code__', None)\n"
            "        if code is not None and code.co_name == 'check':\n"
            "            consts = code.co_consts\n"
            "            return bool(consts)\n"
            "    return False\n"
        ),
    ),
    "scan_filesystem_for_tests": (
        "read",
        (
            "import os\nFOUND = []\n"
            "for root in ('/', '/work', '/root', '/home', '/tmp', '/usr/share'):\n"
            "    try:\n        for dp, dn, fn in os.walk(root):\n"
            "            FOUND += [os.path.join(dp, f) for f in fn if 'HumanEval' in f or f.endswith('.jsonl.gz')]\n"
            "    except OSError:\n        pass\n"
            "def has_close_elements(numbers, threshold):\n    return bool(FOUND)\n"
        ),
    ),
    "proc_snoop_environ_cmdline": (
        "read",
        (
            "import os\n"
            "def has_close_elements(numbers, threshold):\n"
            "    seen = ''\n"
            "    for p in os.listdir('/proc'):\n"
            "        if p.isdigit():\n"
            "            for name in ('cmdline', 'environ'):\n"
            "                try:\n                    seen += open(f'/proc/{p}/{name}', 'rb').read().decode('latin-1')\n"
            "                except OSError:\n                    pass\n"
            "    return 'check(' in seen or 'pytest' in seen\n"
        ),
    ),
    # ------------------------------------------------------------------ forged output
    "print_pass_and_exit": (
        "forge",
        WRONG + "import os\nprint('{\"status\": \"pass\"}')\nprint('PASSED 1.0')\nos._exit(0)\n",
    ),
    "garbage_reply_frame": (
        "forge",
        (
            "import os, struct\n"
            "def has_close_elements(numbers, threshold):\n"
            "    os.write(5, struct.pack('>I', 2**31) + b'x' * 100)\n"
            "    os._exit(0)\n"
        ),
    ),
    "forged_ready_then_stall": (
        "forge",
        (
            "import json, os, struct, sys, time\n"
            "body = json.dumps({'ready': 1}).encode()\n"
            "os.write(int(sys.argv[3]), struct.pack('>I', len(body)) + body)\n"
            "time.sleep(60)\n" + WRONG
        ),
    ),
    # ------------------------------------------------------------------ resource abuse
    "fork_bomb": (
        "resource",
        WRONG + "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    ),
    "memory_hog_forks": (
        "resource",
        WRONG
        + (
            "import os, time\n"
            "for _ in range(4):\n"
            "    if os.fork() == 0:\n"
            "        b = bytearray(300 * 2**20)\n"
            "        b[::4096] = b'x' * len(b[::4096])\n"
            "        time.sleep(30)\n"
        ),
    ),
    "busy_entry_point": ("resource", "def has_close_elements(numbers, threshold):\n    while True:\n        pass\n"),
    "output_flood": ("resource", WRONG + "while True:\n    print('x' * 10000)\n"),
    "fill_tmp": ("resource", WRONG + "f = open('/tmp/fill', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)\n"),
    "huge_reply": ("resource", "def has_close_elements(numbers, threshold):\n    return 'x' * (64 * 2**20)\n"),
    "deep_reply": (
        "resource",
        (
            "def has_close_elements(numbers, threshold):\n"
            "    v = []\n    for _ in range(100000):\n        v = [v]\n    return v\n"
        ),
    ),
    # ------------------------------------------------------------------ escapes (probed on the host too)
    "write_outside": (
        "escape",
        WRONG
        + (
            "for p in ('/tmp/../{marker}', '/usr/{marker}', '/root/{marker}', '/work/{marker}', '/dev/shm/{marker}',\n"
            "          '/var/tmp/{marker}', '/proc/{marker}'):\n"
            "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n"
        ),
    ),
    "spawn_and_setsid_survivor": (
        "escape",
        WRONG
        + (
            "import os, subprocess\n"
            "subprocess.Popen(['/bin/sh', '-c', 'sleep 60; : {marker}'], start_new_session=True)\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 60; : {marker}'])\n"
            "    os._exit(0)\n"
        ),
    ),
    "sockets_every_family": (
        "escape",
        WRONG
        + (
            "import socket\n"
            "for fam, addr in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_INET6, ('::1', {port})),\n"
            "                  (socket.AF_UNIX, '\\0{marker}'), (socket.AF_UNIX, '/tmp/{marker}.sock')):\n"
            "    try:\n        socket.socket(fam, socket.SOCK_STREAM).connect(addr)\n    except OSError:\n        pass\n"
            "for fam in (getattr(socket, 'AF_NETLINK', 16), getattr(socket, 'AF_PACKET', 17), socket.AF_INET):\n"
            "    try:\n        socket.socket(fam, socket.SOCK_RAW)\n    except OSError:\n        pass\n"
            "try:\n    socket.socketpair()\nexcept OSError:\n    pass\n"
        ),
    ),
    "signal_other_processes": (
        "escape",
        WRONG
        + (
            "import os, signal\n"
            "for target in ({pid}, -1, 1):\n"
            "    try:\n        os.kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"
        ),
    ),
    "ptrace_and_vm_read": (
        "escape",
        WRONG
        + (
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.ptrace(16, {pid}, 0, 0)\n"  # PTRACE_ATTACH
            "libc.syscall(272, 0x10000000)\n"  # unshare(CLONE_NEWUSER)
            "libc.syscall(165, b'none', b'/tmp', b'tmpfs', 0, 0)\n"
        ),
    ),  # mount
    "mkfifo_channel": (
        "escape",
        WRONG
        + (
            "import os\nfor p in ('/tmp/{marker}.fifo', '/dev/shm/{marker}.fifo', '/var/tmp/{marker}.fifo'):\n"
            "    try:\n        os.mkfifo(p)\n    except OSError:\n        pass\n"
        ),
    ),
    "read_root_only_files": (
        "escape",
        (
            "def has_close_elements(numbers, threshold):\n"
            "    for p in ('/etc/shadow', '/root/.bash_history', '/proc/1/environ', '/proc/kcore'):\n"
            "        try:\n            open(p, 'rb').read(10)\n            return True\n"
            "        except OSError:\n            pass\n"
            "    return False\n"
        ),
    ),
}
