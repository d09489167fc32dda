"""One measured-growth cache for the growth warning and ``rows="auto"`` (session 50).

Before, ``_grows_per_user_turn`` (``auto``) cached "could not measure" (a blank user text, a conversation
or probe the template refuses) as "does not grow", for good, under its (template, system prompt, tools,
arguments) key, and ``_warn_growth`` measured the same growth again through ``_written_while_last``
under a cache and key of its own.
"""

from __future__ import annotations

import logging

import pytest
from chat_template_helpers import OURS, tokenizer_with_template
from test_notice_role_all_templates import _spec

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import agent_loop
from lightning_agents.rollout.agent_loop import continuation_text

NEMO = OURS / "mistral_nemo_2407.jinja"
POLICY = "Policy: " + "check each step twice. " * 8
HEAD = [
    {"role": "system", "content": POLICY},
    {"role": "user", "content": "What is 17*23?"},
    {"role": "assistant", "content": "It is 391."},
]
USER = {"role": "user", "content": "And what is it times 2?"}
BLANK = {"role": "user", "content": "   "}


@pytest.fixture(scope="module")
def nemo():
    eos, bos, pattern = _spec(NEMO)
    return tokenizer_with_template(load_tokenizer("embedded:student"), NEMO.read_text(), bos, eos, pattern)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(agent_loop, "_GROWS", {})
    monkeypatch.setattr(agent_loop, "_GROWTH_MEASURED", set())
    monkeypatch.setattr(agent_loop, "_GROWTH_UNMEASURED", set(), raising=False)


def _counted(monkeypatch) -> list[int]:
    """Counts the growth measures (:func:`agent_loop._written_while_last` calls)."""
    calls, measure = [], agent_loop._written_while_last

    def counted(*args, **kwargs):
        calls.append(1)
        return measure(*args, **kwargs)

    monkeypatch.setattr(agent_loop, "_written_while_last", counted)
    return calls


def test_a_blank_user_turn_is_no_verdict_for_the_later_ones(nemo):
    """Nemo writes the system prompt with the newest user message only: a blank user text gives the
    measure nothing to find, which said "does not grow" for every later turn of that key."""
    assert not agent_loop._grows_per_user_turn(nemo, {}, [*HEAD, BLANK], None)
    assert agent_loop._grows_per_user_turn(nemo, {}, [*HEAD, USER], None)


def test_a_growth_auto_measured_is_the_one_the_warning_reads(nemo, monkeypatch, caplog):
    calls = _counted(monkeypatch)
    assert agent_loop._grows_per_user_turn(nemo, {}, [*HEAD, USER], None)
    assert len(calls) == 1
    with caplog.at_level(logging.WARNING, logger=agent_loop.__name__):
        continuation_text(nemo, HEAD, [USER], None, None, ["</s>"], "</s>")
    assert "beyond a served request" in caplog.text  # warned, from the cached measure
    assert len(calls) == 1


def test_a_growth_the_warning_measured_is_the_one_auto_reads(nemo, monkeypatch, caplog):
    calls = _counted(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=agent_loop.__name__):
        continuation_text(nemo, HEAD, [USER], None, None, ["</s>"], "</s>")
    assert "beyond a served request" in caplog.text and len(calls) == 1
    later = [*HEAD, USER, {"role": "assistant", "content": "It is 782."}, {"role": "user", "content": "And 3?"}]
    assert agent_loop._grows_per_user_turn(nemo, {}, later, None)
    assert len(calls) == 1


def test_a_growth_that_cannot_be_measured_is_said_once_and_measured_again(nemo, monkeypatch, caplog):
    """A probe the template refuses (an assistant turn after the conversation): no verdict cached, the
    reason logged once, and the next user turn measures again."""
    calls = _counted(monkeypatch)
    render = agent_loop.render_chat_template

    def refuses_the_probe(tok, messages, **kwargs):
        if messages[-1].get("content") == agent_loop._GROWTH_PROBE:
            raise ValueError("no assistant turn after a user's here")
        return render(tok, messages, **kwargs)

    monkeypatch.setattr(agent_loop, "render_chat_template", refuses_the_probe)
    with caplog.at_level(logging.INFO, logger=agent_loop.__name__):
        for _ in range(2):
            assert not agent_loop._grows_per_user_turn(nemo, {}, [*HEAD, USER], None)
    said = [r.getMessage() for r in caplog.records if "could not measure" in r.getMessage()]
    assert len(said) == 1 and "no assistant turn after a user's here" in said[0], caplog.text
    assert len(calls) == 2 and agent_loop._GROWS == {}
    monkeypatch.setattr(agent_loop, "render_chat_template", render)
    assert agent_loop._grows_per_user_turn(nemo, {}, [*HEAD, USER], None)
