"""Call ids a model writes are unique across its episode, not only within one reply.

A model that wrote the same id in two turns (``call_0``, one Mistral nine-character id, Solar-Open's
own) had both calls stored under it, so on templates that pair a result with its call by id the
later result was paired with the earlier call: Solar-Open's template names a result's tool by
looking its id up among every call of the conversation (``calculatorcalculator``), and Mistral's
templates showed two results for one id. Where the template shows the id the model wrote (Mistral,
Solar-Open) the later call is answered as malformed, stating the rule, and the sampled tokens are
trained as sampled (a renamed id put a result answering an id no sampled call has into the trained
stream); where it shows none (Llama 3.1) the later call is renamed, in the call and in its result.

Templates: tests/data/tool_call_outputs/templates (upstage/Solar-Open-100B, Mistral Small 3.2,
moonshotai/Kimi-K2-Instruct), tests/data/chat_templates (Mistral Nemo 2407, vLLM's Mistral v0.3
example) and ../shared/data/chat_templates (Qwen3, Llama 3.1; skipped when absent)."""

from __future__ import annotations

import re

import pytest
from chat_template_helpers import OURS, OUTPUTS, REAL_TEMPLATES, SPECIAL_WIDE, tokenizer_with_template
from test_agent_rl_real_templates import HERMES, _ScriptedTokens, _tokenizer
from test_agent_rollout_session42 import _ids, _Texts

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_loop, run_agent_rl
from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, start_episode
from lightning_agents.tasks import CalculatorTask

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
SMALL = OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja"
KIMI = OUTPUTS / "moonshotai-Kimi-K2.jinja"
NEMO = OURS / "mistral_nemo_2407.jinja"
V03 = OURS / "vllm_mistral_v03_parallel.jinja"
NINE = re.compile(r"[A-Za-z0-9]{9}")
SOLAR_CALL = (
    "<|tool_calls|><|tool_call:begin|>a1b2c3<|tool_call:name|>calculator<|tool_call:args|>"
    '{"expression": "EXPR"}<|tool_call:end|><|calls|>'
)
#: Each model's call to calculator(EXPR) with the id Ab3dE5gH9 written in its own format.
MISTRAL_WRITES = {
    NEMO: '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "EXPR"}, "id": "Ab3dE5gH9"}]',
    V03: '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "EXPR"}, "id": "Ab3dE5gH9"}]',
    SMALL: '[TOOL_CALLS]calculator[CALL_ID]Ab3dE5gH9[ARGS]{"expression": "EXPR"}',
}


def _tok(path):
    eos, bos, special = REAL_TEMPLATES.get(path, ("</s>", "<s>", SPECIAL_WIDE))
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


def _replies(call):
    return [call.replace("EXPR", "17*23"), call.replace("EXPR", "391+1"), "It is 392."]


def _rl(tok, replies):
    engine = _ScriptedTokens(tok, replies)
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    out, mask = batch.out, batch.out.loss_mask[0].bool()
    # the sampled tokens are trained as sampled, the renamed id notwithstanding
    assert out.completion_ids[0][mask].tolist() == [t for ids in engine.sampled for t in ids]
    glue = tok.decode(out.completion_ids[0][~mask & out.completion_mask[0].bool()].tolist())
    return batch.rollouts[0], glue


def _unique_and_paired(traj):
    calls, results = _ids(traj)
    assert len(calls) == 2 and calls == results and len(set(calls)) == 2, (calls, results)
    return calls


#: What the observation answering a call under a repeated id says.
NEW_ID_RULE = "a call's id must be new in the episode"


def test_solar_open_answers_a_call_under_an_id_the_model_wrote_before_as_malformed():
    tok = _tok(SOLAR)
    rollout, glue = _rl(tok, _replies(SOLAR_CALL))
    info = rollout["info"]
    assert info["tool_calls"] == 1 and info["malformed_calls"] == 1 and info["finished"]
    # the template looks the result's id up among every call: both calls answered to it before
    assert "calculatorcalculator" not in glue and "<|tool_response:name|>calculator<|tool_response:result|>391" in glue
    assert f"{NEW_ID_RULE}, not 'a1b2c3'" in glue
    assert _ids(rollout["traj"])[0] == ["a1b2c3"]  # the one call run keeps the id the model wrote
    # the text path (rollout command, HFlow) follows the same rule
    engine = _Texts(tok, _replies(SOLAR_CALL))
    task = CalculatorTask(split="val", n=1)
    rollout = run_agent_loop(engine, task.problems, trials=1, task=task, max_turns=3)[0]
    assert _ids(rollout["traj"])[0] == ["a1b2c3"]
    assert "calculatorcalculator" not in engine.prompts[-1] and NEW_ID_RULE in engine.prompts[-1]


@pytest.mark.parametrize("path", list(MISTRAL_WRITES), ids=lambda p: p.stem)
def test_a_nine_character_id_written_in_two_turns_answers_the_second_call_as_malformed(path):
    tok = _tok(path)
    rollout, glue = _rl(tok, _replies(MISTRAL_WRITES[path]))
    assert rollout["info"]["tool_calls"] == 1 and rollout["info"]["malformed_calls"] == 1
    calls, results = _ids(rollout["traj"])
    # the second call's notice is a user message (agent_turn.model_notice_role)
    assert calls == results == ["Ab3dE5gH9"] and rollout["traj"][4]["role"] == "user"
    assert glue.count("Ab3dE5gH9") == 2  # one result for the id, and the rule naming it
    assert f"{NEW_ID_RULE}, not 'Ab3dE5gH9'" in glue
    # the text path shows the model the same
    engine = _Texts(tok, _replies(MISTRAL_WRITES[path]))
    task = CalculatorTask(split="val", n=1)
    rollout = run_agent_loop(engine, task.problems, trials=1, task=task, max_turns=3)[0]
    assert _ids(rollout["traj"])[0] == ["Ab3dE5gH9"] and NEW_ID_RULE in engine.prompts[-1]


def test_an_id_the_parser_made_up_takes_none_the_episode_already_has():
    # turn 1 writes the id the parser would make up for turn 2's first call, which writes none
    task = CalculatorTask(split="val", n=1)
    episode = start_episode(task, task.problems[0], tool_call_style="mistral", alphanumeric_ids=True)
    apply_reply(episode, ModelReply('[TOOL_CALLS]calculator[CALL_ID]0call1000[ARGS]{"expression": "1+1"}'))
    step = apply_reply(episode, ModelReply('[TOOL_CALLS]calculator[ARGS]{"expression": "2+2"}'))
    calls, results = _ids(episode.messages)
    assert calls == results and len(set(calls)) == 2 and calls[0] == "0call1000"
    assert all(NINE.fullmatch(i) for i in calls) and [r["content"] for r in step.replies] == ["4"]


def test_a_repeated_id_in_llama_3_1_json_is_renamed_and_qwen3_ids_stay_as_they_were(shared_data):
    # Llama 3.1 models may write an "id" beside the name; it was kept, the same in every turn
    tok = _tokenizer(shared_data, "llama3_1.jinja")
    call = '{"name": "calculator", "parameters": {"expression": "EXPR"}, "id": "call_0"}'
    rollout, _ = _rl(tok, _replies(call))
    assert _unique_and_paired(rollout["traj"])[0] == "call_0"
    # Qwen3's model writes no id: the rollout's own are unique already, and unchanged
    rollout, _ = _rl(_tokenizer(shared_data, "qwen3.jinja"), _replies(HERMES))
    assert _unique_and_paired(rollout["traj"]) == ["call_0_0", "call_1_0"]


def test_kimi_k2_keeps_the_index_its_template_writes_in_every_turn():
    # The first Kimi-K2 template numbers a call by its place in its own message
    # (functions.NAME:{loop.index0}), so :0 in every turn is its own form: a result headed with a
    # renamed id would answer no call the template shows.
    kimi = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.calculator:0<|tool_call_argument_begin|>"
        '{"expression": "EXPR"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    rollout, glue = _rl(_tok(KIMI), _replies(kimi))
    calls, results = _ids(rollout["traj"])
    assert calls == results == ["functions.calculator:0"] * 2
    assert glue.count("## Return of functions.calculator:0") == 2


# Review of 49542b2, F6: a template that writes text around each part, not only between two; the join
# gives 'A\n- B' where a server handing it the list renders '- A\n- B\n', and nothing said so.
AROUND_EACH_PART = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}- {{ p['text'] }}\n{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_writes_text_around_each_part_is_warned_about():
    import lightning_agents.content_parts as content_parts

    tok = tokenizer_with_template(
        load_tokenizer("embedded:student"), AROUND_EACH_PART, None, "<|im_end|>", SPECIAL_WIDE
    )
    with pytest.warns(RuntimeWarning, match="renders a user message's text parts otherwise than joined"):
        assert content_parts.prompt_parts_join(tok, "user") == "\n- "
    # a real template that joins its parts itself (Kimi-K2: nothing between them) is not warned about
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert content_parts.prompt_parts_join(_tok(KIMI), "user") == ""
