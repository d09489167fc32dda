"""Review of 83923b3 (Mistral Nemo / v0.3 / Small 3.2 agent rollouts): what its moved-text glue and
its marked decode still got wrong, as tests that fail at 83923b3 (the review's proposals, taken).

1. Every user message after the first (a follow-up, a malformed call's user notice) put one more copy
   of the tool list into the RL token stream: a replayed tau-bench airline episode (14 tools, 25 user
   turns) was 71k tokens against 4.6k served with the real Nemo tokenizer.
2. The moved-text glue took a span the template drops for moved text when a new message only quotes it.
3. Mistral replies were handed over with all ~1000 control tokens of the real tokenizers (``[INST]``,
   ``<unk>``, ``[IMG]``...), not only the call markers: single-turn answers read differently than
   before and than vLLM's chat server (no tools in the request) hands them over.
4. Nemo and v0.3 still write their system prompt (v0.3 its call instructions too) with the newest user
   message only, so the stream keeps one copy per user message: the warning says by how many tokens
   per user turn it grows (there was no warning of it).
"""

from __future__ import annotations

import logging
import re

import pytest
from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template
from test_mistral_malformed_follow_up import (
    _DROPS,  # drops its tool note from the first user message once a third comes, writes it nowhere else
    ANSWER,
    CALLS,
    PATHS,
    _handed_over,
    _runs,
    _tok,
)
from test_reasoning_special_tokens import _DecodesLikeTheEngines

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_loop
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.rollout.hf_engine import HFGenerationEngine
from lightning_agents.tasks import CalculatorTask

FOLLOW_UPS = 3


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


class _AsksThrice(CalculatorTask):
    """The user speaks three more times, one question per answer."""

    def next_user_turn(self, messages, world, problem):
        users = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": f"And times {users + 1}?"}] if users <= FOLLOW_UPS else None


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_user_follow_ups_add_no_copy_of_the_tool_list_to_the_token_stream(base, path):
    tok = _tok(base, path)
    task = _AsksThrice(split="val", n=1)
    engine = _DecodesLikeTheEngines(tok, [CALLS[path], ANSWER, ANSWER, ANSWER, ANSWER])
    batch = run_agent_rl(
        engine,
        task,
        task.problems,
        num_samples=1,
        sampling=SamplingConfig(),
        max_turns=6,
    )
    out, rollout = batch.out, batch.rollouts[0]
    assert rollout["info"]["finished"] and sum(m["role"] == "user" for m in rollout["traj"]) == 1 + FOLLOW_UPS
    prompt = out.prompt_ids[0][out.prompt_mask[0].bool()].tolist()
    real = out.completion_mask[0].bool()
    ids, mask = out.completion_ids[0][real].tolist(), out.loss_mask[0][real].tolist()
    # the trained tokens are still the sampled ones, each user turn in the glue
    assert [r for m, r in _runs(ids, mask) if m] == engine.sampled
    glue = tok.decode([t for t, m in zip(ids, mask) if not m])
    assert all(f"And times {k}?" in glue for k in range(2, 2 + FOLLOW_UPS))
    # at 83923b3: 1 + FOLLOW_UPS copies (the template writes the list before the newest user message,
    # and the glue wrote it again each time while the stream kept the earlier ones)
    assert tok.decode(prompt + ids).count("[AVAILABLE_TOOLS]") == 1


def test_a_dropped_span_that_a_new_message_only_quotes_is_not_moved_text(base):
    tok = tokenizer_with_template(base, _DROPS, "<s>", "</s>", SPECIAL_WIDE)
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "b"},
    ]
    quoting = [{"role": "user", "content": "What does [T]1 tools[/T][I] mean?"}]
    # at 83923b3 accepted (glue '[I]What does [T]1 tools[/T][I] mean?[/I]'): the template dropped the
    # note, and only the user's own text holds it again
    with pytest.raises(LightningAgentsError, match="renders earlier turns differently"):
        continuation_text(tok, history, quoting, [{"type": "function"}], None, ["</s>"])


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_a_mistral_reply_is_handed_over_with_its_call_markers_only(base, path):
    tok = _tok(base, path)
    assert tok.convert_tokens_to_ids("[INST]") in tok.all_special_ids  # a control token, as in the real ones
    # the call markers stay (83923b3's fix)...
    assert _handed_over(tok, "Let me compute it." + CALLS[path]) == ["Let me compute it." + CALLS[path]] * 2
    # ...other control tokens are dropped, as before it and as vLLM's server hands a reply over
    # (at 83923b3: 'It is 391.[INST]And 2?[/INST]It is 2.')
    assert _handed_over(tok, "It is 391.[INST]And 2?[/INST]It is 2.") == ["It is 391.And 2?It is 2."] * 2


class _AsksThriceWithAPolicy(_AsksThrice):
    """A system prompt too, as tau-bench's policy."""

    def prompt(self, problem):
        return [{"role": "system", "content": "Policy: " + "check each step twice. " * 8}, *super().prompt(problem)]


_GROWS = re.compile(r"grows by about (\d+) tokens per user turn")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_the_warning_says_how_much_the_stream_grows_per_user_turn(base, path, caplog, monkeypatch):
    monkeypatch.setattr(agent_loop, "_MOVED_TEXT", set())  # warned once per template: afresh here
    monkeypatch.setattr(agent_loop, "_GROWTH_MEASURED", set(), raising=False)
    tok = _tok(base, path)
    task = _AsksThriceWithAPolicy(split="val", n=1)
    engine = _DecodesLikeTheEngines(tok, [CALLS[path], ANSWER, ANSWER, ANSWER, ANSWER])
    with caplog.at_level(logging.WARNING, logger=agent_loop.__name__):
        batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=6)
    out, rollout = batch.out, batch.rollouts[0]
    stream = int(out.prompt_mask[0].sum() + out.completion_mask[0].sum())
    # a served request for the last turn: the conversation before it rendered, plus the turn sampled
    last = HFGenerationEngine(None, tok).render(rollout["traj"][:-1], rollout["tools"])
    served = len(tok.encode(last, add_special_tokens=False)) + len(engine.sampled[-1])
    said = [int(m) for r in caplog.records for m in _GROWS.findall(r.getMessage())]
    if path.name.startswith("Mistral-Small"):  # the system prompt written once, first: no growth
        assert not said and abs(stream - served) <= 10, (stream, served)
        return
    # Nemo and v0.3 write the policy (v0.3 its call instructions too) with the newest user message only;
    # at 83923b3 no warning said so (and the tool list grew the stream as well)
    assert len(said) == 1, caplog.text
    grown = (stream - served) / FOLLOW_UPS
    assert said[0] > 100 and abs(grown - said[0]) <= 5, (grown, said)


#: A template that writes a mark before the last assistant turn only while it is last, and the same mark
#: in its generation prompt (as Qwen3's empty think block): the history loses one span that the glue
#: holds again, but after the new message, where the generation prompt writes it.
_MARKS_THE_LAST = (
    "{%- for m in messages %}{%- if m.role == 'user' %}[USR]{{ m.content }}[/USR]"
    "{%- else %}{%- if loop.last %}[THK]{%- endif %}{{ m.content }}</s>{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}[AST][THK]{%- endif %}"
)


@pytest.mark.parametrize("content", ["", "And 2?"], ids=["blank", "text"])
def test_a_span_the_generation_prompt_writes_after_the_new_messages_stays_in_the_glue(base, content):
    tok = tokenizer_with_template(base, _MARKS_THE_LAST, "<s>", "</s>", SPECIAL_WIDE)
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    glue = continuation_text(tok, history, [{"role": "user", "content": content}], None, None, ["</s>"])
    # what the template writes after the sampled turn; the review's patch took [THK] out of the
    # generation prompt when the new message was blank (nothing in front of which to look for it)
    assert glue == f"[USR]{content}[/USR][AST][THK]"
