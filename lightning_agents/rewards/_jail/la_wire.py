"""Plain-data wire format between the trusted test harness and the sandboxed candidate.

Only built-in value types cross: ``None``, ``bool``, ``int``, ``float`` (including ``inf``/``nan``),
``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set`` and ``frozenset``, nested.
:func:`decode` builds nothing else, so no object of the candidate's making (say, one whose ``__eq__``
is always true) can reach the harness. Frames are a 4-byte big-endian length and a JSON body.

Standard library only: both sides run it without site-packages (``-S``).
"""

import json
import math
import os
import select
import struct
import sys
import time

__all__ = ["WireError", "decode", "encode", "read_frame", "write_frame"]

_FLOAT_TAGS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


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
# an IntEnum as an int), which is what ``==`` against a plain value compares anyway. The candidate
# could send any frame it likes, so this grants it nothing; the harness decodes plain types only.
_BASES = (int, float, str, bytes, list, tuple, dict, frozenset, set, complex)


def encode(value, depth=0):
    """``value`` as JSON-ready data; raises ``WireError`` for any type not listed above."""
    if depth > 200:
        raise WireError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        return {"f": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [encode(v, depth + 1) for v in value]}
    if t is bytes:
        return {"b": value.hex()}
    if t is complex:
        return {"c": [encode(value.real), encode(value.imag)]}
    for base in _BASES:
        if isinstance(value, base):
            return encode(base(value), depth + 1)
    raise WireError(f"cannot send a value of type {t.__name__}")


def decode(data, depth=0):
    """Inverse of :func:`encode`; raises ``WireError`` for anything else."""
    if depth > 200:
        raise WireError("value nested too deeply")
    t = type(data)
    if data is None or t is bool or t is int or t is str or t is float:
        return data
    if t is list:
        return [decode(v, depth + 1) for v in data]
    if t is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "f" and body in _FLOAT_TAGS:
            return _FLOAT_TAGS[body]
        if tag == "b" and type(body) is str:
            try:
                return bytes.fromhex(body)
            except ValueError as err:
                raise WireError("bad bytes") from err
        if type(body) is not list:
            raise WireError(f"bad {tag!r} value")
        if tag == "t":
            return tuple(decode(v, depth + 1) for v in body)
        if tag in ("s", "fs"):
            try:
                items = {decode(v, depth + 1) for v in body}
            except TypeError as err:
                raise WireError("unhashable set element") from err
            return items if tag == "s" else frozenset(items)
        if tag == "d":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("bad dict item")
                try:
                    out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
                except TypeError as err:
                    raise WireError("unhashable dict key") from err
            return out
        if tag == "c" and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
    raise WireError(f"not a plain value: {str(data)[:80]!r}")


def write_frame(fd, message, deadline=None):
    """Send ``message`` (JSON-ready) as one frame; with ``deadline`` (monotonic), give up with
    ``WireError`` when the peer stops reading (a full pipe would otherwise block forever)."""
    body = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise WireError("timed out sending to the candidate")
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
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
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
