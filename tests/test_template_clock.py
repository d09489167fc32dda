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
import datetime as dt
import json
import threading

import pytest
import transformers.utils.chat_template_utils as chat_utils
from chat_template_helpers import OURS, REAL_TEMPLATES, WEATHER, tokenizer_with_template

from lightning_agents.datamodules.conversations import normalize_conversation, render_conversation, tokenize_many
from lightning_agents.errors import LightningAgentsError
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


def test_the_environment_fixes_the_instant_for_every_process(monkeypatch, hunyuan):
    import lightning_agents.template_clock as clock

    monkeypatch.setattr(clock, "_instant", None)
    monkeypatch.setenv(clock.TEMPLATE_TIME_ENV, "2026-01-02T03:04:05")
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    text = render_chat_template(hunyuan, messages, tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    assert "当前时间：2026-01-02 03:04:05 星期五" in text

    monkeypatch.setattr(clock, "_instant", None)
    monkeypatch.setenv(clock.TEMPLATE_TIME_ENV, "2026-01-02T03:04:05Z")  # UTC, as `date -u -Iseconds` may write it
    assert template_instant() == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)

    monkeypatch.setattr(clock, "_instant", None)
    monkeypatch.setenv(clock.TEMPLATE_TIME_ENV, "tomorrow")
    with pytest.raises(LightningAgentsError, match="LIGHTNING_AGENTS_TEMPLATE_TIME='tomorrow' is not an ISO 8601"):
        render_chat_template(hunyuan, messages, tools=[WEATHER], tokenize=False)


def _weather_chats(n):
    return [
        {
            "messages": [
                {"role": "user", "content": f"Weather in Oslo, day {i}?"},
                {"role": "assistant", "content": f"Snow on day {i}."},
            ],
            "tools": [WEATHER],
        }
        for i in range(n)
    ]


def test_tokenizer_workers_render_at_their_parents_instant(monkeypatch, hunyuan):
    # datasets.map workers may start before the parent ever rendered (or be spawned): each took its own time
    import lightning_agents.template_clock as clock
    from lightning_agents.datamodules.chat import _tokenize_batch

    monkeypatch.setattr(clock, "_instant", dt.datetime(2030, 5, 6, 7, 8, 9))  # the worker's own clock
    batch = {"where": ["chat 0"], "conversation": [json.dumps(c) for c in _weather_chats(1)]}
    out = _tokenize_batch(batch, hunyuan, 4096, False, template_time="2026-01-02T03:04:05")
    assert "2026-01-02 03:04:05" in hunyuan.decode(out["input_ids"][0])


def test_an_instant_set_in_the_environment_keys_the_tokenized_cache(monkeypatch, hunyuan, tmp_path):
    import lightning_agents.template_clock as clock
    from lightning_agents.datamodules.chat import tokenize_to_dataset

    def rows(time):
        monkeypatch.setattr(clock, "_instant", None)
        if time:
            monkeypatch.setenv(clock.TEMPLATE_TIME_ENV, time)
        else:
            monkeypatch.delenv(clock.TEMPLATE_TIME_ENV, raising=False)
        dataset, errors, dropped = tokenize_to_dataset(_weather_chats(2), hunyuan, 4096, cache_dir=tmp_path)
        return [hunyuan.decode(ids) for ids in dataset["input_ids"]]

    unset = rows(None)
    assert all(template_instant().strftime("%Y-%m-%d %H:%M:%S") in text for text in unset)
    assert all("2026-01-02 03:04:05" in text for text in rows("2026-01-02T03:04:05"))
    assert all("2027-01-02 03:04:05" in text for text in rows("2027-01-02T03:04:05"))
    assert rows(None) == unset  # unset: the rows cached the first time, whatever the time now
    assert len(list(tmp_path.iterdir())) == 3
