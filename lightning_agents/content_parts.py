"""An OpenAI message's ``content`` as text: a string, ``None``, or a list of typed parts.

Datasets (OpenAI's multi-part messages) and servers (Mistral's reasoning models answer with
``[{"type": "thinking", ...}, {"type": "text", "text": ...}]``) both send lists of parts; the text a
model reads or wrote is the ``text`` parts joined. A message given to a model (a prompt's, or a
training conversation's) has its parts joined as vLLM's OpenAI server gives them to the chat
template (:func:`prompt_parts_join`), so SFT rows, rollout prompts and a served model read one
conversation the same way.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from collections import deque
from typing import Any, Literal

from lightning_agents.template_clock import render_chat_template

__all__ = [
    "CONTENT_FORMATS",
    "PROMPT_PARTS_JOIN",
    "TEXT_PARTS_KEY",
    "ContentPartError",
    "content_text",
    "prompt_content",
    "prompt_parts_join",
    "template_content_format",
    "text_parts",
]

#: How vLLM's OpenAI server joins the text parts of a message for a "string"-format chat template
#: (one that never loops over a message's content), and of every tool message whatever the
#: template: with a newline (vllm-project/vllm vllm/entrypoints/chat_utils.py,
#: ``_parse_chat_message_content_parts`` and ``_parse_chat_message_content``).
PROMPT_PARTS_JOIN = "\n"
#: ``chat_template_content_format`` values, vLLM's ``--chat-template-content-format``: ``auto``
#: detects the template's format (:func:`template_content_format`); ``string`` or ``openai`` say it.
CONTENT_FORMATS = ("auto", "string", "openai")
#: The key under which :func:`~lightning_agents.datamodules.conversations.normalize_conversation`
#: keeps a message's text parts (its ``content`` is them joined with :data:`PROMPT_PARTS_JOIN`),
#: so tokenization can join them as the chat template in use does (:func:`prompt_content`).
TEXT_PARTS_KEY = "_text_parts"


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
            pieces); for a message given to a model, :func:`prompt_parts_join`'s.

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


def text_parts(content: Any) -> list[str]:
    """The ``text`` parts of list-form ``content`` (a string or ``None`` is one part or none).

    Raises:
        ContentPartError: a part that is not text.
    """
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts = []
    for index, part in enumerate(content):
        try:
            texts.append(content_text([part]))
        except ContentPartError as exc:
            raise ContentPartError(index, exc.kind) from None
    return texts


def _is_var(node: Any, name: str) -> bool:
    import jinja2.nodes

    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _accesses(node: Any, name: str, key: str | None = None) -> bool:
    """vLLM's ``_is_var_or_elems_access``: ``node`` reads ``name`` (or its ``key``), through
    filters, tests and slices."""
    import jinja2.nodes

    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _accesses(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _accesses(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _accesses(node.node, name, key)
    if key is None:
        return _is_var(node, name)
    if isinstance(node, jinja2.nodes.Getitem):
        return _is_var(node.node, name) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


_PARSE_WARNED: set[str] = set()


def _parse_template(template: str) -> Any:
    """The jinja2 AST of ``template``, parsed as transformers compiles chat templates (a sandboxed
    environment with the loop controls extension), or ``None`` with one warning per cause.

    jinja2 first, not transformers' private ``_compile_jinja_template``: were that helper renamed,
    every template would read as "string" and the newline join would come back unnoticed. The
    helper is the fallback for a template only its extensions parse (``{% generation %}``)."""
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    try:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(extensions=[jinja2.ext.loopcontrols])
        return env.parse(template)
    except Exception as exc:  # noqa: BLE001 - try transformers' own environment next
        error: Exception = exc
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template(template).environment.parse(template)
    except Exception:  # noqa: BLE001 - jinja2's own error says why, then vLLM's fallback
        pass
    cause = f"{type(error).__name__}: {error}"
    if cause not in _PARSE_WARNED:
        _PARSE_WARNED.add(cause)
        warnings.warn(
            f"could not parse the chat template to detect its content format ({cause}); "
            'taking "string" (text parts joined with a newline), as vLLM does',
            RuntimeWarning,
            stacklevel=3,
        )
    return None


@functools.lru_cache(maxsize=64)
def template_content_format(template: str) -> Literal["string", "openai"]:
    """The content format vLLM's OpenAI server detects for a chat template: ``openai`` when the
    template loops over a message's ``content`` (``{% for part in message['content'] %}``, the
    message taken from a loop over ``messages`` or a variable assigned from it), ``string``
    otherwise, and when the template does not parse (with a warning). Cached by the template's text.

    A port of vllm-project/vllm vllm/renderers/hf.py ``_detect_content_format`` (formerly in
    vllm/entrypoints/chat_utils.py); SGLang's ``detect_jinja_template_content_format``
    (python/sglang/srt/jinja_template_utils.py) adapts the same rule.
    """
    ast = _parse_template(template)
    if ast is None:  # vLLM falls back to "string" on a template it cannot parse
        return "string"
    import jinja2.nodes

    # vLLM asserts that a matching assignment or loop binds a plain name; a template where one does
    # not (`{% set ns.m = messages %}`) fails the detection there, which falls back to "string".
    names, queue = ["messages"], deque(["messages"])
    while queue:  # variables assigned from `messages` (or from one of those), as vLLM follows them
        name = queue.popleft()
        for assign in ast.find_all(jinja2.nodes.Assign):
            if _accesses(assign.node, name):
                if not isinstance(assign.target, jinja2.nodes.Name):
                    return "string"
                if assign.target.name != name:
                    names.append(assign.target.name)
                    queue.append(assign.target.name)
                if len(names) > 1000:  # vLLM's search would not end either: its fallback
                    return "string"
    loops = list(ast.find_all(jinja2.nodes.For))
    messages = []
    for loop in loops:
        if any(_accesses(loop.iter, n) for n in names):
            if not isinstance(loop.target, jinja2.nodes.Name):
                return "string"
            messages.append(loop.target.name)
    for loop in loops:  # the first loop over a message's content decides, as vLLM's next() does
        if any(_accesses(loop.iter, m, "content") for m in messages):
            return "openai" if isinstance(loop.target, jinja2.nodes.Name) else "string"
    return "string"


def _format_of(tokenizer: Any) -> str:
    given = getattr(tokenizer, "chat_template_content_format", None) or "auto"
    if given not in CONTENT_FORMATS:
        raise ValueError(f"chat_template_content_format must be one of {CONTENT_FORMATS}, got {given!r}")
    if given != "auto":
        return given
    template = getattr(tokenizer, "chat_template", None)
    return template_content_format(template) if isinstance(template, str) else "string"


_ROLES_PROBED = ("system", "user", "assistant")
_SEPARATORS: dict[str, dict[str, tuple[str, bool]]] = {}
_SEPARATORS_LOCK = threading.Lock()


def _probe_separators(tokenizer: Any) -> dict[str, tuple[str, bool]]:
    """Per role, ``(what the chat template writes between two text parts given as a list,
    whether it trims each part)``, read from its render of two marked parts (plain, then with
    whitespace at their edges: Gemma 3 and 4 and Llama 4 trim each part). A role whose parts it
    does not render both of, or a template that refuses the probe, gets the user's, then
    ``(PROMPT_PARTS_JOIN, False)``."""

    def parts(role: str, edge: str) -> list[dict]:
        return [{"type": "text", "text": f"{edge}Qz{role}Lq{k}{edge}"} for k in (1, 2)]

    def between(text: str, role: str) -> str | None:
        first, second = f"Qz{role}Lq1", f"Qz{role}Lq2"
        at = text.find(first)
        end = text.find(second, at + len(first)) if at >= 0 else -1
        return None if end < 0 else text[at + len(first) : end]

    def probe(edge: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for roles in (_ROLES_PROBED, ("user",)):
            try:
                text = render_chat_template(
                    tokenizer, [{"role": role, "content": parts(role, edge)} for role in roles], tokenize=False
                )
            except Exception:  # noqa: BLE001 - the template's own refusal: try the smaller probe
                continue
            for role in roles:
                if (sep := between(text, role)) is not None:
                    found.setdefault(role, sep)
        return found

    plain, edged = probe(""), probe(" \n")
    # A "separator" holding a piece of the list itself is a template printing the list (Gemma 4
    # prints a system message's parts as a Python repr): no join of its own, so the newline.
    out = {role: (sep, edged.get(role) == sep) for role, sep in plain.items() if not _LIST_PRINTED.search(sep)}
    if "user" in out:
        _warn_unless_joined_alike(tokenizer, out["user"][0], parts("user", ""))
    # A role whose join the render does not show (Devstral-2507 and Apriel render an assistant's
    # first part only) gets the newline, not the user's join ("" on the Mistral family glued an
    # assistant's paragraphs in SFT labels).
    return {role: out.get(role, (PROMPT_PARTS_JOIN, False)) for role in _ROLES_PROBED}


def _warn_unless_joined_alike(tokenizer: Any, separator: str, parts: list[dict]) -> None:
    """Warn when ``tokenizer``'s template renders a user message's ``parts`` otherwise than the
    same message with their texts joined by ``separator``: a template that writes text around each
    part, not only between two (``{% for p in content %}- {{ p.text }}\n{% endfor %}``), which the
    join cannot give. None of the 112 real templates checked does that for a user message; the
    served model reads the list, SFT rows and rollout prompts the join."""
    joined = separator.join(p["text"] for p in parts)
    try:
        listed, text = (
            render_chat_template(tokenizer, [{"role": "user", "content": content}], tokenize=False)
            for content in (parts, joined)
        )
    except Exception:  # noqa: BLE001 - a template that refuses a lone user message: nothing to compare
        return
    if listed != text:
        warnings.warn(
            "the chat template renders a user message's text parts otherwise than joined with "
            f"{separator!r} (it writes text around each part), so SFT rows and rollout prompts, "
            "which join them, differ from what a server that hands it the list renders",
            RuntimeWarning,
            stacklevel=4,
        )


_LIST_PRINTED = re.compile(r"""['"](?:type|text)['"]|[{}]""")


def _template_join(tokenizer: Any, role: str) -> tuple[str, bool]:
    """``(separator, trims each part)`` for the text parts of a ``role`` message given to
    ``tokenizer``'s chat template (see :func:`prompt_parts_join`)."""
    if role == "tool" or _format_of(tokenizer) == "string":
        return PROMPT_PARTS_JOIN, False
    template = getattr(tokenizer, "chat_template", None)
    key = template if isinstance(template, str) else repr(template)
    found = _SEPARATORS.get(key)
    if found is None:
        probed = _probe_separators(tokenizer)
        with _SEPARATORS_LOCK:
            found = _SEPARATORS.setdefault(key, probed)
    return found.get(role, found["user"])


def prompt_parts_join(tokenizer: Any, role: str) -> str:
    """What goes between the text parts of a ``role`` message given to ``tokenizer``'s chat
    template, as vLLM's OpenAI server renders it (vllm-project/vllm
    vllm/entrypoints/chat_utils.py ``_parse_chat_message_content``):

    * a tool message: a newline, whatever the template (vLLM joins a tool result's text parts
      itself: most templates take a tool result only as a string);
    * a "string"-format template (:func:`template_content_format`): a newline
      (:data:`PROMPT_PARTS_JOIN`), as vLLM joins them before the template;
    * an "openai"-format template, which vLLM hands the parts as a list and which joins them
      itself: what the template writes between two parts, probed once per template (nothing for
      Mistral Small 3.2, Ministral 3, Gemma 3, Llama 4 and Kimi-K2).

    ``tokenizer.chat_template_content_format`` (``auto``, ``string`` or ``openai``; vLLM's
    ``--chat-template-content-format``) overrides the detection, for a server started with it.
    """
    return _template_join(tokenizer, role)[0]


def prompt_content(tokenizer: Any, message: dict) -> dict:
    """``message`` as given to ``tokenizer``'s chat template: list-form content (or the text parts
    :data:`TEXT_PARTS_KEY` keeps) joined by :func:`prompt_parts_join`; other messages as they are.
    The one rule for SFT rows and rollout prompts.

    Where the template trims each part (Gemma 3 and 4, Llama 4: found by the same probe), the
    parts are trimmed before the join, so the text equals the template's render of the list.

    Raises:
        ContentPartError: a part that is not text.
    """
    parts = message.get(TEXT_PARTS_KEY)
    content = message.get("content")
    if parts is None and not isinstance(content, list):
        return message
    out = {k: v for k, v in message.items() if k != TEXT_PARTS_KEY}
    texts = parts if parts is not None else text_parts(content)
    separator, trims = _template_join(tokenizer, message.get("role", "user"))
    out["content"] = separator.join(t.strip() for t in texts) if trims else separator.join(texts)
    return out
