"""SFT labels: mends to the review of the Command R7B commit (a03c46b), on real templates.

- a tool result without an id before one that names its call was paired with the named call
  (Kimi-K2-Thinking's ``functions.NAME:INDEX`` headers; Command R7B's numbers are tested in
  test_template_command_r7b.py);
- whether a template pairs results with calls by id was probed by comparing two whole renders,
  which Hunyuan-A13B's clock (rendered to the second) could make differ;
- Phi-4-mini's own template (guidance-ai/guidance ``guidance/chat.py`` @5413339, quoting
  microsoft/Phi-4-mini-instruct's tokenizer_config.json) writes the EOS after the last turn's
  ``<|end|>`` only, which was taken for the last turn's end token.
"""

from __future__ import annotations

import copy

import pytest
from chat_template_helpers import OURS, REAL_TEMPLATES, SPECIAL_WIDE, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules import conversations as C
from lightning_agents.datamodules.conversations import (
    _pairs_calls_by_id,
    _render,
    _render_and_locate,
    normalize_conversation,
    template_layout,
    tokenize_many,
    turn_end_token_ids,
)
from lightning_agents.models import load_tokenizer

# guidance-ai/guidance guidance/chat.py @5413339aad8d, phi_4_mini_template (verbatim).
PHI4_MINI = (
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and "
    "message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + "
    "message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + "
    "message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}"
    "{% else %}{{ eos_token }}{% endif %}"
)


def _call(call_id, city):
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}


def _real(name):
    path = OURS / name
    eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


def test_kimi_result_without_an_id_answers_the_call_no_later_result_names():
    # Both results were headed `## Return of functions.get_weather:0` (the id-less one took the
    # first unanswered call, which the next result names); Rome's call had no result.
    tok = _real("kimi_k2_thinking.jinja")
    record = {
        "messages": [
            {"role": "user", "content": "Oslo and Rome?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("c1", "Oslo"), _call("c2", "Rome")]},
            {"role": "tool", "name": "get_weather", "content": "Rome: rain"},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Oslo: sun"},
            {"role": "assistant", "content": "Sun, then rain."},
        ],
        "tools": [WEATHER],
    }
    messages, tools = normalize_conversation(copy.deepcopy(record))
    text, _, _ = _render_and_locate(tok, template_layout(tok), messages, tools, _render)
    assert "## Return of functions.get_weather:1\nRome: rain" in text
    assert "## Return of functions.get_weather:0\nOslo: sun" in text


def test_ids_left_to_results_after_a_user_message_keep_their_order():
    # Results separated from their call turn by another message still answer its calls left.
    messages = [
        {"role": "user", "content": "Oslo and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "Oslo"), _call("c2", "Rome")]},
        {"role": "tool", "tool_call_id": "c2", "content": "Rome: rain"},
        {"role": "user", "content": "And Oslo?"},
        {"role": "tool", "content": "Oslo: sun"},
    ]
    out = C._paired_ids(messages, lambda call, index: f"call_{index}", "")
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["call_1", "call_0"]


def test_hunyuan_clock_does_not_make_results_look_paired_by_id(ticking_template_clock):
    # Hunyuan-A13B renders the time to the second before the conversation; two probe renders
    # straddling a second boundary differed there, and the layout then refused a result whose id
    # no call has ("the chat template heads a result with the number of the call that has its id").
    tok = _real("vllm_hunyuan_a13b.jinja")
    layout = template_layout(tok)
    assert not layout.call_ids_paired
    assert not _pairs_calls_by_id(tok, layout)
    # every probe render now reads the process's one instant (template_clock), not the ticking clock
    assert ticking_template_clock.reads == 0


def test_phi4_mini_last_turn_ends_where_its_model_stops():
    # final_end_of_turn was `<|endoftext|>`, so generation also stopped at the document's end
    # token; the labels were the same, since the turn is located at `<|end|>` first.
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), PHI4_MINI, None, "<|endoftext|>", SPECIAL_WIDE)
    layout = template_layout(tok)
    assert (layout.end_of_turn, layout.final_end_of_turn) == ("<|end|>", None)
    assert tok.convert_ids_to_tokens(turn_end_token_ids(tok)) == ["<|end|>"]
    conversation = [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello, friend."},
        {"role": "user", "content": "How are you?"},
        {"role": "assistant", "content": "Fine, thanks."},
    ]
    (row,) = tokenize_many(tok, [(conversation, None)])
    assert labelled_runs(tok, row) == ["Hello, friend.<|end|>", "Fine, thanks.<|end|>"]


@pytest.mark.parametrize("name", ["vllm_hunyuan_a13b.jinja", "kimi_k2_thinking.jinja", "apertus_8b_instruct.jinja"])
def test_real_templates_keep_their_pairing_probe(name):
    # Only Command R7B (not vendored) pairs results by ids it does not write.
    assert not template_layout(_real(name)).call_ids_paired
