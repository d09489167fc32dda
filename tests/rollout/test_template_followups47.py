"""Chat-template follow-ups left by session 46: Apriel-1.6's call ids, the malformed-call notice's
format per Mistral template, and Mistral Nemo's growth with a system prompt and no tools.

Apriel-1.6 (llama.cpp's template, tests/data/tool_call_outputs/templates) writes ``, "id": ...`` into
the calls of a turn that a message follows and none into the last turn, the one the model writes (its
format, ``{"name": ..., "arguments": ...}``, has no id), and renders such a turn from after its
``[BEGIN FINAL RESPONSE]`` only. At c64837e the glue after every call turn, and so every
call -> result -> answer -> follow-up episode, stopped the batch with "renders earlier turns
differently".
"""

from __future__ import annotations

import logging
import re

import pytest
from chat_template_helpers import CALCULATOR, OUTPUTS, SPECIAL_WIDE, tokenizer_with_template
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_notice_role_all_templates import PATHS, _as_written, _AsksAgain, _botched, _DecodedEngine, _spec

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_loop
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.rollout.hf_engine import HFGenerationEngine, marked_style, stop_token_ids
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

APRIEL = OUTPUTS / "Apriel-1.6-15b-Thinker-fixed.jinja"
EXPR, NEXT = "17*23", "And what is it doubled?"
#: Apriel-1.6's replies as the model writes them after its generation prompt ("Here are my reasoning
#: steps:\n"): reasoning, the mark, the response, a newline, then its stop token <|end|>.
APRIEL_CALL = (
    "I need the calculator.\n[BEGIN FINAL RESPONSE]\n"
    f'<tool_calls>[{{"name": "calculator", "arguments": {{"expression": "{EXPR}"}}}}]</tool_calls>\n'
)
APRIEL_ANSWER = "The calculator said 391.\n[BEGIN FINAL RESPONSE]\nThe answer is 391.\n"


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _apriel(base):
    return tokenizer_with_template(base, APRIEL.read_text(), "<s>", "<|end|>", SPECIAL_WIDE)


def _glues(out, sampled):
    """The decoded runs between the sampled turns of row 0 (what the rollout glued in)."""
    ids, mask = out.completion_ids[0].tolist(), out.loss_mask[0].tolist()
    at, glues = 0, []
    for turn in sampled:
        at += len(turn)
        end = mask.index(1, at) if 1 in mask[at:] else len(mask)
        if end > at:
            glues.append(ids[at:end])
        at = end
    return glues


def test_apriel_call_result_answer_and_follow_up_keep_the_sampled_turns_and_glue_what_the_template_writes(base):
    tok = _apriel(base)
    stops = stop_token_ids(tok)
    replies = [(APRIEL_CALL + "<|end|>", "<|end|>"), (APRIEL_ANSWER + "<|end|>", "<|end|>")]
    engine = _StopsAtTheFirstStopToken(tok, replies, stops)  # the answer repeats after the follow-up
    task = _AsksAgain(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=4)
    rollout, out = batch.rollouts[0], batch.out
    assert rollout["info"]["tool_calls"] == 1 and rollout["info"]["finished"]
    assert [m["role"] for m in rollout["traj"]][-4:] == ["tool", "assistant", "user", "assistant"]
    mask = out.loss_mask[0].bool()
    assert out.completion_ids[0][mask].tolist() == [t for turn in engine.sampled for t in turn]
    result, follow_up = (tok.decode(g) for g in _glues(out, engine.sampled))
    generation_prompt = "\n<|begin_assistant|>\nHere are my reasoning steps:\n"
    # each glue is the end of the template's rendering of the conversation up to the next turn
    traj, tools = rollout["traj"], rollout["tools"]
    shown = [
        render_chat_template(tok, traj[:n], tools=tools, tokenize=False, add_generation_prompt=True) for n in (3, 5)
    ]
    assert shown[0].endswith(result) and result.startswith("\n<|begin_tool_result|>\n391")
    assert result.endswith(generation_prompt) and EXPR not in result and "<|end|>" not in result
    assert follow_up == f"\n<|begin_user|>\n{NEXT}{generation_prompt}" and shown[1].endswith(follow_up)
    # the call stays as sampled: no id the model did not write, the reasoning kept
    stream = tok.decode(out.completion_ids[0][out.completion_mask[0].bool()].tolist())
    assert '"id"' not in stream and stream.count("[BEGIN FINAL RESPONSE]") == 3


def test_apriel_glue_leaves_the_call_ids_out_and_a_template_that_reads_them_is_still_refused(base):
    tok = _apriel(base)
    call = {"id": "call_0_0", "type": "function", "function": {"name": "calculator", "arguments": {"expression": EXPR}}}
    messages = [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": "Needs a tool.\n[BEGIN FINAL RESPONSE]", "tool_calls": [call]},
    ]
    new = [{"role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "391"}]
    glue = continuation_text(tok, messages, new, [CALCULATOR], None, ["<|end|>"], "<|end|>")
    shown = render_chat_template(tok, messages + new, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True)
    assert '"id": "call_0_0"' in shown  # the template's rendering has it; the glue is what follows the call turn
    assert glue == shown[shown.index("\n<|begin_tool_result|>") :] and glue.endswith("reasoning steps:\n")
    # a template whose tool result shows the id of its call renders it differently without the
    # ids: the glue would not be what the template writes, so it is refused as before
    reads_ids = tokenizer_with_template(
        base,
        APRIEL.read_text().replace(
            "'<|begin_tool_result|>\\n' + tool_message|string",
            "'<|begin_tool_result|>\\n' + (message.tool_call_id if messages[loop.index0 - 1].tool_calls[0].id "
            "is defined else 'no id') + tool_message|string",
        ),
        "<s>",
        "<|end|>",
        SPECIAL_WIDE,
    )
    assert reads_ids.chat_template != tok.chat_template
    with pytest.raises(LightningAgentsError, match="renders earlier turns differently"):
        continuation_text(reads_ids, messages, new, [CALCULATOR], None, ["<|end|>"], "<|end|>")


def test_call_result_answer_and_follow_up_complete_on_every_real_template(base):
    """Each template's own rendering of a call, then an answer and a user's follow-up, through
    run_agent_rl: the batch completes and the trained tokens are the sampled ones on every real
    template that renders tool calls and results (at c64837e Apriel-1.6 alone stopped the batch)."""
    failed = []
    for path in PATHS:
        eos, bos, pattern = _spec(path)
        tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
        stops = stop_token_ids(tok)
        call = {
            "id": "abcDEF123",
            "type": "function",
            "function": {"name": "calculator", "arguments": {"expression": EXPR}},
        }
        try:
            text, stop = _as_written(tok, {"role": "assistant", "content": "", "tool_calls": [call]}, stops)
        except Exception:  # noqa: BLE001 - a template that renders no call of this form
            continue
        answer, end = _as_written(tok, {"role": "assistant", "content": "The answer is 25."}, stops)
        stop, end = (
            t if tok.convert_tokens_to_ids(t) in stops else tok.convert_ids_to_tokens(stops[0]) for t in (stop, end)
        )
        script = [(text + stop, stop)] + [(answer + end, end)] * 3
        engine = (_DecodedEngine if marked_style(tok) else _StopsAtTheFirstStopToken)(tok, script, stops)
        task = _AsksAgain(split="val", n=1)
        try:
            batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=4)
        except LightningAgentsError as error:
            # Phi-3.5 and Granite 20B FC render no tool results: refused by design
            if "a tool result is left out of the prompt" not in str(error):
                failed.append(f"{path.name}: {str(error)[:160]}")
            continue
        out = batch.out
        if out.completion_ids[0][out.loss_mask[0].bool()].tolist() != [t for s in engine.sampled for t in s]:
            failed.append(f"{path.name}: the trained tokens are not the sampled ones")
    assert not failed, "\n".join(failed)


# ------------------------------------------------------------------ the malformed call's notice, per template
MISTRAL_FORMS = {
    "mistral_nemo_2407.jinja": '[{"name": ..., "arguments": {...}}]',
    "vllm_mistral_v03_parallel.jinja": '[{"name": ..., "arguments": {...}}]',
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "NAME, the ARGS token and {...}",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "NAME, the ARGS token and {...}",
}


@pytest.mark.parametrize("name", sorted(MISTRAL_FORMS))
def test_the_notice_names_the_call_form_of_its_mistral_template_in_plain_text(base, name):
    """Small 3.2, Devstral and Ministral 3 write ``[TOOL_CALLS]NAME[ARGS]{...}``; the notice told every
    Mistral template v3's JSON list, and wrote ``[TOOL_CALLS]`` itself, which the tokenizer encodes as
    its control token (tekken's id 9) inside the user turn, where mistral-common never puts one."""
    path = next(p for p in PATHS if p.name == name)
    eos, bos, pattern = _spec(path)
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
    stops = stop_token_ids(tok)
    bad = _botched(tok, "mistral", stops)
    answer, end = _as_written(tok, {"role": "assistant", "content": "The answer is 10."}, stops)
    end = end if tok.convert_tokens_to_ids(end) in stops else tok.convert_ids_to_tokens(stops[0])
    engine = _DecodedEngine(tok, [(bad[0] + bad[1], bad[1]), (answer + end, end)], stops)
    task = _AsksAgain(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    assert batch.rollouts[0]["info"]["malformed_calls"] == 1
    notice = next(m["content"] for m in batch.rollouts[0]["traj"] if "malformed tool call" in str(m.get("content")))
    assert notice == f"error: malformed tool call; write the TOOL_CALLS token, then {MISTRAL_FORMS[name]}"
    # the glue's tokens over the notice's text: none is a special token of the template
    glue = _glues(batch.out, engine.sampled)[0]
    text = tok.decode(glue)
    encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoded["input_ids"] == glue  # the glue is tokenised on its own
    start = text.index(notice)
    inside = [i for i, (a, b) in zip(glue, encoded["offset_mapping"]) if start <= a and b <= start + len(notice)]
    assert inside and not set(tok.all_special_ids) & set(inside), tok.convert_ids_to_tokens(inside)


# ------------------------------------------------------------------ Nemo: a system prompt and no tools
POLICY = "Policy: " + "check each step twice. " * 8
FOLLOW_UPS = 2


class _PolicyNoTools(CalculatorTask):
    """A system prompt, no tools, and two user follow-ups (a chat task with a policy)."""

    tools = None

    def environment(self, problem):
        return None

    def prompt(self, problem):
        return [{"role": "system", "content": POLICY}, *super().prompt(problem)]

    def next_user_turn(self, messages, world, problem):
        asked = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": f"And question {asked + 1}?"}] if asked <= FOLLOW_UPS else None


_GROWS = re.compile(r"grows by about (\d+) tokens per user turn")


def _growth(base, name, caplog):
    """(the sizes the growth warnings name, the stream's growth per follow-up beyond a served request)."""
    path = next(p for p in PATHS if p.name == name)
    eos, bos, pattern = _spec(path)
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
    stops = stop_token_ids(tok)
    answer, end = _as_written(tok, {"role": "assistant", "content": "The answer is 10."}, stops)
    end = end if tok.convert_tokens_to_ids(end) in stops else tok.convert_ids_to_tokens(stops[0])
    engine = (_DecodedEngine if marked_style(tok) else _StopsAtTheFirstStopToken)(tok, [(answer + end, end)], stops)
    task = _PolicyNoTools(split="val", n=1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=agent_loop.__name__):
        batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=5)
    out, rollout = batch.out, batch.rollouts[0]
    assert sum(m["role"] == "user" for m in rollout["traj"]) == FOLLOW_UPS + 1
    stream = int(out.prompt_mask[0].sum() + out.completion_mask[0].sum())
    served = HFGenerationEngine(None, tok).render(rollout["traj"][:-1], None)
    served_tokens = len(tok.encode(served, add_special_tokens=False)) + len(engine.sampled[-1])
    said = [int(n) for r in caplog.records for n in _GROWS.findall(r.getMessage())]
    return said, (stream - served_tokens) / FOLLOW_UPS


def test_nemo_with_a_system_prompt_and_no_tools_warns_of_its_growth_once_and_others_do_not(base, caplog, monkeypatch):
    """Nemo writes its system prompt with the newest user message only; without tools nothing moves,
    so the glue appends, and at c64837e no warning said that the stream holds the prompt once per user
    turn. Measured once per template and system prompt; a template that writes a longer generation
    prompt than an assistant turn's opener (Apriel's "Here are my reasoning steps:") does not grow."""
    monkeypatch.setattr(agent_loop, "_GROWTH_MEASURED", set())
    said, grown = _growth(base, "mistral_nemo_2407.jinja", caplog)
    assert len(said) == 1 and said[0] > 20 and abs(grown - said[0]) <= 2, (said, grown)
    assert _growth(base, "mistral_nemo_2407.jinja", caplog)[0] == []  # once per template and prompt
    for control in (
        "qwen3_5_4b.jinja",
        "Apriel-1.6-15b-Thinker-fixed.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    ):
        assert _growth(base, control, caplog)[0] == [], control
