"""Mends of the session-43 review of ea7077c (call ids a model writes again in a later turn).

- H1: ids an engine parsed (an HFlow endpoint's ``reply.tool_calls``) are never renamed for
  repeating: vLLM's kimi_k2 parser returns the id the model wrote (vllm-project/vllm
  vllm/entrypoints/openai/tool_parsers/kimi_k2_tool_parser.py: ``ToolCall(id=function_id)``),
  ``functions.calculator:0`` in every turn, and a history with the second renamed ``call_1_0``
  rendered a result headed with an id no call of the template shows.
- M1: on templates that show the id the model wrote (Mistral, Solar-Open), a call under an id an
  earlier call has is answered as malformed: renamed, the trained token stream held a result
  answering an id no sampled call has.
- L1: SFT renames such a repeat in the call and its result on templates that show ids (Solar-Open
  named the tool ``calculatorcalculator``).

Templates: tests/data/tool_call_outputs/templates (moonshotai/Kimi-K2-Instruct's first template,
upstage/Solar-Open-100B, Mistral Small 3.2) and tests/data/chat_templates (Mistral Nemo 2407, vLLM's
Mistral v0.3 example).
"""

from __future__ import annotations

import json
import re

import pytest
from test_rollouts_session43 import KIMI, MISTRAL_WRITES, NEMO, SMALL, SOLAR, SOLAR_CALL, V03, _replies, _tok

from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, start_episode
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template


def _kimi_call(expr: str) -> list[dict]:
    # what a vLLM server with --tool-call-parser kimi_k2 returns for Kimi-K2-Instruct's first call
    # of a message: the id the model wrote, numbered within its message
    return [
        {
            "id": "functions.calculator:0",
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": expr})},
        }
    ]


def test_an_endpoint_kimi_k2_history_heads_each_result_with_a_call_it_shows():
    # An HFlow OpenAIBackbone states no tool_call_style (hermes), so the kimi_k2 exemption never applied.
    task = CalculatorTask(split="val", n=1)
    problem = task.problems[0]
    e = start_episode(task, problem, messages=task.prompt(problem), tool_call_style="hermes", alphanumeric_ids=None)
    apply_reply(e, ModelReply("", _kimi_call("17*23")))
    step = apply_reply(e, ModelReply("", _kimi_call("391+1")))
    assert [r["content"] for r in step.replies] == ["392"] and e.malformed == 0
    text = render_chat_template(_tok(KIMI), e.messages, tools=task.tools, tokenize=False, add_generation_prompt=True)
    shown = set(re.findall(r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>", text))
    answered = re.findall(r"## Return of (.*?)\\n", text)
    assert len(answered) == 2 and set(answered) <= shown, (answered, shown)


#: (the ids of the sampled calls, (id, content) of each result) in a decoded stream, per template.
STREAM = {
    NEMO: (r'"id": "([A-Za-z0-9]{9})"', r'\{"content": (.*?), "call_id": "([A-Za-z0-9]{9})"\}', True),
    V03: (r'"id": "([A-Za-z0-9]{9})"', r'\{"content": (.*?), "call_id": "([A-Za-z0-9]{9})"\}', True),
    SMALL: (
        r"\[CALL_ID\]([A-Za-z0-9]{9})",
        r"\[TOOL_RESULTS\]([A-Za-z0-9]{9})\[TOOL_CONTENT\](.*?)\[/TOOL_RESULTS\]",
        False,
    ),
    SOLAR: (
        r"<\|tool_call:begin\|>(.*?)<\|tool_call:name\|>",
        r"<\|tool_response:begin\|>(.*?)<\|tool_response:name\|>.*?<\|tool_response:result\|>(.*?)<\|tool_response:end\|>",
        False,
    ),
}


@pytest.mark.parametrize("path", list(STREAM), ids=lambda p: p.stem)
def test_a_mistral_result_in_the_trained_stream_names_a_call_id_the_stream_has(path):
    tok = _tok(path)
    from test_agent_rl_real_templates import _ScriptedTokens

    engine = _ScriptedTokens(tok, _replies(MISTRAL_WRITES.get(path, SOLAR_CALL)))
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    out = batch.out
    stream = tok.decode(out.completion_ids[0][out.completion_mask[0].bool()].tolist())
    call_pattern, result_pattern, content_first = STREAM[path]
    called = set(re.findall(call_pattern, stream))
    results = [(r[1], r[0]) if content_first else r for r in re.findall(result_pattern, stream)]
    ran = [(i, content) for i, content in results if not content.startswith("error:")]
    # every result a tool gave answers a call the model sampled under that id
    assert ran and all(i in called for i, _ in ran), (path.name, results, called)
    # the call under the repeated id is told the rule instead of being run under another id
    errors = [content for _, content in results if content.startswith("error:")]
    # Mistral's notice is a user message (agent_turn.model_notice_role): [INST]error: ...[/INST]
    errors += re.findall(r"(error: malformed tool call.*?)\[/INST\]", stream)
    assert len(errors) == 1 and "a call's id must be new in the episode" in errors[0], results
    assert batch.rollouts[0]["info"]["tool_calls"] == 1


def test_an_sft_row_names_each_solar_open_result_by_its_own_call():
    from lightning_agents.datamodules.conversations import normalize_conversation, tokenize_conversation

    tok = _tok(SOLAR)

    def call(expr):
        return {
            "id": "call_0",
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": expr})},
        }

    conv = {
        "messages": [
            {"role": "user", "content": "What is 17*23+1?"},
            {"role": "assistant", "content": "", "tool_calls": [call("17*23")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "391"},
            {"role": "assistant", "content": "", "tool_calls": [call("391+1")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "392"},
            {"role": "assistant", "content": "It is 392."},
        ],
        "tools": CalculatorTask(split="val", n=1).tools,
    }
    row = tokenize_conversation(tok, *normalize_conversation(conv))
    text = tok.decode(row["input_ids"])
    assert text.count("<|tool_response:name|>calculator<|tool_response:result|>") == 2, text
    assert "calculatorcalculator" not in text
    # the second call is trained under the id it is stored with, which its result names
    trained = tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    second = re.findall(r"<\|tool_call:begin\|>(.*?)<\|tool_call:name\|>", trained)
    assert len(second) == 2 and second[0] == "call_0" != second[1], trained
    assert f"<|tool_response:begin|>{second[1]}<|tool_response:name|>calculator" in text


def _sft_text(path, call_id):
    from lightning_agents.datamodules.conversations import normalize_conversation, tokenize_conversation

    def call(expr):
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": "calculator", "arguments": {"expression": expr}},
        }

    conv = {
        "messages": [
            {"role": "user", "content": "What is 17*23+1?"},
            {"role": "assistant", "content": "", "tool_calls": [call("17*23")]},
            {"role": "tool", "tool_call_id": call_id, "content": "391"},
            {"role": "assistant", "content": "", "tool_calls": [call("391+1")]},
            {"role": "tool", "tool_call_id": call_id, "content": "392"},
            {"role": "assistant", "content": "It is 392."},
        ],
        "tools": CalculatorTask(split="val", n=1).tools,
    }
    tok = _tok(path)
    return tok.decode(tokenize_conversation(tok, *normalize_conversation(conv))["input_ids"])


def test_an_sft_row_on_mistral_nemo_gives_a_repeated_id_nine_characters_of_its_own():
    text = _sft_text(NEMO, "Ab3dE5gH9")
    called = re.findall(r'"id": "([A-Za-z0-9]{9})"', text)
    answered = re.findall(r'"call_id": "([A-Za-z0-9]{9})"', text)
    assert called == answered and len(set(called)) == 2 and called[0] == "Ab3dE5gH9", text


def test_an_sft_row_on_kimi_k2_keeps_the_index_its_template_writes_in_every_turn():
    # the first Kimi-K2 template numbers calls per message: functions.calculator:0 in both turns is its own form
    text = _sft_text(KIMI, "functions.calculator:0")
    assert text.count("## Return of functions.calculator:0") == 2, text
