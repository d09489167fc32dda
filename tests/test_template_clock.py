"""Chat templates that print the current time render one instant for the whole process.

Hunyuan-A13B's template (tests/data/chat_templates/vllm_hunyuan_a13b.jinja, from vLLM's examples)
writes the time to the second into its system prompt when tools are given. SFT labels and the
agent loop's glue come from several renders of one conversation compared with each other; a second
passing between two of them made SFT label Hunyuan's `<|extra_0|>` and leave `助手：` untrained,
with no error, and failed CI once (tests/datamodules/test_template_inserted_text.py). The
`ticking_template_clock` fixture (conftest.py) moves a second on every read, so every pair of
renders straddles a tick.
"""

from __future__ import annotations

import copy
import threading

import pytest
import transformers.utils.chat_template_utils as chat_utils
from chat_template_helpers import OURS, REAL_TEMPLATES, WEATHER, tokenizer_with_template

from lightning_agents.datamodules.conversations import normalize_conversation, render_conversation, tokenize_many
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.agent_loop import continuation_text
from lightning_agents.template_clock import fixed_template_clock, render_chat_template, template_instant

HUNYUAN = OURS / "vllm_hunyuan_a13b.jinja"
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
HI = [{"role": "user", "content": "Hi"}]
RESULT = {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Oslo: 3 C, snow"}


@pytest.fixture(scope="module")
def hunyuan():
    eos, bos, special = REAL_TEMPLATES[HUNYUAN]
    return tokenizer_with_template(load_tokenizer("embedded:student"), HUNYUAN.read_text(), bos, eos, special)


def test_sft_labels_hunyuan_turns_while_the_clock_ticks(hunyuan, ticking_template_clock):
    record = {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            RESULT,
            {"role": "assistant", "content": "It is snowing in Oslo, 3 C."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You are welcome."},
        ],
        "tools": [WEATHER],
    }
    messages, tools = normalize_conversation(copy.deepcopy(record))
    text, spans = render_conversation(hunyuan, messages, tools)
    # before: ['<|extra_0|><tool_calls>...', 'It is snowing ...<|eos|>', 'You are welcome.<|eos|>']
    assert [text[s:e] for s, e in spans] == [
        '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_calls><|eos|>',
        "助手：It is snowing in Oslo, 3 C.<|eos|>",
        "助手：You are welcome.<|eos|>",
    ]
    assert template_instant().strftime("%Y-%m-%d %H:%M:%S") in text
    (row,) = tokenize_many(hunyuan, [(messages, tools)])
    trained = hunyuan.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    assert trained.count("助手：") == 2 and "<|extra_0|>" not in trained
    assert ticking_template_clock.reads == 0  # every render read the fixed clock


def test_agent_glue_after_a_hunyuan_call_holds_no_clock(hunyuan, ticking_template_clock):
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
    ]
    glue = continuation_text(hunyuan, messages, [RESULT], [WEATHER], end_tokens=["<|eos|>"])
    assert glue == "<tool_response>Oslo: 3 C, snow</tool_response><|extra_0|>"


def test_the_clock_is_put_back_after_the_outermost_render(ticking_template_clock):
    with fixed_template_clock():
        with fixed_template_clock():
            assert chat_utils.datetime.now() == template_instant()
        assert chat_utils.datetime.now() == template_instant()
    assert chat_utils.datetime is ticking_template_clock
    tok = load_tokenizer("embedded:student")
    tok.chat_template = "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}"
    assert render_chat_template(tok, HI, tokenize=False) == template_instant().strftime("%Y-%m-%d %H:%M:%S")
    assert tok.apply_chat_template(HI, tokenize=False) == "2026-12-07 12:00:01"  # outside: transformers' own


def test_threads_rendering_at_once_share_one_swap(ticking_template_clock):
    tok = load_tokenizer("embedded:student")
    tok.chat_template = "{{ strftime_now('%H:%M:%S') }}"
    seen, barrier = [], threading.Barrier(4)

    def render():
        barrier.wait()
        for _ in range(50):
            try:
                seen.append(render_chat_template(tok, HI, tokenize=False))
            except Exception as error:  # noqa: BLE001 - a thread's failure is reported as a test failure
                seen.append(repr(error))

    threads = [threading.Thread(target=render) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 200 and set(seen) == {template_instant().strftime("%H:%M:%S")}
    assert chat_utils.datetime is ticking_template_clock
