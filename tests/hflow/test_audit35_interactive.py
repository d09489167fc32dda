"""The terminal rater as a person meets it: Ctrl-C and Ctrl-D mid-question, answers that are not
answers (session-35 audit; pty transcripts in /work/h35/hflow/)."""

from __future__ import annotations

import io
import json

import pytest
import yaml

from lightning_agents.hflow.preferences import InteractiveRater

TRACE = {"output": "x", "cost": 0.0, "steps": []}
PROBLEM = {"id": "p1", "question": "2 + 2?"}


def _replies(*items):
    """An ``input`` stand-in: strings are typed, exception classes are raised."""
    queue = list(items)
    asked = []

    def fake(prompt):
        asked.append(prompt)
        item = queue.pop(0)
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item()
        return item

    return fake, asked


def test_eof_at_a_question_skips_the_rest_of_the_run_instead_of_crashing():
    fake, asked = _replies(EOFError)
    shown = io.StringIO()
    rater = InteractiveRater(input_fn=fake, stream=shown)
    assert rater.compare(PROBLEM, TRACE, TRACE, "q1") is None
    assert "no more input" in shown.getvalue()
    # later questions are not put to a closed terminal (and do not raise)
    assert rater.compare(PROBLEM, TRACE, TRACE, "q2") is None and len(asked) == 1


def test_an_answer_that_is_not_one_says_so_and_a_third_one_says_it_skipped():
    fake, _ = _replies("maybe", "A ", "")
    shown = io.StringIO()
    assert InteractiveRater(input_fn=fake, stream=shown).compare(PROBLEM, TRACE, TRACE, "q") == "a"
    assert "'maybe' is not an answer: type a, b, t (tie) or s (skip), try again" in shown.getvalue()
    fake, _ = _replies("x", "y", "z")
    shown = io.StringIO()
    assert InteractiveRater(input_fn=fake, stream=shown).compare(PROBLEM, TRACE, TRACE, "q") is None
    assert shown.getvalue().count("is not an answer") == 3 and "(question skipped)" in shown.getvalue()


def _config(tmp_path):
    return {
        "backbones": [
            {"name": "student", "model": "embedded:student", "kind": "hf", "input_price": 1.0, "output_price": 2.0},
            {"name": "teacher", "model": "embedded:teacher", "kind": "hf", "input_price": 4.0, "output_price": 8.0},
        ],
        "task": "embedded:arithmetic/val",
        "task_size": 16,
        "generations": 2,
        "search": {
            "eval_problems": 4,
            "heldout_problems": 4,
            "population_size": 3,
            "offspring": 2,
            "max_nodes": 3,
            "lambda_cost": 50.0,
            "rater": "interactive",
            "questions_per_generation": 2,
            "workers": 1,
            "seed": 0,
        },
        "output": str(tmp_path / "out"),
        "progress": False,
    }


def test_ctrl_c_mid_question_keeps_the_answer_and_ctrl_d_lets_the_run_finish(tmp_path, monkeypatch):
    from lightning_agents.cli import cli_main
    from lightning_agents.hflow import factory

    def with_replies(*items):
        fake, asked = _replies(*items)
        monkeypatch.setattr(factory, "InteractiveRater", lambda: InteractiveRater(input_fn=fake))
        return asked

    path = tmp_path / "evolve.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path)))
    prefs = tmp_path / "out" / "preferences.jsonl"
    with_replies("a", KeyboardInterrupt)
    # still a KeyboardInterrupt, whose message (the last line shown) says what is kept and how to go on
    with pytest.raises(KeyboardInterrupt, match="evolve: interrupted; 1 answer kept in .*run the same command again"):
        cli_main(["evolve", "--config", str(path)])
    first = prefs.read_text().splitlines()
    assert len(first) == 1 and json.loads(first[0])["winner"] == "a"
    # the restart takes the kept answer instead of asking again; Ctrl-D at its first question
    # stops the questions, not the search
    asked = with_replies(EOFError)
    cli_main(["evolve", "--config", str(path)])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["generations"] == 2 and len(asked) == 1
    assert prefs.read_text().splitlines()[:1] == first
