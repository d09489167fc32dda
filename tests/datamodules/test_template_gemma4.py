"""Assistant-only labels for tool calls that real chat templates write inside the model's turn or in a
syntax of their own.

Gemma 4 renders a dict's arguments in its own syntax (``call:f{city:<|"|>Oslo<|"|>,days:3}``, keys
sorted) but pastes a JSON string between its braces (``call:f{{"city": "Oslo"}}``), a form the model
never writes; and it renders the call, its tool result and the answer in one model turn
(``<|tool_call>...<tool_call|><|tool_response>response:...<tool_response|>answer<turn|>``), so every
tool conversation was refused. The call is the model's up to ``<|tool_response>`` (one of Gemma 4's
stop ids), the answer after the result is the model's again; the result is not. Apertus does the
same with ``<|tools_prefix|>[...]<|tools_suffix|>``. functionary v3.2's generation prompt ends with
``>>>``, so a call starts at its name; GigaChat writes a call after the assistant's text as a message
of its own role, opened with the end-of-turn token. Templates: Gemma 4 is
``tests/data/tool_call_outputs/templates/google-gemma-4-31B-it.jinja``, the others are in
``tests/data/chat_templates`` (sources in that folder's README).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.conversations import (
    ConversationError,
    normalize_conversation,
    template_layout,
    tokenize_many,
)
from lightning_agents.models import load_tokenizer

DATA = Path(__file__).resolve().parents[1] / "data"
GEMMA4 = DATA / "tool_call_outputs" / "templates" / "google-gemma-4-31B-it.jinja"
#: Gemma 4's control tokens open with ``<|`` or close with ``|>``, not both (``<|turn>``, ``<turn|>``).
GEMMA4_SPECIAL = re.compile(r'<\|"\|>|<\|[a-z_]+>|<[a-z_]+\|>|<bos>|<eos>')
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
AREA = {
    "type": "function",
    "function": {
        "name": "calculate_area",
        "description": "Area of a shape.",
        "parameters": {
            "type": "object",
            "properties": {"shape": {"type": "string"}, "dimensions": {"type": "array", "items": {"type": "number"}}},
        },
    },
}
RESULT = "Oslo: sunny, 20 C"
ANSWER = "It will be sunny in Oslo."


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _conversation(calls: list[dict], results: list[str], content: str = "") -> dict:
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    messages.append({"role": "assistant", "content": content, "tool_calls": calls})
    for call, result in zip(calls, results):
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": result}
        )
    messages.append({"role": "assistant", "content": ANSWER})
    return {"messages": messages, "tools": [WEATHER, AREA]}


ONE_CALL = _conversation([_call("c0000001a", "get_weather", {"city": "Oslo", "days": 3})], [RESULT])


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


@pytest.fixture(scope="module")
def gemma4(base):
    return tokenizer_with_template(base, GEMMA4.read_text(), "<bos>", "<turn|>", GEMMA4_SPECIAL)


def _runs(tok, conversation) -> list[str]:
    messages, tools = normalize_conversation(copy.deepcopy(conversation))
    row = tokenize_many(tok, [(messages, tools)])[0]
    assert not isinstance(row, ConversationError), row
    return labelled_runs(tok, row)


def test_gemma4_call_is_labelled_up_to_its_tool_response_token_and_the_answer_after_the_result(gemma4):
    runs = _runs(gemma4, ONE_CALL)
    # Gemma 4's own call syntax, not the JSON-string form `call:get_weather{{"city": "Oslo", "days": 3}}`
    assert runs == [
        '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:3}<tool_call|><|tool_response>',
        ANSWER + "<turn|>",
    ]
    assert not any(RESULT in run or "response:get_weather" in run for run in runs)
    layout = template_layout(gemma4)
    assert (layout.string_arguments, layout.call_end_of_turn) == (False, "<|tool_response>")


def test_gemma4_nested_and_key_sorted_arguments_are_found_in_its_syntax(gemma4):
    conversation = _conversation(
        [_call("c0000001a", "calculate_area", {"shape": "rectangle", "dimensions": [5, 3], "exact": True})], ["15"]
    )
    runs = _runs(gemma4, conversation)
    assert runs[0] == (
        '<|tool_call>call:calculate_area{dimensions:[5,3],exact:true,shape:<|"|>rectangle<|"|>}'
        "<tool_call|><|tool_response>"
    )


def test_gemma4_parallel_calls_are_one_span_before_their_results(gemma4):
    conversation = _conversation(
        [_call("c0000001a", "get_weather", {"city": "Oslo"}), _call("c0000002b", "get_weather", {"city": "Bergen"})],
        [RESULT, "Bergen: rain, 9 C"],
    )
    assert _runs(gemma4, conversation) == [
        '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>'
        '<|tool_call>call:get_weather{city:<|"|>Bergen<|"|>}<tool_call|><|tool_response>',
        ANSWER + "<turn|>",
    ]


def test_apertus_call_is_labelled_up_to_tools_suffix_and_not_its_result(base):
    template = (DATA / "chat_templates" / "apertus_8b_instruct.jinja").read_text()
    tok = tokenizer_with_template(base, template, "<s>", "</s>", SPECIAL_WIDE)
    runs = _runs(tok, ONE_CALL)
    assert runs[0] == '<|tools_prefix|>[{"get_weather": {"city": "Oslo", "days": 3}}]<|tools_suffix|>'
    assert runs[1].startswith(ANSWER)
    assert not any(RESULT in run for run in runs)


def test_functionary_v3_2_call_starts_at_its_name_after_the_prompts_marker(base):
    template = (DATA / "chat_templates" / "functionary_medium_v3_2.jinja").read_text()
    tok = tokenizer_with_template(base, template, "<|begin_of_text|>", "<|eot_id|>", SPECIAL_WIDE)
    two = _conversation(
        [_call("c0000001a", "get_weather", {"city": "Oslo"}), _call("c0000002b", "get_weather", {"city": "Bergen"})],
        [RESULT, "Bergen: rain, 9 C"],
        content="Checking both.",
    )
    # `>>>` ends the generation prompt; what the model writes after it is its own, `all\n` before text too
    assert _runs(tok, two)[0] == (
        'all\nChecking both.>>>get_weather\n{"city": "Oslo"}>>>get_weather\n{"city": "Bergen"}<|eot_id|>'
    )
    assert _runs(tok, ONE_CALL)[0] == 'get_weather\n{"city": "Oslo", "days": 3}<|eot_id|>'


# The shape of GigaChat3's template (llama.cpp `models/templates/GigaChat3-10B-A1.8B.jinja`, not
# vendored): each message is `role<|role_sep|>\ncontent<|message_sep|>\n\n`, and an assistant
# message's call follows as a message of the role `function call`.
GIGACHAT_LIKE = (
    "{%- for m in messages -%}"
    "{%- set role = {'tool': 'function result'}.get(m.role, m.role) -%}"
    "{{- role + '<|role_sep|>\\n' + (m.content or '') + '<|message_sep|>\\n\\n' -}}"
    "{%- if m.tool_calls -%}{%- set c = m.tool_calls[0].function -%}"
    '{{- \'function call<|role_sep|>\\n{"name": "\' + c.name + \'", "arguments": \' + c.arguments | tojson'
    " + '}<|message_sep|>\\n\\n' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'assistant<|role_sep|>\\n' -}}{%- endif -%}"
)


def test_a_call_after_text_opened_with_the_end_of_turn_token_is_labelled_with_the_text(base):
    tok = tokenizer_with_template(base, GIGACHAT_LIKE, None, "<|message_sep|>", SPECIAL_WIDE)
    conversation = _conversation(
        [_call("c0000001a", "get_weather", {"city": "Oslo"})], [RESULT], content="Let me check."
    )
    runs = _runs(tok, conversation)
    assert runs == [
        'Let me check.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": '
        '{"city": "Oslo"}}<|message_sep|>',
        ANSWER + "<|message_sep|>",
    ]


# A template that prints a dict as Python does renders every value too, but that is no call syntax:
# its JSON-string form stays chosen (this case also holds on the code before dict arguments were
# preferred; it guards that rule's exception).
PYTHON_PRINTED = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} {{ c.function.arguments }}</tool_call>"
    "{%- endfor %}<|im_end|>\n{%- endfor -%}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def test_arguments_printed_as_a_python_dict_are_given_as_json_strings(base):
    tok = tokenizer_with_template(base, PYTHON_PRINTED, None, "<|im_end|>", SPECIAL_WIDE)
    assert template_layout(tok).string_arguments
    assert _runs(tok, ONE_CALL)[0] == '<tool_call>get_weather {"city": "Oslo", "days": 3}</tool_call><|im_end|>'
