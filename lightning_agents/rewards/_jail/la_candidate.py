"""The candidate side of a verdict: load the program, then answer calls from the trusted harness.

Invoked inside the sandbox as ``python -S -s la_candidate.py JOB_FD REQUEST_FD REPLY_FD``: the job
(program, limits, guard flag) on the first descriptor, call requests arriving on the second and
replies leaving on the third. It sends
``{"hello": 1}`` before any candidate code runs (so the trusted side can tell a sandbox that never
started, a verifier fault, from a program that died, a wrong answer), then ``{"ready": 1, "modules":
[...]}`` once the program's module code has run (the program's globals that are modules, see
:func:`own_modules`, and under ``"async"`` those that are ``async def`` functions, see
:func:`async_functions`), then one reply per call request: ``{"ok": value}`` with the value in the
plain-data wire format, or ``{"raised": name, "msg": text}`` (with ``"base": true`` for an
exception that is not an ``Exception``, and a built-in exception's ``args``, see :func:`_raised`).
A call that returns a coroutine (an ``async def``) is answered ``{"coroutine": id}`` and the coroutine is kept, unrun; a later request
``{"await": id}`` runs it as a task of one event loop kept for the whole verdict (:class:`_Server`),
concurrently with the other awaited ones, and its reply, tagged ``{"id": id, "ok": value}`` (or
``"raised"``), goes out when it ends; so the coroutine runs when the tests await it, as in one
file, and an await the tests abandon (a timeout, ``{"cancel": id}``) or never make leaves it
cancelled or unrun.

Nothing here is trusted: the program may replace any of it. The harness treats every reply as
untrusted plain data and decides the verdict itself.
"""

import builtins
import json
import os
import sys
import types

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
    ready = {"ready": 1, "modules": own_modules(namespace)}
    coroutine_functions = async_functions(namespace)
    if coroutine_functions:
        ready["async"] = coroutine_functions
    la_wire.write_frame(reply_fd, ready)
    _Server(namespace, request_fd, reply_fd).serve()


def async_functions(namespace):
    """Globals of the program that are ``async def`` functions, by name: the harness marks their
    stand-ins as coroutine functions (``inspect.iscoroutinefunction`` is True, as in one file). The
    program can report what it likes; the harness holds a stand-in so marked to answering
    coroutines."""
    function = type(async_functions)
    return sorted(
        key
        for key, value in namespace.items()
        if type(key) is str and type(value) is function and value.__code__.co_flags & _CO_COROUTINE
    )


def _raised(err, budget=None, depth=0):
    """The reply for an exception the program raised (its message may itself raise); ``"base":
    true`` when it is not an ``Exception`` (``KeyboardInterrupt``, a ``BaseException`` of the
    program's own), which the harness then raises as one that ``except Exception`` does not catch.

    A built-in exception also carries what the harness needs to rebuild it as it was: its ``args``
    as plain data (``UnicodeDecodeError`` takes five, ``KeyError``'s ``str`` quotes its key, an
    ``OSError`` of ``(errno, strerror)`` is a ``FileNotFoundError``), under ``"attrs"`` the
    attributes its ``args`` leave out (:func:`_attributes`), and for an exception group its
    members, nested (``"group"``). What is not plain data, or does not fit ``budget`` (shared by a
    group's members), is left out: the harness then rebuilds the exception from its name and
    message, as it did before.
    """
    if budget is None:
        budget = [_ARGS_BUDGET, _MAX_MEMBERS]
    try:
        msg = str(err)[:500]
    except BaseException:  # noqa: BLE001 -- a message that cannot be built is empty
        msg = ""
    kind = type(err)
    reply = {"raised": kind.__name__, "msg": msg}
    if not isinstance(err, Exception):
        reply["base"] = True
    if getattr(builtins, kind.__name__, None) is not kind:
        return reply  # the program's own class: the harness knows it by its name only
    try:
        group = isinstance(err, _GROUP)
        args = [err.message] if group else list(err.args)
        attrs = {name: getattr(err, name) for name in _attributes(err)}
        data = la_wire.encode([args, {name: value for name, value in attrs.items() if value is not None}])
        size = len(json.dumps(data))
        if size > budget[0]:
            return reply
        budget[0] -= size
        reply["args"] = data[0]
        if data[1]["d"]:
            reply["attrs"] = data[1]
        if group and depth < _MAX_DEPTH and len(err.exceptions) <= budget[1]:
            budget[1] -= len(err.exceptions)
            reply["group"] = [_raised(member, budget, depth + 1) for member in err.exceptions]
    except BaseException:  # noqa: BLE001, S110 -- args that are not plain data: name and message only
        pass
    return reply


def _attributes(err):
    """The attributes of a built-in exception that its ``args`` leave out (set by keyword, or
    dropped from ``args`` by ``OSError``); the harness sets these, and only these, when it rebuilds it."""
    if isinstance(err, OSError):
        return ("filename", "filename2")
    if isinstance(err, ImportError):
        return ("name", "path")
    if isinstance(err, (NameError, AttributeError)):
        return ("name",)
    return ()


# JSON characters of ``args`` and attributes per reply (all members of a group together), members
# of a group per reply (all levels) and levels of nested groups. Past them the name and message go
# alone: a correct program's exception must not make its reply too big for the channel.
_ARGS_BUDGET = 1 << 16
_MAX_MEMBERS = 1000
_MAX_DEPTH = 32
_GROUP = getattr(builtins, "BaseExceptionGroup", ())  # Python 3.11 on


class _Server:
    """Answers the harness's requests: calls, and awaits of the coroutines calls returned.

    Until the first await, requests are read one at a time, blocking (a program that never uses
    asyncio never imports it). The first ``{"await": id}`` starts ONE event loop, kept for the rest
    of the verdict: every awaited coroutine becomes a task on it, so the tests' awaits of several
    coroutines (``asyncio.gather``) run interleaved, as on the tests' single loop in one file, and
    each reply goes out when its task ends, tagged ``{"id": id, ...}`` (they may come back in any
    order). ``{"cancel": id}`` cancels that task only. A call (a plain function) is read by the
    loop, which then stops: it runs between two steps of the tasks, outside any running loop (so a
    function that calls ``asyncio.run`` works, as the tests would call it in one file), and while it
    runs the tasks wait, as the tests' loop would while they call a blocking function; its reply is
    untagged, as the harness makes one call at a time.
    """

    def __init__(self, namespace, request_fd, reply_fd):
        self.namespace = namespace
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.coroutines = {}  # id -> a coroutine a call returned, until the harness asks for it to be awaited
        self.tasks = {}  # id -> the running task of an awaited coroutine, until it ends
        self.next_id = 0
        self.loop = None
        self.held = None  # a call the loop read: answered once the loop has stopped
        self.done = False

    def serve(self):
        while not self.done:
            if self.loop is None:
                try:
                    request = la_wire.read_frame(self.request_fd, la_wire.time.monotonic() + 1e7, 1 << 30)
                except la_wire.WireError:
                    return  # the harness is done
                self.handle(request)
                continue
            if self.loop.is_closed():
                return  # closed by the program: nothing more is answered (the verdict's deadline)
            try:
                self.loop.run_forever()
            except BaseException:  # noqa: BLE001, S110 -- SystemExit or KeyboardInterrupt out of a task:
                pass  # the task's done callback still answers its await with it
            request, self.held = self.held, None
            if request is not None:
                self.handle(request)

    def handle(self, request):
        if type(request) is dict and "cancel" in request:
            task = self.tasks.get(request["cancel"]) if type(request["cancel"]) is int else None
            if task is not None:
                task.cancel()
            return  # a coroutine that already ended (or none): nothing to do, no reply
        if type(request) is dict and "await" in request:
            self.start(request["await"])
            return
        self.write(self.call(request))

    def call(self, request):
        try:
            fn = self.namespace[request["call"]]
            result = fn(*la_wire.decode(request["args"]), **la_wire.decode(request["kwargs"]))
            if type(result) is _COROUTINE:
                self.next_id += 1  # never reused: an id stands for one coroutine
                self.coroutines[self.next_id] = result
                return {"coroutine": self.next_id}
            return {"ok": la_wire.encode(result)}
        except BaseException as err:  # noqa: BLE001 -- the harness decides what an exception means
            return _raised(err)

    def write(self, reply):
        try:
            la_wire.write_frame(self.reply_fd, reply)
        except OSError:
            self.done = True  # the harness is gone
            if self.loop is not None:
                self.loop.stop()

    def start(self, ident):
        """Run the coroutine ``ident`` as a task of the one loop (started on the first await)."""
        coro = self.coroutines.pop(ident, None) if type(ident) is int else None
        if coro is None:
            self.write({"id": ident, "raised": "RuntimeError", "msg": "cannot reuse already awaited coroutine"})
            return
        try:
            if self.loop is None:
                import asyncio

                # asyncio's own selector loop (with the boot's self-pipe), whatever loop policy the
                # program set: it must watch the request pipe
                loop = asyncio.SelectorEventLoop()
                loop.add_reader(self.request_fd, self.on_request)
                self.loop = loop
            task = self.loop.create_task(coro)
        except BaseException as err:  # noqa: BLE001 -- no loop here: raised where the tests await it
            coro.close()
            self.write(dict(_raised(err), id=ident))
            return
        self.tasks[ident] = task
        task.add_done_callback(lambda task: self.finished(ident, task))

    def finished(self, ident, task):
        self.tasks.pop(ident, None)
        try:
            if task.cancelled():
                reply = {"raised": "CancelledError", "msg": "", "base": True}
            elif task.exception() is not None:
                reply = _raised(task.exception())
            else:
                reply = {"ok": la_wire.encode(task.result())}
        except BaseException as err:  # noqa: BLE001 -- a value that is not plain data: WireError
            reply = _raised(err)
        reply["id"] = ident
        self.write(reply)

    def on_request(self):
        if self.held is not None or self.done:
            return  # a call waits for the loop to stop: the next request is read after it
        try:
            request = la_wire.read_frame(self.request_fd, la_wire.time.monotonic() + 10, 1 << 30)
        except la_wire.WireError:
            self.done = True  # the harness is done
            self.loop.stop()
            return
        if type(request) is dict and ("await" in request or "cancel" in request):
            self.handle(request)
        else:
            self.held = request
            self.loop.stop()


_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE, without importing inspect
_COROUTINE = types.CoroutineType


if __name__ == "__main__":
    main()
