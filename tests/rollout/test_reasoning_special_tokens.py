"""Reasoning whose delimiters are special tokens (Solar-Open) is kept apart from the answer (session 44).

Solar-Open's template writes a reasoned turn as ``<|think|>RSN<|end|><|begin|>assistant<|content|>ANS``
(or ``...assistant<|tool_calls|>CALLS<|calls|>``) and reads an assistant's reasoning from its
``reasoning`` key (``tests/data/tool_call_outputs/templates/upstage-Solar-Open-100B.jinja``, from
llama.cpp's ``models/templates/``). Its delimiters are special tokens here, as every Solar-Open parser
reads them from the text (Upstage's vLLM tool parser, llama.cpp's "preserved tokens"; ids 20-34 in the
vLLM parser test's vocabulary, beside ``<|endoftext|>`` 2: see the session-44 report). The engines
decoded with ``skip_special_tokens=True``, so the message content was ``'RSNassistantANS'``: the
trajectory, SFT curation and ``task.verify`` saw the reasoning glued to the answer. Now the engines
hand a Solar-Open reply over with its marker tokens (``hf_engine.decode_completions``), the content
is the answer and the reasoning is the message's ``reasoning`` (the key the template renders it from).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from chat_template_helpers import OUTPUTS, REAL_TEMPLATES, tokenizer_with_template
from test_agent_rl_real_templates import _ScriptedTokens
from test_glue_leftovers import SOLAR_STOPS, _StopsAtTheFirstStopToken

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, model_tool_call_style, start_episode
from lightning_agents.rollout.hf_engine import decode_completions, stop_token_ids
from lightning_agents.rollout.tool_calls import split_reasoning
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
RSN = "17 times 23: the user asks the assistant for a product, and 17*20 + 17*3 = 340 + 51 = 391."
ANS = "It is 391."
REASONED_ANSWER = f"<|think|>{RSN}<|end|><|begin|>assistant<|content|>{ANS}"
CALL_ID = "a1b2c3d4e5"
REASONED_CALL = (
    f"<|think|>{RSN}<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>{CALL_ID}<|tool_call:name|>"
    '<|tool_call:args|>{"expression": "17*23"}<|tool_call:end|>'
).replace("<|tool_call:name|>", "<|tool_call:name|>calculator")


def solar_tokenizer():
    """The embedded tokenizer with Solar-Open's real template and special tokens."""
    _, bos, special = REAL_TEMPLATES[SOLAR]
    # Solar-Open's real EOS is <|endoftext|>; <|flush|> ends an answer (generation_config.json)
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), SOLAR.read_text(), bos, "<|endoftext|>", special)
    tok.add_special_tokens({"additional_special_tokens": ["<|flush|>"]}, replace_extra_special_tokens=False)
    return tok


@pytest.fixture(scope="module")
def tok():
    return solar_tokenizer()


def _decoded(tok, text):
    """``text`` as the engines returned it before: tokenized, then decoded without its special tokens."""
    return tok.decode(tok(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True)


def _episode(tok, task=None):
    task = task or CalculatorTask(split="val", n=1)
    style = model_tool_call_style(tok)
    assert style == "solar_open"
    return task, start_episode(task, task.problems[0], tool_call_style=style)


def test_the_delimiters_are_special_tokens_so_decoding_glues_the_reasoning_to_the_answer(tok):
    # the precondition of the bug: what an engine handed the rollout for a reasoned Solar-Open answer
    assert _decoded(tok, REASONED_ANSWER) == f"{RSN}assistant{ANS}"


def test_a_reasoned_answer_is_stored_as_the_answer_with_its_reasoning_apart(tok):
    """Before: 'RSNassistantIt is 391.' (decoded) or the whole marked text was the content."""
    task, episode = _episode(tok)
    text = REASONED_ANSWER
    step = apply_reply(episode, ModelReply(text))
    assert step.finished and episode.answered
    assert step.assistant == {"role": "assistant", "content": ANS, "reasoning": RSN}
    assert step.text == text  # the raw reply is kept as the model's


def test_the_verifier_scores_the_answer_not_the_reasoning(tok):
    """HEAD scored 1 an answer that never states the number, from the statement in its reasoning."""
    for answer, reward in (("The answer is {gold}.", 1.0), ("I counted them all.", 0.0)):
        task, episode = _episode(tok)
        gold = episode.problem["answer"]
        answer = answer.format(gold=gold)
        reply = f"<|think|>So the answer is {gold}.<|end|><|begin|>assistant<|content|>{answer}"
        apply_reply(episode, ModelReply(reply))
        assert episode.messages[-1]["content"] == answer
        assert task.verify_episode(episode.messages, episode.world, episode.problem) == reward


def test_a_call_after_reasoning_parses_and_the_history_renders_the_turn_as_sampled(tok):
    task, episode = _episode(tok)
    prompt = render_chat_template(tok, episode.messages, tools=task.tools, tokenize=False, add_generation_prompt=True)
    step = apply_reply(episode, ModelReply(REASONED_CALL))
    assert step.assistant["reasoning"] == RSN
    assert step.assistant["content"] == ""
    assert [c["function"] for c in step.assistant["tool_calls"]] == [
        {"name": "calculator", "arguments": '{"expression": "17*23"}'}
    ]
    assert step.replies[0]["content"] == "391"
    # Solar-Open renders the reasoning of a turn after the last user message: the next prompt shows the
    # turn as the model wrote it (HEAD: the call without its reasoning)
    after = render_chat_template(tok, episode.messages, tools=task.tools, tokenize=False, add_generation_prompt=True)
    assert after.startswith(prompt + REASONED_CALL + "<|calls|>")


@pytest.mark.parametrize(
    ("reasoning", "answer"),
    [
        ("The assistant should multiply.", "391"),
        ("As an assistant, I multiply: assistant's rule.\n", "The assistant says 391."),
        ("", "391"),
    ],
    ids=["word-in-reasoning", "word-in-both", "empty-reasoning"],
)
def test_the_word_assistant_in_the_reasoning_or_the_answer_does_not_move_the_split(tok, reasoning, answer):
    marked = f"<|think|>{reasoning}<|end|><|begin|>assistant<|content|>{answer}"
    assert split_reasoning(marked, "solar_open") == (reasoning, answer)


def test_a_reply_without_reasoning_is_unchanged(tok):
    for answer in ("It is 391.", "I am an assistant; it is 391."):
        marked = f"<|content|>{answer}"
        assert split_reasoning(_decoded(tok, marked), "solar_open") == ("", answer)
        assert split_reasoning(marked, "solar_open") == ("", answer)
        _, episode = _episode(tok)
        assert apply_reply(episode, ModelReply(_decoded(tok, marked))).assistant == {
            "role": "assistant",
            "content": answer,
        }
    # other styles keep their reasoning as they did (Qwen3's <think> block is plain text in the content)
    qwen = "<think>RSN</think>\n\nIt is 391."
    assert split_reasoning(qwen, "hermes") == ("", qwen)
    assert split_reasoning(f"{RSN}assistant{ANS}", "hermes") == ("", f"{RSN}assistant{ANS}")


def test_a_reasoning_cut_before_its_end_has_no_answer(tok):
    assert split_reasoning(f"<|think|>{RSN}", "solar_open") == (RSN, "")


class _DecodesLikeTheEngines(_ScriptedTokens):
    """The scripted sampler with its texts decoded as the engines decode them (``decode_completions``)."""

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None):
        out = super().generate(prompts, num_samples, sampling, tools, seeds)
        out.texts = decode_completions(self.tokenizer, out.completion_ids, out.completion_mask, self.stop_ids)
        return out


def test_run_agent_rl_stores_the_answer_and_keeps_the_sampled_tokens(tok):
    engine = _DecodesLikeTheEngines(tok, [REASONED_ANSWER])
    flush = tok.convert_tokens_to_ids("<|flush|>")
    engine.stop_ids = [tok.eos_token_id, flush]
    engine._next_reply = lambda: (engine.replies[0], flush)
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=1)
    rollout = batch.rollouts[0]
    assert rollout["traj"][-1] == {"role": "assistant", "content": ANS, "reasoning": RSN}
    # the trained tokens are the sampled ones, reasoning and delimiters included
    ids, mask = batch.out.completion_ids[0], batch.out.loss_mask[0].bool()
    assert ids[mask].tolist() == engine.sampled[0]
    assert tok.decode(engine.sampled[0]) == REASONED_ANSWER + "<|flush|>"


def test_a_reasoned_call_then_a_reasoned_answer_streams_as_the_template_renders_the_trajectory(tok):
    """run_agent_rl over Solar-Open's stop tokens, the replies given with their marker tokens (as a
    decode that keeps them gives them): the stored messages hold the answers and the reasoning apart,
    and the template's rendering of them is the sampled stream (the answer's sampled <|flush|> stands
    where the template writes <|end|>)."""
    config = SimpleNamespace(eos_token_id=[tok.convert_tokens_to_ids(t) for t in SOLAR_STOPS])
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    answer = f"<|think|>The tool says {gold}.<|end|><|begin|>assistant<|content|>The answer is {gold}."
    replies = [(REASONED_CALL + "<|calls|>", "<|calls|>"), (answer + "<|flush|>", "<|flush|>")]
    engine = _StopsAtTheFirstStopToken(tok, replies, stop_token_ids(tok, config))
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    rollout = batch.rollouts[0]
    assert rollout["reward"] == 1.0 and rollout["info"]["tool_calls"] == 1
    call, result, final = rollout["traj"][1:]
    assert (call["content"], call["reasoning"]) == ("", RSN)
    assert final == {"role": "assistant", "content": f"The answer is {gold}.", "reasoning": f"The tool says {gold}."}
    out = batch.out
    stream = tok.decode(out.prompt_ids[0][out.prompt_mask[0].bool()].tolist())
    stream += tok.decode(out.completion_ids[0][out.completion_mask[0].bool()].tolist())
    rendered = render_chat_template(tok, rollout["traj"], tools=task.tools, tokenize=False)
    assert stream.replace("<|flush|>", "<|end|>") == rendered


class _StopsAndDecodesLikeTheEngines(_DecodesLikeTheEngines, _StopsAtTheFirstStopToken):
    """Stops at Solar-Open's stop tokens, with texts decoded as the engines decode them (with the
    marker tokens, less the stop token)."""


def _reasoned_call_then_answer(tok, task):
    gold = task.problems[0]["answer"]
    answer = f"<|think|>The tool says {gold}.<|end|><|begin|>assistant<|content|>The answer is {gold}."
    config = SimpleNamespace(eos_token_id=[tok.convert_tokens_to_ids(t) for t in SOLAR_STOPS])
    replies = [(REASONED_CALL + "<|calls|>", "<|calls|>"), (answer + "<|flush|>", "<|flush|>")]
    return _StopsAndDecodesLikeTheEngines(tok, replies, stop_token_ids(tok, config)), gold


def test_run_agent_rl_reads_a_solar_call_the_engines_hand_over_with_its_markers(tok):
    """Before fc442d0: the engine's text ``a1b2c3d4e5calculator{...}`` (markers decoded away) was taken as
    the final answer: no tool call, reward 0."""
    task = CalculatorTask(split="val", n=1)
    engine, gold = _reasoned_call_then_answer(tok, task)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    rollout = batch.rollouts[0]
    assert rollout["info"]["tool_calls"] == 1 and rollout["reward"] == 1.0
    assert rollout["traj"][1]["reasoning"] == RSN and rollout["traj"][1]["content"] == ""
    assert rollout["traj"][-1]["content"] == f"The answer is {gold}."


def test_run_agent_loop_reads_a_solar_call_the_engines_hand_over_with_its_markers(tok):
    from lightning_agents.rollout.agent_loop import run_agent_loop

    task = CalculatorTask(split="val", n=1)
    engine, gold = _reasoned_call_then_answer(tok, task)
    (rollout,) = run_agent_loop(engine, task.problems, trials=1, task=task, sampling=SamplingConfig(), max_turns=2)
    assert rollout["reward"] == 1.0
    assert rollout["traj"][1]["tool_calls"][0]["function"]["name"] == "calculator"
    assert rollout["traj"][-1]["content"] == f"The answer is {gold}."
