"""Parse the tool calls a model wrote into OpenAI tool calls, in the format its chat template uses.

A model calls tools the way its chat template renders calls in the training data, so the parser
follows the template (:func:`tool_call_style`, from the opener the assistant-label probe finds):

- ``hermes``: ``<tool_call>{"name", "arguments"}</tool_call>`` blocks (Qwen2.5/3, Hermes, QwQ, ERNIE 4.5,
  the embedded template), or a JSON list of such calls in one block (Granite 3.1, xLAM);
- ``llama3_json``: the whole reply is ``{"name", "parameters"}`` objects (Llama 3.1-3.3), optionally
  after ``<|python_tag|>`` and separated by ``;``; or such objects inside prose, as vLLM reads them;
- ``mistral``: ``[TOOL_CALLS]`` then a JSON list (Mistral 7B v0.3, Nemo; a template whose calls are a bare
  JSON list, xLAM's, is read this way) or ``name[ARGS]{...}``
  (Mistral Small 3.2, Devstral; ``name[CALL_ID]id[ARGS]{...}`` as Small 3.2's template renders it);
  the engines decode without special tokens, so the forms without the markers (``[{"name"...}]``,
  ``name{...}``) are read too, a bare list only when each item has a call's keys and no others
  (``name``, ``arguments`` or ``parameters``, ``id``): ``[{"name": "Oslo"}]`` is an answer;
- ``deepseek_v3``: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` then a ```` ```json ```` block,
  with or without the marker tokens, and DeepSeek-V3.1's ``<｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}``;
- ``qwen3_coder``: ``<tool_call><function=name><parameter=key>value</parameter>...</function></tool_call>``
  (Qwen3-Coder, Qwen3.5, Nemotron-3, Step-3.5; Seed-OSS with ``<seed:tool_call>``): one XML-like block
  per argument, its value as text, typed by the tool's schema when the caller passes the schemas;
- ``glm4_moe``: ``<tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value>...</tool_call>``
  (GLM-4.5/4.6/4.7), its values typed like ``qwen3_coder``'s;
- ``kimi_k2``: ``<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}<|tool_call_end|>``
  (Kimi-K2), with or without the marker tokens;
- ``minimax_m2`` and ``deepseek_v32``: ``<invoke name="name"><parameter name="key">value</parameter>
  </invoke>`` (MiniMax-M2, in ``<minimax:tool_call>``; DeepSeek-V3.2 with ``｜DSML｜`` before each tag
  and ``string="true"`` on text values, the others JSON), values typed like ``qwen3_coder``'s;
- ``harmony``: gpt-oss's ``<|channel|>commentary to=functions.name <|constrain|>json<|message|>{...}<|call|>``
  (or the template's ``<|start|>assistant to=functions.name<|channel|>commentary json<|message|>``);
  with the markers the content is the ``final`` channel (``analysis`` is reasoning, as in vLLM's
  ``openai`` parser); decoded without them (``analysisI will check.assistantcommentary
  to=functions.name json{...}``) the recipient and its JSON object are still found, and a channel name
  run into the tool's name (``get_weathercommentary``) is taken off, by the offered tools when known;
- ``pythonic``: Gemma 3 (vLLM's pythonic template) and Llama 4 (``<|python_start|>``): the reply is a
  Python list of calls with keyword arguments, ``[get_weather(city="Oslo", days=3)]``, read with
  :mod:`ast` and never evaluated: an argument that is not a literal (a variable, an expression, a
  call) makes the call malformed; JSON's ``true``/``false``/``null`` count as literals;
- ``gemma4``: ``<|tool_call>call:name{key:<|"|>text<|"|>,n:3}<tool_call|>`` (Gemma 4), and
  ``call:name{{...JSON...}}``, which its template renders from JSON-string arguments;
- ``command_r7b``: ``<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|>``
  (Command R7B), with or without the marker tokens;
- ``solar_open``: ``<|tool_call:begin|>id<|tool_call:name|>name<|tool_call:args|>{...}<|tool_call:end|>``
  (Solar-Open), with its marker tokens only (without them the call id runs into the name);
- ``functionary_v3_2``: ``>>>name\n{...}`` messages after the prompt's ``>>>`` (functionary v3.2; text
  to the user is the message to ``all``, ``all\nHello``), and the ``python`` tool's code as it is;
- ``lfm2``: LiquidAI LFM2/LFM2.5's ``<|tool_call_start|>[get_weather(city="Oslo")]<|tool_call_end|>``, a
  pythonic list between special tokens with text to the user around it; decoded without the tokens,
  a list that opens the reply (after any ``</think>``) or ends it. As vLLM's ``lfm2`` parser, it also
  reads dotted names, sets (as lists), zero-padded integers and raw newlines or NULs inside strings;
  the style comes from the tokenizer's special tokens, since LFM2's templates render no calls;
- ``apertus``: Apertus's ``<|tools_prefix|>[{"name": {...}}, ...]<|tools_suffix|>``, each call an object
  whose one key is the tool's name and whose value is its arguments (vLLM's ``apertus`` parser); the
  engines hand its replies over with the markers (``hf_engine.MARKED_STYLES``), as vLLM's server does;
- ``json_after:<marker>``: any other template whose calls are JSON after a marker of its own, e.g.
  Nemotron's ``<TOOLCALL>[{"name", "arguments"}]</TOOLCALL>``, InternLM2's
  ``<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>``, Hunyuan's and Jamba's
  ``<tool_calls>[...]</tool_calls>``, Phi-4-mini's ``functools[...]``, Granite 3.0's ``<|tool_call|>[...]``;
  every marker's block is read, the text around them is content, and one block that is not calls
  makes the whole reply a botched call; decoded without a special-token marker, a reply of calls alone
  (with a bare list's keys as in ``mistral``) counts.

A call's id is the one the model wrote where its style has it write one (Kimi-K2's
``functions.NAME:INDEX``, Solar-Open's, Mistral's ``[CALL_ID]`` and list ``"id"``), as vLLM's parsers
keep it, so the next prompt renders the history as the model wrote it (Kimi-K2-Thinking's template
writes the id where the name goes, and SFT trains it as ``functions.NAME:INDEX``); else, or where an
earlier call of the reply has it, ``{id_prefix}_{k}``.

Reading only ``<tool_call>`` blocks, a Llama or Mistral agent's calls were taken for its final
answer: every episode ended at its first tool call, silently. Likewise the XML calls of Qwen3-Coder and
Qwen3.5 were read as malformed JSON calls: no call of theirs ever ran; nor did gpt-oss, Gemma 3/4,
Llama 4, Command R7B, Solar-Open, functionary v3.2 and LFM2 calls. A template whose calls no style reads is
reported once (a warning naming its opener) instead of failing silently.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import math
import re
import warnings
from collections.abc import Collection, Iterator
from typing import Any

from lightning_agents.json_text import reject_constant
from lightning_agents.tasks.answers import split_marked_reasoning

__all__ = [
    "MISTRAL_ARGS_CALL_FORMAT",
    "TOOL_CALL_STYLES",
    "alphanumeric_call_id",
    "harmony_written_order",
    "is_nine_character_id",
    "is_notice",
    "malformed_call",
    "malformed_call_observation",
    "nine_character_call_ids",
    "parse_tool_calls",
    "split_reasoning",
    "tool_call_style",
]

logger = logging.getLogger(__name__)

#: The named styles; ``json_after:<marker>`` is the family of the rest.
TOOL_CALL_STYLES = (
    "hermes",
    "llama3_json",
    "mistral",
    "deepseek_v3",
    "qwen3_coder",
    "glm4_moe",
    "kimi_k2",
    "minimax_m2",
    "deepseek_v32",
    "harmony",
    "pythonic",
    "command_r7b",
    "solar_open",
    "gemma4",
    "functionary_v3_2",
    "lfm2",
    "apertus",
)
_JSON_AFTER = "json_after:"
# What closes the JSON of a json_after call: whitespace and closing tags (</TOOLCALL>, <|action_end|>).
_CLOSERS = re.compile(r"(?:\s|</[^<>]{1,40}>|<\|[^<>|]{1,40}\|>)*")
_PYTHON_TAG = "<|python_tag|>"
_JSON_LIST_OPENER = re.compile(r'\[\s*\{\s*"name"')
_FIRST_TAG = re.compile(r"<\|[^<>|]{1,40}\|>|<[^<>]{1,40}>")
_MISTRAL = "[TOOL_CALLS]"
# Apertus: a JSON list of {"NAME": ARGUMENTS} objects between these two special tokens.
_APERTUS_OPEN, _APERTUS_CLOSE = "<|tools_prefix|>", "<|tools_suffix|>"
# The marker as the plain word the notice names it by (MISTRAL_ARGS_CALL_FORMAT), written as text by a
# model that follows the notice's words: no Mistral parser reads it, so it is a malformed call (told
# again), neither an answer nor a call to a tool named `TOOL_CALLScalculatorARGS`.
_MISTRAL_WORD = re.compile(r"(?<![\w\[])TOOL_CALLS(?!\])")
_MISTRAL_ARGS = "[ARGS]"
_MISTRAL_CALL_ID = re.compile(r"\[CALL_ID\][A-Za-z0-9]*")
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
# DeepSeek-V3.1: no "function" and no ```json fence; the arguments run to the call's end token. They
# never run into the next call: over unclosed calls a plain lazy group is quadratic (80 s for 600 kB).
_DS31_CALL_RE = re.compile(
    re.escape(_DS_CALL)
    + r"\s*([A-Za-z_][\w.\-]*)\s*"
    + re.escape(_DS_SEP)
    + r"((?:(?!"
    + re.escape(_DS_CALL)
    + r").)*?)"
    + re.escape(_DS_END),
    re.DOTALL,
)
_NAME_RE = re.compile(r"[A-Za-z_][\w.\-]*")
# Qwen3-Coder's XML calls. The <tool_call> wrapper (<seed:tool_call> for Seed-OSS) is optional: a
# decoder that drops special tokens removes it. A block ends at </function>, at the next call, or at
# the end of the reply (vLLM's qwen3_coder parser reads those as well); a parameter also ends where
# the next one starts. A lazy group never runs past the next call (or parameter), so a reply of
# unclosed blocks is still read in linear time.
_XML_CALL_RE = re.compile(
    r"(?:<(?:seed:)?tool_call>\s*)?<function=([^<>\n]{0,200})>(.*?)"
    r"(?:</function>(?:\s*</(?:seed:)?tool_call>)?|(?=<(?:seed:)?tool_call>|<function=)|\Z)",
    re.DOTALL,
)
# The name groups are bounded and stop at `<`: `[^>\n]*` ran from every opener to the end of a reply
# without `>` (17-36 s for 200 kB of `<function=`).
_XML_PARAM_RE = re.compile(r"<parameter=([^<>\n]{0,200})>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
# GLM-4.5+: the name right after <tool_call>, then key/value pairs. Blocks are cut between the tags
# (_blocks) and split on them (no regex over a block: a lazy group before a missing closing tag is quadratic).
_GLM_OPEN, _GLM_CLOSE = re.compile("<tool_call>"), re.compile("</tool_call>")
_GLM_TAGS = re.compile(r"(</?arg_key>|</?arg_value>)")
_GLM_PAIR = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
_GLM_JSON = re.compile(r"<tool_call>\s*\{")
# Kimi-K2: "functions.NAME:INDEX" (the marker before it may be decoded away, the prefix then is not)
_KIMI_CALL_RE = re.compile(r"(?:<\|tool_call_begin\|>\s*(?:functions\.)?|(?<![\w.])functions\.)([\w.\-]+?):\d+\s*")
_KIMI_ARGS = "<|tool_call_argument_begin|>"
_KIMI_END = re.compile(r"\s*" + re.escape("<|tool_call_end|>"))
_KIMI_SECTION = re.compile(r"<\|tool_calls?_section_(?:begin|end)\|>")
# MiniMax-M2 / DeepSeek-V3.2 (DSML): tags found one by one, bodies cut between them (see _blocks).
_DSML = "｜DSML｜"
_INVOKE_OPEN = re.compile(r'<(?:｜DSML｜)?invoke\s+name="([^"<>]*)"[^<>]*>')
_INVOKE_CLOSE = re.compile(r"</(?:｜DSML｜)?invoke>")
_PARAM_OPEN = re.compile(r'<(?:｜DSML｜)?parameter\s+name="([^"<>]*)"([^<>]*)>')
_PARAM_CLOSE = re.compile(r"</(?:｜DSML｜)?parameter>")
_INVOKE_WRAPPERS = re.compile(r"</?(?:minimax:tool_call|｜DSML｜function_calls)>")
_STRING_ATTRIBUTE = re.compile(r'\bstring="(true|false)"')
_STRING_TYPES = {"string", "str", "text", "varchar", "char", "enum"}
# The spellings of the constants: JSON's, which templates that print values with `tojson` teach
# (Gemma 3's), and Python's, which those that print with `|string` teach.
_CONSTANT_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
# A Llama 3 call inside prose: an object that opens with its "name" key.
_LLAMA_CALL_START = re.compile(r'\{\s*"name"\s*:')
# What a malformed call leaves in the content, and how to tell the model to write one.
_MALFORMED = {
    "hermes": ("<tool_call>", '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'),
    "llama3_json": ('{"name"', '{"name": ..., "parameters": {...}}'),
    # the markers named, not written: the notice's text stays text (see MISTRAL_ARGS_CALL_FORMAT)
    "mistral": (_MISTRAL, 'the TOOL_CALLS token, then [{"name": ..., "arguments": {...}}]'),
    "deepseek_v3": (_DS_CALL, _DS_CALL + "function" + _DS_SEP + "name\n```json\n{...}\n```" + _DS_END),
    "glm4_moe": ("<tool_call>", "<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>"),
    "kimi_k2": (
        "<|tool_call_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}"
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
    "minimax_m2": (
        "invoke name=",
        '<minimax:tool_call>\n<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n</invoke>\n'
        "</minimax:tool_call>",
    ),
    "deepseek_v32": (
        "invoke name=",
        f'<{_DSML}function_calls>\n<{_DSML}invoke name="NAME">\n<{_DSML}parameter name="KEY" string="true">VALUE'
        f"</{_DSML}parameter>\n</{_DSML}invoke>\n</{_DSML}function_calls>",
    ),
    "qwen3_coder": (
        "<function=",
        "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>",
    ),
    "harmony": ("to=functions.", "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>"),
    "pythonic": ("[", '[NAME(KEY="VALUE", ...), ...]'),
    "command_r7b": (
        "<|START_ACTION|>",
        '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}]<|END_ACTION|>',
    ),
    "apertus": (_APERTUS_OPEN, _APERTUS_OPEN + '[{"NAME": {...}}]' + _APERTUS_CLOSE),
    "solar_open": (
        "<|tool_call:begin|>",
        "<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|><|calls|>",
    ),
    "gemma4": ("<|tool_call>", '<|tool_call>call:NAME{KEY:<|"|>VALUE<|"|>}<tool_call|>'),
    "functionary_v3_2": (">>>", ">>>NAME\n{...}"),
    "lfm2": ("<|tool_call_start|>", '<|tool_call_start|>[NAME(KEY="VALUE", ...)]<|tool_call_end|>'),
}
_WARNED: set[str] = set()

# No \s* around the lazy group (it is stripped in Python): whitespace matched by both backtracks
# quadratically, 70 s for a call padded with 100,000 spaces. A block never runs into the next
# <tool_call>: an unterminated call must not swallow a complete one after it.
_CALL_RE = re.compile(r"<tool_call>((?:(?!<tool_call>).)*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)


def tool_call_style(opener: str | None, special_tokens: Collection[str] = ()) -> str:
    """The style of a chat template's tool calls, from the text its tool-call turns start with
    (:attr:`~lightning_agents.datamodules.conversations.TemplateLayout.tool_call_opener`);
    ``hermes`` when the template renders no calls or an unknown form (the package's own convention).

    ``special_tokens`` (the tokenizer's added vocabulary) names the style of a template that renders
    no calls but whose model was trained to write them: LFM2's templates show the tool list and leave
    the calls, ``<|tool_call_start|>[...]<|tool_call_end|>``, to the message text (LFM2.5's render
    them only inside ``{% generation %}`` blocks, which the layout probe does not render).
    """
    if opener is None:
        return "lfm2" if _LFM2_START in special_tokens and _LFM2_END in special_tokens else "hermes"
    if _LFM2_START in opener:
        return "lfm2"
    if opener in ("", ">>>"):
        # empty: the generation prompt ends where the call's name starts (functionary v3.2's `>>>`)
        return "functionary_v3_2"
    if "to=functions." in opener:
        return "harmony"
    if _COHERE_ACTION in opener:
        return "command_r7b"
    if "<|tool_call:begin|>" in opener or "<|tool_call:name|>" in opener:
        return "solar_open"
    if "tool_call>call:" in opener:
        return "gemma4"
    if _PYTHONIC_OPENER.fullmatch(opener):
        return "pythonic"
    if _MISTRAL in opener:
        return "mistral"
    if "tool▁call" in opener:
        return "deepseek_v3"
    if "invoke name=" in opener:
        return "deepseek_v32" if _DSML in opener else "minimax_m2"
    if "tool_call_begin|>" in opener or "tool_calls_section_begin|>" in opener:
        return "kimi_k2"
    if opener.rstrip().endswith("<tool_call>"):
        # GLM-4.5+ writes the name right after the tag; hermes opens a JSON object there
        return "glm4_moe"
    if "<function=" in opener:
        # Qwen3-Coder/3.5's `<tool_call>\n<function=`: the XML form inside hermes' tags
        return "qwen3_coder"
    if "<tool_call>" in opener:
        return "hermes"
    if _APERTUS_OPEN in opener:
        return "apertus"
    bare = opener.replace(_PYTHON_TAG, "").lstrip()
    if bare.startswith("{"):
        return "llama3_json"
    if _JSON_LIST_OPENER.match(bare):
        # a bare JSON list of calls (xLAM): mistral's reading without its marker; as json_after:[ every
        # answer with a bracket would count as a botched call, and no call would parse
        return "mistral"
    start = min((i for i in (bare.find('[{"name"'), bare.find('{"name"')) if i > 0), default=-1)
    if start > 0 and bare[:start].strip():
        return _JSON_AFTER + bare[:start].strip()
    if opener not in _WARNED:
        # a form no style knows: its calls would read as final answers
        _WARNED.add(opener)
        logger.warning(
            "the chat template's tool calls start with %r, a form no rollout tool-call parser reads "
            "(styles: %s, json_after:<marker>); they are parsed as hermes <tool_call> blocks, so this "
            "model's calls will be taken for final answers",
            opener,
            ", ".join(TOOL_CALL_STYLES),
        )
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


def alphanumeric_call_id(id_prefix: str, k: int) -> str:
    """The ``k``-th call id of ``id_prefix`` as nine alphanumeric characters (``call_3``, 0 ->
    ``0call3000``): Mistral's templates raise "Tool call IDs should be alphanumeric strings with
    length 9!" on any other. Its digits are the prefix's and ``k``'s, so the ids of ``call_{turn}``
    prefixes differ across an episode's turns (for fewer than 1000 calls a turn)."""
    return (re.sub(r"[^A-Za-z0-9]", "", id_prefix) + f"{k:03d}").rjust(9, "0")[-9:]


def nine_character_call_ids(messages: list[dict]) -> list[dict]:
    """``messages`` with every call id (in its call and in the ``tool_call_id`` of the results
    answering it) that is not nine alphanumeric characters replaced by the first nine hex digits
    of its SHA-256, for chat templates and servers that take no other (Mistral's templates raise
    "Tool call IDs should be alphanumeric strings with length 9!", and vLLM's Mistral path returns
    a 400). ``messages`` itself when no id needs it.

    The one rule for SFT rows (:mod:`lightning_agents.datamodules.conversations`), rollout prompts
    (:func:`~lightning_agents.rollout.hf_engine.template_call_ids`) and the histories an HFlow
    endpoint backbone sends (``alphanumeric_ids``): a hash, so the same id becomes the same
    digits in any of them, in a conversation and in any continuation of it, whoever renders it.
    An id whose digits are taken (another id of the conversation, or an earlier rename) hashes
    again with a counter.
    """
    ids: list[Any] = []
    for m in messages:
        ids += [c.get("id") for c in (m.get("tool_calls") or ()) if isinstance(c, dict)]
        if m.get("role") == "tool":
            ids.append(m.get("tool_call_id"))
    wrong = [i for i in dict.fromkeys(ids) if isinstance(i, str) and not is_nine_character_id(i)]
    if not wrong:
        return messages
    taken = {i for i in ids if isinstance(i, str) and i not in wrong}
    renamed: dict[str, str] = {}
    for old in wrong:
        new, k = hashlib.sha256(old.encode()).hexdigest()[:9], 0
        while new in taken:
            k += 1
            new = hashlib.sha256(f"{old}#{k}".encode()).hexdigest()[:9]
        renamed[old] = new
        taken.add(new)
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            calls = [{**c, "id": renamed.get(c.get("id"), c.get("id"))} if isinstance(c, dict) else c for c in calls]
            m = {**m, "tool_calls": calls}
        if m.get("role") == "tool" and m.get("tool_call_id") in renamed:
            m = {**m, "tool_call_id": renamed[m["tool_call_id"]]}
        out.append(m)
    return out


#: The mistral style with every id the model wrote kept, those its templates refuse included.
_KEEP_REFUSED = "mistral_written_ids"


def _call_id(id_prefix: str, k: int, style: str) -> str:
    # Mistral's templates refuse any id but nine alphanumeric characters when the conversation is
    # rendered for the next turn.
    if style in ("mistral", _KEEP_REFUSED):
        return alphanumeric_call_id(id_prefix, k)
    return f"{id_prefix}_{k}"


_NINE_ALPHANUMERIC = re.compile(r"[A-Za-z0-9]{9}")


def is_nine_character_id(call_id: Any) -> bool:
    """Whether ``call_id`` is an id Mistral's templates take: nine letters or digits."""
    return isinstance(call_id, str) and _NINE_ALPHANUMERIC.fullmatch(call_id) is not None


def _written_id(written: str | None, id_prefix: str, calls: list[dict], style: str) -> str:
    """The id of a call whose style has the model write one (Kimi-K2's ``functions.NAME:INDEX``,
    Solar-Open's, Mistral Small 3.2's ``[CALL_ID]``): the model's own, as vLLM's parsers keep it, so
    the next turn's prompt renders the history as the model wrote it (Kimi-K2-Thinking's template
    writes the id where the name goes, and SFT trains its calls with Moonshot's ids); the generated
    id (:func:`_call_id`) where it wrote none, one an earlier call of the reply has, or (Mistral) one
    its template refuses, unless asked to keep it (``_KEEP_REFUSED``: the rollout answers such a
    call as malformed, :func:`~lightning_agents.rollout.agent_turn.apply_reply`)."""
    written = (written or "").strip()
    if (
        written
        and not any(ch.isspace() for ch in written)
        and all(c["id"] != written for c in calls)
        and (style != "mistral" or _NINE_ALPHANUMERIC.fullmatch(written))
    ):
        return written
    return _call_id(id_prefix, len(calls), style)


def parse_tool_calls(
    text: str,
    id_prefix: str = "call",
    style: str = "hermes",
    tools: list[dict] | None = None,
    keep_refused_ids: bool = False,
) -> tuple[str, list[dict]]:
    """Split a completion into its free text and its tool calls.

    Args:
        text: the decoded completion.
        id_prefix: prefix of the generated call ids (``call_0``, ``call_1``, ...), given to calls whose
            model wrote no id of its own (see the module's docstring).
        style: the chat template's call format, one of :data:`TOOL_CALL_STYLES` or
            ``json_after:<marker>`` (:func:`tool_call_style`).
        tools: the OpenAI tool schemas offered to the model. ``harmony`` uses their names (to tell a
            name that decoding ran a channel name into); the XML-like styles (``qwen3_coder``,
            ``glm4_moe``, ``minimax_m2``, ``deepseek_v32``) type their argument values, which are
            text, by their parameter's schema (``"3"`` stays a string for a string parameter, as in
            vLLM); without a schema a value that reads as JSON (or Python's ``True``, ``False``,
            ``None``) is taken as that value, any other as a string.
        keep_refused_ids: ``mistral``: keep an id the model wrote that Mistral's templates refuse
            (``call_1``) rather than give the call a generated one, so the caller can tell the
            model wrote it (an RL rollout answers such a call as malformed).

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
    if style == "mistral" and keep_refused_ids:
        return _parse_mistral(text, id_prefix, keep_refused_ids=True)
    return _PARSERS[style](text, id_prefix, tools)


def malformed_call(content: str, style: str = "hermes") -> bool:
    """The content left after parsing still holds the start of a call: a call the model botched,
    to answer with :func:`malformed_call_observation` rather than to take as its final answer."""
    if style.startswith(_JSON_AFTER):
        # The marker's first tag is enough: InternLM2's `<|action_start|>` without `<|plugin|>` is a
        # botched call, not an answer.
        marker = style[len(_JSON_AFTER) :]
        first = _FIRST_TAG.match(marker)
        return marker in content or (first is not None and first.group(0) in content)
    marker = _MALFORMED[style][0]
    if style == "llama3_json":
        return content.replace(_PYTHON_TAG, "").lstrip().startswith(marker)
    if style == "qwen3_coder":
        return marker in content or "<tool_call>" in content
    if style == "kimi_k2":
        return marker in content or _KIMI_ARGS in content
    if style == "pythonic":
        return _PYTHONIC_CALL.match(content) is not None
    if style == "command_r7b":
        return marker in content or _COHERE_LIST.search(content) is not None
    if style == "functionary_v3_2":
        return _FUNCTIONARY_BOTCHED.search(content) is not None
    if style == "lfm2":
        return marker in content or _LFM2_BARE.match(content, _after_reasoning(content)) is not None
    if style == "mistral":
        return marker in content or _MISTRAL_WORD.search(content) is not None
    return marker in content


#: How every malformed call's notice opens (:func:`malformed_call_observation`).
_NOTICE_OPENING = "error: malformed tool call"


#: How a Mistral template whose calls are ``[TOOL_CALLS]NAME[ARGS]{...}`` (Small 3.2, Devstral,
#: Ministral 3) tells its model to write one (:func:`malformed_call_observation`), where the ``mistral``
#: style's own hint is v3's JSON list (Nemo, v0.3). The markers are named, not written: the real
#: tokenizers encode ``[TOOL_CALLS]`` in a text as their control token (id 9 in Nemo's tekken), which
#: mistral-common never does in a user's text, and the RL glue, SFT and the HF engine all encode
#: the rendered notice that way, so a written marker was a control token inside a user turn.
MISTRAL_ARGS_CALL_FORMAT = "the TOOL_CALLS token, then NAME, the ARGS token and {...}"


def malformed_call_observation(style: str = "hermes", call_format: str | None = None) -> str:
    """The tool observation answering a malformed call: how calls are written in this style, or
    ``call_format`` where the chat template writes them in a form of its own within the style
    (:data:`MISTRAL_ARGS_CALL_FORMAT`; :func:`~lightning_agents.rollout.agent_turn.model_call_format`)."""
    if call_format:
        return f"{_NOTICE_OPENING}; write {call_format}"
    if style.startswith(_JSON_AFTER):
        return f'{_NOTICE_OPENING}; write {style[len(_JSON_AFTER) :]}[{{"name": ..., "arguments": {{...}}}}]'
    return f"{_NOTICE_OPENING}; write {_MALFORMED[style][1]}"


def is_notice(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a malformed call's notice given as a ``user`` message, where the chat
    template shows no lone tool message (Gemma 4) or refuses the role order one makes (Ministral-3
    Reasoning; :func:`~lightning_agents.rollout.agent_turn.model_notice_role`): the environment's
    answer, no turn of the user's, wherever user turns are counted or shown (BFCL's next turn and
    scoring, RL records' ``user_turns``, TopoCurate's error steps, HFlow's transcripts)."""
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(_NOTICE_OPENING)


def _skip_space(text: str, pos: int, separators: str = "") -> int:
    """The first position from ``pos`` that is neither whitespace nor one of ``separators``."""
    while pos < len(text) and (text[pos].isspace() or text[pos] in separators):
        pos += 1
    return pos


def _objects(text: str, pos: int, separators: str) -> tuple[list[Any], int] | None:
    """JSON values one after another from ``pos`` (separated by whitespace and ``separators``),
    and where they end; ``None`` when one does not parse."""
    decoder = json.JSONDecoder(parse_constant=reject_constant)
    values = []
    while True:
        pos = _skip_space(text, pos, separators)
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
            # Mistral v0.3's template renders each call's id in the list the model writes.
            _written_id(item["id"] if isinstance(item.get("id"), str) else None, id_prefix, calls, style),
        )
        if call is None:
            return None
        calls.append(call)
    return calls


def _outside(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the ``(start, end)`` spans (in order, not overlapping): the content around the
    calls; a block that is no call stays in it, where :func:`malformed_call` finds it."""
    kept, last = [], 0
    for start, end in spans:
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    return "".join(kept)


def _blocks(text: str, opener: re.Pattern, closer: re.Pattern, start: int = 0, stop: int | None = None):
    """``(opener match, body start, body end, block end)`` of each closed ``opener ... closer`` block in
    ``text[start:stop]``. A block the next one opens inside (an unclosed call) is skipped, as vLLM's
    glm4_moe and gemma4 parsers skip it, and so is everything after the last closing tag. Each tag is
    searched for once, so a reply of unclosed blocks is read in linear time."""
    stop = len(text) if stop is None else stop
    close = None
    match = opener.search(text, start, stop)
    while match is not None:
        if close is None or close.start() < match.end():
            close = closer.search(text, match.end(), stop)
            if close is None:
                return
        following = opener.search(text, match.end(), stop)
        if following is not None and following.start() < close.start():
            match = following
            continue
        yield match, match.end(), close.start(), close.end()
        match = opener.search(text, close.end(), stop)


def _marked_json(text: str, marker: re.Pattern, value_start):
    """``(marker match, its segment, value, end)`` for each ``marker`` followed by a JSON value. The
    segment runs to the next marker; ``value_start(segment)`` is where the value begins in it (``None``:
    no value there) and ``end`` is where it stops. A marker whose value does not decode is skipped.

    Decoding happens within the marker's own segment: a JSON error counts lines from the string's
    start, so failing on the whole text at every marker would be quadratic (20 s for 40,000 cut calls).
    """
    decoder = json.JSONDecoder(parse_constant=reject_constant)
    for match, segment in _segments(text, marker):
        pos = value_start(segment)
        if pos is None:
            continue
        try:
            value, end = decoder.raw_decode(segment, pos)
        except (ValueError, RecursionError):
            continue
        yield match, segment, value, end


def _segments(text: str, marker: re.Pattern):
    """``(marker match, segment)`` for each ``marker``: the segment is the text after it up to the next one."""
    matches = list(marker.finditer(text))
    for k, match in enumerate(matches):
        yield match, text[match.end() : matches[k + 1].start() if k + 1 < len(matches) else len(text)]


def _parse_json_after(text: str, id_prefix: str, marker: str) -> tuple[str, list[dict]]:
    """Every ``marker`` block's calls (Hunyuan's ``<tool_calls>[a]</tool_calls> <tool_calls>[b]</tool_calls>``)
    and the text around them. One block that is not calls makes the reply a botched call, as in
    ``lfm2``: block ``b`` left in the content would never run and never be reported."""
    at = text.find(marker)
    if at < 0:
        # A marker made of special tokens is gone from text decoded without them: then only a
        # reply that is nothing but calls counts, each item a call's keys alone (else it is data).
        found = _objects(text, 0, ",;") if text.lstrip().startswith(('{"name"', '[{"name"')) else None
        if found is None or not found[0] or _CLOSERS.match(text, found[1]).end() < len(text):
            return text.strip(), []
        items = _flat(found[0])
        calls = _named(items, id_prefix, "json_after") if all(map(_only_call_keys, items)) else None
        return ("", calls) if calls else (text.strip(), [])
    read = _marked_blocks(text, at, marker, ",;")
    calls = _named(read[0], id_prefix, "json_after") if read else None
    # Text after the calls (Phi-4-mini's and Hunyuan's "Would you like to know more?") is content, as
    # the text before them is: taken for a botched call, the model got an error for a good call.
    return (read[1], calls) if calls else (text.strip(), [])


def _marked_blocks(text: str, at: int, marker: str, separators: str) -> tuple[list[Any], str] | None:
    """The JSON items of every ``marker`` block from the one at ``at`` on (each block's values,
    lists flattened) and the text around the blocks, stripped parts joined by newlines; ``None``
    when one block holds no JSON value (``json_after``, ``apertus``)."""
    items, kept = [], [text[:at]]
    while at >= 0:
        # Decoded in place, block after block: a marker inside a call's JSON (Phi-4-mini's
        # "import functools" in code) is consumed with it, and a failure ends the reading (linear time).
        found = _objects(text, at + len(marker), separators)
        if found is None or not found[0]:
            return None
        items += _flat(found[0])
        at = text.find(marker, found[1])
        closed = _CLOSERS.match(text, found[1], len(text) if at < 0 else at).end()
        kept.append(text[closed : len(text) if at < 0 else at])
    return items, "\n".join(part.strip() for part in kept if part.strip())


def _parse_apertus(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    """Apertus's calls: every ``<|tools_prefix|>`` block's list of ``{"NAME": ARGUMENTS}`` objects and
    the text around the blocks (one block that is not calls makes the reply a botched call, as in
    ``json_after``). Without the marker there is no call, as in vLLM's parser: the engines hand the
    marker over (``hf_engine.MARKED_STYLES``), and a list the model ends an answer with is its data."""
    at = text.find(_APERTUS_OPEN)
    if at < 0:
        return text.strip(), []
    read = _marked_blocks(text, at, _APERTUS_OPEN, ",")
    calls = _keyed(read[0], id_prefix) if read else None
    return (read[1], calls) if calls else (text.strip(), [])


def _keyed(items: list[Any], id_prefix: str) -> list[dict] | None:
    """Calls written as ``{"NAME": ARGUMENTS}`` (Apertus), or ``None`` where one item is not such a call."""
    calls = []
    for item in items:
        if not isinstance(item, dict) or len(item) != 1:
            return None
        name, arguments = next(iter(item.items()))
        call = _call(name, arguments, _call_id(id_prefix, len(calls), "apertus")) if name.strip() else None
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _flat(values: list[Any]) -> list[Any]:
    """The items of JSON values that are each a call or a list of calls."""
    return [item for value in values for item in (value if isinstance(value, list) else [value])]


def _only_call_keys(item: Any) -> bool:
    """``item`` has a call's keys and no others: ``name`` and ``arguments`` or ``parameters`` (and
    maybe ``id``). Without a marker this tells a call list from a data answer, ``[{"name": "Oslo"}]``."""
    if not isinstance(item, dict):
        return False
    keys = set(item) - {"id"}
    return keys == {"name", "arguments"} or keys == {"name", "parameters"}


def _parse_llama3_json(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    body = text.replace(_PYTHON_TAG, "").strip()
    if body.startswith("{"):
        found = _objects(body, 0, ";,")
        if found is not None and found[1] == len(body) and found[0]:
            calls = _named(found[0], id_prefix, "llama3_json", key="parameters")
            if calls:
                return "", calls
    return _llama3_in_prose(body, id_prefix) or (text.strip(), [])


def _llama3_in_prose(body: str, id_prefix: str) -> tuple[str, list[dict]] | None:
    """Calls a Llama model wrote inside prose ("Here is the call: {...}"), as vLLM's llama3_json
    parser reads them; stricter than a reply of calls alone, since prose may quote JSON: every
    object needs a name and a "parameters" (or "arguments") object. The prose is the content."""
    start = _LLAMA_CALL_START.search(body)
    if start is None:
        return None
    found = _objects(body, start.start(), ";,")
    if found is None or not found[0]:
        return None
    for item in found[0]:
        if not isinstance(item, dict) or not isinstance(item.get("parameters", item.get("arguments")), dict):
            return None
    calls = _named(found[0], id_prefix, "llama3_json", key="parameters")
    if not calls:
        return None
    prose = (body[: start.start()].strip(), body[found[1] :].strip())
    return "\n".join(part for part in prose if part), calls


def _parse_mistral(text: str, id_prefix: str, keep_refused_ids: bool = False) -> tuple[str, list[dict]]:
    ids = _KEEP_REFUSED if keep_refused_ids else "mistral"
    at = text.find(_MISTRAL)
    content, rest = (text[:at], text[at + len(_MISTRAL) :]) if at >= 0 else ("", text)
    rest = rest.strip()
    if at < 0 and _MISTRAL_WORD.match(rest):
        return text.strip(), []
    if at < 0 and not rest.startswith("[{"):
        # Without the marker (decoded without special tokens) only a reply that is nothing but
        # calls counts: a list of objects with names, or `name{...}` pieces.
        calls = _mistral_pieces(rest, id_prefix, ids) if _NAME_RE.match(rest) else None
        return ("", calls) if calls else (text.strip(), [])
    if rest.startswith("["):
        found = _objects(rest, 0, "")
        if found is None or found[1] < len(rest) or len(found[0]) != 1 or not isinstance(found[0][0], list):
            return text.strip(), []
        if at < 0 and not all(map(_only_call_keys, found[0][0])):
            # without the marker, `[{"name": "Oslo"}, {"name": "Bergen"}]` is an answer, not two calls
            return text.strip(), []
        calls = _named(found[0][0], id_prefix, ids)
    else:
        calls = _mistral_pieces(rest, id_prefix, ids)
    return (content.strip(), calls) if calls else (text.strip(), [])


def _mistral_pieces(rest: str, id_prefix: str, style: str) -> list[dict] | None:
    """``name[ARGS]{...}`` pieces (``[ARGS]`` and the ``[TOOL_CALLS]`` between them may be gone);
    also DeepSeek-V3.1's ``name{...}`` once its marker tokens are decoded away."""
    calls, pos = [], 0
    decoder = json.JSONDecoder(parse_constant=reject_constant)
    while pos < len(rest):
        name = _NAME_RE.match(rest, pos)
        if name is None:
            return None
        pos = name.end()
        call_id = _MISTRAL_CALL_ID.match(rest, pos)
        if call_id:  # Mistral Small 3.2's template renders the call's id between name and arguments
            pos = call_id.end()
        written = call_id.group(0)[len("[CALL_ID]") :] if call_id else None
        if rest.startswith(_MISTRAL_ARGS, pos):
            pos += len(_MISTRAL_ARGS)
        try:
            arguments, pos = decoder.raw_decode(rest, pos)
        except (ValueError, RecursionError):
            return None
        call = _call(name.group(0), arguments, _written_id(written, id_prefix, calls, style))
        if call is None:
            return None
        calls.append(call)
        pos = _skip_space(rest, pos)
        if rest.startswith(_MISTRAL, pos):
            pos += len(_MISTRAL)
    return calls or None


def _parse_deepseek_v3(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    matches = list(_DS_CALL_RE.finditer(text)) or list(_DS31_CALL_RE.finditer(text))
    if not matches:
        # DeepSeek-V3.1 decoded without its special tokens: a reply that is nothing but name{...}
        rest = text.strip()
        calls = _mistral_pieces(rest, id_prefix, "deepseek_v3") if _NAME_RE.match(rest) else None
        return ("", calls) if calls else (text.strip(), [])
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
    spans: list[tuple[int, int]] = []
    for match in _CALL_RE.finditer(text):
        try:
            payload = json.loads(match.group(1).strip(), parse_constant=reject_constant)
        except (ValueError, RecursionError):  # also a 4300+ digit number and nesting past the recursion limit
            continue
        # A list of calls in one block is Granite 3.1's form (`<tool_call> [{...}, {...}]`) and xLAM's.
        block = _hermes_calls(payload if isinstance(payload, list) else [payload], id_prefix, len(calls))
        if block:
            calls.extend(block)
            spans.append(match.span())
    return _outside(text, spans).strip(), calls


def _hermes_calls(items: list, id_prefix: str, first: int) -> list[dict] | None:
    """The calls of one ``<tool_call>`` block, ``None`` when any of them is not a call: no name to
    call (a sampled ``"name": ""`` too) or arguments that are not an object; the block is then text,
    which the turn reports as malformed."""
    calls = []
    for payload in items:
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"].strip():
            return None
        # "parameters" is Llama 3.1's name for them; reading it beats calling the tool with nothing
        arguments = payload["arguments"] if "arguments" in payload else payload.get("parameters", {})
        call = _call(payload["name"], arguments, _call_id(id_prefix, first + len(calls), "hermes"))
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _parse_qwen3_coder(text: str, id_prefix: str, tools: list[dict] | None) -> tuple[str, list[dict]]:
    if "<function=" not in text:
        # A Qwen3.5 agent may still write a hermes JSON call (Qwen3's form) inside <tool_call>.
        return _parse_hermes(text, id_prefix)
    schemas = _parameter_schemas(tools)
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for match in _XML_CALL_RE.finditer(text):
        name = match.group(1).strip()
        if not name:
            continue  # no name to call: left for malformed_call
        call = _call(
            name, _xml_arguments(match.group(2), schemas.get(name, {})), _call_id(id_prefix, len(calls), "qwen3_coder")
        )
        if call is not None:
            calls.append(call)
            spans.append(match.span())
    return _outside(text, spans).strip(), calls


def _xml_arguments(body: str, properties: dict) -> Any:
    """The arguments of one ``<function=name>`` block: its ``<parameter=key>`` blocks; or a JSON
    object (functionary v3.1 and Llama 3.1's ``<function=name>{...}</function>``); ``None`` (not a
    call) when the body is other text, rather than a call with its arguments dropped."""
    params = list(_XML_PARAM_RE.finditer(body))
    if not params:
        return body if body.strip().startswith("{") else (None if body.strip() else {})
    return {
        p.group(1).strip(): _xml_value(_strip_one_newline(p.group(2)), properties.get(p.group(1).strip()))
        for p in params
    }


def _parameter_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """``{tool name: {parameter: schema}}`` of OpenAI tool schemas (bare function schemas too)."""
    schemas: dict[str, dict] = {}
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            properties = (fn.get("parameters") or {}).get("properties")
            schemas[fn["name"]] = properties if isinstance(properties, dict) else {}
    return schemas


def _strip_one_newline(value: str) -> str:
    # The template writes "<parameter=k>\nvalue\n</parameter>": the newlines are markup, not value.
    if value.startswith("\n"):
        value = value[1:]
    return value[:-1] if value.endswith("\n") else value


def _schema_type(schema: Any) -> tuple[str | None, bool]:
    """The first non-null type a parameter's schema names (``None``: none), and whether it admits null."""
    if not isinstance(schema, dict):
        return None, False
    kind = schema.get("type")
    if kind is None and isinstance(schema.get("anyOf"), list):
        kind = [option.get("type") for option in schema["anyOf"] if isinstance(option, dict)]
    options = [str(k).strip().lower() for k in (kind if isinstance(kind, list) else [kind]) if k is not None]
    concrete = [k for k in options if k != "null"]
    return (concrete[0] if concrete else None), "null" in options


def _xml_value(raw: str, schema: Any) -> Any:
    """An XML parameter's text as the value its schema asks for (vLLM's qwen3_coder conversions);
    a value that does not convert stays the text, for the tool to refuse with an observation."""
    kind, nullable = _schema_type(schema)
    word = raw.strip().lower()
    if nullable and word in ("null", "none"):
        return None
    if kind in _STRING_TYPES:
        return raw
    if kind is not None and word in ("null", "none"):
        return None
    if kind is not None and kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(raw.strip())
        except ValueError:
            return raw
    if kind is not None and kind.startswith(("num", "float", "double")):
        try:
            number = float(raw.strip())
        except ValueError:
            return raw
        if not math.isfinite(number):
            return raw  # "nan", "inf": Python reads them, JSON has no spelling for them
        return int(number) if number.is_integer() else number
    if kind in ("boolean", "bool", "binary"):
        return {"true": True, "false": False}.get(word, raw)
    # object, array, an unknown type, or no schema: JSON, else a Python literal (templates that
    # print with `|string` spell a dict {'k': 'v'} and a boolean True), else the text itself.
    if raw.strip() in _CONSTANT_NAMES and raw.strip().istitle():
        # Python's spelling; JSON's is json.loads's below, which takes only JSON's whitespace around it
        return _CONSTANT_NAMES[raw.strip()]
    try:
        value = json.loads(raw, parse_constant=reject_constant)
    except (ValueError, RecursionError):
        value = _literal(raw)
    if kind is None and isinstance(value, str):
        return raw  # a quoted JSON string is still the text the model wrote
    return value


def _literal(raw: str) -> Any:
    """A Python literal (``{'k': 'v'}``, ``[1, 2]``), or the text when it is none. Only short,
    bracketed text is tried: literal_eval of deeply nested sampled text can exhaust the stack."""
    text = raw.strip()
    if len(text) > 20_000 or not text.startswith(("{", "[", "(")):
        return raw
    try:
        value = ast.literal_eval(text)
        json.dumps(value, allow_nan=False)  # a set, bytes or 1e999 has no JSON form: it stays text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw
    return value


def _parse_glm4_moe(text: str, id_prefix: str, tools: list[dict] | None) -> tuple[str, list[dict]]:
    schemas = _parameter_schemas(tools)
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for opener, body_start, body_end, end in _blocks(text, _GLM_OPEN, _GLM_CLOSE):
        parsed = _glm_call(text[body_start:body_end])
        if parsed is None:
            continue  # not this form (a hermes JSON object, stray text): left in the content
        name, pairs = parsed
        properties = schemas.get(name, {})
        arguments = {key: _xml_value(value, properties.get(key)) for key, value in pairs}
        call = _call(name, arguments, _call_id(id_prefix, len(calls), "glm4_moe"))
        if call is not None:
            calls.append(call)
            spans.append((opener.start(), end))
    if not calls and _GLM_JSON.search(text):
        # GLM-4 (not MoE) and fine-tunes may still write a hermes JSON object inside the tags
        return _parse_hermes(text, id_prefix)
    return _outside(text, spans).strip(), calls


def _glm_call(body: str) -> tuple[str, list[tuple[str, str]]] | None:
    """The name and ``(key, value)`` pairs of a GLM call block, or ``None`` when it is not one."""
    pieces = _GLM_TAGS.split(body)
    name = pieces[0].strip()
    if not _NAME_RE.fullmatch(name):
        return None
    # re.split keeps the tags: after the name, each pair is 8 pieces, <arg_key> key </arg_key> space
    # <arg_value> value </arg_value> space.
    pairs = []
    for i in range(1, len(pieces), 8):
        pair = pieces[i : i + 8]
        if len(pair) != 8 or [pair[0], pair[2], pair[4], pair[6]] != _GLM_PAIR or pair[3].strip() or pair[7].strip():
            return None
        pairs.append((pair[1].strip(), pair[5]))
    return name, pairs


def _parse_kimi_k2(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for match, segment, arguments, pos in _marked_json(text, _KIMI_CALL_RE, _kimi_arguments_start):
        # The model writes the call's id (`functions.NAME:INDEX`), the name read out of it.
        written = match.group(0).removeprefix("<|tool_call_begin|>")
        call = _call(match.group(1).split(".")[-1], arguments, _written_id(written, id_prefix, calls, "kimi_k2"))
        if call is None:
            continue  # left in the content, where malformed_call finds its markers
        end = _KIMI_END.match(segment, pos)
        calls.append(call)
        spans.append((match.start(), match.end() + (end.end() if end else pos)))
    content = _outside(text, spans)
    return (_KIMI_SECTION.sub("", content).strip() if calls else content.strip()), calls


def _kimi_arguments_start(segment: str) -> int | None:
    pos = _skip_space(segment, len(_KIMI_ARGS) if segment.startswith(_KIMI_ARGS) else 0)
    return pos if segment.startswith("{", pos) else None


def _parse_invoke(text: str, id_prefix: str, style: str, tools: list[dict] | None) -> tuple[str, list[dict]]:
    schemas = _parameter_schemas(tools)
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for invoke, body_start, body_end, end in _blocks(text, _INVOKE_OPEN, _INVOKE_CLOSE):
        name = invoke.group(1).strip()
        if not _NAME_RE.fullmatch(name):
            continue  # left in the content, where malformed_call finds it
        properties = schemas.get(name, {})
        arguments = {}
        for param, value_start, value_end, _ in _blocks(text, _PARAM_OPEN, _PARAM_CLOSE, body_start, body_end):
            key, value = param.group(1).strip(), text[value_start:value_end]
            text_value = _STRING_ATTRIBUTE.search(param.group(2))
            if text_value is not None and text_value.group(1) == "true":
                arguments[key] = value  # DeepSeek-V3.2 marks text values: no typing, "3" stays "3"
            elif text_value is not None:
                arguments[key] = _xml_value(value, {"type": "object"})  # marked JSON
            else:
                arguments[key] = _xml_value(_strip_one_newline(value), properties.get(key))
        call = _call(name, arguments, _call_id(id_prefix, len(calls), style))
        if call is not None:
            calls.append(call)
            spans.append((invoke.start(), end))
    content = _outside(text, spans)
    return (_INVOKE_WRAPPERS.sub("", content).strip() if calls else content.strip()), calls


# gpt-oss (harmony): messages `[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]
# <|message|>BODY<|end|>`; a call is a message to `functions.NAME` ending with <|call|>. The template
# puts the recipient before the channel instead (`<|start|>assistant to=functions.NAME<|channel|>...`).
_HARMONY_MESSAGE = "<|message|>"
_HARMONY_START = "<|start|>assistant"
_HARMONY_ENDS = re.compile(r"<\|(?:end|call|return)\|>")
_HARMONY_TO = re.compile(r"\bto=functions\.([\w\-.]+)")
_HARMONY_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
# What may stand between the recipient and the arguments once the special tokens are decoded away:
# `commentary`, the content type `json` (or `<|constrain|>json`) and spaces. Its pieces never overlap,
# so it is matched in linear time.
_HARMONY_HEADER = re.compile(r"(?:\s+|<\|(?:channel|constrain|message)\|>|commentary\b|analysis\b|json\b)*")
# Decoded without special tokens, the template's `to=functions.NAME<|channel|>commentary` runs the
# channel into the name.
# Decoded without special tokens, `<|start|>assistant<|channel|>final<|message|>` leaves this.
_HARMONY_FINAL = "assistantfinal"
_HARMONY_GLUED = re.compile(r"(.*[^_.\-])(commentary|analysis)")


def _parse_harmony(text: str, id_prefix: str, tools: list[dict] | None) -> tuple[str, list[dict]]:
    if _HARMONY_MESSAGE in text:
        return _harmony_messages(text, id_prefix)
    return _harmony_decoded(text, id_prefix, tools)


def _harmony_messages(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    """Harmony text with its special tokens: message by message. The content is what vLLM's
    ``openai`` parser makes it: the ``final`` (and recipient-less ``commentary``) messages; the
    ``analysis`` channel is reasoning. A call whose arguments are not a JSON object stays in the
    content, where :func:`malformed_call` finds its recipient."""
    calls: list[dict] = []
    content: list[str] = []
    last = 0
    for end in [*_HARMONY_ENDS.finditer(text), None]:
        segment = text[last : end.start() if end else len(text)]
        last = end.end() if end else len(text)
        header, found, body = segment.partition(_HARMONY_MESSAGE)
        if not found:
            content.append(segment.replace("<|start|>assistant", ""))  # text outside any message
            continue
        recipient = _HARMONY_TO.search(header)
        if recipient is None:
            channel = _HARMONY_CHANNEL.search(header)
            if channel is None or channel.group(1) != "analysis":
                content.append(body)
            continue
        call = _call(recipient.group(1), body, _call_id(id_prefix, len(calls), "harmony"))
        if call is None:
            content.append(segment)
            continue
        calls.append(call)
    return "\n".join(part.strip() for part in content if part.strip()), calls


def _harmony_decoded(text: str, id_prefix: str, tools: list[dict] | None) -> tuple[str, list[dict]]:
    """Harmony text decoded without special tokens (``analysisI need the weather.assistantcommentary
    to=functions.get_weather json{"city": "Oslo"}``): each recipient, then its JSON object. The
    content is the final channel's text (``...assistantfinalThe answer is 42.``) when there is one,
    else the text outside the calls, without the channel names left before a call and without the
    reply's opening ``analysis`` message."""
    names = set(_parameter_schemas(tools))
    calls: list[dict] = []
    kept: list[str] = []
    last = 0
    for match, _, arguments, pos in _marked_json(text, _HARMONY_TO, _harmony_arguments_start):
        call = _call(_harmony_name(match.group(1), names), arguments, _call_id(id_prefix, len(calls), "harmony"))
        if call is None:
            continue
        before = _strip_channel_words(text[last : match.start()])
        # the reply's first message, `analysis` with its marker tokens gone, is reasoning (as with the markers)
        kept.append("" if last == 0 and before.lstrip().startswith("analysis") else before)
        last = match.end() + pos
        calls.append(call)
    tail = text[last:]
    final = tail.rfind(_HARMONY_FINAL)
    if final >= 0:
        # the final channel is the answer; what came before it is reasoning (as with the markers)
        return tail[final + len(_HARMONY_FINAL) :].strip(), calls
    kept.append(tail)
    return "\n".join(part.strip() for part in kept if part.strip()), calls


def _harmony_arguments_start(segment: str) -> int | None:
    # a recipient without a JSON object after it is left in the content, where malformed_call finds it
    pos = _HARMONY_HEADER.match(segment).end()
    return pos if segment.startswith("{", pos) else None


def _strip_channel_words(text: str) -> str:
    """``text`` without the role and channel names decoding left at its end (``assistantcommentary``)."""
    end = len(text.rstrip())
    while True:
        # an index moves and the text is cut once: slicing per word copied it each time (quadratic)
        word = next((w for w in ("assistant", "commentary", "analysis", "final") if text.endswith(w, 0, end)), None)
        if word is None:
            return text[:end]
        end -= len(word)
        while end and text[end - 1].isspace():
            end -= 1


def _harmony_name(name: str, tools: set[str]) -> str:
    """The tool name, without a channel name that decoding ran into it (``get_weathercommentary``):
    the offered tool when the tools are known, else the name before the channel word, unless it ends
    in a separator (``add_commentary`` is a name of its own)."""
    if name in tools:
        return name
    glued = _HARMONY_GLUED.fullmatch(name)
    if glued is None or (tools and glued.group(1) not in tools):
        return name
    return glued.group(1)


# Gemma 3 (vLLM's pythonic template) and Llama 4 (`<|python_start|>`): a Python list of calls with
# keyword arguments, `[get_weather(city="Oslo", days=3)]`, read with `ast` (never evaluated).
_PYTHON_START, _PYTHON_END = "<|python_start|>", "<|python_end|>"
_PYTHONIC_OPENER = re.compile(r"\s*(?:<\|python_start\|>)?\s*\[\s*")
_PYTHONIC_CALL = re.compile(r"\s*(?:<\|python_start\|>)?\s*\[\s*[A-Za-z_][\w.]*\s*\(")
# ast.parse of sampled text: a bound keeps a runaway reply from costing memory and stack for nothing.
_PYTHONIC_MAX = 200_000


def _parse_pythonic(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    """The whole reply is the list of calls, as vLLM's ``pythonic`` parser reads it; anything else
    (prose around it, a positional or non-literal argument) is content, no call."""
    body = text.replace(_PYTHON_START, "").replace(_PYTHON_END, "").strip()
    calls = _pythonic_list(body, id_prefix, "pythonic")
    return ("", calls) if calls else (text.strip(), [])


def _pythonic_list(body: str, id_prefix: str, style: str, first: int = 0) -> list[dict] | None:
    """The calls of ``body`` when it is exactly a Python list of calls with literal keyword arguments;
    ``None`` otherwise (a single bad call rejects the list: a half-run list is worse than a retry)."""
    if not (body.startswith("[") and body.endswith("]")) or len(body) > _PYTHONIC_MAX:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # "\\d" in a sampled string is the model's
            tree = ast.parse(body, mode="eval").body
        # vLLM's lfm2 parser reads dotted names and sets, as its tests show; the pythonic style keeps
        # refusing them (a call of `os.system` is no tool call)
        lfm2 = style == "lfm2"
        return [_pythonic_call(node, _call_id(id_prefix, k, style), lfm2) for k, node in enumerate(tree.elts, first)]
    except (SyntaxError, ValueError, TypeError, AttributeError, MemoryError, RecursionError):
        return None


def _pythonic_name(node: ast.AST, dotted: bool) -> str:
    """The called name: ``f``, or when ``dotted`` a dotted ``grocery.orderIngredients`` (BFCL-style tool
    names); ``ValueError`` for any other callee."""
    parts = []
    while dotted and isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError("not a named function")
    return ".".join([node.id, *reversed(parts)])


def _pythonic_call(node: ast.AST, call_id: str, lfm2: bool = False) -> dict:
    """One ``name(key=literal, ...)`` call (``lfm2``: also a dotted name and set values);
    ``ValueError`` for anything else."""
    if not isinstance(node, ast.Call) or node.args:
        raise ValueError("not a call with keyword arguments")
    name = _pythonic_name(node.func, dotted=lfm2)
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:  # **kwargs
            raise ValueError("not a keyword argument")
        arguments[keyword.arg] = _pythonic_value(keyword.value, sets=lfm2)
    json.dumps(arguments, allow_nan=False)  # 1e999 is a float but not JSON
    call = _call(name, arguments, call_id)
    if call is None:
        raise ValueError("arguments are not an object")
    return call


def _pythonic_value(node: ast.AST, sets: bool = False) -> Any:
    """A literal argument (strings, numbers, True/False/None or true/false/null, lists, dicts with
    string keys; sets, as lists, when ``sets``); ``ValueError`` for a variable, an expression or a
    call, which would need evaluating."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANT_NAMES:
        return _CONSTANT_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _pythonic_value(node.operand, sets)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)) or (sets and isinstance(node, ast.Set)):
        # a set ({'urgent', 'bug'}) has no JSON form: its items in the order written, as vLLM gives them
        return [_pythonic_value(item, sets) for item in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_pythonic_value(key) if key is not None else None for key in node.keys]
        if all(isinstance(key, str) for key in keys):
            return {key: _pythonic_value(value, sets) for key, value in zip(keys, node.values)}
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


# Command R7B: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}]<|END_ACTION|>`.
_COHERE_ACTION, _COHERE_END = "<|START_ACTION|>", "<|END_ACTION|>"
# Decoded without special tokens the markers are gone: a list whose first object is a call.
_COHERE_LIST = re.compile(r'\[\s*\{\s*"tool_(?:call_id|name)"\s*:')
_COHERE_CLOSE = re.compile(r"\s*(?:" + re.escape(_COHERE_END) + r")?")
_COHERE_MARKUP = re.compile(r"<\|(?:START|END)_(?:THINKING|RESPONSE)\|>")


def _parse_command_r7b(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    at = text.find(_COHERE_ACTION)
    start = at + len(_COHERE_ACTION) if at >= 0 else None
    if start is None:
        bare = _COHERE_LIST.search(text)
        if bare is None:
            return text.strip(), []
        at = start = bare.start()
    found = _objects(text, start, "")
    if found is None or len(found[0]) != 1 or not isinstance(found[0][0], list):
        return text.strip(), []
    end = _COHERE_CLOSE.match(text, found[1]).end()
    calls = []
    for item in found[0][0]:
        if not isinstance(item, dict) or not isinstance(item.get("tool_name"), str) or not item["tool_name"].strip():
            return text.strip(), []
        call = _call(item["tool_name"], item.get("parameters", {}), _call_id(id_prefix, len(calls), "command_r7b"))
        if call is None:
            return text.strip(), []
        calls.append(call)
    if not calls:
        return text.strip(), []
    return _COHERE_MARKUP.sub("", text[:at] + "\n" + text[end:]).strip(), calls


# Solar-Open: `<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}
# <|tool_call:end|>...<|calls|>`.
_SOLAR_CALL = re.compile(
    r"<\|tool_call:begin\|>([^<>]{0,100}?)<\|tool_call:name\|>\s*([\w.\-]+)\s*<\|tool_call:args\|>"
)
_SOLAR_END = re.compile(r"\s*(?:<\|tool_call:end\|>)?")
_SOLAR_MARKUP = re.compile(r"<\|(?:tool_calls|calls)\|>")


def _parse_solar_open(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for match, segment, arguments, pos in _marked_json(text, _SOLAR_CALL, lambda segment: _skip_space(segment, 0)):
        call = _call(match.group(2), arguments, _written_id(match.group(1), id_prefix, calls, "solar_open"))
        if call is None:
            continue  # left in the content, where malformed_call finds it
        calls.append(call)
        spans.append((match.start(), match.end() + _SOLAR_END.match(segment, pos).end()))
    content = _outside(text, spans)
    return (_SOLAR_MARKUP.sub("", content).strip() if calls else content.strip()), calls


def split_reasoning(text: str, style: str = "hermes") -> tuple[str, str]:
    """Split a reply into the reasoning it opens with and the rest (the answer or the calls), where
    the template's reasoning delimiters are special tokens: without the split the reasoning was glued
    to the answer in the trajectory, in SFT curation and in what ``task.verify`` read.

    ``solar_open``, ``gemma4``, ``mistral`` and ``harmony`` have such a split (a ``<think>`` block,
    Qwen3's, DeepSeek-R1's, is plain text that stays in the content, where the template and
    :func:`~lightning_agents.tasks.strip_reasoning` read it). Their
    replies come from the engines with their marker tokens
    (:func:`~lightning_agents.rollout.hf_engine.decode_completions`), and the split reads them
    (:func:`~lightning_agents.tasks.answers.split_marked_reasoning`):
    ``<|think|>RSN<|end|><|begin|>assistant<|content|>ANS``, ``<|channel>thought\nRSN\n<channel|>ANS``
    and ``[THINK]RSN[/THINK]ANS`` are ``("RSN", "ANS")``. gpt-oss's reasoning is its ``analysis``
    messages (:func:`_harmony_reasoning`): their texts, joined by blank lines, and the reply without
    them, whose calls and ``final`` answer the ``harmony`` parser reads as before. Text decoded
    without them is not split: nothing in it tells the reasoning from the answer for certain (the
    role name ``assistant`` left between them is also a word of the answer's).

    Args:
        text: the reply.
        style: the chat template's tool-call style (:func:`tool_call_style`).

    Returns:
        ``(reasoning, rest)``: ``("", text)`` when the reply opens with no reasoning.
    """
    if style == "harmony" and _HARMONY_MESSAGE in text:
        return _harmony_reasoning(text)
    if style not in ("solar_open", "gemma4", "mistral") or not text:
        return "", text
    return split_marked_reasoning(text)


def _unclosed(body: str) -> bool:
    """Whether an ``analysis`` body holds another message's markers (``<|channel|>``, ``<|start|>``)."""
    return "<|channel|>" in body or "<|start|>" in body


def _harmony_segments(text: str) -> Iterator[tuple[str, str | None]]:
    """Each message of a gpt-oss reply in the order written: its text from the previous message's end
    token to its own (included), and its body where it is a closed ``analysis`` message, else ``None``."""
    last = 0
    for end in [*_HARMONY_ENDS.finditer(text), None]:
        stop = end.end() if end else len(text)
        segment = text[last:stop]
        header, found, body = text[last : end.start() if end else len(text)].partition(_HARMONY_MESSAGE)
        last = stop
        channel = _HARMONY_CHANNEL.search(header) if found else None
        if channel is None or channel.group(1) != "analysis" or _HARMONY_TO.search(header) or _unclosed(body):
            # an analysis the model never closed (a channel header or a message start inside its
            # text) stays in the rest, where the parser drops it: the template refuses those tags
            # in a thinking, and a stored one stopped the next render (a follow-up's glue)
            yield segment, None
        else:
            yield segment, body


def _harmony_reasoning(text: str) -> tuple[str, str]:
    """gpt-oss's ``analysis`` messages (recipient-less, anywhere in the reply, a cut last one too),
    joined by blank lines, and the reply without them (each from its ``<|start|>assistant`` to its
    end token), opening as a reply does (``<|channel|>commentary to=...``, ``<|channel|>final...``).
    The ``harmony`` parser drops analysis messages, so it reads the same calls and content from the
    rest as from the reply. ``("", text)`` when no analysis message has text."""
    thoughts: list[str] = []
    kept: list[str] = []
    for segment, thought in _harmony_segments(text):
        if thought is None:
            kept.append(segment)
        else:
            thoughts.append(thought)  # its segment goes, with the opener it starts with
    rest = "".join(kept)
    # as sampled (the template renders the text as given), blank ones left out
    reasoning = "\n\n".join(t for t in thoughts if t.strip())
    return reasoning, rest.removeprefix(_HARMONY_START) if reasoning else text


def harmony_written_order(text: str) -> str:
    """A gpt-oss reply's analysis texts and the text the ``harmony`` parser gives its content (a call
    turn's preamble: a recipient-less ``commentary`` message, text outside any message), in the order
    the model wrote them: analyses apart by blank lines as :func:`split_reasoning` joins them, content
    parts by a newline as the parser joins them, and a blank line where one kind follows the other.

    gpt-oss's template renders a call turn's ``thinking`` or its content as the one analysis before
    the call, and refuses both (:func:`~lightning_agents.rollout.agent_turn.apply_reply` folds them
    into ``thinking``): put after every analysis, a preamble written between two of them was stored,
    and trained by SFT, in an order the model never wrote."""
    pieces: list[tuple[bool, str]] = []  # (is an analysis, its text)
    for segment, thought in _harmony_segments(text):
        if thought is not None:
            if thought.strip():  # blank ones left out, as split_reasoning leaves them
                pieces.append((True, thought))
            continue
        said = _harmony_messages(segment, "")[0]
        if said:
            pieces.append((False, said))
    out = ""
    for k, (analysis, piece) in enumerate(pieces):
        if k:
            out += "\n" if not analysis and not pieces[k - 1][0] else "\n\n"
        out += piece
    return out


# Gemma 4: `<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`, strings between `<|"|>` quotes, other
# values bare (numbers, true/false/null), nested `{key:value}` objects and `[...]` lists.
_GEMMA4_OPEN, _GEMMA4_CLOSE = re.compile(re.escape("<|tool_call>")), re.compile(re.escape("<tool_call|>"))
_GEMMA4_QUOTE = '<|"|>'
_GEMMA4_NAME = re.compile(r"\s*call:([\w.\-]+)\{")
_GEMMA4_BARE = re.compile(r"[^,{}\[\]:]*")
_GEMMA4_DEPTH = 64


def _parse_gemma4(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    # an unclosed call is no call (vLLM agrees): left in the content
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for opener, body_start, body_end, end in _blocks(text, _GEMMA4_OPEN, _GEMMA4_CLOSE):
        call = _gemma4_call(text[body_start:body_end], _call_id(id_prefix, len(calls), "gemma4"))
        if call is not None:
            calls.append(call)
            spans.append((opener.start(), end))
    return _outside(text, spans).strip(), calls


def _gemma4_call(body: str, call_id: str) -> dict | None:
    """One call block's ``call:name{...}``, or ``None`` when it is not one."""
    name = _GEMMA4_NAME.match(body)
    if name is None:
        return None
    try:
        if body.startswith("{", _skip_space(body, name.end())):
            # JSON inside the braces, `call:name{{"key": ...}}`: the template's rendering of arguments
            # given as a JSON string, the form the package's layout probe picks for Gemma 4
            arguments, pos = json.JSONDecoder(parse_constant=reject_constant).raw_decode(
                body, _skip_space(body, name.end())
            )
            pos = _skip_space(body, pos)
            if not body.startswith("}", pos):
                return None
            pos += 1
        else:
            arguments, pos = _gemma4_object(body, name.end(), 0)
    except (ValueError, IndexError, RecursionError):
        return None
    return _call(name.group(1), arguments, call_id) if not body[pos:].strip() else None


def _gemma4_object(text: str, pos: int, depth: int) -> tuple[dict, int]:
    """The ``key:value,...}`` of an object whose ``{`` is before ``pos``, and the position after its ``}``."""
    if depth > _GEMMA4_DEPTH:
        raise ValueError("nested too deep")
    result: dict = {}
    while True:
        pos = _skip_space(text, pos)
        if text[pos] == "}":
            return result, pos + 1
        if text.startswith(_GEMMA4_QUOTE, pos):  # a quoted key (the template quotes nested ones)
            key, pos = _gemma4_string(text, pos)
        else:
            colon = text.index(":", pos)
            key, pos = text[pos:colon].strip(), colon
        if not key or text[pos] != ":":
            raise ValueError("no key")
        result[key], pos = _gemma4_value(text, pos + 1, depth)
        pos = _skip_space(text, pos)
        if text[pos] == ",":
            pos += 1
        elif text[pos] != "}":
            raise ValueError("no separator")


def _gemma4_value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    pos = _skip_space(text, pos)
    if text.startswith(_GEMMA4_QUOTE, pos):
        return _gemma4_string(text, pos)
    if text[pos] == "{":
        return _gemma4_object(text, pos + 1, depth + 1)
    if text[pos] == "[":
        items: list = []
        pos = _skip_space(text, pos + 1)
        while text[pos] != "]":
            item, pos = _gemma4_value(text, pos, depth + 1)
            items.append(item)
            pos = _skip_space(text, pos)
            if text[pos] == ",":
                pos += 1
            elif text[pos] != "]":
                raise ValueError("no separator")
        return items, pos + 1
    bare = _GEMMA4_BARE.match(text, pos)
    word = bare.group(0).strip()
    if word in _CONSTANT_NAMES:
        return _CONSTANT_NAMES[word], bare.end()
    try:
        value = json.loads(word, parse_constant=reject_constant)
    except (ValueError, RecursionError):
        value = word
    number = isinstance(value, (int, float)) and math.isfinite(value)  # 1e999 is no JSON number
    return (value if number else word), bare.end()


def _gemma4_string(text: str, pos: int) -> tuple[str, int]:
    end = text.find(_GEMMA4_QUOTE, pos + len(_GEMMA4_QUOTE))
    if end < 0:
        raise ValueError("unterminated string")
    return text[pos + len(_GEMMA4_QUOTE) : end], end + len(_GEMMA4_QUOTE)


# functionary v3.2: messages `>>>RECIPIENT\nCONTENT`, the recipient `all` for text to the user and a
# function's name for a call, its arguments JSON. The generation prompt ends with `>>>`, so the reply
# starts at its first recipient.
_FUNCTIONARY_TO = re.compile(r"(?:\A|>>>)([A-Za-z_][\w.\-]*)\n")
# A botched call left in the content: a message to a function (a parse leaves no other recipient in
# it), or a reply that opens with a name and a JSON object. `>>>` alone is not one (Python's prompt).
_FUNCTIONARY_BOTCHED = re.compile(r"\A\s*[A-Za-z_][\w.\-]*\n\s*\{|>>>[A-Za-z_][\w.\-]*\n")


def _parse_functionary_v3_2(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    """Each message to a function is a call; the content is the text of the messages to ``all`` (and
    any text before the first recipient). As llama.cpp reads them, the ``python`` tool's message may be
    the code itself, its argument ``code``."""
    calls: list[dict] = []
    spans: list[tuple[int, int]] = []
    for match, segment in _segments(text, _FUNCTIONARY_TO):
        name = match.group(1)
        if name == "all":
            spans.append(match.span())  # the recipient line; the message after it is content
            continue
        arguments, end = _functionary_arguments(name, segment)
        call = _call(name, arguments, _call_id(id_prefix, len(calls), "functionary_v3_2"))
        if call is None:
            continue  # left in the content, where malformed_call finds it
        calls.append(call)
        spans.append((match.start(), match.end() + _skip_space(segment, end)))
    return _outside(text, spans).strip(), calls


def _functionary_arguments(name: str, segment: str) -> tuple[Any, int]:
    """A message's arguments and where they end: its JSON object, or the ``python`` tool's code."""
    pos = _skip_space(segment, 0)
    if segment.startswith("{", pos):
        try:
            return json.JSONDecoder(parse_constant=reject_constant).raw_decode(segment, pos)
        except (ValueError, RecursionError):
            pass
    if name == "python" and segment.strip():
        return {"code": segment}, len(segment)
    return None, pos


# LFM2 / LFM2.5 (LiquidAI): `<|tool_call_start|>[get_weather(city="Oslo")]<|tool_call_end|>`, a Python
# list of calls (read like pythonic's) between two special tokens, often followed by text to the user.
# The engines decode without special tokens, which leaves the bare list at the start of the reply
# (after any reasoning), then that text.
_LFM2_START, _LFM2_END = "<|tool_call_start|>", "<|tool_call_end|>"
_LFM2_BARE = re.compile(r"\s*\[\s*[A-Za-z_][\w.]*\s*\(")
_LFM2_LIST = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_THINK_END = "</think>"
# Outside string literals: a quote opens one, brackets nest, and an integer's leading zeros
# (`month=07`, a SyntaxError in Python 3) are dropped. Inside: escapes are kept and raw control
# characters (a multi-line shell command in a '...' string, a NUL) are escaped, as vLLM's lfm2 parser
# repairs them; neither changes the value of text that already parses.
_PY_OUTSIDE = re.compile(r"""'''|\"\"\"|['"]|[\[\](){}]|(?<![\w.])0+(?=\d)""")
_PY_INSIDE = {q: re.compile(r"\\.|" + re.escape(q) + r"|[\x00-\x1f]", re.DOTALL) for q in ("'", '"', "'''", '"""')}
_PY_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _parse_lfm2(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    """Every call block and the text around them. LFM2 may echo a block after it: a repeated block,
    or one whose start token is missing (closed by an orphan end token), is no call and no content,
    as in vLLM's parser (which reads only the first block and drops all after the last end token; a
    second, different block is run here rather than dropped). One block that is not a list of calls
    makes the reply a botched call: a half-run reply is worse than a retry."""
    at = text.find(_LFM2_START)
    if at < 0:
        return _lfm2_bare(text, id_prefix)
    calls: list[dict] = []
    kept, seen, last = [], set(), 0
    while at >= 0:
        close = text.find(_LFM2_END, at)
        body_end = close if close >= 0 else len(text)
        body = text[at + len(_LFM2_START) : body_end].strip()
        block = _lfm2_calls(body, id_prefix, len(calls))
        if not block:
            return text.strip(), []
        if body not in seen:
            seen.add(body)
            calls.extend(block)
        kept.append(text[last:at])
        last = body_end + len(_LFM2_END) if close >= 0 else len(text)
        at = text.find(_LFM2_START, last)
    after = text[last:]
    echo = after.rfind(_LFM2_END)
    kept.append(after[echo + len(_LFM2_END) :] if echo >= 0 else after)
    return "\n".join(part.strip() for part in kept if part.strip()), calls


def _lfm2_bare(text: str, id_prefix: str) -> tuple[str, list[dict]]:
    """A reply decoded without the markers: a list of calls that opens it (after any reasoning) or
    ends it (LFM2.5's template renders the message's text, then its calls); a list in the middle of
    prose is taken for a mention, as in an answer. Candidates are scanned left to right, each from the
    end of the last, so a reply full of ``[f(`` is still read in linear time."""
    start, stop = _after_reasoning(text), len(text.rstrip())
    first = _skip_space(text, start)
    candidate = _LFM2_LIST.search(text, start)
    while candidate is not None:
        begin = candidate.start()
        found = _python_list_at(text, begin)
        if found is None:
            break
        if begin == first or found[1] == stop:
            calls = _pythonic_list(found[0], id_prefix, "lfm2")
            if calls:
                return _joined(text[:begin], _without_echo(text[found[1] :], text[begin : found[1]])), calls
        candidate = _LFM2_LIST.search(text, found[1])
    return text.strip(), []


def _without_echo(after: str, block: str) -> str:
    """The text after a call list, less a repeat of the list (the echo, its end token decoded away)."""
    after = after.lstrip()
    return after[len(block) :] if after.startswith(block) else after


def _lfm2_calls(body: str, id_prefix: str, first: int) -> list[dict] | None:
    """The calls of a whole call block (ids numbered from ``first``), ``None`` when it is not exactly
    a list of calls."""
    found = _python_list_at(body, 0) if body.startswith("[") else None
    if found is None or found[1] != len(body):
        return None
    return _pythonic_list(found[0], id_prefix, "lfm2", first)


def _after_reasoning(text: str) -> int:
    """Where the reply proper starts: after the reasoning's ``</think>``, if any."""
    end = text.find(_THINK_END)
    return end + len(_THINK_END) if end >= 0 else 0


def _joined(before: str, after: str) -> str:
    return "\n".join(part for part in (before.strip(), after.strip()) if part)


def _python_list_at(text: str, start: int) -> tuple[str, int] | None:
    """The Python source of the bracketed expression opening at ``text[start]``, repaired as
    ``_PY_OUTSIDE`` says, and the position after its closing bracket; ``None`` when it never closes.
    Each character is looked at once: the end of a list followed by prose is found in linear time."""
    out: list[str] = []
    depth, pos = 0, start
    while True:
        token = _PY_OUTSIDE.search(text, pos)
        if token is None:
            return None
        out.append(text[pos : token.start()])
        pos, kind = token.end(), token.group()
        if kind[0] in "'\"":
            literal = _python_string(text, pos, kind)
            if literal is None:
                return None
            out.append(kind + literal[0] + kind)
            pos = literal[1]
        elif kind[0] != "0":
            out.append(kind)
            depth += 1 if kind in "[({" else -1
            if depth <= 0:
                return ("".join(out), pos) if depth == 0 else None


def _python_string(text: str, pos: int, quote: str) -> tuple[str, int] | None:
    """The body of a string literal starting at ``pos`` (after its opening ``quote``), with raw
    control characters escaped, and the position after its closing quote; ``None`` if unclosed."""
    pattern, out = _PY_INSIDE[quote], []
    while True:
        piece = pattern.search(text, pos)
        if piece is None:
            return None
        out.append(text[pos : piece.start()])
        pos, char = piece.end(), piece.group()
        if char == quote:
            return "".join(out), pos
        out.append(char if char[0] == "\\" else _PY_ESCAPES.get(char, f"\\x{ord(char):02x}"))


# Each style's parser, called as (text, id_prefix, tools); json_after:<marker> is _parse_json_after's.
_PARSERS = {
    "hermes": lambda text, id_prefix, tools: _parse_hermes(text, id_prefix),
    "llama3_json": lambda text, id_prefix, tools: _parse_llama3_json(text, id_prefix),
    "mistral": lambda text, id_prefix, tools: _parse_mistral(text, id_prefix),
    "deepseek_v3": lambda text, id_prefix, tools: _parse_deepseek_v3(text, id_prefix),
    "qwen3_coder": _parse_qwen3_coder,
    "glm4_moe": _parse_glm4_moe,
    "kimi_k2": lambda text, id_prefix, tools: _parse_kimi_k2(text, id_prefix),
    "minimax_m2": lambda text, id_prefix, tools: _parse_invoke(text, id_prefix, "minimax_m2", tools),
    "deepseek_v32": lambda text, id_prefix, tools: _parse_invoke(text, id_prefix, "deepseek_v32", tools),
    "harmony": _parse_harmony,
    "pythonic": lambda text, id_prefix, tools: _parse_pythonic(text, id_prefix),
    "command_r7b": lambda text, id_prefix, tools: _parse_command_r7b(text, id_prefix),
    "solar_open": lambda text, id_prefix, tools: _parse_solar_open(text, id_prefix),
    "gemma4": lambda text, id_prefix, tools: _parse_gemma4(text, id_prefix),
    "functionary_v3_2": lambda text, id_prefix, tools: _parse_functionary_v3_2(text, id_prefix),
    "lfm2": lambda text, id_prefix, tools: _parse_lfm2(text, id_prefix),
    "apertus": lambda text, id_prefix, tools: _parse_apertus(text, id_prefix),
}
