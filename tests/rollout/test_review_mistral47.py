"""Review of 72585bc (session 47): the id-less glue must not hide any text other than the ids that a
template writes once a call turn is followed, and a reply that follows the Mistral notice's words
literally (the markers written as the words TOOL_CALLS / ARGS) is a malformed call, told again, not
an answer nor a call to a tool named after the marker."""

from __future__ import annotations

import pytest
from chat_template_helpers import (
    CALCULATOR,
    OUTPUTS,
    SPECIAL_WIDE,
    tokenizer_with_template,
)

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.agent_loop import continuation_text
from lightning_agents.rollout.tool_calls import malformed_call, parse_tool_calls
from lightning_agents.template_clock import render_chat_template

APRIEL = OUTPUTS / "Apriel-1.6-15b-Thinker-fixed.jinja"
EXPR = "17*23"
ARGS = '{"expression": "8 + 2"}'


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _call_then_result():
    call = {
        "id": "call_0_0",
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": EXPR}},
    }
    messages = [
        {"role": "user", "content": "What is 17*23?"},
        {
            "role": "assistant",
            "content": "Needs a tool.\n[BEGIN FINAL RESPONSE]",
            "tool_calls": [call],
        },
    ]
    return messages, [
        {
            "role": "tool",
            "tool_call_id": "call_0_0",
            "name": "calculator",
            "content": "391",
        }
    ]


def test_a_template_that_writes_more_than_the_id_for_a_call_with_one_is_refused(base):
    """Apriel's template with one change: a call turn whose calls have ids is closed by a
    `<|calls_done|>` of its own. The id-less history renders no such closer, so its glue is still a
    suffix of the real rendering; at 72585bc it was taken, and the stream lacked the closer the
    template writes between the sampled call and its result. Only ids may be what the glue skips."""
    tok = tokenizer_with_template(base, APRIEL.read_text(), "<s>", "<|end|>", SPECIAL_WIDE)
    closes = tokenizer_with_template(
        base,
        APRIEL.read_text().replace(
            "{{ ']</tool_calls>' }}",
            "{{ ']</tool_calls>' }}{%- if add_tool_id and tool_calls[0]['id'] is defined -%}"
            "{{ '\\n<|calls_done|>' }}{%- endif -%}",
        ),
        "<s>",
        "<|end|>",
        SPECIAL_WIDE,
    )
    assert closes.chat_template != tok.chat_template
    messages, new = _call_then_result()
    shown = render_chat_template(
        closes,
        messages + new,
        tools=[CALCULATOR],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<|calls_done|>" in shown  # what the template writes once the result follows
    with pytest.raises(LightningAgentsError, match="renders earlier turns differently"):
        continuation_text(closes, messages, new, [CALCULATOR], None, ["<|end|>"], "<|end|>")
    # Apriel's own template still glues past its ids
    glue = continuation_text(tok, messages, new, [CALCULATOR], None, ["<|end|>"], "<|end|>")
    real = render_chat_template(
        tok,
        messages + new,
        tools=[CALCULATOR],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert real.endswith(glue) and glue.startswith("\n<|begin_tool_result|>\n391")


@pytest.mark.parametrize(
    "reply",
    [
        f'TOOL_CALLS[{{"name": "calculator", "arguments": {ARGS}}}]',
        f'TOOL_CALLS [{{"name": "calculator", "arguments": {ARGS}}}]',
        f"TOOL_CALLScalculatorARGS{ARGS}",
        f"TOOL_CALLS calculator ARGS {ARGS}",
        f'the TOOL_CALLS token, then [{{"name": "calculator", "arguments": {ARGS}}}]',
    ],
)
def test_a_reply_that_writes_the_notices_marker_as_a_word_is_a_malformed_call(reply):
    """The notice says `write the TOOL_CALLS token, then ...`; a model that writes the word as text
    wrote no call any Mistral parser reads. At 72585bc such a reply was taken as the final answer
    (the episode ended without a second notice) or, glued to the name, as a call to a tool named
    `TOOL_CALLScalculatorARGS`."""
    content, calls = parse_tool_calls(reply, "c", "mistral")
    assert calls == []
    assert malformed_call(content, "mistral")
    # the marker itself, either call form, and a plain answer read as before
    for written in (
        f'[TOOL_CALLS][{{"name": "calculator", "arguments": {ARGS}}}]',
        f"[TOOL_CALLS]calculator[ARGS]{ARGS}",
    ):
        content, calls = parse_tool_calls(written, "c", "mistral")
        assert [c["function"]["name"] for c in calls] == ["calculator"] and content == ""
    assert not malformed_call("The answer is 10.", "mistral")
