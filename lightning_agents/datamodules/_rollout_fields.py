"""What every rollout reader shares: its error, and the checks of the fields all formats have.

Parsers raise :class:`_Bad` with the reason only; the loader adds the file and record.
"""

from __future__ import annotations

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
    location up front took a fifth of the reading time.
    """
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = loads_json(raw)
        except JSONTextError as exc:
            raise _Bad(f"{what()} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise _Bad(f"{what()} must be a JSON object, got {type(raw).__name__}")
    return raw
