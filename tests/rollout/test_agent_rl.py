"""Multi-turn agent rollouts for RL: exact token streams, assistant-only masks, sampler log-probs
that a training forward pass reproduces across turns, and limits/faults as observations."""

from __future__ import annotations

import pytest
import torch

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.tasks import CalculatorTask
from lightning_agents.tasks.agent_world import AgentWorldTask
from lightning_agents.template_clock import render_chat_template


def _engine():
    model, tok = load_model_and_tokenizer("embedded:student")
    return HFGenerationEngine(model.eval(), tok)


def _check_stream(engine, batch, temperature):
    """Decoding each row's assistant-masked tokens gives what the model said; the rest is glue."""
    from lightning_agents.modules.rstg import completion_logprobs

    out = batch.out
    with torch.no_grad():
        logp, _ = completion_logprobs(
            engine.model,
            out.prompt_ids,
            out.prompt_mask,
            out.completion_ids,
            out.completion_mask,
            temperature=temperature,
        )
    m = out.loss_mask.bool()
    # The sampler/trainer ratio is 1 within 1e-3 on every assistant token of every turn.
    ratio = torch.exp(logp[m] - out.logprobs[m])
    assert float((ratio - 1).abs().max()) < 1e-3
    assert torch.all(out.logprobs[~m] == 0)
    return m


def test_calculator_episodes_mask_tool_outputs_and_match_the_trainer():
    engine = _engine()
    task = CalculatorTask(split="val", n=6)
    torch.manual_seed(0)
    batch = run_agent_rl(
        engine,
        task,
        task.problems,
        num_samples=2,
        sampling=SamplingConfig(max_new_tokens=40, temperature=0.9),
        max_turns=3,
    )
    m = _check_stream(engine, batch, 0.9)
    tok = engine.tokenizer
    multi = [r for r, ro in enumerate(batch.rollouts) if ro["info"]["turns"] > 1]
    assert multi, "no episode used a tool"
    for r in multi:
        row_ids = batch.out.completion_ids[r][batch.out.completion_mask[r].bool()]
        masked_out = tok.decode(row_ids[~m[r][: len(row_ids)]])
        tools = [msg["content"] for msg in batch.rollouts[r]["traj"] if msg["role"] == "tool"]
        # Every tool result sits in the stream, outside the loss.
        assert all(t in masked_out for t in tools) and "<|im_start|>tool" in masked_out
        assert "<tool_call>" in tok.decode(row_ids[m[r][: len(row_ids)]])
    assert len(batch.rewards) == 12 and set(batch.rewards) <= {0.0, 1.0}


def test_agent_world_faults_are_observations():
    engine = _engine()
    task = AgentWorldTask(split="val", n=4)
    torch.manual_seed(1)
    batch = run_agent_rl(
        engine,
        task,
        task.problems,
        num_samples=2,
        sampling=SamplingConfig(max_new_tokens=48, temperature=1.0),
        max_turns=3,
    )
    _check_stream(engine, batch, 1.0)
    # Whatever the model wrote (the embedded student was not trained on the shop's tools: wrong
    # tool names, malformed calls), every episode ended with a reward and the errors it met were
    # answered as tool messages it could read.
    assert len(batch.rewards) == 8 and all(r in (0.0, 1.0) for r in batch.rewards)
    errors = sum(ro["info"]["tool_errors"] for ro in batch.rollouts)
    observed = sum(
        1
        for ro in batch.rollouts
        for msg in ro["traj"]
        if msg["role"] == "tool" and msg["content"].startswith("error:")
    )
    assert errors > 0 and observed == errors


def test_tool_call_limit_is_an_observation():
    engine = _engine()
    task = CalculatorTask(split="val", n=4)
    torch.manual_seed(0)
    batch = run_agent_rl(
        engine,
        task,
        task.problems,
        num_samples=2,
        sampling=SamplingConfig(max_new_tokens=40, temperature=0.9),
        max_turns=2,
        max_tool_calls=0,
    )
    tool_msgs = [
        msg for ro in batch.rollouts for msg in ro["traj"] if msg["role"] == "tool" and msg["name"] != "invalid"
    ]
    assert tool_msgs and all("tool-call limit (0) reached" in msg["content"] for msg in tool_msgs)
    assert all(ro["info"]["tool_calls"] == 0 for ro in batch.rollouts)


def test_continuation_is_the_templates_own_text():
    _, tok = load_model_and_tokenizer("embedded:student")
    msgs = [
        {"role": "user", "content": "2 + 2?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
                }
            ],
        },
    ]
    glue = continuation_text(tok, msgs, [{"role": "tool", "tool_call_id": "c", "content": "4"}], None)
    assert glue == "<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n"


def test_glue_on_qwen3_whose_last_assistant_turn_renders_differently_once_it_is_not_last(shared_data):
    # Qwen3 gives the last assistant turn an empty think block only while it is last: the
    # continuation is not an extension of the text, and multi-turn RL on Qwen3's own template
    # stopped with "not a prefix". The glue after the turn's end-of-turn token is well defined.
    from chat_template_helpers import WEATHER, tokenizer_with_template

    from lightning_agents.errors import LightningAgentsError
    from lightning_agents.models import load_tokenizer

    base = load_tokenizer("embedded:student")
    template = (shared_data / "chat_templates" / "qwen3.jinja").read_text()
    tok = tokenizer_with_template(base, template, None, "<|im_end|>")
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    new = [{"role": "tool", "tool_call_id": "c", "name": "get_weather", "content": "3 C"}]
    assert not render_chat_template(tok, msgs + new, tools=[WEATHER], tokenize=False).startswith(
        render_chat_template(tok, msgs, tools=[WEATHER], tokenize=False)
    )
    glue = continuation_text(tok, msgs, new, [WEATHER])
    assert glue == "\n<|im_start|>user\n<tool_response>\n3 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    # a template that re-renders earlier turns is still refused
    tok.chat_template = (
        "{% for m in messages | reverse %}{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    with pytest.raises(LightningAgentsError, match="renders earlier turns differently"):
        continuation_text(tok, msgs, new, None)


def test_seeded_episodes_do_not_depend_on_batching_or_the_global_stream():
    engine = _engine()
    task = CalculatorTask(split="val", n=3)
    # Temperature 1.5: at 1.0 the current student is so peaked on the calculator world that every
    # trial of a problem comes out the same, which would hide seeds shared across trials.
    sampling = SamplingConfig(max_new_tokens=40, temperature=1.5)

    def texts(batch):
        return [
            batch.out.completion_ids[r][batch.out.completion_mask[r].bool()].tolist()
            for r in range(len(batch.rollouts))
        ]

    torch.manual_seed(0)
    together = run_agent_rl(engine, task, task.problems, 2, sampling, max_turns=3, seeds=[1, 2, 3])
    torch.manual_seed(1)
    # One episode per generate call instead of all six, and the last problem alone.
    apart = run_agent_rl(engine, task, task.problems, 2, sampling, max_turns=3, batch_size=1, seeds=[1, 2, 3])
    alone = run_agent_rl(engine, task, task.problems[2:], 2, sampling, max_turns=3, seeds=[3])
    assert texts(together) == texts(apart)
    assert texts(together)[4:] == texts(alone)
    assert any(ro["info"]["turns"] > 1 for ro in together.rollouts), "no episode used a tool"
    # The trials of a problem are not copies of each other (the peaked model still repeats itself
    # on some problems).
    t = texts(together)
    assert any(t[2 * k] != t[2 * k + 1] for k in range(3))
