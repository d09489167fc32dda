"""Plain-data wire format between the trusted test harness and the sandboxed candidate.

Only built-in value types cross: ``None``, ``bool``, ``int``, ``float`` (including ``inf``/``nan``),
``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set`` and ``frozenset``, nested;
``collections.OrderedDict`` (whose ``==`` against another checks the order); and a
regular-expression match (``re.Match``) as its subject and group spans, which :func:`decode`
rebuilds as a :class:`Match` of this module. :func:`decode` builds nothing else, so no object of
the candidate's making (say, one whose ``__eq__`` is always true) can reach the harness. Frames are
a 4-byte big-endian length and a JSON body.

A NaN is unequal to itself, so which NaN objects are the same one shows in ``==`` and in sets
(``x = nan; [x] == [x]`` and ``len({x, x}) == 1``, while two ``float("nan")`` are two members):
one :func:`encode` call sends a NaN object met once as ``{"f": "nan"}``, one that recurs as
``{"n": [k, {"f": "nan"}]}`` where it is first met and ``{"n": k}`` where it recurs (so too a
``complex`` with a NaN part), and ``math.nan`` itself as ``{"f": "math.nan"}``; :func:`decode`
makes a fresh NaN for each of the first, one for all places of each ``k``, and the decoding
side's own ``math.nan`` for the last, as they are in one file. A ``dict``, ``OrderedDict``, ``set`` or
``frozenset`` that decodes shorter than it was sent is refused (``WireError``): its keys were
distinct on the sending side and are equal here, which no plain value's are (a ``str`` subclass
whose ``__hash__``/``__eq__`` go by identity makes ``{K("a"), K("a")}`` two members in one file,
and one here would pass ``len(f()) == 1``).

Standard library only: both sides run it without site-packages (``-S``).
"""

import _collections
import _thread
import json
import math
import operator
import os
import re
import select
import struct
import sys
import time

__all__ = ["Match", "WireError", "decode", "dict_tag", "encode", "read_frame", "write_frame"]

_NAN = math.nan  # this process's math.nan: the one NaN object a program and its tests share
_INFS = {"inf": math.inf, "-inf": -math.inf}
_TAGS = {tuple: "t", set: "s", frozenset: "fs"}


class WireError(Exception):
    """A frame or value that does not follow the format (or a dead/silent peer)."""


# Python refuses ints of more than 4,300 digits in JSON (a correct 10**5000 could not be sent);
# converting is quadratic, so a cap stays: 100,000 digits take about 0.1 s.
MAX_INT_DIGITS = 100_000


def allow_long_ints():
    """Raise this process's int/str conversion limit to :data:`MAX_INT_DIGITS` (the harness and
    the candidate call it; importing this module changes nothing)."""
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(MAX_INT_DIGITS)


# Subclasses of plain types go as their base type (a Counter as a dict, a namedtuple as a tuple,
# an IntEnum as an int) with the value they store, which is what ``==`` against a plain value
# compares in one file: read through the base type's own C-level methods, never the subclass's
# ``__int__``, ``__str__``, ``__float__``, ``__bytes__``, ``__iter__``, ``keys`` or ``items`` (an int
# subclass whose ``__int__`` says 404 while it holds 5 is not ``== 404`` in one file, and went as
# 404). Containers come as their items, never rebuilt: rebuilding a set or dict would hash the
# items again, through their classes' ``__hash__`` and ``__eq__``. The candidate could send any
# frame it likes, so this grants it nothing; the harness decodes plain types only.
_DICT_ITEMS = dict.items
_DICT_KEYS = dict.keys
_IS = operator.is_
_ODICT = _collections.OrderedDict  # collections.OrderedDict itself (the C one), imported by no one
_ODICT_ITER = _ODICT.__iter__
_COMPLEX_REAL = complex.__dict__["real"].__get__
_COMPLEX_IMAG = complex.__dict__["imag"].__get__
_WHOLE = slice(None)


def _ordered_items(value):
    """An ``OrderedDict``'s entries in its own order (``move_to_end`` changes that order, not the
    dict's), as ``list(od.items())`` gives them in one file. ``WireError`` where its links do not
    match its entries (an entry written or deleted through ``dict.__setitem__`` or
    ``dict.__delitem__``): in one file such a dict iterates short or raises, and ``==`` against the
    ``OrderedDict`` of its entries is False, so no plain value stands for it."""
    items = list(_DICT_ITEMS(value))
    try:
        order = list(_ODICT_ITER(value))
    except Exception:  # noqa: BLE001 -- links that do not match the entries
        raise WireError("an OrderedDict whose order does not match its entries") from None
    if len(order) == len(items) and all(map(_IS, order, _DICT_KEYS(value))):
        return items  # never reordered (the usual case): no sort
    rank = {id(key): i for i, key in enumerate(order)}
    if len(order) != len(items) or len(rank) != len(items) or not all(id(key) in rank for key, _ in items):
        raise WireError("an OrderedDict whose order does not match its entries")
    items.sort(key=lambda item: rank[id(item[0])])
    return items


# (base, read): ``read(value)`` is a plain copy of what an instance of a subclass of ``base``
# stores: the value itself for a scalar, its items (a plain list or tuple) for a container, its
# ``(key, value)`` pairs for a dict (``dict.items``'s view, as a plain dict's are read).
_STORED = (
    (int, int.__int__),  # a copy of the digits for a subclass
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda value: bytes.__getitem__(value, _WHOLE)),
    (complex, lambda value: complex(_COMPLEX_REAL(value), _COMPLEX_IMAG(value))),
    (list, list.copy),  # a plain list of its items
    (tuple, lambda value: tuple.__getitem__(value, _WHOLE)),  # a plain tuple of its items
    (dict, lambda value: _ordered_items(value) if issubclass(type(value), _ODICT) else _DICT_ITEMS(value)),
    (set, lambda value: list(set.__iter__(value))),
    (frozenset, lambda value: list(frozenset.__iter__(value))),
)  # fmt: skip
_CONTAINERS = (list, tuple, dict, set, frozenset)


def dict_tag(kind):
    """The tag the pairs of ``kind``, a subclass of ``dict``, go under: ``"od"`` for an
    ``OrderedDict`` or a subclass of it (decoded as an ``OrderedDict``, whose ``==`` against
    another checks the order, as in one file), ``"d"`` (a plain dict) for any other."""
    return "od" if issubclass(kind, _ODICT) else "d"


def stored(value):
    """``(base, plain)`` for ``value``, an instance of a subclass of a plain type ``base``:
    ``plain`` is what it stores (:data:`_STORED`), read through ``base``'s own methods; ``WireError``
    for any other class. Its class is read with ``type``, never ``isinstance`` (which asks the
    object's ``__class__``)."""
    kind = type(value)
    known = _KINDS.get(id(kind))
    if known is not None and known[0] is kind:
        return known[1], known[2](value)
    for base, read in _STORED:
        if issubclass(kind, base):
            # kept with the class (its id is then never reused): its plain base cannot change,
            # as __bases__ assignment keeps a class's layout
            if len(_KINDS) < 10_000:
                _KINDS[id(kind)] = (kind, base, read)
            return base, read(value)
    raise WireError(f"cannot send a value of type {kind.__name__}")


_KINDS = {}  # id(class) -> (class, its plain base, its reader), for each subclass sent


class Match:
    """A regular-expression match as the harness sees it: the subject and the group spans the
    candidate's ``re.Match`` had, with ``re.Match``'s read-only methods. Like an ``re.Match`` it is
    always true and equal only to itself. MBPP+ (Mbpp/737, 787, 794) returns matches; evalplus
    checks only ``out is not None`` for them."""

    __slots__ = ("string", "pos", "endpos", "regs", "lastindex", "_names")

    def __init__(self, string, pos, endpos, regs, names, lastindex):
        self.string, self.pos, self.endpos = string, pos, endpos
        self.regs, self._names, self.lastindex = regs, names, lastindex

    @property
    def lastgroup(self):
        return next((n for n, i in self._names.items() if i == self.lastindex), None)

    def _index(self, group):
        if type(group) is int and 0 <= group < len(self.regs):
            return group
        if type(group) is str and group in self._names:
            return self._names[group]
        raise IndexError("no such group")

    def span(self, group=0):
        return self.regs[self._index(group)]

    def start(self, group=0):
        return self.span(group)[0]

    def end(self, group=0):
        return self.span(group)[1]

    def _group(self, group, default=None):
        start, end = self.span(group)
        return default if start < 0 else self.string[start:end]

    def group(self, *groups):
        if len(groups) <= 1:
            return self._group(groups[0] if groups else 0)
        return tuple(self._group(g) for g in groups)

    def __getitem__(self, group):
        return self._group(group)

    def groups(self, default=None):
        return tuple(self._group(i, default) for i in range(1, len(self.regs)))

    def groupdict(self, default=None):
        return {name: self._group(i, default) for name, i in self._names.items()}

    def __bool__(self):
        return True

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"<re.Match object; span={self.span()!r}, match={self.group()!r}>"


def _encode_match(value, depth):
    names = sorted(value.re.groupindex.items(), key=lambda item: item[1])
    regs = [list(span) for span in value.regs]
    body = [encode(value.string, depth + 1), value.pos, value.endpos, regs, [list(n) for n in names], value.lastindex]
    return {"m": body}


def _decode_match(body, depth):
    if len(body) != 6:
        raise WireError("bad match")
    string, pos, endpos, regs, names, lastindex = body
    string = decode(string, depth + 1)
    size = len(string) if type(string) in (str, bytes) else -1
    if size < 0 or type(pos) is not int or type(endpos) is not int or not 0 <= pos <= endpos <= size:
        raise WireError("bad match")
    spans = []
    for span in regs if type(regs) is list else ():
        if type(span) is not list or len(span) != 2 or any(type(x) is not int for x in span):
            raise WireError("bad match span")
        if span != [-1, -1] and not 0 <= span[0] <= span[1] <= size:
            raise WireError("bad match span")
        spans.append((span[0], span[1]))
    if not spans or spans[0] == (-1, -1) or type(names) is not list:
        raise WireError("bad match")
    groups = {}
    for item in names:
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str or type(item[1]) is not int:
            raise WireError("bad match group name")
        if not 1 <= item[1] < len(spans):
            raise WireError("bad match group name")
        groups[item[0]] = item[1]
    if lastindex is not None and (type(lastindex) is not int or not 1 <= lastindex < len(spans)):
        raise WireError("bad match")
    return Match(string, pos, endpos, tuple(spans), groups, lastindex)


# The NaNs met by the encode (``sent``) and decode (``got``) call under way in this thread, made
# at the first NaN: kept here, not passed down each call, as a third argument slowed a
# 200,000-item list by a fifth.
_LOCAL = _thread._local()  # threading.local, without importing threading into the candidate


def encode(value, depth=0):
    """``value`` as JSON-ready data; raises ``WireError`` for any type not listed above."""
    saved = getattr(_LOCAL, "sent", None)
    _LOCAL.sent = None
    try:
        return _encode(value, depth)
    finally:
        _LOCAL.sent = saved


def _same_nan(value, frame):
    """``frame`` (a NaN's, or a complex's with a NaN part) where ``value`` is met first in this
    :func:`encode` call; a reference ``{"n": k}`` where it recurs, its first frame then turned
    into ``{"n": [k, frame]}`` in place, so both places decode to one object. The call's NaNs
    map its ``id`` to ``(value, first frame)`` (holding it keeps the ``id`` unused) and ``None`` to
    the last ``k`` given."""
    nans = _LOCAL.sent
    if nans is None:
        nans = _LOCAL.sent = {}
    seen = nans.get(id(value))
    if seen is None:
        nans[id(value)] = (value, frame)
        return frame
    first = seen[1]
    if "n" not in first:
        inner = dict(first)
        first.clear()
        k = nans[None] = nans.get(None, -1) + 1
        first["n"] = [k, inner]
    return {"n": first["n"][0]}


def _encode(value, depth):
    if depth > 200:
        raise WireError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        if value != value:
            return {"f": "math.nan"} if value is _NAN else _same_nan(value, {"f": "nan"})
        return {"f": "inf" if value > 0 else "-inf"}
    if t is list:
        return [_encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [_encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [_encode(v, depth + 1) for v in value]}
    if t is bytes:
        return {"b": value.hex()}
    if t is complex:
        return _encode_complex(value, value)
    if t is re.Match:
        return _encode_match(value, depth)
    base, plain = stored(value)
    if base is float and plain != plain:
        return _same_nan(value, {"f": "nan"})  # the subclass's object is the one that recurs
    if base is complex:
        return _encode_complex(plain, value)
    if base not in _CONTAINERS:
        return _encode(plain, depth + 1)
    if base is dict:
        pairs = [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in plain]
        return {dict_tag(t): pairs}
    items = [_encode(v, depth + 1) for v in plain]
    return items if base is list else {_TAGS[base]: items}


def _encode_complex(plain, value):
    """``plain`` (``value``'s stored complex), its parts sent as floats; with a NaN part, one object
    as a NaN is (:func:`_same_nan`: ``[c, c]`` is one set member, two such complexes two)."""
    real, imag = plain.real, plain.imag
    frame = {"c": [_encode(real, 0), _encode(imag, 0)]}
    return _same_nan(value, frame) if real != real or imag != imag else frame


def decode(data, depth=0):
    """Inverse of :func:`encode`; raises ``WireError`` for anything else."""
    saved = getattr(_LOCAL, "got", None)
    _LOCAL.got = None
    try:
        return _decode(data, depth)
    finally:
        _LOCAL.got = saved


def _decode(data, depth):
    if depth > 200:
        raise WireError("value nested too deeply")
    t = type(data)
    if data is None or t is bool or t is int or t is str or t is float:
        return data
    if t is list:
        return [_decode(v, depth + 1) for v in data]
    if t is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "f" and type(body) is str:
            if body == "nan":
                return float("nan")  # a fresh one: two NaN objects are two set members
            if body == "math.nan":
                return _NAN
            if body in _INFS:
                return _INFS[body]
            raise WireError("bad float")
        if tag == "n":
            return _decode_same_nan(body, depth)
        if tag == "b" and type(body) is str:
            try:
                return bytes.fromhex(body)
            except ValueError as err:
                raise WireError("bad bytes") from err
        if type(body) is not list:
            raise WireError(f"bad {tag!r} value")
        if tag == "t":
            return tuple(_decode(v, depth + 1) for v in body)
        if tag in ("s", "fs"):
            try:
                items = {_decode(v, depth + 1) for v in body}
            except TypeError as err:
                raise WireError("unhashable set element") from err
            if len(items) != len(body):
                raise WireError(_COLLAPSED.format("set members"))
            return items if tag == "s" else frozenset(items)
        if tag == "d" or tag == "od":
            out = {} if tag == "d" else _ODICT()
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("bad dict item")
                key = _decode(pair[0], depth + 1)
                try:
                    out[key] = _decode(pair[1], depth + 1)
                except TypeError as err:
                    raise WireError("unhashable dict key") from err
            if len(out) != len(body):
                raise WireError(_COLLAPSED.format("dict keys"))
            return out
        if tag == "c" and len(body) == 2:
            real, imag = (_decode(x, depth + 1) for x in body)
            if type(real) in (int, float) and type(imag) in (int, float):
                return complex(real, imag)
        if tag == "m":
            return _decode_match(body, depth)
    raise WireError(f"not a plain value: {str(data)[:80]!r}")


def _decode_same_nan(body, depth):
    """``{"n": [k, frame]}`` (the first place of a recurring NaN, or complex with a NaN part: its
    value, kept as ``k``) or ``{"n": k}`` (a later place: the value kept as ``k``), as
    :func:`_same_nan` sends them; nothing else is shared between places."""
    nans = _LOCAL.got
    if nans is None:
        nans = _LOCAL.got = {}
    if type(body) is int and body in nans:
        return nans[body]
    if type(body) is list and len(body) == 2 and type(body[0]) is int and body[0] not in nans:
        value = _decode(body[1], depth + 1)
        if type(value) in (float, complex) and value != value:
            nans[body[0]] = value
            return value
    raise WireError("bad NaN reference")


# keys distinct where they were sent (a class's __hash__/__eq__ of its own) and equal as plain
# values: one here would pass `len(f()) == 1` where the program's own has two
_COLLAPSED = "{} distinct where they were sent are equal as plain values (a __hash__ or __eq__ of their class's)"


_MAX_POLL_MS = 1 << 30


def _ready(fd, event, timeout_s):
    """Whether ``fd`` has ``event`` (or a hang-up or error, which the read or write then reports)
    within ``timeout_s``. ``poll``, not ``select``: the descriptors keep the trainer's numbers, and
    ``select`` refuses any from 1,024 up (a trainer holding 1,500 descriptors failed every call)."""
    poller = select.poll()
    poller.register(fd, event)
    # rounded up: a timeout that rounds to 0 ms would spin until the deadline; capped to poll's C
    # int (the candidate waits for requests 10**7 s ahead), the callers poll again until the deadline
    return bool(poller.poll(min(math.ceil(timeout_s * 1000), _MAX_POLL_MS)))


def write_frame(fd, message, deadline=None):
    """Send ``message`` (JSON-ready) as one frame; with ``deadline`` (monotonic), give up with
    ``WireError`` when the peer stops reading (a full pipe would otherwise block forever)."""
    body = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError("timed out sending to the candidate")
            if not _ready(fd, select.POLLOUT, left):
                continue
            # A writable pipe takes at least PIPE_BUF bytes without blocking.
            n = os.write(fd, view[: select.PIPE_BUF])
        else:
            n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd, n, deadline):
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WireError("timed out waiting for the candidate")
        if not _ready(fd, select.POLLIN, left):
            continue
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise WireError("the candidate closed the channel (it exited or was killed)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd, deadline, max_bytes):
    """Read one frame (JSON data, not yet :func:`decode`-d) before ``deadline`` (monotonic)."""
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if size > max_bytes:
        raise WireError(f"frame of {size} bytes exceeds the limit of {max_bytes}")
    try:
        return json.loads(_read_exact(fd, size, deadline).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as err:
        raise WireError(f"malformed frame: {type(err).__name__} {err}") from err
