"""Assistant-only labels on real chat templates that are not in ``../shared/data/chat_templates``.

Each template here (``tests/data/chat_templates``, sources in its README) broke the labels in a way
the shared eight did not: a probe that crashed on a tool-use template, tool calls refused because
of the probe's own call id or argument form, a system prompt moved to the last user turn, a tool-call
opener cut inside its tag, and reasoning dropped from the very turn that is trained.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.conversations import (
    ChatTemplateError,
    ConversationError,
    normalize_conversation,
    template_layout,
    tokenize_conversation,
)
from lightning_agents.models import load_tokenizer

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"


def _call(call_id, city):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
    }


def _weather(call_id="a1b2c3d4e", system=True, reasoning=""):
    messages = [{"role": "system", "content": "You check the weather."}] if system else []
    messages += [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(call_id, "Oslo")]},
        {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": "Oslo: 3 C, snow"},
        {"role": "assistant", "content": reasoning + "It is snowing in Oslo, 3 C."},
        {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "content": "You are welcome."},
    ]
    return {"messages": messages, "tools": [WEATHER]}


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tokenizer(base, name, eos, bos=None):
    template = (TEMPLATES / name).read_text() if isinstance(name, str) else name.read_text()
    return tokenizer_with_template(base, template, bos, eos, SPECIAL_WIDE)


def _labelled(tok, conversation):
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    return labelled_runs(tok, tokenize_conversation(tok, messages, tools))


def test_mistral_nemo_tool_calls_and_a_system_prompt_moved_to_the_last_user_turn(base):
    # The probe's own call id broke the template's nine-character rule, so every tool call was
    # refused as "does not render tool calls"; and the system prompt, which this template renders
    # inside the last user turn, moved the search past every assistant turn.
    tok = _tokenizer(base, "mistral_nemo_2407.jinja", "</s>", "<s>")
    assert template_layout(tok).tool_call_opener.startswith("[TOOL_CALLS]")
    assert _labelled(tok, _weather()) == [
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "a1b2c3d4e"}]</s>',
        "It is snowing in Oslo, 3 C.</s>",
        "You are welcome.</s>",
    ]
    plain = {"messages": [m for m in _weather()["messages"] if "tool" not in m["role"] and not m.get("tool_calls")]}
    plain["messages"].append({"role": "user", "content": "Bye."})  # the system prompt goes to this turn
    assert _labelled(tok, plain) == ["It is snowing in Oslo, 3 C.</s>", "You are welcome.</s>"]
    # ids the template refuses are rewritten as nine hex digits of their hash, the same id the same way
    runs = _labelled(tok, _weather(call_id="call_1"))
    assert runs[0].endswith(f'"id": "{hashlib.sha256(b"call_1").hexdigest()[:9]}"}}]</s>')


def test_a_tool_use_template_that_needs_tools_is_probed_with_them(base):
    # Hermes' tool_use template iterates over `tools`: rendering the probe without them raised a
    # bare TypeError out of the layout, so no conversation could be used, with or without tools.
    tok = _tokenizer(base, "hermes_tool_use.jinja", "<|im_end|>")
    assert _labelled(tok, _weather(system=False)) == [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>',
        "It is snowing in Oslo, 3 C.<|im_end|>",
        "You are welcome.<|im_end|>",
    ]
    with pytest.raises(ConversationError, match="cannot render this conversation"):
        _labelled(tok, {"messages": _weather()["messages"][:2] + [{"role": "assistant", "content": "Hi."}]})


def test_a_template_that_fails_on_every_conversation_is_named_not_a_raw_jinja_error(base):
    tok = copy.deepcopy(base)
    tok.chat_template = "{% for m in messages %}{{ functions.render(m) }}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="fails on a plain two-turn conversation .*UndefinedError"):
        _labelled(tok, {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})


def test_arguments_printed_as_text_are_probed_as_json_strings(base):
    # Phi-4-mini's template prints `{{ call.function.arguments }}`: dict arguments come out as a
    # Python repr, so only JSON strings render as JSON; the probe kept the dict form and refused every call.
    tok = _tokenizer(base, "vllm_phi4_mini_tool.jinja", "<|end|>")
    assert template_layout(tok).string_arguments
    assert _labelled(tok, _weather())[0] == '{"name": "get_weather", "arguments": {"city": "Oslo"}}<|end|>'


def test_the_tool_call_opener_starts_at_its_tag(base):
    # QwQ's generation prompt ends with "<think>\n"; "<think>" and "<tool_call>" share "<t", and the
    # opener was cut after it ("ool_call>..."), leaving "<t" out of the labels where it is not one token.
    tok = _tokenizer(base, "qwq_32b.jinja", "<|im_end|>")
    assert template_layout(tok).tool_call_opener.startswith("<tool_call>")


@pytest.mark.parametrize("name", ["deepseek_r1_distill_qwen.jinja", "deepseekv3.jinja"])
def test_reasoning_dropped_from_the_trained_turn_is_refused(base, shared_data, name):
    # DeepSeek-R1-Distill's and DeepSeek-V3's templates keep only what follows </think> in every
    # turn, the last too: SFT on reasoning traces trained the answers alone, silently.
    folder = TEMPLATES if (TEMPLATES / name).is_file() else shared_data / "chat_templates"
    tok = _tokenizer(base, folder / name, "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>")
    conversation = {
        "messages": [
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "<think>\n2 plus 3 is 5.\n</think>\n\nThe answer is 5."},
        ]
    }
    with pytest.raises(ConversationError, match="drops this turn's reasoning"):
        _labelled(tok, conversation)
    # earlier turns are history: their reasoning is not shown to the model at inference either
    conversation["messages"] += [
        {"role": "user", "content": "And 2 + 4?"},
        {"role": "assistant", "content": "The answer is 6."},
    ]
    assert _labelled(tok, conversation) == [
        "The answer is 5.<｜end▁of▁sentence｜>",
        "The answer is 6.<｜end▁of▁sentence｜>",
    ]


def test_tool_calls_rendered_before_the_content_are_named(base):
    # DeepSeek-R1-Distill renders a turn's calls before its text: the refusal said the call "is not
    # in the rendered chat template", which sent users looking for a missing call.
    tok = _tokenizer(base, "deepseek_r1_distill_qwen.jinja", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>")
    messages = _weather(system=False)["messages"]
    messages[1]["content"] = "Let me look that up."
    with pytest.raises(ConversationError, match="tool calls before its content"):
        _labelled(tok, {"messages": messages, "tools": [WEATHER]})
