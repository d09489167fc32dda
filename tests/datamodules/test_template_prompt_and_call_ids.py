"""Three things real chat templates showed about assistant labels (sources of the templates in the
READMEs of ``tests/data/chat_templates`` and ``tests/data/tool_call_outputs``; ``../shared/data/chat_templates``
when present, skipped otherwise):

- whether a trained turn is rendered after the prompt an engine generates from depends on the data,
  not on the template alone: a thinking template's prompt opens a think block that turns with
  reasoning have and turns without it lack. The warning used to be computed from a plain probe
  conversation, so it fired for data with reasoning too; it now counts the conversations whose
  trained turns lack the prompt, checked here against what ``add_generation_prompt=True`` renders
  before each turn;
- a next user message that is a word of the template's own header ("assistant" under
  ``<|im_start|>assistant``) refused the turn before it;
- Kimi-K2-Thinking writes a call's id where the function name goes: ids not of Moonshot's form
  ``functions.NAME:INDEX`` were refused; they are rewritten to it, with the tool results' ids.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from chat_template_helpers import (
    OURS,
    OUTPUTS,
    REAL_TEMPLATES,
    SHARED,
    SPECIAL_WIDE,
    WEATHER,
    tokenizer_with_template,
)

from lightning_agents.datamodules.conversations import (
    NOTE_CALL_IDS_NAMED,
    NOTE_PROMPT_UNLIKE_TURN,
    NOTE_REASONING_CONTEXT,
    ConversationError,
    _render,
    _render_and_locate,
    _with_string_arguments,
    normalize_conversation,
    render_conversation,
    template_layout,
    tokenize_many,
)
from lightning_agents.models import load_tokenizer

# vLLM's Mistral v0.3 template writes its default system prompt into the last user turn only at
# inference, so no trained turn is rendered as an engine would prompt it: nothing to compare there
TEMPLATES = {path: spec for path, spec in REAL_TEMPLATES.items() if path.name != "vllm_mistral_v03_parallel.jinja"}


def _call(call_id, city="Oslo"):
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}


def _u(text):
    return {"role": "user", "content": text}


def _a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def _t(text, call_id="a1b2c3d4e"):
    return {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": text}


# Conversations without reasoning, with it as reasoning_content (Qwen3.5, MiniMax, gpt-oss, GLM read it)
# and as a think block in the content (Nemotron, QwQ, DeepSeek read that), each plain and with a tool call
# (its id nine alphanumeric characters, which Mistral's templates demand).
CONVERSATIONS = {
    "plain": {"messages": [_u("Hi there"), _a("Hello, friend."), _u("How are you?"), _a("Fine, thanks.")]},
    "reasoning": {
        "messages": [
            _u("Hi there"),
            _a("Hello, friend.", reasoning_content="A greeting; greet back."),
            _u("How are you?"),
            _a("Fine, thanks.", reasoning_content="Small talk; answer politely."),
        ]
    },
    "inline": {
        "messages": [
            _u("Hi there"),
            _a("<think>\nA greeting; greet back.\n</think>\n\nHello, friend."),
            _u("How are you?"),
            _a("<think>\nSmall talk; answer politely.\n</think>\n\nFine, thanks."),
        ]
    },
    "tools": {
        "messages": [_u("Weather in Oslo?"), _a("", tool_calls=[_call("a1b2c3d4e")]), _t("Sunny, 3 C"), _a("Sunny.")],
        "tools": [WEATHER],
    },
    "tools_reasoning": {
        "messages": [
            _u("Weather in Oslo?"),
            _a("", tool_calls=[_call("a1b2c3d4e")], reasoning_content="Need the weather tool."),
            _t("Sunny, 3 C"),
            _a("Sunny.", reasoning_content="The tool said sunny."),
        ],
        "tools": [WEATHER],
    },
}
# What may stand between the prompt and a turn's labels: an empty think block, or the end of the one
# the prompt opened (Qwen3.5's `<think>\n` + `\n</think>\n\n`).
_EMPTY_THINK = re.compile(r"\s*(?:<((?:\w+:)?think)>\s*</\1>|</think>)\s*")


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tok(base, path: Path):
    if not path.is_file():  # ../shared/data lives beside the clone, not in it (CI has none)
        pytest.skip(f"real chat template {path} is absent")
    eos, bos, special = TEMPLATES[path]
    return tokenizer_with_template(base, path.read_text(), bos, eos, special)


def _holds_engine_prompt(tok, layout, messages, tools, i, text, start) -> bool:
    """Whether the text before turn ``i``'s labels ends with what ``add_generation_prompt=True``
    appends to the conversation before it (an empty think block the template writes between them
    aside, which the labels leave out on purpose)."""
    before = _with_string_arguments(messages[:i]) if layout.string_arguments else messages[:i]
    plain = _render(tok, before, tools)
    prompted = _render(tok, before, tools, add_generation_prompt=True)
    shared = next((k for k, (a, b) in enumerate(zip(plain, prompted)) if a != b), min(len(plain), len(prompted)))
    appended = prompted[shared:]
    head = text[:start]
    at = head.rfind(appended)
    return at >= 0 and (at + len(appended) == len(head) or bool(_EMPTY_THINK.fullmatch(head[at + len(appended) :])))


@pytest.mark.parametrize("path", list(TEMPLATES), ids=[p.stem for p in TEMPLATES])
def test_turns_noted_without_the_prompt_are_those_an_engine_prompts_otherwise(base, path):
    # The note (and so the warning) is on exactly the trained turns whose rendered header is not
    # what the engine would feed the model before them, for data with and without reasoning.
    tok = _tok(base, path)
    layout = template_layout(tok)
    checked = 0
    for name, record in CONVERSATIONS.items():
        messages, tools = normalize_conversation(copy.deepcopy(record))
        try:
            text, spans, notes = _render_and_locate(tok, layout, messages, tools, _render, "ignore", "context")
        except ConversationError:
            continue  # this template does not render this kind of data (reasoning it drops, calls)
        context = {int(n.split(":")[0].split()[1]) for n in notes if NOTE_REASONING_CONTEXT in n}
        trained = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i not in context]
        lacking = [
            i for i, (s, _) in zip(trained, spans) if not _holds_engine_prompt(tok, layout, messages, tools, i, text, s)
        ]
        noted = [n for n in notes if NOTE_PROMPT_UNLIKE_TURN in n]
        if path.name == "vllm_mistral_v03_parallel.jinja":
            continue  # its prompt differs in the user turn (a default system prompt), not in the header
        assert len(noted) == (1 if lacking else 0), (name, lacking, noted)
        if lacking:
            assert noted[0].startswith(f"message {lacking[0]}: "), (name, noted)
        checked += 1
    assert checked


def _warnings(caplog):
    # Old and new wording alike: the old warning said "unlike the prompt an engine generates from".
    return [r.getMessage() for r in caplog.records if "the prompt an engine generates from" in r.getMessage()]


@pytest.mark.parametrize(
    ("path", "reasoning"),
    [
        (OURS / "qwen3_5_4b.jinja", "reasoning"),  # history turns drop it: context; the last holds `<think>\n`
        (OURS / "minimax_m2.jinja", "reasoning"),
        (OURS / "nemotron_nano_v2.jinja", "inline"),
    ],
)
def test_prompt_warning_counts_the_conversations_that_lack_the_prompt(base, caplog, path, reasoning):
    # These thinking templates' prompts open a think block: data with reasoning are trained after it,
    # data without are not. The old warning came from the template alone and fired for both.
    from lightning_agents.datamodules.chat import tokenize_to_dataset

    tok = _tok(base, path)
    with_reasoning = [copy.deepcopy(CONVERSATIONS[reasoning]) for _ in range(3)]
    name = f"template {path.name} of this test"
    with caplog.at_level("WARNING", logger="lightning_agents.datamodules.chat"):
        rows, errors, _ = tokenize_to_dataset(with_reasoning, tok, None, template_name=name)
    assert len(rows) == 3 and not errors
    assert _warnings(caplog) == []
    caplog.clear()
    mixed = [*with_reasoning, copy.deepcopy(CONVERSATIONS["plain"]), copy.deepcopy(CONVERSATIONS["plain"])]
    with caplog.at_level("WARNING", logger="lightning_agents.datamodules.chat"):
        tokenize_to_dataset(mixed, tok, None, template_name=name)
    warned = _warnings(caplog)
    assert len(warned) == 1 and warned[0].startswith(f"2 conversation(s) have assistant turns that {name} renders")
    assert "first: conversation 3: message " in warned[0]


@pytest.mark.parametrize(
    ("path", "warned"),
    [
        (OUTPUTS / "google-gemma-4-31B-it.jinja", True),  # turns lack the prompt's empty thought channel
        (OURS / "qwen3_coder.jinja", False),
        (SHARED / "qwen3.jinja", False),  # the prompt is `<|im_start|>assistant\n`, which every turn holds
    ],
)
def test_prompt_warning_on_plain_data(base, caplog, path, warned):
    from lightning_agents.datamodules.chat import tokenize_to_dataset

    tok = _tok(base, path)
    with caplog.at_level("WARNING", logger="lightning_agents.datamodules.chat"):
        tokenize_to_dataset([copy.deepcopy(CONVERSATIONS["plain"])], tok, None, template_name=path.name)
    messages = _warnings(caplog)
    assert len(messages) == (1 if warned else 0), messages
    if warned:
        assert messages[0].startswith(f"1 conversation(s) have assistant turns that {path.name} renders")


def _header_words(layout) -> list[str]:
    prompts = layout.assistant_header + layout.generation_prompt + (layout.tool_generation_prompt or "")
    return list(dict.fromkeys(re.findall(r"[A-Za-z_]+", prompts + "".join(layout.end_tokens))))


@pytest.mark.parametrize("path", list(TEMPLATES), ids=[p.stem for p in TEMPLATES])
def test_next_user_message_that_is_a_word_of_the_header_labels_the_turn_before_it(base, path):
    # A user answering "assistant" (Qwen's `<|im_start|>assistant`), "all" (functionary's `>>>all`),
    # "INST" or "eot_id" refused the turn before it: the word was "found" in that turn's header.
    tok = _tok(base, path)

    def runs(word):
        messages = [_u("Delete the temporary files."), _a("Which ones?"), _u(word), _a("Done.")]
        record = {"messages": messages, "tools": [WEATHER]}  # Hermes' template renders nothing without tools
        text, spans = render_conversation(tok, *normalize_conversation(copy.deepcopy(record)))
        return [text[s:e] for s, e in spans]

    words = _header_words(template_layout(tok))
    assert words
    want = runs("Qzxv")
    for word in words:
        assert runs(word) == want, word


def _kimi(ids, results=None):
    a, b, c = ids
    ra, rb, rc = results or ids
    return {
        "messages": [
            _u("Weather in Oslo and Paris, then Rome?"),
            _a("", tool_calls=[_call(a, "Oslo"), _call(b, "Paris")]),
            _t("Oslo: snow", ra),
            _t("Paris: rain", rb),
            _a("", tool_calls=[_call(c, "Rome")]),
            _t("Rome: sun", rc),
            _a("Snow, rain and sun."),
        ],
        "tools": [WEATHER],
    }


MOONSHOT = ("functions.get_weather:0", "functions.get_weather:1", "functions.get_weather:2")


@pytest.mark.parametrize(
    ("ids", "results"),
    [
        (("call_x7", "call_y8", "call_z9"), None),
        (("a1b2c3d4e", "f5g6h7i8j", "k9l0m1n2o"), None),  # Mistral's nine characters
        (("functions.get_weather:0", "call_y8", "call_z9"), None),  # partly Moonshot's
        (("functions.lookup:0", "functions.lookup:1", "functions.lookup:2"), None),  # not the calls' name
        (("call_x7", "call_y8", "call_z9"), ("", "", "")),  # results without ids answer the calls in order
    ],
)
def test_kimi_k2_thinking_call_ids_are_rewritten_to_moonshots_form(base, ids, results):
    # The template writes the id where the name goes (`<|tool_call_begin|>ID<|tool_call_argument_begin|>`)
    # and heads the tool result with it (`## Return of ID`): trained with Moonshot's ids, as vLLM numbers
    # them, the model writes what Kimi's parsers read, and the results show the ids the model wrote.
    tok = _tok(base, OURS / "kimi_k2_thinking.jinja")
    layout = template_layout(tok)
    got = _render_and_locate(tok, layout, *normalize_conversation(_kimi(ids, results)), _render)
    want = _render_and_locate(tok, layout, *normalize_conversation(_kimi(MOONSHOT)), _render)
    assert got[:2] == want[:2] and got[2] == [NOTE_CALL_IDS_NAMED] and want[2] == []
    text, spans, _ = got
    for k, city in enumerate(("Oslo", "Paris")):
        assert f"## Return of functions.get_weather:{k}\n{city}" in text
    assert "<|tool_call_begin|>functions.get_weather:2<|tool_call_argument_begin|>" in text
    assert not any(i in text for i in ids if i not in MOONSHOT)
    assert [text[s:e].endswith("<|im_end|>") for s, e in spans] == [True, True, True]
    notes: list[list[str]] = []
    rows = tokenize_many(tok, [normalize_conversation(_kimi(ids, results))], notes=notes)
    assert isinstance(rows[0], dict) and notes == [[NOTE_CALL_IDS_NAMED]]


def test_kimi_k2_thinking_rewritten_ids_are_counted_in_one_warning(base, caplog):
    from lightning_agents.datamodules.chat import tokenize_to_dataset

    tok = _tok(base, OURS / "kimi_k2_thinking.jinja")
    data = [_kimi(("call_x7", "call_y8", "call_z9")), _kimi(MOONSHOT), _kimi(("x1", "x2", "x3"))]
    with caplog.at_level("WARNING", logger="lightning_agents.datamodules.chat"):
        rows, errors, _ = tokenize_to_dataset(data, tok, None, template_name="kimi")
    assert len(rows) == 3 and not errors
    warned = [r.getMessage() for r in caplog.records if "functions.NAME:INDEX" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("2 conversation(s) have tool-call ids that kimi writes")


# --- after a tool result; calls sharing an id; what the template writes after a result; the warning's reason ---

REASONING_CALLS = {
    # A call with reasoning right after a tool result: Gemma 4 appends nothing after a result, so its
    # model writes `<|channel>thought\n` itself there, and that was left out of the labels.
    "messages": [
        _u("Oslo, then Rome?"),
        _a("", tool_calls=[_call("a1b2c3d4e")], reasoning_content="Oslo first."),
        _t("Sunny", "a1b2c3d4e"),
        _a("", tool_calls=[_call("f5g6h7i8j", "Rome")], reasoning_content="Now Rome."),
        _t("Rain", "f5g6h7i8j"),
        _a("Sunny, then rain."),
    ],
    "tools": [WEATHER],
}


# Templates whose turns after a tool result are rendered after the engine's prompt (the others render
# them unlike it, which the note reports: Apertus inside the call's turn, Hermes after a newline the
# prompt lacks, DeepSeek-V3.2's non-thinking prompt with its closed think block...).
_AFTER_RESULT_CHECKED = {
    "google-gemma-4-31B-it.jinja",
    "deepseek_r1_distill_qwen.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "deepseekv3.jinja",
    "qwen3_5_4b.jinja",
    "kimi_k2_thinking.jinja",
    "qwen2_5.jinja",
}


def _engine_prompt(tok, layout, messages, tools, i) -> str:
    before = _with_string_arguments(messages[:i]) if layout.string_arguments else messages[:i]
    return _render(tok, before, tools, add_generation_prompt=True)


@pytest.mark.parametrize("path", list(TEMPLATES), ids=[p.stem for p in TEMPLATES])
def test_a_turn_after_a_tool_result_is_labelled_from_where_the_engine_prompt_ends(base, path):
    # Everything the model writes after the prompt an engine feeds it (the conversation up to the
    # result, with add_generation_prompt=True) is labelled: where the template writes no header after
    # a result (DeepSeek, Gemma 4), the labels start at the result's closing; an empty think block
    # the template writes there stays out, as after a user message.
    from lightning_agents.datamodules.conversations import _moonshot_ids

    tok = _tok(base, path)
    layout = template_layout(tok)
    checked = 0
    for record in (REASONING_CALLS, CONVERSATIONS["tools"], CONVERSATIONS["tools_reasoning"]):
        messages, tools = normalize_conversation(copy.deepcopy(record))
        try:
            text, spans, notes = _render_and_locate(tok, layout, copy.deepcopy(messages), tools, _render)
        except ConversationError:
            continue  # a template that drops this reasoning or renders no calls
        if layout.call_id_names:
            messages = _moonshot_ids(messages) or messages
        trained = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if len(trained) != len(spans):
            continue  # turns left as context (reasoning the template drops)
        for i, (start, _) in zip(trained, spans):
            if messages[i - 1]["role"] != "tool":
                continue
            prompt = _engine_prompt(tok, layout, messages, tools, i)
            if not text.startswith(prompt):
                continue  # the turn is rendered unlike the prompt: noted, checked above
            assert start >= len(prompt), (i, text[start : len(prompt)])
            assert _EMPTY_THINK.fullmatch(text[len(prompt) : start]) or start == len(prompt), (
                i,
                text[len(prompt) : start],
            )
            checked += 1
    if path.name in _AFTER_RESULT_CHECKED:
        assert checked


def test_gemma4_labels_the_thought_channel_it_opens_after_a_tool_result(base):
    tok = _tok(base, OUTPUTS / "google-gemma-4-31B-it.jinja")
    messages, tools = normalize_conversation(copy.deepcopy(REASONING_CALLS))
    text, spans, notes = _render_and_locate(tok, template_layout(tok), messages, tools, _render)
    assert text[spans[1][0] :].startswith("<|channel>thought\nNow Rome.")
    assert text[: spans[1][0]].endswith("<tool_response|>")
    assert not [n for n in notes if n.startswith("message 3: ")]


def _after_result_words(tok, layout) -> list[str]:
    """The words the template writes after a tool result, up to where the model writes (found
    independently of the layout: what add_generation_prompt=True renders after the result's text)."""
    messages, tools = normalize_conversation(copy.deepcopy(CONVERSATIONS["tools"]))
    if layout.call_id_names:
        from lightning_agents.datamodules.conversations import _moonshot_ids

        messages = _moonshot_ids(messages) or messages
    prompt = _engine_prompt(tok, layout, messages, tools, 3)
    return list(dict.fromkeys(re.findall(r"[A-Za-z_]+", prompt[prompt.rfind("Sunny, 3 C") + len("Sunny, 3 C") :])))


@pytest.mark.parametrize("path", list(TEMPLATES), ids=[p.stem for p in TEMPLATES])
def test_next_user_message_that_is_a_word_written_after_a_tool_result_labels_the_turn_before_it(base, path):
    # DeepSeek's `<｜tool▁output▁end｜>` after a result: a user answering "end" (or "output", "tool";
    # "result" on DeepSeek-V3.2, "response" on MiniMax-M2, "end" on Solar-Open) refused the answer
    # before it, the word "found" in the text between the result and that answer.
    tok = _tok(base, path)
    layout = template_layout(tok)
    if layout.tool_call_opener is None:
        pytest.skip(f"{path.name} renders no tool calls")

    def runs(word):
        record = copy.deepcopy(CONVERSATIONS["tools"])
        record["messages"] += [_u(word), _a("Done.")]
        text, spans = render_conversation(tok, *normalize_conversation(record))
        return [text[s:e] for s, e in spans]

    try:
        want = runs("Qzxv")
    except ConversationError:
        pytest.skip(f"{path.name} does not render this conversation")
    for word in _after_result_words(tok, layout):
        assert runs(word) == want, word


def test_kimi_k2_thinking_calls_sharing_an_id_are_answered_in_order(base):
    # Converters that use the function name as the id give parallel calls one id: both results were
    # headed with the second call's id (the Oslo result as the Rome call's return).
    tok = _tok(base, OURS / "kimi_k2_thinking.jinja")
    record = _kimi(("get_weather", "get_weather", "get_weather"))
    text, spans, notes = _render_and_locate(tok, template_layout(tok), *normalize_conversation(record), _render)
    assert notes == [NOTE_CALL_IDS_NAMED]
    assert "## Return of functions.get_weather:0\nOslo: snow" in text
    assert "## Return of functions.get_weather:1\nParis: rain" in text
    assert "## Return of functions.get_weather:2\nRome: sun" in text


def test_kimi_k2_thinking_result_answering_no_call_is_refused_naming_it(base):
    # A result whose id is no call's was kept as written ('## Return of zzz'), silently.
    tok = _tok(base, OURS / "kimi_k2_thinking.jinja")
    for ids in (("call_x7", "call_y8", "call_z9"), MOONSHOT):
        record = _kimi(ids, (ids[0], "zzz", ids[2]))
        with pytest.raises(ConversationError, match=r"message 3 \(tool\): its tool_call_id 'zzz'"):
            _render_and_locate(tok, template_layout(tok), *normalize_conversation(record), _render)


def test_prompt_warning_says_how_the_turn_differs_from_the_prompt(base, caplog):
    # The reason always blamed a thinking template's think block; chujiezheng's ChatML differs in
    # whitespace only (its prompt is indented: no whitespace control in the template).
    from lightning_agents.datamodules.chat import tokenize_to_dataset

    cases = (
        (OURS / "chujiezheng_chatml.jinja", "<|im_end|>", "they differ in whitespace only"),
        (OURS / "qwen3_5_4b.jinja", "<|im_end|>", "'<think>\\n', a think block the prompt opens"),
    )
    for path, eos, reason in cases:
        tok = tokenizer_with_template(base, path.read_text(), None, eos, SPECIAL_WIDE)
        caplog.clear()
        with caplog.at_level("WARNING", logger="lightning_agents.datamodules.chat"):
            tokenize_to_dataset([copy.deepcopy(CONVERSATIONS["plain"])], tok, None, template_name=path.name)
        warned = _warnings(caplog)
        assert len(warned) == 1 and reason in warned[0], warned
        assert ("think block" in warned[0]) == ("think" in reason), warned


MARKED = (
    "{% for m in messages %}{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{% else %}<|im_start|>assistant\n{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def test_generation_block_note_names_its_message(base):
    # A template with {% generation %} blocks: the note had no "message i: " (the warning read
    # "first: , rendered after ...").
    tok = tokenizer_with_template(base, MARKED, None, "<|im_end|>", SPECIAL_WIDE)
    assert template_layout(tok).generation_markers
    record = {"messages": [_u("Hi"), _a("Hello."), _u("Bye"), _a("Bye.", weight=0), _u("Thanks"), _a("Welcome.")]}
    notes: list[list[str]] = []
    rows = tokenize_many(tok, [normalize_conversation(copy.deepcopy(record))], notes=notes)
    assert isinstance(rows[0], dict)
    noted = [n for n in notes[0] if NOTE_PROMPT_UNLIKE_TURN in n]
    assert len(noted) == 1 and noted[0].startswith("message 1: "), noted
    assert "'<think>\\n', a think block the prompt opens" in noted[0]
