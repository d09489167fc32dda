"""The candidate side of a verdict: load the program, then answer calls from the trusted harness.

Invoked inside the sandbox as ``python -S -s la_candidate.py JOB_FD REQUEST_FD REPLY_FD``: the job
(program, limits, guard flag) on the first descriptor, call requests arriving on the second and
replies leaving on the third. It sends
``{"hello": 1}`` before any candidate code runs (so the trusted side can tell a sandbox that never
started, a verifier fault, from a program that died, a wrong answer), then ``{"ready": 1, "modules":
[...]}`` once the program's module code has run (the program's globals that are modules, see
:func:`own_modules`), then one reply per request: ``{"ok": value}`` with the value in the
plain-data wire format, or ``{"raised": name, "msg": text}``; a call that returns a coroutine (an
``async def``) is run to its end here and answered ``{"awaited": reply}`` (:func:`run_coroutine`).

Nothing here is trusted: the program may replace any of it. The harness treats every reply as
untrusted plain data and decides the verdict itself.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import la_boot
import la_wire


def own_modules(namespace):
    """Globals of the program that are modules: ``"sys"`` for one bound under its own name
    (``import sys``), ``["ET", "xml.etree.ElementTree"]`` for one bound under another name.

    The harness imports these itself where the tests use them without importing them (MBPP+'s
    Mbpp/596 calls ``sys.getsizeof`` and only the solution imports ``sys``; BigCodeBench tests use
    the ``ET`` of the prompt's ``import xml.etree.ElementTree as ET``), as one file would.
    The program can report what it likes: the harness takes only standard-library names the tests
    use, and imports them itself, so a wrong report makes only the program's own tests fail.
    """
    module = type(sys)
    found = []
    for key, value in namespace.items():
        name = getattr(value, "__name__", None) if type(value) is module else None
        if type(key) is str and type(name) is str:
            found.append(key if name == key else [key, name])
    return sorted(found, key=lambda entry: entry if type(entry) is str else entry[0])


def main():
    job_fd, request_fd, reply_fd = (int(a) for a in sys.argv[1:4])
    la_wire.allow_long_ints()
    job = la_boot.read_job(job_fd)
    la_wire.write_frame(reply_fd, {"hello": 1})
    la_boot.set_limits(job["limits"])
    sys.path.extend(job.get("sys_path") or ())  # site_packages=True: the trainer's, read-only
    program = os.path.join(os.getcwd(), "solution.py")
    code = compile(job["program"], program, "exec")
    la_boot.install_stdlib_shims()
    if job.get("guard"):
        la_boot.install_guard(os.getcwd())
    namespace = {"__name__": "__main__", "__file__": program, "__builtins__": __builtins__}
    try:
        exec(code, namespace)  # noqa: S102 -- the untrusted program, inside the sandbox
    except BaseException as err:  # noqa: BLE001 -- report why the program did not load
        la_wire.write_frame(reply_fd, {"load_error": type(err).__name__, "msg": str(err)[:500]})
        return
    la_wire.write_frame(reply_fd, {"ready": 1, "modules": own_modules(namespace)})
    while True:
        try:
            request = la_wire.read_frame(request_fd, la_wire.time.monotonic() + 1e7, 1 << 30)
        except la_wire.WireError:
            return  # the harness is done
        try:
            fn = namespace[request["call"]]
            result = fn(*la_wire.decode(request["args"]), **la_wire.decode(request["kwargs"]))
            if type(result) is _COROUTINE:
                reply = {"awaited": run_coroutine(result)}
            else:
                reply = {"ok": la_wire.encode(result)}
        except BaseException as err:  # noqa: BLE001 -- the harness decides what an exception means
            reply = {"raised": type(err).__name__, "msg": str(err)[:500]}
        la_wire.write_frame(reply_fd, reply)


def run_coroutine(coro):
    """Run what an ``async def`` of the program returned to its end, here in the sandbox.

    The harness gets ``{"awaited": outcome}`` and gives the tests a coroutine that yields the
    outcome where they await it (``asyncio.run(candidate(x))``), since a coroutine object cannot
    cross the channel.
    """
    try:
        import asyncio

        return {"ok": la_wire.encode(asyncio.run(coro))}
    except BaseException as err:  # noqa: BLE001 -- raised where the tests await the result
        return {"raised": type(err).__name__, "msg": str(err)[:500]}


async def _probe():
    pass


_probe_coro = _probe()
_COROUTINE = type(_probe_coro)
_probe_coro.close()
del _probe_coro


if __name__ == "__main__":
    main()
