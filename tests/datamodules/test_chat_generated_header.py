"""Labels start where the generation prompt ends: what the model writes after it is trained.

An engine feeds the model ``apply_chat_template(..., add_generation_prompt=True)``; everything the
model then writes up to and including its turn's end token must be trained, and nothing the prompt
holds may be. Before, labels started at the assistant's content, so the text the model writes
before it was never taught: gpt-oss's ``<|channel|>final<|message|>`` (and
``<|channel|>analysis<|message|>`` before its reasoning), functionary v3.2's ``all\\n`` after the
prompt's ``>>>``. And where the prompt ends with ``<think>\\n`` (Qwen3.5, Step-3.5, MiniMax-M2,
Nemotron-3), reasoning written in the content was labelled from the prompt's own ``<think>``.
The README's decision stays: an empty think block the template writes for a turn without reasoning
(Qwen3, Qwen3.5) is context, as in the template's non-thinking prompt. Templates in
``tests/data/chat_templates`` and ``../shared/data/chat_templates`` (sources in their READMEs).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.conversations import (
    IGNORE_INDEX,
    ConversationError,
    normalize_conversation,
    template_layout,
    tokenize_many,
)
from lightning_agents.models import load_tokenizer
from lightning_agents.template_clock import render_chat_template

DATA = Path(__file__).resolve().parents[1] / "data"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "chat_templates"
CALL = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
PLAIN = {
    "messages": [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris is the capital of France."},
        {"role": "user", "content": "And of Spain?"},
        {"role": "assistant", "content": "Madrid is the capital of Spain."},
    ]
}
TOOLS = {
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "Oslo: 3 C, light snow"},
        {"role": "assistant", "content": "It is 3 C with light snow in Oslo."},
    ],
    "tools": [WEATHER],
}
REASONING = {
    "messages": [
        {"role": "user", "content": "What is 12 times 13?"},
        {"role": "assistant", "content": "It is 156.", "reasoning_content": "12 * 13 = 156."},
    ]
}
THINK_IN_CONTENT = {
    "messages": [
        {"role": "user", "content": "What is 12 times 13?"},
        {"role": "assistant", "content": "<think>\n12 * 13 = 156.\n</think>\n\nIt is 156."},
    ]
}
# Seed-OSS's special tokens are spelled `<seed:...>`, which SPECIAL_WIDE does not cover.
SEED = re.compile(SPECIAL_WIDE.pattern + r"|</?seed:[a-z_]+>")
# (file, eos, bos, special-token pattern) of every vendored template with an assistant header in its prompt
TEMPLATES = [
    (DATA / "chat_templates" / "gpt_oss_120b.jinja", "<|return|>", "<|startoftext|>", SPECIAL_WIDE),
    (DATA / "chat_templates" / "functionary_medium_v3_2.jinja", "<|eot_id|>", "<|begin_of_text|>", SPECIAL_WIDE),
    (DATA / "chat_templates" / "functionary_medium_v3_1.jinja", "<|eot_id|>", "<|begin_of_text|>", SPECIAL_WIDE),
    (DATA / "chat_templates" / "qwen3_5_4b.jinja", "<|im_end|>", None, SPECIAL_WIDE),
    (DATA / "chat_templates" / "seed_oss.jinja", "<seed:eos>", "<seed:bos>", SEED),
    (DATA / "chat_templates" / "glm_4_6.jinja", "<|endoftext|>", None, SPECIAL_WIDE),
    (DATA / "chat_templates" / "hermes_tool_use.jinja", "<|im_end|>", "<|begin_of_text|>", SPECIAL_WIDE),
    (DATA / "chat_templates" / "qwq_32b.jinja", "<|im_end|>", None, SPECIAL_WIDE),
    (SHARED / "qwen3.jinja", "<|im_end|>", None, SPECIAL_WIDE),
    (SHARED / "qwen2_5.jinja", "<|im_end|>", None, SPECIAL_WIDE),
    (SHARED / "llama3_1.jinja", "<|eot_id|>", "<|begin_of_text|>", SPECIAL_WIDE),
    (SHARED / "phi3_5.jinja", "<|end|>", None, SPECIAL_WIDE),
]
# An empty reasoning block between the prompt and the answer: context, as the README decided.
EMPTY_THINK = re.compile(r"\s*(?:<think>)?\s*</think>\s*|\s*<think></think>\s*")


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tok(base, path: Path, eos: str, bos: str | None, special=SPECIAL_WIDE):
    if not path.is_file():  # ../shared/data lives beside the clone, not in it (CI has none)
        pytest.skip(f"real chat template {path} is absent")
    return tokenizer_with_template(base, path.read_text(), bos, eos, special)


def _runs(tok, conversation) -> list[str]:
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    row = tokenize_many(tok, [(messages, tools)])[0]
    assert not isinstance(row, ConversationError), row
    return labelled_runs(tok, row)


def test_gpt_oss_analysis_channel_is_trained_with_the_reasoning(base):
    tok = _tok(base, *TEMPLATES[0][:3])
    assert _runs(tok, REASONING) == [
        "<|channel|>analysis<|message|>12 * 13 = 156.<|end|><|start|>assistant<|channel|>final<|message|>"
        "It is 156.<|return|>"
    ]


def test_gpt_oss_earlier_turn_whose_analysis_is_dropped_stays_context(base):
    # harmony drops an earlier turn's analysis: rendered `<|channel|>final<|message|>` straight after
    # the prompt, which the live model (that reasoned) did not write; the turn stays unlabelled
    tok = _tok(base, *TEMPLATES[0][:3])
    conversation = {
        "messages": [
            {"role": "user", "content": "What is 12 times 13?"},
            {"role": "assistant", "content": "It is 156.", "reasoning_content": "12 * 13 = 156."},
            {"role": "user", "content": "And 14 times 15?"},
            {"role": "assistant", "content": "It is 210.", "reasoning_content": "14 * 15 = 210."},
        ]
    }
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    row = tokenize_many(tok, [(messages, tools)], stripped_reasoning="context")[0]
    assert labelled_runs(tok, row) == [
        "<|channel|>analysis<|message|>14 * 15 = 210.<|end|><|start|>assistant<|channel|>final<|message|>"
        "It is 210.<|return|>"
    ]


@pytest.mark.parametrize(
    ("path", "eos", "bos", "prompt"),
    [
        (SHARED / "qwen3.jinja", "<|im_end|>", None, "<|im_start|>assistant\n"),
        (
            SHARED / "llama3_1.jinja",
            "<|eot_id|>",
            "<|begin_of_text|>",
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        # the prompt-less rendering ends with `<|endoftext|>`: the shared `<|` is the prompt's token's
        (SHARED / "phi3_5.jinja", "<|endoftext|>", None, "<|assistant|>\n"),
        # `[/INST]` closes the user message: the prompt adds nothing, and labels start at the content
        (DATA / "chat_templates" / "mistral_nemo_2407.jinja", "</s>", "<s>", ""),
    ],
    ids=["qwen3", "llama3_1", "phi3_5", "mistral_nemo"],
)
def test_the_learned_generation_prompt_is_what_the_template_appends(base, path, eos, bos, prompt):
    tok = _tok(base, path, eos, bos)
    assert template_layout(tok).generation_prompt == prompt


def test_functionary_v3_2_recipient_all_is_trained_before_text(base):
    tok = _tok(base, *TEMPLATES[1][:3])
    assert template_layout(tok).generation_prompt.endswith("<|end_header_id|>\n\n>>>")
    assert _runs(tok, PLAIN) == [
        "all\nParis is the capital of France.<|eot_id|>",
        "all\nMadrid is the capital of Spain.<|eot_id|>",
    ]
    # a call still starts at its name, right after the prompt's `>>>`
    assert _runs(tok, TOOLS) == [
        'get_weather\n{"city": "Oslo"}<|eot_id|>',
        "all\nIt is 3 C with light snow in Oslo.<|eot_id|>",
    ]


def test_qwen3_empty_think_block_stays_context(base):
    tok = _tok(base, SHARED / "qwen3.jinja", "<|im_end|>", None)
    # the last turn gets `<think>\n\n</think>\n\n` from the template: context, as enable_thinking=False's prompt
    assert _runs(tok, PLAIN) == [
        "Paris is the capital of France.<|im_end|>",
        "Madrid is the capital of Spain.<|im_end|>",
    ]
    # a turn with reasoning is trained from its own `<think>`, the model's first token after the prompt
    assert _runs(tok, REASONING) == ["<think>\n12 * 13 = 156.\n</think>\n\nIt is 156.<|im_end|>"]


def test_qwen3_5_prompt_think_opener_is_not_trained(base):
    tok = _tok(base, *TEMPLATES[3][:3])
    assert template_layout(tok).generation_prompt == "<|im_start|>assistant\n<think>\n"
    # the prompt ends with `<think>\n`: the model writes the reasoning after it, not the opener
    assert _runs(tok, THINK_IN_CONTENT) == ["12 * 13 = 156.\n</think>\n\nIt is 156.<|im_end|>"]
    assert _runs(tok, REASONING) == ["12 * 13 = 156.\n</think>\n\nIt is 156.<|im_end|>"]
    # an answer without reasoning: the empty block's `\n</think>\n\n` is context (the decision above)
    assert _runs(tok, PLAIN)[-1] == "Madrid is the capital of Spain.<|im_end|>"


def test_seed_oss_think_opener_is_trained_with_the_reasoning(base):
    tok = _tok(base, *TEMPLATES[4])
    runs = _runs(tok, REASONING)
    assert len(runs) == 1 and runs[0].startswith("<seed:think>")


def _row_and_text(tok, conversation):
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    row = tokenize_many(tok, [(messages, tools)])[0]
    if isinstance(row, ConversationError):  # refused with its reason (no reasoning or tool calls rendered)
        pytest.skip(str(row))
    if template_layout(tok).string_arguments:  # functionary concatenates them: rendered as JSON strings
        messages = copy.deepcopy(messages)
        for message in messages:
            for call in message.get("tool_calls") or []:
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    text = render_chat_template(tok, messages, tools=tools, tokenize=False)
    if len(row["input_ids"]) == len(tok(text, add_special_tokens=False)["input_ids"]) + 1:
        text += tok.eos_token  # GLM leaves the last turn open: the EOS is appended and labelled
    return messages, tools, row, text


def _run_starts(tok, row, text) -> list[int]:
    """The character where each labelled run starts in ``text``."""
    encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert list(encoded["input_ids"]) == [int(i) for i in row["input_ids"]]
    labelled = [label != IGNORE_INDEX for label in row["labels"]]
    return [encoded["offset_mapping"][i][0] for i, on in enumerate(labelled) if on and (i == 0 or not labelled[i - 1])]


@pytest.mark.parametrize("entry", TEMPLATES, ids=lambda e: e[0].name)
@pytest.mark.parametrize("conversation", [PLAIN, TOOLS, REASONING], ids=["plain", "tools", "reasoning"])
def test_every_turn_is_labelled_from_the_end_of_its_generation_prompt(base, entry, conversation):
    """The oracle, on every turn whose rendering starts with its own generation prompt: labels start
    exactly where that prompt ends (or, past an empty think block, at the answer), never inside it."""
    path, eos, bos, special = entry
    tok = _tok(base, path, eos, bos, special)
    messages, tools, row, text = _row_and_text(tok, conversation)
    starts = _run_starts(tok, row, text)
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    assert len(starts) == len(turns)
    checked = 0
    for k, start in zip(turns, starts):
        prompt = render_chat_template(tok, messages[:k], tools=tools, tokenize=False, add_generation_prompt=True)
        if not text.startswith(prompt):
            continue  # the template renders this history turn unlike its prompt (Qwen3's earlier turns)
        checked += 1
        assert start >= len(prompt), f"message {k}: labels start inside the prompt: {text[start : len(prompt)]!r}"
        gap = text[len(prompt) : start]
        assert gap == "" or EMPTY_THINK.fullmatch(gap), f"message {k}: the model writes {gap!r} unlabelled"
    if not checked:
        pytest.skip("no turn is rendered as its own generation prompt continues (QwQ's prompt opens <think>)")
