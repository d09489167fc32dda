"""Chat-template follow-ups left by session 47: the malformed-call notice of a template whose call
list closes with a tag (Apriel-1.6), and the RL stream of Apertus and Gemma 4, whose tool results are
written inside the model's turn, against what a served request shows the model.

Apriel-1.6 (llama.cpp's template, tests/data/tool_call_outputs/templates) writes calls as
``<tool_calls>[{"name": ..., "arguments": ...}]</tool_calls>`` and its system prompt teaches that form;
its style is ``json_after:<tool_calls>``, whose notice named only the opening tag.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from chat_template_helpers import OURS, OUTPUTS, REAL_TEMPLATES, SPECIAL_WIDE, tokenizer_with_template
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_notice_role_all_templates import _as_written, _AsksAgain, _DecodedEngine

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.agent_turn import (
    ModelReply,
    apply_reply,
    model_call_format,
    model_tool_call_style,
    start_episode,
)
from lightning_agents.rollout.hf_engine import HFGenerationEngine, decode_completions, stop_token_ids
from lightning_agents.rollout.tool_calls import malformed_call, parse_tool_calls
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

APRIEL = OUTPUTS / "Apriel-1.6-15b-Thinker-fixed.jinja"
APRIEL_FORM = '<tool_calls>[{"name": ..., "arguments": {...}}]</tool_calls>'


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _apriel(base):
    return tokenizer_with_template(base, APRIEL.read_text(), "<s>", "<|end|>", SPECIAL_WIDE)


def test_apriel_template_writes_its_calls_between_the_tags_the_notice_names(base):
    # the reference: the template's own rendering of a call (and its system prompt's instructions)
    tok = _apriel(base)
    call = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "calc", "arguments": {"x": 1}}}
    text = render_chat_template(
        tok,
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}],
        tokenize=False,
    )
    assert '<tool_calls>[{"name": "calc", "arguments": {"x": 1}}]</tool_calls>' in text
    assert "within <tool_calls></tool_calls> XML tags" in APRIEL.read_text()
    assert model_call_format(tok) == APRIEL_FORM


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("vllm_hunyuan_a13b.jinja", APRIEL_FORM),
        ("nemotron_nano_v2.jinja", '<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>'),
        ("vllm_internlm2_tool.jinja", None),  # no list in a tag: the style's own hint
        ("qwen3_coder.jinja", None),
    ],
)
def test_a_call_list_closed_by_its_tag_is_named_with_the_closer_and_other_forms_keep_the_style_hint(base, name, form):
    eos, bos, special = REAL_TEMPLATES[OURS / name]
    tok = tokenizer_with_template(base, (OURS / name).read_text(), bos, eos, special)
    assert model_call_format(tok) == form


def test_apriel_notice_for_a_malformed_call_states_the_template_call_form_closer_included(base):
    tok = _apriel(base)
    stops = stop_token_ids(tok)
    bad = '<tool_calls>[{"name": "calculator", "arguments": {"expression": "17*23"'  # cut off
    answer, end = _as_written(tok, {"role": "assistant", "content": "The answer is 10."}, stops)
    engine = _DecodedEngine(tok, [(bad + "<|end|>", "<|end|>"), (answer + "<|end|>", "<|end|>")], stops)
    task = _AsksAgain(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    rollout = batch.rollouts[0]
    assert rollout["info"]["malformed_calls"] == 1
    notice = next(m["content"] for m in rollout["traj"] if "malformed tool call" in str(m.get("content")))
    assert notice == f"error: malformed tool call; write {APRIEL_FORM}"


# ------------------------------------------------------------------ gpt-oss: a preamble between analyses
GPT_OSS = OURS / "gpt_oss_120b.jinja"
A1 = "<|channel|>analysis<|message|>First I think.<|end|>"
PRE = "<|start|>assistant<|channel|>commentary<|message|>Let me use the calculator.<|end|>"
A2 = "<|start|>assistant<|channel|>analysis<|message|>Second thought.<|end|>"
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>"
    '{"expression": "17*23"}<|call|>'
)


def _call_turn(reply):
    task = CalculatorTask(split="val", n=1)
    episode = start_episode(task, task.problems[0], tool_call_style="harmony")
    apply_reply(episode, ModelReply(reply))
    return episode, episode.messages[-2]


def test_gpt_oss_call_turn_keeps_a_preamble_written_between_two_analyses_where_the_model_wrote_it(base):
    # the template renders a call turn's thinking as its one analysis, and refuses content beside it:
    # the stored (and SFT-trained) text put the preamble after the second analysis
    episode, turn = _call_turn(A1 + PRE + A2 + CALL)
    assert turn["content"] == ""
    assert turn["thinking"] == "First I think.\n\nLet me use the calculator.\n\nSecond thought."
    assert episode.preambles == {len(episode.messages) - 2: "Let me use the calculator."}
    eos, bos, special = REAL_TEMPLATES[GPT_OSS]
    tok = tokenizer_with_template(base, GPT_OSS.read_text(), bos, eos, special)
    text = render_chat_template(tok, episode.messages, tools=CalculatorTask.tools, tokenize=False)
    assert (
        "<|channel|>analysis<|message|>First I think.\n\nLet me use the calculator.\n\nSecond thought.<|end|>" in text
    )


@pytest.mark.parametrize(
    ("reply", "thinking"),
    [
        (A1 + A2 + PRE + CALL, "First I think.\n\nSecond thought.\n\nLet me use the calculator."),
        (A1 + PRE + CALL, "First I think.\n\nLet me use the calculator."),
        (PRE + A1 + CALL, "Let me use the calculator.\n\nFirst I think."),
    ],
)
def test_gpt_oss_fold_follows_the_written_order_and_is_unchanged_where_the_preamble_came_last(reply, thinking):
    _, turn = _call_turn(reply)
    assert (turn["content"], turn["thinking"]) == ("", thinking)


def test_gpt_oss_call_turn_without_a_preamble_is_not_folded_and_records_none():
    episode, turn = _call_turn(A1 + CALL)
    assert (turn["content"], turn["thinking"]) == ("", "First I think.") and episode.preambles == {}


# ------------------------------------------------------------------ Apertus and Gemma 4: results in the model's turn
APERTUS = OURS / "apertus_8b_instruct.jinja"
GEMMA4_PATH = OUTPUTS / "google-gemma-4-31B-it.jinja"
APERTUS_CALL = '<|tools_prefix|>[{"calculator": {"expression": "8+2"}}]'
GEMMA4_CALL = '<|tool_call>call:calculator{expression:<|"|>8+2<|"|>}<tool_call|>'


def _real(base, path):
    eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(base, path.read_text(), bos, eos, special)


def _contexts(tok, call, call_stop, answer_stop, calls):
    """A calculator episode of ``calls`` identical calls (a retry gets the same result) and an answer,
    sampled up to each turn's stop token: per sampled turn, the stream's tokens before it and the
    tokens of the served request for the same history (the template's rendering with the generation
    prompt, tokenized as vLLM's chat server and the HF engine tokenize it)."""
    replies = [(call + call_stop, call_stop)] * calls + [("It is 10." + answer_stop, answer_stop)]
    engine = _StopsAtTheFirstStopToken(tok, replies, stop_token_ids(tok))
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=calls + 1)
    rollout, out = batch.rollouts[0], batch.out
    assert rollout["info"]["tool_calls"] == calls and rollout["info"]["finished"]
    served = HFGenerationEngine(None, tok)
    traj, tools = rollout["traj"], rollout["tools"]
    assert [m["role"] for m in traj] == ["user"] + ["assistant", "tool"] * calls + ["assistant"]
    ids = [*tok(served.render(traj[:1], tools), add_special_tokens=False)["input_ids"], *out.completion_ids[0].tolist()]
    first = len(ids) - out.completion_ids.shape[1]
    mask = [0] * first + out.loss_mask[0].tolist()
    starts = [i for i in range(first, len(ids)) if mask[i] and not mask[i - 1]]
    assert len(starts) == calls + 1
    return [
        (ids[:at], tok(served.render(traj[: 1 + 2 * k], tools), add_special_tokens=False)["input_ids"])
        for k, at in enumerate(starts)
    ]


def test_apertus_calls_are_read_in_the_form_its_template_writes_with_and_without_the_markers(base):
    tok = _real(base, APERTUS)
    assert model_tool_call_style(tok) == "apertus"
    tools = CalculatorTask.tools
    expected = [("calculator", {"expression": "8+2"})]
    for text in (
        APERTUS_CALL + "<|tools_suffix|>",
        'I\'ll compute.<|tools_prefix|>[{"calculator": {"expression": "8+2"}}]',
    ):
        content, calls = parse_tool_calls(text, style="apertus", tools=tools)
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == expected
        assert "tools_prefix" not in content
    # the engines decode Apertus's replies with its call markers (MARKED_STYLES), less the stop
    ids = tok(APERTUS_CALL + "<|tools_suffix|>", add_special_tokens=False)["input_ids"]
    (marked,) = decode_completions(tok, torch.tensor([ids]), torch.ones(1, len(ids)), stop_token_ids(tok))
    assert marked == APERTUS_CALL
    assert parse_tool_calls(marked, style="apertus", tools=tools)[1][0]["function"]["name"] == "calculator"
    # a list without the marker is no call, as in vLLM's parser; a broken block is a botched call
    bare = '[{"calculator": {"expression": "8+2"}}]'
    assert parse_tool_calls(bare, style="apertus", tools=tools) == (bare, [])
    botched = '<|tools_prefix|>[{"calculator": {"expression": '
    assert parse_tool_calls(botched, style="apertus", tools=tools)[1] == [] and malformed_call(botched, "apertus")


def test_apertus_call_result_answer_stream_is_the_served_request_token_for_token(base):
    # before: Apertus's calls were read as hermes blocks, so its first call was taken for the answer
    tok = _real(base, APERTUS)
    for stream, served in _contexts(tok, APERTUS_CALL, "<|tools_suffix|>", "<|assistant_end|>", calls=1):
        assert stream == served, tok.decode(stream[len(os.path.commonprefix([stream, served])) :])


def test_apertus_retried_call_keeps_the_generation_prompt_it_was_sampled_after(base):
    # the one intended difference (docs/rstg.md): every served request after a result ends with the
    # generation prompt <|assistant_start|>, which the template does not write again between the
    # result and the next call of the same turn; the stream keeps the one each call was sampled after
    tok = _real(base, APERTUS)
    start = tok.convert_tokens_to_ids("<|assistant_start|>")
    contexts = _contexts(tok, APERTUS_CALL, "<|tools_suffix|>", "<|assistant_end|>", calls=2)
    assert contexts[0][0] == contexts[0][1] and contexts[1][0] == contexts[1][1]
    stream, served = contexts[2]
    at = len(contexts[1][0])  # where the second call was sampled, after <|assistant_start|>
    assert stream[at - 1] == start and stream[: at - 1] + stream[at:] == served


@pytest.mark.parametrize("calls", [1, 2])
def test_gemma4_stream_differs_from_served_requests_only_by_the_empty_thought_the_prompt_opened(base, calls):
    # Gemma 4's generation prompt (thinking off) opens the turn with an empty thought channel, which a
    # served request no longer shows once the turn is in the history: the stream keeps it, as it keeps
    # every context a turn was sampled in (docs/rstg.md); the rest, results in the model's turn and a
    # retried call with the same result, is the served request token for token
    tok = _real(base, GEMMA4_PATH)
    empty = tok("<|channel>thought\n<channel|>", add_special_tokens=False)["input_ids"]
    contexts = _contexts(tok, GEMMA4_CALL, "<|tool_response>", "<turn|>", calls=calls)
    assert contexts[0][0] == contexts[0][1]
    at = len(contexts[0][0]) - len(empty)
    assert contexts[0][0][at:] == empty
    for stream, served in contexts[1:]:
        assert stream[at : at + len(empty)] == empty and stream[:at] + stream[at + len(empty) :] == served
