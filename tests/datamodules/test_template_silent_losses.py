"""Context that real chat templates drop without a word, and what the SFT data path now does about it.

An audit of 63 real templates found labelled rows trained without their system prompt (Mistral v0.3
and Mistral Nemo render it only inside a final user turn, so never in a conversation that ends with
the assistant's reply) and earlier turns trained without the reasoning the template strips (Qwen3,
QwQ, LFM2.5 keep the thinking only after the last user message): both were labelled silently.
Templates in ``tests/data/chat_templates`` (sources in its README) and ``../shared/data/chat_templates``.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError
from lightning_agents.datamodules.conversations import (
    IGNORE_INDEX,
    ConversationError,
    normalize_conversation,
    tokenize_conversation,
    tokenize_many,
)
from lightning_agents.models import load_tokenizer

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
SYSTEM = "You are a terse assistant who answers in one sentence."
PLAIN = {
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris is the capital of France."},
        {"role": "user", "content": "And of Spain?"},
        {"role": "assistant", "content": "Madrid is the capital of Spain."},
    ]
}
# reasoning_content on every turn, a tool call, and two user messages: Qwen3 keeps the thinking of
# the last turn only
REASONING = {
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Need the tool for Oslo.",
            "tool_calls": [
                {
                    "id": "a1b2c3d4e",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "Oslo: 3 C, light snow"},
        {"role": "assistant", "content": "It is 3 C with light snow in Oslo.", "reasoning_content": "Report it."},
        {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "content": "You are welcome.", "reasoning_content": "Be polite."},
    ],
    "tools": [WEATHER],
}
# the same with the reasoning written into the content, as R1-style datasets have it
THINK_IN_CONTENT = {
    "messages": [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "<think>\n2 plus 3 is 5.\n</think>\n\nThe answer is 5."},
        {"role": "user", "content": "And 2 + 4?"},
        {"role": "assistant", "content": "<think>\n2 plus 4 is 6.\n</think>\n\nThe answer is 6."},
    ]
}


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tokenizer(base, path: Path, eos: str, bos: str | None = None):
    return tokenizer_with_template(base, path.read_text(), bos, eos, SPECIAL_WIDE)


MISTRALS = {
    "mistral_nemo_2407.jinja": ("</s>", "<s>"),
    "vllm_mistral_v03_parallel.jinja": ("</s>", "<s>"),
}


def _one(tok, conversation, **options):
    """``(labelled runs or the error, the decoded row, notes)`` of one conversation through tokenize_many."""
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    notes: list[list[str]] = []
    row = tokenize_many(tok, [(messages, tools)], notes=notes, **options)[0]
    if isinstance(row, ConversationError):
        return row, None, notes[0]
    return labelled_runs(tok, row), tok.decode(row["input_ids"]), notes[0]


def _refusal(tok, conversation) -> ConversationError:
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    error = tokenize_many(tok, [(messages, tools)])[0]
    assert isinstance(error, ConversationError)
    return error


def _write(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _module(tok, path: str, **settings) -> ChatDataModule:
    dm = ChatDataModule(train=path, val=None, cache_dir=None, max_length=4096, **settings)
    dm._tokenizer = tok  # the embedded tokenizer with the template's special tokens added
    return dm


# ------------------------------------------------------------------ 1. system prompt not rendered


@pytest.mark.parametrize("name", sorted(MISTRALS))
def test_a_system_prompt_the_template_does_not_render_is_refused_naming_the_setting(base, name):
    tok = _tokenizer(base, TEMPLATES / name, *MISTRALS[name])
    error, _, _ = _one(tok, PLAIN, unrendered_system_prompt="refuse")
    assert isinstance(error, ConversationError)
    assert "message 0 (system)" in str(error)
    assert "unrendered_system_prompt: into_first_user" in str(error)
    # opted in: the prompt is the start of the first user turn, and the replies are labelled as before
    runs, text, notes = _one(tok, PLAIN, unrendered_system_prompt="into_first_user")
    assert [r.strip() for r in runs] == ["Paris is the capital of France.</s>", "Madrid is the capital of Spain.</s>"]
    assert text.index(SYSTEM) < text.index("What is the capital of France?") < text.index("Paris")
    assert f"{SYSTEM}\n\nWhat is the capital of France?" in text
    assert notes == ["system prompt prefixed to the first user message"]


def test_a_system_prompt_the_template_renders_is_left_alone(base, shared_data):
    tok = _tokenizer(base, shared_data / "chat_templates" / "qwen3.jinja", "<|im_end|>")
    for setting in ("refuse", "into_first_user"):
        runs, text, notes = _one(tok, PLAIN, unrendered_system_prompt=setting)
        assert f"<|im_start|>system\n{SYSTEM}<|im_end|>" in text
        assert "<|im_start|>user\nWhat is the capital of France?<|im_end|>" in text
        assert len(runs) == 2 and notes == []
    # Mistral renders it when the conversation ends with a user turn: nothing to refuse there either
    nemo = _tokenizer(base, TEMPLATES / "mistral_nemo_2407.jinja", "</s>", "<s>")
    asking = {"messages": PLAIN["messages"] + [{"role": "user", "content": "Bye."}]}
    runs, text, notes = _one(nemo, asking, unrendered_system_prompt="refuse")
    assert len(runs) == 2 and f"{SYSTEM}\n\nBye." in text and notes == []


def test_chat_data_module_refuses_the_row_by_default_and_prefixes_the_prompt_when_asked(base, tmp_path, caplog):
    tok = _tokenizer(base, TEMPLATES / "mistral_nemo_2407.jinja", "</s>", "<s>")
    no_system = {"messages": PLAIN["messages"][1:]}
    path = _write(tmp_path / "train.jsonl", [no_system, PLAIN])
    with pytest.raises(DataFormatError, match=r"train\.jsonl:2: message 0 \(system\).*unrendered_system_prompt"):
        _module(tok, path).setup("fit")

    with caplog.at_level(logging.WARNING):
        dm = _module(tok, path, skip_invalid=True)
        dm.setup("fit")
    assert len(dm.datasets["fit"]) == 1 and len(dm.skipped["fit"]) == 1
    assert dm.skipped["fit"][0].startswith(f"{path}:2: message 0 (system)")
    assert "skipped 1 conversation(s) that the chat template of tokenizer" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        dm = _module(tok, path, unrendered_system_prompt="into_first_user")
        dm.setup("fit")
    rows = dm.datasets["fit"]
    assert len(rows) == 2
    texts = sorted(tok.decode(row["input_ids"]) for row in rows)
    assert SYSTEM not in texts[0] and f"[INST]{SYSTEM}\n\nWhat is the capital of France?[/INST]" in texts[1]
    assert "1 conversation(s) have a system prompt that the chat template of tokenizer" in caplog.text
    assert f"first: {path}:2" in caplog.text

    with pytest.raises(ValueError, match="data.unrendered_system_prompt must be 'refuse' or 'into_first_user'"):
        ChatDataModule(unrendered_system_prompt="drop")


# ------------------------------------------------------------------ 2. reasoning stripped from earlier turns


def test_earlier_turns_whose_reasoning_qwen3_strips_are_context_only(base, shared_data):
    tok = _tokenizer(base, shared_data / "chat_templates" / "qwen3.jinja", "<|im_end|>")
    runs, text, notes = _one(tok, REASONING, stripped_reasoning="context")
    assert runs == ["<think>\nBe polite.\n</think>\n\nYou are welcome.<|im_end|>"]
    # still in the context the final turn is trained with
    assert '<tool_call>\n{"name": "get_weather"' in text and "It is 3 C with light snow in Oslo." in text
    assert notes == [
        "message 1: context only: the chat template drops this turn's reasoning",
        "message 3: context only: the chat template drops this turn's reasoning",
    ]
    runs, _, notes = _one(tok, THINK_IN_CONTENT, stripped_reasoning="context")
    assert runs == ["<think>\n2 plus 4 is 6.\n</think>\n\nThe answer is 6.<|im_end|>"]
    assert notes == ["message 1: context only: the chat template drops this turn's reasoning"]
    # turns without reasoning are trained as before
    plain = copy.deepcopy(REASONING)
    for message in plain["messages"]:
        message.pop("reasoning_content", None)
    runs, _, notes = _one(tok, plain, stripped_reasoning="context")
    assert len(runs) == 3 and notes == []


def test_earlier_turns_whose_reasoning_qwq_strips_are_context_only(base):
    tok = _tokenizer(base, TEMPLATES / "qwq_32b.jinja", "<|im_end|>")
    runs, _, notes = _one(tok, THINK_IN_CONTENT, stripped_reasoning="context")
    assert runs == ["<think>\n2 plus 4 is 6.\n</think>\n\nThe answer is 6.<|im_end|>"]
    assert [n for n in notes if "context only" in n] == [notes[0]]
    # This QwQ template's default prompt is its non-thinking one (`<think>\n</think>`), which a turn
    # with reasoning does not hold: noted for the warning.
    assert notes[1:] == [
        "message 3: trained after a header that is not the generation prompt: '<|im_end|>\\n<|im_start|>assistant\\n', "
        "not '<|im_start|>assistant\\n<think>\\n</think>' (the turn lacks the prompt's '<think>\\n</think>', a closed "
        "(empty) think block of a non-thinking prompt)"
    ]


def test_a_generation_template_that_strips_earlier_reasoning_leaves_those_turns_unlabelled(base):
    # LFM2.5-8B-A1B marks its assistant text with {% generation %}: the template's own mask covered
    # the earlier turns whose <think> it dropped
    tok = _tokenizer(base, TEMPLATES / "lfm2_5_8b_a1b.jinja", "<|im_end|>", "<|startoftext|>")
    runs, _, notes = _one(tok, REASONING, stripped_reasoning="context")
    assert runs == ["<think>Be polite.</think>You are welcome.<|im_end|>\n"]
    assert len(notes) == 2
    weighted = copy.deepcopy(REASONING)
    weighted["messages"][-1]["weight"] = 0
    error, _, _ = _one(tok, weighted, stripped_reasoning="context")
    assert isinstance(error, ConversationError) and "drops the reasoning of every trainable assistant turn" in str(
        error
    )


def test_chat_data_module_counts_the_turns_left_as_context(base, shared_data, tmp_path, caplog):
    tok = _tokenizer(base, shared_data / "chat_templates" / "qwen3.jinja", "<|im_end|>")
    path = _write(tmp_path / "reasoning.jsonl", [REASONING, THINK_IN_CONTENT])
    for cache in (None, str(tmp_path / "cache"), str(tmp_path / "cache")):  # the cached rows warn again
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            dm = _module(tok, path)
            dm.cache_dir = cache
            dm.setup("fit")
        rows = dm.datasets["fit"]
        assert len(rows) == 2
        trained = [[t for t, label in zip(row["input_ids"], row["labels"]) if label != IGNORE_INDEX] for row in rows]
        decoded = sorted(tok.decode(t) for t in trained)
        assert decoded == [
            "<think>\n2 plus 4 is 6.\n</think>\n\nThe answer is 6.<|im_end|>",
            "<think>\nBe polite.\n</think>\n\nYou are welcome.<|im_end|>",
        ]
        assert "3 assistant turn(s) in 2 conversation(s) are context only" in caplog.text
        assert "data.split_reasoning_turns: true trains each in a row of its own" in caplog.text
        assert f"first: {path}:1: message 1" in caplog.text


def test_the_low_level_functions_keep_their_defaults(base, shared_data):
    # tokenize_conversation (and tokenize_many without the settings) label as before: the data module
    # is where the refusals and context-only turns apply
    tok = _tokenizer(base, shared_data / "chat_templates" / "qwen3.jinja", "<|im_end|>")
    messages, tools = normalize_conversation(copy.deepcopy(REASONING))
    assert len(labelled_runs(tok, tokenize_conversation(tok, messages, tools))) == 3
    with pytest.raises(ValueError, match="unrendered_system_prompt must be one of"):
        tokenize_many(tok, [(messages, tools)], unrendered_system_prompt="drop")


# ------------------------------------------------------------------ 3. refusals that name their cause


def test_a_template_that_needs_tools_says_so_on_a_conversation_without_them(base):
    # Hermes' tool_use template iterates over `tools`: the refusal was "'NoneType' object is not iterable"
    tok = _tokenizer(base, TEMPLATES / "hermes_tool_use.jinja", "<|im_end|>")
    error = _refusal(tok, {"messages": PLAIN["messages"][1:]})
    assert "needs a tool list and this conversation has none" in str(error)


def test_a_probe_that_fails_with_and_without_tools_reports_both(base):
    # Command R+'s tool_use template failed without tools on the missing list and with tools on a
    # field of the schema; only the first, uninformative error was reported
    tok = copy.deepcopy(base)
    tok.chat_template = (
        "{% for t in tools %}{{ t.function.parameters.missing.field }}{% endfor %}"
        "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    with pytest.raises(Exception, match=r"\(with a tool list: UndefinedError: .*; without: TypeError"):
        tokenize_many(tok, [([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}], None)])


def test_a_refused_row_names_the_chat_template(base, tmp_path):
    tok = _tokenizer(base, TEMPLATES / "mistral_nemo_2407.jinja", "</s>", "<s>")
    path = _write(tmp_path / "train.jsonl", [PLAIN])
    with pytest.raises(DataFormatError, match=r"train\.jsonl:1: .*\[the chat template of tokenizer '.*'\]$"):
        _module(tok, path).setup("fit")
    dm = _module(tok, path)
    dm.chat_template = str(TEMPLATES / "mistral_nemo_2407.jinja")  # as if set: the file is named
    with pytest.raises(
        DataFormatError, match=r"\[the chat template .*mistral_nemo_2407\.jinja \(data\.chat_template\)\]"
    ):
        dm.setup("fit")


def test_topocurate_passes_the_setting_on():
    # tau2 runs carry the policy as the system prompt: without the setting, TopoCurate's SFT data
    # could only be refused under a Mistral template, with a message naming a setting it lacked.
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    dm = TopoCurateDataModule(rollouts="runs.json", unrendered_system_prompt="into_first_user", cache_dir=None)
    assert dm.unrendered_system_prompt == "into_first_user"
