"""A malformed call's notice in a form the chat template renders in order (review of 3a2196f).

Once Gemma 4's and Mistral's reasoning replies came from the engines with their marker tokens, a
botched call of theirs was read as malformed (before, its markers were decoded away and it was taken
for the answer), and the agent loop answered it, as every other style's, with a lone ``tool``
message. Gemma 4's template renders only the tool messages that follow a turn with calls, so the RL
glue left the notice out and stopped the whole ``run_agent_rl`` batch ("does not render 'tool'
messages"); Ministral-3 Reasoning's counts a turn without calls among the user/assistant turns that
must alternate, so the answer after the notice and the user's next turn raised a TemplateError. The
notice is now a ``user`` message on such templates, decided by rendering (``model_notice_role``), and
no turn of the user's where user turns are counted (BFCL's next turn, its scoring).
"""

from __future__ import annotations

import pytest
from chat_template_helpers import GEMMA4, OURS, OUTPUTS, REAL_TEMPLATES, SPECIAL_WIDE, tokenizer_with_template
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_reasoning_special_tokens import _DecodesLikeTheEngines

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_loop, run_agent_rl
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.tasks import CalculatorTask

GEMMA = (OUTPUTS / "google-gemma-4-31B-it.jinja", "<bos>", "<turn|>", GEMMA4)
MINISTRAL = (OUTPUTS / "mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>", SPECIAL_WIDE)
# botched calls (an unclosed string, a cut argument list) after a reasoning, as each model writes them
BOTCHED = {
    "gemma4": '<|channel>thought\nI should multiply.\n<channel|><|tool_call>call:calculator{expression:<|"|>17*23<tool_call|>',
    "ministral": '[THINK]I should multiply.[/THINK][TOOL_CALLS]calculator[ARGS]{"expression": ',
}  # fmt: skip
NEXT = "And what is it doubled?"


class _Engine(_DecodesLikeTheEngines, _StopsAtTheFirstStopToken):
    """Writes each scripted reply up to its stop token, its text decoded as the engines decode it."""


class _AsksAgain(CalculatorTask):
    """A calculator task whose user speaks once more after the first answer, found (as BFCL finds
    its next turn) by counting the user messages so far."""

    def next_user_turn(self, messages, world, problem):
        return [{"role": "user", "content": NEXT}] if sum(m["role"] == "user" for m in messages) == 1 else None


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tok(base, spec):
    path, bos, eos, pattern = spec
    return tokenizer_with_template(base, path.read_text(), bos, eos, pattern)


def _run(tok, task, replies, max_turns):
    end = tok.eos_token
    engine = _Engine(tok, [(reply + end, end) for reply in replies], stop_token_ids(tok))
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=max_turns)
    return engine, batch


def _glue(tok, batch) -> str:
    """What the template inserted between the sampled turns (outside the loss)."""
    out = batch.out
    ids, mask = out.completion_ids[0], out.loss_mask[0].bool() | ~out.completion_mask[0].bool()
    return tok.decode(ids[~mask].tolist())


def test_a_malformed_gemma4_call_does_not_stop_the_batch_and_the_model_sees_the_notice(base):
    """Before: LightningAgentsError "the chat template does not render 'tool' messages" from the
    glue of the first malformed call, for the whole batch."""
    tok = _tok(base, GEMMA)
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    engine, batch = _run(tok, task, [BOTCHED["gemma4"], f"The answer is {gold}."], max_turns=2)
    rollout = batch.rollouts[0]
    assert rollout["info"]["malformed_calls"] == 1 and rollout["reward"] == 1.0
    notice = rollout["traj"][2]
    assert notice["role"] == "user" and notice["content"].startswith("error: malformed tool call; write <|tool_call>")
    assert notice["content"] in _glue(tok, batch)
    # the trained tokens are the sampled ones, the notice outside them
    ids, mask = batch.out.completion_ids[0], batch.out.loss_mask[0].bool()
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]


def test_ministral_reasoning_keeps_its_role_order_after_a_malformed_call_and_a_follow_up(base):
    """Before: the follow-up's glue rendered user, assistant, tool, assistant, user and the template
    raised "conversation roles must alternate user and assistant roles"."""
    tok = _tok(base, MINISTRAL)
    task = _AsksAgain(split="val", n=1)
    gold = task.problems[0]["answer"]
    replies = [BOTCHED["ministral"], f"[THINK]Fine.[/THINK]The answer is {gold}.", f"The answer is {gold}."]
    _, batch = _run(tok, task, replies, max_turns=3)
    rollout = batch.rollouts[0]
    roles = [m["role"] for m in rollout["traj"]]
    # the notice is no user turn: the follow-up still comes after the first answer
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert rollout["traj"][4]["content"] == NEXT and rollout["info"]["finished"]
    assert rollout["reward"] == 1.0
    assert NEXT in _glue(tok, batch)


@pytest.mark.parametrize(
    ("path", "botched"),
    [
        # "Message has tool role, but there was no previous assistant message with a tool call!"
        (OURS / "minimax_m2.jinja", '<minimax:tool_call>\n<invoke name="calculator">\n<parameter name="expression">3+'),
        # renders tool results as user turns, so a lone one broke its user/assistant alternation
        (OUTPUTS / "vllm-gemma3-pythonic.jinja", '[calculator(expression="3+'),
    ],
    ids=["minimax-m2", "gemma3-pythonic"],
)
def test_other_templates_that_refuse_a_lone_tool_notice_get_it_as_a_user_message(base, path, botched):
    """The same mechanism on main, without the marked decode: both raised a TemplateError."""
    eos, bos, pattern = REAL_TEMPLATES[path]
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
    task = _AsksAgain(split="val", n=1)
    gold = task.problems[0]["answer"]
    _, batch = _run(tok, task, [botched, f"The answer is {gold}.", f"The answer is {gold}."], max_turns=3)
    rollout = batch.rollouts[0]
    assert [m["role"] for m in rollout["traj"]] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert rollout["info"]["malformed_calls"] == 1 and rollout["reward"] == 1.0
    assert rollout["traj"][2]["content"] in _glue(tok, batch) and NEXT in _glue(tok, batch)


def test_the_text_loop_gives_the_same_notice(base):
    """run_agent_loop renders every prompt from the messages: on Gemma 4 a tool notice was left out
    of the next prompt without a word, so the model never learned its call had failed."""
    tok = _tok(base, GEMMA)
    task = CalculatorTask(split="val", n=1)
    engine = _Engine(tok, [(BOTCHED["gemma4"] + "<turn|>", "<turn|>"), ("It is 391.<turn|>", "<turn|>")], [])
    engine.stop_ids = stop_token_ids(tok)
    (rollout,) = run_agent_loop(engine, task.problems, trials=1, task=task, sampling=SamplingConfig(), max_turns=2)
    notice = rollout["traj"][2]
    assert notice["role"] == "user" and notice["content"].startswith("error: malformed tool call")
    # the prompt of the second turn, as the engine renders it from the messages
    assert notice["content"] in engine.render(rollout["traj"][:3], task.tools)


@pytest.mark.parametrize(
    ("spec", "role"),
    [
        (GEMMA, "user"),
        (MINISTRAL, "user"),
        # Mistral Small 3.2 refuses two assistant turns without calls in a row; its tool list moves
        # to the user notice, which the RL glue writes again (agent_turn.moved_text)
        ((OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja", "<s>", "</s>", SPECIAL_WIDE), "user"),
        # templates that render a lone tool message in order keep it
        ((OUTPUTS / "upstage-Solar-Open-100B.jinja", None, "<|endoftext|>", SPECIAL_WIDE), "tool"),
        ((OURS / "qwq_32b.jinja", None, "<|im_end|>", SPECIAL_WIDE), "tool"),
    ],
    ids=["gemma4", "ministral-reasoning", "mistral-small-3.2", "solar-open", "qwq"],
)
def test_the_notice_role_is_read_from_the_template(base, spec, role):
    from lightning_agents.rollout.agent_turn import model_notice_role

    assert model_notice_role(_tok(base, spec)) == role
    assert model_notice_role(None) == "tool"


def test_a_tool_notice_still_answers_a_malformed_call_beside_a_good_one(base):
    """Where the turn shows a call, the notice follows its result as a tool message (Gemma 4 renders
    the tool messages after a turn with calls)."""
    tok = _tok(base, GEMMA)
    task = CalculatorTask(split="val", n=1)
    good = '<|tool_call>call:calculator{expression:<|"|>17*23<|"|>}<tool_call|>'
    _, batch = _run(tok, task, [good + '<|tool_call>call:calculator{expression:<|"|>1+', "It is 391."], max_turns=2)
    traj = batch.rollouts[0]["traj"]
    assert [m["role"] for m in traj] == ["user", "assistant", "tool", "tool", "assistant"]
    assert traj[3]["content"].startswith("error: malformed tool call") and traj[3]["content"] in _glue(tok, batch)


def test_a_template_that_renders_a_lone_tool_message_keeps_the_tool_notice(base):
    tok = _tok(base, (OUTPUTS / "upstage-Solar-Open-100B.jinja", None, "<|endoftext|>", SPECIAL_WIDE))
    task = CalculatorTask(split="val", n=1)
    botched = "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>calculator<|tool_call:args|>{"
    _, batch = _run(tok, task, [botched, "<|content|>It is 391."], max_turns=2)
    traj = batch.rollouts[0]["traj"]
    assert traj[2]["role"] == "tool" and traj[2]["name"] == "invalid"
    assert traj[2]["content"] in _glue(tok, batch)


class _NumbersUserTurns(CalculatorTask):
    """Scores 1 only when the episode holds one user turn (BFCL and tau-bench number the calls by
    the user turns they answer)."""

    def verify_episode(self, messages, world, problem):
        return float(sum(m["role"] == "user" for m in messages) == 1)


def test_a_user_notice_is_no_user_turn_to_the_verifier(base):
    tok = _tok(base, GEMMA)
    task = _NumbersUserTurns(split="val", n=1)
    _, batch = _run(tok, task, [BOTCHED["gemma4"], "It is 10."], max_turns=2)
    rollout = batch.rollouts[0]
    assert [m["role"] for m in rollout["traj"]] == ["user", "assistant", "user", "assistant"]
    assert rollout["reward"] == 1.0
