"""Stop tokens and RL glue on real templates, the review's leftovers (session 44).

Solar-Open's stop tokens. The real tokenizer's EOS is ``<|endoftext|>`` (id 2) and generation stops
at ``generation_config.json``'s ``eos_token_id`` [2 ``<|endoftext|>``, 24 ``<|flush|>``, 25
``<|calls|>``], while ``<|end|>`` (21) "closes a message without ending the turn": the Solar-Open
port of Tenstorrent's tt-metal (mirror changh95/tt-metal at 156304d63b54,
``models/demos/solar_open/tt/model_config.py`` ``_load_stop_token_ids`` and
``tt/vllm_support.py`` ``GENERATION_STOP_TOKEN_IDS``; its vLLM test writes a reasoned answer as
``<|think|>...<|end|><|begin|>assistant<|content|>...`` followed by id 24;
``configs/Solar-Open-100B/config.json`` there has ``eos_token_id`` 2). llama.cpp's converter
(``SolarOpenModel.set_vocab``, as the stored corpus has it) also writes ``<|endoftext|>`` as EOS. The
tests' REAL_TEMPLATES entry guesses ``<|end|>`` as the EOS, and ``stop_token_ids`` put the EOS first
unconditionally, so every reasoning turn stopped after its thought: an EOS the template writes inside
a turn no longer stops generation. The template never writes ``<|flush|>``, so without the model's
generation config no stop token closes a Solar-Open answer (a warning says so).

A user's follow-up after a reasoned answer: Solar-Open writes an assistant's ``<|think|>`` message
only after the last user message, gpt-oss drops the ``analysis`` channel of earlier turns and
re-renders the last answer's ``<|return|>`` as ``<|end|>``; both were refused ("renders earlier turns
differently"). The glue is now what the template writes after the history rendered without reasoning,
and the stream keeps each turn as sampled (as with Qwen3's dropped ``<think>``).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from chat_template_helpers import OURS, OUTPUTS, REAL_TEMPLATES, tokenizer_with_template
from test_agent_rl_real_templates import _ScriptedTokens

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_loop, hf_engine
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
GPT_OSS = OURS / "gpt_oss_120b.jinja"
#: Solar-Open's generation_config.json eos_token_id as text (ids 2, 24, 25; see the module docstring).
SOLAR_STOPS = ["<|endoftext|>", "<|flush|>", "<|calls|>"]
EXPR = "17*23"
QUESTION = {"role": "user", "content": "What is QQQ?"}
FOLLOW_UP = [{"role": "user", "content": "And NNN?"}]
REASONED = {"reasoning_content": "RSN", "reasoning": "RSN", "thinking": "RSN"}


def _tok(path, eos=None):
    known_eos, bos, special = REAL_TEMPLATES[path]
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos or known_eos, special)
    if path == SOLAR:  # in Solar-Open's vocabulary, not in its template
        extra = ["<|endoftext|>", "<|flush|>"]
        tok.add_special_tokens({"additional_special_tokens": extra}, replace_extra_special_tokens=False)
    return tok


def _solar_config(tok):
    return SimpleNamespace(eos_token_id=[tok.convert_tokens_to_ids(t) for t in SOLAR_STOPS])


def _texts(tok, ids):
    return [tok.decode([i]) for i in ids]


class _StopsAtTheFirstStopToken(_ScriptedTokens):
    """A sampler that writes each scripted reply and stops, as a real one does, at the first of the
    engine's stop tokens in it (the reply's own stop token when none comes earlier)."""

    def __init__(self, tok, replies, stop_ids):
        super().__init__(tok, [text for text, _ in replies])
        self.stops = [stop for _, stop in replies]
        self.stop_ids = list(stop_ids)

    def _next_reply(self):
        at = min(self.turn, len(self.replies) - 1)
        return self.replies[at], self.tokenizer.convert_tokens_to_ids(self.stops[at])

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None):
        out = super().generate(prompts, num_samples, sampling, tools, seeds)
        ids = self.sampled[-1]
        n = next(i for i, t in enumerate(ids) if t in self.stop_ids) + 1
        self.sampled[-1] = ids[:n]
        out.completion_ids, out.completion_mask = out.completion_ids[:, :n], out.completion_mask[:, :n]
        out.logprobs, out.entropies = out.logprobs[:, :n], out.entropies[:, :n]
        out.texts = [self.tokenizer.decode(ids[: n - 1], skip_special_tokens=False)] * len(prompts)
        return out


# ----------------------------------------------------------------------------- MED 3: the EOS inside a turn
def test_an_eos_the_template_writes_inside_a_turn_is_no_stop_token():
    tok = _tok(SOLAR)  # the tests' guess: EOS <|end|>, which Solar-Open writes after its reasoning
    assert tok.eos_token == "<|end|>"
    assert _texts(tok, stop_token_ids(tok)) == ["<|calls|>"]
    assert _texts(tok, stop_token_ids(tok, _solar_config(tok))) == SOLAR_STOPS


def test_a_real_end_of_text_eos_still_stops_generation():
    tok = _tok(SOLAR, eos="<|endoftext|>")  # the real tokenizer's EOS, never written inside a turn
    assert _texts(tok, stop_token_ids(tok)) == ["<|endoftext|>", "<|calls|>"]
    # an EOS the generation config lists is the model's own stop token, wherever the template writes it
    tok = _tok(SOLAR)
    config = SimpleNamespace(eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids("<|calls|>")])
    assert _texts(tok, stop_token_ids(tok, config)) == ["<|end|>", "<|calls|>"]
    # gpt-oss: the EOS <|return|> ends the final answer; <|end|> (inside a turn) was never a stop token
    assert _texts(_tok(GPT_OSS), stop_token_ids(_tok(GPT_OSS))) == ["<|return|>", "<|call|>"]


def test_without_a_generation_config_a_template_whose_answer_end_is_inside_a_turn_warns(caplog, monkeypatch):
    monkeypatch.setattr(hf_engine, "_NO_ANSWER_STOP", set(), raising=False)  # once per template: earlier tests warned
    tok = _tok(SOLAR, eos="<|endoftext|>")
    with caplog.at_level(logging.WARNING):
        stop_token_ids(tok)
    assert "<|end|>" in caplog.text and "generation config" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        stop_token_ids(tok, _solar_config(tok))
    assert "generation config" not in caplog.text


def test_a_solar_open_reasoning_turn_is_sampled_to_its_answer():
    """run_agent_rl with the engine's stop tokens: with the EOS <|end|> first, the sampler stopped at
    the thought's <|end|>, the answer was never sampled and the episode ended on the thought."""
    tok = _tok(SOLAR)
    reply = "<|think|>17 times 23 is 391.<|end|><|begin|>assistant<|content|>It is 391."
    engine = _StopsAtTheFirstStopToken(tok, [(reply, "<|flush|>")], stop_token_ids(tok, _solar_config(tok)))
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=1)
    assert tok.decode(engine.sampled[0]) == reply + "<|flush|>"
    assert batch.rollouts[0]["info"]["finished"]


# ----------------------------------------------------------------------------- item 7: follow-up after reasoning
def _rendered(tok, messages, generation_prompt, tools=None):
    return render_chat_template(tok, messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt)


def _stream(tok, history, answer, stop, new, tools=None):
    """prompt + the answer turn as sampled (the template's rendering of it as the last turn, up to
    its closer, then the sampled stop token) + the glue."""
    prompt = _rendered(tok, history, True, tools)
    last = _rendered(tok, [*history, answer], False, tools)
    assert last.startswith(prompt)
    closer = next(e for e in ("<|end|>", "<|return|>") if last.endswith(e))
    sampled = last[len(prompt) : len(last) - len(closer)] + stop
    glue = continuation_text(tok, [*history, answer], new, tools, None, _texts(tok, stop_token_ids(tok)), stop)
    return prompt, sampled, glue


@pytest.mark.parametrize(
    ("path", "stop", "glue"),
    [
        (SOLAR, "<|flush|>", "<|begin|>user<|content|>And NNN?<|end|><|begin|>assistant"),
        (GPT_OSS, "<|return|>", "<|start|>user<|message|>And NNN?<|end|><|start|>assistant"),
    ],
    ids=["solar-open", "gpt-oss"],
)
def test_a_follow_up_after_a_reasoned_answer_is_glued_as_the_template_renders_it(path, stop, glue):
    tok = _tok(path)
    answer = {"role": "assistant", "content": "It is AAA.", **REASONED}
    prompt, sampled, got = _stream(tok, [QUESTION], answer, stop, FOLLOW_UP)
    assert got == glue
    # The stream is the template's rendering of the whole conversation but for what the template
    # drops of the sampled turn (its reasoning) and its closer, which is the token the model sampled.
    expected = _rendered(tok, [QUESTION, answer, *FOLLOW_UP], True)
    reasoning = {
        SOLAR: "<|think|>RSN<|end|><|begin|>assistant",
        GPT_OSS: "<|channel|>analysis<|message|>RSN<|end|><|start|>assistant",
    }
    assert sampled.startswith(reasoning[path])
    assert prompt + sampled[len(reasoning[path]) :].replace(stop, "<|end|>") + got == expected


def test_gpt_oss_glues_the_same_after_an_answer_whose_reasoning_the_parser_dropped():
    """The rollout parser keeps only gpt-oss's final channel as the message's content; the glue after
    the sampled <|return|> started with the template's <|end|>, a second closer no rendering has."""
    tok = _tok(GPT_OSS)
    answer = {"role": "assistant", "content": "It is AAA."}
    stops = _texts(tok, stop_token_ids(tok))
    glue = continuation_text(tok, [QUESTION, answer], FOLLOW_UP, None, None, stops, "<|return|>")
    assert glue == "<|start|>user<|message|>And NNN?<|end|><|start|>assistant"
    # a turn that stopped at no <|return|> gets the template's closer in its glue
    glue = continuation_text(tok, [QUESTION, answer], FOLLOW_UP, None, None, stops, None)
    assert glue == "<|end|><|start|>user<|message|>And NNN?<|end|><|start|>assistant"


def test_solar_open_bfcl_shape_call_result_reasoned_answer_then_the_users_next_turn():
    tok = _tok(SOLAR, eos="<|endoftext|>")
    tools = CalculatorTask(split="val", n=1).tools
    call = {
        "id": "a1b2c3d4e5",
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": EXPR}},
    }
    history = [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": "", "tool_calls": [call], **REASONED},
        {"role": "tool", "tool_call_id": "a1b2c3d4e5", "name": "calculator", "content": "391"},
    ]
    answer = {"role": "assistant", "content": "It is 391.", **REASONED}
    stops = _texts(tok, stop_token_ids(tok, _solar_config(tok)))
    glue = continuation_text(tok, [*history, answer], FOLLOW_UP, tools, None, stops, "<|flush|>")
    assert glue == "<|begin|>user<|content|>And NNN?<|end|><|begin|>assistant"


def test_a_history_rendered_otherwise_than_by_dropping_reasoning_is_refused_naming_where():
    """A template that rewrites an earlier message once more follow (not a turn's reasoning) cannot
    be extended; the refusal shows the place the history renders differently."""
    tok = _tok(SOLAR)
    tok.chat_template = (
        "{% for m in messages %}<|begin|>{{ m.role }}<|content|>"
        "{{ 'SHORTENED' if loop.first and messages | length > 2 else m.content }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|begin|>assistant{% endif %}"
    )
    answer = {"role": "assistant", "content": "It is AAA.", **REASONED}
    with pytest.raises(LightningAgentsError, match=r"dropping their reasoning.*SHORTENED"):
        continuation_text(tok, [QUESTION, answer], FOLLOW_UP, None, None, ["<|end|>"], "<|end|>")


# ----------------------------------------------------------------------------- LOW 5: text around a call
GEMMA4 = OUTPUTS / "google-gemma-4-31B-it.jinja"
DEEPSEEK_R1_QWEN = OURS / "deepseek_r1_distill_qwen.jinja"


def _call_turn(content=""):
    call = {
        "id": "a1b2c3d4e5",
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": EXPR}},
    }
    result = {"role": "tool", "tool_call_id": "a1b2c3d4e5", "name": "calculator", "content": "391"}
    return [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": content, "tool_calls": [call]},
    ], [result]


def test_deepseek_r1_distill_glue_after_a_call_holds_the_empty_text_message_the_template_writes():
    """The template renders a call message's empty text as a message of its own after the calls
    (``<｜Assistant｜><｜end▁of▁sentence｜>``); the model stops at the first end token, after its calls,
    and the glue started after the second, so the stream lacked what the template writes there."""
    tok = _tok(DEEPSEEK_R1_QWEN)
    tools = CalculatorTask(split="val", n=1).tools
    history, new = _call_turn()
    stops = _texts(tok, stop_token_ids(tok))
    glue = continuation_text(tok, history, new, tools, None, stops, tok.eos_token)
    rendered = _rendered(tok, [*history, *new], True, tools)
    assert glue.startswith("<｜Assistant｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜>") and "391" in glue
    assert rendered.endswith(glue)
    assert rendered[: len(rendered) - len(glue)].endswith("<｜tool▁calls▁end｜><｜end▁of▁sentence｜>")


def test_gemma4_text_before_a_call_is_glued_again_after_the_tool_response_as_the_template_renders_it(
    caplog, monkeypatch
):
    """Gemma 4 renders a message's text after its calls' responses. The glue is what the template
    writes after the sampled call, the text included (what every served request shows after the call;
    session 44 first cut it, which trained the next turn in a context no served request has), and a
    warning says the text is then twice in the stream."""
    monkeypatch.setattr(agent_loop, "_TEXT_AFTER_RESULTS", set(), raising=False)  # warned once per template
    tok = _tok(GEMMA4)
    tools = CalculatorTask(split="val", n=1).tools
    history, new = _call_turn("Let me compute.")
    stops = _texts(tok, stop_token_ids(tok))
    with caplog.at_level(logging.WARNING):
        glue = continuation_text(tok, history, new, tools, None, stops, "<|tool_response>")
    response = 'response:calculator{value:<|"|>391<|"|>}<tool_response|>'
    assert glue == response + "Let me compute.<turn|>\n"
    assert _rendered(tok, [*history, *new], True, tools).endswith("<|tool_response>" + glue)
    assert "after its tool calls' results" in caplog.text and "twice in the token stream" in caplog.text
    # a call turn without text: nothing is written twice, no warning; the model goes on in its turn
    caplog.clear()
    history, new = _call_turn()
    with caplog.at_level(logging.WARNING):
        assert continuation_text(tok, history, new, tools, None, stops, "<|tool_response>") == response
    assert "after its tool calls' results" not in caplog.text
