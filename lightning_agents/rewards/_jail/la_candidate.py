"""The candidate side of a verdict: load the program, then answer calls from the trusted harness.

Invoked inside the sandbox as ``python -S -s la_candidate.py JOB_FD REQUEST_FD REPLY_FD``: the job
(program, limits, guard flag) on the first descriptor, call requests arriving on the second and
replies leaving on the third. It sends
``{"hello": 1}`` before any candidate code runs (so the trusted side can tell a sandbox that never
started, a verifier fault, from a program that died, a wrong answer), then ``{"ready": 1, "modules":
[...]}`` once the program's module code has run (the program's globals that are modules, see
:func:`own_modules`, under ``"async"`` those that are ``async def`` functions, see
:func:`async_functions`, and under ``"meta"`` its functions' names, docstrings and parameters, see
:func:`function_metadata`), then one reply per call request: ``{"ok": value}`` with the value in the
plain-data wire format, or ``{"raised": name, "msg": text}`` (with ``"base": true`` for an
exception that is not an ``Exception``, a built-in exception's ``args``, the built-in bases of a
class of the program's own, and the exception's notes and chain, see :func:`_raised`).
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
import la_handles
import la_wire

# The built-in names as they are before the program runs: the program may rebind builtins.ValueError
# to a class of its own, or builtins.type, and this module's code must go on seeing the
# interpreter's (its functions look names up in this copy, the program's in the builtins module).
_BUILTINS = dict(vars(builtins))
__builtins__ = _BUILTINS


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
    la_boot.install_stdlib_shims({"asyncio.exceptions": _note_cancelled})
    if job.get("guard"):
        la_boot.install_guard(os.getcwd())
    # the program's __name__ from its first statement on (CodeVerifier's module_name): a line
    # inserted into its text ran after whatever shares the docstring's line (`"""doc"""; x = ...`).
    # A real module in sys.modules, as `python solution.py` and runpy give it: dataclasses resolve
    # string annotations through sys.modules[cls.__module__] (a dataclass under `from __future__
    # import annotations` did not load under "solution", and under "__main__" read this file's globals).
    name = job.get("module_name")
    module = type(sys)(name if type(name) is str else "__main__")
    namespace = module.__dict__
    namespace.update({"__file__": program, "__builtins__": builtins})
    sys.modules[module.__name__] = module
    handles = la_handles.install_candidate(module.__name__)  # its classes' instances cross as handles
    try:
        exec(code, namespace)  # noqa: S102 -- the untrusted program, inside the sandbox
    except BaseException as err:  # noqa: BLE001 -- report why the program did not load
        la_wire.write_frame(reply_fd, {"load_error": type(err).__name__, "msg": str(err)[:500]})
        return
    ready = {"ready": 1, "modules": own_modules(namespace)}
    coroutine_functions = async_functions(namespace)
    if coroutine_functions:
        ready["async"] = coroutine_functions
    described = function_metadata(namespace)
    if described:
        ready["meta"] = described
    la_wire.write_frame(reply_fd, ready)
    _Server(namespace, request_fd, reply_fd, handles).serve()


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


# What :func:`function_metadata` sends, at most (the harness refuses more): so many functions, and so
# many characters of a name or docstring (a longer docstring goes as ``False``).
META_FUNCTIONS = 500
META_NAME = 300
META_DOC = 65_536
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08  # inspect.CO_VARARGS, CO_VARKEYWORDS


def function_metadata(namespace):
    """``{global name: [__name__, __qualname__, __doc__, parameters]}`` for the program's global
    functions (at most :data:`META_FUNCTIONS`, by name): the harness gives them to the stand-ins the
    tests call, so ``f.__doc__``, ``f.__name__`` and ``inspect.signature(f)`` are the program's
    own, as in one file. ``parameters``: ``[name, kind, has default]``, ``kind`` as
    ``inspect.Parameter``'s (0 positional-only to 4 ``**kwargs``); default values and annotations
    are objects, not plain data, and stay here. A name or docstring that is not a ``str`` (the
    program set one), or a name over :data:`META_NAME`, leaves that function out."""
    function = type(function_metadata)
    found = {}
    for key in sorted(k for k, v in namespace.items() if type(k) is str and type(v) is function):
        value = namespace[key]
        name, qualname, doc = value.__name__, value.__qualname__, value.__doc__
        if type(name) is not str or type(qualname) is not str or len(name) > META_NAME or len(qualname) > META_NAME:
            continue
        if doc is not None and type(doc) is not str:
            continue
        if doc is not None and len(doc) > META_DOC:
            doc = False
        found[key] = [name, qualname, doc, _parameters(value)]
        if len(found) == META_FUNCTIONS:
            break
    return found


def _parameters(value):
    """``value``'s parameters as ``[name, kind, has default]``, read from its code object, as
    ``inspect.signature`` reads them (without importing ``inspect``)."""
    code = value.__code__
    names, flags = code.co_varnames, code.co_flags
    positional, posonly, kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    defaults = value.__defaults__ if type(value.__defaults__) is tuple else ()
    kwdefaults = value.__kwdefaults__ if type(value.__kwdefaults__) is dict else {}
    out = []
    for i in range(positional):
        out.append([names[i], 0 if i < posonly else 1, i >= positional - len(defaults)])
    at = positional + kwonly
    if flags & _CO_VARARGS:
        out.append([names[at], 2, False])
        at += 1
    out.extend([name, 3, name in kwdefaults] for name in names[positional : positional + kwonly])
    if flags & _CO_VARKEYWORDS:
        out.append([names[at], 4, False])
    return out


# The interpreter's own view of an exception and its class, past anything the class or its
# metaclass defines in Python (a property named ``args``, a metaclass ``__mro__`` property or
# ``__getattribute__``): ``except``, ``isinstance`` and ``str()`` in one file use the C-level MRO,
# args slot and ``tp_str``, so the reply is built from those, never from lookups the program
# controls (a class whose ``args`` property said "must be positive" while its args slot said
# "totally wrong" passed ``pytest.raises(ValueError, match="must be positive")``).
_REAL_MRO = type.__dict__["__mro__"].__get__
_REAL_DICT = type.__dict__["__dict__"].__get__
_REAL_NAME = type.__dict__["__name__"].__get__
_REAL_MODULE = type.__dict__["__module__"].__get__
_REAL_QUALNAME = type.__dict__["__qualname__"].__get__
_REAL_ARGS = BaseException.__dict__["args"].__get__


def _real_lookup(kind, attr):
    """``attr`` as the interpreter finds it on ``kind`` for a slot (``_PyType_Lookup``): in the own
    dict of the first class of the real MRO that defines it, never through a metaclass."""
    for cls in _REAL_MRO(kind):
        namespace = _REAL_DICT(cls)
        if attr in namespace:
            return namespace[attr]
    return None


def _class_number(kind):
    """A number for ``kind``, the same for each of its raises in this verdict and distinct from
    every other class's (the harness makes one class per number: two classes of the program's
    of one name, made by a factory, stay two). The class is held so its id is never reused."""
    entry = _CLASSES.get(id(kind))
    if entry is None:
        entry = _CLASSES[id(kind)] = (len(_CLASSES), kind)
    return entry[0]


_CLASSES = {}  # id(class) -> (its number, the class)


def _raised(err, budget=None, depth=0, path=(), strict=False):
    """The reply for an exception the program raised (its message may itself raise); ``"base":
    true`` when it is not an ``Exception`` (``KeyboardInterrupt``, a ``BaseException`` of the
    program's own), which the harness then raises as one that ``except Exception`` does not catch.

    A built-in exception also carries what the harness needs to rebuild it as it was: its ``args``
    as plain data (``UnicodeDecodeError`` takes five, ``KeyError``'s ``str`` quotes its key, an
    ``OSError`` of ``(errno, strerror)`` is a ``FileNotFoundError``), under ``"attrs"`` the
    attributes its ``args`` leave out (:func:`_attributes`), and for an exception group its
    members, nested (``"group"``). What is not plain data is left out: the harness then rebuilds
    the exception from its name and message, as it did before. A subclass of a plain type goes by
    the value it stores (:func:`_encode`); where the harness's ``str`` of those values would not be
    the exception's own (:func:`_same_text`), its ``str`` goes with them, whole (``"str": true``,
    as for a class with its own ``__str__``), at the top; a member or link, a group, or a text past
    the text budget goes by its message, its args left out. What does not fit ``budget`` (one
    :class:`_Budget` for a whole reply, a group's members together) is left out too, marked
    ``"over": true`` so the harness can say so; every member still carries its class, so ``except*``
    and ``isinstance`` match as in one file. A member whose ``args`` came goes with an empty
    ``"msg"`` (the harness rebuilds it from them), so only messages the harness reads are built and
    charged. Building the reply costs at most what the budget allows (:func:`_encode`,
    :func:`_message` stop when it is spent), except the ``str`` or ``repr`` of what is not plain
    data (:func:`_message`), which only the call's time limit bounds, as in one file.

    A class that is not a built-in one (the program's ``class InvalidInput(ValueError)``,
    ``json.JSONDecodeError``) goes by its name with its bases (``"bases"``: built-in ones and
    allowlisted standard-library ones by dotted name, :func:`_builtin_bases`), its number in this
    verdict (``"cls"``, :func:`_class_number`) and its ``args`` as above, and ``"str": true`` where
    it has a ``__str__`` of its own (``msg`` is then its ``str``, whole, charged to the text budget,
    sent for a member too; ``"str": "raises"`` where that ``__str__`` raises or gives no ``str``;
    ``"str": "over"`` where its text is past the budget at the top, the class sent without it);
    the harness makes a class of that name over those bases. Its bases are charged to the text
    budget past the first; a member past the budget goes by its name only, never with some of its
    bases (:func:`_charge`). Everything is read as the interpreter reads it
    (``_REAL_MRO``, ``_REAL_ARGS``, :func:`_real_lookup`), never through the program's properties or
    metaclass. Its own attributes, its instance ``__dict__``, follow as ``"vars"``
    (:func:`_own_vars`) where the harness rebuilds its class, the attributes its program classes
    define as ``"cvars"`` (:func:`_class_vars`; ``"same"`` where an exception of that class before
    it in this reply sent them), with ``"peers"`` (:func:`_peers`) where a program class on its MRO
    changed since last read, and ``"miss": true`` where a name absent from
    those may still be found in one file (:func:`_misses_hidden`). Its notes and chain follow
    (:func:`_follow`); ``path`` and ``strict`` are the chain's, there.
    """
    top = budget is None
    if top:
        budget = _Budget()
        # every exception of the reply (its members and links, nested) as it is before the
        # program's code that building the reply runs (an earlier member's __str__) changes it
        _premark(err, budget)
    entry = budget.premarks.get(id(err))
    premarks = entry[1] if entry is not None and entry[0] is err else None
    unmarked = entry is None or entry[0] is not err
    # its class as it was before any code of the program's ran for this reply (an earlier
    # member's __str__ may have set its __class__)
    kind = type(err) if premarks is None else premarks[3]
    name = _REAL_NAME(kind)
    builtin = _BUILTINS.get(name) is kind
    bases = () if builtin else _builtin_bases(kind)
    own_str = bool(bases) and _own_str(kind, bases[0])
    named_only = not builtin and not bases  # the harness knows it by its name and message only
    # its dicts as they are before any code of the program's runs to build this reply (its own
    # __str__, a property over a field, an argument's __str__): what that code changes in them
    # goes as stand-ins (:func:`_marks`)
    marks = None
    if not named_only:
        if premarks is not None:
            marks = premarks
        elif unmarked:
            marks = _unmarked(kind)
        else:
            marks = _marks(err, kind, budget)  # its dicts could not be read before: read them now
    text = _own_text(err) if own_str else None
    # a built-in base's message is built once the args are read (:func:`_shown`): where they hold a
    # subclass of a plain type, the text checked against them is the text sent, one str() of it
    msg = _safe_message(err, budget) if named_only else ""
    reply = {"raised": name, "msg": msg}
    if not issubclass(kind, Exception):
        reply["base"] = True
    if bases:
        # a class of the program's own (or of a module's: json's JSONDecodeError): the harness
        # rebuilds it as a class of that name over these bases (built-in ones, and the allowlisted
        # standard-library classes of STDLIB_CLASSES by dotted name), from its args as below; one
        # class per class number
        reply["bases"] = [_stdlib_name(base) or _REAL_NAME(base) for base in bases]
        reply["cls"] = _class_number(kind)
        if own_str and text is None:
            reply["str"] = "raises"  # its own __str__ raised (or gave no str): the harness's raises
        elif own_str:
            # its own __str__: the harness gives msg as its str, whole within the text budget
            # (charged here at the top, by _charge for a member)
            reply["str"] = True
            reply["msg"] = text
            if top:
                cost = len(text) + 2
                if cost <= budget.text:
                    cost = len(json.dumps(text))
                if cost > budget.text:
                    # the class still crosses, as in one file pytest.raises(ValueError) passes;
                    # its str does not, and reading it in the tests raises (CandidateRaised)
                    reply["str"], reply["msg"] = "over", ""
                else:
                    budget.text -= cost
    elif not builtin:
        if not top:
            _charge(reply, budget, builtin)
        _follow(err, reply, budget, depth, path, strict)
        if top:
            budget.commit()
        return reply  # no built-in base the harness may rebuild: known by its name only
    group = bool(_GROUP) and issubclass(kind, _GROUP)
    fields = ()
    try:
        args = [_GROUP.__dict__["message"].__get__(err)] if group else list(_REAL_ARGS(err))
        fields = _attributes(kind)
        attrs = {field: read(err) for field, read in fields}
        # a built-in class's C field is None where it was never set; a standard-library class's
        # field is there, None too (CalledProcessError's stderr), unless _field_reader found none
        stdlib = not any(issubclass(kind, base) for base, _ in _SLOTS)
        attrs = {
            field: value for field, value in attrs.items() if value is not _ABSENT and (stdlib or value is not None)
        }
    except BaseException:  # noqa: BLE001 -- fields that cannot be read: name and message only
        args = attrs = None
    data = None
    shown = _UNREAD  # str(err) whole, where the check of its args read it
    if args is not None:
        try:
            budget.mixed = False
            data = _encode([args, attrs], budget, budget.args)
            size = len(json.dumps(data))
            if size > budget.args:
                raise _Spent
            if budget.mixed and not own_str:
                shown = _own_text(err)
                if _same_text(err, kind, bases, data, group, shown):
                    pass
                elif (
                    top
                    and shown is not None
                    and not group
                    and not issubclass(kind, _PROTOCOL)
                    and _spend_text(shown, budget)
                ):
                    # the harness's str of its stored values would not be this one's: its args by
                    # their stored values, its str this text, as for a class with its own __str__
                    # (ValueError("bad status", S.A), S an IntEnum: e.args == ("bad status", 1))
                    reply["str"] = True
                else:
                    data = None  # a member, or a text past the budget: by its message
        except _Spent:
            reply["over"] = True
            data = None
        except BaseException:  # noqa: BLE001 -- args that are not plain data: name and message only
            data = None
    if top and not own_str:
        reply["msg"] = shown if reply.get("str") is True else _shown(err, budget, shown)
    if data is not None:
        budget.args -= size
        reply["args"] = data[0]
        if data[1]["d"]:
            reply["attrs"] = data[1]
    if not top and (data is None or group or own_str or issubclass(kind, _PROTOCOL)):
        # a member whose args came is rebuilt from them and its message is never read: built and
        # sent, it would spend the text budget that members whose args do not fit need for theirs
        if not own_str:
            reply["msg"] = _shown(err, budget, shown)
        _charge(reply, budget, builtin)
    elif not top and not builtin:
        _charge(reply, budget, builtin)  # its name and bases
    if (builtin or "bases" in reply) and not issubclass(kind, _PROTOCOL):
        # its own attributes (`self.code = code` in its __init__), where the harness rebuilds it
        try:
            own = _own_vars(err, budget, {"__notes__", *(field for field, _ in fields)}, marks)
        except BaseException:  # noqa: BLE001 -- not read whole: by its name only, never some of them
            own = "over"
        if own:
            reply["vars"] = own
        if own != "over" and _misses_hidden(err, kind):
            reply["miss"] = True  # an absent name may be found in one file: misses fail there
        if "bases" in reply:
            # one class's attributes go once per reply, with its first exception (its members and
            # links share the class, read at the same moment): sent again for a member past the
            # budget, their values came as stand-ins, set over the first's on the shared class
            kept = budget.classes.get(reply["cls"])
            if kept is None:
                try:
                    kept = _class_vars(err, kind, budget, marks)
                except BaseException:  # noqa: BLE001 -- a class that cannot be read: its misses fail
                    kept = "over"
                budget.put(budget.classes, reply["cls"], kept)
                budget.put(budget.sent, reply["cls"], kind)
                peers = _peers(kind, budget, marks)
                if peers is not None:
                    reply["peers"] = peers
            elif kept != "over":
                kept = "same"  # the harness sets nothing for it: the first's are the class's
            if kept == "over":
                reply["miss"] = True  # and no "cvars": the harness makes stand-ins of those it knew
            else:
                reply["cvars"] = kept  # all of them, none too: a name not there was deleted
    if args is not None and group:
        try:
            members = tuple(_GROUP.__dict__["exceptions"].__get__(err))
        except BaseException:  # noqa: BLE001
            members = None
        if members is None:
            pass
        elif depth < _MAX_DEPTH and len(members) <= budget.members:
            budget.members -= len(members)
            reply["group"] = [_raised(member, budget, depth + 1) for member in members]
        else:
            reply["over"] = True
    _follow(err, reply, budget, depth, path, strict)
    if top:
        budget.commit()
    return reply


def _same_text(err, kind, bases, data, group, shown):
    """``shown``, ``str(err)`` whole as :func:`_own_text` read it (``None`` where it raised), is
    the text the harness's exception, rebuilt from ``data`` (its args and attributes as plain data,
    :func:`_encode`), shows, whole: a text that differs only past the 500 characters of a message
    kept its args, and the harness showed the stored text (``str(e) == "a" * 600`` passed a
    ``str`` subclass holding 600 a's whose ``__str__`` adds a tail). Both are bounded: ``data``
    fitted the args budget, and ``shown`` is the program's own text, read once (a second read
    could differ: a ``__str__`` that counts its calls showed the stored text only to this check).
    Where the args hold a subclass of a plain type, they go by the value it stores, while ``str(err)`` in one file reads
    that value's own ``__str__`` or ``__repr__`` (``ValueError(x)``, ``x`` an int subclass holding 5
    whose ``__str__`` says 404, is "404" in one file and would be "5" rebuilt from 5: ``match="5"``
    must not pass). Checked on an exception of the nearest built-in class (``kind`` itself, or the
    first of ``bases``), made here from the same plain data: built-in code only."""
    try:
        args, attrs = la_wire.decode(data)
        if group:
            plain = _GROUP(args[0], tuple(_GROUP.__dict__["exceptions"].__get__(err)))
        else:
            proto = next((base for base in bases if _stdlib_name(base) is None), None) if bases else kind
            plain = proto(*args)
            for field, value in attrs.items():
                setattr(plain, field, value)
        return shown is not None and _own_text(plain) == shown
    except BaseException:  # noqa: BLE001 -- not rebuilt here as the harness would: by its message
        return False


def _shown(err, budget, shown):
    """The message sent for ``err``: the first 500 characters of ``shown`` where the check of its
    args already read ``str(err)`` (read once: empty where it raised), else :func:`_safe_message`."""
    if shown is _UNREAD:
        return _safe_message(err, budget)
    return "" if shown is None else shown[:_MSG]


_UNREAD = object()


def _spend_text(text, budget):
    """Charge ``text``, sent whole, to the reply's text budget; ``False`` (nothing charged) where
    it does not fit."""
    cost = len(text) + 2
    if cost <= budget.text:
        cost = len(json.dumps(text))
    if cost > budget.text:
        return False
    budget.text -= cost
    return True


class _Cut(Exception):
    """A chain (``__cause__``, ``__context__``) does not fit its reply: it is left out whole."""


def _follow(err, reply, budget, depth, path, strict):
    """Add ``err``'s notes (``"notes"``) and the exceptions it chains to (``"cause"``,
    ``"context"``, each a reply as :func:`_raised` builds it, or :data:`_CHAIN_LEFT_OUT` where it
    does not fit: a cycle, past 32 levels or the budget; ``"same": true`` where its context
    is its cause, sent once; ``"suppress": true`` for ``raise ... from``), each whole or not at all: a chain cut short could end where a test that
    walks it to its root expects (a chain never sent is what the tests saw before). Links count
    as members and levels of the reply's budget. ``strict``: ``err`` is itself a link, whose
    chain must come whole for the chain it is part of to come (:class:`_Cut` otherwise)."""
    notes = _notes(err, budget)
    if notes is not None:
        reply["notes"] = notes
    try:
        cause = BaseException.__cause__.__get__(err)
        context = BaseException.__context__.__get__(err)
        suppress = BaseException.__suppress_context__.__get__(err)
    except BaseException:  # noqa: BLE001
        if strict:
            raise _Cut from None
        return
    links, path = {}, (*path, id(err))
    for key, link in (("cause", cause), ("context", context)):
        if link is None:
            continue
        if key == "context" and link is cause:
            # `raise B from a` in `except A as a`: one exception, sent once (both links of
            # each level, sent apart, would double the chain at every level)
            links["same"] = True
            continue
        mark = len(budget.log)
        try:
            if id(link) in path or depth >= _MAX_DEPTH or budget.members < 1:
                raise _Cut  # a cycle (set by hand), or past the reply's budget
            budget.members -= 1
            links[key] = _raised(link, budget, depth + 1, path, strict=True)
        except _Cut:
            if strict:
                raise
            # what the cut link's exceptions recorded goes with them: a later exception of their
            # class must send its "cvars" (not "same"), and a later reply must still see a change
            # their "peers" carried (they never reached the harness)
            budget.undo(mark)
            # left out whole, but not as if there were no link: a test of `__context__ is None`
            # (or one walking it to its root) must not pass on a chain that did not come
            links[key] = dict(_CHAIN_LEFT_OUT)
    reply.update(links)
    if suppress is True:
        reply["suppress"] = True


def _notes(err, budget):
    """``err.__notes__`` where it is a list of strings that fits the reply's text budget (charged
    to it); ``None`` where it has none; past the budget the one note :data:`NOTES_LEFT_OUT`: notes
    go whole or not at all, and not as if there were none (pytest 8 matches ``str(e)`` and the
    notes together, so ``match="^bad input$"`` passed where a 200 KB note was dropped). Read as
    the tests read it, through the program's class (its ``__getattr__`` may answer the name):
    where the answer is not a list of strings (a ``7``, ``None``, a tuple, an item that is not a
    ``str``) ``{"value": v}``, that answer as plain data within the args budget (pytest's
    ``*getattr(e, "__notes__", [])`` raises on a ``7`` or a ``None`` in one file, and ``traceback``
    shows it), else ``"other"`` (not plain data, a subclass of a plain type anywhere in it, past
    the budget, or the read raised other than ``AttributeError``), for which the harness sets a
    stand-in that fails the verdict when used."""
    try:
        notes = getattr(err, "__notes__", _ABSENT)
        if notes is _ABSENT:
            return None  # none: `None` itself goes as a value (pytest's `*notes` raises on it)
        if type(notes) is not list or not all(type(note) is str for note in notes):
            mixed, budget.mixed = budget.mixed, False
            item = _charged_item("__notes__", notes, budget)
            # a subclass of a plain type anywhere in them (a list subclass's own __iter__, a str
            # subclass's own __str__) is read through its class by pytest and traceback, never by
            # the value it stores: a stand-in
            if budget.mixed:
                item = None
            budget.mixed = mixed
            return "other" if item is None else {"value": item[1]}
        cost = 2
        for note in notes:
            cost += len(note) + 4  # at least its JSON: quotes and a separator
            if cost > budget.text:
                return [NOTES_LEFT_OUT]
        notes = list(notes)
        cost = len(json.dumps(notes))
    except BaseException:  # noqa: BLE001
        return "other"
    if cost > budget.text:
        return [NOTES_LEFT_OUT]
    budget.text -= cost
    return notes


# What stands for notes, and for a link of a chain, that could not come whole (past the reply's
# budget, not all strings, a cycle, more than 32 links): anything a program could set itself.
# Short: 2,000 members may each carry one of each (about 230 KB with the reply's 520 KiB at most).
NOTES_LEFT_OUT = "(notes left out by the sandbox)"
_CHAIN_LEFT_OUT = {"raised": "ChainLeftOut", "msg": ""}


def _builtin_bases(kind):
    """The built-in exception classes ``kind`` (not one) derives from, nearest first, each not a
    base of one before it (``class E(KeyError, ValueError)``: both; ``json.JSONDecodeError``: itself,
    as an allowlisted standard-library class, :data:`STDLIB_CLASSES`, and ``ValueError``, which the
    harness uses where the tests did not import json), read from the real MRO, at most :data:`_MAX_BASES`; none for ``StopIteration``'s and
    ``StopAsyncIteration``'s subclasses (the harness never rebuilds those) and for asyncio's
    ``CancelledError`` itself (:func:`_note_cancelled`; known by its name)."""
    found = []
    try:
        if _CANCELLED and kind is _CANCELLED[0]:
            return ()
        for cls in _REAL_MRO(kind):
            if _stdlib_name(cls) is not None:
                if not any(issubclass(seen, cls) for seen in found):
                    found.append(cls)
                continue
            if _BUILTINS.get(_REAL_NAME(cls)) is cls and issubclass(cls, BaseException):
                if issubclass(cls, _PROTOCOL):
                    return ()
                # a standard-library class before it does not stand for it: the tests may not
                # have imported that one, and the harness then rebuilds over the built-in ones
                if not any(issubclass(seen, cls) for seen in found if _stdlib_name(seen) is None):
                    found.append(cls)
    except BaseException:  # noqa: BLE001 -- a class whose MRO cannot be read: known by its name
        return ()
    return tuple(found[:_MAX_BASES])


def _own_str(kind, base):
    """``kind`` has a ``__str__`` of its own (not its built-in base's): its message is its str."""
    try:
        return _real_lookup(kind, "__str__") is not _real_lookup(base, "__str__")
    except BaseException:  # noqa: BLE001
        return True


def _own_text(err):
    """``str(err)`` through the class's own ``__str__``, whole (the reply's text budget bounds
    what is sent, :func:`_raised`); ``None`` where it raises or gives no ``str`` (``str(err)`` in
    one file raises: the harness's ``str`` then raises too)."""
    try:
        text = str(err)
    except BaseException:  # noqa: BLE001
        return None
    # str() takes a str subclass (a StrEnum member) from __str__ and gives its plain text
    return str.__str__(text) if isinstance(text, str) else None


def _safe_message(err, budget):
    try:
        return _message(err, budget)
    except BaseException:  # noqa: BLE001 -- a message that cannot be built is empty
        return ""


def _charge(reply, budget, builtin):
    """Charge a member's message, a class name of the program's own past 64 characters, and its
    built-in bases past the first, to the reply's text budget (a built-in class's name, 25
    characters at most, always goes); past it the member goes with an empty message, ``"over":
    true``, and a class of the program's own without its bases (by its name only)."""
    name, msg = reply["raised"], reply["msg"]
    if not builtin:
        name = name[:_MAX_NAME]
    bases = reply.get("bases", ())
    cost = len(json.dumps(msg)) + max(0, len(json.dumps(name)) - _MAX_NAME) + len(json.dumps(bases[1:])) - 2
    if cost > budget.text:
        reply.update(raised=name if builtin else name[:16], msg="", over=True)
        # the class goes whole or not at all: with some of its bases, or without its own str, it
        # could match an `except*` clause or a str the program's class would not; by its name only,
        # it comes as CandidateRaised (or CandidateInterrupted), which no such test takes
        reply.pop("bases", None)
        reply.pop("str", None)
        reply.pop("cls", None)
    else:
        reply["raised"] = name
        budget.text -= cost


class _Spent(Exception):
    """The reply's budget is spent: what was being built is left out."""


class _Budget:
    """What one exception reply may still hold and cost, all members of a group together: JSON
    characters of ``args`` and attributes (``args``), of members' messages and long class names
    (``text``), members (``members``), and steps (about a microsecond each) of encoding args
    (``work``) and of building messages (``talk``): a list built by doubling shared references,
    ``a = [a, a]`` forty times, is 2**40 leaves when walked, so a walk must stop, not finish."""

    __slots__ = (
        "args",
        "text",
        "members",
        "work",
        "talk",
        "mixed",
        "classes",
        "snapshots",
        "sent",
        "log",
        "premarks",
        "class_marks",
        "prints",
    )

    def __init__(self):
        self.args, self.text, self.members = _ARGS_BUDGET, _TEXT_BUDGET, _MAX_MEMBERS
        self.work = self.talk = _WORK_BUDGET
        self.mixed = False  # an encoding met a subclass of a plain type (:func:`_encode`)
        self.classes = {}  # class number -> its "cvars" (or "over") as this reply first sent them
        # staged for _SNAPSHOTS and _SENT_CLASSES until the reply is whole (:meth:`commit`): a
        # chain link cut whole never reaches the harness, and neither may what it recorded
        self.snapshots = {}
        self.sent = {}
        self.log = []  # (mapping, key, entry before) for each put, undone for a cut link
        self.premarks = {}  # id(exception) -> (exception, its marks), read before any program code ran
        self.class_marks = {}  # id(program class) -> (class, items, prints), read once per reply
        self.prints = None  # the budget the prints of the marks spend (:func:`_print`)

    def put(self, mapping, key, value):
        """Set ``mapping[key]`` (``classes``, ``snapshots``, ``sent``), undoably (:meth:`undo`)."""
        self.log.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def undo(self, mark):
        """Undo the puts made since the log held ``mark`` entries (a chain link left out whole)."""
        log = self.log
        while len(log) > mark:
            mapping, key, before = log.pop()
            if before is _MISSING:
                del mapping[key]
            else:
                mapping[key] = before

    def commit(self):
        """The reply is whole: what it sent is what the harness now holds (:func:`_peers`)."""
        _SNAPSHOTS.update(self.snapshots)
        _SENT_CLASSES.update(self.sent)

    def spend(self, work):
        self.work -= work
        if self.work < 0:
            raise _Spent

    def spend_talk(self, work):
        self.talk -= work
        if self.talk < 0:
            raise _Spent


def _encode(value, budget, room, depth=0):
    """``value`` as :func:`la_wire.encode` gives it, or :class:`_Spent` as soon as it would take
    more than ``room`` JSON characters (a lower bound is counted as it goes: each step takes one
    at least) or the budget's ``work`` runs out; so it costs O(room) whatever the object graph.
    A subclass of a plain type goes by the value it stores (:func:`_stored_value`; the budget's
    ``mixed`` is then set), any other class is refused (``WireError``)."""
    out, _ = _encode_counted(value, budget, room, depth)
    return out


def _encode_counted(value, budget, room, depth):
    budget.spend(1)
    if depth > 200:
        raise la_wire.WireError("value nested too deeply")
    t = type(value)
    if value is None or t is bool:
        size, out = 5, value
    elif t is int:
        size, out = max(1, int(value.bit_length() * 0.30102)), value  # digits, before any conversion
    elif t is str:
        size, out = len(value) + 2, value
    elif t is float:
        size, out = 3, la_wire.encode(value)
    elif t is bytes or t is bytearray:
        size = 2 * len(value) + 8
        if size > room:
            raise _Spent
        out = la_wire.encode(value)
    elif t is complex:
        size, out = 10, la_wire.encode(value)
    elif t is list or t is tuple or t is set or t is frozenset:
        return _encode_items(value, t, budget, room, depth)
    elif t is dict:
        return _encode_pairs(value.items(), len(value), budget, room, depth)
    elif t is _MATCH:
        size = len(value.string) + 16 * len(value.regs) + 8
        if size > room:
            raise _Spent
        out = la_wire.encode(value)
    else:
        # a subclass's value as the interpreter stores it (int.__int__ copies the digits), never
        # through its own __int__, __str__ or __iter__: an int subclass whose __int__ said 404
        # while it held 5 fails `code == 404` in one file
        base, plain = _stored_value(value, t, room)
        budget.mixed = True
        if base is dict:  # an OrderedDict as one ("od"), as la_wire.encode sends it
            return _encode_pairs(plain, len(plain), budget, room, depth + 1, la_wire.dict_tag(t))
        if base is la_wire._DEQUE:  # with its maxlen, as la_wire.encode sends it
            out, size = _encode_items(plain, list, budget, room - 24, depth + 1)
            return {"dq": [out, la_wire._MAXLEN(value)]}, size + 24
        if base in _CONTAINERS:
            return _encode_items(plain, base, budget, room, depth + 1)
        return _encode_counted(plain, budget, room, depth + 1)
    if size > room:
        raise _Spent
    return out, size


def _encode_items(items, kind, budget, room, depth):
    """The items of a list, tuple, set or frozenset (``kind``) as :func:`_encode_counted` does."""
    size = 8 + len(items)
    out = []
    for item in items:
        if size > room:
            raise _Spent
        encoded, used = _encode_counted(item, budget, room - size, depth + 1)
        out.append(encoded)
        size += used
    if size > room:
        raise _Spent
    return (out if kind is list else {_TAGS[kind]: out}), size


def _encode_pairs(pairs, count, budget, room, depth, tag="d"):
    """A dict's ``(key, value)`` pairs as :func:`_encode_counted` does, under ``tag``."""
    size, out = 8 + 4 * count, []
    for key, item in pairs:
        if size > room:
            raise _Spent
        encoded_key, used = _encode_counted(key, budget, room - size, depth + 1)
        size += used
        encoded_item, used = _encode_counted(item, budget, room - size, depth + 1)
        size += used
        out.append([encoded_key, encoded_item])
    if size > room:
        raise _Spent
    return {tag: out}, size


_TAGS = {tuple: "t", set: "s", frozenset: "fs"}
_CONTAINERS = (list, tuple, dict, set, frozenset)


def _stored_value(value, kind, room):
    """``(base, plain)``: what ``value``, an instance of ``kind``, a subclass of a plain type
    ``base``, stores, read through the plain type's own C-level methods (:func:`la_wire.stored`:
    an ``IntEnum`` member as its int, a ``namedtuple``'s items, an ``OrderedDict``'s pairs in its
    own order); :class:`_Spent` where its length is past ``room`` (no copy is made);
    ``WireError`` for any other class."""
    for base in _SIZED:
        if issubclass(kind, base) and base.__len__(value) > room:
            raise _Spent
    return la_wire.stored(value)


def _charged_item(key, value, budget):
    """``[key, encoded value]`` charged to the args budget (the item's JSON, with its separator),
    or None where it does not fit; ``_Spent`` and encoding errors propagate to the caller."""
    encoded = _encode(value, budget, budget.args - len(key) - 8)
    size = len(json.dumps([key, encoded])) + 1
    if size > budget.args:
        return None
    budget.args -= size
    return [key, encoded]


def _own_vars(err, budget, skip, marks=None):
    """The exception's own attributes, its instance ``__dict__`` read through
    ``BaseException``'s descriptor and ``dict.items`` (never the program's ``__dict__`` property,
    ``__getattribute__`` or a dict subclass's ``items``), in order, as ``"vars"``: ``[name,
    value]`` for a value of plain data (:func:`_encode`: subclasses by their stored value) within
    the reply's ``args`` budget, ``[name, None, why]`` where it is not (``why``: its class's name,
    or ``""`` past the budget; ``[name, None, why, True]`` where its class is callable, as
    ``callable()`` reads it), which the harness sets as a stand-in that no check takes; also a
    stand-in (``why`` "shadowed by its class") where lookup in one file would not give the dict's
    value (:func:`_shadowed`, or a ``__getattribute__`` of the program's for every name). Names that are not strings are left out (only ``vars(err)`` shows
    them), as are names of a ``str`` subclass that ``err.name`` would not find; ``skip``
    (``__notes__``, a standard-library class's fields) go otherwise. ``"over"``
    where the names do not fit the text budget (the harness then gives the exception by its name
    only: a test of ``not hasattr(err, "code")`` must not pass on a ``code`` that was dropped).
    ``marks``: the dicts as :func:`_marks` read them before the program's code ran for this
    reply; a name whose entry that code added, changed or removed goes as a stand-in (``why``
    :data:`_CHANGED`)."""
    try:
        namespace = _REAL_VARS(err)
        items = list(_DICT_ITEMS(namespace))
        kind = type(err)
        # a __getattribute__ of the program's (a slot wrapper is a built-in class's) sees every
        # lookup first: what the tests would read is its answer, never the dict's value
        hidden = type(_real_lookup(kind, "__getattribute__")) is not _SLOT_WRAPPER
        changed, removed = _changed(marks[0], items) if marks is not None else ((), ())
    except BaseException:  # noqa: BLE001
        return "over"
    out = []
    items += [(key, _MISSING) for key in removed]
    for key, value in items:
        if type(key) is not str:
            try:
                # a name of a str subclass counts where `err.name` finds it (the lookup by its
                # text, as attribute access does it, gives this very value): its hash or __eq__
                # may hide it
                key = str.__str__(key) if issubclass(type(key), str) else None
                if key is None or _DICT_GET(namespace, key, _MISSING) is not value:
                    continue  # not reachable as an attribute: only vars(err) shows it
            except BaseException:  # noqa: BLE001
                continue
        if key in skip:
            continue
        item, why, call = None, "", False
        try:
            if key in changed:
                raise _Changed
            if hidden or _shadowed(kind, key):
                raise _Hidden
            item = _charged_item(key, value, budget)
            if item is not None and marks is not None and _moved(marks[2], key, item[1]):
                item = None
                raise _Changed
        except _Spent:
            pass  # past the budget: a stand-in, why ""
        except _Changed:
            why = _CHANGED
        except _Hidden:
            why = "shadowed by its class"
        except BaseException:  # noqa: BLE001 -- not plain data: a stand-in
            why = _REAL_NAME(type(value))[:_MAX_NAME]
            # callable() looks at the type alone (no stand-in can raise there): the harness's
            # stand-in is callable where the value's class is
            call = _real_lookup(type(value), "__call__") is not None
        if item is None:
            # a stand-in's name and why, charged to the text budget; past it, none come
            if len(key) + len(why) + 16 > budget.text:
                return "over"
            item = [key, None, why, True] if call else [key, None, why]
            cost = len(json.dumps(item)) + 1
            if cost > budget.text:
                return "over"
            budget.text -= cost
        out.append(item)
    return out


def _misses_hidden(err, kind):
    """A name absent from what crosses may still be found on ``err`` in one file: its class has its
    own ``__getattr__`` or ``__getattribute__``, or its instance dict a key that is not a ``str``
    (whose ``__eq__`` and ``__hash__`` may match a name). The harness then fails the verdict on a
    miss instead of answering "absent" to ``hasattr`` or ``getattr(err, name, default)``."""
    try:
        if _real_lookup(kind, "__getattr__") is not None:
            return True
        if type(_real_lookup(kind, "__getattribute__")) is not _SLOT_WRAPPER:
            return True
        return any(type(key) is not str for key in _DICT_KEYS(_REAL_VARS(err)))
    except BaseException:  # noqa: BLE001
        return True


def _class_vars(err, kind, budget, marks=None):
    """The attributes the program's classes on the real MRO of ``kind`` (neither built-in nor
    allowlisted, :data:`STDLIB_CLASSES`) define, read from their own dicts (no code of theirs
    runs), the nearest first, as ``"cvars"``, items as :func:`_own_vars` sends them: plain data
    (werkzeug's ``class NotFound(HTTPException): code = 404``) as its value, anything else (a
    method, a property, a class, a descriptor of a plain type's subclass) as a stand-in, which the
    harness sets on the class it rebuilds (a stand-in there fails the verdict on any read, so
    ``getattr(e, "response", None) is None`` passes no program whose class has a ``response``).
    A stand-in for a value that is no data descriptor (a method) goes as ``[name, None, why,
    callable, True]``: the harness's then lets the instance dict come first, as lookup does in one
    file; one for a data descriptor (a property) goes as :func:`_own_vars`'s do, and comes before
    it. Dunder names are the interpreter's hooks and go no way. The list is whole (the harness
    deletes from its class a name an earlier raise set that is not in it: ``del E.code``);
    ``"over"`` where it does not fit the reply. ``marks``: as :func:`_own_vars` takes them, a name
    whose entry in a class's dict the program's code changed while the reply was built goes as a
    stand-in for a data descriptor (in one file, where nothing called that code, it is not so)."""
    seen, out = set(), []
    before = {id(cls): (items, prints) for cls, items, prints in marks[1]} if marks is not None else {}
    changed, removed = set(), set()
    classes = []
    if marks is not None and marks[3] is kind:
        # the MRO as it was before the program's code ran for this reply (a __str__ that sets
        # E.__bases__ = (M, Base) gives E M's attributes only there): the harness's class is made
        # from the bases read then
        mro = [cls for cls, _, _ in marks[1]]
    else:
        mro = [
            cls
            for cls in _REAL_MRO(kind)
            if cls is not object and _stdlib_name(cls) is None and _BUILTINS.get(_REAL_NAME(cls)) is not cls
        ]
    for cls in mro:
        items = list(_DICT_ITEMS(dict(_REAL_DICT(cls))))
        prints = None
        if id(cls) in before:
            items_before, prints = before[id(cls)]
            now, gone = _changed(items_before, items)
            changed.update(now)
            removed.update(gone)
        classes.append((items, prints))
    classes.append(([(key, _MISSING) for key in sorted(removed)], None))
    for items, prints in classes:
        for key, value in items:
            if type(key) is not str or key in seen or (key[:2] == "__" and key[-2:] == "__"):
                continue
            seen.add(key)
            if len(out) >= _MAX_CLASS_VARS:
                return "over"
            item, why, call = None, "", False
            form = type(value)
            try:
                if key in changed:
                    why = _CHANGED
                    raise _Hidden
                if any(_real_lookup(form, hook) is not None for hook in ("__get__", "__set__", "__delete__")):
                    # a descriptor (an int subclass with __get__ too): lookup gives its answer; one
                    # with __set__ or __delete__ only takes `e.code = 5` itself in one file
                    raise _Hidden
                item = _charged_item(key, value, budget)
                if item is not None and prints is not None and _moved(prints, key, item[1]):
                    # changed inside (E.codes.append(2) in a __str__): same object, other value
                    item, why = None, _CHANGED
                    raise _Hidden
            except _Spent:
                pass
            except BaseException:  # noqa: BLE001 -- not plain data, or a descriptor: a stand-in
                if why != _CHANGED:
                    why = _REAL_NAME(form)[:_MAX_NAME]
                    call = _real_lookup(form, "__call__") is not None
            if item is None:
                data = (
                    why == _CHANGED
                    or _real_lookup(form, "__set__") is not None
                    or _real_lookup(form, "__delete__") is not None
                )
                item = ([key, None, why, True] if call else [key, None, why]) if data else [key, None, why, call, True]
                cost = len(key) + len(why) + 22
                if cost > budget.text:
                    return "over"
                budget.text -= cost
            out.append(item)
    return out


_MAX_CLASS_VARS = 500
_DICT_KEYS = dict.keys


def _peers(kind, budget, marks=None):
    """The class attributes (``"cvars"`` as :func:`_class_vars` gives them, ``"over"`` where they
    do not fit) of the other classes sent before that share a program class with ``kind`` whose
    own dict changed since it was last read, as ``"peers"``: ``[[class number, cvars], ...]``,
    ``None`` where none changed, ``"over"`` where they do not fit the reply (the harness then
    makes stand-ins on every class it made). The harness makes one class per program class, each
    holding a copy of its bases' attributes: ``class B(A)`` with ``del A.code`` (or ``A.code =
    500``) at a raise of the one must reach the held instances of the other, as in one file. Each
    program class's dict is kept as read (its keys and values by identity, no code of the
    program's runs to compare them); at most :data:`_MAX_PEERS` peers are read, the rest go as
    ``"over"``. ``marks``: as :func:`_class_vars` takes them (what the program's code changed while
    this reply was built goes to the peers as stand-ins too)."""
    try:
        changed = set()
        for cls in _REAL_MRO(kind):
            if cls is object or _stdlib_name(cls) is not None or _BUILTINS.get(_REAL_NAME(cls)) is cls:
                continue
            items = list(_DICT_ITEMS(dict(_REAL_DICT(cls))))
            before = budget.snapshots.get(id(cls)) or _SNAPSHOTS.get(id(cls))
            budget.put(budget.snapshots, id(cls), (cls, items))
            if before is not None and not _same_items(before[1], items):
                changed.add(id(cls))
        if not changed:
            return None
        out = []
        # those this reply sent are in budget.classes (skipped): the committed ones suffice
        for number, other in list(_SENT_CLASSES.items()):
            if number in budget.classes or not any(id(cls) in changed for cls in _REAL_MRO(other)):
                continue
            kept = "over"
            if len(out) < _MAX_PEERS:
                try:
                    kept = _class_vars(None, other, budget, marks)
                except BaseException:  # noqa: BLE001 -- a class that cannot be read: its misses fail
                    kept = "over"
            if budget.text < 16:
                return "over"
            budget.text -= 16
            budget.put(budget.classes, number, kept)
            out.append([number, kept])
        return out or None
    except BaseException:  # noqa: BLE001 -- classes that cannot be read: every made class fails closed
        return "over"


def _same_items(before, now):
    """Two reads of a class's own dict hold the same keys and values, by identity, in order."""
    return len(before) == len(now) and all(a[0] is b[0] and a[1] is b[1] for a, b in zip(before, now))


_SENT_CLASSES = {}  # class number -> the class, for each whose "cvars" went in some reply
_SNAPSHOTS = {}  # id(program class) -> (the class, its own dict's items as last read for a reply)
_MAX_PEERS = 64


def _shadowed(kind, key):
    """``key`` names a data descriptor of a class of the program's on the real MRO of ``kind`` (a
    ``property``, a ``__slots__`` member, a mixin's property): attribute lookup in one file gives
    its answer, never the instance dict's value. A built-in class's (``args``, ``__traceback__``,
    ``errno``) does not count: the harness's rebuilt class has it too, and shadows the entry as in
    one file. Read through the class dicts only; no code of the program's runs."""
    for cls in _REAL_MRO(kind):
        namespace = _REAL_DICT(cls)
        if key in namespace:
            if cls is object or _BUILTINS.get(_REAL_NAME(cls)) is cls:
                return False
            form = type(namespace[key])
            return _real_lookup(form, "__set__") is not None or _real_lookup(form, "__delete__") is not None
    return False


class _Hidden(Exception):
    """An instance-dict entry that attribute lookup would not give (:func:`_shadowed`)."""


class _Changed(Exception):
    """An entry the program's code changed while the reply was built (:func:`_marks`)."""


_CHANGED = "shadowed: changed by code of the program's run to send it"


def _marks(err, kind, budget):
    """``(items, [(class, items, prints), ...], prints, kind)``: the items of ``err``'s instance
    dict and of the own dicts of the program's classes on its real MRO (in its order), with the
    prints of their values (:func:`_print`), read with no code of the program's run, before the
    reply runs any (its own ``__str__``, a property over a standard-library field, the ``__str__``
    of an argument, a ``__getattr__``, those of the exceptions before it in the reply): in one
    file nothing calls that code unless the tests do, so what it changes there (``E.code = 404``,
    ``E.codes.append(2)`` or ``E.__bases__ = (M, Base)`` in a ``__str__``) must not cross as if the
    program had done it (:func:`_changed`, :func:`_moved`). A class is read once per reply
    (``budget.class_marks``). ``None`` where they cannot be read."""
    try:
        own = list(_DICT_ITEMS(_REAL_VARS(err)))
        classes = []
        for cls in _REAL_MRO(kind):
            if cls is object or _stdlib_name(cls) is not None or _BUILTINS.get(_REAL_NAME(cls)) is cls:
                continue
            entry = budget.class_marks.get(id(cls))
            if entry is None or entry[0] is not cls:
                items = list(_DICT_ITEMS(dict(_REAL_DICT(cls))))
                entry = budget.class_marks[id(cls)] = (cls, items, _prints(items, budget))
            classes.append(entry)
        prints = _prints(own, budget)
    except BaseException:  # noqa: BLE001
        return None
    return own, classes, prints, kind


def _premark(err, budget):
    """Take the marks (:func:`_marks`) of every exception in the reply for ``err`` (itself, its
    group's members, its links, nested) before any code of the program's runs to build it: an
    outer exception's (or an earlier member's) ``__str__`` that sets ``self.__cause__.code`` or a
    later member's class attribute changes what is sent for those after it. The walk goes in the
    reply's own order and spends the reply's own member budget (a group walked only where its
    members fit, each link one), so a group the reply sends ``"over"`` is not walked and every
    exception the reply sends is marked (a group's members marked first would leave a later sent
    exception unmarked, read after an earlier member's ``__str__`` ran); it costs at most what the
    reply may send, however many groups share one large tuple. Read through the interpreter's own
    descriptors (``__cause__``, ``__context__``, a group's ``exceptions``). An exception the reply
    sends that this walk did not mark goes as one whose every attribute code of the program's may
    have changed (:func:`_unmarked`)."""
    _premark_walk(err, budget, 0, (), [_MAX_MEMBERS])


def _premark_walk(node, budget, depth, path, left):
    marked = budget.premarks
    try:
        kind = type(node)
        if id(node) not in marked:
            marked[id(node)] = (node, _marks(node, kind, budget))
        if _GROUP and issubclass(kind, _GROUP):
            members = tuple(_GROUP.__dict__["exceptions"].__get__(node))
            if depth < _MAX_DEPTH and len(members) <= left[0]:
                left[0] -= len(members)
                for member in members:
                    _premark_walk(member, budget, depth + 1, (), left)
        cause = BaseException.__cause__.__get__(node)
        context = BaseException.__context__.__get__(node)
    except BaseException:  # noqa: BLE001 -- not read here: sent as unmarked (:func:`_unmarked`)
        return
    path = (*path, id(node))
    for link in (cause, context if context is not cause else None):
        if link is None or id(link) in path or depth >= _MAX_DEPTH or left[0] < 1:
            continue
        left[0] -= 1
        _premark_walk(link, budget, depth + 1, path, left)


def _unmarked(kind):
    """Marks for an exception the reply sends that :func:`_premark` did not reach (a link set by
    an earlier member's ``__str__``): dicts read as empty, so every attribute it and its program
    classes hold goes as a stand-in (:data:`_CHANGED`), as code of the program's may have set it
    (fail closed). ``None`` where its MRO cannot be read."""
    try:
        classes = [
            (cls, [], {})
            for cls in _REAL_MRO(kind)
            if cls is not object and _stdlib_name(cls) is None and _BUILTINS.get(_REAL_NAME(cls)) is not cls
        ]
    except BaseException:  # noqa: BLE001
        return None
    return [], classes, {}, kind


def _prints(items, budget):
    """``{name: print}`` of a dict's items (:func:`_print`), names as their exact text."""
    out = {}
    for key, value in items:
        try:
            if type(key) is not str:
                if not issubclass(type(key), str):
                    continue
                key = str.__str__(key)
            out[key] = _print(value, budget)
        except BaseException:  # noqa: BLE001 -- no print: compared as changed
            continue
    return out


def _print(value, budget):
    """``value`` as JSON text of what :func:`_encode` sends for it, read with no code of the
    program's run (so an in-place change later, ``codes.append(2)``, shows as another print);
    ``None`` where it is not plain data, ``_MISSING`` past the reply's budget for prints (a value
    sent then is compared as changed: the reply's own encoding has the same room at most)."""
    prints = budget.prints
    if prints is None:
        prints = budget.prints = _Budget.__new__(_Budget)
        prints.work, prints.mixed = _WORK_BUDGET, False
    try:
        return json.dumps(_encode(value, prints, _ARGS_BUDGET))
    except _Spent:
        return _MISSING
    except BaseException:  # noqa: BLE001 -- not plain data
        return None


def _moved(prints, key, encoded):
    """A value sent as ``encoded`` differs from its print taken before the program's code ran
    for this reply (or has none): it changed in place (or cannot be told), so it goes as a
    stand-in."""
    before = _DICT_GET(prints, key, _MISSING)
    return before is _MISSING or before is None or before != json.dumps(encoded)


def _changed(before, now):
    """``(changed, removed)``: the names (as text) whose entries differ between two reads of a
    dict's items, by identity (added, removed or holding another object), and of those the ones
    now absent. Compared as exact ``str`` texts: no hash or ``__eq__`` of the program's runs."""
    if _same_items(before, now):
        return (), ()  # the usual case: no code of the program's changed them
    old, new = _texts(before), _texts(now)
    changed = {key for key in (*old, *new) if _DICT_GET(old, key, _MISSING) is not _DICT_GET(new, key, _MISSING)}
    return changed, sorted(key for key in changed if key not in new)


def _texts(items):
    """``{text: value}`` for the items whose key is a ``str`` (a subclass by its text)."""
    out = {}
    for key, value in items:
        if issubclass(type(key), str):
            out[str.__str__(key)] = value
    return out


_SLOT_WRAPPER = type(object.__dict__["__getattribute__"])
_REAL_VARS = BaseException.__dict__["__dict__"].__get__
_DICT_ITEMS = dict.items
_DICT_GET = dict.get
_MISSING = object()


def _message(err, budget):
    """``str(err)[:500]``, built only as far as those 500 characters for a built-in exception of
    plain data (``str`` of a list walks all of it: ``ValueError(a)``, ``a`` built by doubling
    shared references, would take 2**40 steps), with ``str`` itself for anything else (a single
    argument that is not of a :data:`_PLAIN` type: its ``str`` may differ from its ``repr``).
    Within containers items go by ``repr``, as ``str`` of the container does, bounded for plain
    containers and ``collections.deque`` and whole for anything else (under the call's time cap)."""
    kind = type(err)
    try:
        method = _real_lookup(kind, "__str__")
    except BaseException:  # noqa: BLE001
        method = None
    # a built-in __str__ (the checks below), of a built-in class or of a subclass of one
    try:
        args = _REAL_ARGS(err)
    except BaseException:  # noqa: BLE001 -- a subclass's args that cannot be read: its str
        args = None
    if method is BaseException.__str__ and type(args) is tuple:
        if not args:
            return ""
        if len(args) == 1:
            if type(args[0]) is str:
                return args[0][:_MSG]
            if type(args[0]) in _PLAIN or type(args[0]) is _deque():
                return _bounded_repr(args[0], budget)
            # str() of anything else may be its own (a date, a Decimal, a Path, a class with
            # its own __str__), not its repr: the harness rebuilds it from this message
            return str(args[0])[:_MSG]
        return _bounded_repr(args, budget)
    if method is KeyError.__str__ and type(args) is tuple and len(args) == 1:
        return _bounded_repr(args[0], budget)
    if _GROUP and method is _GROUP.__dict__["__str__"]:
        message = _GROUP.__dict__["message"].__get__(err)
        count = len(_GROUP.__dict__["exceptions"].__get__(err))
        if type(message) is str:
            return f"{message[:_MSG]} ({count} sub-exception{'s' if count > 1 else ''})"[:_MSG]
    return str(err)[:_MSG]


def _bounded_repr(value, budget):
    """``repr(value)[:500]`` for plain data, built only as far as those 500 characters."""
    pieces = _Pieces(budget)
    try:
        pieces.add_repr(value, ())
    except _Full:
        pass
    return "".join(pieces.parts)[:_MSG]


def _deque():
    """``collections.deque`` where the program has it (its imports do), without importing it."""
    return getattr(sys.modules.get("collections"), "deque", None)


class _Full(Exception):
    """The message has its 500 characters."""


class _Pieces:
    """The start of a ``repr``, in pieces, up to 500 characters (and the budget's work)."""

    def __init__(self, budget):
        self.parts, self.left, self.budget = [], _MSG, budget

    def add(self, text):
        self.parts.append(text[: self.left])
        self.left -= len(text)
        if self.left <= 0:
            raise _Full

    def add_repr(self, value, path):
        self.budget.spend_talk(1)
        t = type(value)
        if t is str or t is bytes:
            if len(value) <= self.left:
                self.add(repr(value))
                return
            # the first characters only (a long string would be copied whole), quoted as repr
            # quotes the whole string: with " where it holds ' and no ", else with '
            quote, double = ("'", '"') if t is str else (b"'", b'"')
            self.budget.spend_talk(len(value) >> 12)
            tail = quote if quote in value and double not in value else double
            self.add(repr(value[: self.left] + tail))
        elif value is None or t is bool or t is int or t is float or t is complex:
            if t is int:
                # converting a long int to decimal is quadratic: 20,000 digits take about 17 ms
                self.budget.spend_talk((value.bit_length() >> 6) ** 2 // 64)
            self.add(repr(value))
        elif t is list or t is tuple or t is dict or t is set or t is frozenset:
            if id(value) in path:
                self.add({list: "[...]", tuple: "(...)", dict: "{...}"}.get(t, f"{t.__name__}(...)"))
                return
            path = (*path, id(value))
            if (t is set or t is frozenset) and not value:
                self.add(f"{t.__name__}()")
                return
            opening, closing = {list: "[]", tuple: "()", dict: "{}", set: "{}", frozenset: "{}"}[t]
            if t is frozenset:
                self.add("frozenset(")
            self.add(opening)
            for i, item in enumerate(value.items() if t is dict else value):
                if i:
                    self.add(", ")
                if t is dict:
                    self.add_repr(item[0], path)
                    self.add(": ")
                    self.add_repr(item[1], path)
                else:
                    self.add_repr(item, path)
            if t is tuple and len(value) == 1:
                self.add(",")
            self.add(closing)
            if t is frozenset:
                self.add(")")
        elif t is _deque():
            # a deque's repr is its items' as a list's; bounded as one (a deque of a list built by
            # doubling shared references walked 2**40 leaves)
            if id(value) in path:
                self.add("[...]")
                return
            path = (*path, id(value))
            self.add("deque([")
            for i, item in enumerate(value):
                if i:
                    self.add(", ")
                self.add_repr(item, path)
            self.add("])" if value.maxlen is None else f"], maxlen={value.maxlen})")
        else:
            self.add(repr(value))


def _attributes(kind):
    """``(field, read)`` for the attributes of an exception of class ``kind`` that its ``args``
    leave out (a built-in exception's, set by keyword or dropped from ``args`` by ``OSError``,
    read through the defining class's slot, as its ``str`` reads them; an allowlisted
    standard-library class's, :data:`STDLIB_CLASSES`, as the tests would read them); the harness
    sets these, and only these, when it rebuilds it."""
    for base, fields in _SLOTS:
        if issubclass(kind, base):
            return [(field, base.__dict__[field].__get__) for field in fields]
    for cls in _REAL_MRO(kind):
        dotted = _stdlib_name(cls)
        if dotted is not None:
            return [(field, _field_reader(field)) for field in STDLIB_CLASSES[dotted]]
    return ()


def _field_reader(field):
    def read(err):
        # one field that cannot be read (a subclass's property that raises), or that is not there,
        # is left out alone (the harness then fails the verdict on any miss of the exception's):
        # in one file the others and the args are still there
        try:
            return getattr(err, field, _ABSENT)
        except BaseException:  # noqa: BLE001
            return _ABSENT

    return read


_ABSENT = object()  # a standard-library class's field that is not there (or raised when read)


# Each built-in class's C member fields (set by keyword, dropped from args by OSError, or set after
# construction: cloud-init's ``e = OSError(msg); e.errno = errno.ENOENT; raise e`` changes neither
# args nor the instance dict), read through the defining class's own descriptors.
_UNICODE_FIELDS = ("encoding", "object", "start", "end", "reason")
_SLOTS = ((OSError, ("errno", "strerror", "filename", "filename2")), (ImportError, ("msg", "name", "path")),
          (NameError, ("name",)), (AttributeError, ("name",)), (SystemExit, ("code",)),
          (UnicodeDecodeError, _UNICODE_FIELDS), (UnicodeEncodeError, _UNICODE_FIELDS),
          (UnicodeTranslateError, _UNICODE_FIELDS),
          (SyntaxError, ("msg", "filename", "lineno", "offset", "text", "end_lineno", "end_offset",
                         "print_file_and_line")))  # fmt: skip

# Standard-library exception classes that cross as themselves (the harness takes each from the
# module the tests imported, never importing one), by ``__module__.__qualname__``, with the fields
# their ``args`` leave out. Data only: no method of theirs reads more than these fields and args.
# Real suites catch them by class: pypyr/pypyr tests/unit/pypyr/context/json_test.py
# (``pytest.raises(json.JSONDecodeError)``), sjlva/johnson tests/test_read_json.py.
STDLIB_CLASSES = {
    "json.decoder.JSONDecodeError": ("msg", "doc", "pos", "lineno", "colno"),
    "statistics.StatisticsError": (),
    "re.error": ("msg", "pattern", "pos", "lineno", "colno"),
    "re.PatternError": ("msg", "pattern", "pos", "lineno", "colno"),  # re.error's name from 3.13
    "_csv.Error": (),
    "binascii.Error": (),
    "_queue.Empty": (),
    # stdout and stderr are properties over output and stderr (the class's own code, run on the
    # fields in the harness); a script's run(..., check=True) raises these
    "subprocess.CalledProcessError": ("returncode", "cmd", "output", "stderr"),
    "subprocess.TimeoutExpired": ("cmd", "timeout", "output", "stderr"),
}


def _stdlib_classes():
    """The classes of :data:`STDLIB_CLASSES` as the standard library defines them, imported here,
    before the program runs: the program may rebind ``json.decoder.JSONDecodeError`` (or put a
    module of its own in ``sys.modules``) to a class of its own named so, which must not cross as
    the real one. ``statistics`` is the one import of weight, about 4 to 8 ms (``-X importtime``);
    ``json`` and ``re`` are here already."""
    import importlib

    found = {}
    for dotted in STDLIB_CLASSES:
        module, _, qualname = dotted.rpartition(".")
        try:
            kind = getattr(importlib.import_module(module), qualname)
        except Exception:  # noqa: BLE001 -- not in this Python (re.PatternError before 3.13)
            continue
        if _REAL_QUALNAME(kind) == qualname:  # re.error is PatternError's alias from 3.13 on
            found[dotted] = kind
    return found


_STDLIB_REAL = _stdlib_classes()
_STDLIB_IDS = frozenset(id(kind) for kind in _STDLIB_REAL.values())  # held there: ids never reused


def _note_cancelled(module):
    """Note asyncio's ``CancelledError`` as ``asyncio.exceptions`` defines it, once the standard
    library's module has run (:func:`la_boot.install_stdlib_shims` calls this; importing asyncio
    here would cost every program 80 ms). Only that class crosses as asyncio's, by identity: any
    class of the program's named ``CancelledError`` (or bound in its place) is one of its own. A
    class the module made through a ``__build_class__`` of the program's counts only where it has
    the real one's shape (no method of its own), as asyncio itself then uses it."""
    try:
        kind = vars(module).get("CancelledError")
        if (
            not _CANCELLED
            and type(kind) is type
            and _REAL_NAME(kind) == "CancelledError"
            and _REAL_MRO(kind)[1:] == (BaseException, object)
            and set(_REAL_DICT(kind)) <= {"__module__", "__doc__", "__weakref__"}
        ):
            _CANCELLED.append(kind)
    except Exception:  # noqa: BLE001, S110 -- not asyncio's: nothing crosses as its CancelledError
        pass


_CANCELLED = []  # asyncio's CancelledError, once the standard library's asyncio.exceptions has run


def _stdlib_name(cls):
    """``cls``'s dotted name where it is one of :data:`STDLIB_CLASSES` (the class itself, as the
    standard library defined it before the program ran, by identity), else ``None``."""
    if id(cls) not in _STDLIB_IDS:
        return None  # none of them (the usual case, read for every class of every reply): no name built
    try:
        module, qualname = _REAL_MODULE(cls), _REAL_QUALNAME(cls)
        dotted = f"{module}.{qualname}"
        if _STDLIB_REAL.get(dotted) is cls:
            return dotted
    except BaseException:  # noqa: BLE001
        pass
    return None


# Per reply (a group's members together): JSON characters of ``args`` and attributes, JSON
# characters of members' messages (and of their class names past 64), members (all levels), levels
# of nested groups, and steps spent building args and messages. Past them a member goes with its
# class and less (``"over"``), so the reply stays far below the channel's 1 MiB (about 520 KiB at
# most: a correct program's exception must not break the channel) and is built in well under a second.
_ARGS_BUDGET = 1 << 17
_TEXT_BUDGET = 1 << 17
_MAX_MEMBERS = 2000
_MAX_DEPTH = 32
_WORK_BUDGET = 1 << 18
_MSG = 500  # characters of a message
_MAX_NAME = 64
_MAX_BASES = 8  # built-in bases of one class of the program's own that are sent
_GROUP = getattr(builtins, "BaseExceptionGroup", ())  # Python 3.11 on
_MATCH = la_wire.re.Match
_PROTOCOL = (StopIteration, StopAsyncIteration)  # rebuilt by the harness from their message
_SIZED = (str, bytes, bytearray, list, tuple, dict, set, frozenset, la_wire._DEQUE)
# exact types whose str is their repr, which _bounded_repr builds only as far as 500 characters
_PLAIN = frozenset({list, tuple, dict, set, frozenset, int, float, complex, bool, type(None), bytes})


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

    def __init__(self, namespace, request_fd, reply_fd, handles):
        self.namespace = namespace
        self.handles = handles  # the instances of the program's classes sent (la_handles)
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.coroutines = {}  # id -> a coroutine a call returned, until the harness asks for it to be awaited
        self.tasks = {}  # id -> the running task of an awaited coroutine, until it ends
        # the verdict's shared objects (la_wire.Session): every reply sends what changed of them
        self.session = la_wire.Session()
        self.awaited = False  # an await was read: the harness may read replies out of order from now on
        # id -> the exports held of the bytearrays the tests had exported (la_wire.decode_call),
        # for the call that returned the coroutine: its run may resize them too
        self.exports = {}
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
            self.start(request["await"], request.get("exported"))
            return
        reply = self.call(request)
        # Copies nothing of the program's holds are dropped here, once the call's frame is gone
        # (its arguments with it); a coroutine or task that holds one keeps it. Only in a call's
        # reply, which the harness reads in order: an await's reply sent before may be read after,
        # so the harness's table keeps a dropped object while an await may be in flight
        # (la_wire.Session.drop, la_harness.Channel.calm).
        dropped = self.session.prune()
        if dropped:
            reply["dropped"] = la_wire.dropped_runs(dropped)
        self.write(reply)

    def call(self, request):
        decoded = False
        value = _NO_VALUE
        held = []
        rebuilt = []  # the iterator arguments, rebuilt from the items the harness read of the tests'
        try:
            # decoded first, whatever fails after: the harness numbered these arguments and its
            # pushed contents, so the session must take them in step
            args, kwargs = la_wire.decode_session_call(
                request["args"],
                request["kwargs"],
                self.session,
                request.get("pushed"),
                held,
                rebuilt,
                request.get("dropped"),  # the kept objects the tests let go: the program's own now
            )
            decoded = True
            fn = la_handles.type_check(request["call"], self.namespace)  # isinstance(s, Stack) in the tests
            if fn is None:
                op, name = la_handles.request_on_handle(request["call"], request["args"])
                if op is None:
                    fn = self.namespace[name]
                else:  # a method call, read or write on an instance (its first argument)
                    fn = la_handles.bound(op, args.pop(0), name, self.handles)
            result = fn(*args, **kwargs)
            if type(result) is _COROUTINE:
                self.next_id += 1  # never reused: an id stands for one coroutine
                self.coroutines[self.next_id] = result
                reply = {"coroutine": self.next_id}
            else:
                reply, value = {}, result
        except BaseException as err:  # noqa: BLE001 -- the harness decides what an exception means
            reply = _raised(err)
        if not decoded:
            # nothing numbered nor written, out of step with the harness's numbering from here:
            # always a WireError, which fails the verdict (bad_reply), whatever stopped the decode
            _release(held)
            return reply if reply.get("raised") == "WireError" else _raised(la_wire.WireError("undecodable call"))
        self.session.grow = True  # new containers in what it changed are numbered too
        self.session.patch = not self.awaited
        # the value's new containers too, only where the harness's request asks (it decodes by its
        # own decision: numbering anyway puts this side out of step, a bad reply)
        self.session.own = request.get("own") is True
        _with_changes(reply, self.session, value)
        if la_wire.undrained(rebuilt) and "coroutine" not in reply:
            # the harness read the tests' iterator to its end, where one file leaves the rest unread;
            # not for an async def's coroutine, which has read nothing yet (every right program's
            # pass was no verdict: red team 50); what it leaves unread is its word, as a reply's is
            reply["rest"] = True
        if "coroutine" in reply:
            self.exports[reply["coroutine"]] = held  # its run may resize them too
        else:
            _release(held)
        return reply

    def write(self, reply):
        try:
            la_wire.write_frame(self.reply_fd, reply)
        except OSError:
            self.done = True  # the harness is gone
            if self.loop is not None:
                self.loop.stop()

    def start(self, ident, exported=None):
        """Run the coroutine ``ident`` as a task of the one loop (started on the first await).
        ``exported``: the numbers of its call's bytearrays the tests hold an export of now
        (:func:`la_wire.exported_numbers`), held here for its run instead of those of the call."""
        self.awaited = True
        coro = self.coroutines.pop(ident, None) if type(ident) is int else None
        if coro is None:
            self.write({"id": ident, "raised": "RuntimeError", "msg": "cannot reuse already awaited coroutine"})
            return
        try:
            if exported is not None:
                la_wire.hold_exports(self.session.table, exported, self.exports.setdefault(ident, []))
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
        value = _NO_VALUE
        try:
            if task.cancelled():
                reply = {"raised": "CancelledError", "msg": "", "base": True}
            elif task.exception() is not None:
                reply = _raised(task.exception())
            else:
                reply, value = {}, task.result()
        except BaseException as err:  # noqa: BLE001
            reply = _raised(err)
        self.session.grow = self.session.patch = self.session.own = False
        _with_changes(reply, self.session, value)
        _release(self.exports.pop(ident, ()))
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


_NO_VALUE = la_wire._NO_VALUE


def _release(held):
    """End the exports a call held (:func:`la_wire.decode_call`): the bytearrays are the
    program's own once the call is over, resizable as a copy would be."""
    for view in held:
        view.release()


def _with_changes(reply, session, value=_NO_VALUE):
    """Complete ``reply`` once a call (or an awaited coroutine) has run: ``"moved"``, the contents
    of the verdict's shared objects (``session``, :class:`la_wire.Session`) changed since the last
    reply, this call's arguments or ones kept from an earlier call, and ``"ok"``, ``value`` in the
    same numbering, where it returned one. An item of an argument that is not plain data goes as a
    marker the harness makes a stand-in of (:func:`la_wire.changes`: only a use of it fails the
    verdict); where ``value`` is not plain data, ``reply`` becomes that ``WireError`` (the harness
    fails the verdict), as the tests asked for it."""
    try:
        moved, frame, _ = la_wire.changes(session.table, session, value)
    except BaseException as err:  # noqa: BLE001 -- a WireError, or out of memory
        reply.clear()
        reply.update(_raised(err))
        return
    if moved:
        reply["moved"] = moved
    if value is not _NO_VALUE:
        reply["ok"] = frame


_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE, without importing inspect
_COROUTINE = types.CoroutineType


if __name__ == "__main__":
    main()
