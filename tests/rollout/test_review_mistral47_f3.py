"""Review of 72585bc (session 47), findings F3 and F4.

F3: Apriel-1.6 and Command R7B close a tool result with no end token, so the span that the glue check
searched for "a new message's text inside the assistant's last turn" (since the end token before that
turn) also held the previous result. A retried call that got the same text back, common in real
episodes, stopped the whole batch. A template that does write a new message's text inside the last
turn must still be refused.

F4: the growth warning advised "or no system prompt" on vLLM's Mistral v0.3 template too, whose growth
is its own call instructions, written with the last user message with or without a system prompt.
"""

from __future__ import annotations

import copy
import logging

import pytest
from chat_template_helpers import CALCULATOR, OURS, OUTPUTS, SPECIAL_WIDE, tokenizer_with_template
from test_notice_role_all_templates import _as_written, _DecodedEngine

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_loop
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.rollout.hf_engine import HFGenerationEngine, stop_token_ids
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

APRIEL = (OUTPUTS / "Apriel-1.6-15b-Thinker-fixed.jinja", "<s>", "<|end|>")
# On a model whose EOS is not the template's (the embedded student's `</s>`), Command R7B's turns end
# at the tokens the template closes assistant turns with, `<|END_ACTION|>` and `<|END_RESPONSE|>`
# (stop_token_ids), so its tool results, closed by `<|END_OF_TURN_TOKEN|>` only, have no end token.
R7B = (OUTPUTS / "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", None, "</s>")
# Apriel's reply holds its reasoning before the mark; Command R7B's has none
CONTENT = {APRIEL: "Check it.\n[BEGIN FINAL RESPONSE]", R7B: ""}
NO_END_TOKEN = pytest.mark.parametrize("spec", [APRIEL, R7B], ids=["apriel", "command_r7b"])


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tokenizer(base, spec):
    path, bos, eos = spec
    return tokenizer_with_template(base, path.read_text(), bos, eos, SPECIAL_WIDE)


def _call(i, expression="17*23"):
    return {
        "id": f"call_{i}_0",
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": expression}},
    }


def _retried(content, result):
    """A call, its result 391, the same call again, and ``result`` for it as the new message."""
    messages = [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": content, "tool_calls": [_call(0)]},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "391"},
        {"role": "assistant", "content": content, "tool_calls": [_call(2)]},
    ]
    return messages, [{"role": "tool", "tool_call_id": "call_2_0", "name": "calculator", "content": result}]


# ------------------------------------------------------------------------------------------- F3
@NO_END_TOKEN
def test_a_retried_call_that_gets_the_same_result_glues(base, spec):
    """At 0ff9971 the second 391 was refused ("renders a new message's text inside the assistant's
    last turn"): the span searched opened with the first result, which has no end token. The glue is
    what the template writes for the new result: the same as for another result text, and the end of
    the conversation as served."""
    tok = _tokenizer(base, spec)
    stops = stop_token_ids(tok)
    ends = tok.convert_ids_to_tokens(stops)
    messages, new = _retried(CONTENT[spec], "391")
    sampled_end = _as_written(tok, messages[-1], stops)[1]  # where the model stopped after its call
    glue = continuation_text(tok, messages, new, [CALCULATOR], None, ends, sampled_end)
    other = continuation_text(tok, *_retried(CONTENT[spec], "4711"), [CALCULATOR], None, ends, sampled_end)
    assert "391" in glue and glue == other.replace("4711", "391")
    served = render_chat_template(tok, messages + new, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True)
    assert served.endswith(glue)


class _CallTwice(CalculatorTask):
    """One follow-up question after the first answer."""

    def next_user_turn(self, messages, world, problem):
        users = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": "And what is it times 2?"}] if users == 1 else None


@NO_END_TOKEN
def test_an_episode_with_a_retried_call_completes_with_the_sampled_tokens_trained(base, spec):
    """The same call twice (both answered 391), an answer, a follow-up and an answer through
    run_agent_rl: the batch completes, the trained tokens are the sampled ones, every prompt handed
    to the engine starts the final stream, and each glue ends the served rendering of its turn."""
    tok = _tokenizer(base, spec)
    stops = stop_token_ids(tok)
    call = {"role": "assistant", "content": "", "tool_calls": [{**_call(0), "id": "abcDEF120"}]}
    written = [_as_written(tok, call, stops), _as_written(tok, {"role": "assistant", "content": "It is 391."}, stops)]
    script = [(text + stop, stop) for text, stop in (written[0], written[0], written[1], written[1])]
    engine = _RecordsPrompts(tok, script, stops)
    task = _CallTwice(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=5)
    out, rollout = batch.out, batch.rollouts[0]
    assert rollout["info"]["tool_calls"] == 2 and rollout["info"]["finished"]
    real = out.completion_mask[0].bool()
    ids, mask = out.completion_ids[0][real].tolist(), out.loss_mask[0][real].tolist()
    assert [t for t, m in zip(ids, mask) if m] == [t for turn in engine.sampled for t in turn]
    stream = out.prompt_ids[0][out.prompt_mask[0].bool()].tolist() + ids
    assert all(stream[: len(p)] == p for p in engine.prompts)
    traj = rollout["traj"]
    turns = [i for i, m in enumerate(traj) if m["role"] == "assistant"]
    served, at = HFGenerationEngine(None, tok), 0
    for i, turn in enumerate(engine.sampled[:-1]):
        at += len(turn)
        end = mask.index(1, at)
        glue, at = tok.decode(ids[at:end], skip_special_tokens=False), end
        assert served.render(traj[: turns[i + 1]], rollout["tools"]).endswith(glue)


class _RecordsPrompts(_DecodedEngine):
    """The scripted engine, keeping every prompt it was handed."""

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None):
        self.prompts = [*getattr(self, "prompts", []), list(prompts[0])]
        return super().generate(prompts, num_samples, sampling, tools, seeds)


# A template that writes a call's result inside the call's turn, before its end token, and also after
# it as a result of its own with no end token (as Apriel's and Command R7B's have none); the last
# assistant turn renders an empty think block while it is last, so the glue is cut by end tokens.
INSIDE = (
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>{{ m.content }}<|end|>\n"
    "{% elif m.role == 'tool' %}<|result|>{{ m.content }}\n"
    "{% else %}<|assistant|>{% if loop.last %}<think></think>{% endif %}"
    "{% for c in m.tool_calls or [] %}<|call|>{{ c.function.arguments | tojson }}{% endfor %}"
    "{{ m.content or '' }}"
    "{% if loop.nextitem and loop.nextitem.role == 'tool' %}<|result|>{{ loop.nextitem.content }}{% endif %}"
    "<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.mark.parametrize("result", ["391", "4711"], ids=["same_result", "other_result"])
def test_a_template_that_writes_the_new_result_inside_the_last_turn_is_still_refused(base, result):
    """The case the check exists for: the new result is inside the last turn, before the end token
    the glue is cut at, so the glue would hold only part of it. Refused whether or not the previous
    result (inside the span searched, as it has no end token) has the same text."""
    tok = copy.deepcopy(base)
    tok.add_special_tokens(
        {"additional_special_tokens": ["<|user|>", "<|assistant|>", "<|end|>", "<|call|>", "<|result|>"]},
        replace_extra_special_tokens=False,
    )
    tok.chat_template = INSIDE
    messages, new = _retried("", result)
    served = render_chat_template(tok, messages + new, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True)
    last_turn = served[served.rfind("<|assistant|><|call|>") : served.rfind("<|end|>")]
    assert f"<|result|>{result}" in last_turn  # the template does write it inside the turn
    with pytest.raises(LightningAgentsError, match="inside the assistant's last turn"):
        continuation_text(tok, messages, new, [CALCULATOR], None, ["<|end|>"], "<|end|>")


# ------------------------------------------------------------------------------------------- F4
POLICY = "Policy: " + "check each step twice. " * 8
MISTRAL = {
    "nemo": (OURS / "mistral_nemo_2407.jinja", "<s>", "</s>"),
    "v03": (OURS / "vllm_mistral_v03_parallel.jinja", "<s>", "</s>"),
}


@pytest.mark.parametrize(
    ("template", "system", "advice", "not_advice"),
    [
        ("nemo", POLICY, "or no system prompt", "does not help"),
        ("v03", None, "no system prompt does not help", "or no system prompt"),
        ("v03", POLICY, "no system prompt saves only its own", "or no system prompt"),
    ],
    ids=["nemo_system_prompt", "v03_no_system_prompt", "v03_system_prompt"],
)
def test_the_growth_warning_advises_what_shortens_the_growth(
    base, caplog, monkeypatch, template, system, advice, not_advice
):
    """Nemo grows by its system prompt alone, so going without one helps; v0.3 grows by its call
    instructions with or without one (~309 tokens per user turn on real tokenizers), so it does not,
    or only by the system prompt's share. At 0ff9971 all three advised "or no system prompt"."""
    monkeypatch.setattr(agent_loop, "_GROWTH_MEASURED", set())
    tok = _tokenizer(base, MISTRAL[template])
    head = [{"role": "system", "content": system}] if system else []
    messages = [*head, {"role": "user", "content": "What is 17*23?"}, {"role": "assistant", "content": "It is 391."}]
    new = [{"role": "user", "content": "And what is it times 2?"}]
    with caplog.at_level(logging.WARNING, logger=agent_loop.__name__):
        continuation_text(tok, messages, new, None, None, ["</s>"], "</s>")
    said = [r.getMessage() for r in caplog.records if "grows by about" in r.getMessage()]
    assert len(said) == 1 and advice in said[0] and not_advice not in said[0]
