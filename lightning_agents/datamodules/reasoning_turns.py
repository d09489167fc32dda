"""Split a conversation into one row per reasoning turn, for templates that drop earlier turns' reasoning.

Chat templates drop the reasoning of some assistant turns from what they render: Qwen3 and QwQ
drop it from turns before the last user message, gpt-oss drops a tool call's analysis once a final
answer follows. At inference the engine fed the model each turn's own reasoning while it was the
last turn (harmony passes the chain of thought of tool calls back), so a row that ends with the turn
is the one the model saw when it wrote it. :func:`split_reasoning_turns` makes those rows;
``ChatDataModule(split_reasoning_turns=True)`` tokenizes them instead of the conversation.
"""

from __future__ import annotations

from lightning_agents.datamodules.conversations import _reasoning_text

__all__ = ["split_reasoning_turns"]


def _trained(message: dict) -> bool:
    return message["role"] == "assistant" and message.get("weight") != 0


def _as_context(message: dict) -> dict:
    """A copy of an assistant message that is context only (``weight: 0``, as OpenAI fine-tuning data writes it)."""
    return {**message, "weight": 0} if _trained(message) else message


def _split_points(messages: list[dict]) -> list[int]:
    """Indices of the trained assistant turns with reasoning that another message follows, after the
    first user message (an agent's greeting before it, tau2's, is a leading turn: alone with the
    system prompt some templates refuse it, Qwen3.5's "No user query found")."""
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), len(messages))
    # Not only the turns before the last assistant turn: tau-bench runs end with the user's
    # ###STOP###, after which Qwen3 drops the last answer's thinking too.
    return [i for i, m in enumerate(messages[:-1]) if i > first_user and _trained(m) and _reasoning_text(m)]


def _row_end(messages: list[dict], cut: int) -> int:
    """Where the row of turn ``cut`` ends: after the tool results that answer it. A template closes a
    call where the next message opens (GLM-4.6 writes ``<|observation|>``, the token its model stops
    at, before the result), so a row ending at the call would train an EOS there instead; the results
    do not change what templates show of the turn (gpt-oss keeps a call's analysis until an answer
    follows)."""
    end = cut + 1
    while end < len(messages) and messages[end]["role"] == "tool":
        end += 1
    return end


def _split_messages(messages: list[dict], cut: int) -> list[dict]:
    """The row of turn ``cut`` (:func:`_row_end`) with every assistant turn before it context only."""
    return [_as_context(m) if i < cut else m for i, m in enumerate(messages[: _row_end(messages, cut)])]


def _with_context(messages: list[dict], points: list[int]) -> list[dict]:
    """The messages with the turns at ``points`` context only."""
    return [_as_context(m) if i in points else m for i, m in enumerate(messages)]


def _same_turns(messages: list[dict], as_written: list[dict]) -> bool:
    """Whether the as-written fallback of a conversation has its messages at the same indices."""
    return len(messages) == len(as_written) and all(
        a.get("role") == b.get("role") for a, b in zip(messages, as_written)
    )


def split_reasoning_turns(conversation: dict) -> list[dict]:
    """The rows to train a conversation as, one per trained assistant turn with reasoning.

    Each trained assistant turn ``i`` that carries reasoning (``reasoning_content``/``thinking``/
    ``reasoning``, or a ``<think>`` block in its content) and is not the conversation's last
    message (a later assistant turn, or only a user's closing message, follows it) and comes after
    the first user message gets a row of its own: ``messages[: i + 1]`` and the tool results that
    answer it, every earlier assistant turn with ``weight: 0`` (context only), turn ``i`` trained as
    the row's last assistant message, where templates render its reasoning. In
    the whole conversation, the last row, those turns are context only; it is left out when no
    trained turn is left in it. Turns that already have ``weight: 0`` stay context and get no
    row. A conversation without such a turn is returned as it is.

    Args:
        conversation: ``{"messages", "tools"}`` with optional ``"where"`` (its location in errors)
            and ``"as_written"`` (a fallback with tool calls left as text, split the same way; a
            conversation whose fallback's messages do not line up with its own is not split). The
            messages are not modified.

    Returns:
        The rows, in conversation order; each ``where`` names the record and the message it ends
        with (``file:3 (up to message 1)``), the whole conversation's keeps the record's.
    """
    messages = conversation["messages"]
    points = _split_points(messages)
    if not points:
        return [conversation]
    plain = conversation.get("as_written")
    if plain is not None and not _same_turns(messages, plain["messages"]):
        # Its turns cannot be told apart from the structured ones: a fallback trained whole would
        # train the split turns twice, a row without one could be refused where today's is not.
        return [conversation]
    rows = []
    for cut in points:
        row = {"messages": _split_messages(messages, cut), "tools": conversation.get("tools")}
        if "where" in conversation:
            row["where"] = f"{conversation['where']} (up to message {cut})"
        if plain is not None:
            row["as_written"] = {"messages": _split_messages(plain["messages"], cut), "tools": plain["tools"]}
        rows.append(row)
    whole = _with_context(messages, points)
    if any(_trained(m) for m in whole):
        row = {**conversation, "messages": whole}
        if plain is not None:
            row["as_written"] = {"messages": _with_context(plain["messages"], points), "tools": plain["tools"]}
        rows.append(row)
    return rows
