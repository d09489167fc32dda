"""The RL glue renders the reasoning-free history up front only for a template with a final closer.

655dee6 renders the history without its reasoning keys on every glue whose messages hold one
(Solar-Open's ``reasoning``, Gemma 4's and Mistral's ``reasoning_content``, gpt-oss's ``thinking``),
before the paths that do not need it; only gpt-oss's final-closer swap (``<|return|>`` -> ``<|end|>``)
reads it there. Every other template paid one more full render of the history per turn (quadratic
in the episode's length) for a result it threw away; the last resort renders it when it gets there.
"""

from __future__ import annotations

from chat_template_helpers import CALCULATOR, OUTPUTS, SPECIAL_WIDE, tokenizer_with_template

import lightning_agents.rollout.agent_loop as agent_loop
from lightning_agents.models import load_tokenizer

CALL = {
    "id": "call_0_0",
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expression": "17*23"}'},
}


def _renders(monkeypatch, tok, messages, new):
    count = [0]
    real = agent_loop.render_chat_template

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(agent_loop, "render_chat_template", counting)
    glue = agent_loop.continuation_text(tok, messages, new, [CALCULATOR], None, ["<|end|>", "<|calls|>"], "<|calls|>")
    monkeypatch.setattr(agent_loop, "render_chat_template", real)
    return glue, count[0]


def test_solar_open_glue_after_a_reasoning_call_renders_as_without_reasoning(monkeypatch):
    path = OUTPUTS / "upstage-Solar-Open-100B.jinja"
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), None, "<|end|>", SPECIAL_WIDE)
    user = {"role": "user", "content": "What is 17*23?"}
    call = {"role": "assistant", "content": "", "tool_calls": [CALL]}
    result = [{"role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "391"}]
    plain_glue, plain_renders = _renders(monkeypatch, tok, [user, call], result)
    glue, renders = _renders(monkeypatch, tok, [user, {**call, "reasoning": "Multiply."}], result)
    assert glue == plain_glue
    assert renders == plain_renders
