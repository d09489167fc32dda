"""Mistral Nemo, v0.3 and Small 3.2 agent RL with the replies as the engines hand them over.

At a4476fa the engines decoded a Mistral reply without its special tokens, so ``[TOOL_CALLS]``
(``[ARGS]``, ``[CALL_ID]``), control tokens of the real tokenizers, never reached the parser: a call
after text and a botched call were taken for the final answer. Read with them, a botched call got a
``tool`` notice, which these templates refuse once an answer follows ("roles must alternate"), and a
user's next turn (tau-bench's user simulator, BFCL) stopped the whole ``run_agent_rl`` batch on any
episode, calls or none: the templates move their tool list to the last user message, so the history
re-rendered differently and the token stream was refused.
"""

from __future__ import annotations

import re

import pytest
import torch
from chat_template_helpers import OURS, OUTPUTS, SPECIAL_WIDE, tokenizer_with_template
from test_reasoning_special_tokens import _DecodesLikeTheEngines

from lightning_agents.datamodules.conversations import normalize_conversation, tokenize_conversation
from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.rollout.agent_turn import model_notice_role, model_tool_call_style
from lightning_agents.rollout.hf_engine import HFGenerationEngine, decode_completions, stop_token_ids
from lightning_agents.rollout.tool_calls import is_notice, parse_tool_calls
from lightning_agents.rollout.vllm_engine import pack_completions
from lightning_agents.tasks import CalculatorTask

V03 = OURS / "vllm_mistral_v03_parallel.jinja"
NEMO = OURS / "mistral_nemo_2407.jinja"
SMALL = OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja"
#: What the models write (tests/rollout/test_agent_rollout_mistral.py): a JSON list after
#: [TOOL_CALLS] (v3 tokenizers), `name[ARGS]{json}` (Small 3.2's v11).
CALLS = {
    V03: '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "17*23"}}]',
    NEMO: '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "17*23"}}]',
    SMALL: '[TOOL_CALLS]calculator[ARGS]{"expression": "17*23"}',
}
PATHS = list(CALLS)
#: The tool list as these templates write it, in front of the last user message only.
_TOOL_LIST = re.compile(r"\[AVAILABLE_TOOLS\].*?\[/AVAILABLE_TOOLS\]", re.DOTALL)
NEXT = "And what is it doubled?"
ANSWER, SECOND = "It is 391.", "It is 782."


def _botched(path):
    call = CALLS[path]
    return call[: call.index("17*") + 3]


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tok(base, path):
    return tokenizer_with_template(base, path.read_text(), "<s>", "</s>", SPECIAL_WIDE)


class _AsksAgain(CalculatorTask):
    """The user speaks once more after the first answer."""

    def next_user_turn(self, messages, world, problem):
        return [{"role": "user", "content": NEXT}] if sum(m["role"] == "user" for m in messages) == 1 else None


class _AsksAgainWithAPolicy(_AsksAgain):
    """A system prompt too, as tau-bench's policy (Nemo and v0.3 write it into the last user message)."""

    def prompt(self, problem):
        return [{"role": "system", "content": "Policy: answer briefly."}, *super().prompt(problem)]


def _handed_over(tok, reply):
    """``reply`` (ended at the EOS) as the HF engine and the vLLM engines hand it over."""
    stops = stop_token_ids(tok)
    ids = tok.encode(reply, add_special_tokens=False) + [stops[0]]
    hf = decode_completions(tok, torch.tensor([ids]), torch.ones((1, len(ids)), dtype=torch.long), stops)[0]
    ones = torch.ones((1, 2), dtype=torch.long)
    packed = pack_completions(tok, ones, ones, 1, [ids], [[0.0] * len(ids)], ["stop"], stops).texts[0]
    return [hf, packed]


def _runs(ids, mask):
    """The completion as maximal runs ``(sampled, ids)`` of the loss mask."""
    runs = []
    for token, m in zip(ids, mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(token)
        else:
            runs.append((m, [token]))
    return runs


# ------------------------------------------------------------------------------ decode (step 1)
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_the_engines_hand_a_mistral_reply_over_with_its_call_markers(base, path):
    tok = _tok(base, path)
    assert tok.convert_tokens_to_ids("[TOOL_CALLS]") in tok.all_special_ids  # as in the real tokenizers
    style = model_tool_call_style(tok)
    for reply in (CALLS[path], "Let me compute it." + CALLS[path], _botched(path)):
        # before: ' [{"name": ...' and 'calculator{"expression": ...}' (the markers decoded away)
        assert _handed_over(tok, reply) == [reply, reply]
    # a call after text is a call (it was the final answer, the call never ran)
    content, calls = parse_tool_calls("Let me compute it." + CALLS[path], "call_0", style)
    assert content == "Let me compute it." and [c["function"]["name"] for c in calls] == ["calculator"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_a_call_after_text_runs_as_the_engines_decode_it(base, path):
    tok = _tok(base, path)
    task = CalculatorTask(split="val", n=1)
    engine = _DecodesLikeTheEngines(tok, ["Let me compute it." + CALLS[path], ANSWER])
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    rollout = batch.rollouts[0]
    # before: 0 calls, one turn, the call text stored as the answer
    assert rollout["info"]["tool_calls"] == 1 and rollout["info"]["turns"] == 2
    assert rollout["traj"][1]["content"] == "Let me compute it." and rollout["traj"][2]["content"] == "391"


# ------------------------------------------------------ notice and a user's next turn (step 2)
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_a_malformed_call_is_answered_by_a_user_notice(base, path):
    # a tool notice makes two assistant turns without calls meet, which the templates refuse
    assert model_notice_role(_tok(base, path)) == "user"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
@pytest.mark.parametrize("first", ["botched", "call"])
@pytest.mark.parametrize("task_class", [_AsksAgain, _AsksAgainWithAPolicy], ids=["no-system", "system"])
def test_a_user_follow_up_keeps_the_batch_and_streams_what_the_template_writes_less_the_moved_list(
    base, path, first, task_class
):
    tok = _tok(base, path)
    task = task_class(split="val", n=1)
    opening = _botched(path) if first == "botched" else CALLS[path]
    engine = _DecodesLikeTheEngines(tok, [opening, ANSWER, SECOND])
    # before: "roles must alternate" (botched) and "renders earlier turns differently" (call)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=4)
    rollout, out = batch.rollouts[0], batch.out
    head = len(task.prompt(task.problems[0]))
    traj = rollout["traj"]
    assert rollout["info"]["malformed_calls"] == (first == "botched") and rollout["info"]["finished"]
    assert [m["role"] for m in traj[head:]] == ["assistant", "user" if first == "botched" else "tool"] + [
        "assistant",
        "user",
        "assistant",
    ]
    assert is_notice(traj[head + 1]) == (first == "botched") and traj[head + 3]["content"] == NEXT
    ids, mask = out.completion_ids[0], out.loss_mask[0]
    real = out.completion_mask[0].bool()
    runs = _runs(ids[real].tolist(), mask[real].tolist())
    # the trained tokens are the sampled ones, each turn one run, with glue between them
    assert [m for m, _ in runs] == [1, 0, 1, 0, 1]
    assert [r for m, r in runs if m] == engine.sampled
    # each glue is what the template writes after the sampled turn once the new messages are last,
    # less the tool list it writes in front of the newest user message: the stream keeps the list
    # once, where the first turn was sampled (at 83923b3 the glue wrote it again at each user message)
    render = HFGenerationEngine(None, tok).render
    for glue, new in ((runs[1][1], head + 2), (runs[3][1], head + 4)):
        served = render(traj[:new], rollout["tools"]).rpartition("</s>")[2]
        assert tok.decode(glue) == _TOOL_LIST.sub("", served, count=1)
    assert NEXT in tok.decode(runs[3][1])
    prompt = out.prompt_ids[0][out.prompt_mask[0].bool()].tolist()
    assert tok.decode(prompt + ids[real].tolist()).count("[AVAILABLE_TOOLS]") == 1


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_two_botched_replies_in_a_row_keep_the_batch_and_the_episode_trains_as_sft(base, path):
    tok = _tok(base, path)
    task = CalculatorTask(split="val", n=1)
    engine = _DecodesLikeTheEngines(tok, [_botched(path), _botched(path), ANSWER])
    # before (tool notices): the second notice's render raised "roles must alternate"
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    rollout = batch.rollouts[0]
    assert rollout["info"]["malformed_calls"] == 2 and rollout["info"]["finished"]
    messages, tools = normalize_conversation({"messages": rollout["traj"], "tools": rollout["tools"]})
    assert tokenize_conversation(tok, messages, tools)["input_ids"]  # the stored episode renders


# ------------------------------------------------------------------------------ the moved span
def test_moved_text_is_the_one_span_the_rendering_leaves_out():
    from lightning_agents.rollout.agent_turn import moved_text  # new at this commit

    assert moved_text("<s>[T]x[/T][I]q[/I]a</s>", "<s>[I]q[/I]a</s>") in ("[T]x[/T]", "T]x[/T][")
    assert moved_text("<s>[I]q[/I]a</s>", "<s>[I]q[/I]a</s>") is None  # nothing left out
    assert moved_text("<s>[T]x[/T][I]q[/I]a</s>", "<s>[I]q[/I]b</s>") is None  # the turn changed too
    assert moved_text("<s>A[I]q[/I]B</s>", "<s>[I]q[/I]</s>") is None  # two spans


#: A template that drops its tool list from the first user message once a third one comes, and
#: writes it nowhere else.
_DROPS = (
    "{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- if tools and loop.index0 == 0 and messages|selectattr('role', 'equalto', 'user')|list|length < 3 %}"
    "[T]{{ tools|length }} tools[/T]{%- endif %}[I]{{ m.content }}[/I]"
    "{%- else %}{{ m.content }}</s>{%- endif %}{%- endfor %}"
)


def test_a_template_that_drops_text_is_still_refused(base):
    # the moved-text glue takes only a span the glue writes again: with text dropped, the token
    # stream would hold a conversation no rendering has (a guard of the new path: refused before too)
    tok = tokenizer_with_template(base, _DROPS, "<s>", "</s>", SPECIAL_WIDE)
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "b"},
    ]
    with pytest.raises(LightningAgentsError, match="renders earlier turns differently"):
        continuation_text(tok, history, [{"role": "user", "content": NEXT}], [{"type": "function"}], None, ["</s>"])
