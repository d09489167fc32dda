"""The template clock after its review (session 45): a render path that still read transformers'
moving clock, the tokenized-row cache keyed by a time its rows may not show, and the swap leaking
into other threads' renders."""

from __future__ import annotations

import re
import threading

from chat_template_helpers import OURS, REAL_TEMPLATES, WEATHER, tokenizer_with_template

import lightning_agents.template_clock as clock
from lightning_agents.datamodules.conversations import render_conversation, template_layout
from lightning_agents.models import load_tokenizer
from lightning_agents.template_clock import fixed_template_clock, template_instant

HI = [{"role": "user", "content": "Hi"}]
# a template with {% generation %} blocks (LFM2.5's kind: SFT labels come from transformers' own
# assistant mask, render_jinja_template) that prints the time, as Hunyuan-A13B's and SmolLM3's do
MARKED_CLOCK = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|>Now: {{ strftime_now('%Y-%m-%d %H:%M:%S') }}. {{ m['content'] }}<|end|>"
    "{% else %}<|assistant|>{% generation %}{{ m['content'] }}<|end|>{% endgeneration %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_a_template_with_generation_blocks_renders_sft_rows_at_the_fixed_instant(ticking_template_clock):
    """Before: conversations._render_with_generation_marks called render_jinja_template outside
    fixed_template_clock, so each row showed the time of its own render (and ignored
    LIGHTNING_AGENTS_TEMPLATE_TIME)."""
    tok = tokenizer_with_template(
        load_tokenizer("embedded:student"), MARKED_CLOCK, "<s>", "<|end|>", re.compile(r"<\|[a-z]+\|>")
    )
    assert template_layout(tok).generation_markers
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    text, spans = render_conversation(tok, messages, None)
    assert f"Now: {template_instant():%Y-%m-%d %H:%M:%S}." in text
    assert [text[s:e] for s, e in spans] == ["Hello.<|end|>"]
    assert ticking_template_clock.reads == 0


def test_the_row_cache_is_keyed_by_the_instant_its_rows_show(monkeypatch, tmp_path):
    """Before: the key held LIGHTNING_AGENTS_TEMPLATE_TIME's text while the rows showed the instant
    of the process's first render; a process that rendered before the variable was set filled the
    cache entry of that time with rows of another, and every later run with the variable set read them."""
    from lightning_agents.datamodules.chat import tokenize_to_dataset

    path = OURS / "vllm_hunyuan_a13b.jinja"
    eos, bos, special = REAL_TEMPLATES[path]
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)
    chats = [{"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Snow."}], "tools": [WEATHER]}]  # fmt: skip
    monkeypatch.delenv(clock.TEMPLATE_TIME_ENV, raising=False)
    monkeypatch.setattr(clock, "_instant", None)
    clock.set_template_instant("2030-05-06T07:08:09")  # the process rendered before the variable was set
    monkeypatch.setenv(clock.TEMPLATE_TIME_ENV, "2026-01-02T03:04:05")
    tokenize_to_dataset(chats, tok, 4096, cache_dir=tmp_path)
    monkeypatch.setattr(clock, "_instant", None)  # a later run, the variable set from its start
    rows, _, _ = tokenize_to_dataset(chats, tok, 4096, cache_dir=tmp_path)
    assert "2026-01-02 03:04:05" in tok.decode(rows[0]["input_ids"])


def test_a_render_outside_lightning_agents_reads_transformers_clock_while_another_thread_renders(
    ticking_template_clock,
):
    """Before: the swap was process-wide, so a user's own apply_chat_template in another thread read
    lightning-agents' instant whenever a render of ours was under way."""
    tok = load_tokenizer("embedded:student")
    tok.chat_template = "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}"
    inside, leave = threading.Event(), threading.Event()

    def ours():
        with fixed_template_clock():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=ours)
    thread.start()
    try:
        assert inside.wait(10)
        theirs = tok.apply_chat_template(HI, tokenize=False)
    finally:
        leave.set()
        thread.join()
    assert theirs != f"{template_instant():%Y-%m-%d %H:%M:%S}"
    assert theirs.startswith("2026-12-07 12:00:")  # the (ticking) clock transformers reads
