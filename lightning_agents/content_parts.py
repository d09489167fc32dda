"""An OpenAI message's ``content`` as text: a string, ``None``, or a list of typed parts.

Datasets (OpenAI's multi-part messages) and servers (Mistral's reasoning models answer with
``[{"type": "thinking", ...}, {"type": "text", "text": ...}]``) both send lists of parts; the text a
model reads or wrote is the ``text`` parts joined. A message given to a model (a prompt's, or
a training conversation's) has its parts joined with :data:`PROMPT_PARTS_JOIN`, as vLLM's server
joins them, so SFT rows and rollouts render one conversation the same way.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["PROMPT_PARTS_JOIN", "ContentPartError", "content_text"]

#: How the text parts of a message given to a model are joined: vLLM's OpenAI server joins them
#: with a newline before rendering the chat template (chat_utils), so a model served there saw
#: a two-part tool result as two lines; SFT rows and rollout prompts join them the same way.
PROMPT_PARTS_JOIN = "\n"


class ContentPartError(ValueError):
    """A content part that is not text where only text can be used.

    Attributes:
        index: the part's position in the list.
        kind: its ``type`` (or Python type name).
    """

    def __init__(self, index: int, kind: str) -> None:
        super().__init__(f"content[{index}] is a {kind!r} part")
        self.index = index
        self.kind = kind


def content_text(content: Any, non_text: Literal["refuse", "skip"] = "refuse", join: str = "") -> str:
    """The text of ``content``.

    Args:
        content: a string, ``None`` (empty) or a list of parts (dicts or the ``openai`` client's
            objects; a bare string part is text).
        non_text: what a part of another ``type`` does: ``refuse`` raises
            :class:`ContentPartError` (training data: an image cannot be trained on as text);
            ``skip`` leaves it out (a reply's ``thinking`` part is not its answer).
        join: what goes between text parts: ``""`` for a reply's chunks (one text, cut in
            pieces), :data:`PROMPT_PARTS_JOIN` for a message given to a model.

    Raises:
        ContentPartError: a non-text part with ``non_text="refuse"``, or a text part without text.
        TypeError: ``content`` of any other type.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TypeError(f"content must be a string or a list of parts, got {type(content).__name__}")
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        get = part.get if isinstance(part, dict) else lambda key, _part=part: getattr(_part, key, None)
        kind = get("type") if get("type") is not None else type(part).__name__
        if kind == "text":
            if not isinstance(get("text"), str):
                raise ContentPartError(index, "text without text")
            texts.append(get("text"))
        elif non_text == "refuse":
            raise ContentPartError(index, str(kind))
    return join.join(texts)
