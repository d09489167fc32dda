"""Handles: instances of the program's own classes, held in the sandbox, called from the tests.

LeetCode's tests (and LiveCodeBench's functional problems, whose starter code is ``class
Solution``) call methods on an instance of the program's class: ``Solution().twoSum(nums, 9)``,
``c = LRUCache(2); c.put(1, 1); c.get(1)``. The instance is not plain data, so it cannot cross
the wire (:mod:`la_wire`); before handles, every right program was ``bad_reply``. Now:

- the candidate (:class:`CandidateTable`) keeps each instance of a class the program defined
  (its ``__module__`` is the program's) that it sends, by number, and sends it as
  ``{"h": [k, class name, defaults]}`` where it first sends it and ``{"h": k}`` after (the same instance is
  the same number, so ``is`` holds as in one file). Instances of a program's subclass of a plain
  type (``class Row(list)``) still cross as the plain value they store, as before;
- the harness (:class:`HarnessTable`) makes one :class:`Handle` per number, in order: a new
  number must be the next one (numbers the candidate skipped, or re-issued, break the channel:
  ``bad_reply``), a known one is the same :class:`Handle` object;
- every request on a handle is a call of the candidate sent by the harness's own
  ``Channel.call``, with the handle as its first argument, named ``"Class" + op + attribute``
  (:func:`request_on_handle`): ``handle.name`` reads the attribute in the sandbox (``.?name``)
  and gives its value where it is plain data or an instance of the program's class (a handle),
  or, where it is callable (a method), a stand-in whose call is ``.name``: the arguments are
  numbered and their in-place changes come back as for any call (``s.moveZeroes(nums)`` changes
  the tests' ``nums``); ``handle.name = value`` sets it there (``.=name``). So ``node.next`` is
  the same handle each time, ``node.next is None`` and ``hasattr`` answer as in one file, and the
  program's properties and ``__getattr__`` run where they run in one file, in the sandbox;
- a handle passed back (``a.merge(b)``, ``ListNode(1, head)``) arrives as the candidate's own
  object.

What a handle does NOT do: it never runs code of the candidate's in the harness, and none of
Python's protocols on it asks the candidate. Every other use fails closed with the harness's
``LeftOutTouched`` (sticky: the verdict fails even where the tests swallow it): ``==``, ``!=``,
ordering, ``hash``, ``bool``, ``str``, ``repr``, ``len``, iteration, indexing, arithmetic,
``copy``, calling it, a dunder attribute, deleting an attribute, and any use of a method's
stand-in but a call (``s.f == s.f``). In one file those would ask the program's own ``__eq__``,
``__bool__``, ``__repr__``: a program whose ``__eq__`` says True to anything must not pass
``assert Solution() == expected``. Only where the program's class leaves ``==``/``!=``, ``hash``
or truth to ``object`` (the candidate says so with a new handle, :data:`_DEFAULTS`) does the
handle answer them itself, as ``object`` would: by identity, ``object``'s hash, true. So
LeetCode's ``while node:`` and a ``seen`` set of nodes work, and a candidate that claims a default
its class overrides gets identity, never its own ``__eq__``'s answer. ``is`` and ``type()``
still answer (they ask nothing of the program). A data attribute's value is a copy made at the
read (as a call's value is): a list the tests read, then change, is not the program's.

Standard library only, and nothing of ``la_harness`` imported (it runs as ``__main__``): the
harness passes its channel, its ``LeftOutTouched`` raiser and its ``CandidateGone`` to
:func:`install_harness`.
"""

import la_wire

__all__ = [
    "CandidateTable",
    "Handle",
    "HarnessTable",
    "bound",
    "install_candidate",
    "install_harness",
    "request_on_handle",
    "type_check",
]

_MAX_NAME = 100  # characters of a class's or method's name kept (error messages only)
_MAX_HANDLES = 1_000_000  # instances one verdict may hand out (each is held for the verdict)


class CandidateTable:
    """The candidate's side: the instances it sent, by number, held for the verdict (so their
    ``id`` is never reused and a number always names the same object)."""

    def __init__(self, module_name):
        self.module_name = module_name
        self.objects = []
        self.numbers = {}  # id(instance) -> its number

    def own(self, value):
        """Whether ``value`` is an instance of a class the program defined."""
        try:
            return type(value).__module__ == self.module_name
        except Exception:  # noqa: BLE001 -- a metaclass's __module__ property of the program's
            return False

    def encode(self, value):
        """The frame of an instance of the program's own class, or ``None`` for any other value."""
        number = self.numbers.get(id(value))
        if number is not None and self.objects[number] is value:
            return {"h": number}
        if not self.own(value):
            return None
        if len(self.objects) >= _MAX_HANDLES:
            raise la_wire.WireError(f"more than {_MAX_HANDLES} instances of the program's classes sent")
        number = len(self.objects)
        self.objects.append(value)
        self.numbers[id(value)] = number
        kind = type(value)
        return {"h": [number, _class_name(kind), _defaults(kind)]}

    def decode(self, body):
        """The instance ``{"h": k}`` names: one this side sent (the harness only sends those)."""
        if type(body) is not int or not 0 <= body < len(self.objects):
            raise la_wire.WireError("a handle number the candidate never sent")
        return self.objects[body]


def _class_name(kind):
    try:
        name = type.__dict__["__name__"].__get__(kind)  # the class's own name, never a property
    except Exception:  # noqa: BLE001
        name = "object"
    return name[:_MAX_NAME] if type(name) is str else "object"


# The protocols a handle may answer in the harness where the program's class leaves them to
# ``object`` (so nothing of the program's is asked in one file either): ``"eq"``, ``==``/``!=`` by
# identity (``NotImplemented``, as ``object``'s, so the other side's ``__eq__`` and then ``is``
# decide); ``"hash"``, ``object``'s hash; ``"bool"``, true. A candidate that claims one its class
# overrides gains only what a class without that override gives in one file.
_DEFAULTS = {"eq": ("__eq__", "__ne__"), "hash": ("__hash__",), "bool": ("__bool__", "__len__")}
_MRO, _OWN = la_wire._MRO, la_wire._OWN  # a class's MRO and own __dict__, through type's descriptors


def _defaults(kind):
    """The names of :data:`_DEFAULTS` whose methods ``kind`` takes from ``object`` (looked up along
    its MRO as Python looks up an implicit call's method, without the metaclass; a method set to
    ``None`` is no default)."""
    try:
        mro = _MRO(kind)
    except Exception:  # noqa: BLE001
        return []

    def lookup(dunder):
        return next((_OWN(klass)[dunder] for klass in mro if dunder in _OWN(klass)), _ABSENT)

    return [
        flag
        for flag, dunders in _DEFAULTS.items()
        if all(lookup(dunder) is _OWN(object).get(dunder, _ABSENT) for dunder in dunders)
    ]


_ABSENT = object()
_PLAINS = {}  # frozenset of defaults -> itself (at most 2 ** len(_DEFAULTS) entries)


def install_candidate(module_name):
    """Make the candidate's replies send instances of the program's classes (those whose
    ``__module__`` is ``module_name``) as handles."""
    table = CandidateTable(module_name)
    la_wire.set_handles(table)
    return table


# A request on a handle is a call of the candidate whose name is ``"Class" + op + "attribute"``
# and whose first argument is the handle: ``.`` calls the method, ``.?`` reads the attribute,
# ``.=`` sets it to the second argument. ``?`` and ``=`` never occur in an identifier, and the
# program's globals have no dotted names, so no request for a global is read as one.
_OPS = {"?": "get", "=": "set"}


def request_on_handle(name, frames):
    """``(op, attribute)`` for a request on a handle (``op``: ``"call"``, ``"get"`` or ``"set"``),
    ``(None, name)`` for a call of a global. A dotted name whose first argument frame is not a
    handle (``{"h": k}``) is a ``WireError``."""
    if type(name) is not str or "." not in name:
        return None, name
    attribute = name.rpartition(".")[2]
    op = _OPS.get(attribute[:1], "call")
    if op != "call":
        attribute = attribute[1:]
    if (
        not attribute
        or type(frames) is not list
        or not frames
        or type(frames[0]) is not dict
        or set(frames[0]) != {"h"}
    ):
        raise la_wire.WireError(f"bad request on a handle {name[:_MAX_NAME]!r}")
    return op, attribute


# A type check of the tests' whose class is a stand-in of the candidate's global (``isinstance(s,
# Stack)``, ``issubclass(Dog, Animal)``): a call named ``"@isinstance Stack"`` with the object (a
# handle, or plain data as any argument), or ``"@issubclass Animal"`` with the subclass's global name
# (a class never crosses). The candidate runs Python's own check on its globals, so its metaclass's
# ``__instancecheck__`` answers as in one file, and a global that is no class raises the same
# ``TypeError``. ``@`` and the space never occur in an identifier: no global is read as one.
_TYPE_CHECKS = {"@isinstance ": isinstance, "@issubclass ": issubclass}


def type_check(name, namespace):
    """The function the candidate calls for a type-check request ``name`` (see
    :data:`_TYPE_CHECKS`), looking its globals up in ``namespace``; ``None`` for any other request."""
    if type(name) is not str or not name.startswith("@"):
        return None
    op, _, target = name.partition(" ")
    check = _TYPE_CHECKS.get(op + " ")
    if check is None or not target:
        raise la_wire.WireError(f"bad type-check request {name[:_MAX_NAME]!r}")
    if op == "@isinstance":
        return lambda instance: check(instance, namespace[target])
    return lambda subclass: check(namespace[subclass], namespace[target])


def bound(op, instance, attribute, table):
    """What the candidate calls with the rest of the arguments for ``op`` on ``instance``."""
    if op == "call":
        return getattr(instance, attribute)
    if op == "set":
        return lambda value: setattr(instance, attribute, value)
    return lambda: _read(instance, attribute, table)


def _read(instance, attribute, table):
    """``(0, value)`` for an attribute whose value crosses (plain data, or an instance of the
    program's own class: a handle), ``(1,)`` for one that is callable (a method: the harness's
    stand-in calls it by name). ``callable`` reads the type's call slot: no code of the program's.
    Any other value (a ``Fraction``, a generator) is sent as is: ``bad_reply``, as for a call.
    A tuple: a call's value numbers its new containers (a list would be numbered and pruned on
    every method call; the attribute's own value is numbered as a call's is)."""
    value = getattr(instance, attribute)
    if table.own(value) or not callable(value):
        return (0, value)
    return (1,)


# ---- The harness's side -----------------------------------------------------------------------


class HarnessTable:
    """The harness's side: one :class:`Handle` per number the candidate sent, in order."""

    def __init__(self, channel, touched, gone):
        self.channel = channel
        self.touched = touched  # raises the harness's LeftOutTouched (sticky) with a text
        self.gone = gone  # the harness's CandidateGone: a malformed answer breaks the channel
        self.handles = []

    def bad_reply(self, text):
        """Break the channel (``bad_reply``) and raise its break."""
        self.channel._break(self.gone("bad_reply", text))
        raise self.channel.broken

    def encode(self, value):
        """The frame of a handle of this verdict's, or ``None`` for any other value."""
        if type(value) is Handle and _TABLE.__get__(value) is self:
            return {"h": _NUMBER.__get__(value)}
        return None

    def decode(self, body):
        """The :class:`Handle` ``{"h": k}`` (known) or ``{"h": [k, class name, defaults]}`` (new)
        names (``defaults``: names of :data:`_DEFAULTS`). A new one is already made where its
        reply was read (:meth:`issue`); one in a frame nobody read that way is made here."""
        if type(body) is int:
            if not 0 <= body < len(self.handles):
                raise la_wire.WireError(f"a handle number never issued ({body})")
            return self.handles[body]
        number = _checked_new(body)
        if number < len(self.handles):
            return self.handles[number]  # issued as its reply was read (every reply is)
        self.issue([body])
        return self.handles[number]

    def issue(self, bodies):
        """Make the handles that the new-handle ``bodies`` of one reply name (:func:`la_wire.new_handles`),
        as the reply is read, in the order the candidate wrote its replies: they must be the next
        numbers, each once (numbers the candidate skipped, or re-issued, are a ``WireError``). Not
        where each reply is decoded: the tests' threads decode their replies in any order (a
        to_thread call's reply before the await's its loop thread was still to run), and an
        await's reply that is never decoded (its loop closed) must still count its numbers."""
        if not bodies:
            return
        ordered = sorted(bodies, key=_checked_new)  # one reply's are numbered in its encoding's order
        for expected, body in enumerate(ordered, len(self.handles)):
            if body[0] != expected:
                # a skipped number names nothing; a re-issued one would make one object two handles
                raise la_wire.WireError(f"a handle issued out of order ({body[0]}, expected {expected})")
        for number, name, defaults in ordered:
            handle = object.__new__(Handle)
            _TABLE.__set__(handle, self)
            _NUMBER.__set__(handle, number)
            _KIND.__set__(handle, name[:_MAX_NAME])
            plain = frozenset(defaults)
            _PLAIN.__set__(handle, _PLAINS.setdefault(plain, plain))  # one set per combination, not per handle
            self.handles.append(handle)


def _checked_new(body):
    """The number of the new-handle ``body`` ``[k, class name, defaults]``; ``WireError`` where it
    is malformed."""
    if (
        type(body) is not list
        or len(body) != 3
        or type(body[0]) is not int
        or type(body[1]) is not str
        or type(body[2]) is not list
        or not all(type(flag) is str and flag in _DEFAULTS for flag in body[2])
    ):
        raise la_wire.WireError("bad handle")
    return body[0]


def install_harness(channel, touched, gone):
    """Make the harness decode the candidate's handles into :class:`Handle` objects that call
    through ``channel``; ``touched(text)`` raises the harness's ``LeftOutTouched``, ``gone`` is its
    ``CandidateGone`` (a malformed answer to an attribute read breaks the channel with it)."""
    table = HarnessTable(channel, touched, gone)
    la_wire.set_handles(table)
    return table


def _fail(handle, what):
    try:
        kind = _KIND.__get__(handle)
        table = _TABLE.__get__(handle)
    except AttributeError:
        raise TypeError("not a handle of the sandbox") from None
    table.touched(
        f"{what} of an instance of the candidate's class {kind} (held in the sandbox: only calls of its "
        "methods cross, and 'is')"
    )


class Handle:
    """Stands for an instance of the program's own class (held in the sandbox): ``h.method(...)``
    calls it there; ``is`` answers as in one file; anything else fails closed (module docstring)."""

    __slots__ = ("_la_table", "_la_number", "_la_kind", "_la_plain")

    def __init__(self, *args, **kwargs):
        raise TypeError("handles are made by the sandbox only")

    def __getattr__(self, name):  # what the class does not define: the program's attribute, read there
        _check_name(self, name)
        table = _TABLE.__get__(self)
        answer = table.channel.call(f"{_KIND.__get__(self)}.?{name}", (self,), {})
        if type(answer) is tuple and len(answer) == 2 and answer[0] == 0 and type(answer[0]) is int:
            return answer[1]
        if type(answer) is tuple and len(answer) == 1 and answer[0] == 1 and type(answer[0]) is int:
            return _new_method(self, name)
        table.bad_reply(f"a malformed answer to a read of the attribute {name[:_MAX_NAME]!r}")

    def __setattr__(self, name, value):
        _check_name(self, name)
        _TABLE.__get__(self).channel.call(f"{_KIND.__get__(self)}.={name}", (self, value), {})

    def __delattr__(self, name):
        _fail(self, f"deleting the attribute {str(name)[:_MAX_NAME]!r}")


def _check_name(handle, name):
    """Refuse what a handle does not forward: a dunder name (the protocols a program's class
    defines, which the harness would read: fail closed) and a dotted one (no attribute of that
    name exists in one file; it would split the request's name)."""
    if type(name) is not str:
        raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
    if name.startswith("__") and name.endswith("__"):
        _fail(handle, f"the attribute {name[:_MAX_NAME]!r}")
    if "." in name or not name:
        raise AttributeError(name)


_TABLE = Handle.__dict__["_la_table"]
_NUMBER = Handle.__dict__["_la_number"]
_KIND = Handle.__dict__["_la_kind"]
_PLAIN = Handle.__dict__["_la_plain"]


class _Method:
    """``handle.name``: calling it calls the method in the sandbox; any other use fails closed."""

    __slots__ = ("_la_handle", "_la_name")

    def __init__(self, *args, **kwargs):
        raise TypeError("made by the sandbox only")

    def __call__(self, *args, **kwargs):
        handle, name = _HANDLE.__get__(self), _NAME.__get__(self)
        table = _TABLE.__get__(handle)
        return table.channel.call(f"{_KIND.__get__(handle)}.{name}", (handle, *args), kwargs)

    def __getattr__(self, name):
        if name == "__name__":
            # none, as a callable without one: ``threading.Thread(target=s.add)`` reads it for the
            # thread's name and takes an AttributeError for none (a LeftOutTouched here failed a
            # right program's thread tests); the program's method's own name is not known here
            raise AttributeError(name)
        _fail(_HANDLE.__get__(self), f"the attribute {name[:_MAX_NAME]!r} of its {_NAME.__get__(self)!r}")


_HANDLE = _Method.__dict__["_la_handle"]
_NAME = _Method.__dict__["_la_name"]


def _new_method(handle, name):
    method = object.__new__(_Method)
    _HANDLE.__set__(method, handle)
    _NAME.__set__(method, name)
    return method


def _refuse_handle(what):
    def refuse(self, *args, **kwargs):
        _fail(self, what)

    return refuse


def _refuse_method(what):
    def refuse(self, *args, **kwargs):
        _fail(_HANDLE.__get__(self), f"{what} of its {_NAME.__get__(self)!r}")

    return refuse


# Not __get__, __set__, __delete__ nor __set_name__: a handle (or a method's stand-in) kept as a
# class attribute of the tests' (``class TestX(TestCase): s = Solution()``, read as ``self.s``)
# is a plain value there, as the program's instance is in one file.
_REFUSED = (
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __bool__ __len__ __iter__ __reversed__ __contains__ "
    "__getitem__ __setitem__ __delitem__ __str__ __repr__ __format__ __bytes__ __int__ __float__ "
    "__complex__ __index__ __round__ __trunc__ __floor__ __ceil__ __neg__ __pos__ __abs__ __invert__ "
    "__enter__ __exit__ __aenter__ __aexit__ __await__ __aiter__ __anext__ __next__ __fspath__ "
    "__reduce__ __reduce_ex__ __copy__ __deepcopy__ __getstate__ __sizeof__ __dir__ __length_hint__ "
    "__missing__ __buffer__ __release_buffer__"
).split() + [
    form.format(op)
    for op in "add sub mul matmul truediv floordiv mod divmod pow lshift rshift and xor or".split()
    for form in ("__{}__", "__r{}__", "__i{}__")
]
for _dunder in _REFUSED:
    setattr(Handle, _dunder, _refuse_handle(f"'{_dunder}'"))
    setattr(_Method, _dunder, _refuse_method(f"'{_dunder}'"))
Handle.__call__ = _refuse_handle("a call")


def _default(flag, dunder, value):
    """``Handle``'s ``dunder``: ``value(self, *args)`` where the program's class leaves it to
    ``object`` (``flag`` in its defaults), else a refusal, as for the other protocols."""
    refuse = _refuse_handle(f"'{dunder}'")

    def protocol(self, *args):
        plain = _PLAIN.__get__(self)
        return value(self, *args) if flag in plain else refuse(self, *args)

    return protocol


Handle.__eq__ = _default("eq", "__eq__", lambda self, other: NotImplemented)
Handle.__ne__ = _default("eq", "__ne__", lambda self, other: NotImplemented)
Handle.__hash__ = _default("hash", "__hash__", object.__hash__)
Handle.__bool__ = _default("bool", "__bool__", lambda self: True)
del _dunder
