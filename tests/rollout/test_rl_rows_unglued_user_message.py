"""A user message the one token stream cannot take (review of session 49's ``rl_rows``).

Mistral's templates (Nemo, v0.3, Small 3.2) write the tool list in front of every user message *equal*
to the last one (``message == user_messages[-1]`` compares values). A malformed call's notice is the
same text every time, and a user may say the same thing twice ("Yes."): once another user message lies
between the two, the history renders with the list in two other places and the glue stops the batch
("renders earlier turns differently"), with or without a system prompt. ``auto`` then takes the message
in a row of its own, prompted with the served request; ``stream`` names the setting that would.
"""

from __future__ import annotations

import pytest
from test_notice_role_all_templates import PATHS, _botched
from test_rl_rows_per_user_turn import NEMO, _replies, _run, _served_ids, _ServedDecoded, _ServedTokens, _template

from lightning_agents.errors import LightningAgentsError
from lightning_agents.rollout import SamplingConfig, agent_loop
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.hf_engine import marked_style, stop_token_ids
from lightning_agents.tasks import CalculatorTask

SMALL = next(p for p in PATHS if p.name.startswith("Mistral-Small-3.2"))
SAID = ["Yes.", "No.", "Yes."]


class _ThreeTurns(CalculatorTask):
    """The calculator, no system prompt, and two more user turns."""

    def next_user_turn(self, messages, world, problem):
        asked = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": f"And question {asked + 1}?"}] if asked < 3 else None


class _SaysYesTwice(CalculatorTask):
    """The user says "Yes.", "No." and "Yes." again after the first question."""

    def next_user_turn(self, messages, world, problem):
        asked = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": SAID[asked - 1]}] if asked <= len(SAID) else None


def _botched_episodes(tok, rows):
    """Each user turn: a malformed call (its notice, a user message), then the answer."""
    stops = stop_token_ids(tok)
    bad, end = _botched(tok, "mistral", stops)
    answer = _replies(tok, calls=False)[0][0]
    engine = (_ServedDecoded if marked_style(tok) else _ServedTokens)(tok, [(bad + end, end), answer], stops)
    task = _ThreeTurns(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=8, rows=rows)
    return engine, batch


def _rows_open_with_served_requests(tok, engine, batch):
    """Every row after the first is prompted with the served request at one of the user messages."""
    traj, tools = batch.rollouts[0]["traj"], batch.rollouts[0]["tools"]
    served = [_served_ids(tok, engine, traj[: j + 1], tools) for j, m in enumerate(traj) if m["role"] == "user"]
    out = batch.out
    for r in range(1, len(batch.row_episode)):
        assert out.prompt_ids[r][out.prompt_mask[r].bool()].tolist() in served, r


@pytest.mark.parametrize("path", [NEMO, SMALL], ids=lambda p: p.name)
def test_auto_takes_a_repeated_notice_in_a_row_of_its_own(path, monkeypatch):
    monkeypatch.setattr(agent_loop, "_GROWS", {})
    tok = _template(_base(), path)
    engine, batch = _botched_episodes(tok, "auto")
    assert batch.rollouts[0]["info"]["malformed_calls"] == 3 and batch.rollouts[0]["info"]["finished"]
    assert len(batch.row_episode) > 1
    _rows_open_with_served_requests(tok, engine, batch)


@pytest.mark.parametrize("path", [NEMO, SMALL], ids=lambda p: p.name)
def test_auto_takes_a_user_who_repeats_himself_in_a_row_of_its_own(path, monkeypatch):
    monkeypatch.setattr(agent_loop, "_GROWS", {})
    tok = _template(_base(), path)
    engine, batch = _run(tok, _SaysYesTwice(split="val", n=1), "auto")
    assert batch.rollouts[0]["info"]["finished"] and len(batch.row_episode) > 1
    _rows_open_with_served_requests(tok, engine, batch)


@pytest.mark.parametrize("path", [NEMO, SMALL], ids=lambda p: p.name)
def test_the_stream_names_the_setting_that_takes_the_message(path):
    tok = _template(_base(), path)
    with pytest.raises(LightningAgentsError, match=r"renders earlier turns differently.*model\.rl_rows: per_user_turn"):
        _botched_episodes(tok, "stream")


def _base():
    from lightning_agents.models import load_tokenizer

    return load_tokenizer("embedded:student")
