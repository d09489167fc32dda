"""The id a model writes for its tool call is the one the agent loop records (Kimi-K2's
``functions.NAME:INDEX``, Solar-Open's, Mistral Small 3.2's ``[CALL_ID]``), as vLLM's parsers keep it.

Kimi-K2-Thinking's template renders a call's id where the function name goes and heads its result
with it (``## Return of ID``); SFT trains its calls with Moonshot's ``functions.NAME:INDEX``
(:func:`lightning_agents.datamodules.conversations._moonshot_ids`). The loop recorded ``call_0_0``
instead, so the next prompt of the project's own rollouts showed the model ids it was never trained
on. Template source: ``tests/data/chat_templates/README.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template

from lightning_agents.datamodules.conversations import _render, _render_and_locate, normalize_conversation
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.tool_calls import parse_tool_calls

KIMI = Path(__file__).resolve().parents[1] / "data" / "chat_templates" / "kimi_k2_thinking.jinja"
CALL = '<|tool_call_begin|>functions.calculator:{k}<|tool_call_argument_begin|>{{"expression": "{e}"}}<|tool_call_end|>'


def _kimi_reply(*expressions: str, first: int = 0) -> str:
    calls = "".join(CALL.format(k=first + k, e=e) for k, e in enumerate(expressions))
    return f"<think>Use the tool.</think><|tool_calls_section_begin|>{calls}<|tool_calls_section_end|>"


@pytest.mark.parametrize(
    ("style", "text", "ids"),
    [
        ("kimi_k2", _kimi_reply("2+3", "4*5"), ["functions.calculator:0", "functions.calculator:1"]),
        # decoded without its marker tokens, as an engine may return it
        ("kimi_k2", 'functions.calculator:3 {"expression": "2+3"}', ["functions.calculator:3"]),
        (
            "solar_open",
            '<|tool_calls|><|tool_call:begin|>a1b2c3<|tool_call:name|>calculator<|tool_call:args|>{"expression": "2+3"}'
            "<|tool_call:end|><|calls|>",
            ["a1b2c3"],
        ),
        ("mistral", '[TOOL_CALLS]calculator[CALL_ID]Ab3dE6gH9[ARGS]{"expression": "2+3"}', ["Ab3dE6gH9"]),
        ("mistral", '[TOOL_CALLS][{"name": "calculator", "arguments": {}, "id": "Zy9xW8vU7"}]', ["Zy9xW8vU7"]),
    ],
)
def test_the_id_the_model_wrote_is_kept(style, text, ids):
    _, calls = parse_tool_calls(text, id_prefix="call_0", style=style)
    assert [c["id"] for c in calls] == ids


@pytest.mark.parametrize(
    ("style", "text", "ids"),
    [
        # the same id twice in one reply: the second would be ambiguous
        ("kimi_k2", _kimi_reply("2+3") + _kimi_reply("4*5"), ["functions.calculator:0", "call_0_1"]),
        # Mistral's templates refuse ids but nine alphanumeric characters
        ("mistral", '[TOOL_CALLS]calculator[CALL_ID]abc[ARGS]{"expression": "2+3"}', ["0call0000"]),
        # styles whose model writes no id
        ("hermes", '<tool_call>{"name": "calculator", "arguments": {}}</tool_call>', ["call_0_0"]),
    ],
)
def test_a_generated_id_where_the_model_wrote_none_it_can_keep(style, text, ids):
    _, calls = parse_tool_calls(text, id_prefix="call_0", style=style)
    assert [c["id"] for c in calls] == ids


def test_the_agent_loop_prompts_kimi_with_the_ids_sft_trains():
    from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, start_episode
    from lightning_agents.tasks.arithmetic import CalculatorTask

    tok = tokenizer_with_template(
        load_tokenizer("embedded:student"), KIMI.read_text(), None, "<|im_end|>", SPECIAL_WIDE
    )
    task = CalculatorTask()
    episode = start_episode(task, task.problems[0], tool_call_style="kimi_k2")
    apply_reply(episode, ModelReply(_kimi_reply("2+3")))
    apply_reply(episode, ModelReply(_kimi_reply("4*5", first=1)))
    assert [m["tool_call_id"] for m in episode.messages if m["role"] == "tool"] == [
        "functions.calculator:0",
        "functions.calculator:1",
    ]
    tools = episode.world.tools
    prompt = _render(tok, episode.messages, tools, add_generation_prompt=True)
    # The same conversation as SFT data, with the model's final answer: trained after that very prompt.
    record = {"messages": [*episode.messages, {"role": "assistant", "content": "5 and 20."}], "tools": tools}
    messages, tools = normalize_conversation(record)
    from lightning_agents.datamodules.conversations import template_layout

    text, spans, notes = _render_and_locate(tok, template_layout(tok), messages, tools, _render)
    assert text.startswith(prompt) and spans[-1][0] >= len(prompt)
    assert "## Return of functions.calculator:1" in prompt and "call_0_0" not in prompt
