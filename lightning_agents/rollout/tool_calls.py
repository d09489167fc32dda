"""Parse ``<tool_call>{json}</tool_call>`` blocks from generated text into OpenAI tool calls.

This is the Hermes/Qwen convention the embedded chat template renders, so the same parser serves
the tiny models and real ones that use it.
"""

from __future__ import annotations

import json
import re

__all__ = ["parse_tool_calls"]

# No \s* around the lazy group (it is stripped in Python): whitespace matched by both backtracks
# quadratically, 70 s for a call padded with 100,000 spaces. A block never runs into the next
# <tool_call>: an unterminated call must not swallow a complete one after it.
_CALL_RE = re.compile(r"<tool_call>((?:(?!<tool_call>).)*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)


def _no_constants(name: str) -> None:
    # NaN and Infinity are not JSON; json.dumps would pass them on to the tool as such.
    raise ValueError(f"{name} is not JSON")


def parse_tool_calls(text: str, id_prefix: str = "call") -> tuple[str, list[dict]]:
    """Split a completion into its free text and its tool calls.

    Args:
        text: the decoded completion.
        id_prefix: prefix of the generated call ids (``call_0``, ``call_1``, ...).

    Returns:
        ``(content, tool_calls)``: the text outside the blocks, stripped, and OpenAI-format calls
        ``{"id", "type": "function", "function": {"name", "arguments" (JSON string)}}``. A block that
        is not valid JSON, has no name or has arguments that are not an object is kept in the content
        rather than guessed at.
    """
    calls: list[dict] = []
    kept: list[str] = []
    last = 0
    for match in _CALL_RE.finditer(text or ""):
        kept.append(text[last : match.start()])
        last = match.end()
        try:
            payload = json.loads(match.group(1).strip(), parse_constant=_no_constants)
        except (ValueError, RecursionError):  # also a 4300+ digit number and nesting past the recursion limit
            kept.append(match.group(0))
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            kept.append(match.group(0))
            continue
        # "parameters" is Llama 3.1's name for them; reading it beats calling the tool with nothing
        arguments = payload["arguments"] if "arguments" in payload else payload.get("parameters", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments, parse_constant=_no_constants) if arguments.strip() else {}
            except (ValueError, RecursionError):
                arguments = None
        if not isinstance(arguments, dict):
            # OpenAI tool calls carry an object of arguments; anything else is not a call.
            kept.append(match.group(0))
            continue
        calls.append(
            {
                "id": f"{id_prefix}_{len(calls)}",
                "type": "function",
                "function": {
                    "name": payload["name"],
                    "arguments": json.dumps(arguments),
                },
            }
        )
    kept.append((text or "")[last:])
    return "".join(kept).strip(), calls
