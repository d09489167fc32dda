"""Validation and assistant-only tokenization of OpenAI-format conversations (no Lightning here).

A conversation is ``{"messages": [...], "tools": [...]?}`` or a bare list of messages. Messages
follow the OpenAI chat format: ``role`` in system/user/assistant/tool, assistant ``tool_calls``
with ``function.arguments`` as a dict or a JSON string, tool messages with ``tool_call_id``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lightning_agents.content_parts import (
    PROMPT_PARTS_JOIN,
    TEXT_PARTS_KEY,
    ContentPartError,
    content_text,
    prompt_content,
    text_parts,
)
from lightning_agents.datamodules.text_tool_calls import structure_text_calls
from lightning_agents.errors import LightningAgentsError
from lightning_agents.json_text import JSONTextError, loads_json
from lightning_agents.template_clock import fixed_template_clock, render_chat_template

__all__ = [
    "IGNORE_INDEX",
    "LEADING_ASSISTANT",
    "NOTE_CALL_IDS_NAMED",
    "NOTE_CALL_IDS_REWRITTEN",
    "NOTE_CALL_IDS_UNIQUE",
    "NOTE_LEADING_ASSISTANT_DROPPED",
    "NOTE_PROMPT_UNLIKE_TURN",
    "NOTE_REASONING_CONTEXT",
    "NOTE_SYSTEM_INTO_FIRST_USER",
    "UNRENDERED_SYSTEM_PROMPT",
    "ChatTemplateError",
    "ConversationError",
    "TemplateLayout",
    "assistant_spans",
    "has_generation_markers",
    "normalize_conversation",
    "render_conversation",
    "renders_tool_use",
    "template_layout",
    "tokenize_conversation",
    "tokenize_conversations",
    "tokenize_many",
    "turn_end_token_ids",
    "with_reasoning_keys",
]

IGNORE_INDEX = -100
logger = logging.getLogger(__name__)
_ROLES = {"system", "user", "assistant", "tool"}


class ConversationError(LightningAgentsError, ValueError):
    """A conversation that cannot be used for training; the message says what is wrong."""


# ShareGPT ``from`` values and the OpenAI role each stands for: TRL's ``maybe_convert_to_chatml`` maps
# human/gpt/system; axolotl's sharegpt roles add user/assistant/tool; the original ShareGPT dump has
# chatgpt/bing/bard replies; LLaMA-Factory's (glaive) tool data has function_call/observation.
_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
    "ipython": "tool",
    "function_call": "assistant",
}
#: The names chat templates read an assistant's reasoning from: ``reasoning_content`` (Qwen3, GLM,
#: DeepSeek, Kimi-K2-Thinking, MiniMax-M2), ``thinking`` (gpt-oss's analysis channel, LFM2.5) and
#: ``reasoning`` (Solar-Open's ``<|think|>`` message; Mistral's and Gemma 4's read it beside
#: ``reasoning_content``). The first is the name normalized messages keep it under.
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


def _reasoning_of(message: dict) -> str:
    """An assistant message's reasoning under whichever of :data:`_REASONING_KEYS` holds it, stripped
    (``""`` for none): messages handed over without :func:`normalize_conversation` (a rollout's, with
    Solar-Open's ``reasoning``) are located like normalized ones."""
    for key in _REASONING_KEYS:
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def with_reasoning_keys(messages: list) -> list:
    """The messages with each one's reasoning under all three names templates read it from
    (``reasoning_content``, ``thinking``, ``reasoning``), for rendering with ``apply_chat_template``.

    Normalized messages keep the reasoning only as ``reasoning_content``; transformers fills in
    ``thinking`` (the version installed here does; its helper is missing from older ones) but never
    ``reasoning``, the only name Solar-Open's template reads, so its reasoning turns were refused
    ("does not render this turn's reasoning_content"). No real template renders the reasoning twice
    when given all three (each reads one, or takes the first it finds; checked on 114 templates, see
    the README's "Data for SFT"). The reasoning is the first non-blank one, as
    :func:`normalize_conversation` keeps it; a name holding other non-blank text keeps it. The list,
    and messages without reasoning, are returned as they are; the others are copied.

    Args:
        messages: the conversation's messages (dicts; anything else is passed through).
    """
    out = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        reasoning = _reasoning_of(message)
        missing = [k for k in _REASONING_KEYS if not (isinstance(message.get(k), str) and message[k].strip())]
        if not reasoning or not missing:
            continue
        if out is None:
            out = list(messages)
        # The text as given (unstripped): the labels find it stripped inside the rendered turn.
        text = next(message[k] for k in _REASONING_KEYS if k not in missing)
        out[i] = {**message, **dict.fromkeys(missing, text)}
    return messages if out is None else out


def normalize_conversation(
    obj: Any,
    parse_text_tool_calls: bool = True,
    text_calls_kept: list[tuple[int, str]] | None = None,
    as_written: list[tuple[list[dict], list[dict] | None]] | None = None,
    *,
    struct_columns: bool = False,
) -> tuple[list[dict], list[dict] | None]:
    """Check a conversation and return ``(messages, tools)`` in the OpenAI chat format.

    Accepted shapes (see the README's "Data for SFT"):

    * ``{"messages": [...], "tools": [...]}`` or a bare list of messages (OpenAI chat format);
    * ShareGPT ``{"conversations": [{"from": ..., "value": ...}], "system": ..., "tools": ...}``, the
      roles mapped by ``_SHAREGPT_ROLES``; a ``function_call`` turn (LLaMA-Factory's glaive data) must be
      a JSON ``{"name", "arguments"}`` object (or a list of them) and becomes an assistant tool call;
      tool calls written inside assistant text become tool calls too (see ``parse_text_tool_calls``);
    * xLAM / APIGen ``{"query", "answers", "tools"}`` (``answers`` a list of ``{"name", "arguments"}``):
      the query as the user message, the answers as one assistant message's (parallel) tool calls;
    * Llama-Nemotron post-training ``{"input": [messages], "output", "system_prompt"}``: the output as
      the last assistant message, the system prompt ("detailed thinking on/off") first;
    * OpenAI's legacy function calling (also Qwen-Agent's): an assistant ``function_call`` becomes a
      tool call, ``function`` messages ``tool`` messages and a top-level ``functions`` the tools;
      LLaMA-Factory's ``function_call`` / ``observation`` roles in ``messages`` are read the same way;
    * ``tools`` and ``messages`` may be JSON text (Parquet/CSV columns); bare function schemas are
      wrapped as ``{"type": "function", "function": ...}``. Parquet/Arrow struct columns hold every
      row's keys, filled with ``null`` where a row has none (see ``struct_columns``).

    Per message: ``content`` is a string, ``None`` or a list of OpenAI text parts (joined; image and
    other parts are refused); ``weight`` (OpenAI fine-tuning) is 0 or 1, and an assistant message with
    weight 0 is context only (no labels); assistant ``reasoning_content`` (or ``thinking``/``reasoning``)
    is kept as ``reasoning_content``, and rendered under all three names so that each template finds it
    under the one it reads (Solar-Open ``reasoning``, gpt-oss ``thinking``). Tool-call arguments given as JSON
    strings are parsed so the same call renders identically whichever form a dataset used.

    Args:
        obj: the record.
        parse_text_tool_calls: turn tool calls that ShareGPT assistant turns write as text into
            OpenAI ``tool_calls``, so every chat template renders them in its own syntax (and the
            model learns the syntax its deployment parses): Hermes ``<tool_call>`` blocks holding JSON
            or a Python dict, and ToolACE ``[func(a=1), other(b="x")]`` lists of calls to the
            conversation's tools with literal arguments; the tool turns that answer them become
            ``tool`` messages linked to the calls (Hermes' ``<tool_response>`` wrapper removed), and
            a tool list written into the system prompt (Hermes ``<tools>``, ToolACE's JSON list)
            becomes the conversation's ``tools``, taken out of the prompt with the instructions on
            how to write calls that follow it. All or nothing per conversation: if any of it does
            not parse cleanly, the conversation stays exactly as written. ``False``: calls written as
            text are always trained as text.
        text_calls_kept: a list that receives ``(turn index, reason)`` for each ShareGPT assistant
            turn that writes tool calls kept as text because something in its conversation did not
            parse (the caller reports them).
        as_written: a list that receives ``(messages, tools)`` of the conversation normalized
            without turning text calls into tool calls, when doing so changed it (the fallback for
            a chat template that cannot render the structured turns).
        struct_columns: the record is a row of a Parquet/Arrow table (a ``datasets`` dataset), whose
            struct columns give every row all keys any row has, ``null`` where it has none. Then the
            ``null`` entries of ``tools`` schemas are dropped, and so are ``null`` call arguments
            unless the called tool's schema for that parameter allows ``null`` (all of them when the
            tool is not listed); fields stored as JSON text keep their nulls. ``False`` (JSON, JSONL,
            CSV): every ``null`` is data and is kept (``"default": null``, an explicit ``null`` argument).

    Raises:
        ConversationError: naming the message index and field at fault.
    """
    # Whether the calls' arguments come from a struct column (nulls filled in), not from JSON text.
    filled = False
    if isinstance(obj, dict):
        origin = None
        if "messages" in obj:
            messages = _json_field(obj["messages"], "messages")
            filled = struct_columns and not isinstance(obj["messages"], str)
        elif "conversations" in obj:  # ShareGPT calls are JSON text in `value`
            messages, origin = _from_sharegpt(_json_field(obj["conversations"], "conversations"), obj.get("system"))
        elif "query" in obj and "answers" in obj:
            messages = _from_xlam(obj)
            filled = struct_columns and not isinstance(obj["answers"], str)
        elif "output" in obj and _is_message_list(obj.get("input")):
            messages = _from_input_output(obj)
            filled = struct_columns and not isinstance(obj["input"], str)
        else:
            raise ConversationError(
                f"no 'messages' field (nor ShareGPT 'conversations', xLAM 'query' + 'answers', or an 'input' "
                f"message list + 'output'); the record has {sorted(obj)[:10]}: convert it to "
                '{"messages": [...], "tools": [...]} (see the README\'s "Data for SFT")'
            )
        # OpenAI's legacy function calling (and Qwen-Agent) lists the schemas as `functions`.
        raw_tools = obj["tools"] if obj.get("tools") is not None else obj.get("functions")
        # A struct column's nulls are the other rows' keys; a JSON-text column's are as written.
        tools = _normalize_tools(raw_tools, struct_columns and not isinstance(raw_tools, str))
        if origin is not None and parse_text_tool_calls:
            structured, tools, kept = structure_text_calls(messages, origin, tools)
            tools = _normalize_tools(tools)
            if text_calls_kept is not None:
                text_calls_kept.extend(kept)
            if structured is not messages and as_written is not None:
                as_written.append(normalize_conversation(obj, False, struct_columns=struct_columns))
            messages = structured
    elif isinstance(obj, list):
        messages, tools = obj, None
    else:
        raise ConversationError(f"expected an object with 'messages' or a list of messages, got {type(obj).__name__}")
    if not isinstance(messages, list) or not messages:
        raise ConversationError("'messages' must be a non-empty list")
    # Only a row read from a Parquet/Arrow struct column can have other rows' keys filled in as nulls.
    schemas = _parameter_schemas(tools) if filled else None
    out = []
    has_assistant = has_weighted = False
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ConversationError(f"message {i} is a {type(message).__name__}, not an object")
        message = _modern_message(copy.deepcopy(message), i)
        role = message.get("role")
        if role not in _ROLES:
            raise ConversationError(f"message {i} has role {role!r}; expected one of {sorted(_ROLES)}")
        parts = message.get("content")
        message["content"] = _text_content(parts, i)
        message.pop(TEXT_PARTS_KEY, None)
        if isinstance(parts, list) and role != "tool":
            # Joined here with a newline, as vLLM joins them for most templates; tokenization joins
            # them again as the template in use does (content_parts.prompt_content). A single part
            # too: a template that trims each part it is given (Llama 4) reads it trimmed served
            # and in rollouts, so SFT must hand it over as a part, not as the string.
            message[TEXT_PARTS_KEY] = text_parts(parts)
        weight = _weight(message, i)
        if role == "assistant":
            _normalize_reasoning(message, i)
            calls_filled = schemas is not None and not isinstance(message.get("tool_calls"), str)
            if isinstance(message.get("tool_calls"), str):  # a JSON-text column; "" for none
                message["tool_calls"] = _json_field(message["tool_calls"], f"message {i} tool_calls") or None
            if message.get("tool_calls") is not None and not isinstance(message["tool_calls"], list):
                raise ConversationError(f"message {i} tool_calls must be a list")
            for j, call in enumerate(message.get("tool_calls") or []):
                fn = call.get("function", call) if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise ConversationError(f"message {i} tool_calls[{j}] has no function name")
                args = fn.get("arguments", {})
                if calls_filled and isinstance(args, dict):
                    args = _without_filled_nulls(args, schemas.get(fn["name"]))
                if isinstance(args, str):
                    try:
                        args = loads_json(args) if args.strip() else {}
                    except JSONTextError as exc:
                        raise ConversationError(
                            f"message {i} tool_calls[{j}].function.arguments is not valid JSON: {exc}"
                        ) from None
                if not isinstance(args, dict):
                    raise ConversationError(f"message {i} tool_calls[{j}].function.arguments must be an object")
                fn["arguments"] = args
            if not message["content"] and not message.get("tool_calls"):
                raise ConversationError(f"message {i} is an assistant message with neither content nor tool_calls")
            if weight == 0:
                message["weight"] = 0
            else:
                has_assistant = True
        elif weight == 1:
            raise ConversationError(
                f"message {i} is a {role} message with weight 1; only assistant messages can be trained on "
                "(weight applies to assistant messages)"
            )
        has_weighted |= weight == 0
        out.append(message)
    if not has_assistant:
        if has_weighted and any(m["role"] == "assistant" for m in out):
            raise ConversationError("no assistant message to learn from: every assistant message has weight 0")
        raise ConversationError("no assistant message to learn from")
    return out, tools


def _json_field(value: Any, name: str) -> Any:
    """A field that a Parquet or CSV column may hold as JSON text (a list or object), decoded."""
    if not isinstance(value, str) or value.lstrip()[:1] not in ("[", "{"):
        return value
    try:
        return loads_json(value)
    except JSONTextError as exc:
        raise ConversationError(f"'{name}' is a string that is not valid JSON: {exc}") from None


def _normalize_tools(tools: Any, filled: bool = False) -> list[dict] | None:
    """The tool list as OpenAI ``{"type": "function", "function": ...}`` schemas; ``filled``: read
    from a Parquet/Arrow struct column, so its ``null`` entries are dropped (see :func:`_without_nulls`)."""
    tools = _json_field(tools, "tools")
    if tools is None or (isinstance(tools, str) and not tools.strip()):
        return None
    if not isinstance(tools, list):
        raise ConversationError("'tools' must be a list")
    if not tools:
        return None
    out = []
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ConversationError(f"tools[{k}] is a {type(tool).__name__}, not an object")
        if filled:
            tool = _without_nulls(tool)
        if "function" not in tool and isinstance(tool.get("name"), str):
            tool = {"type": "function", "function": tool}  # a bare function schema (glaive, xLAM)
        out.append(tool)
    return out


def _without_nulls(value: Any) -> Any:
    """A tool schema read from a Parquet/Arrow struct column without its ``null`` entries: such a
    column is one struct holding every key any row has, so each schema read back carries the other
    rows' parameters as ``"city": null``. A real ``"default": null`` is lost with them (the two
    cannot be told apart there); JSON and JSONL schemas are never passed here."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _parameter_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """Each listed tool's parameter schemas by name: its JSON Schema ``properties``, or for
    xLAM-style ``parameters`` (``{"name": {"type": ..., "description": ...}}``) the keys holding a schema."""
    schemas = {}
    for tool in tools or []:
        fn = tool.get("function")
        params = fn.get("parameters") if isinstance(fn, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(params, dict):
            continue
        properties = params.get("properties") if isinstance(params.get("properties"), dict) else params
        schemas[fn["name"]] = {k: v for k, v in properties.items() if isinstance(v, dict)}
    return schemas


def _allows_null(schema: Any) -> bool:
    """Whether a JSON Schema accepts ``null``: ``"type": "null"`` (alone or in a list), a ``null``
    branch of ``anyOf``/``oneOf``, OpenAPI's ``nullable``, or ``null`` among its ``enum`` values."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind) or schema.get("nullable") is True:
        return True
    if isinstance(schema.get("enum"), list) and None in schema["enum"]:
        return True
    return any(_allows_null(branch) for key in ("anyOf", "oneOf") for branch in schema.get(key) or [])


def _without_filled_nulls(arguments: dict, parameters: dict[str, dict] | None) -> dict:
    """Call arguments read from a Parquet/Arrow struct column without the ``null`` ones the column
    filled in: a struct holds every argument any row's call to any tool passed, so a call that left
    out an optional parameter, or another tool's, reads back with it as ``null``. Such a ``null`` is
    told from a written one only by the schema: a ``null`` is kept where the called tool's schema
    for that parameter allows it, and dropped everywhere else (always, for a tool not listed).
    Objects nested in the arguments are struct fields too, and are treated the same way."""
    out = {}
    for key, value in arguments.items():
        schema = (parameters or {}).get(key)
        if value is not None or _allows_null(schema):
            out[key] = _without_nested_filled_nulls(value, schema)
    return out


def _without_nested_filled_nulls(value: Any, schema: Any) -> Any:
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict):
        properties = schema.get("properties")
        return _without_filled_nulls(value, properties if isinstance(properties, dict) else None)
    if isinstance(value, list):  # a list's own null items are data: Arrow fills struct fields only
        return [_without_nested_filled_nulls(v, schema.get("items")) for v in value]
    return value


# Roles of older chat formats: OpenAI's legacy function calling (and Qwen-Agent) answers a call
# with a `function` message; LLaMA-Factory's `messages` rows use its ShareGPT tags as roles.
_LEGACY_ROLES = {"function": "tool", "observation": "tool", "function_call": "assistant"}


def _modern_message(message: Any, i: int) -> Any:
    """A message of an older format in the current one: an assistant ``function_call`` object
    (OpenAI's legacy form, Qwen-Agent) or a LLaMA-Factory ``function_call`` message (JSON text) as
    ``tool_calls``; ``function`` and ``observation`` messages as ``tool`` messages."""
    if not isinstance(message, dict):
        return message
    role = message.get("role")
    if role == "function_call":
        calls = _sharegpt_tool_calls(message.get("content"), i, f"message {i} (role function_call)")
        return {**message, "role": "assistant", "content": "", "tool_calls": calls}
    if role in _LEGACY_ROLES:
        message["role"] = _LEGACY_ROLES[role]
    call = message.pop("function_call", None)
    if call is None:
        return message
    if message.get("role") != "assistant":
        raise ConversationError(f"message {i} is a {message.get('role')} message with a function_call")
    if message.get("tool_calls"):
        raise ConversationError(f"message {i} has both function_call and tool_calls; keep one of them")
    message["tool_calls"] = _sharegpt_tool_calls(call, i, f"message {i} function_call")
    return message


def _is_message_list(value: Any) -> bool:
    """Whether ``value`` (or the JSON text of it) is a non-empty list of ``role`` messages; an Alpaca
    ``input`` string is not."""
    if isinstance(value, str):
        try:
            value = _json_field(value, "input")
        except ConversationError:
            return False
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _from_xlam(obj: dict) -> list[dict]:
    """An xLAM / APIGen row (``query``, JSON-text ``answers`` of ``{"name", "arguments"}`` calls) as a
    user message and an assistant message making the calls."""
    query = obj["query"]
    if not isinstance(query, str) or not query.strip():
        raise ConversationError("'query' must be a non-empty string (an xLAM row)")
    answers = _json_field(obj["answers"], "answers")
    if not isinstance(answers, list) or not answers:
        raise ConversationError('\'answers\' must be a non-empty list of {"name", "arguments"} calls (an xLAM row)')
    return [
        {"role": "user", "content": query},
        {"role": "assistant", "content": "", "tool_calls": _sharegpt_tool_calls(answers, 1, "'answers'")},
    ]


def _from_input_output(obj: dict) -> list[dict]:
    """A Llama-Nemotron post-training row: ``input`` messages, the assistant's ``output`` and a
    ``system_prompt`` ("detailed thinking on/off", the switch the model is trained to obey)."""
    messages = list(_json_field(obj["input"], "input"))
    output, system = obj["output"], obj.get("system_prompt")
    if not isinstance(output, str) or not output.strip():
        raise ConversationError("'output' must be a non-empty string (the assistant's reply to 'input')")
    if system is not None and not isinstance(system, str):
        raise ConversationError(f"'system_prompt' must be a string, got {type(system).__name__}")
    if system and system.strip():
        messages = _with_system_switch(messages, system)
    return [*messages, {"role": "assistant", "content": output}]


def _with_system_switch(messages: list, system: str) -> list:
    """``messages`` with a Nemotron ``system_prompt`` in front: as a system message of its own, or,
    where ``input`` opens with a system message (a persona, a tool list), as that message's first line.

    Prepended rather than refused: the output was generated with reasoning on or off, and trained
    without the switch it teaches the model to reason (or not) unasked; the Nemotron models read the
    switch from the system prompt and take other instructions after it, and refusing would lose
    every such row."""
    if messages[0].get("role") != "system":
        return [{"role": "system", "content": system}, *messages]
    first = _text_content(messages[0].get("content"), 0)
    if first.startswith(system):
        return messages
    return [{**messages[0], "content": f"{system}\n{first}" if first else system}, *messages[1:]]


def _text_content(content: Any, i: int) -> str:
    """A message's content as text: a string, ``None`` (empty) or a list of OpenAI text parts,
    joined with a newline (:data:`~lightning_agents.content_parts.PROMPT_PARTS_JOIN`, as vLLM's
    server joins a tool result's, and every message's for a "string"-format template): joined
    without it, a two-part tool result trained as one run-on line that the model, served, never
    saw. A template that joins the parts itself gets them joined its way at tokenization
    (:func:`~lightning_agents.content_parts.prompt_content`)."""
    try:
        return content_text(content, join=PROMPT_PARTS_JOIN)
    except ContentPartError as exc:
        raise ConversationError(
            f"message {i} content[{exc.index}] is a {exc.kind!r} part; only text parts can be trained on "
            "(ChatDataModule is text-only: drop the record or its non-text parts)"
        ) from None
    except TypeError:
        raise ConversationError(
            f"message {i} content must be a string or a list of text parts, got {type(content).__name__}"
        ) from None


def _weight(message: dict, i: int) -> int | None:
    """The OpenAI fine-tuning ``weight`` of a message (0 or 1), removed from it; ``None`` when absent."""
    if "weight" not in message:
        return None
    weight = message.pop("weight")
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight not in (0, 1):
        raise ConversationError(f"message {i} weight must be 0 or 1, got {weight!r}")
    return int(weight)


def _normalize_reasoning(message: dict, i: int) -> None:
    """Keep an assistant's reasoning as ``reasoning_content``, whichever name it came under; rendering
    hands it to the template under every name (see :func:`with_reasoning_keys`)."""
    reasoning = None
    for key in _REASONING_KEYS:
        value = message.pop(key, None)
        if value is None or reasoning is not None:
            continue
        if not isinstance(value, str):
            raise ConversationError(f"message {i} {key} must be a string, got {type(value).__name__}")
        if value.strip():
            reasoning = value
    if reasoning is not None:
        message["reasoning_content"] = reasoning


def _from_sharegpt(turns: Any, system: Any = None) -> tuple[list[dict], list[int | None]]:
    """ShareGPT turns (``from``/``value``; ``role``/``content`` turns pass through) as OpenAI messages,
    with the index of the ``from``/``value`` turn each message came from (``None`` for the others)."""
    if not isinstance(turns, list) or not turns:
        raise ConversationError("'conversations' must be a non-empty list")
    messages: list[dict] = []
    origin: list[int | None] = []
    if isinstance(system, str) and system.strip():
        messages.append({"role": "system", "content": system})
        origin.append(None)
    elif system is not None and not isinstance(system, str):
        raise ConversationError(f"'system' must be a string, got {type(system).__name__}")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ConversationError(f"conversations[{i}] is a {type(turn).__name__}, not an object")
        if "from" not in turn:
            messages.append(turn)  # already {"role", "content", ...}
            origin.append(None)
            continue
        speaker = turn["from"]
        role = _SHAREGPT_ROLES.get(speaker.lower() if isinstance(speaker, str) else speaker)
        if role is None:
            raise ConversationError(
                f"conversations[{i}] is from {speaker!r}; expected one of {sorted(_SHAREGPT_ROLES)}"
            )
        message = {k: v for k, v in turn.items() if k not in ("from", "value")}
        message["role"] = role
        message["content"] = turn.get("value", turn.get("content"))
        if speaker == "function_call":
            message["tool_calls"] = _sharegpt_tool_calls(message.pop("content"), i)
            message["content"] = ""
        if role == "system" and messages and messages[0]["role"] == "system" and i == 0:
            messages[0] = message  # the turn's own system prompt wins over a top-level one
            origin[0] = i
            continue
        messages.append(message)
        origin.append(i)
    return messages, origin


def _sharegpt_tool_calls(value: Any, i: int, where: str | None = None) -> list[dict]:
    """A ``function_call`` turn's JSON ``{"name", "arguments"}`` (or a list of them) as OpenAI tool calls.

    Args:
        value: the JSON text or the decoded object.
        i: the turn's index, for the message.
        where: how the message names the field (default ``conversations[i] (function_call)``).
    """
    where = where or f"conversations[{i}] (function_call)"
    try:
        calls = loads_json(value) if isinstance(value, str) else value
    except JSONTextError as exc:
        raise ConversationError(f"{where} is not JSON: {exc}") from None
    calls = calls if isinstance(calls, list) else [calls]
    out = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ConversationError(f'{where} must be {{"name": ..., "arguments": ...}}')
        out.append({"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}})
    return out


_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")
_PROBE_USER, _PROBE_USER2 = "Probe user question one", "Probe user question two"
_PROBE_REPLY, _PROBE_REPLY2 = "Probe assistant reply one", "Probe assistant reply two"
_PROBE_TOOL_OUTPUT = "Probe tool output"
_PROBE_FUNCTION = "probe_function"
# Nine alphanumeric characters: Mistral's templates refuse any other tool-call id.
_PROBE_CALL_ID = "probe0001"
_PROBE_ARGUMENTS = {"probe_argument": "probe value"}
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_FUNCTION,
            "description": "Probe function.",
            "parameters": {"type": "object", "properties": {"probe_argument": {"type": "string"}}},
        },
    }
]


class ChatTemplateError(LightningAgentsError, ValueError):
    """A chat template whose assistant turns cannot be located reliably (the message says why)."""


def has_generation_markers(template: str | dict | None) -> bool:
    """Whether a chat template marks assistant text with ``{% generation %}`` (any whitespace control)."""
    if isinstance(template, dict):
        template = template.get("default", "")
    return bool(_GENERATION_RE.search(template or ""))


def _template_of(tokenizer) -> str:
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default", "")
    if not template:
        raise ChatTemplateError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; set one "
            "(e.g. the data module's `chat_template` setting)"
        )
    return template


def _render(tokenizer, messages, tools, add_generation_prompt: bool = False) -> str:
    return render_chat_template(
        tokenizer,
        with_reasoning_keys(messages),
        tools=tools,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )


def _common_prefix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _last_marker(text: str, markers) -> str | None:
    """The marker (special token text) ending last in ``text``, longest on ties."""
    best, best_end = None, -1
    for marker in markers:
        pos = text.rfind(marker)
        end = pos + len(marker)
        if pos >= 0 and (end > best_end or (end == best_end and len(marker) > len(best))):
            best, best_end = marker, end
    return best


def _first_marker(text: str, markers) -> str | None:
    """The marker (special token text) occurring first in ``text``, longest on ties."""
    best, best_pos = None, len(text) + 1
    for marker in markers:
        pos = text.find(marker)
        if pos >= 0 and (pos < best_pos or (pos == best_pos and len(marker) > len(best))):
            best, best_pos = marker, pos
    return best


def _closing_eos(after_reply: str, marker: str | None, eos: str | None) -> str | None:
    """The token that ends an assistant turn, given the first ``marker`` after its reply: the
    tokenizer's EOS where the template writes it right after that marker (Command R7B closes an
    answer with ``<|END_RESPONSE|><|END_OF_TURN_TOKEN|>``, a call with ``<|END_ACTION|>`` then the
    same EOS: the model writes both and stops at the EOS, so a turn that ended at the marker left
    the EOS untrained), else ``marker``."""
    if marker and eos and marker != eos and after_reply.startswith(marker + eos, after_reply.find(marker)):
        return eos
    return marker


def _with_string_arguments(messages: list[dict]) -> list[dict]:
    """Messages whose tool-call arguments are JSON strings (for templates that concatenate them)."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            message = dict(message)
            calls = []
            for call in message["tool_calls"]:
                call = copy.deepcopy(call)
                fn = call.get("function", call)
                if not isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.dumps(fn.get("arguments", {}), ensure_ascii=False)
                calls.append(call)
            message["tool_calls"] = calls
        out.append(message)
    return out


@dataclass(frozen=True)
class TemplateLayout:
    """What a chat template puts around assistant turns, learned once per template by rendering probes.

    Attributes:
        end_of_turn: the text (a special token) that closes an assistant turn; it is labelled, since
            the model must learn to stop.
        tool_call_opener: text a turn's first tool call starts with, e.g. ``<tool_call>\\n{"name": "``;
            ``None`` when the template cannot render tool calls (``tool_call_problem`` says why).
        string_arguments: the template needs tool-call arguments as JSON strings (it concatenates them).
        generation_markers: the template has ``{% generation %}`` blocks; the tokenizer's assistant
            mask is used instead of locating turns.
        final_end_of_turn: what closes the last turn of a conversation that ends with the assistant,
            when that is not ``end_of_turn``: gpt-oss's ``<|return|>`` (harmony's stop token for a final
            answer, which its format guide says supervised targets end with), or ``""`` where the
            template writes nothing there (GLM-4.x, Apertus, Apriel-1.6); then ``final_end_appended``
            is appended to the rendered text and labelled.
        call_end_of_turn: what closes a tool-call turn, when that is not ``end_of_turn``: gpt-oss's
            ``<|call|>``, functionary's ``<|eom_id|>``, GLM's ``<|observation|>``, Solar-Open's ``<|calls|>``.
        final_end_appended: the token appended after the last turn when the template leaves it open
            (``final_end_of_turn == ""``): the tokenizer's EOS, which every engine stops on and which
            GLM-4's own fine-tuning script appends (THUDM/GLM-4 ``finetune_demo/finetune.py``).
        generation_prompt: what ``add_generation_prompt=True`` appends after a user message (the
            assistant header an engine feeds the model, e.g. ``<|im_start|>assistant\n``, gpt-oss's
            ``<|start|>assistant``, functionary v3.2's ``...<|end_header_id|>\n\n>>>``); ``""`` when it
            appends nothing. A turn's labels start where it ends: what the template writes after it
            (gpt-oss's ``<|channel|>final<|message|>``, functionary's ``all\n``) the model generates.
        ends_inside_turn: end tokens the template also writes inside one turn, between the reasoning
            and the answer (gpt-oss's ``<|end|>`` closing its analysis channel): no place to stop
            generating (:attr:`stop_tokens` leaves them out).
        assistant_header: what the template writes between a user message's text and the text of
            the assistant reply that follows it (``<|im_end|>\n<|im_start|>assistant\n``, Mistral's
            ``[/INST]``, Phi-4-mini's ``<|end|><|assistant|>``), the same after both user messages of
            the probe; ``""`` when they differ from the first character. A reply after a user message
            is searched for after it, never inside it (a reply ``assistant`` is not Phi-4-mini's token).
        generated_header: where the template has no generation prompt (``generation_prompt == ""``),
            the text it writes between the prompt an engine feeds the model (the conversation up to
            the user message) and a reply's own text, which the model therefore writes: Hunyuan-A13B's
            ``助手：`` before a text answer (its prompt ends with ``<|extra_0|>``). Labelled with the
            answer it opens where it precedes one, as a tool-call turn's opener is.
        call_id_names: the template writes each tool call's id where its function name goes
            (Kimi-K2-Thinking), so the model learns the id as the call's name: a conversation with
            ids not of Moonshot's form ``functions.NAME:INDEX`` has them rewritten to it, its tool
            results' ``tool_call_id`` with them (``NOTE_CALL_IDS_NAMED``; see :func:`_moonshot_ids`).
        call_ids_paired: the template pairs each tool result with its call by id without writing
            the id (Command R7B numbers the calls and heads a result with the number of the first
            call that has its id): a conversation whose ids repeat or are missing has every call
            given an id of its own and each result its call's (``NOTE_CALL_IDS_UNIQUE``; see
            :func:`_unique_ids`), as an engine's ids always are.
        call_ids_shown: the template writes each tool call's id in the call and heads its result
            with it (Mistral's ``"id"`` and ``[CALL_ID]``, Solar-Open's ``<|tool_call:begin|>ID``,
            which names a result's tool by looking its id up among every call): a conversation in
            which a call repeats an earlier call's id has each later repeat renamed, in the call
            and its result (``NOTE_CALL_IDS_UNIQUE``; see :func:`_distinct_ids`), as rollouts store
            them. Not Kimi-K2's first template, which numbers calls per message itself.
        tool_generation_prompt: what ``add_generation_prompt=True`` appends after a tool result
            (``""`` where the model goes on in its own turn: DeepSeek's and Gemma 4's templates);
            ``None`` where the template renders no tool-call turn. Where it differs from
            ``generation_prompt``, a turn after a tool result is compared with
            ``tool_result_prompt`` (which ends with it), not with ``generation_prompt``, to tell
            whether the turn holds the prompt an engine feeds the model (a trained turn that does
            not is noted, and ``ChatDataModule`` counts such conversations in one warning).
        tool_result_prompt: the text a prompt ending with a tool result has after the result's own
            text (the template's closing of the result, then ``tool_generation_prompt``: DeepSeek-V3's
            ``<｜tool▁output▁end｜><｜tool▁outputs▁end｜>``, Gemma 4's ``<|"|>}<tool_response|>``);
            ``None`` where the template renders no tool-call turn. Where ``tool_generation_prompt``
            differs from ``generation_prompt``, a turn after a tool result is labelled from where this
            ends, since the model writes all after it (Gemma 4's ``<|channel>thought\n`` before its
            reasoning); its words are the template's own, not a next message found out of order.
        last_turn_reasoning: the kinds of a conversation's last assistant turn whose reasoning the
            template renders: ``"answer"`` (a reply's ``reasoning_content``), ``"call"`` (a tool
            call's, its result after it) and ``"think"`` (a ``<think>`` block in the reply's content).
            A turn of such a kind whose reasoning is dropped because more messages follow it can be
            trained in a row that ends with it (``split_reasoning_turns``); Llama 3, Mistral and
            DeepSeek-R1-Distill render no reasoning at all, so a refusal there does not suggest it.
    """

    end_of_turn: str | None
    tool_call_opener: str | None
    string_arguments: bool = False
    generation_markers: bool = False
    tool_call_problem: str = ""
    end_of_turn_problem: str = ""
    final_end_of_turn: str | None = None
    call_end_of_turn: str | None = None
    final_end_appended: str | None = None
    generation_prompt: str = ""
    ends_inside_turn: tuple[str, ...] = ()
    assistant_header: str = ""
    generated_header: str = ""
    call_id_names: bool = False
    call_ids_paired: bool = False
    call_ids_shown: bool = False
    tool_generation_prompt: str | None = None
    tool_result_prompt: str | None = None
    last_turn_reasoning: tuple[str, ...] = ()

    @property
    def end_tokens(self) -> tuple[str, ...]:
        """Every token that may close an assistant turn: a turn ends at the first one after its own text."""
        ends = (self.end_of_turn, self.call_end_of_turn, self.final_end_of_turn or self.final_end_appended)
        return tuple(dict.fromkeys(t for t in ends if t))

    @property
    def stop_tokens(self) -> tuple[str, ...]:
        """The end tokens generation stops at: those never written inside a turn."""
        return tuple(t for t in self.end_tokens if t not in self.ends_inside_turn)


_LAYOUTS: dict[tuple, TemplateLayout] = {}


def template_layout(tokenizer) -> TemplateLayout:
    """Learn (once per template and tokenizer vocabulary) where assistant turns start and end.

    Three small probe conversations are rendered: two plain turns, to find the end-of-turn token
    between an assistant reply and the next user message, and the one after the last reply (another
    token, as gpt-oss's ``<|return|>``, or none, as GLM's); and a tool-call turn followed by its tool
    result, to find the text that opens the first tool call (after the assistant header that the
    generation prompt shows) and the token that ends a tool-call turn (the same, or gpt-oss's
    ``<|call|>``, functionary's ``<|eom_id|>``, GLM's ``<|observation|>``).
    """
    template = _template_of(tokenizer)
    key = (template, getattr(tokenizer, "name_or_path", ""), len(tokenizer), tokenizer.eos_token)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = _probe_layout(tokenizer, template)
    return layout


_TOOL_USE: dict[tuple, bool] = {}


def renders_tool_use(tokenizer) -> bool:
    """Whether the chat template shows the model both a tool list and an assistant's tool call.

    Probed once per template: a conversation offering two tools and calling one must render the
    other's name (the tool list) and the call's argument value (the call). Plain ChatML, for one,
    renders neither: data whose tool calls are written as text must stay text there.
    """
    template = _template_of(tokenizer)
    key = (template, getattr(tokenizer, "name_or_path", ""), len(tokenizer))
    if key not in _TOOL_USE:
        listed_only, value = "la_probe_listed_only", "la_probe_value_7"
        tools = [*_PROBE_TOOLS, {**_PROBE_TOOLS[0], "function": {**_PROBE_TOOLS[0]["function"], "name": listed_only}}]
        call = {
            "id": "call00000",
            "type": "function",
            "function": {"name": _PROBE_FUNCTION, "arguments": {"probe_argument": value}},
        }
        messages = [
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call00000", "name": _PROBE_FUNCTION, "content": _PROBE_REPLY},
            {"role": "assistant", "content": _PROBE_REPLY2},
        ]
        try:
            text = _render(tokenizer, messages, tools)
        except Exception:  # noqa: BLE001 - a template that cannot render it does not render it
            try:  # templates that concatenate the arguments want them as a JSON string
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
                text = _render(tokenizer, messages, tools)
            except Exception:  # noqa: BLE001
                text = ""
        _TOOL_USE[key] = listed_only in text and value in text
    return _TOOL_USE[key]


def _probe_layout(tokenizer, template: str) -> TemplateLayout:
    # Templates with {% generation %} blocks are labelled from the tokenizer's assistant mask, but
    # their turns still end, and their calls are still written, somewhere: generation stops and the
    # rollouts' tool-call parser need that too.
    layout = _probe_rendered_layout(tokenizer)
    inner = _ends_inside_a_turn(tokenizer, layout)
    return replace(
        layout,
        generation_markers=has_generation_markers(template),
        ends_inside_turn=inner,
        call_ids_paired=_pairs_calls_by_id(tokenizer, layout),
        call_ids_shown=_shows_call_ids(tokenizer, layout),
        last_turn_reasoning=_last_turn_reasoning(tokenizer, layout),
    )


def _last_turn_reasoning(tokenizer, layout: TemplateLayout) -> tuple[str, ...]:
    """The kinds of last assistant turn whose reasoning the template renders
    (:attr:`TemplateLayout.last_turn_reasoning`): each probe conversation ends with a turn of that
    kind (a call with its result after it, as the call's row of ``split_reasoning_turns`` ends), and
    its reasoning must be in the rendering. Kimi-K2-Thinking and Gemma 4 render a last call's
    reasoning but not a last answer's; Llama 3 and Mistral neither."""
    thought = "Probe last reasoning"
    user = {"role": "user", "content": _PROBE_USER}
    probes = {
        "answer": [user, {"role": "assistant", "content": _PROBE_REPLY, "reasoning_content": thought}],
        "think": [user, {"role": "assistant", "content": f"<think>\n{thought}\n</think>\n\n{_PROBE_REPLY}"}],
    }
    if layout.tool_call_opener is not None:
        call = {"role": "assistant", "content": "", "reasoning_content": thought}
        call["tool_calls"] = [_probe_call(_PROBE_CALL_ID)]
        result = {
            "role": "tool",
            "tool_call_id": _PROBE_CALL_ID,
            "name": _PROBE_FUNCTION,
            "content": _PROBE_TOOL_OUTPUT,
        }
        probes["call"] = [user, call, result]
    kinds = []
    for kind, messages in probes.items():
        messages = with_reasoning_keys(messages)
        if layout.string_arguments:
            messages = _with_string_arguments(messages)
        for tools in (None, _PROBE_TOOLS):  # Hermes' template iterates over the tool list
            try:
                text = _render(tokenizer, messages, tools)
            except Exception:  # noqa: BLE001 - a template that refuses the probe renders none of it
                continue
            if thought in text:
                kinds.append(kind)
            break
    return tuple(kinds)


def _reasoning_kind(message: dict) -> str:
    """An assistant turn's kind in :attr:`TemplateLayout.last_turn_reasoning`."""
    if not _reasoning_of(message):
        return "think"
    return "call" if message.get("tool_calls") else "answer"


def _shows_call_ids(tokenizer, layout: TemplateLayout) -> bool:
    """Whether the template writes a tool call's id both in the call and in its result's header
    (:attr:`TemplateLayout.call_ids_shown`): a one-call conversation shows the probe's id twice.
    Kimi-K2's first template writes ``functions.NAME:{loop.index0}`` for the call and the id only
    in the result's header (once); Qwen3's and Llama 3.1's write none."""
    if layout.tool_call_opener is None or layout.call_id_names:
        return False
    messages = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": "", "tool_calls": [_probe_call(_PROBE_CALL_ID)]},
        {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "name": _PROBE_FUNCTION, "content": _PROBE_TOOL_OUTPUT},
    ]
    try:
        text = _render(
            tokenizer, _with_string_arguments(messages) if layout.string_arguments else messages, _PROBE_TOOLS
        )
    except Exception:  # noqa: BLE001 - a template that refuses the probe: ids are left as they are
        return False
    return text.count(_PROBE_CALL_ID) >= 2


def _pairs_calls_by_id(tokenizer, layout: TemplateLayout) -> bool:
    """Whether the template pairs tool results with calls by id without writing the ids
    (:attr:`TemplateLayout.call_ids_paired`): two call turns rendered with two ids and with one id
    twice differ after the first tool output, and neither shows an id.

    Only what follows the first tool output counts: the ids first differ in the second call, and a
    template that renders the time before the conversation (Hunyuan-A13B writes it to the second)
    makes two renders straddling a second boundary differ there (9 of 22,789 probes of that
    template, which pairs nothing by id, said it did)."""
    if layout.tool_call_opener is None or layout.call_id_names:
        return False
    ids = ("probe0001", "probe0002")

    def two_calls(second: str) -> str:
        messages = [{"role": "user", "content": _PROBE_USER}]
        for call_id in (ids[0], second):
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [_probe_call(call_id)]},
                {"role": "tool", "tool_call_id": call_id, "name": _PROBE_FUNCTION, "content": _PROBE_TOOL_OUTPUT},
            ]
        messages.append({"role": "assistant", "content": _PROBE_REPLY})
        return _render(
            tokenizer, _with_string_arguments(messages) if layout.string_arguments else messages, _PROBE_TOOLS
        )

    try:
        distinct, repeated = two_calls(ids[1]), two_calls(ids[0])
    except Exception:  # noqa: BLE001 - a template that refuses these ids (Mistral's) writes them
        return False
    if any(i in distinct or i in repeated for i in ids):
        return False
    # A template that renders no tool output shows no result a call could be paired with.
    first, again = distinct.find(_PROBE_TOOL_OUTPUT), repeated.find(_PROBE_TOOL_OUTPUT)
    return first >= 0 and again >= 0 and distinct[first:] != repeated[again:]


def _ends_inside_a_turn(tokenizer, layout: TemplateLayout) -> tuple[str, ...]:
    """The end tokens a model writes before its turn is over, so generation must not stop at them:

    - between one message's reasoning and its answer (gpt-oss closes the analysis channel with
      ``<|end|>`` and answers in the same turn);
    - in the text that opens a tool call (GigaChat3 opens each call with ``<|message_sep|>``);
    - right before another end token or the EOS (Command R7B writes ``<|END_RESPONSE|>`` or
      ``<|END_ACTION|>`` and then ``<|END_OF_TURN_TOKEN|>``: stopped at the first, a turn would
      lack the second, which the template and the training data have there).
    """
    ends = layout.end_tokens
    inner = [t for t in ends if layout.tool_call_opener and t in layout.tool_call_opener]
    thought, answer = "Probe hidden reasoning", _PROBE_REPLY
    for follow_up in ([], [{"role": "user", "content": _PROBE_USER2}]):
        # Templates read the reasoning from `reasoning_content` (Qwen3, GLM), `thinking` (gpt-oss) or
        # `reasoning` (Solar-Open: `<|think|>...<|end|>` then the answer, so without this key every
        # reasoning turn was cut at its `<|end|>`).
        reply = {"role": "assistant", "content": answer, "reasoning_content": thought, "thinking": thought}
        reply["reasoning"] = thought
        try:
            text = _render(tokenizer, [{"role": "user", "content": _PROBE_USER}, reply, *follow_up], None)
        except Exception:  # noqa: BLE001 - a template that refuses reasoning writes none inside a turn
            continue
        start, end = text.find(thought), text.find(answer)
        if 0 <= start < end:
            inner += [t for t in ends if t in text[start:end] and t not in inner]
    closers = [*ends, *([tokenizer.eos_token] if tokenizer.eos_token else [])]
    for segment in _turn_end_segments(tokenizer):
        for t in ends:
            at = segment.find(t)
            while at >= 0 and t not in inner:
                rest = segment[at + len(t) :].lstrip()
                if any(c != t and rest.startswith(c) for c in closers):
                    inner.append(t)
                at = segment.find(t, at + len(t))
    return tuple(inner)


def _turn_end_segments(tokenizer) -> list[str]:
    """The text between an assistant turn's own last text and the next message, for a plain reply
    followed by a user message and for a tool call followed by its result.

    Only turns that another message follows: after the last message of a conversation some
    templates close the document too (Phi-3.5's ``<|end|>`` then ``<|endoftext|>``), which the
    model does not write at the end of its turn.
    """
    call = _probe_call(_PROBE_CALL_ID)
    user = {"role": "user", "content": _PROBE_USER}
    probes = [
        ([user, {"role": "assistant", "content": _PROBE_REPLY}, {"role": "user", "content": _PROBE_USER2}], None),
        (
            [
                user,
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": _PROBE_CALL_ID,
                    "name": _PROBE_FUNCTION,
                    "content": _PROBE_TOOL_OUTPUT,
                },
            ],
            _PROBE_TOOLS,
        ),
    ]
    segments = []
    for (messages, tools), (own, following) in zip(
        probes, ((_PROBE_REPLY, _PROBE_USER2), (next(iter(_PROBE_ARGUMENTS.values())), _PROBE_TOOL_OUTPUT))
    ):
        for rendered in (messages, _with_string_arguments(messages)):
            try:
                text = _render(tokenizer, rendered, tools)
            except Exception:  # noqa: BLE001 - a template that refuses this conversation shows nothing here
                continue
            start = text.find(own, text.find(_PROBE_USER) + len(_PROBE_USER))
            stop = text.find(following, start) if start >= 0 else -1
            if stop > start:
                segments.append(text[start + len(own) : stop])
            break
    return segments


def turn_end_token_ids(tokenizer) -> list[int]:
    """The ids of the tokens the chat template closes an assistant turn with, where generation must stop.

    ChatML closes turns with ``<|im_end|>``, which a base model's generation config does not list
    (its EOS is ``<|endoftext|>``): once fine-tuned on ChatML the model writes ``<|im_end|>`` and,
    unless told to stop there, runs on to ``max_new_tokens``. A tool-call turn may close with
    another token (Llama 3.1's ``<|eom_id|>``, gpt-oss's ``<|call|>``). Tokens a model writes
    before its turn is over are left out (:attr:`TemplateLayout.ends_inside_turn`). ``[]`` without
    a chat template, and (with a warning) for one that cannot be probed: generation then stops at
    the EOS and the generation config's ids alone, as it did before.
    """
    if not getattr(tokenizer, "chat_template", None):
        return []
    try:
        stops = template_layout(tokenizer).stop_tokens
    except Exception as exc:  # noqa: BLE001 - a template the probe cannot read must not stop a rollout or an export
        key = (getattr(tokenizer, "name_or_path", ""), str(tokenizer.chat_template)[:200])
        if key not in _UNPROBED:
            _UNPROBED.add(key)
            logger.warning(
                "the chat template's end-of-turn tokens are not known (%s: %s); generation stops at the EOS and "
                "the generation config's ids only",
                type(exc).__name__,
                exc,
            )
        return []
    ids: list[int] = []
    for token in stops:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) == 1 and encoded[0] not in ids:
            ids.append(encoded[0])
    return ids


_UNPROBED: set[tuple[str, str]] = set()


def _probe_rendered_layout(tokenizer) -> TemplateLayout:
    markers = [t for t in tokenizer.get_added_vocab() if t]
    if tokenizer.eos_token:
        markers.append(tokenizer.eos_token)
    plain = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": _PROBE_REPLY},
        {"role": "user", "content": _PROBE_USER2},
        {"role": "assistant", "content": _PROBE_REPLY2},
    ]
    plain_tools = None
    try:
        text = _render(tokenizer, plain, None)
    except Exception as exc:  # noqa: BLE001 - any template error; the layout carries it to every conversation
        try:  # a tool-use template (Hermes) may render nothing without tools
            plain_tools = _PROBE_TOOLS
            text = _render(tokenizer, plain, plain_tools)
        except Exception as with_tools:  # noqa: BLE001
            # The failure with a tool list is the one a tool-use template (Command R+) really has.
            problem = (
                f"the chat template fails on a plain two-turn conversation (with a tool list: "
                f"{type(with_tools).__name__}: {with_tools}; without: {type(exc).__name__}: {exc})"
            )
            return TemplateLayout(None, None, end_of_turn_problem=problem, tool_call_problem=problem)
    end = text.find(_PROBE_REPLY)
    after = text.find(_PROBE_USER2, end)
    end_of_turn, eot_problem = None, ""
    if end < 0 or after < 0:
        eot_problem = "the chat template does not render plain user and assistant messages verbatim"
    else:
        end_of_turn = _closing_eos(
            text[end + len(_PROBE_REPLY) : after],
            _first_marker(text[end + len(_PROBE_REPLY) : after], markers),
            tokenizer.eos_token,
        )
        if end_of_turn is None:
            eot_problem = (
                "no special token of the tokenizer closes an assistant turn of this chat template "
                f"(between turns it renders {text[end + len(_PROBE_REPLY) : after]!r}); does the tokenizer "
                "have the template's special tokens?"
            )
    if end_of_turn is None:
        return TemplateLayout(None, None, end_of_turn_problem=eot_problem, tool_call_problem=eot_problem)
    between = text[end + len(_PROBE_REPLY) : after]
    # What opens the next message after a closed turn (`<|start|>`, `<|start_header_id|>`): a tool-call
    # turn ends at the last special token before it. None where the closer opens the next message
    # itself (GLM's `<|user|>`).
    turn_opener = _first_marker(between[between.find(end_of_turn) + len(end_of_turn) :], markers)
    last = text.rfind(_PROBE_REPLY2)
    tail = text[last + len(_PROBE_REPLY2) :]
    # The EOS after the last turn's marker ends it only where the EOS follows that marker between
    # turns too (Command R7B): Phi-4-mini ends every turn with `<|end|>` and the document with
    # `<|end|><|endoftext|>`, an EOS its model never writes after an answer (it stops at `<|end|>`).
    first_between = _first_marker(between, markers)
    eos_closes = _closing_eos(between, first_between, tokenizer.eos_token) != first_between
    final_marker = _first_marker(tail, markers)
    if last < 0:
        final_end = end_of_turn
    else:
        final_end = _closing_eos(tail, final_marker, tokenizer.eos_token) if eos_closes else final_marker
    final_end = None if final_end == end_of_turn else final_end or ""
    appended = None
    if final_end == "":
        if not tokenizer.eos_token:
            problem = (
                "the chat template writes no end-of-turn token after the last assistant turn, and the tokenizer "
                "has no EOS token to end it with"
            )
            return TemplateLayout(None, None, end_of_turn_problem=problem, tool_call_problem=problem)
        appended = tokenizer.eos_token
    ends = {
        "final_end_of_turn": final_end,
        "final_end_appended": appended,
        "generation_prompt": _generation_prompt(tokenizer, plain_tools, markers),
        "assistant_header": _assistant_header(text),
    }
    if not ends["generation_prompt"]:
        ends["generated_header"] = _generated_header(tokenizer, markers)

    call_id = _PROBE_CALL_ID
    if _writes_id_for_name(tokenizer):
        # Kimi-K2-Thinking writes the call's id where the function name goes (Moonshot's ids are
        # `functions.NAME:INDEX`); its tool message's header holds the name, which the probe
        # mistook for the call's. Probed with an id of that form, the name is where the model writes it.
        call_id = _KIMI_CALL_ID
        ends["call_id_names"] = True
    call = _probe_call(call_id)
    with_calls = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": _PROBE_FUNCTION, "content": _PROBE_TOOL_OUTPUT},
        {"role": "assistant", "content": _PROBE_REPLY2},
    ]
    # Arguments as dicts (what normalize_conversation gives) or as JSON strings (what templates
    # that print `{{ arguments }}` or concatenate them need): the first form whose call is rendered
    # with its arguments as JSON wins, then one that renders each value (XML-style parameters);
    # one that renders only the name is kept as a last resort. Dicts rendered value by value in
    # the template's own syntax win over JSON strings: Gemma 4 writes `call:f{city:<|"|>Oslo<|"|>}`
    # from a dict but pastes a string between its braces (`call:f{{"city": "Oslo"}}`), a call syntax
    # the model never writes. A dict printed as Python prints it (`{'city': 'Oslo'}`) is no syntax.
    chosen: tuple[bool, str] | None = None
    by_value: tuple[bool, str] | None = None
    errors: list[str] = []
    for as_strings in (False, True):
        messages = _with_string_arguments(with_calls) if as_strings else with_calls
        try:
            candidate = _render(tokenizer, messages, _PROBE_TOOLS)
        except Exception as exc:  # noqa: BLE001 - a template that fails on this form may accept the other
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        user_end = candidate.find(_PROBE_USER)
        name_at = candidate.find(_PROBE_FUNCTION, user_end + len(_PROBE_USER)) if user_end >= 0 else -1
        if name_at < 0:
            continue
        chosen = chosen or (as_strings, candidate)
        arguments = messages[1]["tool_calls"][0]["function"]["arguments"]
        if any(candidate.find(form, name_at) >= 0 for form in _argument_forms(arguments)):
            chosen = (as_strings, candidate)
            break
        if by_value is None and _argument_values_end(candidate, arguments, name_at, len(candidate)) is not None:
            by_value = (as_strings, candidate)
            if not as_strings and str(arguments) not in candidate[name_at:]:
                chosen = by_value
                break
    else:
        chosen = by_value or chosen
    if chosen is None:
        why = f" (it raised {errors[-1][:300]})" if errors else ""
        return TemplateLayout(
            end_of_turn,
            None,
            tool_call_problem=f"the chat template does not render tool calls{why}",
            **ends,
        )
    string_arguments, text = chosen
    user_messages = with_calls[:1]
    base = _render(tokenizer, user_messages, _PROBE_TOOLS)
    prompt = _render(tokenizer, user_messages, _PROBE_TOOLS, add_generation_prompt=True)
    shared = _common_prefix_length(base, prompt)
    name_at = text.find(_PROBE_FUNCTION, text.find(_PROBE_USER) + len(_PROBE_USER))
    if not text.startswith(prompt[:shared]) or name_at < shared:
        # vLLM's Mistral v0.3 templates write their system prompt (the tool-call instructions) into
        # the user message only while it is the conversation's last, so the generation prompt
        # differs from the conversation before the call; what follows the user message does not.
        # Compared from there, the call's opener is found (else its `[TOOL_CALLS] [...]` calls
        # were read as hermes, so taken for final answers).
        base, prompt = _from_user_message(text, base), _from_user_message(text, prompt)
        shared = _common_prefix_length(base, prompt)
    if not text.startswith(prompt[:shared]) or name_at < shared:
        return TemplateLayout(
            end_of_turn,
            None,
            string_arguments,
            tool_call_problem="the chat template renders the conversation before a tool call differently "
            "from the prompt it generates from",
            **ends,
        )
    until_result = (_with_string_arguments(with_calls) if string_arguments else with_calls)[:3]
    ends["tool_generation_prompt"] = _generation_prompt(tokenizer, _PROBE_TOOLS, markers, until_result)
    ends["tool_result_prompt"] = _tool_result_prompt(tokenizer, until_result)
    header_end = shared + _common_prefix_length(text[shared:name_at], prompt[shared:])
    # `<think>` in the prompt and `<tool_call>` in the turn share "<t": start at the tag, not inside it.
    tag = text.rfind("<", shared, header_end)
    if tag >= 0 and text.find(">", tag, header_end) < 0:
        header_end = tag
    opener = text[header_end:name_at]
    output_at = text.find(_PROBE_TOOL_OUTPUT, name_at)
    # An empty opener: the generation prompt itself ends where the call's name starts (functionary
    # v3.2's `>>>`, after which the model writes `name\n{...}`, or `all\n` and an answer).
    prompt_opens_call = not opener and prompt[shared:] == text[shared:name_at]
    if not (opener or prompt_opens_call) or output_at < 0:
        problem = "the chat template does not render a tool-call turn and then its tool result"
        return TemplateLayout(end_of_turn, None, string_arguments, tool_call_problem=problem, **ends)
    if 0 <= text.find(end_of_turn, name_at) < output_at:
        return TemplateLayout(end_of_turn, opener, string_arguments, **ends)
    call = (_with_string_arguments(with_calls) if string_arguments else with_calls)[:2]
    call_end, problem = _call_end_of_turn(tokenizer, text, call, name_at, output_at, markers, turn_opener)
    if call_end is None:
        problem = (
            f"the chat template does not close tool-call turns with {end_of_turn!r} before the tool result: {problem}"
        )
        return TemplateLayout(end_of_turn, None, string_arguments, tool_call_problem=problem, **ends)
    return TemplateLayout(end_of_turn, opener, string_arguments, call_end_of_turn=call_end, **ends)


def _from_user_message(text: str, rendered: str) -> str:
    """``rendered`` (the probe's user message alone) with everything up to the end of that
    message's text taken from ``text`` (the whole probe conversation); ``rendered`` as it is when
    either lacks the message."""
    in_text, in_rendered = text.find(_PROBE_USER), rendered.rfind(_PROBE_USER)
    if in_text < 0 or in_rendered < 0:
        return rendered
    return text[: in_text + len(_PROBE_USER)] + rendered[in_rendered + len(_PROBE_USER) :]


def _turn_headers(text: str) -> list[str]:
    """What the plain probe ``text`` renders between each user message and the reply after it (the
    earlier turn's, then the last one's); ``[]`` when a reply is not found after its user message."""
    headers = []
    for user, reply in ((_PROBE_USER, _PROBE_REPLY), (_PROBE_USER2, _PROBE_REPLY2)):
        at = text.find(user)
        found = text.find(reply, at + len(user)) if at >= 0 else -1
        if found < 0:
            return []
        headers.append(text[at + len(user) : found])
    return headers


def _assistant_header(text: str) -> str:
    """The text between a user message and the reply after it in the plain probe ``text``, as far as
    it is the same after both user messages (see :attr:`TemplateLayout.assistant_header`)."""
    headers = _turn_headers(text)
    if not headers:
        return ""
    header = headers[0][: _common_prefix_length(*headers)]
    # A think opener the template writes for the model belongs to the reasoning, whose labels start there.
    think = re.search(r"<(?:\w+:)?think>", header)
    return header[: think.start()] if think else header


_KIMI_CALL_ID = f"functions.{_PROBE_FUNCTION}:0"
_PROBE_IDS = re.compile(re.escape(_PROBE_CALL_ID))
_TAGS = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")


def _probe_call(call_id: str) -> dict:
    """The probe's tool call (:data:`_PROBE_FUNCTION` with :data:`_PROBE_ARGUMENTS`) under ``call_id``."""
    return {"id": call_id, "type": "function", "function": {"name": _PROBE_FUNCTION, "arguments": _PROBE_ARGUMENTS}}


def _writes_id_for_name(tokenizer) -> bool:
    """Whether the template renders a tool call's id, and not its function name, before its arguments
    (Kimi-K2-Thinking: ``<|tool_call_begin|>{{ tool_call['id'] }}<|tool_call_argument_begin|>``)."""
    call = _probe_call(_PROBE_CALL_ID)
    messages = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "name": _PROBE_FUNCTION, "content": _PROBE_TOOL_OUTPUT},
    ]
    for rendered in (messages, _with_string_arguments(messages)):
        try:
            text = _render(tokenizer, rendered, _PROBE_TOOLS)
        except Exception:  # noqa: BLE001 - a template that fails this probe is judged by the main one
            continue
        user_end = text.find(_PROBE_USER)
        if user_end < 0:
            return False
        user_end += len(_PROBE_USER)
        arguments = rendered[1]["tool_calls"][0]["function"]["arguments"]
        found = [at for form in _argument_forms(arguments) if (at := text.find(form, user_end)) >= 0]
        if not found:
            continue
        args_at = min(found)
        return text.find(_PROBE_FUNCTION, user_end, args_at) < 0 <= text.find(_PROBE_CALL_ID, user_end, args_at)
    return False


def _generated_header(tokenizer, markers) -> str:
    """The text the model writes between a prompt with no generation prompt and its reply's own
    text (see :attr:`TemplateLayout.generated_header`), without and with a tool list (Hunyuan-A13B
    writes ``助手：`` only where tools are given); ``""`` where there is none, or where it holds a
    special token (then it is the template's markup, not text the model writes)."""
    user = {"role": "user", "content": _PROBE_USER}
    for tools in (None, _PROBE_TOOLS):
        try:
            prompt = _render(tokenizer, [user], tools, add_generation_prompt=True)
            full = _render(tokenizer, [user, {"role": "assistant", "content": _PROBE_REPLY}], tools)
        except Exception:  # noqa: BLE001 - a template that fails this probe has no header to learn from it
            continue
        at = full.find(_PROBE_REPLY, len(prompt))
        if not full.startswith(prompt) or prompt.find(_PROBE_USER) < 0 or at < 0:
            continue
        generated = full[len(prompt) : at]
        if generated.strip() and not any(m in generated for m in markers):
            return generated
    return ""


def _tool_result_prompt(tokenizer, until_result: list[dict]) -> str | None:
    """What the prompt an engine feeds the model after the tool result ending ``until_result`` holds
    after the result's text (see :attr:`TemplateLayout.tool_result_prompt`); ``None`` when it cannot tell."""
    try:
        prompt = _render(tokenizer, until_result, _PROBE_TOOLS, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - the probe without the prompt rendered; this one has nothing to learn
        return None
    at = prompt.rfind(_PROBE_TOOL_OUTPUT)
    return prompt[at + len(_PROBE_TOOL_OUTPUT) :] if at >= 0 else None


def _generation_prompt(tokenizer, tools, markers, messages: list[dict] | None = None) -> str:
    """What ``add_generation_prompt=True`` appends to a conversation that ends with a user message
    (or to ``messages``, whose last message's text it must render unchanged); ``""`` when it appends
    nothing (Mistral: ``[/INST]`` closes the user message; DeepSeek and Gemma 4 after a tool result,
    where the model goes on in its own turn) or renders the last message differently from the
    conversation without it.

    A template that writes its prompt whether asked or not (Command R7B ends every rendering with
    ``<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>``) has, after a
    user message, the part of that ending which a reply rendered there lacks (its empty thinking
    block; the reply has ``<|START_RESPONSE|>`` in its place): what an engine feeds the model and
    history turns are not trained after. Only the user-message probe looks for it."""
    either_way = messages is None
    messages = messages or [{"role": "user", "content": _PROBE_USER}]
    last = messages[-1]["content"]
    try:
        base = _render(tokenizer, messages, tools)
        prompt = _render(tokenizer, messages, tools, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - the plain probe rendered; a template this one fails has no header to learn
        return ""
    shared = _common_prefix_length(base, prompt)
    if shared == len(prompt) and either_way:
        try:
            replied = _render(tokenizer, [*messages, {"role": "assistant", "content": _PROBE_REPLY}], tools)
        except Exception:  # noqa: BLE001 - it rendered without the reply; no prompt to learn from this one
            return ""
        shared = _common_prefix_length(prompt, replied)
    if prompt.find(last) < 0 or shared < prompt.rfind(last) + len(last):
        return ""
    # Phi-3.5 ends the prompt-less rendering with `<|endoftext|>` and the prompt with `<|assistant|>`:
    # the shared `<|` belongs to the prompt's token.
    for marker in markers:
        at = prompt.rfind(marker, 0, shared + len(marker) - 1)
        if 0 <= at < shared < at + len(marker):
            shared = at
    return prompt[shared:]


def _call_end_of_turn(tokenizer, text, call_turn, name_at, output_at, markers, turn_opener):
    """``(token, "")`` that closes the probe's tool-call turn (rendered in ``text``) when the plain
    turns' end-of-turn token does not, or ``(None, why)``.

    The engine stops where the template starts the tool message, so the call's turn ends at the last
    special token before the opener of the next message (gpt-oss's ``<|call|>`` before ``<|start|>``,
    functionary's ``<|eom_id|>`` before ``<|start_header_id|>``, Solar-Open's ``<|calls|>`` before
    ``<|begin|>``). Where a role token both ends a turn and opens the next (GLM: ``turn_opener`` is
    ``None``), it is the first special token the tool message adds to the rendering of the call turn
    alone (``<|observation|>``: GLM's generation config stops on it, with ``<|user|>``).
    """
    arguments = call_turn[1]["tool_calls"][0]["function"]["arguments"]
    found = [at + len(form) for form in _argument_forms(arguments) if 0 <= (at := text.find(form, name_at)) < output_at]
    after = min(found) if found else _argument_values_end(text, arguments, name_at, output_at)
    if after is None:
        return None, "its arguments are not found before the tool result"
    if turn_opener is not None:
        opens = text.find(turn_opener, after, output_at)
        closer = _last_marker(text[after:opens], markers) if opens >= 0 else None
        if closer is not None:
            return closer, ""
    try:
        alone = _render(tokenizer, call_turn, _PROBE_TOOLS)
    except Exception as exc:  # noqa: BLE001 - a template that wants a tool result after a call
        return None, f"it cannot render a conversation that ends with a tool call ({type(exc).__name__}: {exc})"
    if turn_opener is not None:
        return _in_turn_call_end(text, alone, after, output_at, markers, turn_opener)
    closer = _first_marker(text[len(alone) : output_at], markers) if text.startswith(alone) else None
    if closer is None or len(alone) < after:
        return None, "no special token stands between the tool call and its result"
    return closer, ""


def _in_turn_call_end(text, alone, after, output_at, markers, turn_opener):
    """``(token, "")`` that ends a tool call written inside the model's turn, or ``(None, why)``.

    Gemma 4 and Apertus render the call, its tool result and the answer in one model turn
    (``<|tool_call>...<tool_call|><|tool_response>response:...<tool_response|>answer<turn|>``). A
    conversation that ends with the call is rendered up to the token the model writes to hand over
    to the tool (Gemma 4's ``<|tool_response>``, one of its generation config's stop ids; Apertus'
    ``<|tools_suffix|>``): the call's span ends there, the tool result stays unlabelled and the answer
    after it is a span of its own. Without such a token one span would train the tool's text.
    """
    closer = _last_marker(alone[after:], markers) if text.startswith(alone) and len(alone) <= output_at else None
    if closer is None or not alone.endswith(closer):
        return None, (
            f"it renders the tool result inside the assistant's turn (no {turn_opener!r} between the call and "
            "the result, and no special token ends a conversation that ends with the call), so the call's tokens "
            "cannot be told apart from the tool's"
        )
    return closer, ""


def _json_spellings(value) -> list[str]:
    """How templates' ``tojson`` filters spell a value: unicode kept or escaped, compact or spaced."""
    return [
        json.dumps(value, ensure_ascii=False),
        json.dumps(value),
        json.dumps(value, ensure_ascii=False, separators=(",", ":")),
    ]


def _argument_forms(arguments) -> list[str]:
    if isinstance(arguments, str):
        return [arguments]
    forms = [*_json_spellings(arguments), json.dumps(arguments, ensure_ascii=False, sort_keys=True)]
    return list(dict.fromkeys(forms))


def _value_forms(value) -> list[str]:
    """How templates that render arguments one by one (XML-style parameter blocks) spell a value:
    strings verbatim; other values with ``tojson`` or, where the template applies ``|string``
    (Qwen3-Coder to numbers and booleans, Seed-OSS to everything), as Python prints them."""
    if isinstance(value, str):
        return [value]
    return list(dict.fromkeys([*_json_spellings(value), str(value)]))


def _argument_values_end(text: str, arguments, cursor: int, stop: int) -> int | None:
    """Where the last of a call's argument values ends when each is rendered, in order, in
    ``text[cursor:stop]``; ``None`` when one is not. Qwen3-Coder/3.5, Nemotron-3, Step-3.5,
    DeepSeek-V3.2, MiniMax-M2, Seed-OSS and GLM render no JSON object but one XML-like block per
    argument; the markup around the values is the template's and lies inside the turn's span anyway.
    Gemma 4 writes its own object syntax (``{dimensions:[5,3],shape:<|"|>rectangle<|"|>}``): keys
    sorted, nested lists and objects spelled value by value too."""
    if isinstance(arguments, str):
        try:
            arguments = loads_json(arguments) if arguments.strip() else {}
        except JSONTextError:
            return None
    if not isinstance(arguments, dict):
        return None
    return _value_end(text, arguments, cursor, stop, top=True)


def _value_end(text: str, value, cursor: int, stop: int, top: bool = False) -> int | None:
    """Where ``value`` ends when rendered at or after ``cursor`` in ``text[:stop]``: whole (a string
    verbatim, anything else as JSON or as Python prints it), or, for a list or an object, item by
    item in order (an object's values in its own key order, else sorted by key, as ``dictsort``)."""
    if not top:
        found = [(at, len(form)) for form in _value_forms(value) if (at := text.find(form, cursor, stop)) >= 0]
        if found:
            at, size = min(found)
            return at + size
    if isinstance(value, dict):
        orders = [list(value.values()), [value[k] for k in sorted(value)]]
    elif isinstance(value, list):
        orders = [value]
    else:
        return None
    for items in orders:
        at = cursor
        for item in items:
            at = _value_end(text, item, at, stop)
            if at is None:
                break
        else:
            return at
    return None


def _locate_other(text: str, content: str, cursor: int) -> tuple[int, int]:
    """Where a system, user or tool message's text is rendered at or after ``cursor``, and its
    length there; ``(-1, 0)`` when it is not. Llama 3.1/3.2 render a string tool result with
    ``|tojson``: quoted, with its newlines and quotes escaped."""
    if not content:
        return -1, 0
    for form in (content, json.dumps(content, ensure_ascii=False)[1:-1], json.dumps(content)[1:-1]):
        at = text.find(form, cursor)
        if at >= 0:
            return at, len(form)
    return -1, 0


def _after_following(text: str, messages: list[dict], i: int, cursor: int, found: int, end: int) -> bool:
    """Whether message ``i`` (found at ``text[found:end]``) is a system prompt that is not rendered
    where it stands but after the message that follows it, so the cursor must stay before the turns
    rendered ahead of that copy: Mistral Nemo and v0.3 move it into the last user turn when the
    conversation ends with a user message, and render it nowhere otherwise (``found`` is then another
    message's copy of its words, a reply "Yes" to the system prompt "Yes").

    Only a system prompt is ever moved, and only past the user or tool message that follows it,
    which must be rendered between the cursor and it, and not again after it (other than inside
    the later messages' own text: a first user message "Hi" inside a last "Hi again"). Text the
    template inserts itself (Llama 3.1's date line, Qwen2.5's default system prompt, a tool list
    before the last user message) may hold any message's words: a weaker test kept the cursor before
    a user message whose reply ("4", "helpful") was in that text, and the reply was then "found"
    there and that text labelled.
    """
    if messages[i]["role"] != "system" or i + 1 >= len(messages) or messages[i + 1]["role"] == "assistant":
        return False
    following = (messages[i + 1].get("content") or "").strip()
    if not following:
        return False
    before, size = _locate_other(text[:found], following, cursor)
    if before < 0:
        return False
    # Counted, not searched for: later messages may hold its words ("ok" in "Please book it.").
    later = sum((m.get("content") or "").count(following) for m in messages[i + 2 :])
    return text.count(text[before : before + size], end) <= later


def assistant_spans(
    text: str,
    messages: list[dict],
    layout: TemplateLayout,
    stripped_reasoning: str = "train",
    context_turns: list[int] | None = None,
    unprompted_turns: list[tuple[int, str, str]] | None = None,
) -> list[tuple[int, int]]:
    """Character spans of ``text`` (the rendered conversation) that the assistant messages produced.

    Each span runs from where the turn's generation prompt ends (``layout.generation_prompt``: what
    the model writes after it, such as gpt-oss's ``<|channel|>final<|message|>``, is its own), else
    from the assistant's first own text (its reasoning, content, or the opener of its first tool
    call), to the end-of-turn token that closes the turn. The prompt itself and an empty think block
    the template inserts before the content are outside (see :func:`_generated_start`). Messages are
    located in order, each search starting after the previous message (after a user message, past
    the template's :attr:`TemplateLayout.assistant_header` where it follows; after a tool result,
    past that header or the generation prompt where the reply would overlap it; past the turn's own
    rendered reasoning where that holds the reply's words), and bounded by the
    turn's end-of-turn token; only a system prompt may be found out of order (see :func:`_after_following`),
    so a reply is never "found" in text the template inserted before the message it answers.

    Args:
        text: the rendered conversation.
        messages: the normalized messages it was rendered from.
        layout: the template's :class:`TemplateLayout`.
        stripped_reasoning: what to do with an assistant turn before the last user message whose
            reasoning (``reasoning_content`` or ``<think>`` in its content) the template does not render
            (Qwen3, QwQ): ``"train"`` labels what is rendered (the call or answer without its
            thinking); ``"context"`` leaves the turn unlabelled, like a ``weight: 0`` message, so the
            model is not taught to act without thinking. The turn answering the last user message is
            refused either way.
        context_turns: a list that receives the index of each turn left unlabelled by ``"context"``.
        unprompted_turns: a list that receives ``(index, the text rendered before its labels, the prompt
            it lacks)`` for each trained turn that does not hold the prompt an engine would feed the
            model there (``layout.generation_prompt``; after a tool result, where the template's prompt
            there differs, the result's closing and that prompt, ``layout.tool_result_prompt``;
            see :func:`_generated_start`): a thinking template's turns without the prompt's ``<think>``
            (history turns, or every turn of data without reasoning), Gemma 4's turns without its empty
            thought channel, an answer Apertus renders inside the call's turn.

    Raises:
        ConversationError: when a message's content or tool calls are not in the rendered text (the
            template drops or rewrites them), or the turn's end cannot be told apart from the next message.
    """
    _end_of_turn(layout)  # a template whose turns cannot be found says so
    ends = layout.end_tokens
    finder = _EndFinder(text, ends)
    after_result = layout.tool_result_prompt
    # The template's own text after a tool result (DeepSeek-V3's `<｜tool▁output▁end｜>`) is no next
    # message: also without the tool prompt, which a history turn may lack (DeepSeek-V3.2's `<think></think>`).
    prompt_there = layout.tool_generation_prompt or ""
    if not prompt_there and layout.generation_prompt and (after_result or "").endswith(layout.generation_prompt):
        # Command R7B writes its prompt after a result whether asked or not; an answer there lacks it.
        prompt_there = layout.generation_prompt
    closing = after_result[: len(after_result) - len(prompt_there)] if after_result else ""
    # Mistral's `, "call_id": "probe0001"}[/TOOL_RESULTS]` holds the probe's id: the pieces around it;
    # and its tags one by one, which a template may space out in a longer conversation (Hermes writes
    # `</tool_response>\n<|im_end|>` before a later turn, `</tool_response><|im_end|>` at the end).
    pieces = [p for p in _PROBE_IDS.split(closing) if p] if _PROBE_CALL_ID in closing else []
    pieces += _TAGS.findall(closing)
    markup = _markup(
        layout.assistant_header,
        layout.generation_prompt,
        layout.tool_generation_prompt,
        after_result,
        closing,
        *pieces,
        *ends,
    )
    # After a tool result an engine whose template writes no header there (DeepSeek, Gemma 4) feeds the
    # model the conversation up to the result's closing: the model writes all after it.
    result_prompt = after_result if layout.tool_generation_prompt != layout.generation_prompt else None
    spans: list[tuple[int, int]] = []
    cursor = 0
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    for i, message in enumerate(messages):
        content = message.get("content") or ""
        if message["role"] != "assistant":
            found, size = _locate_other(text, content.strip(), cursor)
            header = layout.assistant_header
            answered = i + 1 < len(messages) and messages[i + 1]["role"] == "assistant"
            if found >= 0 and header and message["role"] == "user" and answered:
                # A user message whose words the template also writes before it (a user saying "Today"
                # under Llama 3.1's date line) is the copy the assistant header follows, unless that
                # copy lies past another assistant header (a later turn's identical message): the
                # copy right before the first header after the cursor.
                own = content.strip()
                at = text.find(header, cursor) - len(own)
                if at > found and text.startswith(own, at):
                    found, size = at, len(own)
            if found < 0 and content.strip() and message["role"] in ("user", "tool"):
                # Not found, the cursor would stay before this message, and the next assistant
                # reply could be "found" inside it (a tool result that quotes the reply's words).
                raise ConversationError(
                    f"message {i} ({message['role']}) is not in the rendered chat template as written or as a "
                    "JSON string, so the assistant turns after it cannot be located"
                )
            if found >= 0 and not _after_following(text, messages, i, cursor, found, found + size):
                cursor = found + size
            continue
        start, turn_from, stripped = None, cursor, False
        if content.strip():
            later = tuple(_call_name(c) for c in message.get("tool_calls") or [])[:1]
            if i + 1 < len(messages):
                later += ((messages[i + 1].get("content") or "").strip(),)
            search_from = cursor
            header = layout.assistant_header
            if header and i and messages[i - 1]["role"] == "user" and text.startswith(header, cursor):
                # The reply is the model's text after its turn's header, not a word of the header.
                search_from = cursor + len(header)
            if i and messages[i - 1]["role"] == "tool":
                # After a tool result the template writes its own text (closing the result's turn)
                # before the reply: a reply found overlapping the first assistant header or generation
                # prompt after the result ("assistant" in `<|im_start|>assistant`) is that text.
                at = text.find(content.strip(), cursor)
                for written in filter(None, (header, layout.generation_prompt)):
                    h = text.find(written, cursor)
                    if 0 <= at and 0 <= h < at + len(content.strip()) and at < h + len(written):
                        search_from = max(search_from, h + len(written))
            reasoning = _reasoning_of(message)
            if reasoning:
                # A reply whose words its own reasoning also holds ("...so the answer is 4." / "4")
                # would be found inside the rendered think block: the reply comes after it.
                r = text.find(reasoning, search_from)
                at = text.find(content.strip(), search_from)
                if r >= 0 and r <= at < r + len(reasoning):
                    search_from = r + len(reasoning)
            # A weight-0 turn is context: its dropped reasoning trains no answer without its thinking.
            start, cursor, stripped = _locate_content(
                text,
                content,
                search_from,
                i,
                final=i > last_user and message.get("weight") != 0,
                later=later,
                followed=i + 1 < len(messages),
                last=layout.last_turn_reasoning,
            )
        calls = message.get("tool_calls") or []
        if calls and layout.tool_call_opener is None:
            raise ConversationError(f"message {i} has tool calls, but {layout.tool_call_problem}")
        for j, call in enumerate(calls):
            fn = call.get("function", call)
            if start is None:
                # Solar-Open writes the call's id inside the opener (the probe's id when it was learned).
                opener = layout.tool_call_opener.replace(_PROBE_CALL_ID, str(call.get("id") or ""))
                needle = opener + fn["name"]
                at = text.find(needle, cursor)
                named = text.find(fn["name"], cursor)
                if named >= 0 and at + len(opener) != named and re.search(r"\d", opener):
                    # Command-R7B numbers the calls of a conversation inside the opener ("tool_call_id": "1")
                    counted = _counted(opener).search(text, cursor, named)
                    if counted:
                        opener = text[counted.start() : named]
                        needle, at = opener + fn["name"], counted.start()
                # Some templates open a later turn's calls with only the tail of the opener
                # (DeepSeek-V3 emits <｜tool▁calls▁begin｜> once per conversation; Qwen3.5 and
                # Step-3.5 put the probe's `</think>` only into turns after the last user message):
                # start at the longest tail of the opener that precedes the name. The whole opener
                # found beyond an end-of-turn token belongs to a later turn's call, not to this one.
                tail = _common_suffix_length(text[max(cursor, named - len(opener)) : named], opener)
                if tail < len(opener):
                    # Whitespace where the opener was cut is the header's (`assistant\n`), not the call's.
                    piece = opener[-tail:] if tail else ""
                    tail = len(piece.lstrip())
                if at >= 0 and (at + len(opener) == named or not tail or finder.first(named, at)[0] < 0):
                    start = at
                elif named >= 0 and tail:
                    needle, at = fn["name"], named
                    start = at - tail
                else:
                    at = -1
            else:
                # Later pieces lie within this turn, before its end-of-turn token.
                stop = finder.first(cursor)[0]
                needle = fn["name"]
                at = text.find(needle, cursor, len(text) if stop < 0 else stop)
                opener = layout.tool_call_opener.replace(_PROBE_CALL_ID, str(call.get("id") or ""))
                if at < 0 and j == 0 and stop >= 0 and text.startswith(opener + needle, stop):
                    # GigaChat writes the call as a message of its own role after the text, opened with
                    # the end-of-turn token (`text<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": ...`):
                    # the model generates that opener too, as it does for a turn that is only a call.
                    at = stop + len(opener)
            if at < 0:
                if j == 0 and start is not None and text.find(fn["name"], turn_from, start) >= 0:
                    raise ConversationError(
                        f"message {i}: the chat template renders this turn's tool calls before its content, "
                        "which cannot be labelled as one turn; put the text in a message of its own"
                    )
                raise ConversationError(
                    f"message {i} tool_calls[{j}] ({fn['name']!r}) is not in the rendered chat template"
                )
            cursor = at + len(needle)
            stop = finder.first(cursor)[0]
            stop = len(text) if stop < 0 else stop
            for form in _argument_forms(fn.get("arguments", {})):
                at = text.find(form, cursor, stop)
                if at >= 0:
                    cursor = at + len(form)
                    break
            else:
                after = _argument_values_end(text, fn.get("arguments", {}), cursor, stop)
                if after is None:
                    raise ConversationError(
                        f"message {i} tool_calls[{j}] arguments are not rendered by the chat template, neither as "
                        "one JSON object nor value by value in order before the end of the turn"
                    )
                cursor = after
        if start is None:
            raise ConversationError(f"message {i}: the chat template renders nothing of this assistant message")
        start, dropped = _with_reasoning(
            text,
            message,
            turn_from,
            start,
            i,
            final=i > last_user,
            followed=i + 1 < len(messages),
            last=layout.last_turn_reasoning,
        )
        own, expected = start, layout.generation_prompt
        start, prompted = _generated_start(text, expected, ends, turn_from, own)
        if i and messages[i - 1]["role"] == "tool" and result_prompt is not None:
            # After a tool result an engine feeds the model another prompt (none at all for DeepSeek):
            # the labels start where the result's closing and that prompt end (Gemma 4's model
            # writes `<|channel>thought\n` before its reasoning there).
            expected = result_prompt
            start, prompted = _generated_start(text, expected, ends, turn_from, own)
        generated = layout.generated_header
        if generated and start - len(generated) >= turn_from and text.startswith(generated, start - len(generated)):
            # Hunyuan-A13B's prompt ends before `助手：`, which the model writes before a text answer.
            start -= len(generated)
        stripped |= dropped
        if i + 1 < len(messages):
            # Found beyond the next message: this turn's own text was not rendered where expected.
            following = (messages[i + 1].get("content") or "").strip()
            # The header is the template's own text: a next message "assistant" is not Qwen's `<|im_start|>assistant`.
            if _past(text, (following,), turn_from, start, markup):
                raise ConversationError(f"message {i}: not rendered before message {i + 1} by the chat template")
        close, closer = finder.first(cursor)
        if close < 0:
            raise ConversationError(
                f"message {i}: no {_spelled(ends)} closes this assistant turn in the rendered chat template"
            )
        # The tail between the assistant's last own text and the end-of-turn token is template markup;
        # if the next message's text is in it, the turn was not closed where we think.
        if i + 1 < len(messages):
            following = (messages[i + 1].get("content") or "").strip()
            if _past(text, (following,), cursor, close):
                raise ConversationError(
                    f"message {i}: the chat template does not close this assistant turn with {_spelled(ends)} "
                    f"before message {i + 1}"
                )
        end = close + len(closer)
        if message.get("weight") != 0:  # weight 0 (OpenAI fine-tuning format): context, not trained
            if stripped and stripped_reasoning == "context":
                if context_turns is not None:
                    context_turns.append(i)
            else:
                spans.append((start, end))
                if not prompted and unprompted_turns is not None:
                    unprompted_turns.append((i, text[turn_from:start], expected))
        cursor = end
    if (
        not spans
        and stripped_reasoning == "context"
        and any(m["role"] == "assistant" and m.get("weight") != 0 for m in messages)
    ):
        raise ConversationError(_every_reasoning_dropped(messages, layout.last_turn_reasoning))
    return spans


def _counted(opener: str) -> re.Pattern:
    """A tool-call opener with each number in it standing for any number, anchored at the search's end."""
    return re.compile(
        "".join(r"\d+" if part.isdigit() else re.escape(part) for part in re.split(r"(\d+)", opener)) + r"\Z"
    )


class _EndFinder:
    """The first end-of-turn token of ``ends`` at or after a position of ``text``. A turn ends at the
    first one after its own text: gpt-oss closes a tool call with ``<|call|>``, an earlier answer
    with ``<|end|>`` and the last with ``<|return|>``.

    Each token's next position is kept and searched again only once the cursor has passed it:
    searching every token to the end at every turn was quadratic in the turns (4.5 s for 2,000
    turns of a template whose ``<|call|>`` a conversation without calls never contains)."""

    def __init__(self, text: str, ends: tuple[str, ...]) -> None:
        self.text, self.ends = text, ends
        self._next: dict[str, tuple[int, int]] = {}  # token -> (searched from, found at or -1)

    def _at(self, end: str, start: int) -> int:
        searched, found = self._next.get(end, (len(self.text) + 1, -1))
        if searched <= start and (found < 0 or found >= start):
            return found
        found = self.text.find(end, start)
        self._next[end] = (start, found)
        return found

    def first(self, start: int, stop: int | None = None) -> tuple[int, str]:
        """``(position, token)`` of the first end token in ``text[start:stop]``; ``(-1, "")`` when none."""
        limit = len(self.text) if stop is None else stop
        best, token = -1, ""
        for end in self.ends:
            at = self._at(end, start)
            if at >= 0 and at + len(end) > limit:
                at = -1
            if at >= 0 and (best < 0 or at < best or (at == best and len(end) > len(token))):
                best, token = at, end
        return best, token


def _spelled(ends: tuple[str, ...]) -> str:
    return " or ".join(repr(e) for e in ends)


def _with_reasoning(
    text: str,
    message: dict,
    turn_from: int,
    start: int,
    index: int,
    final: bool,
    followed: bool = False,
    last: tuple[str, ...] | None = None,
) -> tuple[int, bool]:
    """Where an assistant turn starts once its reasoning (``reasoning_content``, or ``thinking`` /
    ``reasoning`` in messages not normalized) is counted, and whether the template dropped that
    reasoning: the reasoning is the model's own text, so its think block is labelled with the answer
    when the template renders it (Qwen3's ``<think>``; Solar-Open's ``<|think|>`` message and
    gpt-oss's analysis channel start right after the generation prompt, see :func:`_generated_start`).

    Templates that drop the reasoning of earlier turns (Qwen3) are reported to the caller (see
    ``stripped_reasoning`` of :func:`assistant_spans`); one that drops it from the turn answering
    the last user message would train the answer alone, so that is refused, unless the turn has
    ``weight: 0`` (context, trained on nothing). ``followed`` and ``last``: see :func:`_reasoning_dropped`.
    """
    reasoning = _reasoning_of(message)
    if not reasoning:
        return start, False
    at = text.find(reasoning, turn_from, start)
    if at < 0:
        if final and message.get("weight") != 0:
            raise ConversationError(
                _reasoning_dropped(
                    index, "does not render this turn's reasoning_content", followed, _reasoning_kind(message), last
                )
            )
        return start, True
    opener = text.rfind("<think>", turn_from, at)
    return (opener if opener >= 0 else at), False


#: How much of the text before an unprompted turn's labels its note quotes (the header it was rendered after).
_HEADER_SHOWN = 60
#: How far back a quoted header may start early so that it does not open inside a special token.
_TAG_REACH = 40


def _shown_header(header: str) -> str:
    """The tail of the text before a turn that its note quotes: the last :data:`_HEADER_SHOWN`
    characters, from the start of the special token they would cut (``<|END_OF_TURN_TOKEN|>``,
    not ``|>``). Only the quote is short: how the text differs from the prompt is found on all of
    it (:func:`_prompt_difference`)."""
    cut = len(header) - _HEADER_SHOWN
    if cut <= 0:
        return header
    tag = header.rfind("<", max(0, cut - _TAG_REACH), cut)
    closes, opens = header.find(">", cut), header.find("<", cut)
    if tag >= 0 and header.find(">", tag, cut) < 0 and closes >= 0 and (opens < 0 or closes < opens):
        cut = tag
    return header[cut:]


# An empty reasoning block the template writes for a turn without reasoning (Qwen3's
# `<think>\n\n</think>\n\n`, GLM-4.6's `<think></think>`, Qwen3.5's `\n</think>\n\n` after the
# prompt's `<think>\n`), ending where the turn's own text starts.
_EMPTY_REASONING = re.compile(r"<((?:\w+:)?think)>\s*</\1>\s*\Z")


def _generated_start(text: str, prompt: str, ends: tuple[str, ...], turn_from: int, start: int) -> tuple[int, bool]:
    """``(where the labels of an assistant turn start, whether the turn holds its generation prompt)``.

    Labels start at the end of the turn's generation prompt (found as
    the last copy of ``prompt`` starting in ``text[turn_from:start]``), since an engine feeds the
    model that prompt and the model writes everything after it: gpt-oss's ``<|channel|>final<|message|>``,
    functionary v3.2's ``all\\n``, Solar-Open's ``<|content|>``, Seed-OSS's ``<seed:think>``. Labels
    that began inside the prompt (its ``<think>\\n``) start after it.

    ``start`` (the turn's first own text) is kept where the turn has no such header (a history turn
    the template renders differently from the prompt, an answer inside the call's turn), where
    something between the header and ``start`` ends a turn, and where that text is an empty reasoning
    block: a template's non-thinking prompt holds that block (Qwen3 and Qwen3.5 with
    ``enable_thinking=False``), and trained, it would teach a thinking model to skip its reasoning.
    In the first two cases the turn does not hold the prompt (an engine feeds the model a header the
    turn was never trained after); in the third it does, and so does every turn of a template with
    no generation prompt.
    """
    if not prompt:
        return start, True
    at = text.rfind(prompt, turn_from, start + len(prompt))
    if at < 0:
        return start, False
    header_end = at + len(prompt)
    if header_end >= start:
        return header_end, True
    between = text[header_end:start]
    if any(end in between for end in ends):
        return start, False
    if _EMPTY_REASONING.search(text, at, start):
        return start, True
    return header_end, True


def _end_of_turn(layout: TemplateLayout) -> str:
    if layout.end_of_turn is None:
        raise ChatTemplateError(f"cannot find assistant turns in this chat template: {layout.end_of_turn_problem}")
    return layout.end_of_turn


def _call_name(call: dict) -> str:
    return call.get("function", call).get("name") or ""


def _markup(*pieces: str | None) -> tuple[str, ...]:
    """The template text :func:`_past` looks past: ``pieces`` and the think tags (each copy blanked,
    overlapping ones together: see :func:`_blanked`)."""
    return tuple(sorted(filter(None, {*pieces, "</think>", "<think>"}), key=len, reverse=True))


_THINK_TAGS = _markup()


def _past(text: str, later: tuple[str, ...], cursor: int, at: int, markup: tuple[str, ...] = _THINK_TAGS) -> bool:
    """Whether ``text[cursor:at]`` holds one of ``later``: a match at ``at`` lies beyond the turn's own span.

    Only whole words count, outside the template's own ``markup`` (see :func:`_markup`: the think
    tags, and where given its assistant header, generation prompts and end tokens): the turn's own
    header and ``<think>`` opener lie in the span too, and a tool named ``think`` (tau-bench's) or a
    next message that is a short word ("a", "in", "assistant") matched inside them, which refused the turn."""
    return any(piece and _whole_word_in(piece, _blanked(text[cursor:at], markup)) for piece in later)


def _blanked(span: str, markup: tuple[str, ...]) -> str:
    """``span`` with every character inside a copy of a ``markup`` piece made a space. Pieces overlap
    (the text after a tool result ends where Qwen's assistant header begins, `<|im_end|>`): blanking
    one piece after another broke the next, leaving `tool_response` to be taken for a next message."""
    covered: list[tuple[int, int]] = []
    for piece in markup:
        at = span.find(piece)
        while at >= 0:
            covered.append((at, at + len(piece)))
            at = span.find(piece, at + 1)
    if not covered:
        return span
    covered.sort()
    out, kept = [], 0
    for start, end in covered:
        if end > kept:
            start = max(start, kept)
            out.append(span[kept:start])
            out.append(" " * (end - start))
            kept = end
    out.append(span[kept:])
    return "".join(out)


def _whole_word_in(piece: str, span: str) -> bool:
    """Whether ``piece`` occurs in ``span`` with no word character glued to either end (a plain
    find loop: a regex compiled per message made 6,000-turn conversations 10x slower)."""
    at = span.find(piece)
    while at >= 0:
        before = span[at - 1] if at > 0 else " "
        after = span[at + len(piece)] if at + len(piece) < len(span) else " "
        if not (before.isalnum() or before == "_" or after.isalnum() or after == "_"):
            return True
        at = span.find(piece, at + 1)
    return False


def _locate_content(
    text: str,
    content: str,
    cursor: int,
    index: int,
    final: bool = False,
    later: tuple[str, ...] = (),
    followed: bool = False,
    last: tuple[str, ...] | None = None,
) -> tuple[int | None, int, bool]:
    """``(start, end, reasoning dropped)`` of an assistant message's content in the rendered text,
    from ``cursor`` on; ``start`` is ``None`` when the content is a think block alone (before a tool
    call) that the template dropped, and the turn starts at its call.

    ``final``: the message answers the last user message. Templates that drop the reasoning of
    earlier turns (Qwen3) keep it there; one that drops it there too (DeepSeek-R1-Distill) would
    train the answers alone, so the conversation is refused rather than silently losing it.

    ``later``: text rendered after this turn's own text starts (its first call's name, the next
    message's content): a think block found only past one of them is a later turn's, not this one's.

    ``followed`` and ``last``: see :func:`_reasoning_dropped`.
    """
    think = "</think>" in content
    for form in dict.fromkeys((content, content.strip())):
        at = text.find(form, cursor)
        if at >= 0 and not (think and _past(text, later, cursor, at)):
            return at, at + len(form), False
    if think:
        # Templates that split reasoning from the answer (Qwen3, DeepSeek) render the answer alone,
        # and the reasoning in a think block only for some turns.
        reasoning, answer = content.split("</think>", 1)
        reasoning = reasoning.split("<think>")[-1].strip()
        answer = answer.strip()
        if not answer and reasoning:
            # Reasoning written inline before a call (Hermes' reasoning-tool-use data): Qwen3 keeps
            # it only in turns after the last user message.
            r = text.find(reasoning, cursor)
            if r >= 0 and _past(text, later, cursor, r):
                r = -1  # a later turn's identical reasoning (Qwen3 keeps it after the last user message)
            if r >= 0:
                opener = text.rfind("<think>", cursor, r)
                close = text.find("</think>", r + len(reasoning))
                return (
                    (opener if opener >= 0 else r),
                    (close + len("</think>") if close >= 0 else r + len(reasoning)),
                    False,
                )
            if not final:
                return None, cursor, True
        at = text.find(answer, cursor) if answer else -1
        if at >= 0:
            start, dropped = at, False
            if reasoning:
                r = text.find(reasoning, cursor, at)
                if r >= 0:
                    opener = text.rfind("<think>", cursor, r)
                    start = opener if opener >= 0 else r
                elif not final:
                    dropped = True
                else:
                    raise ConversationError(
                        _reasoning_dropped(
                            index, "drops this turn's reasoning (<think>...</think>)", followed, "think", last
                        )
                    )
            return start, at + len(answer), dropped
    raise ConversationError(
        f"message {index}: the chat template does not render this assistant message's content verbatim, "
        "so its tokens cannot be labelled"
    )


def render_conversation(
    tokenizer, messages: list[dict], tools: list[dict] | None = None
) -> tuple[str, list[tuple[int, int]]]:
    """Render a conversation once and return ``(text, assistant character spans)``.

    With ``{% generation %}`` markers the spans are the template's own; otherwise they are located
    by :func:`assistant_spans` using the template's :class:`TemplateLayout` (and a template that leaves
    the last turn open gets its ``final_end_appended`` token after a last assistant message).
    """
    return _render_and_locate(tokenizer, template_layout(tokenizer), messages, tools, _render)[:2]


#: What :func:`tokenize_many` does with a system prompt the chat template does not render.
UNRENDERED_SYSTEM_PROMPT = ("ignore", "refuse", "into_first_user")
#: Notes :func:`tokenize_many` reports per conversation (see its ``notes``).
NOTE_SYSTEM_INTO_FIRST_USER = "system prompt prefixed to the first user message"
NOTE_REASONING_CONTEXT = "context only: the chat template drops this turn's reasoning"
#: A conversation with a trained turn rendered without the generation prompt before it; the note
#: (on its first such turn) ends with the text rendered there and the prompt an engine feeds instead.
NOTE_PROMPT_UNLIKE_TURN = "trained after a header that is not the generation prompt:"
#: What :func:`tokenize_many` does with assistant messages before the first user message (tau2 runs
#: open with the agent's greeting) when the chat template refuses them (Mistral: user first).
LEADING_ASSISTANT = ("refuse", "drop")
NOTE_LEADING_ASSISTANT_DROPPED = "assistant message(s) before the first user message left out"
NOTE_CALL_IDS_REWRITTEN = "tool-call ids rewritten as nine alphanumeric characters"
NOTE_CALL_IDS_NAMED = "tool-call ids rewritten as functions.NAME:INDEX"
NOTE_CALL_IDS_UNIQUE = "tool-call ids made unique"
_MOONSHOT_ID = re.compile(r"functions\.(.+):(\d+)")


class _TemplateRefusal(ConversationError):
    """The chat template itself raised on a conversation (its own rules: roles, call ids)."""


def _nine_character_ids(messages: list[dict]) -> list[dict] | None:
    """The messages with each tool-call id (and ``tool_call_id``) that is not nine alphanumeric
    characters renamed as rollouts and HFlow endpoints rename it
    (:func:`~lightning_agents.rollout.tool_calls.nine_character_call_ids`: nine hex digits of its
    hash; Mistral's templates refuse any other id; ids only pair a call with its result), so an
    HFlow trajectory trains in the context its verify model read; ``None`` when none needs it."""
    from lightning_agents.rollout.tool_calls import nine_character_call_ids

    renamed = nine_character_call_ids(messages)
    return None if renamed is messages else renamed


def _moonshot_ids(messages: list[dict]) -> list[dict] | None:
    """The messages with every tool call's id rewritten as Moonshot's ``functions.NAME:INDEX`` (INDEX
    counting the conversation's calls from 0, as vLLM numbers Kimi-K2's) and each tool result's
    ``tool_call_id`` as its call's; ``None`` when every id already names its call that way, once in
    its turn, and every result names its call.

    Kimi-K2-Thinking's template writes the id where the function name goes, so the model generates
    the id, and its deployments parse the name out of it: trained on ``call_abc`` it would learn to
    write ids no parser reads. The tool result's header (``## Return of ID``) shows the same id,
    as it does at inference, where the id is the one the model wrote. Results are paired with their
    calls as :func:`_paired_ids` pairs them.

    Raises:
        ConversationError: a tool result whose ``tool_call_id`` is no call's: which call it
            answers, and so the id its header shows, cannot be told.
    """
    turns = [[c.get("id") for c in m.get("tool_calls") or []] for m in messages if m["role"] == "assistant"]
    named = all(
        isinstance(cid, str) and (found := _MOONSHOT_ID.fullmatch(cid)) and found[1] == _call_name(c)
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
        for cid in (c.get("id"),)
    )
    keep = named and all(len(set(ids)) == len(ids) for ids in turns)  # Kimi's own API's ids: kept as they are
    out = _paired_ids(
        messages,
        lambda call, index: call["id"] if keep else f"functions.{_call_name(call)}:{index}",
        "Kimi-K2-Thinking's template heads a result with its call's id (functions.NAME:INDEX, which the model wrote)",
    )
    return None if keep and out == messages else out


def _unique_ids(messages: list[dict]) -> list[dict] | None:
    """The messages with every tool call given an id of its own (``call_INDEX``, INDEX counting the
    conversation's calls from 0) and each tool result its call's (see :func:`_paired_ids`); ``None``
    when every call already has an id no other call has and every result names one of them.

    For templates that pair a result with its call by id without writing the id
    (:attr:`TemplateLayout.call_ids_paired`): Command R7B heads a result with the number of the
    first call that has its id, so where a converter reused an id in a later turn (49 of the 200
    real tau-bench airline runs) the later call's result was shown as answering the earlier call.

    Raises:
        ConversationError: a tool result whose ``tool_call_id`` is no call's.
    """
    ids = [c.get("id") for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    if all(isinstance(i, str) for i in ids) and len(set(ids)) == len(ids):
        if all(m.get("tool_call_id") in ids for m in messages if m["role"] == "tool"):
            return None
    return _paired_ids(
        messages,
        lambda call, index: f"call_{index}",
        "the chat template heads a result with the number of the call that has its id",
    )


def _distinct_ids(messages: list[dict]) -> list[dict] | None:
    """The messages with every tool call whose id an earlier call has renamed, in the call and in
    the result answering it (see :func:`_paired_ids`), the first call with an id keeping it;
    ``None`` when no id repeats (or a result names no call: left as the data has it).

    For templates that show the ids (:attr:`TemplateLayout.call_ids_shown`): a conversation whose
    turns reuse ``call_0`` (a converter's ids, a rollout saved before session 43) trained
    Solar-Open on ``<|tool_response:name|>calculatorcalculator`` (its template names a result's
    tool by looking its id up among every call) and Mistral's on two results under one id.
    Rollouts store no such repeat (:func:`~lightning_agents.rollout.agent_turn.apply_reply`
    answers a written one as malformed, renames one it made up). A nine-character id is renamed to
    nine hex digits (Mistral's templates take no other), any other to ``ID_INDEX``."""
    ids = [c.get("id") for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    named = [i for i in ids if isinstance(i, str)]
    if len(set(named)) == len(named):
        return None
    from lightning_agents.rollout.tool_calls import is_nine_character_id

    taken, seen = set(named), set()

    def new_id_of(call: dict, index: int) -> Any:
        old = call.get("id")
        if not isinstance(old, str) or old not in seen:
            seen.add(old)
            return old
        k = 0
        while True:
            if is_nine_character_id(old):
                new = hashlib.sha256(f"{old}#{index}#{k}".encode()).hexdigest()[:9]
            else:
                new = f"{old}_{index}" if k == 0 else f"{old}_{index}_{k}"
            if new not in taken:
                taken.add(new)
                return new
            k += 1

    try:
        renamed = _paired_ids(messages, new_id_of, "the chat template shows the ids")
    except ConversationError:
        return None
    out = []
    for m, r in zip(messages, renamed):
        # a call or result without an id stays without one (not "id": None)
        if r.get("tool_calls"):
            calls = [c if c.get("id") is None else n for c, n in zip(m["tool_calls"], r["tool_calls"])]
            r = {**r, "tool_calls": calls}
        if m["role"] == "tool" and "tool_call_id" not in m and r.get("tool_call_id") is None:
            r = m
        out.append(r)
    return out


def _paired_ids(messages: list[dict], new_id_of, why: str) -> list[dict]:
    """The messages with each tool call's id replaced by ``new_id_of(call, index)`` (``index``
    counting the conversation's calls from 0) and each tool result's ``tool_call_id`` by its call's.

    A result answers the first call of the last call turn not yet answered that has its id: by
    order where a turn repeats an id (converters that use the function name as the id), as
    llama.cpp's Kimi template pairs them; one whose id no call of the turn has answers the latest
    earlier call with it. Results without an id answer the calls their turn's results with ids
    leave unanswered, in order: the results that follow a call turn are paired by id first, so an
    id-less result before one that names the first call answers the second call, not the first
    (which the named result would then answer too, leaving the second call without a result).

    Raises:
        ConversationError: a tool result whose ``tool_call_id`` is no call's: which call it
            answers cannot be told (``why`` says what the template does with it).
    """
    out: list[dict] = []
    latest: dict[Any, str] = {}  # an id of the data -> the id of its latest call
    pending: list[tuple[Any, str]] = []  # (id of the data, new id) of the last call turn's calls not yet answered
    answers: dict[int, str] = {}  # index of a result that follows its call turn -> the new id of its call
    index = 0
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            rewritten = []
            for c in m["tool_calls"]:
                new_id = new_id_of(c, index)
                index += 1
                if c.get("id") is not None:
                    latest[c["id"]] = new_id
                rewritten.append({**c, "id": new_id})
            pending = [(c.get("id"), r["id"]) for c, r in zip(m["tool_calls"], rewritten)]
            m = {**m, "tool_calls": rewritten}
            results = list(itertools.takewhile(lambda j: messages[j]["role"] == "tool", range(i + 1, len(messages))))
            # By id before by order: an id-less result must not take the call a later result names.
            for j in results:
                own = messages[j].get("tool_call_id")
                mine = next((k for k, (cid, _) in enumerate(pending) if cid == own), None) if own else None
                if mine is not None:
                    answers[j] = pending.pop(mine)[1]
            for j in results:
                if not messages[j].get("tool_call_id") and pending:
                    answers[j] = pending.pop(0)[1]
        elif m["role"] == "tool":
            own = m.get("tool_call_id")
            # A result after other messages (a user's) still answers the last turn's calls left.
            mine = next((k for k, (cid, _) in enumerate(pending) if cid == own), None) if own else None
            if mine is None and not own and pending:
                mine = 0
            if i in answers:
                m = {**m, "tool_call_id": answers[i]}
            elif mine is not None:
                m = {**m, "tool_call_id": pending.pop(mine)[1]}
            elif own in latest:
                m = {**m, "tool_call_id": latest[own]}
            elif own:
                raise ConversationError(
                    f"message {i} (tool): its tool_call_id {own!r} is the id of no tool call before it, so the "
                    f"call it answers cannot be told, and {why}"
                )
        out.append(m)
    return out


def _opening_assistant(messages: list[dict]) -> list[int]:
    """Indices of the assistant messages before the first user message, when only system messages
    stand beside them there (tau2's greeting); ``[]`` otherwise."""
    opening = []
    for i, m in enumerate(messages):
        if m["role"] == "user":
            return opening
        if m["role"] == "tool" or m.get("tool_calls"):
            return []
        if m["role"] == "assistant":
            opening.append(i)
    return []


def _meet_template_rules(tokenizer, layout, messages, tools, render, leading_assistant, refusal):
    """``(messages, origin, notes)`` changed so the chat template renders what it refused (``origin``:
    each message's index in the data), or raise: call ids rewritten when the template refuses the
    data's ids, and the opening assistant messages left out when ``leading_assistant`` is ``drop``
    (with ``refuse``, a refusal that names the setting)."""

    def renders(candidate) -> bool:
        try:
            render(tokenizer, _with_string_arguments(candidate) if layout.string_arguments else candidate, tools)
        except Exception:  # noqa: BLE001 - still refused
            return False
        return True

    renamed = _nine_character_ids(messages)
    if renamed is not None and renders(renamed):
        return renamed, list(range(len(messages))), [NOTE_CALL_IDS_REWRITTEN]
    opening = _opening_assistant(messages)
    kept = [i for i in range(len(messages)) if i not in opening]
    trimmed = [messages[i] for i in kept]
    for candidate, notes in ((trimmed, []), (_nine_character_ids(trimmed), [NOTE_CALL_IDS_REWRITTEN])):
        if opening and candidate is not None and renders(candidate):
            if leading_assistant != "drop":
                raise ConversationError(
                    f"message {opening[0]} (assistant): the chat template refuses a conversation that opens with "
                    f"the assistant before any user message ({refusal}); tau2 runs open with the agent's greeting: "
                    "set `leading_assistant: drop` (data.leading_assistant) to leave such opening assistant "
                    "messages out, or use a chat template that renders them (data.chat_template: file.jinja)"
                )
            return candidate, kept, [NOTE_LEADING_ASSISTANT_DROPPED, *notes]
    raise refusal


def _unrendered_system(text: str, messages: list[dict]) -> list[int]:
    """Indices of the system messages with text that ``text`` does not contain (as written or as JSON),
    or contains only where :func:`_after_following` puts it with no user turn left to move it into."""
    missing = []
    for i, m in enumerate(messages):
        prompt = (m.get("content") or "").strip()
        if m["role"] != "system" or not prompt:
            continue
        found, size = _locate_other(text, prompt, 0)
        # Its words only after the next message, and no user turn it could have been moved into
        # (system "Yes", reply "Yes" on Mistral Nemo): the reply's copy, not the prompt.
        if found < 0 or (
            not any(n["role"] == "user" for n in messages[i + 2 :])
            and _after_following(text, messages, i, 0, found, found + size)
        ):
            missing.append(i)
    return missing


def _system_into_first_user(messages: list[dict], indices: list[int]) -> list[dict] | None:
    """The messages with the system messages at ``indices`` prefixed to the first user message after
    them, joined by a blank line as Mistral's templates join them when they do render the prompt;
    ``None`` when a user message precedes one of them (its place in the conversation would change)."""
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    if first_user is None or max(indices) > first_user:
        return None
    prompt = "\n\n".join(messages[i]["content"].strip() for i in indices)
    out = [m for i, m in enumerate(messages) if i not in indices]
    user = out[first_user - len(indices)]
    out[first_user - len(indices)] = {**user, "content": f"{prompt}\n\n{user.get('content') or ''}"}
    return out


def _render_and_locate(
    tokenizer,
    layout,
    messages,
    tools,
    render,
    unrendered_system_prompt: str = "ignore",
    stripped_reasoning: str = "train",
    leading_assistant: str = "refuse",
) -> tuple[str, list[tuple[int, int]], list[str]]:
    """``(text, spans, notes)``: ``notes`` says what was changed or left unlabelled (``NOTE_*``)."""
    # Text parts joined as this template is given them (vLLM's server, rollouts): its own join
    # for one that loops over a message's parts (Mistral Small 3.2 glues them, not "\n").
    messages = [prompt_content(tokenizer, m) if TEXT_PARTS_KEY in m else m for m in messages]
    try:
        return _adapt_render_and_locate(
            tokenizer, layout, messages, tools, render, unrendered_system_prompt, stripped_reasoning, leading_assistant
        )
    except _TemplateRefusal as refusal:  # a plain ConversationError to the caller, as before
        raise ConversationError(str(refusal)) from None


def _adapt_render_and_locate(
    tokenizer, layout, messages, tools, render, unrendered_system_prompt, stripped_reasoning, leading_assistant
):
    notes: list[str] = []
    origin = list(range(len(messages)))  # each message's index in the data, for the notes
    if layout.call_id_names and (named := _moonshot_ids(messages)) is not None:
        messages, notes = named, [NOTE_CALL_IDS_NAMED]
    elif layout.call_ids_paired and (unique := _unique_ids(messages)) is not None:
        messages, notes = unique, [NOTE_CALL_IDS_UNIQUE]
    elif layout.call_ids_shown and (distinct := _distinct_ids(messages)) is not None:
        messages, notes = distinct, [NOTE_CALL_IDS_UNIQUE]
    try:
        text, spans, context, unprompted = _render_once(tokenizer, layout, messages, tools, render, stripped_reasoning)
    except _TemplateRefusal as refusal:
        messages, origin, changed = _meet_template_rules(
            tokenizer, layout, messages, tools, render, leading_assistant, refusal
        )
        notes += changed
        try:
            text, spans, context, unprompted = _render_once(
                tokenizer, layout, messages, tools, render, stripped_reasoning
            )
        except ConversationError as exc:
            if origin == list(range(len(origin))):  # only call ids rewritten: the numbers are the data's
                raise
            raise ConversationError(
                f"{exc} (message numbers count the conversation without its opening assistant message(s), left "
                "out as leading_assistant=drop asks)"
            ) from None
    missing = _unrendered_system(text, messages) if unrendered_system_prompt != "ignore" else []
    if missing:
        moved = None
        if unrendered_system_prompt == "into_first_user":
            moved = _system_into_first_user(messages, missing)
        if moved is None:
            raise ConversationError(_unrendered_system_message(origin[missing[0]], unrendered_system_prompt))
        text, spans, context, unprompted = _render_once(tokenizer, layout, moved, tools, render, stripped_reasoning)
        if _unrendered_system(text, [{"role": "system", "content": messages[i]["content"]} for i in missing]):
            raise ConversationError(
                f"message {origin[missing[0]]} (system): the chat template renders this system prompt neither where "
                "it stands nor prefixed to the first user message (unrendered_system_prompt: into_first_user)"
            )
        notes.append(NOTE_SYSTEM_INTO_FIRST_USER)
        origin = [k for j, k in enumerate(origin) if j not in missing]
    notes += [f"message {origin[i]}: {NOTE_REASONING_CONTEXT}" for i in context]
    if unprompted:
        # One note per conversation (the first such turn): the warning counts conversations.
        i, header, prompt = unprompted[0]
        where = f"message {origin[i]}: " if i >= 0 else f"generation block {-i}: "
        notes.append(
            f"{where}{NOTE_PROMPT_UNLIKE_TURN} {_shown_header(header)!r}, not {prompt!r} "
            f"({_prompt_difference(header, prompt)})"
        )
    return text, spans, notes


_OPENS_REASONING = re.compile(r"<(?:\w+:)?think>|<\|channel>thought")
_CLOSES_REASONING = re.compile(r"</(?:\w+:)?think>|<channel\|>")


def _prompt_difference(header: str, prompt: str) -> str:
    """How the text rendered before a turn (``header``: all of it since the previous turn) differs from the ``prompt`` an engine
    feeds the model there, in words for the warning: only in whitespace (chujiezheng's ChatML, whose
    prompt is indented), a think block the prompt opens (a thinking template's turns without
    reasoning), a closed empty one it holds (a non-thinking prompt before turns rendered otherwise),
    or whatever else the turn has in place of the prompt's end."""
    if "".join(header.split()).endswith("".join(prompt.split())):
        return "they differ in whitespace only"
    # The prompt's head is looked for as far back as the prompt is long (and the quoted header
    # beyond): Command R7B's 159-character prompt after a tool result ends 10 characters before
    # its answer's labels, past the quote's 60.
    header = header[-(len(prompt) + _HEADER_SHOWN) :]
    held, at = 0, -1
    for k in range(len(prompt), 0, -1):
        at = header.rfind(prompt[:k])
        # The prompt's start where the header ends, else a piece of it long enough not to be chance.
        if at >= 0 and (at + k == len(header) or k >= 3):
            held = k
            break
    if not held:
        return "none of the prompt is rendered before the turn"
    tag = prompt.rfind("<", 0, held)
    if 0 <= tag and prompt.find(">", tag, held) < 0:
        # `<｜Assistant｜></think>` vs `<｜Assistant｜><think></think>`: the tags differ, not their tails
        # (Command R7B's `<|START_RESPONSE|>` where its prompt has `<|START_THINKING|>`).
        held, at = tag, header.rfind(prompt[:tag]) if tag else at
    rest, missing = header[at + held :], prompt[held:]
    said = (
        f"the turn has {rest!r} where the prompt has {missing!r}"
        if rest
        else f"the turn lacks the prompt's {missing!r}"
    )
    if _CLOSES_REASONING.search(missing):
        return f"{said}, a closed (empty) think block of a non-thinking prompt"
    if _OPENS_REASONING.search(missing):
        return f"{said}, a think block the prompt opens, which turns without reasoning lack"
    return said


def _unrendered_system_message(index: int, setting: str) -> str:
    why = (
        f"message {index} (system): the chat template does not render this system prompt (Mistral v0.3 and "
        "Nemo templates show it only inside a final user turn, which a conversation that ends with the "
        "assistant's reply does not have), so every assistant turn would be trained without it"
    )
    if setting == "into_first_user":
        return why + "; it cannot be prefixed to the first user message because a user message precedes it"
    return (
        why + "; set `unrendered_system_prompt: into_first_user` (data.unrendered_system_prompt) to prefix it to "
        "the first user message (where the model sees it when served with a one-turn prompt), or use a chat "
        "template that renders it (data.chat_template: file.jinja)"
    )


def _render_once(tokenizer, layout, messages, tools, render, stripped_reasoning):
    """``(text, spans, context turns, unprompted turns)`` (see :func:`assistant_spans`)."""
    context: list[int] = []
    unprompted: list[tuple[int, str, str]] = []
    if layout.generation_markers:
        text, spans = _render_with_generation_marks(
            tokenizer, messages, tools, stripped_reasoning, context, layout.last_turn_reasoning
        )
        prompt, ends, turn_from = layout.generation_prompt, layout.end_tokens, 0
        # The trained messages in order, when there is one per block (else the block's number is given).
        owners = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("weight") != 0]
        owners = [i for i in owners if i not in context]
        for k, (start, end) in enumerate(spans):
            if not _generated_start(text, prompt, ends, turn_from, start)[1]:
                owner = owners[k] if len(owners) == len(spans) else -(k + 1)
                unprompted.append((owner, text[turn_from:start], prompt))
            turn_from = end
        return text, spans, context, unprompted
    _end_of_turn(layout)  # a template that cannot be used at all says so before any conversation
    rendered = _with_string_arguments(messages) if layout.string_arguments else messages
    try:
        text = render(tokenizer, rendered, tools)
    except Exception as exc:  # jinja raise_exception and type errors: the template refuses this conversation
        raise _TemplateRefusal(_render_failure(tokenizer, rendered, tools, render, exc)) from None
    if layout.final_end_appended and messages[-1]["role"] == "assistant":
        # GLM-4.x, Apertus and Apriel-1.6 leave the last turn open (a prompt to continue); a model
        # trained on such rows would never see how its last answer ends, and single-turn data would
        # never teach it to stop. Earlier turns end with the token that opens the next message
        # (GLM's <|user|> / <|observation|>, in its generation config's stop ids); the last one ends
        # with the EOS, as GLM-4's fine-tuning script appends it.
        text += layout.final_end_appended
    spans = assistant_spans(text, messages, layout, stripped_reasoning, context, unprompted)
    return text, spans, context, unprompted


def _render_failure(tokenizer, messages, tools, render, exc: Exception) -> str:
    """Why the template refused a conversation: its own error, and the cause when it is a missing tool list."""
    message = f"the chat template cannot render this conversation: {exc}"
    if tools:
        return message
    try:  # Hermes' tool_use template iterates over `tools`: "'NoneType' object is not iterable"
        render(tokenizer, messages, _PROBE_TOOLS)
    except Exception:  # noqa: BLE001 - it fails with tools too: its own error is the cause
        return message
    return (
        f"{message}; the chat template needs a tool list and this conversation has none: give the record its "
        "`tools`, or use a template that renders conversations without tools (data.chat_template: file.jinja)"
    )


def _render_with_generation_marks(
    tokenizer,
    messages,
    tools,
    stripped_reasoning: str = "train",
    context: list[int] | None = None,
    last: tuple[str, ...] | None = None,
) -> tuple[str, list[tuple[int, int]]]:
    from transformers.utils.chat_template_utils import render_jinja_template

    kwargs = {k: v for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)}
    try:
        with fixed_template_clock():  # transformers' own renderer, outside render_chat_template
            rendered, indices = render_jinja_template(
                conversations=[with_reasoning_keys(messages)],
                tools=tools,
                chat_template=_template_of(tokenizer),
                return_assistant_tokens_mask=True,
                **kwargs,
            )
    except Exception as exc:  # noqa: BLE001 - the template's own refusal
        raise _TemplateRefusal(f"the chat template cannot render this conversation: {exc}") from None
    spans = [tuple(span) for span in indices[0]]
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    trained = [messages[i].get("weight") != 0 for i in assistants]
    if stripped_reasoning == "context" and len(spans) == len(assistants):
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        for k, i in enumerate(assistants):
            reasoning = _reasoning_text(messages[i])
            if not trained[k] or not reasoning or reasoning in rendered[0]:
                continue
            if i > last_user:
                raise ConversationError(
                    _reasoning_dropped(
                        i,
                        "does not render this turn's reasoning",
                        i + 1 < len(messages),
                        _reasoning_kind(messages[i]),
                        last,
                    )
                )
            trained[k] = False
            if context is not None:
                context.append(i)
        if not any(trained) and len(assistants) > sum(messages[i].get("weight") == 0 for i in assistants):
            raise ConversationError(_every_reasoning_dropped(messages, last))
    if not all(trained):
        if len(spans) != len(assistants):
            raise ConversationError(
                f"the chat template marks {len(spans)} generation block(s) for {len(assistants)} assistant "
                "message(s), so the weight-0 messages cannot be left out of the labels"
            )
        spans = [span for span, keep in zip(spans, trained) if keep]
    return rendered[0], spans


#: How a refusal names a turn of each kind of :attr:`TemplateLayout.last_turn_reasoning`.
_KIND_NOUNS = {"answer": "answer", "call": "tool call", "think": "answer's <think> block"}


def _reasoning_dropped(
    index: int, what: str, followed: bool, kind: str = "answer", last: tuple[str, ...] | None = None
) -> str:
    """The refusal of a trained turn answering the last user message whose reasoning the template
    drops (``what``: how the template loses it). ``followed``: another message follows (gpt-oss
    drops a tool call's analysis once an answer follows), so the turn can be trained in a row that
    ends with it, where such templates render it: ``split_reasoning_turns`` makes those rows.

    ``last``: the template's :attr:`TemplateLayout.last_turn_reasoning` (``None``: not known). Where
    it renders no reasoning of a turn of this ``kind`` even at the end of a conversation (Llama 3,
    Mistral, DeepSeek-R1-Distill), no row helps: the refusal says so instead of naming the setting,
    whose rows that template would refuse too."""
    if last is not None and kind not in last:
        return (
            f"message {index}: the chat template {what}, so only the answer would be trained; it renders the "
            f"reasoning of no {_KIND_NOUNS[kind]}, not even of one that ends the conversation: use a template that "
            "renders it (chat_template: file.jinja) or remove the reasoning from the data"
        )
    split = (
        ", set data.split_reasoning_turns: true (this turn is then trained in a row of its own that ends with "
        "it, where templates that drop it here render it, and is context here)"
        if followed
        else ""
    )
    return (
        f"message {index}: the chat template {what}, so only the answer would be "
        f"trained; use a template that renders it (chat_template: file.jinja){split} or remove the reasoning "
        "from the data"
    )


def _every_reasoning_dropped(messages: list[dict], last: tuple[str, ...] | None) -> str:
    """The refusal of a conversation whose every trained turn is context only, its reasoning dropped
    (Qwen3 after the user's closing ``###STOP###``). ``split_reasoning_turns`` is named only where the
    template renders the reasoning of such a turn that ends the conversation (see :func:`_reasoning_dropped`)."""
    kinds = {
        _reasoning_kind(m) for m in messages if m["role"] == "assistant" and m.get("weight") != 0 and _reasoning_text(m)
    }
    refusal = (
        "the chat template drops the reasoning of every trainable assistant turn, so none can be trained with its "
        "thinking; use a template that renders it (chat_template: file.jinja)"
    )
    if last is not None and not kinds & set(last):
        return (
            f"{refusal} or remove the reasoning from the data (the template renders the reasoning of no such turn, "
            "not even of one that ends the conversation)"
        )
    return (
        f"{refusal}, or set data.split_reasoning_turns: true (each such turn is then trained in a row that ends "
        "with it, where templates that drop it here render it; tau-bench runs end with the user's ###STOP###)"
    )


def _reasoning_text(message: dict) -> str:
    """An assistant message's reasoning (see :func:`_reasoning_of`), else the ``<think>`` part of its content."""
    reasoning = _reasoning_of(message)
    content = message.get("content") or ""
    if not reasoning and "</think>" in content:
        reasoning = content.split("</think>", 1)[0].split("<think>")[-1].strip()
    return reasoning


def _json_renderer(tokenizer):
    """A render function for conversations decoded from JSON, byte-identical to ``apply_chat_template``.

    ``apply_chat_template`` spends about as long converting its input to plain dicts and lists (for
    objects such as pydantic messages) as rendering it; data fresh from ``json.loads`` is plain
    already, so the compiled template (transformers' own, cached per template) is called with the
    same variables directly: the messages without their ``None`` fields and with reasoning
    aliases, the tools, ``add_generation_prompt`` and the special tokens. ``None`` when this
    transformers version lacks those helpers, or when the shortcut renders the probe conversations
    differently from ``apply_chat_template`` (then the caller keeps to ``apply_chat_template``).
    """
    try:
        from transformers.utils.chat_template_utils import (
            _alias_reasoning_fields,
            _compile_jinja_template,
            _plain_template_data,
        )
    except ImportError:
        return None
    variables = _plain_template_data(dict(tokenizer.special_tokens_map))

    def render(tokenizer, messages, tools, add_generation_prompt=False):
        chat = _alias_reasoning_fields(
            with_reasoning_keys([{k: v for k, v in m.items() if v is not None} for m in messages])
        )
        with fixed_template_clock():
            return _compile_jinja_template(tokenizer.get_chat_template(None, tools)).render(
                messages=chat, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **variables
            )

    call = _probe_call("c")
    probes = [
        ([{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_REPLY}], None),
        (
            [
                {"role": "system", "content": "Probe system"},
                {"role": "user", "content": _PROBE_USER, "name": None},
                {"role": "assistant", "content": "", "tool_calls": [call], "reasoning_content": "Probe thought"},
                {"role": "tool", "tool_call_id": "c", "name": _PROBE_FUNCTION, "content": _PROBE_TOOL_OUTPUT},
                {"role": "assistant", "content": _PROBE_REPLY2},
            ],
            _PROBE_TOOLS,
        ),
    ]
    for messages, tools in probes:
        for form in (messages, _with_string_arguments(messages)):
            try:
                expected = _render(tokenizer, form, tools)
            except Exception:  # noqa: BLE001 - a template that refuses this probe form
                continue
            try:
                if render(tokenizer, form, tools) != expected:
                    return None
            except Exception:  # noqa: BLE001 - refusing what apply_chat_template renders: not the same
                return None
    return render


def _byte_level_alphabet() -> list[str]:
    """The characters byte-level BPE spells the 256 byte values with (GPT-2's table)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), 256)]
    return [chr(b) for b in printable] + [chr(256 + n) for n in range(256 - len(printable))]


class _Encoder:
    """Batched tokenization of rendered conversations into ids and character offsets (numpy).

    Conversations of a data set mostly open with the same system prompt (tau-bench's is 6,000 of
    its 15,000 characters), and the tokenizer splits its input at special tokens before anything
    else, tokenizing the pieces independently. So the text up to the first ``marker`` (the
    template's end-of-turn special token) is tokenized once per distinct prefix and reused, and
    only the rest is tokenized per conversation. That is exact when no added token overlaps the
    marker occurrence (checked per text) and the tokenizer treats a piece the same whether or not
    it starts the input (checked once, on probe texts; Metaspace's ``prepend_scheme="first"``, for
    one, does not); otherwise the whole text is tokenized.

    Offsets: for byte-level BPE tokenizers every vocabulary token stands for a fixed number of
    bytes (one per character of its byte-level spelling; an added token, its UTF-8 length), so the
    token offsets follow from the ids by a cumulative sum, and the tokenizer is asked for ids alone
    (``encode_batch_fast``, which skips offset tracking and the Python tuples of offsets: together
    about a third of the tokenization time). This path is used only when the probe texts get
    exactly the tokenizer's own offsets from it, and per text only when the byte lengths add up to
    the text's; other tokenizers and texts get the tokenizer's offsets.
    """

    _PREFIXES_KEPT = 32
    checked_on_data = False
    ascii_only = False  # a normalizer that leaves ASCII alone: the byte-level path only for ASCII texts
    _PROBE_TAILS = ("", "\n", "\nx y", " a b", "  two spaces", "x", "\n\nProbe", "\t tab", " ", "\u00e9t\u00e9 \u4e2d")

    def __init__(self, tokenizer, marker: str | None):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        # transformers resets a backend's truncation and padding on every call; a backend left with
        # them set is only used through the tokenizer's own call.
        self.backend = (
            backend if backend is not None and backend.truncation is None and backend.padding is None else None
        )
        added = list(getattr(tokenizer, "added_tokens_decoder", {}).values())
        self.added = sorted({t.content for t in added if len(t.content) > 1})
        self.byte_lengths = None
        self.byte_lengths = self._byte_lengths(tokenizer, added, backend)
        self.marker = marker if marker and self._split_is_exact(marker, added, backend) else None
        self.prefixes: OrderedDict[str, tuple] = OrderedDict()

    def _byte_lengths(self, tokenizer, added, backend):
        """Bytes each token id stands for, when the tokenizer is byte-level BPE; else ``None``."""
        if self.backend is None or not hasattr(backend, "encode_batch_fast"):
            return None
        states = [getattr(backend, part) for part in ("decoder", "pre_tokenizer")]
        if any(state is None or b'"ByteLevel"' not in state.__getstate__() for state in states):
            return None
        if type(backend.model).__name__ != "BPE":
            return None
        if backend.normalizer is not None:
            self.ascii_only = type(backend.normalizer).__name__ in ("NFC", "NFD", "NFKC", "NFKD")
            if not self.ascii_only:
                return None
        alphabet = set(_byte_level_alphabet())
        added_ids = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
        vocab = backend.get_vocab(with_added_tokens=True)
        lengths = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
        for token, i in vocab.items():
            if i in added_ids:
                lengths[i] = len(added_ids[i].encode("utf-8"))
            elif set(token) <= alphabet:
                lengths[i] = len(token)
            else:
                return None
        self.byte_lengths = lengths
        probes = [f"Probe{tail} text{tail}." for tail in self._PROBE_TAILS] + [
            f"<{t}>{t} x {t}" for t in self.added[:8]
        ]
        fast = self._encode(probes)
        self.byte_lengths = None
        slow = self._encode(probes)
        for a, b in zip(fast, slow):
            if not all(np.array_equal(x, y) for x, y in zip(a, b)):
                return None
        return lengths

    def _split_is_exact(self, marker, added, backend) -> bool:
        token = next((t for t in added if t.content == marker), None)
        if token is None or token.lstrip or token.rstrip or token.single_word or marker != marker.strip():
            return False
        if backend is not None and backend.normalizer is not None and any(t.normalized for t in added):
            return False
        head = "Probe text before" + marker
        wholes = self._encode([head + tail for tail in self._PROBE_TAILS])
        heads = self._encode([head])[0]
        tails = self._encode(list(self._PROBE_TAILS))
        for whole, tail in zip(wholes, tails):
            joined = self._join(heads, tail, len(head))
            if not all(np.array_equal(a, b) for a, b in zip(whole, joined)):
                return False
        return True

    def _encode(self, texts: list[str]) -> list[tuple]:
        """``(ids, starts, ends)`` (character offsets) per text, each tokenized whole."""
        if not texts:
            return []
        out: list = [None] * len(texts)
        rest = list(range(len(texts)))
        if self.byte_lengths is not None:
            rest = []
            for i, (text, encoding) in enumerate(
                zip(texts, self.backend.encode_batch_fast(texts, add_special_tokens=False))
            ):
                out[i] = self._offsets_from_lengths(text, np.array(encoding.ids, dtype=np.int64))
                if out[i] is None:
                    rest.append(i)
        if not rest:
            return out
        if self.backend is not None:
            pairs = [
                (e.ids, e.offsets)
                for e in self.backend.encode_batch([texts[i] for i in rest], add_special_tokens=False)
            ]
        else:
            enc = self.tokenizer([texts[i] for i in rest], add_special_tokens=False, return_offsets_mapping=True)
            pairs = zip(enc["input_ids"], enc["offset_mapping"])
        for i, (ids, offsets) in zip(rest, pairs):
            offsets = np.array(offsets, dtype=np.int64).reshape(-1, 2)
            out[i] = (np.array(ids, dtype=np.int64), offsets[:, 0], offsets[:, 1])
        return out

    def _offsets_from_lengths(self, text: str, ids: np.ndarray):
        """Character offsets of byte-level tokens from their byte lengths; ``None`` if they do not add up."""
        if ids.size and ids.max() >= len(self.byte_lengths):
            return None
        lengths = self.byte_lengths[ids]
        ends = np.cumsum(lengths)
        starts = ends - lengths
        total = int(ends[-1]) if ids.size else 0
        if text.isascii():
            return (ids, starts, ends) if total == len(text) else None
        if self.ascii_only:
            return None
        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        if total != len(raw):
            return None
        # A token holding part of a character's bytes gets that whole character, as the tokenizer reports it.
        char_of_byte = np.cumsum((raw & 0xC0) != 0x80) - 1
        if not ids.size:
            return ids, starts, ends
        return ids, char_of_byte[starts], char_of_byte[ends - 1] + 1

    @staticmethod
    def _join(head, tail, shift):
        return tuple(np.concatenate([h, t + (shift if i else 0)]) for i, (h, t) in enumerate(zip(head, tail)))

    def _crossed(self, text: str, at: int) -> bool:
        """Whether an occurrence of an added token spans position ``at`` (it would move the split)."""
        for token in self.added:
            n = len(token)
            if token in text[max(0, at - n + 1) : at + n - 1]:
                return True
        return False

    def _split_at(self, text: str) -> int:
        start = text.find(self.marker) if self.marker else -1
        if start < 0:
            return -1
        end = start + len(self.marker)
        return -1 if self._crossed(text, start) or self._crossed(text, end) else end

    def encode(self, texts: list[str]) -> list[tuple]:
        """``(ids, starts, ends)`` per text, as the tokenizer gives them for the whole text."""
        if self.byte_lengths is not None and not self.checked_on_data and texts:
            # Once per process, the first real text too: offsets from byte lengths or the tokenizer's.
            self.checked_on_data = True
            fast = self._encode(texts[:1])[0]
            lengths, self.byte_lengths = self.byte_lengths, None
            slow = self._encode(texts[:1])[0]
            if all(np.array_equal(x, y) for x, y in zip(fast, slow)):
                self.byte_lengths = lengths
        cuts = [self._split_at(text) for text in texts]
        missing = list(dict.fromkeys(t[:c] for t, c in zip(texts, cuts) if c > 0 and t[:c] not in self.prefixes))
        pieces = [t[c:] if c > 0 else t for t, c in zip(texts, cuts)]
        encoded = self._encode(missing + pieces)
        for prefix, enc in zip(missing, encoded):
            self.prefixes[prefix] = enc
        out = []
        for text, cut, enc in zip(texts, cuts, encoded[len(missing) :]):
            if cut > 0:
                head = self.prefixes[text[:cut]]
                self.prefixes.move_to_end(text[:cut])
                enc = self._join(head, enc, cut)
            out.append(enc)
        while len(self.prefixes) > self._PREFIXES_KEPT:
            self.prefixes.popitem(last=False)
        return out


def _label_row(input_ids, starts, ends, spans, max_length):
    """Labels: a token's id where its characters overlap an assistant span, else ``IGNORE_INDEX``."""
    labels = np.full(len(input_ids), IGNORE_INDEX, dtype=np.int64)
    if spans:
        bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        # The first span ending after the token's start; the token is in it if it starts before the token ends.
        k = np.searchsorted(bounds[:, 1], starts, side="right")
        inside = (k < len(bounds)) & (ends > starts)
        inside &= bounds[np.minimum(k, len(bounds) - 1), 0] < ends
        labels[inside] = input_ids[inside]
    if max_length is not None:
        input_ids, labels = input_ids[:max_length], labels[:max_length]
    if not (labels != IGNORE_INDEX).any():
        return None
    return {"input_ids": input_ids, "labels": labels}


class _Plan:
    """Per tokenizer: the template's layout, its render function and the encoder (built once per process)."""

    def __init__(self, tokenizer, layout: TemplateLayout):
        self.layout = layout
        self.json_render = None if layout.generation_markers else _json_renderer(tokenizer)
        self.encoder = _Encoder(tokenizer, layout.end_of_turn)


_PLANS: dict[tuple, _Plan] = {}


def _plan(tokenizer) -> _Plan:
    layout = template_layout(tokenizer)
    key = (
        _template_of(tokenizer),
        getattr(tokenizer, "name_or_path", ""),
        len(tokenizer),
        json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str),
        id(getattr(tokenizer, "backend_tokenizer", None)),
    )
    plan = _PLANS.get(key)
    if plan is None or plan.layout is not layout:
        # A plan holds its tokenizer (the key's id() stays its own); keep only the last few.
        while len(_PLANS) >= 8:
            del _PLANS[next(iter(_PLANS))]
        plan = _PLANS[key] = _Plan(tokenizer, layout)
    return plan


def tokenize_many(
    tokenizer,
    conversations: list[tuple[list[dict], list[dict] | None]],
    max_length: int | None = None,
    from_json: bool = False,
    unrendered_system_prompt: str = "ignore",
    stripped_reasoning: str = "train",
    notes: list[list[str]] | None = None,
    leading_assistant: str = "refuse",
) -> list[dict[str, np.ndarray] | None | ConversationError]:
    """Tokenize conversations with assistant-only labels, one outcome per conversation.

    Each conversation is rendered once; the texts are tokenized in one batched call (see
    :class:`_Encoder`). An outcome is ``{"input_ids", "labels"}`` (int64 numpy arrays), ``None``
    when truncation left no assistant token, or the :class:`ConversationError` that says why its
    assistant turns cannot be located; one bad conversation does not stop the others.

    Args:
        from_json: the messages and tools were just decoded from JSON (plain dicts, lists and
            scalars), so they may be rendered without ``apply_chat_template``'s input conversion.
        unrendered_system_prompt: what to do with a conversation whose non-empty system prompt the
            chat template does not render (Mistral v0.3 and Nemo show it only inside a final user
            turn, so never in a conversation ending with the assistant's reply): ``"ignore"`` trains
            it without the prompt; ``"refuse"`` makes it a :class:`ConversationError` that names the
            setting; ``"into_first_user"`` prefixes the prompt to the first user message (a blank
            line between) and renders it again. ``ChatDataModule`` refuses by default.
        stripped_reasoning: ``"train"`` or ``"context"``, for earlier assistant turns whose reasoning
            the template drops (see :func:`assistant_spans`); ``ChatDataModule`` uses ``"context"``.
        notes: a list that receives, per conversation, what was changed or left unlabelled
            (``NOTE_SYSTEM_INTO_FIRST_USER``, ``NOTE_LEADING_ASSISTANT_DROPPED``,
            ``NOTE_CALL_IDS_REWRITTEN``, ``NOTE_CALL_IDS_NAMED``, ``NOTE_CALL_IDS_UNIQUE``;
            ``"message i: " + NOTE_REASONING_CONTEXT`` per turn;
            ``"message i: " + NOTE_PROMPT_UNLIKE_TURN + " 'header', not 'prompt'"`` for the first
            trained turn rendered without the generation prompt an engine feeds the model there).
        leading_assistant: what to do with assistant messages before the first user message (tau2
            runs open with the agent's greeting) when the chat template refuses the conversation
            because of them (Mistral's want a user message first): ``"refuse"`` makes it a
            :class:`ConversationError` that names the setting; ``"drop"`` leaves them out. Templates
            that render them are not affected. Independently, tool-call ids that the template
            refuses (Mistral: nine alphanumeric characters) are rewritten as nine hex digits of their
            hash, the same id by the same digits (``NOTE_CALL_IDS_REWRITTEN``).
    """
    if unrendered_system_prompt not in UNRENDERED_SYSTEM_PROMPT:
        raise ValueError(
            f"unrendered_system_prompt must be one of {UNRENDERED_SYSTEM_PROMPT}, got {unrendered_system_prompt!r}"
        )
    if stripped_reasoning not in ("train", "context"):
        raise ValueError(f"stripped_reasoning must be 'train' or 'context', got {stripped_reasoning!r}")
    if leading_assistant not in LEADING_ASSISTANT:
        raise ValueError(f"leading_assistant must be one of {LEADING_ASSISTANT}, got {leading_assistant!r}")
    plan = _plan(tokenizer)
    render = plan.json_render if from_json and plan.json_render is not None else _render
    located: list = []
    for messages, tools in conversations:
        try:
            text, spans, noted = _render_and_locate(
                tokenizer,
                plan.layout,
                messages,
                tools,
                render,
                unrendered_system_prompt,
                stripped_reasoning,
                leading_assistant,
            )
            located.append((text, spans))
        except ConversationError as exc:
            located.append(exc)
            noted = []
        if notes is not None:
            notes.append(noted)
    ok = [i for i, x in enumerate(located) if not isinstance(x, ConversationError)]
    encoded = plan.encoder.encode([located[i][0] for i in ok])
    for i, (ids, starts, ends) in zip(ok, encoded):
        located[i] = _label_row(ids, starts, ends, located[i][1], max_length)
    return located


def tokenize_conversations(
    tokenizer,
    conversations: list[tuple[list[dict], list[dict] | None]],
    max_length: int | None = None,
) -> list[dict[str, list[int]] | None]:
    """Tokenize many conversations with assistant-only labels: one render each, one batched tokenization.

    Returns one ``{"input_ids", "labels"}`` per conversation, ``None`` where truncation left no
    assistant token.

    Raises:
        ConversationError: a conversation whose assistant turns cannot be located (see :func:`assistant_spans`).
    """
    out = []
    for row in tokenize_many(tokenizer, conversations, max_length):
        if isinstance(row, ConversationError):
            raise row
        out.append(None if row is None else {k: v.tolist() for k, v in row.items()})
    return out


def tokenize_conversation(
    tokenizer,
    messages: list[dict],
    tools: list[dict] | None = None,
    max_length: int | None = None,
) -> dict[str, list[int]] | None:
    """Tokenize a conversation with labels on assistant tokens only.

    The conversation is rendered once. With ``{% generation %}`` blocks in the template (in any
    whitespace-control spelling) the template's own assistant mask is used; otherwise each
    assistant message's content, tool calls and end-of-turn token are located in the rendered text
    (see :func:`assistant_spans`), so templates that rewrite earlier turns (Qwen3) or insert text
    into the last one (empty think blocks) are labelled exactly.

    Args:
        tokenizer: a Hugging Face fast tokenizer with a chat template.
        messages: normalized messages (see :func:`normalize_conversation`).
        tools: tool schemas passed to the chat template.
        max_length: truncate to this many tokens (from the right).

    Returns:
        ``{"input_ids", "labels"}`` lists, or ``None`` when truncation left no assistant token.
    """
    return tokenize_conversations(tokenizer, [(messages, tools)], max_length)[0]
