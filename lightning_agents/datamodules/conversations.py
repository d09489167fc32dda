"""Validation and assistant-only tokenization of OpenAI-format conversations (no Lightning here).

A conversation is ``{"messages": [...], "tools": [...]?}`` or a bare list of messages. Messages
follow the OpenAI chat format: ``role`` in system/user/assistant/tool, assistant ``tool_calls``
with ``function.arguments`` as a dict or a JSON string, tool messages with ``tool_call_id``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from lightning_agents.errors import LightningAgentsError

__all__ = ["ConversationError", "normalize_conversation", "tokenize_conversation", "IGNORE_INDEX"]

IGNORE_INDEX = -100
_ROLES = {"system", "user", "assistant", "tool"}


class ConversationError(LightningAgentsError, ValueError):
    """A conversation that cannot be used for training; the message says what is wrong."""


def normalize_conversation(obj: Any) -> tuple[list[dict], list[dict] | None]:
    """Check a conversation and return ``(messages, tools)`` with tool-call arguments as dicts.

    Arguments given as JSON strings are parsed so that the same call renders identically whichever
    form a dataset used.

    Raises:
        ConversationError: naming the message index and field at fault.
    """
    if isinstance(obj, dict):
        if "messages" not in obj:
            raise ConversationError("no 'messages' field")
        messages, tools = obj["messages"], obj.get("tools")
    elif isinstance(obj, list):
        messages, tools = obj, None
    else:
        raise ConversationError(f"expected an object with 'messages' or a list of messages, got {type(obj).__name__}")
    if not isinstance(messages, list) or not messages:
        raise ConversationError("'messages' must be a non-empty list")
    if tools is not None and not isinstance(tools, list):
        raise ConversationError("'tools' must be a list")
    out = []
    has_assistant = False
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ConversationError(f"message {i} is a {type(message).__name__}, not an object")
        role = message.get("role")
        if role not in _ROLES:
            raise ConversationError(f"message {i} has role {role!r}; expected one of {sorted(_ROLES)}")
        message = copy.deepcopy(message)
        content = message.get("content")
        if content is None:
            message["content"] = ""
        elif not isinstance(content, str):
            raise ConversationError(f"message {i} content must be a string, got {type(content).__name__}")
        if role == "assistant":
            has_assistant = True
            for j, call in enumerate(message.get("tool_calls") or []):
                fn = call.get("function", call) if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise ConversationError(f"message {i} tool_calls[{j}] has no function name")
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError as exc:
                        raise ConversationError(
                            f"message {i} tool_calls[{j}].function.arguments is not valid JSON: {exc.msg}"
                        ) from None
                if not isinstance(args, dict):
                    raise ConversationError(f"message {i} tool_calls[{j}].function.arguments must be an object")
                fn["arguments"] = args
            if not message["content"] and not message.get("tool_calls"):
                raise ConversationError(f"message {i} is an assistant message with neither content nor tool_calls")
        out.append(message)
    if not has_assistant:
        raise ConversationError("no assistant message to learn from")
    return out, tools


def _has_generation_markers(tokenizer) -> bool:
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default", "")
    return "{% generation %}" in (template or "") or "{%- generation %}" in (template or "")


def _render_ids(tokenizer, messages, tools, add_generation_prompt: bool = False) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tokenize_conversation(
    tokenizer,
    messages: list[dict],
    tools: list[dict] | None = None,
    max_length: int | None = None,
) -> dict[str, list[int]] | None:
    """Tokenize a conversation with labels on assistant tokens only.

    Uses the chat template's ``{% generation %}`` assistant mask when it has one; otherwise the
    assistant spans are found by rendering each prefix of the conversation, with and without the
    next assistant turn, and taking the difference.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        messages: normalized messages (see :func:`normalize_conversation`).
        tools: tool schemas passed to the chat template.
        max_length: truncate to this many tokens (from the right).

    Returns:
        ``{"input_ids", "labels"}`` lists, or ``None`` when truncation left no assistant token.
    """
    if _has_generation_markers(tokenizer):
        encoded = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        input_ids = list(encoded["input_ids"])
        mask = list(encoded["assistant_masks"])
    else:
        input_ids = _render_ids(tokenizer, messages, tools)
        mask = [0] * len(input_ids)
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            start = len(_render_ids(tokenizer, messages[:i], tools, add_generation_prompt=True))
            end = len(_render_ids(tokenizer, messages[: i + 1], tools))
            for t in range(start, min(end, len(mask))):
                mask[t] = 1
    if max_length is not None:
        input_ids, mask = input_ids[:max_length], mask[:max_length]
    if not any(mask):
        return None
    labels = [tok if m else IGNORE_INDEX for tok, m in zip(input_ids, mask)]
    return {"input_ids": input_ids, "labels": labels}
