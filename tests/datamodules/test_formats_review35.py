"""Review of the session-35 SFT data changes: which ``null`` values are data (JSON rows) and which a
Parquet/Arrow struct column filled in; Llama-Nemotron's reasoning switch beside a system message; an
inline think block that a later turn repeats (Qwen3 keeps reasoning only after the last user message)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL, SPECIAL_WIDE, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import read_conversations
from lightning_agents.datamodules.conversations import normalize_conversation, tokenize_conversation, tokenize_many
from lightning_agents.models import load_tokenizer

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}


def _row(tools, name, arguments):
    row = {
        "messages": [
            {"role": "user", "content": "Question?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "a", "type": "function", "function": {"name": name, "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": "a", "content": "result"},
            {"role": "assistant", "content": "Done."},
        ]
    }
    if tools is not None:
        row["tools"] = tools
    return row


def _arguments(conversation):
    return [c["function"]["arguments"] for c in conversation["messages"][1]["tool_calls"]]


def _round_trip(tmp_path, rows, kind):
    """The rows written as `datasets` writes them, and read back as training conversations."""
    import datasets

    ds = datasets.Dataset.from_list(rows)
    path = tmp_path / ("rows.parquet" if kind == "parquet" else "saved")
    ds.to_parquet(str(path)) if kind == "parquet" else ds.save_to_disk(str(path))
    conversations, errors = read_conversations(str(path))
    assert errors == []
    return conversations


# -- Parquet / Arrow struct columns ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["parquet", "save_to_disk"])
def test_an_optional_argument_one_row_leaves_out_is_not_trained_as_null(tmp_path, kind):
    """The same tool called with and without `units`: the struct column gave the second call
    `"units": null`, which was kept because the tool declares `units`."""
    rows = [
        _row([WEATHER], "get_weather", {"city": "Oslo", "units": "C"}),
        _row([WEATHER], "get_weather", {"city": "Paris"}),
    ]
    oslo, paris = _round_trip(tmp_path, rows, kind)
    assert _arguments(oslo) == [{"city": "Oslo", "units": "C"}]
    assert _arguments(paris) == [{"city": "Paris"}]
    assert paris["tools"] == [WEATHER]


@pytest.mark.parametrize("kind", ["parquet", "save_to_disk"])
def test_rows_without_tools_do_not_train_other_rows_arguments(tmp_path, kind):
    """No `tools` column: nothing is declared, and every other row's argument key came back as null."""
    rows = [_row(None, "get_weather", {"city": "Paris"}), _row(None, "calculator", {"expression": "2+2"})]
    weather, calculator = _round_trip(tmp_path, rows, kind)
    assert _arguments(weather) == [{"city": "Paris"}]
    assert _arguments(calculator) == [{"expression": "2+2"}]
    assert weather["tools"] is None


def test_a_null_the_schema_allows_is_kept_and_nested_filled_nulls_are_dropped(tmp_path):
    """Where the parameter's schema accepts null, a struct column's null may be the call's own, and
    training it is valid; objects inside the arguments are struct fields too."""
    search = {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    "filter": {
                        "type": "object",
                        "properties": {"lang": {"type": "string"}, "year": {"type": "integer"}},
                    },
                },
            },
        },
    }
    rows = [
        _row([search], "search", {"query": "cats", "limit": None, "filter": {"lang": "en"}}),
        _row([search], "search", {"query": "dogs", "limit": 3, "filter": {"year": 2020}}),
    ]
    cats, dogs = _round_trip(tmp_path, rows, "parquet")
    assert _arguments(cats) == [{"query": "cats", "limit": None, "filter": {"lang": "en"}}]
    assert _arguments(dogs) == [{"query": "dogs", "limit": 3, "filter": {"year": 2020}}]


def test_json_text_columns_of_a_parquet_file_keep_their_nulls(tmp_path):
    """`tools` and `messages` stored as JSON strings (as glaive and Hermes ship them) hold no
    filled-in keys: their nulls are as written."""
    schema = {"type": "integer", "default": None}
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": schema}}},
    }
    row = _row([tool], "f", {"n": None, "extra": None})
    rows = [{"messages": json.dumps(row["messages"]), "tools": json.dumps(row["tools"])}]
    (conversation,) = _round_trip(tmp_path, rows, "parquet")
    assert _arguments(conversation) == [{"n": None, "extra": None}]
    assert conversation["tools"] == [tool]


# -- JSON / JSONL: every null is data ---------------------------------------------------------------------

# A pydantic model's schema (`max_results: int | None = None`), as FastMCP and LangChain serve it.
PYDANTIC_SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search.",
        "parameters": {
            "properties": {
                "query": {"title": "Query", "type": "string"},
                "max_results": {
                    "anyOf": [{"type": "integer"}, {"type": "null"}],
                    "default": None,
                    "title": "Max Results",
                },
            },
            "required": ["query"],
            "title": "SearchArgs",
            "type": "object",
        },
    },
}


def test_a_jsonl_tool_schema_keeps_default_null(tmp_path):
    """`"default": null` was dropped from every schema in every format, so SFT trained on a tool list
    other than the one served at inference."""
    row = _row([PYDANTIC_SEARCH], "search", {"query": "cats"})
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (conversation,), _ = read_conversations(str(path))
    assert conversation["tools"] == [PYDANTIC_SEARCH]
    _, tools = normalize_conversation(json.loads(json.dumps(row)))
    assert tools == [PYDANTIC_SEARCH]


# -- Llama-Nemotron ---------------------------------------------------------------------------------------


def test_nemotron_switch_goes_in_front_of_the_rows_own_system_message():
    """`system_prompt` ("detailed thinking on") was dropped when `input` opened with a system message."""
    row = {
        "input": [
            {"role": "system", "content": "You are a helpful assistant with access to tools."},
            {"role": "user", "content": "What is 2+2?"},
        ],
        "output": "<think>\nAdd.\n</think>\n\n4",
        "system_prompt": "detailed thinking on",
        "reasoning": "on",
    }
    messages, _ = normalize_conversation(row)
    assert messages[0] == {
        "role": "system",
        "content": "detailed thinking on\nYou are a helpful assistant with access to tools.",
    }
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    # A system message that already opens with the switch is left as it is.
    row["input"][0]["content"] = "detailed thinking on\nBe brief."
    assert normalize_conversation(row)[0][0]["content"] == "detailed thinking on\nBe brief."


# -- An inline think block that a later turn repeats --------------------------------------------------------


def _weather_call(call_id, city):
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}


def _two_call_turns(reasoning_first, reasoning_second):
    return [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": f"<think>\n{reasoning_first}\n</think>",
            "tool_calls": [_weather_call("c1", "Oslo")],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "3C"},
        {"role": "assistant", "content": "Oslo: 3C."},
        {"role": "user", "content": "And Lisbon?"},
        {
            "role": "assistant",
            "content": f"<think>\n{reasoning_second}\n</think>",
            "tool_calls": [_weather_call("c2", "Lisbon")],
        },
        {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "18C"},
        {"role": "assistant", "content": "Lisbon: 18C."},
    ]


@pytest.fixture(scope="module")
def qwen3(shared_data):
    template = (shared_data / "chat_templates" / "qwen3.jinja").read_text()
    return tokenizer_with_template(load_tokenizer("embedded:student"), template, None, "<|im_end|>", SPECIAL)


def test_dropped_inline_reasoning_is_not_matched_in_a_later_turn_qwen3(qwen3):
    """Qwen3 drops the first call turn's think block and keeps the second's; with the same reasoning
    in both, the first turn was "found" in the second, and the conversation was refused."""
    same = "I need the weather for that city."
    messages = _two_call_turns(same, same)
    runs = labelled_runs(qwen3, tokenize_conversation(qwen3, messages, [WEATHER]))
    assert len(runs) == 4
    assert runs[0].startswith("<tool_call>\n") and '"Oslo"' in runs[0]
    assert runs[2].startswith(f"<think>\n{same}\n</think>") and '"Lisbon"' in runs[2]
    assert runs[1] == "Oslo: 3C.<|im_end|>" and runs[3] == "Lisbon: 18C.<|im_end|>"


def test_dropped_inline_reasoning_is_not_matched_in_a_later_turn_qwen3_5():
    """The same with the vendored Qwen3.5 template (XML calls), which keeps no test off the data folder."""
    template = (TEMPLATES / "qwen3_5_4b.jinja").read_text()
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), template, None, "<|im_end|>", SPECIAL_WIDE)
    same = "I need the weather for that city."
    row = tokenize_many(tok, [(_two_call_turns(same, same), [WEATHER])], stripped_reasoning="train")[0]
    assert not isinstance(row, Exception), row
    runs = labelled_runs(tok, row)
    assert sum("<function=get_weather>" in r for r in runs) == 2
    assert sum(same in r for r in runs) == 1 and same in runs[2]
    assert runs[-1].endswith("Lisbon: 18C.<|im_end|>")


# -- Words of the turn's own scaffold are not a later turn's text -------------------------------------------


def _think_tool(name):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "Write a thought down.",
            "parameters": {"type": "object", "properties": {"thought": {"type": "string"}}, "required": ["thought"]},
        },
    }


def _inline_think_call(tool_name, tool_result, reasoning="<think>I will write down the plan.</think>"):
    call = {"id": "c1", "type": "function", "function": {"name": tool_name, "arguments": {"thought": "plan"}}}
    return [
        {"role": "user", "content": "Plan my trip."},
        {"role": "assistant", "content": reasoning, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": tool_name, "content": tool_result},
        {"role": "assistant", "content": "Done."},
    ]


@pytest.mark.parametrize(
    ("tool_name", "tool_result"),
    [
        ("think", "ok"),  # tau-bench airline's `think` tool: its name is in the template's own <think> opener
        ("pick_option", "a"),  # a one-letter tool result is in "assistant" and "tool_call"
        ("pick_option", "in"),  # and "in" in "<think>"
    ],
)
def test_a_tool_named_think_or_a_short_tool_result_does_not_refuse_the_turn(qwen3, tool_name, tool_result):
    """The checks that a turn's text is not a later turn's looked for the call's name and the next
    message's text anywhere between the cursor and the match, the turn's own header and think opener
    included: these conversations were refused ("does not render this assistant message's content
    verbatim", "does not close this assistant turn"). Whole words outside the think tags count now."""
    messages = _inline_think_call(tool_name, tool_result)
    runs = labelled_runs(qwen3, tokenize_conversation(qwen3, messages, [_think_tool(tool_name)]))
    assert runs[0].startswith("<think>\nI will write down the plan.\n</think>") and f'"{tool_name}"' in runs[0]
    assert runs[-1] == "Done.<|im_end|>"


def test_a_later_turns_words_still_count_when_whole():
    """The check keeps its job: the call's name or the next message rendered between the cursor and a
    match still put that match in a later turn."""
    from lightning_agents.datamodules.conversations import _past

    header = "<|im_start|>assistant\n<think>\n"
    assert not _past(header, ("think", "a", "in"), 0, len(header))
    later = header + 'Plan.\n</think>\n<tool_call>\n{"name": "think"}\n</tool_call><|im_end|>\n<tool_response>\na\n'
    assert _past(later, ("think",), 0, len(later)) and _past(later, ("a",), 0, len(later))
    assert not _past(later, ("hink", "tool"), 0, len(later))  # parts of words are not the words
