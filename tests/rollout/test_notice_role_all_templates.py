"""A malformed call, an answer, the user's follow-up and an answer, through run_agent_rl on every real
chat template (tests/data/chat_templates, tests/data/tool_call_outputs/templates, ../shared/data's):
the batch completes, the trained tokens are the sampled ones, and the notice and the follow-up are in
the glue. The model's replies are the template's own rendering of a call (cut inside its arguments)
and of an answer, so each template is tried in its own call format.

At 4b67577 (a lone ``tool`` notice everywhere) gpt-oss, MiniMax-M2, Gemma 3 pythonic, Ministral-3
Reasoning and chujiezheng's ChatML stopped the batch with a TemplateError; at a4476fa Mistral Nemo,
v0.3 and Small 3.2 still did ("roles must alternate": their notice was a tool message, and they move
their tool list to the last user message, so a user notice was not taken).
"""

from __future__ import annotations

import os

import pytest
from chat_template_helpers import (
    CALCULATOR,
    GEMMA4,
    OURS,
    OUTPUTS,
    REAL_TEMPLATES,
    SHARED,
    SPECIAL_WIDE,
    tokenizer_with_template,
)
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_reasoning_special_tokens import _DecodesLikeTheEngines

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_turn
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.hf_engine import marked_style, stop_token_ids
from lightning_agents.rollout.tool_calls import malformed_call, parse_tool_calls
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

NEXT, EXPR = "And what is it doubled?", "17*23"
PATHS = sorted([*OURS.glob("*.jinja"), *OUTPUTS.glob("*.jinja"), *(SHARED.glob("*.jinja") if SHARED.is_dir() else [])])


class _DecodedEngine(_DecodesLikeTheEngines, _StopsAtTheFirstStopToken):
    """Texts as the engines decode them (a marked style's markers kept)."""


class _AsksAgain(CalculatorTask):
    def next_user_turn(self, messages, world, problem):
        return [{"role": "user", "content": NEXT}] if sum(m["role"] == "user" for m in messages) == 1 else None


def _spec(path):
    if path in REAL_TEMPLATES:
        return REAL_TEMPLATES[path]
    text = path.read_text()
    for eos, bos in (("<|im_end|>", None), ("<|eot_id|>", "<|begin_of_text|>"), ("</s>", "<s>"), ("<|end|>", None)):
        if eos in text:
            return eos, bos, GEMMA4 if "<turn|>" in text else SPECIAL_WIDE
    return "</s>", None, SPECIAL_WIDE


def _as_written(tok, message, stops):
    """A reply as the template renders it after its generation prompt, and the stop token after it."""
    user = [{"role": "user", "content": "What is 17*23?"}]
    prompt = render_chat_template(tok, user, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True)
    full = render_chat_template(tok, [*user, message], tools=[CALCULATOR], tokenize=False)
    common = os.path.commonprefix([prompt, full])
    if common != prompt and "<" in common:  # Gemma 4's and QwQ's prompts open what the turn does not
        common = common[: common.rfind("<")]
    rest = full[len(common) :]
    hits = sorted((rest.find(t), t) for t in map(tok.convert_ids_to_tokens, stops) if t and t in rest)
    return (rest[: hits[0][0]], hits[0][1]) if hits else (rest, tok.convert_ids_to_tokens(stops[0]))


def _botched(tok, style, stops):
    """The template's own call to calculator, cut or broken so that it reads as malformed."""
    for arguments in ({"expression": EXPR}, '{"expression": "17*23"}'):
        call = {"id": "abcDEF123", "type": "function", "function": {"name": "calculator", "arguments": arguments}}
        try:
            text, stop = _as_written(tok, {"role": "assistant", "content": "", "tool_calls": [call]}, stops)
            break
        except Exception:  # noqa: BLE001 - a template that takes only string arguments
            continue
    if EXPR not in text:  # no call rendered: the style's own (hermes) form
        text, stop = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*23"}}\n</tool_call>', stop
    cuts = (text.index(EXPR) + 3, text.index("calculator") + 4 if "calculator" in text else 0)
    for piece in (*(text[:cut] for cut in cuts), text.replace(EXPR + '"}', EXPR + '"', 1)):
        if (
            piece
            and piece != text
            and malformed_call(piece, style)
            and not parse_tool_calls(piece, "c", style, [CALCULATOR])[1]
        ):
            return piece, stop if tok.convert_tokens_to_ids(stop) in stops else tok.convert_ids_to_tokens(stops[0])
    return None


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_a_malformed_call_then_a_follow_up_keeps_the_batch_and_the_sampled_tokens(base, path):
    eos, bos, pattern = _spec(path)
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
    style, stops = agent_turn.model_tool_call_style(tok), stop_token_ids(tok)
    bad = _botched(tok, style, stops)
    if bad is None:
        pytest.skip(f"no cut of {path.name}'s call reads as malformed in style {style}")
    task = _AsksAgain(split="val", n=1)
    answer, end = _as_written(
        tok, {"role": "assistant", "content": f"The answer is {task.problems[0]['answer']}."}, stops
    )
    end = end if tok.convert_tokens_to_ids(end) in stops else tok.convert_ids_to_tokens(stops[0])
    script = [(bad[0] + bad[1], bad[1]), (answer + end, end), (answer + end, end)]
    engine = (_DecodedEngine if marked_style(tok) else _StopsAtTheFirstStopToken)(tok, script, stops)
    try:
        batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=4)
    except LightningAgentsError as error:
        if "a tool result is left out of the prompt" in str(error):
            pytest.skip(f"{path.name} renders no tool results: refused for every tool episode")
        raise
    rollout, out = batch.rollouts[0], batch.out
    assert rollout["info"]["malformed_calls"] == 1
    ids, mask = out.completion_ids[0], out.loss_mask[0].bool()
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]
    glue = tok.decode(ids[~mask & out.completion_mask[0].bool()].tolist())
    assert "error: malformed tool call" in glue and NEXT in glue
