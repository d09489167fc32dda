"""What every rollout reader shares: its error, and the checks of the fields all formats have.

Parsers raise :class:`_Bad` with the reason only; the loader adds the file and record.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.json_text import JSONTextError, loads_json

__all__ = ["RolloutFormatError"]


class RolloutFormatError(LightningAgentsError, ValueError):
    """A rollout record that cannot be read; the message starts with ``file[index]`` or ``file:line``."""


class _Bad(Exception):
    """Raised inside a parser with the reason only; the caller adds the location."""


class _NotRun(_Bad):
    """A trial the run never played (the harness recorded its own error instead of a trajectory).

    Not an agent failure and not a malformed record: the loader leaves it out whatever
    ``skip_invalid`` says, and counts it, since scoring it 0 would lower the task's pass rate for
    an API quota or a crashed evaluator.
    """


def _first_line(error: Any) -> str:
    """An error a run recorded, short enough for a log line (tracebacks run to pages)."""
    text = str(error).strip()
    return (text.splitlines() or [""])[0][:200]


def _require(obj: dict, key: str, types: type | tuple[type, ...], what: str | None = None) -> Any:
    if key not in obj:
        raise _Bad(f"missing field {what or key!r}")
    value = obj[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = "/".join(t.__name__ for t in allowed)
        raise _Bad(f"field {what or key!r} must be {names}, got {type(value).__name__}")
    return value


def _reward(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        raise _Bad(f"field {what!r} must be a number, got {type(value).__name__} {value!r:.40}")
    return float(value)


def _task_id(value: Any, what: str = "task_id") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise _Bad(f"field {what!r} must be a non-empty string or integer, got {value!r:.40}")
    return str(value)


def _trial(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"field 'trial' must be an integer, got {value!r:.40}")
    return value


def _parse_arguments(raw: Any, what: Callable[[], str]) -> Any:
    """Arguments as a dict; a JSON string is parsed and must hold an object.

    ``what()`` names the field and is only called for an error message: formatting every call's
    location up front took a fifth of the reading time. A string that is not JSON but a Python
    dict literal (``str(dict)``: single quotes, ``True``/``None``) is read too (see
    :func:`_argument_object`).
    """
    return _argument_object(raw, what)[0]


def _argument_object(raw: Any, what: Callable[[], str]) -> tuple[dict, bool]:
    """:func:`_parse_arguments`, and whether the text was a Python dict literal instead of JSON.

    Some harnesses log a call's arguments with ``str(dict)`` (``{'order_id': '#W1', 'dry': True}``),
    which no JSON reader takes. When JSON fails, such a text is read with :func:`ast.literal_eval`
    (literals only, nothing is evaluated) and kept only if it is a dict of what JSON can hold and
    the text is exactly what ``str``/``repr`` writes for it (see :func:`_python_dict_literal`), so
    that every reader downstream sees the arguments JSON would have given.
    """
    if raw is None:
        return {}, False
    literal = False
    if isinstance(raw, str):
        if not raw.strip():
            return {}, False
        try:
            raw = loads_json(raw)
        except JSONTextError as exc:
            value, why = _python_dict_literal(raw)
            if value is None:
                raise _Bad(
                    f"{what()} is not valid JSON ({exc}) nor a Python dict literal ({why}); skip_invalid "
                    "(curate --skip_invalid) skips such records"
                ) from None
            raw, literal = value, True
    if not isinstance(raw, dict):
        raise _Bad(f"{what()} must be a JSON object, got {type(raw).__name__}")
    return raw, literal


# The longest argument text read as a Python literal. ast.literal_eval builds a syntax tree first:
# a 4 MB literal list of small ints took 1.9 GB and 12 s (the same list as JSON: 45 MB, 0.6 s).
# Real str(dict) arguments are a few hundred characters; one holding a file's content can be more.
PYTHON_LITERAL_MAX_CHARS = 1 << 18


def _python_dict_literal(text: str) -> tuple[dict | None, str]:
    """``(the dict, "")`` when ``text`` is what Python's ``str(dict)`` writes for a dict of JSON
    values (tuples read as lists, as Hermes' text calls are), else ``(None, why not)``.

    :func:`ast.literal_eval` reads more than ``str(dict)`` writes, and reads some of it as something
    else: ``"C:\\temp\\x41"`` (a JSON-looking text with a Windows path) as ``C:<tab>empA``, octal
    escapes, ``0x10``, ``'ab' 'cd'``, trailing commas, duplicate keys, and a model's own invalid JSON
    (``{"refund": True}``, which the tool would have rejected). A text is kept only when
    ``repr`` of the value it reads as gives the text back, so what is kept is what was logged.
    """
    import ast

    from lightning_agents.datamodules.text_tool_calls import _json_value, _Unparsed

    text = text.strip()
    if not text.startswith("{"):
        return None, "it does not start with '{'"  # spare the parser a long text that cannot be one
    if len(text) > PYTHON_LITERAL_MAX_CHARS:
        return None, f"{len(text):,} characters, over the {PYTHON_LITERAL_MAX_CHARS:,} read as a Python literal"
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        # literal_eval names what is not a literal by its node object ("<ast.Call object at 0x...>").
        node = re.search(r"<ast\.(\w+) object", str(exc))
        if node:
            return None, f"it holds a {node.group(1)} expression, not a literal"
        return None, f"{type(exc).__name__}: {str(exc)[:80]}" if str(exc) else type(exc).__name__
    if not isinstance(value, dict):
        return None, f"a {type(value).__name__}, not a dict"
    try:
        converted = _json_value(value)
    except _Unparsed as exc:
        return None, f"it {exc}"
    written = repr(value)
    if written != text:
        at = next((i for i, (a, b) in enumerate(zip(written, text)) if a != b), min(len(written), len(text)))

        def near(s: str) -> str:
            return ("..." if at > 12 else "") + s[max(0, at - 12) : at + 18] + ("..." if len(s) > at + 18 else "")

        return None, (
            f"not what str(dict) writes: Python reads it as a value that str(dict) writes {near(written)} where "
            f"the text has {near(text)}, so what it says is not certain"
        )
    return converted, ""
