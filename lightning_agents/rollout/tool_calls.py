"""Parse the tool calls a model wrote into OpenAI tool calls, in the format its chat template uses.

A model calls tools the way its chat template renders calls in the training data, so the parser
follows the template (:func:`tool_call_style`, from the opener the assistant-label probe finds):

- ``hermes``: ``<tool_call>{"name", "arguments"}</tool_call>`` blocks (Qwen2.5/3, Hermes, QwQ, the
  embedded template);
- ``llama3_json``: the whole reply is ``{"name", "parameters"}`` objects (Llama 3.1-3.3), optionally
  after ``<|python_tag|>`` and separated by ``;``;
- ``mistral``: ``[TOOL_CALLS]`` then a JSON list (Mistral 7B v0.3, Nemo) or ``name[ARGS]{...}``
  (Mistral Small 3.2, Devstral); the engines decode without special tokens, so the forms without
  the markers (``[{"name"...}]``, ``name{...}``) are read too;
- ``deepseek_v3``: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` then a ```` ```json ```` block,
  with or without the marker tokens;
- ``json_after:<marker>``: any other template whose calls are JSON after a marker of its own, e.g.
  Nemotron's ``<TOOLCALL>[{"name", "arguments"}]</TOOLCALL>`` or InternLM2's
  ``<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>``.

Reading only ``<tool_call>`` blocks, a Llama or Mistral agent's calls were taken for its final
answer: every episode ended at its first tool call, silently.
"""

from __future__ import annotations

import json
import re
from typing import Any

from lightning_agents.json_text import reject_constant

__all__ = ["TOOL_CALL_STYLES", "malformed_call", "malformed_call_observation", "parse_tool_calls", "tool_call_style"]

#: The named styles; ``json_after:<marker>`` is the family of the rest.
TOOL_CALL_STYLES = ("hermes", "llama3_json", "mistral", "deepseek_v3")
_JSON_AFTER = "json_after:"
# What may follow the JSON of a json_after call: whitespace and closing tags (</TOOLCALL>, <|action_end|>).
_CLOSERS = re.compile(r"(?:\s|</[^<>]{1,40}>|<\|[^<>|]{1,40}\|>)*\Z")
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"
_DS_CALLS, _DS_CALL, _DS_SEP, _DS_END = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
)
_DS_CALL_RE = re.compile(
    r"(?:" + re.escape(_DS_CALL) + r")?function(?:" + re.escape(_DS_SEP) + r")?([\w.\-]+)\n```json\n(.*?)\n```"
    r"(?:" + re.escape(_DS_END) + r")?",
    re.DOTALL,
)
_NAME_RE = re.compile(r"[A-Za-z_][\w.\-]*")
# What a malformed call leaves in the content, and how to tell the model to write one.
_MALFORMED = {
    "hermes": ("<tool_call>", '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'),
    "llama3_json": ('{"name"', '{"name": ..., "parameters": {...}}'),
    "mistral": (_MISTRAL, '[TOOL_CALLS][{"name": ..., "arguments": {...}}]'),
    "deepseek_v3": (_DS_CALL, _DS_CALL + "function" + _DS_SEP + "name\n```json\n{...}\n```" + _DS_END),
}

# No \s* around the lazy group (it is stripped in Python): whitespace matched by both backtracks
# quadratically, 70 s for a call padded with 100,000 spaces. A block never runs into the next
# <tool_call>: an unterminated call must not swallow a complete one after it.
_CALL_RE = re.compile(r"<tool_call>((?:(?!<tool_call>).)*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)


def tool_call_style(opener: str | None) -> str:
    """The style of a chat template's tool calls, from the text its tool-call turns start with
    (:attr:`~lightning_agents.datamodules.conversations.TemplateLayout.tool_call_opener`);
    ``hermes`` when the template renders no calls or an unknown form (the package's own convention).
    """
    if not opener:
        return "hermes"
    if _MISTRAL in opener:
        return "mistral"
    if "tool▁call" in opener:
        return "deepseek_v3"
    if "<tool_call>" in opener:
        return "hermes"
    bare = opener.replace(_PYTHON_TAG, "").lstrip()
    if bare.startswith("{"):
        return "llama3_json"
    start = min((i for i in (bare.find('[{"name"'), bare.find('{"name"')) if i > 0), default=-1)
    if start > 0 and bare[:start].strip():
        return _JSON_AFTER + bare[:start].strip()
    return "hermes"


def _call(name: str, arguments: Any, call_id: str) -> dict | None:
    """An OpenAI tool call, or ``None`` when the arguments are not a JSON object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, parse_constant=reject_constant) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        # OpenAI tool calls carry an object of arguments; anything else is not a call.
        return None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _call_id(id_prefix: str, k: int, style: str) -> str:
    # Mistral's templates refuse any id but nine alphanumeric characters when the conversation is
    # rendered for the next turn.
    if style == "mistral":
        return (re.sub(r"[^A-Za-z0-9]", "", id_prefix) + f"{k:03d}").rjust(9, "0")[-9:]
    return f"{id_prefix}_{k}"


def parse_tool_calls(text: str, id_prefix: str = "call", style: str = "hermes") -> tuple[str, list[dict]]:
    """Split a completion into its free text and its tool calls.

    Args:
        text: the decoded completion.
        id_prefix: prefix of the generated call ids (``call_0``, ``call_1``, ...).
        style: the chat template's call format, one of :data:`TOOL_CALL_STYLES` or
            ``json_after:<marker>`` (:func:`tool_call_style`).

    Returns:
        ``(content, tool_calls)``: the text outside the calls, stripped, and OpenAI-format calls
        ``{"id", "type": "function", "function": {"name", "arguments" (JSON string)}}``. A call that
        is not valid JSON, has no name or has arguments that are not an object is kept in the content
        rather than guessed at (:func:`malformed_call` then tells it apart from an answer).
    """
    if style not in TOOL_CALL_STYLES and not (style.startswith(_JSON_AFTER) and len(style) > len(_JSON_AFTER)):
        raise ValueError(
            f"unknown tool-call style {style!r}; expected one of {list(TOOL_CALL_STYLES)} or json_after:<marker>"
        )
    text = text or ""
    if style.startswith(_JSON_AFTER):
        return _parse_json_after(text, id_prefix, style[len(_JSON_AFTER) :])
    if style == "llama3_json":
        return _parse_llama3_json(text, id_prefix)
    if style == "mistral":
        return _parse_mistral(text, id_prefix)
    if style == "deepseek_v3":
        return _parse_deepseek_v3(text, id_prefix)
    return _parse_hermes(text, id_prefix)


def malformed_call(content: str, style: str = "hermes") -> bool:
    """The content left after parsing still holds the start of a call: a call the model botched,
    to answer with :func:`malformed_call_observation` rather than to take as its final answer."""
    if style.startswith(_JSON_AFTER):
        return style[len(_JSON_AFTER) :] in content
    marker = _MALFORMED[style][0]
    if style == "llama3_json":
        return content.replace(_PYTHON_TAG, "").lstrip().startswith(marker)
    return marker in content


def malformed_call_observation(style: str = "hermes") -> str:
    """The tool observation answering a malformed call: how calls are written in this style."""
    if style.startswith(_JSON_AFTER):
        return f'error: malformed tool call; write {style[len(_JSON_AFTER) :]}[{{"name": ..., "arguments": {{...}}}}]'
    return f"error: malformed tool call; write {_MALFORMED[style][1]}"


def _objects(text: str, pos: int, separators: str) -> tuple[list[Any], int] | None:
    """JSON values one after another from ``pos`` (separated by whitespace and ``separators``),
    and where they end; ``None`` when one does not parse."""
    decoder = json.JSONDecoder(parse_constant=reject_constant)
    values = []
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] in separators):
            pos += 1
        if pos >= len(text) or text[pos] not in "[{":
            return values, pos
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return None
        values.append(value)


def _named(items: list[Any], id_prefix: str, style: str, key: str = "arguments") -> list[dict] | None:
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"].strip():
            return None
        call = _call(
            item["name"],
            item[key] if key in item else item.get("arguments", item.get("parameters", {})),
            _call_id(id_prefix, len(calls), style),
        )
        if call is None:
            return None
        calls.append(call)
    return calls


def _parse_json_after(text: str, id_prefix: str, marker: str) -> tuple[str, list[dict]]:
    at = text.find(marker)
    if at < 0:
        # A marker made of special tokens is gone from text decoded without them: then only a
        # reply that is nothing but calls counts.
        if not text.lstrip().startswith(('{"name"', '[{"name"')):
            return text.strip(), []
        at, marker = 0, ""
    rest = text[at + len(marker) :]
    found = _objects(rest, 0, ",;")
    if found is None or not found[0] or not _CLOSERS.match(rest, found[1]):
        return text.strip(), []
    items = [item for value in found[0] for item in (value if isinstance(value, list) else [value])]
    calls = _named(items, id_prefix, "json_after")
    return (text[:at].strip(), calls) if calls else (text.strip(), [])


def _parse_llama3_json(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    body = text.replace(_PYTHON_TAG, "").strip()
    if not body.startswith("{"):
        return text.strip(), []
    found = _objects(body, 0, ";,")
    if found is None or found[1] < len(body) or not found[0]:
        return text.strip(), []
    calls = _named(found[0], id_prefix, "llama3_json", key="parameters")
    return ("", calls) if calls else (text.strip(), [])


def _parse_mistral(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    at = text.find(_MISTRAL)
    content, rest = (text[:at], text[at + len(_MISTRAL) :]) if at >= 0 else ("", text)
    rest = rest.strip()
    if at < 0 and not rest.startswith("[{"):
        # Without the marker (decoded without special tokens) only a reply that is nothing but
        # calls counts: a list of objects with names, or `name{...}` pieces.
        calls = _mistral_pieces(rest, id_prefix) if _NAME_RE.match(rest) else None
        return ("", calls) if calls else (text.strip(), [])
    if rest.startswith("["):
        found = _objects(rest, 0, "")
        if found is None or found[1] < len(rest) or len(found[0]) != 1 or not isinstance(found[0][0], list):
            return text.strip(), []
        calls = _named(found[0][0], id_prefix, "mistral")
    else:
        calls = _mistral_pieces(rest, id_prefix)
    return (content.strip(), calls) if calls else (text.strip(), [])


def _mistral_pieces(rest: str, id_prefix: str) -> list[dict] | None:
    """``name[ARGS]{...}`` pieces (``[ARGS]`` and the ``[TOOL_CALLS]`` between them may be gone)."""
    calls, pos = [], 0
    decoder = json.JSONDecoder(parse_constant=reject_constant)
    while pos < len(rest):
        name = _NAME_RE.match(rest, pos)
        if name is None:
            return None
        pos = name.end()
        if rest.startswith(_MISTRAL_ARGS, pos):
            pos += len(_MISTRAL_ARGS)
        try:
            arguments, pos = decoder.raw_decode(rest, pos)
        except (ValueError, RecursionError):
            return None
        call = _call(name.group(0), arguments, _call_id(id_prefix, len(calls), "mistral"))
        if call is None:
            return None
        calls.append(call)
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
        if rest.startswith(_MISTRAL, pos):
            pos += len(_MISTRAL)
    return calls or None


def _parse_deepseek_v3(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    matches = list(_DS_CALL_RE.finditer(text))
    if not matches:
        return text.strip(), []
    calls = []
    for m in matches:
        call = _call(m.group(1), m.group(2), _call_id(id_prefix, len(calls), "deepseek_v3"))
        if call is None:
            return text.strip(), []
        calls.append(call)
    start = text.find(_DS_CALLS)
    content = text[: start if start >= 0 else matches[0].start()]
    return content.strip(), calls


def _parse_hermes(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    calls: list[dict] = []
    kept: list[str] = []
    last = 0
    for match in _CALL_RE.finditer(text or ""):
        kept.append(text[last : match.start()])
        last = match.end()
        try:
            payload = json.loads(match.group(1).strip(), parse_constant=reject_constant)
        except (ValueError, RecursionError):  # also a 4300+ digit number and nesting past the recursion limit
            kept.append(match.group(0))
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"].strip():
            # no name to call (a sampled `"name": ""` too): text, which the turn reports as malformed
            kept.append(match.group(0))
            continue
        # "parameters" is Llama 3.1's name for them; reading it beats calling the tool with nothing
        arguments = payload["arguments"] if "arguments" in payload else payload.get("parameters", {})
        call = _call(payload["name"], arguments, _call_id(id_prefix, len(calls), "hermes"))
        if call is None:
            kept.append(match.group(0))
            continue
        calls.append(call)
    kept.append((text or "")[last:])
    return "".join(kept).strip(), calls
