"""gpt-oss's template refuses a lone ``tool`` message ("Message has tool role, but there was no
previous assistant message with a tool call!") and closes a last answer with ``<|return|>`` but an
earlier one with ``<|end|>``; model_notice_role's prefix check read that closing token as the
history re-rendering, so gpt-oss kept the tool notice and one malformed call stopped the whole
``run_agent_rl`` batch with a TemplateError."""

from __future__ import annotations

import pytest
from chat_template_helpers import OURS, SPECIAL_WIDE, tokenizer_with_template
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_reasoning_special_tokens import _DecodesLikeTheEngines

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.agent_turn import model_notice_role
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.tasks import CalculatorTask

ANALYSIS = "<|channel|>analysis<|message|>I should multiply.<|end|><|start|>assistant"
BOTCHED = ANALYSIS + '<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{"expression": "17*'


class _Engine(_DecodesLikeTheEngines, _StopsAtTheFirstStopToken):
    """Writes each scripted reply up to its stop token, its text decoded as the engines decode it."""


@pytest.fixture(scope="module")
def tok():
    path = OURS / "gpt_oss_120b.jinja"
    return tokenizer_with_template(
        load_tokenizer("embedded:student"), path.read_text(), "<|startoftext|>", "<|return|>", SPECIAL_WIDE
    )


def test_gpt_oss_gets_a_user_notice(tok):
    assert model_notice_role(tok) == "user"


def test_a_malformed_gpt_oss_call_does_not_stop_the_batch(tok):
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    answer = f"{ANALYSIS}<|channel|>final<|message|>The answer is {gold}."
    # the generation config of gpt-oss stops at <|return|> and <|call|>
    stops = sorted({*stop_token_ids(tok), tok.convert_tokens_to_ids("<|call|>")})
    engine = _Engine(tok, [(BOTCHED + "<|call|>", "<|call|>"), (answer + "<|return|>", "<|return|>")], stops)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    rollout = batch.rollouts[0]
    assert rollout["info"]["malformed_calls"] == 1 and rollout["reward"] == 1.0
    notice = rollout["traj"][2]
    assert notice["role"] == "user" and notice["content"].startswith("error: malformed tool call")
    ids, mask = batch.out.completion_ids[0], batch.out.loss_mask[0].bool()
    glue = tok.decode(ids[~(mask | ~batch.out.completion_mask[0].bool())].tolist())
    assert notice["content"] in glue
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]
