"""Tool calls whose arguments a chat template renders as XML-like parameter blocks, not one JSON object.

Qwen3-Coder, Qwen3.5, DeepSeek-V3.2, MiniMax-M2 and Seed-OSS (and Nemotron-3, Step-3.5, GLM) write
``<function=name>\\n<parameter=city>\\nParis\\n</parameter>`` or the like. An audit of 63 real
templates found every conversation with a tool call refused under them ("arguments are not rendered
as JSON"; 106 conversation/template pairs), and the Hermes and ToolACE rows then trained their own
text syntax instead. The call is now accepted when each argument value follows the call's name, in
order, before the turn's end, spelled as the template spells it; the trained span is still the
assistant's whole call block and its end-of-turn token.
Templates in ``tests/data/chat_templates`` (sources and licences in its README).
"""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path

import pytest
from chat_template_helpers import WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import read_conversations, tokenize_to_dataset
from lightning_agents.datamodules.conversations import (
    ConversationError,
    _render,
    assistant_spans,
    normalize_conversation,
    template_layout,
    tokenize_conversation,
)
from lightning_agents.models import load_tokenizer

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
DATA = Path(__file__).resolve().parents[1] / "data" / "conversations"
LOGGER = "lightning_agents.datamodules.chat"
# The special tokens of these templates (Seed-OSS's <seed:...>, MiniMax-M2's [e~[ and friends).
SPECIAL = re.compile(
    r"<\|[^|<>\s]+\|>|<｜[^｜]+｜>|</?(?:tool_call|tool_response|think|tools)>"
    r"|</?seed:[a-z_]+>|\[e~\[|\]~!b\[|\]~b\]|</?minimax:tool_call>"
)
# file: (bos, eos)
XML_TEMPLATES = {
    "qwen3_coder.jinja": (None, "<|im_end|>"),
    "qwen3_5_4b.jinja": (None, "<|im_end|>"),
    "deepseek_v3_2.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "minimax_m2.jinja": (None, "[e~["),
    "seed_oss.jinja": ("<seed:bos>", "<seed:eos>"),
}
BOOK = {
    "type": "function",
    "function": {
        "name": "book_trip",
        "description": "Book a stay.",
        "parameters": {
            "type": "object",
            "properties": {k: {"type": "string"} for k in ("city", "nights", "refundable", "extras", "guest", "note")},
        },
    },
}
BOOK_ARGUMENTS = {
    "city": "Paris",
    "nights": 3,
    "refundable": True,
    "extras": ["wifi", "late checkout"],
    "guest": {"name": "Ana", "age": 41},
    "note": "two\nlines",
}


def _call(cid: str, name: str, arguments: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def _weather_turns(city: str, cid: str) -> list[dict]:
    return [
        {"role": "assistant", "content": "", "tool_calls": [_call(cid, "get_weather", {"city": city})]},
        {"role": "tool", "tool_call_id": cid, "name": "get_weather", "content": f"{city}: 3 C, light snow"},
        {"role": "assistant", "content": f"It is 3 C with light snow in {city}."},
    ]


WEATHER_CONVERSATION = {
    "messages": [{"role": "user", "content": "Weather in Oslo?"}, *_weather_turns("Oslo", "a1b2c3d4e")],
    "tools": [WEATHER],
}
# A call before the last user message and one after it: Qwen3.5 renders the empty think block that
# the probe's tool-call opener starts with only in the second.
TWO_QUESTIONS = {
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        *_weather_turns("Oslo", "a1b2c3d4e"),
        {"role": "user", "content": "And in Lisbon?"},
        *_weather_turns("Lisbon", "f5g6h7i8j"),
    ],
    "tools": [WEATHER],
}
BOOKING = {
    "messages": [
        {"role": "user", "content": "Book Paris for three nights."},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "book_trip", BOOK_ARGUMENTS)]},
        {"role": "tool", "tool_call_id": "c1", "name": "book_trip", "content": "Booked: reference QX7."},
        {"role": "assistant", "content": "Done, reference QX7."},
    ],
    "tools": [BOOK],
}


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tokenizer(base, name: str):
    bos, eos = XML_TEMPLATES[name]
    return tokenizer_with_template(base, (TEMPLATES / name).read_text(), bos, eos, SPECIAL)


def _runs(tok, conversation: dict) -> list[str]:
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    return labelled_runs(tok, tokenize_conversation(tok, messages, tools))


# What each template renders for the weather call, from the opener its probe learns (what the
# generation prompt does not already show) to the end-of-turn token.
WEATHER_CALLS = {
    "qwen3_coder.jinja": "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
    "</tool_call><|im_end|>",
    "qwen3_5_4b.jinja": "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
    "</function>\n</tool_call><|im_end|>",
    "deepseek_v3_2.jinja": '</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Oslo</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
    "</｜DSML｜function_calls><｜end▁of▁sentence｜>",
    "minimax_m2.jinja": '\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>\n'
    "</invoke>\n</minimax:tool_call>[e~[",
    "seed_oss.jinja": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Oslo</parameter>\n</function>\n"
    "</seed:tool_call><seed:eos>",
}


@pytest.mark.parametrize("name", sorted(XML_TEMPLATES))
def test_a_call_with_xml_arguments_trains_its_whole_block_and_nothing_else(base, name):
    tok = _tokenizer(base, name)
    assert template_layout(tok).tool_call_problem == ""
    eos = XML_TEMPLATES[name][1]
    assert _runs(tok, WEATHER_CONVERSATION) == [WEATHER_CALLS[name], f"It is 3 C with light snow in Oslo.{eos}"]


# Each value as the template spells it: Qwen3-Coder applies `|string` to numbers and booleans,
# Seed-OSS to every non-string (Python's repr), DeepSeek-V3.2 and MiniMax-M2 `tojson`.
QWEN_VALUES = ["\nParis\n", "\n3\n", "\nTrue\n", '\n["wifi", "late checkout"]\n', '\n{"name": "Ana", "age": 41}\n']
BOOKED_VALUES = {
    "qwen3_coder.jinja": QWEN_VALUES,
    "qwen3_5_4b.jinja": QWEN_VALUES,
    "deepseek_v3_2.jinja": [">Paris<", ">3<", ">true<", '>["wifi", "late checkout"]<', '>{"name": "Ana", "age": 41}<'],
    "minimax_m2.jinja": [">Paris<", ">3<", ">true<", '>["wifi", "late checkout"]<', '>{"name": "Ana", "age": 41}<'],
    "seed_oss.jinja": [">Paris<", ">3<", ">True<", ">['wifi', 'late checkout']<", ">{'name': 'Ana', 'age': 41}<"],
}


@pytest.mark.parametrize("name", sorted(XML_TEMPLATES))
def test_numbers_booleans_lists_objects_and_multiline_strings_in_xml_arguments(base, name):
    tok = _tokenizer(base, name)
    eos = XML_TEMPLATES[name][1]
    call, answer = _runs(tok, BOOKING)
    assert answer == f"Done, reference QX7.{eos}"
    assert call.endswith(eos) and call.count("book_trip") == 1 and "two\nlines" in call
    at = 0
    for value in BOOKED_VALUES[name]:
        at = call.index(value, at) + len(value)
    # the tool result and the user's request are context
    assert "QX7" not in call and "three nights" not in call


def test_each_call_turn_is_located_in_its_own_turn(base):
    """Qwen3.5's opener (with the empty think block) appears only in the turn after the last user
    message: the first call must not be looked for there, which found the second call's block."""
    tok = _tokenizer(base, "qwen3_5_4b.jinja")
    first_call, first_answer, second_call, second_answer = _runs(tok, TWO_QUESTIONS)
    assert first_call == (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call><|im_end|>"
    )
    assert first_answer == "It is 3 C with light snow in Oslo.<|im_end|>"
    assert second_call.startswith("\n</think>\n\n<tool_call>\n") and "\nLisbon\n" in second_call
    assert second_answer == "It is 3 C with light snow in Lisbon.<|im_end|>"


def _rendered(tok, conversation):
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    return messages, _render(tok, messages, tools)


def test_a_value_outside_the_turn_or_out_of_order_is_not_the_calls(base):
    tok = _tokenizer(base, "qwen3_coder.jinja")
    layout = template_layout(tok)
    messages, text = _rendered(tok, WEATHER_CONVERSATION)
    assert assistant_spans(text, messages, layout)
    # "Oslo" is still in the tool result after the turn's end, but not in the call
    wrong = text.replace("<parameter=city>\nOslo\n", "<parameter=city>\nBergen\n")
    with pytest.raises(ConversationError, match="neither as one JSON object nor value by value"):
        assistant_spans(wrong, messages, layout)
    messages, text = _rendered(tok, BOOKING)
    assert assistant_spans(text, messages, layout)
    swapped = text.replace("\nParis\n", "\n@@\n").replace("\n3\n", "\nParis\n").replace("\n@@\n", "\n3\n")
    with pytest.raises(ConversationError, match="neither as one JSON object nor value by value"):
        assistant_spans(swapped, messages, layout)


@pytest.mark.parametrize("name", ["qwen3_coder.jinja", "seed_oss.jinja"])
def test_hermes_text_calls_train_in_the_templates_own_syntax(base, name, caplog, tmp_path):
    """hermes-function-calling-v1's `<tool_call>` text became structured calls, which these templates
    refused; the row then trained Hermes' Python-dict syntax, which their serving parsers do not read."""
    tok = _tokenizer(base, name)
    conversations, _ = read_conversations(str(DATA / "hermes_function_calling.json"))
    assert "as_written" in conversations[0]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rows, errors, _ = tokenize_to_dataset(conversations, tok, 8192, cache_dir=str(tmp_path))
    assert len(rows) == 1 and not errors and "trained as written" not in caplog.text
    trained = tok.decode([t for t, label in zip(rows[0]["input_ids"], rows[0]["labels"]) if label != -100])
    assert "<function=" in trained and "{'arguments'" not in trained
