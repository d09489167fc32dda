"""Tool-use SFT rows in shapes not covered by ``test_conversation_formats.py``: OpenAI's legacy
``function_call`` / ``function`` messages (Qwen-Agent writes them too), xLAM ``query`` / ``answers``,
LLaMA-Factory roles in ``messages``, Llama-Nemotron ``input`` / ``output``, and rows read back from
Parquet / Arrow struct columns (sources of the vendored rows in ``tests/data/conversations/README.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_template_helpers import CALCULATOR, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import DataFormatError, read_conversations
from lightning_agents.datamodules.conversations import (
    ConversationError,
    normalize_conversation,
    tokenize_conversation,
)
from lightning_agents.models import load_tokenizer

DATA = Path(__file__).resolve().parents[1] / "data" / "conversations"


@pytest.fixture(scope="module")
def qwen2_5(shared_data):
    template = (shared_data / "chat_templates" / "qwen2_5.jinja").read_text()
    return tokenizer_with_template(load_tokenizer("embedded:student"), template, None, "<|im_end|>")


def _calls(message):
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def _call_text(name, arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call><|im_end|>"


# -- OpenAI's legacy function calling (Azure/OpenAI fine-tuning guide, Qwen-Agent) -------------------


def test_legacy_function_call_rows_become_tool_calls(qwen2_5):
    """The fine-tuning guide's rows: the call is trained as a call, the `function` answer is context."""
    conversations, _ = read_conversations(str(DATA / "openai_legacy_functions.jsonl"))
    first, second = conversations
    assert [t["function"]["name"] for t in first["tools"]] == ["get_current_weather"]
    args = {"location": "San Francisco, USA", "format": "celsius"}
    assert _calls(first["messages"][1]) == [("get_current_weather", args)]
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, first["messages"], first["tools"]))
    assert runs == [_call_text("get_current_weather", args)]

    assert second["messages"][2] == {"role": "tool", "name": "get_current_weather", "content": "21.0"}
    row = tokenize_conversation(qwen2_5, second["messages"], second["tools"])
    runs = labelled_runs(qwen2_5, row)
    assert runs == [
        _call_text("get_current_weather", {"location": "San Francisco, USA", "format": "celcius"}),
        "It is 21 degrees celsius in San Francisco, CA<|im_end|>",
    ]
    assert "21.0" in qwen2_5.decode(row["input_ids"])  # the result is context, never labelled


def test_legacy_function_call_beside_text_is_not_dropped():
    """Qwen-Agent writes text and a `function_call` in one assistant message: the call used to be
    dropped without a word and only the text trained."""
    row = {
        "functions": [WEATHER["function"]],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
        ],
    }
    messages, tools = normalize_conversation(row)
    assert messages[1]["content"] == "Let me check."
    assert _calls(messages[1]) == [("get_weather", {"city": "Paris"})]
    assert "function_call" not in messages[1]
    assert tools == [WEATHER]


def test_function_call_and_tool_calls_together_are_refused():
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    row = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "tool_calls": [call], "function_call": {"name": "get_weather", "arguments": "{}"}},
        ]
    }
    with pytest.raises(ConversationError, match="message 1 has both function_call and tool_calls"):
        normalize_conversation(row)


def test_llama_factory_roles_in_messages(qwen2_5):
    """LLaMA-Factory's `messages` rows use its tags as roles: function_call (JSON text) and observation."""
    row = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "function_call", "content": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
            {"role": "observation", "content": "18C"},
            {"role": "assistant", "content": "It is 18C in Paris."},
        ],
        "tools": json.dumps([WEATHER["function"]]),
    }
    messages, tools = normalize_conversation(row)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, tools))
    assert runs == [_call_text("get_weather", {"city": "Paris"}), "It is 18C in Paris.<|im_end|>"]


# -- xLAM / APIGen ---------------------------------------------------------------------------------------


def test_xlam_row_is_a_user_query_and_parallel_calls(qwen2_5):
    """xlam-function-calling-60k's card row: JSON-text `tools` and `answers` (two parallel calls)."""
    conversations, _ = read_conversations(str(DATA / "xlam_function_calling.json"))
    messages, tools = conversations[0]["messages"], conversations[0]["tools"]
    assert messages[0] == {"role": "user", "content": "Where can I find live giveaways for beta access and games?"}
    assert _calls(messages[1]) == [
        ("live_giveaways_by_type", {"type": "beta"}),
        ("live_giveaways_by_type", {"type": "game"}),
    ]
    assert tools[0]["function"]["parameters"]["type"]["default"] == "game"  # xLAM's own schema, kept
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, tools))
    beta, game = (json.dumps({"name": "live_giveaways_by_type", "arguments": {"type": t}}) for t in ("beta", "game"))
    assert runs == [f"<tool_call>\n{beta}\n</tool_call>\n<tool_call>\n{game}\n</tool_call><|im_end|>"]


def test_xlam_row_without_answers_is_refused():
    with pytest.raises(ConversationError, match="'answers' must be a non-empty list"):
        normalize_conversation({"query": "hi", "answers": "[]", "tools": "[]"})


# -- Llama-Nemotron post-training rows -------------------------------------------------------------------


@pytest.mark.parametrize("switch", ["on", "off"])
def test_nemotron_row_keeps_its_reasoning_switch(switch):
    """`input` messages + `output`; the `system_prompt` is the switch the model learns to obey."""
    output = "<think>\nAdd.\n</think>\n\n4" if switch == "on" else "4"
    row = {
        "input": [{"role": "user", "content": "What is 2+2?"}],
        "output": output,
        "category": "math",
        "license": "cc-by-4.0",
        "reasoning": switch,
        "generator": "DeepSeek-R1",
        "used_in_training": "Ultra, Super, Nano",
        "version": "v1",
        "system_prompt": f"detailed thinking {switch}",
    }
    messages, tools = normalize_conversation(row)
    assert messages == [
        {"role": "system", "content": f"detailed thinking {switch}"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": output},
    ]
    assert tools is None


def test_alpaca_input_string_is_not_a_message_list(tmp_path):
    """Alpaca's `instruction` / `input` / `output` must not be read as a Nemotron row (the instruction
    would be lost): the one-line error names the file, the row's fields and the shape to convert to."""
    path = tmp_path / "alpaca.jsonl"
    path.write_text(json.dumps({"instruction": "Sort.", "input": "[3, 1, 2", "output": "[1, 2, 3]"}) + "\n")
    with pytest.raises(DataFormatError) as info:
        read_conversations(str(path))
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:1: no 'messages' field")
    assert "['input', 'instruction', 'output']" in text
    assert 'convert it to {"messages": [...], "tools": [...]}' in text


# -- Parquet / Arrow struct columns ----------------------------------------------------------------------


def _two_tool_rows():
    weather = {
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("a", "get_weather", {"city": "Paris"})]},
            {"role": "tool", "tool_call_id": "a", "content": "18C"},
            {"role": "assistant", "content": "18C."},
        ],
    }
    calculator = {
        "tools": [CALCULATOR],
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("b", "calculator", {"expression": "2+2"})]},
            {"role": "tool", "tool_call_id": "b", "content": "4"},
            {"role": "assistant", "content": "4."},
        ],
    }
    return [weather, calculator]


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize("kind", ["parquet", "save_to_disk"])
def test_struct_columns_do_not_train_other_rows_keys(tmp_path, qwen2_5, kind):
    """Parquet and Arrow store `tools` and `arguments` as structs holding every row's keys: read back,
    the weather call was `{"city": "Paris", "expression": null}` and its schema listed `expression: null`."""
    import datasets

    ds = datasets.Dataset.from_list(_two_tool_rows())
    path = tmp_path / ("rows.parquet" if kind == "parquet" else "saved")
    ds.to_parquet(str(path)) if kind == "parquet" else ds.save_to_disk(str(path))
    conversations, _ = read_conversations(str(path))
    weather, calculator = conversations
    assert weather["tools"] == [WEATHER] and calculator["tools"] == [CALCULATOR]
    assert _calls(weather["messages"][1]) == [("get_weather", {"city": "Paris"})]
    assert _calls(calculator["messages"][1]) == [("calculator", {"expression": "2+2"})]
    row = tokenize_conversation(qwen2_5, weather["messages"], weather["tools"])
    assert labelled_runs(qwen2_5, row)[0] == _call_text("get_weather", {"city": "Paris"})
    assert "expression" not in qwen2_5.decode(row["input_ids"])


def test_a_null_argument_written_in_json_is_kept():
    """Only a struct-shaped row loses undeclared nulls; a JSON row's `null` argument is the data."""
    row = _two_tool_rows()[0]
    row["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris", "units": None}
    messages, _ = normalize_conversation(row)
    assert _calls(messages[1]) == [("get_weather", {"city": "Paris", "units": None})]


def test_inline_reasoning_before_a_call_in_an_earlier_turn_is_context_not_a_refusal():
    """Hermes reasoning-tool-use rows write `<think>...</think>` inline before the call. Qwen3.5
    (like Qwen3) renders reasoning only after the last user message, so the earlier call turn's
    content is gone; before, the whole conversation was refused ("does not render this assistant
    message's content verbatim")."""
    from chat_template_helpers import SPECIAL_WIDE, labelled_runs, tokenizer_with_template

    from lightning_agents.datamodules.conversations import tokenize_many

    template = (Path(__file__).resolve().parents[1] / "data" / "chat_templates" / "qwen3_5_4b.jinja").read_text()
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), template, None, "<|im_end|>", SPECIAL_WIDE)
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "<think>\nI should call get_weather.\n</think>", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18 C"},
        {"role": "assistant", "content": "It is 18 C in Paris."},
        {"role": "user", "content": "And Rome?"},
        {"role": "assistant", "content": "<think>\nNo data for Rome.\n</think>\nI can look it up."},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    for mode, first in (("train", 1), ("context", 0)):
        row = tokenize_many(tok, [(messages, tools)], stripped_reasoning=mode)[0]
        assert not isinstance(row, Exception), row
        runs = labelled_runs(tok, row)
        # The call turn is trained as rendered (its dropped reasoning is counted like Qwen3's), or
        # kept as context; the last turn keeps its reasoning; no tool result is labelled.
        assert sum("<function=get_weather>" in r for r in runs) == first
        assert "No data for Rome." in runs[-1] and runs[-1].endswith("I can look it up.<|im_end|>")
        assert not any("18 C" == r.strip() for r in runs)
