"""Tool calls that ShareGPT datasets write as text inside assistant turns, as OpenAI tool calls.

Hermes (hermes-function-calling-v1) writes ``<tool_call>\n{'arguments': {...}, 'name': ...}\n</tool_call>``
blocks (Python dicts, sometimes JSON), answers them with ``<tool_response>`` tool turns and lists the
tools in the system prompt between ``<tools>`` tags; ToolACE writes ``[Func Name(a=1, b="x")]`` (names
may hold spaces), answers with a JSON list and lists the tools as JSON after a fixed sentence.
Trained as text, a model learns those syntaxes whatever its chat template renders (and its
deployment parses), so :func:`structure_text_calls` turns them into OpenAI tool calls when every
piece of a conversation parses, and leaves the conversation as written otherwise.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
from typing import Any

from lightning_agents.json_text import reject_constant

_TOOLACE_TOOLS = re.compile(r"Here is a list of functions in JSON format that you can invoke[:.]")
_TOOLACE_FORMAT_NOTE = "Should you decide to return the function call(s)"
_HERMES_TOOLS_LEAD = re.compile(r"\s*Here are the available tools:\s*\Z")
# The start of a ToolACE call list: "[" then a function name (letters, digits, spaces, dots, dashes) and "(".
_PYTHONIC_START = re.compile(r"\[\s*[^\W\d][^\[\]()\"'=,:]*\(")
_CALL_ID_WIDTH = 9  # Mistral's templates refuse any tool-call id but nine alphanumeric characters


class _Unparsed(ValueError):
    """Why tool calls written as text cannot be turned into tool calls."""


def _json_value(value: Any) -> Any:
    """``value`` (from ``json.loads`` or ``ast.literal_eval``) as JSON data: tuples become lists;
    sets, bytes, complex and non-finite numbers and non-string keys have no JSON form."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Unparsed(f"holds {value!r}, which is not JSON")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _Unparsed("has an object key that is not a string")
        return {k: _json_value(v) for k, v in value.items()}
    raise _Unparsed(f"holds a {type(value).__name__}, which is not JSON")


def _literal(text: str) -> Any:
    """JSON, else a Python literal (Hermes' dicts: single quotes, ``True``), read with
    ``ast.literal_eval``, never evaluated."""
    text = text.strip()
    try:
        return _json_value(json.loads(text, parse_constant=reject_constant))
    except (ValueError, RecursionError):
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _Unparsed("is neither JSON nor a Python literal") from None
    return _json_value(value)


def _blocks(text: str, opener: str, closer: str) -> tuple[list[str], list[str]]:
    """``(text outside the blocks, block bodies)`` of ``opener ... closer`` blocks."""
    outside, bodies, pos = [], [], 0
    while True:
        at = text.find(opener, pos)
        piece = text[pos:] if at < 0 else text[pos:at]
        if closer in piece:
            raise _Unparsed(f"has a {closer} without its {opener}")
        outside.append(piece)
        if at < 0:
            return outside, bodies
        end = text.find(closer, at + len(opener))
        if end < 0:
            raise _Unparsed(f"has a {opener} block that is not closed")
        body = text[at + len(opener) : end]
        if opener in body:
            raise _Unparsed(f"has a {opener} block inside another")
        bodies.append(body)
        pos = end + len(closer)


def _hermes_calls(text: str) -> tuple[str, list[dict]]:
    """``(content, calls)`` of an assistant turn with ``<tool_call>`` blocks; the text around the
    blocks is the content."""
    outside, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for k, body in enumerate(bodies, start=1):
        try:
            value = _literal(body)
            if not isinstance(value, dict):
                raise _Unparsed(f"is a {type(value).__name__}, not an object")
            keys = set(value)
            if not keys <= {"name", "arguments", "parameters"} or {"arguments", "parameters"} <= keys:
                raise _Unparsed(f"has the keys {sorted(keys)}, not name and arguments")
            name = value.get("name")
            if not isinstance(name, str) or not name.strip():
                raise _Unparsed("has no function name")
            arguments = value.get("arguments", value.get("parameters", {}))
            if isinstance(arguments, str):
                arguments = _literal(arguments) if arguments.strip() else {}
            if not isinstance(arguments, dict):
                raise _Unparsed("has arguments that are not an object")
        except _Unparsed as exc:
            raise _Unparsed(f"<tool_call> block {k} {exc}") from None
        calls.append({"name": name, "arguments": arguments})
    return "\n".join(piece.strip() for piece in outside if piece.strip()), calls


def _python_name(name: str) -> bool:
    parts = name.split(".")
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


def _called_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _called_name(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


class _JSONConstants(ast.NodeTransformer):
    """JSON's ``true``/``false``/``null`` written as bare names (ToolACE mixes them into Python calls)
    as the Python constants, so ``ast.literal_eval`` reads them; any other name stays a name and
    is refused there."""

    _VALUES = {"true": True, "false": False, "null": None}

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self._VALUES:
            return ast.copy_location(ast.Constant(self._VALUES[node.id]), node)
        return node


def _pythonic_calls(text: str, names: set[str]) -> list[dict]:
    """ToolACE's ``[func(a=1), Other Func(b="x")]``: calls to ``names`` with keyword arguments
    that are literals, read with ``ast`` (never evaluated)."""
    text = text.strip()
    # Names that are not Python (spaces, dashes) stand in as placeholders where a call starts;
    # one that lands inside a string argument shows up as a placeholder the calls did not use.
    odd = sorted((n for n in names if not _python_name(n)), key=len, reverse=True)
    placeholders: dict[str, str] = {}
    if odd:
        if "__la_tool_" in text:
            raise _Unparsed("cannot be told apart from its placeholders")
        by_name = {n: f"__la_tool_{k}__" for k, n in enumerate(odd)}
        pattern = re.compile(r"([\[,]\s*)(" + "|".join(re.escape(n) for n in odd) + r")(\s*\()")
        text = pattern.sub(lambda m: m.group(1) + by_name[m.group(2)] + m.group(3), text)
        placeholders = {v: k for k, v in by_name.items()}
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise _Unparsed("is not a list of Python calls") from None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        raise _Unparsed("is not a list of calls")
    calls, used = [], 0
    for k, node in enumerate(tree.body.elts, start=1):
        name = _called_name(node.func) if isinstance(node, ast.Call) else None
        if name is None:
            raise _Unparsed(f"item {k} is not a call of a function name")
        if name in placeholders:
            name, used = placeholders[name], used + 1
        if name not in names:
            raise _Unparsed(f"calls {name!r}, which is not one of the conversation's tools")
        if node.args or any(kw.arg is None for kw in node.keywords):
            raise _Unparsed(f"call {k} ({name}) passes arguments without names")
        arguments = {}
        for kw in node.keywords:
            try:
                arguments[kw.arg] = _json_value(ast.literal_eval(_JSONConstants().visit(kw.value)))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise _Unparsed(f"call {k} ({name}) argument {kw.arg!r} is not a literal") from None
        calls.append({"name": name, "arguments": arguments})
    if sum(text.count(p) for p in placeholders) != used:
        raise _Unparsed("has a function name inside an argument, where a call cannot be told from text")
    return calls


def _tool_name(tool: Any) -> str | None:
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    return fn.get("name") if isinstance(fn, dict) and isinstance(fn.get("name"), str) else None


def _tool_list(value: Any) -> list[dict]:
    tools = value if isinstance(value, list) else [value]
    if not tools or any(_tool_name(t) is None for t in tools):
        raise _Unparsed("is not a list of function schemas with names")
    return tools


def _tools_from_system(text: str) -> tuple[list[dict], str] | None:
    """``(tools, the prompt without them)`` of a system prompt that lists the tools the Hermes or
    ToolACE way; ``None`` when it lists none. The instructions after the list say how to write
    calls in the dataset's syntax, which the chat template's own replace, so they go too."""
    if "<tools>" in text:
        try:
            _, bodies = _blocks(text, "<tools>", "</tools>")
        except _Unparsed as exc:
            raise _Unparsed(f"the system prompt {exc}") from None
        # Hermes' prompt names the tags in its prose ("within <tools> </tools> XML tags") before the list.
        listed = [k for k, body in enumerate(bodies) if body.strip()]
        if len(listed) != 1:
            raise _Unparsed(f"the system prompt has {len(listed)} <tools> lists")
        at = end = -1
        for _ in range(listed[0] + 1):
            at = text.find("<tools>", end + 1)
            end = text.find("</tools>", at)
        try:
            tools = _tool_list(_literal(text[at + len("<tools>") : end]))
        except _Unparsed as exc:
            raise _Unparsed(f"the system prompt's <tools> block {exc}") from None
        after = text[end + len("</tools>") :].strip()
        if after and not ("<tool_call>" in after and after.endswith("</tool_call>")):
            raise _Unparsed("the system prompt says more after its <tools> than how to write a call")
        return tools, _HERMES_TOOLS_LEAD.sub("", text[:at]).strip()
    found = _TOOLACE_TOOLS.search(text)
    if found is None:
        return None
    at = found.start()
    start = len(text) - len(text[found.end() :].lstrip())
    try:
        value, end = json.JSONDecoder(parse_constant=reject_constant).raw_decode(text, start)
        tools = _tool_list(value)
    except (ValueError, RecursionError) as exc:
        raise _Unparsed(f"the system prompt's tool list {exc}") from None
    after = text[end:].lstrip(" .\n")
    if after and not after.startswith(_TOOLACE_FORMAT_NOTE):
        raise _Unparsed("the system prompt says more after its tool list than how to write a call")
    return tools, text[:at].strip()


def _response_name(body: str) -> str | None:
    try:
        value = _literal(body)
    except _Unparsed:
        return None
    return value.get("name") if isinstance(value, dict) and isinstance(value.get("name"), str) else None


def _in_call_order(results: list[tuple[dict, str]], calls: list[dict]) -> list[tuple[dict, str]]:
    """Hermes' responses name the function they answer: linked by that name, not by position, when
    every one does (parallel calls are not always answered in order)."""
    names = [_response_name(body) for _, body in results]
    wanted = [c["name"] for c in calls]
    if None in names or names == wanted:
        return results
    if sorted(names) != sorted(wanted) or len(set(wanted)) != len(wanted):
        raise _Unparsed(f"the <tool_response> blocks answer {names}, not the calls {wanted}")
    by_name = dict(zip(names, results))
    return [by_name[name] for name in wanted]


def _tool_results(turns: list[dict], calls: list[dict]) -> list[tuple[dict, str]] | None:
    """``(turn, content)`` per call, from the tool turns that answer an assistant turn's calls;
    ``None`` when they cannot be matched to the calls one by one (they stay as written)."""
    texts = [t.get("content") for t in turns]
    if not all(isinstance(x, str) for x in texts):
        return None
    if any("<tool_response>" in x for x in texts):
        results = []
        for turn, text in zip(turns, texts):
            outside, bodies = _blocks(text, "<tool_response>", "</tool_response>")
            if any(piece.strip() for piece in outside):
                raise _Unparsed("a tool turn has text outside its <tool_response> blocks")
            results += [(turn, body.strip()) for body in bodies]
        if len(results) != len(calls):
            raise _Unparsed(f"{len(results)} <tool_response> block(s) answer {len(calls)} tool call(s)")
        return _in_call_order(results, calls)
    if len(texts) == len(calls):
        return list(zip(turns, texts))
    if len(texts) == 1 and len(calls) > 1:
        # ToolACE answers parallel calls with one JSON list, an entry per call, in order.
        try:
            items = json.loads(texts[0], parse_constant=reject_constant)
        except (ValueError, RecursionError):
            return None
        if isinstance(items, list) and [i.get("name") if isinstance(i, dict) else None for i in items] == [
            c["name"] for c in calls
        ]:
            return [(turns[0], json.dumps(item, ensure_ascii=False)) for item in items]
    return None


def structure_text_calls(
    messages: list[dict], origin: list[int | None], tools: list[dict] | None
) -> tuple[list[dict], list[dict] | None, list[tuple[int, str]]]:
    """``(messages, tools, kept)``: the conversation with the tool calls its ShareGPT assistant turns
    write as text turned into OpenAI tool calls (see
    :func:`~lightning_agents.datamodules.conversations.normalize_conversation`), or as it was
    with ``kept`` listing ``(turn index, reason)`` for each such turn when anything does not parse.
    ``messages`` is the list passed in (the same object) exactly when nothing was changed."""
    system = messages[0] if messages and messages[0].get("role") == "system" else None
    listed, problem = None, None
    if tools is None and system is not None and isinstance(system.get("content"), str):
        try:
            listed = _tools_from_system(system["content"])
        except _Unparsed as exc:
            problem = str(exc)
    names = {_tool_name(t) for t in (listed[0] if listed else tools or [])}
    attempts = []
    for k, message in enumerate(messages):
        content = message.get("content")
        if origin[k] is None or message.get("role") != "assistant" or message.get("tool_calls"):
            continue
        if not isinstance(content, str):
            continue
        if "<tool_call>" in content or "</tool_call>" in content:
            attempts.append((k, "hermes"))
        elif names and _PYTHONIC_START.match(content.lstrip()):
            # Without the conversation's tools a bracketed call cannot be told from text.
            attempts.append((k, "pythonic"))

    def kept(reason: str) -> tuple[list[dict], list[dict] | None, list[tuple[int, str]]]:
        return messages, tools, [(origin[k], reason) for k, _ in attempts]

    if problem is not None:
        return kept(problem)
    if not attempts and not listed:
        return messages, tools, []  # nothing written as text: the caller sees the same list back
    out = [dict(m) for m in messages]
    parsed: dict[int, list[dict]] = {}
    for k, style in attempts:
        try:
            if style == "hermes":
                out[k]["content"], calls = _hermes_calls(messages[k]["content"])
            else:
                calls = _pythonic_calls(messages[k]["content"], names)
                out[k]["content"] = ""
        except _Unparsed as exc:
            return kept(f"conversations[{origin[k]}] {exc}")
        parsed[k] = calls
    result: list[dict] = []
    count = 0
    k = 0
    while k < len(out):
        message = out[k]
        result.append(message)
        k += 1
        if k - 1 not in parsed:
            continue
        calls = []
        for call in parsed[k - 1]:
            calls.append({"id": f"call{count:0{_CALL_ID_WIDTH - 4}d}", "type": "function", "function": call})
            count += 1
        message["tool_calls"] = calls
        end = k
        while end < len(out) and out[end].get("role") == "tool" and origin[end] is not None:
            end += 1
        try:
            answers = _tool_results(out[k:end], [c["function"] for c in calls]) if end > k else None
        except _Unparsed as exc:
            return kept(f"conversations[{origin[k]}] {exc}")
        if answers is None:
            continue
        for (turn, content), call in zip(answers, calls):
            answer = {**turn, "content": content, "tool_call_id": call["id"], "name": call["function"]["name"]}
            result.append(answer)
        k = end
    if listed:
        tools, prompt = listed
        if prompt:
            result[0] = {**result[0], "content": prompt}
        else:
            result.pop(0)
    return result, tools, []
