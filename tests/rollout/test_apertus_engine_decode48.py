"""Apertus's replies as the engines hand them over (review of session 48's `apertus` style).

Apertus's call markers ``<|tools_prefix|>``/``<|tools_suffix|>`` are special tokens (llama.cpp lists
them as preserved tokens; vLLM's ``apertus`` tool parser turns ``skip_special_tokens`` off so that the
server hands them over). Decoded without them (``apertus`` outside ``hf_engine.MARKED_STYLES``), a
botched call and a call to a tool not offered were taken for the final answer, and an answer that ends
with a list of calls it quotes was taken for a call; the stream tests of session 48 decoded with the
markers (``_StopsAtTheFirstStopToken``), which no engine does for Apertus.
"""

from __future__ import annotations

import pytest
from chat_template_helpers import OURS, REAL_TEMPLATES, tokenizer_with_template
from test_notice_role_all_templates import _DecodedEngine

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.tasks import CalculatorTask

APERTUS = OURS / "apertus_8b_instruct.jinja"
SUFFIX, END = "<|tools_suffix|>", "<|assistant_end|>"


@pytest.fixture(scope="module")
def tok():
    eos, bos, special = REAL_TEMPLATES[APERTUS]
    return tokenizer_with_template(load_tokenizer("embedded:student"), APERTUS.read_text(), bos, eos, special)


def _episode(tok, replies, max_turns=3):
    engine = _DecodedEngine(tok, [(text + stop, stop) for text, stop in replies], stop_token_ids(tok))
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=max_turns)
    return batch.rollouts[0]


def test_an_apertus_botched_call_as_the_engines_hand_it_over_gets_the_notice(tok):
    botched = '<|tools_prefix|>[{"calculator": {"expression": 17*23}}]'  # not JSON: a bare product
    rollout = _episode(tok, [(botched, SUFFIX), ("It is 391.", END)])
    assert rollout["info"]["malformed_calls"] == 1
    notice = next(m["content"] for m in rollout["traj"] if "malformed tool call" in str(m.get("content")))
    assert notice == 'error: malformed tool call; write <|tools_prefix|>[{"NAME": {...}}]<|tools_suffix|>'


def test_an_apertus_call_to_a_tool_not_offered_is_a_call_as_vllm_reads_it(tok):
    # vLLM's apertus parser returns the call whatever its name; the rollout answers an unknown tool
    rollout = _episode(tok, [('<|tools_prefix|>[{"calc": {"expression": "8+2"}}]', SUFFIX), ("It is 10.", END)])
    roles = [m["role"] for m in rollout["traj"]]
    assert roles == ["user", "assistant", "tool", "assistant"], roles
    assert rollout["traj"][1]["tool_calls"][0]["function"]["name"] == "calc"


def test_an_apertus_answer_that_ends_with_a_list_it_quotes_is_the_answer(tok):
    # it stopped at <|assistant_end|>, and wrote no <|tools_prefix|>: vLLM reads no call in it
    answer = 'I would call [{"calculator": {"expression": "8+2"}}]'
    rollout = _episode(tok, [(answer, END)], max_turns=1)
    assert [m["role"] for m in rollout["traj"]] == ["user", "assistant"]
    assert rollout["traj"][-1]["content"] == answer and not rollout["traj"][-1].get("tool_calls")
