"""A short reply whose words the template itself writes elsewhere is still labelled where the model writes it.

Templates insert text of their own before the conversation's messages: Llama 3.1's
``Today Date: 26 Jul 2024``, Qwen2.5's and SmolLM2's default system prompts, a tool list whose
descriptions give example values. ``assistant_spans`` used to keep its search position before a
user message whenever the next reply's text occurred in front of that message (a test meant for
Mistral Nemo, which moves the system prompt into the last user turn), and then "found" a reply such
as ``4`` or ``helpful`` inside that inserted text: the inserted text was trained and the reply not,
with no error. Every real template here (``tests/data/chat_templates`` and
``tests/data/tool_call_outputs/templates``, sources in their READMEs; ``../shared/data/chat_templates``
when present) must label exactly the assistant turn for replies made of the words the template
inserts before the user's message.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from chat_template_helpers import (
    OURS,
    OUTPUTS,
    REAL_TEMPLATES,
    SHARED,
    tokenizer_with_template,
)

from lightning_agents.datamodules.conversations import (
    ChatTemplateError,
    ConversationError,
    normalize_conversation,
    render_conversation,
    tokenize_many,
)
from lightning_agents.models import load_tokenizer
from lightning_agents.template_clock import render_chat_template

TEMPLATES = REAL_TEMPLATES
# A tool whose description holds an example value, as real tool lists do.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
QUESTION = "Zq which single word answers this?"
UNIQUE = "Xylophone quokka."


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tok(base, path: Path):
    if not path.is_file():  # ../shared/data lives beside the clone, not in it (CI has none)
        pytest.skip(f"real chat template {path} is absent")
    eos, bos, special = TEMPLATES[path]
    return tokenizer_with_template(base, path.read_text(), bos, eos, special), special


def _located(tok, reply: str, tools, system: str | None = None):
    messages = [{"role": "system", "content": system}] if system else []
    messages += [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": reply}]
    record = {"messages": messages, **({"tools": tools} if tools else {})}
    return render_conversation(tok, *normalize_conversation(copy.deepcopy(record)))


def _inserted_words(text: str, special: re.Pattern, reply_at: int) -> list[str]:
    """Words the template wrote itself before the user's message (special tokens left out), and none
    of the assistant header's: a reply equal to its own header's word is another matter."""
    before, header = text[: text.rfind(QUESTION)], text[text.rfind(QUESTION) + len(QUESTION) : reply_at]
    before, header = special.sub(" ", before), special.sub(" ", header)
    words = [w for w in dict.fromkeys(re.findall(r"[A-Za-z]{4,}|\d+", before)) if w not in header]
    picked = words[:3] + words[-3:] + [w for w in ("Paris", "helpful", "2024", "get_weather") if w in words]
    return list(dict.fromkeys(picked))


def _check_exact(text: str, spans, reply: str, unique_text: str, unique_spans) -> None:
    """The reply's span is where the unique reply's was (the same turn, same header and end) and holds it."""
    assert len(spans) == len(unique_spans) == 1, spans
    (start, end), (u_start, u_end) = spans[0], unique_spans[0]
    assert start == u_start and text[start:end] == unique_text[u_start:u_end].replace(UNIQUE, reply), (
        text[start:end],
        unique_text[u_start:u_end],
    )


CASES = [(path, tools) for path in TEMPLATES for tools in (False, True)]


@pytest.mark.parametrize(("path", "with_tools"), CASES, ids=[f"{p.stem}-{'tools' if t else 'plain'}" for p, t in CASES])
def test_reply_made_of_template_inserted_words_labels_only_the_assistant_turn(base, path, with_tools):
    tok, special = _tok(base, path)
    tools = [WEATHER] if with_tools else None
    try:
        unique_text, unique_spans = _located(tok, UNIQUE, tools)
    except (ConversationError, ChatTemplateError) as exc:  # the template cannot take this conversation at all
        pytest.skip(f"{path.name} refuses the plain conversation: {exc}")
    reply_at = unique_text.rfind(UNIQUE)
    words = _inserted_words(unique_text, special, reply_at)
    if not words:
        pytest.skip(f"{path.name} inserts no words of its own before the user's message")
    for word in words:
        text, spans = _located(tok, word, tools)
        # The reply renders where the unique one did: same prefix, so the same span start.
        assert text[:reply_at] == unique_text[:reply_at], word
        _check_exact(text, spans, word, unique_text, unique_spans)


@pytest.mark.parametrize(
    ("name", "reply", "tools"),
    [
        ("llama3_1.jinja", "4", None),  # "Today Date: 26 Jul 2024"
        ("llama3_1.jinja", "2024", None),
        ("qwen2_5.jinja", "helpful", None),  # "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        ("qwen2_5.jinja", "Qwen", None),
        ("smollm2.jinja", "AI assistant", None),  # "You are a helpful AI assistant named SmolLM, ..."
        ("qwen2_5.jinja", "Paris", [WEATHER]),  # the tool list's "e.g. Paris"
        ("qwen2_5.jinja", "get_weather", [WEATHER]),
    ],
)
def test_audited_short_replies_on_shared_templates(base, name, reply, tools):
    tok, _ = _tok(base, SHARED / name)
    unique_text, unique_spans = _located(tok, UNIQUE, tools, system="You answer briefly." if tools else None)
    text, spans = _located(tok, reply, tools, system="You answer briefly." if tools else None)
    _check_exact(text, spans, reply, unique_text, unique_spans)


def test_mistral_small_tool_list_before_the_last_user_turn_is_not_labelled(base):
    # The tool list (with "e.g. Paris") sits before the LAST user message: the second reply "Paris"
    # was "found" there and the tool list and the user's message labelled.
    tok, _ = _tok(base, OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja")
    record = {
        "messages": [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello, how can I help?"},
            {"role": "user", "content": "Capital of France? One word."},
            {"role": "assistant", "content": "Paris"},
        ],
        "tools": [WEATHER],
    }
    text, spans = render_conversation(tok, *normalize_conversation(copy.deepcopy(record)))
    assert [text[s:e] for s, e in spans] == ["Hello, how can I help?</s>", "Paris</s>"]


def test_mistral_nemo_system_prompt_moved_to_the_last_user_turn_still_located(base):
    # The rule that keeps the search before a moved system prompt still holds where it is meant to.
    tok, _ = _tok(base, OURS / "mistral_nemo_2407.jinja")
    record = {
        "messages": [
            {"role": "system", "content": "You answer in one word."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris"},
            {"role": "user", "content": "And of Spain?"},
            {"role": "assistant", "content": "Madrid"},
            {"role": "user", "content": "Thanks."},
        ]
    }
    text, spans = render_conversation(tok, *normalize_conversation(copy.deepcopy(record)))
    assert text.find("You answer in one word.") > text.find("Madrid")  # moved into the last user turn
    assert [text[s:e] for s, e in spans] == ["Paris</s>", "Madrid</s>"]


def test_template_that_renders_no_assistant_turn_is_refused_once_naming_its_file_and_setting(tmp_path):
    # vLLM's Granite-20b-fc template never renders an assistant message: the error came from inside
    # datasets.map, per worker, and named neither the template file nor data.chat_template.
    from lightning_agents.datamodules.chat import ChatDataModule

    path = OURS / "vllm_granite_20b_fc.jinja"
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    dm = ChatDataModule(train=str(tmp_path / "t.jsonl"), val=None, chat_template=str(path), cache_dir=None)
    with pytest.raises(ChatTemplateError, match=r"vllm_granite_20b_fc\.jinja \(data\.chat_template\).*renders user"):
        dm.setup("fit")


def test_hunyuan_text_answers_are_labelled_from_where_the_prompt_ends_like_its_tool_calls(base):
    # Hunyuan-A13B has no generation prompt: an engine feeds the conversation up to `<|extra_0|>` and
    # the model writes `助手：` before a text answer (`<tool_calls>` before a call). The call turns were
    # labelled from their opener but the answers only from after `助手：`, which SFT never taught.
    tok, _ = _tok(base, OURS / "vllm_hunyuan_a13b.jinja")
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    record = {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Oslo: 3 C, snow"},
            {"role": "assistant", "content": "It is snowing in Oslo, 3 C."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You are welcome."},
        ],
        "tools": [WEATHER],
    }
    messages, tools = normalize_conversation(copy.deepcopy(record))
    text, spans = render_conversation(tok, messages, tools)
    assert [text[s:e] for s, e in spans] == [
        '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_calls><|eos|>',
        "助手：It is snowing in Oslo, 3 C.<|eos|>",
        "助手：You are welcome.<|eos|>",
    ]
    # Each span starts exactly where what add_generation_prompt=True renders before that turn ends.
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for i, (start, _) in zip(turns, spans):
        prompt = render_chat_template(tok, messages[:i], tools=tools, tokenize=False, add_generation_prompt=True)
        assert text.startswith(prompt) and start == len(prompt)


def _kimi_calls(call_id):
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    return {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": "Oslo: 3 C, snow"},
            {"role": "assistant", "content": "It is snowing in Oslo, 3 C."},
        ],
        "tools": [WEATHER],
    }


def test_kimi_k2_thinking_calls_with_moonshot_ids_are_labelled(base):
    # The template writes the call's id where the name goes; the probe found the name in the tool
    # message's header instead and refused every tool call, blaming the end-of-turn token.
    tok, _ = _tok(base, OURS / "kimi_k2_thinking.jinja")
    text, spans = render_conversation(tok, *normalize_conversation(_kimi_calls("functions.get_weather:0")))
    runs = [text[s:e] for s, e in spans]
    assert runs[0].endswith(
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>'
        "<|tool_calls_section_end|><|im_end|>"
    )
    assert "<|im_system|>" not in runs[0] and runs[1] == "It is snowing in Oslo, 3 C.<|im_end|>"


def test_user_message_whose_words_the_template_writes_before_it(base):
    # The user's own text ("Today") is in Llama 3.1's date line too: found there, it moved the search
    # into that line, where the reply "Jul" was then "found" and `Jul 2024\n\n<|eot_id|>` labelled.
    tok, _ = _tok(base, SHARED / "llama3_1.jinja")
    for messages in (
        [{"role": "user", "content": "Today"}, {"role": "assistant", "content": "Jul"}],
        [
            {"role": "user", "content": "Today"},
            {"role": "assistant", "content": "Jul"},
            {"role": "user", "content": "Today"},
            {"role": "assistant", "content": "Jul"},
        ],
    ):
        text, spans = render_conversation(tok, *normalize_conversation({"messages": copy.deepcopy(messages)}))
        header = "<|start_header_id|>assistant<|end_header_id|>\n\n"
        assert [text[s:e] for s, e in spans] == ["Jul<|eot_id|>"] * (len(messages) // 2)
        assert all(text[s - len(header) : s] == header for s, _ in spans)


@pytest.mark.parametrize("name", ["mistral_nemo_2407.jinja", "vllm_mistral_v03_parallel.jinja"])
@pytest.mark.parametrize(
    ("first", "last"),
    [("Hi", "Hi again, thanks"), ("ok", "Please book it."), ("Thanks", "Thanks")],
    ids=["prefix", "inside-a-word", "same"],
)
def test_moved_system_prompt_with_the_first_user_words_in_the_last_user_message(base, name, first, last):
    # Mistral Nemo / v0.3 move the system prompt into the last user turn. The first user message's
    # words also inside that last one ("ok" in "book") were taken for its copy rendered after the
    # prompt, so the prompt counted as rendered in place, the search moved past every turn and the
    # conversation was refused ("does not render this assistant message's content verbatim").
    tok, _ = _tok(base, OURS / name)
    messages = [
        {"role": "system", "content": "You are a concise travel assistant."},
        {"role": "user", "content": first},
        {"role": "assistant", "content": "Hello! Where would you like to go?"},
        {"role": "user", "content": "Book me a flight to Rome."},
        {"role": "assistant", "content": "Done: flight AZ123 to Rome is booked."},
        {"role": "user", "content": last},
    ]
    text, spans = render_conversation(tok, *normalize_conversation({"messages": copy.deepcopy(messages)}))
    assert text.find("You are a concise travel assistant.") > text.find("AZ123")  # moved into the last turn
    assert [text[s:e].strip() for s, e in spans] == [
        "Hello! Where would you like to go?</s>",
        "Done: flight AZ123 to Rome is booked.</s>",
    ]


@pytest.mark.parametrize("name", ["mistral_nemo_2407.jinja", "vllm_mistral_v03_parallel.jinja"])
def test_unrendered_system_prompt_equal_to_the_reply_is_told_apart_from_the_reply(base, name):
    # Nemo / v0.3 render no system prompt in a conversation that ends with an assistant message; its
    # text "Yes" was "found" in the reply, the search moved past the user message, and every setting
    # refused the conversation saying the user message was not rendered.
    tok, _ = _tok(base, OURS / name)
    messages = [
        {"role": "system", "content": "Yes"},
        {"role": "user", "content": "Is water wet?"},
        {"role": "assistant", "content": "Yes"},
    ]

    def outcome(setting):
        conversation = normalize_conversation({"messages": copy.deepcopy(messages)})
        return tokenize_many(tok, [conversation], None, unrendered_system_prompt=setting)[0]

    refused = outcome("refuse")
    assert isinstance(refused, ConversationError) and "message 0 (system)" in str(refused), refused
    for setting in ("ignore", "into_first_user"):
        row = outcome(setting)
        assert not isinstance(row, Exception), (setting, row)
        ids, labels = row["input_ids"].tolist(), row["labels"].tolist()
        assert tok.decode([t for t, lab in zip(ids, labels) if lab != -100]).strip() == "Yes</s>", setting
        if setting == "into_first_user":
            assert "Yes\n\nIs water wet?" in tok.decode(ids)


@pytest.mark.parametrize(
    "path",
    [
        SHARED / "qwen3.jinja",
        OURS / "qwen3_5_4b.jinja",
        OURS / "gpt_oss_120b.jinja",
        OURS / "glm_4_6.jinja",
        OURS / "minimax_m2.jinja",
        OURS / "seed_oss.jinja",
    ],
    ids=lambda p: p.stem,
)
@pytest.mark.parametrize(
    ("reasoning", "reply"),
    [("2+2 equals 4. So the answer is 4.", "4"), ("The capital of France is Paris.", "Paris.")],
    ids=["digit", "sentence-end"],
)
def test_final_reply_that_its_own_reasoning_states_is_labelled(base, path, reasoning, reply):
    # Reasoning usually states the answer: the reply was found inside the rendered think block,
    # no reasoning lay before it, and the turn was refused as "does not render this turn's reasoning".
    tok, _ = _tok(base, path)

    def located(answer):
        messages = [
            {"role": "user", "content": "Question?"},
            {"role": "assistant", "content": answer, "reasoning_content": reasoning},
        ]
        return render_conversation(tok, *normalize_conversation({"messages": messages}))

    unique_text, unique_spans = located(UNIQUE)
    text, spans = located(reply)
    _check_exact(text, spans, reply, unique_text, unique_spans)
    assert reasoning in text[spans[0][0] : spans[0][1]]


@pytest.mark.parametrize(
    "path",
    [
        SHARED / "qwen3.jinja",
        SHARED / "qwen2_5.jinja",
        OURS / "qwq_32b.jinja",
        OURS / "vllm_phi4_mini_tool.jinja",
        OURS / "glm_4_6.jinja",
        OURS / "vllm_toolace.jinja",
    ],
    ids=lambda p: p.stem,
)
def test_reply_after_a_tool_result_equal_to_a_header_word_is_labelled_after_the_header(base, path):
    # After a tool result the reply was searched for from the result's end, not past the assistant
    # header: a reply "assistant" was found inside `<|im_start|>assistant` and the header labelled.
    tok, _ = _tok(base, path)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}

    def located(reply):
        messages = [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "3 C"},
            {"role": "assistant", "content": reply},
        ]
        record = {"messages": messages, "tools": [WEATHER]}
        return render_conversation(tok, *normalize_conversation(copy.deepcopy(record)))

    unique_text, unique_spans = located(UNIQUE)
    text, spans = located("assistant")
    (start, end), (u_start, u_end) = spans[-1], unique_spans[-1]
    assert len(spans) == len(unique_spans) and start == u_start, (text[start:end], unique_text[u_start:u_end])
    assert text[start:end] == unique_text[u_start:u_end].replace(UNIQUE, "assistant")
