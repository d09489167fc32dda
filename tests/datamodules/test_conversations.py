"""Assistant-only tokenization: generation-marker masks, the prefix-rendering fallback, validation."""

import copy
import json

import pytest

from lightning_agents.datamodules.conversations import (
    IGNORE_INDEX,
    ConversationError,
    normalize_conversation,
    tokenize_conversation,
)
from lightning_agents.models import load_tokenizer
from lightning_agents.tasks.arithmetic import arithmetic_conversation, make_arithmetic_split


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("embedded:student")


@pytest.fixture(scope="module")
def tokenizer_without_markers():
    tok = copy.deepcopy(load_tokenizer("embedded:student"))
    tok.chat_template = (
        # same whitespace control, no assistant markers
        tok.chat_template.replace("{% generation -%}", "{% if true -%}").replace("{%- endgeneration %}", "{%- endif %}")
    )
    assert "{% generation" not in tok.chat_template and "endgeneration" not in tok.chat_template
    return tok


def assistant_text(tokenizer, row):
    return tokenizer.decode([t for t, lab in zip(row["input_ids"], row["labels"]) if lab != IGNORE_INDEX])


@pytest.mark.parametrize("style", ["direct", "tool", "program"])
def test_labels_cover_exactly_the_assistant_turns(tokenizer, style):
    record = make_arithmetic_split("val")[3]
    conv = arithmetic_conversation(record, style)
    messages, tools = normalize_conversation(conv)
    row = tokenize_conversation(tokenizer, messages, tools)
    expression, answer = record["expression"], record["answer"]
    expected = {
        "direct": f"{expression} = {answer}. The answer is {answer}.<|im_end|>",
        # the tool's output between the two assistant turns is context, not a target
        "tool": '<tool_call>{"name": "calculator", "arguments": {"expression": "' + expression + '"}}</tool_call>'
        f"<|im_end|>The answer is {answer}.<|im_end|>",
        "program": f"```python\nprint({expression})\n```<|im_end|>",
    }[style]
    assert assistant_text(tokenizer, row) == expected


@pytest.mark.parametrize("style", ["direct", "tool", "program"])
def test_prefix_rendering_fallback_matches_generation_mask(tokenizer, tokenizer_without_markers, style):
    conv = arithmetic_conversation(make_arithmetic_split("val")[5], style)
    messages, tools = normalize_conversation(conv)
    with_markers = tokenize_conversation(tokenizer, messages, tools)
    fallback = tokenize_conversation(tokenizer_without_markers, messages, tools)
    assert fallback["input_ids"] == with_markers["input_ids"]
    # The fallback marks the assistant header's trailing text identically and includes the end token.
    assert assistant_text(tokenizer, fallback) == assistant_text(tokenizer, with_markers)


def test_json_string_and_dict_arguments_tokenize_identically(tokenizer):
    conv = arithmetic_conversation(make_arithmetic_split("val")[1], "tool")
    as_dict = copy.deepcopy(conv)
    call = as_dict["messages"][1]["tool_calls"][0]["function"]
    call["arguments"] = json.loads(call["arguments"])
    a = tokenize_conversation(tokenizer, *normalize_conversation(conv))
    b = tokenize_conversation(tokenizer, *normalize_conversation(as_dict))
    assert a == b


def test_truncation_without_assistant_tokens_returns_none(tokenizer):
    conv = arithmetic_conversation(make_arithmetic_split("val")[1], "direct")
    assert tokenize_conversation(tokenizer, *normalize_conversation(conv), max_length=5) is None


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"no": "messages"}, "no 'messages'"),
        ({"messages": []}, "non-empty"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "role 'robot'"),
        ({"messages": [{"role": "user", "content": "x"}]}, "no assistant message"),
        (
            {"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "y"}]},
            "content must be a string",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]},
            "not valid JSON",
        ),
        ({"messages": [{"role": "assistant", "content": ""}]}, "neither content nor tool_calls"),
    ],
)
def test_invalid_conversations_say_what_is_wrong(bad, reason):
    with pytest.raises(ConversationError, match=reason):
        normalize_conversation(bad)
