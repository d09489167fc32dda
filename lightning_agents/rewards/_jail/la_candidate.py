"""The candidate side of a verdict: load the program, then answer calls from the trusted harness.

Invoked inside the sandbox as ``python -S -s la_candidate.py JOB_FD REQUEST_FD REPLY_FD``: the job
(program, limits, guard flag) on the first descriptor, call requests arriving on the second and
replies leaving on the third. It sends
``{"hello": 1}`` before any candidate code runs (so the trusted side can tell a sandbox that never
started, a verifier fault, from a program that died, a wrong answer), then ``{"ready": 1, "modules":
[...]}`` once the program's module code has run (the program's globals that are modules, see
:func:`own_modules`), then one reply per request: ``{"ok": value}`` with the value in the
plain-data wire format, or ``{"raised": name, "msg": text}``. A call that returns a coroutine (an
``async def``) is answered ``{"coroutine": id}`` and the coroutine is kept, unrun; a later request
``{"await": id}`` runs it to its end here (:func:`run_coroutine`) and is answered like a call, so
the coroutine runs when the tests await it, as in one file, and an await the tests abandon (a
timeout) or never make leaves it unrun.

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
    coroutines = {}  # id -> a coroutine a call returned, until the harness asks for it to be awaited
    next_id = 0
    while True:
        try:
            request = la_wire.read_frame(request_fd, la_wire.time.monotonic() + 1e7, 1 << 30)
        except la_wire.WireError:
            return  # the harness is done
        if type(request) is dict and "cancel" in request:
            continue  # for a coroutine that ended before the cancel came: nothing to do, no reply
        if type(request) is dict and "await" in request:
            coro = coroutines.pop(request["await"], None)
            if coro is None:
                reply = {"raised": "RuntimeError", "msg": "cannot reuse already awaited coroutine"}
            else:
                reply = run_coroutine(coro, request["await"], request_fd)
            la_wire.write_frame(reply_fd, reply)
            continue
        try:
            fn = namespace[request["call"]]
            result = fn(*la_wire.decode(request["args"]), **la_wire.decode(request["kwargs"]))
            if type(result) is _COROUTINE:
                next_id += 1  # never reused: an id stands for one coroutine
                coroutines[next_id] = result
                reply = {"coroutine": next_id}
            else:
                reply = {"ok": la_wire.encode(result)}
        except BaseException as err:  # noqa: BLE001 -- the harness decides what an exception means
            reply = {"raised": type(err).__name__, "msg": str(err)[:500]}
        la_wire.write_frame(reply_fd, reply)


def run_coroutine(coro, ident, request_fd):
    """Run a coroutine an ``async def`` of the program returned (the harness's id ``ident``) to
    its end, here in the sandbox, when the harness asks for it (the tests await it): a coroutine
    object cannot cross the channel, so the tests get one of the harness's own, which asks for this
    outcome as plain data.

    While it runs, the only frame the harness may send is ``{"cancel": ident}`` (the tests stopped
    awaiting it: a timeout), which cancels it as asyncio would have; its reply then says so.
    """
    try:
        import asyncio

        async def supervised():
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()

            def on_request():
                try:
                    frame = la_wire.read_frame(request_fd, la_wire.time.monotonic() + 10, 1 << 20)
                except la_wire.WireError:
                    loop.remove_reader(request_fd)  # the harness is gone
                    return
                if type(frame) is dict and frame.get("cancel") == ident:
                    task.cancel()

            try:
                loop.add_reader(request_fd, on_request)
            except (NotImplementedError, OSError, ValueError):
                return await coro  # a loop of the program's own without readers: no cancel, the harness waits
            try:
                return await coro
            finally:
                loop.remove_reader(request_fd)

        return {"ok": la_wire.encode(asyncio.run(supervised()))}
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
