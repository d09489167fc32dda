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


# What is read as a Python literal. ast.literal_eval builds a syntax tree first, and its cost is in
# the tree's nodes, not the text's characters: a 4 MB literal list of small ints (2.7 million
# tokens) took 1.9 GB and 12 s, where a 322K-character str(dict) of a file-writing call is a few
# tokens around one long string. So the tokens outside strings (each string, name, number and
# punctuation mark; a syntax node takes at least one) are capped, and the characters only loosely.
PYTHON_LITERAL_MAX_TOKENS = 100_000
PYTHON_LITERAL_MAX_CHARS = 1 << 24

# One token outside strings, or a whole string literal as the tokenizer reads one: with any prefix
# (r, b, u, f; matched from a word's start, so a long word is not rescanned from each of its
# characters), a quote, then anything but that quote, a backslash or a line end, or a backslash
# and any character. A line end outside strings is a token too, to be refused.
_TOKEN = re.compile(
    r"""(?P<string>(?<!\w)\w*(?:'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*'|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"))"""
    r"|\w+|[^\w \t\r\f\v]"
)


def _literal_tokens(text: str, limit: int) -> tuple[int, str]:
    """``(tokens, why not)``: the tokens of ``text`` (each string, name, number and punctuation
    mark: at least the syntax nodes :func:`ast.literal_eval` would build), counted without
    parsing and only up to ``limit + 1``, so a long text costs no more than one at the limit;
    ``why not`` where the text holds what ``str(dict)`` of JSON values never writes and would hide
    nodes from the count (a prefixed string: ``f'{...}'``, whose braces Python parses; a comment;
    a line break or backslash outside strings)."""
    tokens = 0
    for tokens, match in enumerate(_TOKEN.finditer(text), start=1):
        token = match.group()
        if match.lastgroup == "string":
            if token[0] not in "'\"":
                return (
                    tokens,
                    "it holds a prefixed string (b'', f'', r'', u''), which str(dict) of JSON values does not write",
                )
        elif token in ("#", "\n", "\\"):
            return (
                tokens,
                "it holds a comment, line break or backslash outside its strings, which str(dict) does not write",
            )
        if tokens > limit:
            break
    return tokens, ""


# An escape repr writes for a character it calls unprintable, after an even run of backslashes
# (``\\u2603`` is a backslash and the text "u2603").
_CHAR_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def _unify_new_characters(text: str) -> str:
    """``text`` with every escape of a character Unicode added after 3.2 written as the character.

    ``repr`` escapes a character its Python's Unicode database calls unprintable, and an
    unassigned one is: CPython 3.8 writes U+1FAE0 as ``\\U0001fae0`` where 3.10+ writes the emoji,
    and 3.12+ writes U+1FAE8 where 3.11 escapes it. So whether ``str(dict)`` escaped such a
    character says which Python wrote it, not what it says. Characters Unicode 3.2 already had
    (every Python 3 reads them alike) keep their escapes: ``'C:\\u00e9'`` is a Windows path, not
    ``'C:é'``.
    """
    import unicodedata

    if "\\" not in text:
        return text

    def char(match: re.Match) -> str:
        code = int(match.group(2)[1:], 16)
        if code < 0xA0 or code > 0x10FFFF or unicodedata.ucd_3_2_0.category(chr(code)) != "Cn":
            return match.group()
        return match.group(1) + chr(code)

    return _CHAR_ESCAPE.sub(char, text)


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
    tokens, why = _literal_tokens(text, PYTHON_LITERAL_MAX_TOKENS)
    if why:
        return None, why
    if tokens > PYTHON_LITERAL_MAX_TOKENS:
        return None, f"over {PYTHON_LITERAL_MAX_TOKENS:,} tokens, the most read as a Python literal"
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
        # Another Python's Unicode database may have escaped (or not) a character added since 3.2.
        written, text = _unify_new_characters(written), _unify_new_characters(text)
    if written != text:
        at = next((i for i, (a, b) in enumerate(zip(written, text)) if a != b), min(len(written), len(text)))

        def near(s: str) -> str:
            return ("..." if at > 12 else "") + s[max(0, at - 12) : at + 18] + ("..." if len(s) > at + 18 else "")

        return None, (
            f"not what str(dict) writes: Python reads it as a value that str(dict) writes {near(written)} where "
            f"the text has {near(text)}, so what it says is not certain"
        )
    return converted, ""
