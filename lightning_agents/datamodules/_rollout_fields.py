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
    which no JSON reader takes. Such a text is read with :func:`ast.literal_eval` (literals only,
    nothing is evaluated) when JSON fails, and kept only if it is a dict of what JSON can hold, so
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


def _python_dict_literal(text: str) -> tuple[dict | None, str]:
    """``(the dict, "")`` when ``text`` is a Python dict literal of JSON values (tuples read as
    lists, as Hermes' text calls are), else ``(None, why not)``."""
    import ast

    from lightning_agents.datamodules.text_tool_calls import _json_value, _Unparsed

    if not text.lstrip().startswith("{"):
        return None, "it does not start with '{'"  # spare the parser a long text that cannot be one
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        # literal_eval names what is not a literal by its node object ("<ast.Call object at 0x...>").
        node = re.search(r"<ast\.(\w+) object", str(exc))
        if node:
            return None, f"it holds a {node.group(1)} expression, not a literal"
        return None, f"{type(exc).__name__}: {str(exc)[:80]}" if str(exc) else type(exc).__name__
    if not isinstance(value, dict):
        return None, f"a {type(value).__name__}, not a dict"
    try:
        return _json_value(value), ""
    except _Unparsed as exc:
        return None, f"it {exc}"
