"""gpt-oss's ``analysis`` messages are stored as the turn's ``thinking`` in agent rollouts.

The engines hand a gpt-oss reply over with its marker tokens, and the ``harmony`` parser read its calls
and its final answer, but the analysis was kept nowhere: the stored trajectory had no reasoning for
gpt-oss turns, so SFT on gpt-oss RL trajectories (directly or through TopoCurate) trained calls and
answers without their analysis. Now :func:`split_reasoning` keeps it apart and ``apply_reply`` stores
it under ``thinking``, the key gpt-oss's template reads; the RL token stream is unchanged.
"""

from __future__ import annotations

import json

import pytest
from chat_template_helpers import OURS, SPECIAL_WIDE, labelled_runs, tokenizer_with_template
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_reasoning_special_tokens import _DecodesLikeTheEngines

from lightning_agents.datamodules.chat import ChatDataModule
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.agent_turn import AgentEpisode, ModelReply, apply_reply, reply_message
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.rollout.tool_calls import parse_tool_calls, split_reasoning
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

START = "<|start|>assistant"
THINK = "<|channel|>analysis<|message|>I should multiply.<|end|>" + START
CALL = '<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{"expression": "17*23"}'
BOTCHED = '<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{"expression": "17*'
ANSWER = (
    "<|channel|>analysis<|message|>The tool said GOLD.<|end|>"
    + START
    + "<|channel|>final<|message|>The answer is GOLD."
)
AGAIN = "And what is it doubled?"


class _Engine(_DecodesLikeTheEngines, _StopsAtTheFirstStopToken):
    """Writes each scripted reply up to its stop token, its text decoded as the engines decode it."""


class _AsksAgain(CalculatorTask):
    """The user asks once more after the first answer."""

    def next_user_turn(self, messages, world, problem):
        return [{"role": "user", "content": AGAIN}] if sum(m["role"] == "user" for m in messages) == 1 else None


@pytest.fixture(scope="module")
def tok():
    path = OURS / "gpt_oss_120b.jinja"
    return tokenizer_with_template(
        load_tokenizer("embedded:student"), path.read_text(), "<|startoftext|>", "<|return|>", SPECIAL_WIDE
    )


# ----------------------------------------------------------------------------- the split
@pytest.mark.parametrize(
    ("text", "reasoning", "rest"),
    [
        (THINK + CALL, "I should multiply.", CALL),
        # several analysis messages, one after a recipient-less commentary message
        (
            "<|channel|>analysis<|message|>First.<|end|>"
            + START
            + "<|channel|>commentary<|message|>Let me check.<|end|>"
            f"{START}<|channel|>analysis<|message|>Second.<|end|>{START}<|channel|>final<|message|>42",
            "First.\n\nSecond.",
            f"<|channel|>commentary<|message|>Let me check.<|end|>{START}<|channel|>final<|message|>42",
        ),
        # cut inside the analysis: all of it is reasoning, no answer
        ("<|channel|>analysis<|message|>I should mul", "I should mul", ""),
        # cut inside the final answer
        (THINK + "<|channel|>final<|message|>It is", "I should multiply.", "<|channel|>final<|message|>It is"),
        # no analysis, or an empty one: the reply as it is
        ("<|channel|>final<|message|>42", "", "<|channel|>final<|message|>42"),
        (
            "<|channel|>analysis<|message|> <|end|>" + START + CALL,
            "",
            "<|channel|>analysis<|message|> <|end|>" + START + CALL,
        ),
    ],
)
def test_split_reasoning_reads_the_analysis_messages(text, reasoning, rest):
    assert split_reasoning(text, "harmony") == (reasoning, rest)
    # the parser reads the same calls and content from the rest as from the whole reply
    assert parse_tool_calls(rest, style="harmony") == parse_tool_calls(text, style="harmony")


def test_other_styles_and_unmarked_harmony_text_are_not_split():
    assert split_reasoning(THINK + CALL, "hermes") == ("", THINK + CALL)
    decoded = 'analysisI should multiply.assistantcommentary to=functions.calculator json{"expression": "1"}'
    assert split_reasoning(decoded, "harmony") == ("", decoded)


def _episode(style="harmony"):
    task = CalculatorTask(split="val", n=1)
    return AgentEpisode(
        task.problems[0], [{"role": "user", "content": "q"}], task.environment(task.problems[0]), tool_call_style=style
    )


def test_a_cut_reply_stores_its_analysis_and_the_text_the_parser_reads():
    episode = _episode()
    step = apply_reply(episode, ModelReply(THINK + "<|channel|>final<|message|>It is", truncated=True))
    assert step.assistant == {"role": "assistant", "content": "It is", "thinking": "I should multiply."}
    cut_call = _episode()
    step = apply_reply(cut_call, ModelReply(THINK + CALL, truncated=True))
    assert step.assistant == {"role": "assistant", "content": CALL, "thinking": "I should multiply."}


def test_a_call_with_a_preamble_keeps_one_analysis():
    """gpt-oss's template refuses a call message with both content and thinking."""
    preamble = "<|channel|>commentary<|message|>Let me check.<|end|>" + START
    step = apply_reply(_episode(), ModelReply(THINK + preamble + CALL))
    assert step.assistant["content"] == ""
    assert step.assistant["thinking"] == "I should multiply.\n\nLet me check."
    assert step.assistant["tool_calls"][0]["function"]["name"] == "calculator"


# ----------------------------------------------------------------------------- run_agent_rl
def _run(tok, task, replies):
    gold = str(task.problems[0]["answer"])
    script = [(text.replace("GOLD", gold) + stop, stop) for text, stop in replies]
    # the generation config of gpt-oss stops at <|return|> and <|call|>
    stops = sorted({*stop_token_ids(tok), tok.convert_tokens_to_ids("<|call|>")})
    engine = _Engine(tok, script, stops)
    batch = run_agent_rl(
        engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=len(replies) + 1
    )
    return batch, engine, gold


def _stream(tok, batch, engine):
    """The completion as trained: the sampled tokens are exactly the trained ones; returns the decoded
    completion (sampled turns and glue)."""
    ids, mask = batch.out.completion_ids[0], batch.out.loss_mask[0].bool()
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]
    return tok.decode(ids[batch.out.completion_mask[0].bool()].tolist())


def test_call_result_answer_follow_up_stores_every_analysis(tok):
    task = _AsksAgain(split="val", n=1)
    replies = [(THINK + CALL, "<|call|>"), (ANSWER, "<|return|>"), (ANSWER, "<|return|>")]
    batch, engine, gold = _run(tok, task, replies)
    rollout = batch.rollouts[0]
    assert rollout["reward"] == 1.0
    traj = rollout["traj"]
    assert [m["role"] for m in traj] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    call, answer, last = traj[1], traj[3], traj[5]
    assert call["thinking"] == "I should multiply." and call["content"] == ""
    assert call["tool_calls"][0]["function"]["name"] == "calculator"
    assert answer == {"role": "assistant", "content": f"The answer is {gold}.", "thinking": f"The tool said {gold}."}
    assert last == answer
    # the token stream: the sampled turns and the template's glue, as before the analysis was stored
    result = traj[2]["content"]
    assert _stream(tok, batch, engine) == (
        f"{THINK}{CALL}<|call|>"
        f"<|start|>functions.calculator to=assistant<|channel|>commentary<|message|>{json.dumps(result)}<|end|>{START}"
        f"{ANSWER.replace('GOLD', gold)}<|return|>"
        f"<|start|>user<|message|>{AGAIN}<|end|>{START}"
        f"{ANSWER.replace('GOLD', gold)}<|return|>"
    )


def test_a_malformed_call_stores_its_analysis_and_the_batch_completes(tok):
    task = CalculatorTask(split="val", n=1)
    batch, engine, gold = _run(tok, task, [(THINK + BOTCHED, "<|call|>"), (ANSWER, "<|return|>")])
    rollout = batch.rollouts[0]
    assert rollout["reward"] == 1.0 and rollout["info"]["malformed_calls"] == 1
    bad, notice = rollout["traj"][1], rollout["traj"][2]
    assert bad == {"role": "assistant", "content": BOTCHED, "thinking": "I should multiply."}
    assert notice["role"] == "user" and notice["content"].startswith("error: malformed tool call")
    # the botched call is rendered as an answer, closed by the template's <|end|> (the model stopped at <|call|>)
    assert _stream(tok, batch, engine) == (
        f"{THINK}{BOTCHED}<|call|><|end|><|start|>user<|message|>{notice['content']}<|end|>{START}"
        f"{ANSWER.replace('GOLD', gold)}<|return|>"
    )


# ----------------------------------------------------------------------------- SFT on the stored trajectory
def test_sft_on_the_stored_trajectory_trains_the_call_with_its_analysis(tok, tmp_path):
    task = CalculatorTask(split="val", n=1)
    batch, _, gold = _run(tok, task, [(THINK + CALL, "<|call|>"), (ANSWER, "<|return|>")])
    messages = batch.rollouts[0]["traj"]
    path = tmp_path / "rollout.jsonl"
    path.write_text(json.dumps({"messages": messages, "tools": task.tools}) + "\n")
    dm = ChatDataModule(
        train=str(path), val=None, max_length=4096, shuffle=False, cache_dir=None, split_reasoning_turns=True
    )
    dm._tokenizer = tok
    dm.setup("fit")
    runs = [labelled_runs(tok, row) for row in dm.datasets["fit"]]
    assert runs == [
        [
            "<|channel|>analysis<|message|>I should multiply.<|end|><|start|>assistant to=functions.calculator"
            '<|channel|>commentary json<|message|>{"expression": "17*23"}<|call|>'
        ],
        [f"{ANSWER.replace('GOLD', gold)}<|return|>"],
    ]


def test_a_completion_sent_back_renders_as_its_analysis_and_answer(tok):
    # HFlow's retry / refine / test fix send a previous completion back as the assistant's message:
    # it kept `<|channel|>final<|message|>` in the content (the template refused it) and the analysis
    # under `reasoning`, which gpt-oss's template does not read
    text = f"<|channel|>analysis<|message|>Two times 21.<|end|>{START}<|channel|>final<|message|>It is 42."
    message = reply_message(text, "harmony")
    assert message == {"role": "assistant", "content": "It is 42.", "thinking": "Two times 21."}
    rendered = render_chat_template(tok, [{"role": "user", "content": "2*21?"}, message], tokenize=False)
    assert rendered.endswith(
        "<|channel|>analysis<|message|>Two times 21.<|end|><|start|>assistant<|channel|>final<|message|>It is 42.<|return|>"
    )
    solar = reply_message("<|think|>Hm.<|end|><|begin|>assistant<|content|>Yes.", "solar_open")
    assert solar == {"role": "assistant", "content": "Yes.", "reasoning": "Hm."}
