"""Assistant-only labels on real chat templates whose turns do not all end with one end-of-turn token.

gpt-oss (harmony) ends an earlier answer with ``<|end|>``, a tool call with ``<|call|>`` and the last
answer of a training conversation with ``<|return|>``; functionary v3.1 ends a call with ``<|eom_id|>``;
GLM-4.6 writes no end token at all: the next role token (``<|user|>``, ``<|observation|>``) ends a
turn, and the last turn stays open. All of them were refused ("a template with several end-of-turn
tokens is not supported yet"). A trained span runs from the assistant's own first text through the
token that ends its turn, and never covers tool or user text. Last, real tau2 runs under Mistral
Nemo's template, which wants a user message first (tau2 opens with the agent's greeting) and
tool-call ids of nine alphanumeric characters. Templates in ``tests/data/chat_templates`` (sources in
its README); real tau2 runs in ``tests/data/tau2_runs``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError, _cut_inside_a_turn
from lightning_agents.datamodules.conversations import (
    NOTE_CALL_IDS_REWRITTEN,
    NOTE_LEADING_ASSISTANT_DROPPED,
    ConversationError,
    normalize_conversation,
    template_layout,
    tokenize_many,
)
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.models import load_tokenizer

DATA = Path(__file__).resolve().parents[1] / "data"
TEMPLATES = DATA / "chat_templates"
PLAIN = {
    "messages": [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris is the capital of France."},
        {"role": "user", "content": "And of Spain?"},
        {"role": "assistant", "content": "Madrid is the capital of Spain."},
    ]
}
CALL = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
TOOL_RESULT = "Oslo: 3 C, light snow"
TOOLS = {
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": TOOL_RESULT},
        {"role": "assistant", "content": "It is 3 C with light snow in Oslo."},
    ],
    "tools": [WEATHER],
}


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tokenizer(base, name: str, eos: str, bos: str | None = None):
    return tokenizer_with_template(base, (TEMPLATES / name).read_text(), bos, eos, SPECIAL_WIDE)


def _rows(tok, conversation):
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    return tokenize_many(tok, [(messages, tools)])[0]


def _runs(tok, conversation) -> list[str]:
    row = _rows(tok, conversation)
    assert not isinstance(row, ConversationError), row
    return labelled_runs(tok, row)


def _gpt_oss(base):
    return _tokenizer(base, "gpt_oss_120b.jinja", "<|return|>", "<|startoftext|>")


def _glm(base):
    return _tokenizer(base, "glm_4_6.jinja", "<|endoftext|>")


def test_gpt_oss_turns_end_with_end_call_or_return(base):
    tok = _gpt_oss(base)
    assert template_layout(tok).end_tokens == ("<|end|>", "<|call|>", "<|return|>")
    # the generation prompt ends at `<|start|>assistant`: the channel header is the model's to write
    assert template_layout(tok).generation_prompt == "<|start|>assistant"
    assert _runs(tok, PLAIN) == [
        "<|channel|>final<|message|>Paris is the capital of France.<|end|>",
        "<|channel|>final<|message|>Madrid is the capital of Spain.<|return|>",
    ]
    # the call's recipient, channel and JSON are the model's; the tool's message is not
    assert _runs(tok, TOOLS) == [
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
        "<|channel|>final<|message|>It is 3 C with light snow in Oslo.<|return|>",
    ]


def test_gpt_oss_final_reasoning_is_trained_with_the_answer_through_return(base):
    # harmony writes the analysis as a message of its own, closed by <|end|>; the model writes the next
    # header itself, so the whole run up to <|return|> is its text
    tok = _gpt_oss(base)
    conversation = copy.deepcopy(TOOLS)
    conversation["messages"][-1]["reasoning_content"] = "The tool answered."
    assert _runs(tok, conversation)[-1] == (
        "<|channel|>analysis<|message|>The tool answered.<|end|><|start|>assistant<|channel|>final<|message|>"
        "It is 3 C with light snow in Oslo.<|return|>"
    )


def test_glm_turns_end_with_the_next_role_token_and_the_last_with_the_eos(base):
    tok = _glm(base)
    assert template_layout(tok).end_tokens == ("<|user|>", "<|observation|>", "<|endoftext|>")
    row = _rows(tok, PLAIN)
    assert labelled_runs(tok, row) == [
        "Paris is the capital of France.<|user|>",
        "Madrid is the capital of Spain.<|endoftext|>",
    ]
    # the template leaves the last turn open: the EOS is appended, once, at the very end
    assert row["input_ids"][-1] == tok.eos_token_id
    assert tok.decode(row["input_ids"]).count("<|endoftext|>") == 1
    runs = _runs(tok, TOOLS)
    assert runs[0].endswith("</tool_call><|observation|>")
    assert runs[0].startswith("\n<think></think>\n<tool_call>get_weather")
    assert runs[1] == "It is 3 C with light snow in Oslo.<|endoftext|>"
    assert not any(TOOL_RESULT in run or "<tool_response>" in run for run in runs)


def test_functionary_call_turns_end_with_eom(base):
    tok = _tokenizer(base, "functionary_medium_v3_1.jinja", "<|eot_id|>", "<|begin_of_text|>")
    assert _runs(tok, TOOLS) == [
        '<function=get_weather>{"city": "Oslo"}</function><|eom_id|>',
        "It is 3 C with light snow in Oslo.<|eot_id|>",
    ]


def test_a_tool_result_inside_the_assistant_turn_stays_refused(base):
    # Gemma 4 and Apertus write the call, its result and the answer into one model turn: no span can
    # hold the call without the result, so tool calls stay refused (plain turns are labelled)
    tok = copy.deepcopy(base)
    tok.add_special_tokens(
        {"additional_special_tokens": ["<|turn|>", "<|end_turn|>", "<|call|>", "<|result|>"]},
        replace_extra_special_tokens=False,
    )
    tok.chat_template = (
        "{% for m in messages %}"
        "{% if m.role == 'user' %}<|turn|>user\n{{ m.content }}<|end_turn|>\n"
        "{% elif m.role == 'tool' %}<|result|>{{ m.content }}"
        "{% else %}{% if not (loop.previtem and loop.previtem.role == 'tool') %}<|turn|>model\n{% endif %}"
        "{% for c in m.tool_calls or [] %}<|call|>{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}"
        "{% if m.content %}{{ m.content }}<|end_turn|>\n{% endif %}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|turn|>model\n{% endif %}"
    )
    layout = template_layout(tok)
    assert layout.tool_call_opener is None
    assert "renders the tool result inside the assistant's turn" in layout.tool_call_problem
    error = _rows(tok, TOOLS)
    assert isinstance(error, ConversationError) and "inside the assistant's turn" in str(error)
    assert _runs(tok, PLAIN) == [
        "Paris is the capital of France.<|end_turn|>",
        "Madrid is the capital of Spain.<|end_turn|>",
    ]


def test_real_tau2_runs_are_labelled_under_gpt_oss_without_tool_or_user_text(base):
    tok = _gpt_oss(base)
    ends = template_layout(tok).end_tokens
    for name in ("sierra-gpt-4.1-telecom.json", "whissle-airline.json"):
        (rollout,) = load_rollouts(DATA / "tau2_runs" / name)[:1]
        messages, tools = normalize_conversation({"messages": rollout.messages, "tools": rollout.tools})
        runs = labelled_runs(tok, tokenize_many(tok, [(messages, tools)])[0])
        assert len(runs) == sum(m["role"] == "assistant" for m in messages)
        assert all(run.endswith(ends) for run in runs)
        # a run that ends with the user's goodbye: its last answer is an earlier turn, closed by <|end|>
        assert runs[-1].endswith("<|return|>" if messages[-1]["role"] == "assistant" else "<|end|>")
        others = [
            m["content"].strip() for m in messages if m["role"] != "assistant" and len(m["content"].strip()) >= 16
        ]
        assert not any(other[:40] in run for other in others for run in runs)


def test_truncation_counts_a_row_that_ends_with_any_end_token_as_whole(base):
    # the data module warns about rows cut inside a turn; one that ends with <|call|> or <|return|> was not
    tok = _gpt_oss(base)
    row = _rows(tok, TOOLS)
    ids, labels = [int(x) for x in row["input_ids"]], [int(x) for x in row["labels"]]
    call_end = ids.index(tok.convert_tokens_to_ids("<|call|>")) + 1
    rows = [
        {"input_ids": ids, "labels": labels},
        {"input_ids": ids[:call_end], "labels": labels[:call_end]},
        {"input_ids": ids[: call_end - 1], "labels": labels[: call_end - 1]},
    ]
    assert _cut_inside_a_turn(rows[:1], tok, len(ids)) == 0
    assert _cut_inside_a_turn(rows[1:2], tok, call_end) == 0
    assert _cut_inside_a_turn(rows[2:], tok, call_end - 1) == 1


# ------------------------------------------------------------------ a real tau2 run under Mistral's rules


def _tau2_retail():
    (rollout,) = load_rollouts(DATA / "tau2_runs" / "sierra-gpt-4.1-retail.json")[:1]
    return normalize_conversation({"messages": rollout.messages, "tools": rollout.tools})


def test_a_tau2_run_that_opens_with_the_agents_greeting_is_refused_naming_the_setting(base):
    # Mistral Nemo wants a user message first; tau2 runs open with "Hi! How can I help you today?".
    # The template's own words ("roles must alternate") did not say what to do about it.
    tok = _tokenizer(base, "mistral_nemo_2407.jinja", "</s>", "<s>")
    messages, tools = _tau2_retail()
    assert [m["role"] for m in messages[:3]] == ["system", "assistant", "user"]
    error = tokenize_many(tok, [(messages, tools)])[0]
    assert isinstance(error, ConversationError)
    assert "message 1 (assistant)" in str(error) and "leading_assistant: drop" in str(error)
    with pytest.raises(ValueError, match="leading_assistant must be one of"):
        tokenize_many(tok, [(messages, tools)], leading_assistant="keep")
    with pytest.raises(ValueError, match="data.leading_assistant must be 'refuse' or 'drop'"):
        ChatDataModule(leading_assistant="keep")


def test_a_tau2_run_is_labelled_under_mistral_nemo_without_its_greeting_and_with_nine_character_ids(base):
    tok = _tokenizer(base, "mistral_nemo_2407.jinja", "</s>", "<s>")
    messages, tools = _tau2_retail()
    notes: list[list[str]] = []
    row = tokenize_many(tok, [(messages, tools)], leading_assistant="drop", notes=notes)[0]
    assert not isinstance(row, ConversationError), row
    assert notes == [[NOTE_LEADING_ASSISTANT_DROPPED, NOTE_CALL_IDS_REWRITTEN]]
    text, runs = tok.decode(row["input_ids"]), labelled_runs(tok, row)
    assert messages[1]["content"] not in text  # the greeting
    assert len(runs) == sum(m["role"] == "assistant" for m in messages) - 1
    assert all(run.endswith("</s>") for run in runs)
    # each call and its result carry the same nine characters, in place of the data's "call_..." ids
    calls = [c for m in messages for c in m.get("tool_calls") or []]
    assert calls and all(c["id"] not in text for c in calls)
    for call in calls:
        short = re.escape(hashlib.sha256(call["id"].encode()).hexdigest()[:9])
        assert re.search(rf'"id": "{short}"', text) and re.search(rf'"call_id": "{short}"', text)
    others = [m["content"].strip() for m in messages if m["role"] != "assistant" and len(m["content"].strip()) >= 16]
    assert not any(other[:40] in run for other in others for run in runs)


def test_the_data_module_drops_the_greeting_when_asked_and_counts_it(base, tmp_path, caplog):
    tok = _tokenizer(base, "mistral_nemo_2407.jinja", "</s>", "<s>")
    messages, tools = _tau2_retail()
    path = tmp_path / "tau2.jsonl"
    path.write_text(json.dumps({"messages": messages, "tools": tools}) + "\n")
    dm = ChatDataModule(train=str(path), val=None, cache_dir=None, max_length=8192, leading_assistant="drop")
    dm._tokenizer = tok
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert len(dm.datasets["fit"]) == 1
    assert "1 conversation(s) open with assistant message(s) before any user message" in caplog.text
    assert "1 conversation(s) have tool-call ids that" in caplog.text
    refusing = ChatDataModule(train=str(path), val=None, cache_dir=None, max_length=8192)
    refusing._tokenizer = tok
    with pytest.raises(DataFormatError, match=r"tau2\.jsonl:1: message 1 \(assistant\).*leading_assistant: drop"):
        refusing.setup("fit")


def test_topocurate_passes_the_greeting_setting_on():
    # TopoCurate is how tau2 runs usually reach SFT: a refusal naming a setting it did not take was a dead end
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    module = TopoCurateDataModule(rollouts=["unused.json"], cache_dir=None, leading_assistant="drop")
    assert module.hparams.leading_assistant == "drop"


def test_long_conversations_are_labelled_in_linear_time(base):
    # every end token was searched to the end of the text at every turn: gpt-oss's <|call|>, absent
    # from a conversation without calls, made 2,000 turns take 1.5 s and 6,000 about 13 s
    import time

    from lightning_agents.datamodules.conversations import render_conversation

    tok = _tokenizer(base, "gpt_oss_120b.jinja", "<|return|>")
    filler = "word " * 100
    messages = [
        m
        for i in range(6000)
        for m in ({"role": "user", "content": f"q{i} {filler}"}, {"role": "assistant", "content": f"a{i} {filler}"})
    ]
    started = time.perf_counter()
    render_conversation(tok, messages)
    assert time.perf_counter() - started < 5.0
