"""``json.loads`` for text that models and files hand us, with one exception for every way it fails.

``json.loads`` raises ``JSONDecodeError`` on malformed text, but also a plain ``ValueError`` on an
integer of more than 4,300 digits (Python's int limit) and ``RecursionError`` on deep nesting. A
handler that caught only the first let a model's reply, or one line of a rollout file, end a
rollout or a whole curation run. Pure Python, no imports from the rest of the package.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JSONTextError", "json_error_text", "loads_json", "reject_constant"]


class JSONTextError(ValueError):
    """The text is not JSON that can be read; the message says why.

    Args:
        reason: what is wrong (``json``'s own message for a syntax error, e.g. ``Extra data``).
        lineno: line of a syntax error in the text (``None`` for other failures); one-line text
            names only the column, so a caller that prefixes its own file line is not contradicted.
        colno: column of a syntax error.
    """

    def __init__(self, reason: str, lineno: int | None = None, colno: int | None = None) -> None:
        super().__init__(reason if lineno is None else json_error_text(reason, None if lineno == 1 else lineno, colno))
        self.reason, self.lineno, self.colno = reason, lineno, colno


def json_error_text(reason: str, lineno: int | None, colno: int | None) -> str:
    """``reason`` with where it happened: ``Expecting value at line 3 column 7``. ``json``'s own
    reasons may end in "at" ("Unterminated string starting at"), which is not said twice."""
    where = " ".join(part for part in (f"line {lineno}" if lineno else "", f"column {colno}" if colno else "") if part)
    if not where:
        return reason
    return f"{reason} {where}" if reason.endswith(" at") else f"{reason} at {where}"


def loads_json(text: str, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)``, raising :class:`JSONTextError` for every failure to parse.

    Args:
        text: the JSON text.
        kwargs: passed to :func:`json.loads` (``parse_constant``, ``parse_float``, ...); an error
            a hook raises as ``ValueError`` becomes a :class:`JSONTextError` too.
    """
    if isinstance(text, str):
        # a line read from a JSONL file keeps its newline: JSON ignores trailing whitespace, but a
        # line cut short would be reported "at line 2 column 1", contradicting the caller's file line
        text = text.rstrip("\r\n")
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError as exc:
        raise JSONTextError(exc.msg, exc.lineno, exc.colno) from None
    except RecursionError:
        raise JSONTextError("nested too deeply") from None
    except ValueError as exc:  # an integer past Python's digit limit, or a hook that refused a value
        raise JSONTextError(str(exc)) from None


def reject_constant(name: str) -> None:
    """A ``parse_constant`` hook that refuses ``NaN``, ``Infinity`` and ``-Infinity``: Python's
    ``json`` reads them, but they are not JSON, and ``json.dumps`` would pass them on as such."""
    raise ValueError(f"{name} is not JSON")
