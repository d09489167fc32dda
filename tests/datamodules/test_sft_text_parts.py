"""SFT rows from OpenAI-format records whose messages hold lists of text parts: the parts are
joined as rollouts join them (``content_parts.PROMPT_PARTS_JOIN``, vLLM's newline), so a tool
result given in parts trains as the text the served model saw; a part that is not text is refused
naming the file, the line and the message."""

from __future__ import annotations

import json

import pytest
from chat_template_helpers import CALCULATOR, REAL_TEMPLATES, SHARED, tokenizer_with_template

from lightning_agents.datamodules.chat import DataFormatError, read_conversations, tokenize_to_dataset
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import HFGenerationEngine

FIRST, SECOND = "Result 391 of the tool", "computed exactly"


def _record(tool_parts):
    call = {
        "id": "a1b2c3d4e",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "17*23"}'},
    }
    return {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "What is 17*23?"}, {"type": "text", "text": "Use the tool."}],
            },
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "calculator", "content": tool_parts},
            {"role": "assistant", "content": "It is 391."},
        ],
        "tools": [CALCULATOR],
    }


def _real(name):
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the real templates live in ../shared/data/chat_templates)")
    eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


@pytest.mark.parametrize("name", ["qwen3.jinja", "llama3_1.jinja", "deepseekv3.jinja", "qwen2_5.jinja"])
def test_sft_renders_a_tool_result_in_text_parts_as_rollouts_do(tmp_path, name):
    # SFT joined the parts with nothing ("Result 391 of the toolcomputed exactly") while rollouts,
    # as vLLM, join them with a newline: the model was trained on a tool result it never saw served.
    tok = _real(name)
    source = tmp_path / "logs.jsonl"
    record = _record([{"type": "text", "text": FIRST}, {"type": "text", "text": SECOND}])
    source.write_text(json.dumps(record) + "\n")
    conversations, _ = read_conversations(str(source))
    rows, errors, _ = tokenize_to_dataset(conversations, tok, 4096, cache_dir=None)
    assert not errors
    trained = tok.decode(rows[0]["input_ids"])
    rollout = HFGenerationEngine(None, tok).render(record["messages"][:3], [CALCULATOR])
    for joined in (FIRST + "\n" + SECOND, "What is 17*23?\nUse the tool."):
        # Llama 3.1 writes a tool result through tojson
        assert joined in trained or json.dumps(joined)[1:-1] in trained, (name, joined)
    assert (FIRST + "\n" + SECOND) in rollout or json.dumps(FIRST + "\n" + SECOND)[1:-1] in rollout
    assert FIRST + SECOND not in trained


def test_sft_refuses_a_part_that_is_not_text_naming_the_file_line_and_message(tmp_path):
    source = tmp_path / "logs.jsonl"
    bad = _record([{"type": "text", "text": FIRST}, {"type": "image_url", "image_url": {"url": "data:"}}])
    source.write_text(json.dumps(_record([{"type": "text", "text": FIRST}])) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataFormatError, match=rf"{source}:2: message 2 content\[1\] is a 'image_url' part"):
        read_conversations(str(source))
