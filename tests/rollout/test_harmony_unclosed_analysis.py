"""A gpt-oss analysis the model never closed is not stored as the turn's ``thinking``.

gpt-oss at sampling temperature sometimes opens the next channel without closing the analysis
(``<|channel|>analysis<|message|>R<|channel|>final<|message|>A``: no ``<|end|><|start|>assistant``).
The ``harmony`` parser reads that whole message as analysis (no answer, as before 51d0c47), but
``split_reasoning`` stored ``R<|channel|>final<|message|>A`` as the turn's ``thinking``, which
gpt-oss's template refuses ("You have passed a message containing <|channel|> tags in the thinking
field"): the next render of the history (the glue of a follow-up user turn, an HFlow retry or
verify prompt) raised, and run_agent_rl lost the whole batch.
"""

from __future__ import annotations

import pytest
from test_harmony_reasoning_stored import AGAIN, _AsksAgain, _Engine, tok  # noqa: F401 - tok: the fixture

from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.agent_turn import AgentEpisode, ModelReply, apply_reply
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.rollout.tool_calls import parse_tool_calls, split_reasoning
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

START = "<|start|>assistant"
CALL = '<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{"expression": "17*23"}'
UNCLOSED = [
    # the final channel opened inside the analysis
    "<|channel|>analysis<|message|>Add them.<|channel|>final<|message|>The answer is GOLD.",
    # a second analysis opened inside the first
    "<|channel|>analysis<|message|>Add them.<|channel|>analysis<|message|>Still adding.",
    # an analysis opened again inside the first, then a call: the call runs and its result follows
    f"<|channel|>analysis<|message|>Add.<|channel|>analysis<|message|>Call it.<|end|>{START}{CALL}",
    # a closed analysis, then an unclosed one
    f"<|channel|>analysis<|message|>First.<|end|>{START}<|channel|>analysis<|message|>Add.<|channel|>final<|message|>GOLD",
]


@pytest.mark.parametrize("text", UNCLOSED)
def test_an_unclosed_analysis_stores_a_message_the_template_renders(tok, text):  # noqa: F811
    task = CalculatorTask(split="val", n=1)
    problem = task.problems[0]
    episode = AgentEpisode(
        problem, [{"role": "user", "content": "q"}], task.environment(problem), tool_call_style="harmony"
    )
    step = apply_reply(episode, ModelReply(text))
    reasoning, rest = split_reasoning(text, "harmony")
    # the parser reads the same calls and content from the rest as from the whole reply
    assert parse_tool_calls(rest, style="harmony") == parse_tool_calls(text, style="harmony")
    # the stored turn renders, alone and with a user turn after it
    conversation = [*episode.messages, {"role": "user", "content": AGAIN}]
    render_chat_template(tok, episode.messages, tokenize=False)
    render_chat_template(tok, conversation, tokenize=False, add_generation_prompt=True)
    assert "<|channel|>" not in step.assistant.get("thinking", "")


def test_a_reopened_analysis_before_a_call_keeps_the_batch_and_the_sampled_tokens(tok):  # noqa: F811
    """No follow-up needed: the tool result's glue renders the call turn's stored thinking."""
    task = CalculatorTask(split="val", n=1)
    gold = str(task.problems[0]["answer"])
    answer = f"<|channel|>final<|message|>The answer is {gold}."
    script = [(UNCLOSED[2] + "<|call|>", "<|call|>"), (answer + "<|return|>", "<|return|>")]
    stops = sorted({*stop_token_ids(tok), tok.convert_tokens_to_ids("<|call|>")})
    engine = _Engine(tok, script, stops)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    out = batch.out
    ids, mask = out.completion_ids[0], out.loss_mask[0].bool()
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]
    assert batch.rollouts[0]["reward"] == 1.0
    assert [m["role"] for m in batch.rollouts[0]["traj"]] == ["user", "assistant", "tool", "assistant"]


def test_an_unclosed_analysis_then_a_follow_up_keeps_the_batch_and_the_sampled_tokens(tok):  # noqa: F811
    task = _AsksAgain(split="val", n=1)
    gold = str(task.problems[0]["answer"])
    answer = f"<|channel|>analysis<|message|>Again.<|end|>{START}<|channel|>final<|message|>The answer is {gold}."
    script = [(UNCLOSED[0].replace("GOLD", gold) + "<|return|>", "<|return|>"), (answer + "<|return|>", "<|return|>")]
    stops = sorted({*stop_token_ids(tok), tok.convert_tokens_to_ids("<|call|>")})
    engine = _Engine(tok, script, stops)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    out = batch.out
    ids, mask = out.completion_ids[0], out.loss_mask[0].bool()
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]
    # the stream as before 51d0c47: the sampled turns, the follow-up in the glue
    assert tok.decode(ids[out.completion_mask[0].bool()].tolist()) == (
        UNCLOSED[0].replace("GOLD", gold) + "<|return|>"
        f"<|start|>user<|message|>{AGAIN}<|end|>{START}" + answer + "<|return|>"
    )
