"""Real SFT rows in the shapes datasets ship (``tests/data/conversations``, sources in its README):
OpenAI fine-tuning ``weight``, ShareGPT (axolotl, LLaMA-Factory's glaive, Hermes function calling,
ToolACE's shape), OpenAI content parts, ``reasoning_content`` and Parquet/CSV files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from chat_template_helpers import labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import DataFormatError, read_conversations
from lightning_agents.datamodules.conversations import (
    ConversationError,
    normalize_conversation,
    tokenize_conversation,
)
from lightning_agents.models import load_tokenizer

DATA = Path(__file__).resolve().parents[1] / "data" / "conversations"


@pytest.fixture(scope="module")
def base_tokenizer():
    return load_tokenizer("embedded:student")


@pytest.fixture(scope="module")
def template(shared_data):
    return lambda name: (shared_data / "chat_templates" / name).read_text()


@pytest.fixture(scope="module")
def qwen2_5(base_tokenizer):
    # Qwen2.5's real template; without ../shared/data the embedded student's own ChatML template
    # (the same turn layout, no tools) keeps these tests running in CI.
    path = Path(__file__).resolve().parents[3] / "shared" / "data" / "chat_templates" / "qwen2_5.jinja"
    if not path.is_file():
        return base_tokenizer
    return tokenizer_with_template(base_tokenizer, path.read_text(), None, "<|im_end|>")


@pytest.fixture(scope="module")
def qwen3(base_tokenizer, template):
    return tokenizer_with_template(base_tokenizer, template("qwen3.jinja"), None, "<|im_end|>")


def _rows(name):
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


# -- 1. OpenAI fine-tuning `weight` ----------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 2])
def test_openai_weight_zero_assistant_turns_get_no_labels(qwen2_5, index):
    """The rows of OpenAI's (and Azure's) fine-tuning guide: the weight-0 answer is context only."""
    conversations, _ = read_conversations(str(DATA / "openai_weight.jsonl"))
    messages = conversations[index]["messages"]
    skipped, trained = messages[2]["content"], messages[4]["content"]
    row = tokenize_conversation(qwen2_5, messages, None)
    runs = labelled_runs(qwen2_5, row)
    assert runs == [trained + "<|im_end|>"]
    assert skipped in qwen2_5.decode(row["input_ids"])  # still in the context


def test_openai_weight_zero_with_generation_markers(base_tokenizer):
    """The template's own ``{% generation %}`` mask drops the weight-0 turn too."""
    messages, tools = normalize_conversation(_rows("openai_weight.jsonl")[0])
    runs = labelled_runs(base_tokenizer, tokenize_conversation(base_tokenizer, messages, tools))
    assert len(runs) == 1 and runs[0].startswith("Paris, as if")


@pytest.mark.parametrize("weight", [0.5, 2, -1, "0", True, [0]])
def test_openai_weight_other_than_0_or_1_is_refused(weight):
    row = copy.deepcopy(_rows("openai_weight.jsonl")[0])
    row["messages"][2]["weight"] = weight
    with pytest.raises(ConversationError, match=r"message 2 weight must be 0 or 1"):
        normalize_conversation(row)


def test_openai_weight_float_and_null_are_read_as_0_1_and_absent():
    row = copy.deepcopy(_rows("openai_weight.jsonl")[0])
    row["messages"][2]["weight"], row["messages"][4]["weight"], row["messages"][1]["weight"] = 0.0, 1.0, None
    messages, _ = normalize_conversation(row)
    assert messages[2]["weight"] == 0 and "weight" not in messages[4] and "weight" not in messages[1]


def test_every_assistant_turn_weight_zero_is_refused_with_the_reason():
    row = copy.deepcopy(_rows("openai_weight.jsonl")[0])
    row["messages"][4]["weight"] = 0
    with pytest.raises(ConversationError, match="every assistant message has weight 0"):
        normalize_conversation(row)


def test_weight_one_on_a_user_message_is_refused():
    row = copy.deepcopy(_rows("openai_weight.jsonl")[0])
    row["messages"][1]["weight"] = 1
    with pytest.raises(ConversationError, match="message 1 is a user message with weight 1"):
        normalize_conversation(row)


# -- 2. ShareGPT -----------------------------------------------------------------------------------


def test_sharegpt_human_gpt_row(qwen2_5):
    """axolotl's ShareGPT fixture: human/gpt turns become user/assistant messages."""
    conversations, _ = read_conversations(str(DATA / "sharegpt_axolotl.jsonl"))
    raw = _rows("sharegpt_axolotl.jsonl")[0]["conversations"]
    messages = conversations[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert [m["content"] for m in messages] == [t["value"] for t in raw]
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, None))
    assert runs == [raw[1]["value"] + "<|im_end|>", raw[3]["value"] + "<|im_end|>"]


def test_glaive_function_call_and_observation_become_tool_calls(qwen2_5):
    """LLaMA-Factory's glaive demo: JSON function_call turns are tool calls, observations tool
    results, and the JSON-text ``tools`` (bare function schemas) become OpenAI tools."""
    conversations, _ = read_conversations(str(DATA / "glaive_toolcall_llamafactory.json"))
    messages, tools = conversations[0]["messages"], conversations[0]["tools"]
    assert [m["role"] for m in messages[:4]] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"] == [
        {
            "type": "function",
            "function": {"name": "calculate_area", "arguments": {"shape": "rectangle", "dimensions": [5, 3]}},
        }
    ]
    assert messages[2]["content"] == '{"area": 15}'
    assert [t["function"]["name"] for t in tools] == ["calculate_area", "calculate_discount"]
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, tools))
    assert len(runs) == 6 and runs[0].startswith("<tool_call>") and '"rectangle"' in runs[0]
    assert not any('{"area": 15}' in r for r in runs)  # the observation is not trained


def test_hermes_tool_calls_stay_text_when_asked(qwen2_5):
    """hermes-function-calling-v1 writes calls as Python dicts (single quotes, ``True``) inside the
    gpt value; with ``parse_text_tool_calls=False`` they are kept verbatim as the assistant's text and
    trained as such (``test_text_tool_calls.py`` covers the default, which makes them tool calls)."""
    conversations, _ = read_conversations(str(DATA / "hermes_function_calling.json"), parse_text_tool_calls=False)
    messages = conversations[0]["messages"]
    raw = json.loads((DATA / "hermes_function_calling.json").read_text())[0]["conversations"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["content"] == raw[2]["value"] and "tool_calls" not in messages[2]
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, None))
    assert runs[0] == raw[2]["value"] + "<|im_end|>"  # verbatim, trailing newline too
    assert not any("<tool_response>" in r for r in runs)


def test_toolace_shape_top_level_system_and_user_assistant_tool_roles():
    """ToolACE ships ``{"system": ..., "conversations": [{"from": "user"|"assistant"|"tool"}]}`` with
    calls as ``[func(arg=...)]`` text, which is kept as text."""
    record = {
        "system": "You are an expert in composing functions.",
        "conversations": [
            {"from": "user", "value": "What is the weather in Paris?"},
            {"from": "assistant", "value": '[get_weather(city="Paris")]'},
            {"from": "tool", "value": '[{"name": "get_weather", "results": {"temperature": 22}}]'},
            {"from": "assistant", "value": "It is 22 degrees in Paris."},
        ],
    }
    messages, tools = normalize_conversation(record)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == record["system"] and messages[2]["content"] == '[get_weather(city="Paris")]'
    assert tools is None


def test_sharegpt_unknown_speaker_and_bad_function_call_are_named():
    with pytest.raises(ConversationError, match=r"conversations\[1\] is from 'narrator'; expected one of"):
        normalize_conversation({"conversations": [{"from": "human", "value": "a"}, {"from": "narrator", "value": "b"}]})
    bad = {"conversations": [{"from": "human", "value": "a"}, {"from": "function_call", "value": "calc(1)"}]}
    with pytest.raises(ConversationError, match=r"conversations\[1\] \(function_call\) is not JSON"):
        normalize_conversation(bad)


def test_sharegpt_weight_is_kept(qwen2_5):
    """axolotl reads a per-turn ``weight`` in ShareGPT rows too (SlimOrca-style 0.0/1.0/null)."""
    record = copy.deepcopy(_rows("sharegpt_axolotl.jsonl")[0])
    for turn, weight in zip(record["conversations"], [None, 0.0, 0.0, 1.0]):
        turn["weight"] = weight
    messages, tools = normalize_conversation(record)
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, tools))
    assert runs == [record["conversations"][3]["value"] + "<|im_end|>"]


# -- 3. OpenAI content parts -----------------------------------------------------------------------


def test_text_content_parts_are_joined(qwen2_5):
    record = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "What's the capital "}, {"type": "text", "text": "of France?"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Paris"}]},
        ]
    }
    messages, _ = normalize_conversation(record)
    # joined as rollouts and vLLM's server join them (content_parts.PROMPT_PARTS_JOIN)
    assert [m["content"] for m in messages] == ["What's the capital \nof France?", "Paris"]
    assert labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, messages, None)) == ["Paris<|im_end|>"]


def test_image_content_part_is_refused_with_the_record_and_reason():
    """Azure OpenAI's vision fine-tuning row: text-only SFT refuses it, naming file, line and part."""
    with pytest.raises(DataFormatError, match=r"openai_vision\.jsonl:1: message 0 content\[1\] is a 'image_url' part"):
        read_conversations(str(DATA / "openai_vision.jsonl"))
    _, errors = read_conversations(str(DATA / "openai_vision.jsonl"), skip_invalid=True)
    assert len(errors) == 1 and "only text parts can be trained on" in errors[0]


# -- 4. reasoning_content --------------------------------------------------------------------------

# MiniMind's SFT shape: ``conversations`` of role/content messages with empty per-message fields.
REASONING_ROW = {
    "conversations": [
        {"role": "user", "content": "What is 17 * 3?", "reasoning_content": "", "tools": "", "tool_calls": ""},
        {
            "role": "assistant",
            "content": "17 * 3 = 51.",
            "reasoning_content": "17 * 3 is 10 * 3 plus 7 * 3, so 30 + 21.",
            "tools": "",
            "tool_calls": "",
        },
    ]
}


@pytest.mark.parametrize("key", ["reasoning_content", "thinking", "reasoning"])
def test_reasoning_is_kept_and_labelled_with_qwen3(qwen3, key):
    """Qwen3 renders the final turn's reasoning in a think block: it is the model's own text, labelled."""
    record = copy.deepcopy(REASONING_ROW)
    assistant = record["conversations"][1]
    assistant[key] = assistant.pop("reasoning_content")
    messages, tools = normalize_conversation(record)
    assert messages[1]["reasoning_content"] == "17 * 3 is 10 * 3 plus 7 * 3, so 30 + 21."
    row = tokenize_conversation(qwen3, messages, tools)
    runs = labelled_runs(qwen3, row)
    assert runs == ["<think>\n17 * 3 is 10 * 3 plus 7 * 3, so 30 + 21.\n</think>\n\n17 * 3 = 51.<|im_end|>"]


def test_reasoning_of_an_earlier_turn_that_qwen3_drops_is_not_an_error(qwen3):
    record = copy.deepcopy(REASONING_ROW)
    record["conversations"] += [{"role": "user", "content": "And 17 * 4?"}, {"role": "assistant", "content": "68."}]
    messages, tools = normalize_conversation(record)
    runs = labelled_runs(qwen3, tokenize_conversation(qwen3, messages, tools))
    assert runs == ["17 * 3 = 51.<|im_end|>", "68.<|im_end|>"]


def test_reasoning_a_template_drops_from_the_last_turn_is_refused(base_tokenizer, template):
    """Qwen2.5's template ignores reasoning_content: training the answer alone is refused."""
    qwen2_5 = tokenizer_with_template(base_tokenizer, template("qwen2_5.jinja"), None, "<|im_end|>")
    messages, tools = normalize_conversation(copy.deepcopy(REASONING_ROW))
    with pytest.raises(ConversationError, match="does not render this turn's reasoning_content"):
        tokenize_conversation(qwen2_5, messages, tools)


# -- 5. Parquet / Arrow / CSV files ----------------------------------------------------------------


def test_parquet_file_of_openai_rows_with_weights(tmp_path, qwen2_5):
    import datasets

    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(_rows("openai_weight.jsonl")).to_parquet(str(path))
    conversations, errors = read_conversations(str(path))
    assert len(conversations) == 3 and not errors
    assert conversations[1]["where"] == f"{path}[1]"
    runs = labelled_runs(qwen2_5, tokenize_conversation(qwen2_5, conversations[0]["messages"], None))
    assert runs == ["Paris, as if everyone doesn't know that already.<|im_end|>"]


def test_parquet_and_arrow_files_of_sharegpt_rows_with_json_text_tools(tmp_path):
    import datasets

    rows = json.loads((DATA / "glaive_toolcall_llamafactory.json").read_text())
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "glaive.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    for path in (tmp_path / "glaive.parquet", arrow):
        conversations, _ = read_conversations(str(path))
        assert conversations[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "calculate_area"


def test_csv_file_with_json_text_messages(tmp_path):
    import csv

    path = tmp_path / "train.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["messages"])
        for row in _rows("openai_weight.jsonl"):
            writer.writerow([json.dumps(row["messages"])])
    conversations, _ = read_conversations(str(path))
    assert len(conversations) == 3 and conversations[2]["messages"][2]["weight"] == 0


def test_an_unreadable_parquet_file_is_named(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not a parquet file")
    with pytest.raises(DataFormatError, match=r"broken\.parquet:1: cannot read as parquet"):
        read_conversations(str(path))
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        read_conversations(str(tmp_path / "missing.parquet"))
