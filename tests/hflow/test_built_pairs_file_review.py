"""File mode (review of session 52's file-mode fixes): an open question asked the other way round is not
written twice, an answer whose mark a later generation changed is not stored twice on a resume,
and a built answer keeps the mark of the traces the person saw when the callback's refresh drops
them from the cache."""

from __future__ import annotations

import json

from test_built_pairs_file_liked import PROGRAMMER, TWICE_REFINED, _answer_for_refine, _person_search, _queued
from test_built_pairs_file_restarts import _checkpoint, _file_search, _keys

from lightning_agents.hflow import FileRater, PreferenceStore


def test_an_open_question_asked_the_other_way_round_is_not_written_twice(tmp_path):
    """The contender pair is asked on the only rater problem in every generation, before the person
    answers: one line, so the person is asked once (before: a second line the other way round,
    whose answer was then dropped)."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    search = _file_search(questions, prefs)
    search.config.preference_built_pairs = 0
    search.rater_problems = search.rater_problems[:1]
    for _ in range(6):  # the search's coin puts the pair both ways round within these
        search.ask_preferences()
    assert search.questions_asked == 6
    assert len(questions.read_text().splitlines()) == 1


def test_an_answer_unfitted_after_a_checkpoint_is_stored_once_on_a_resume(tmp_path):
    """With no trace log the programmer pair's answer is read back fitted; the next generation
    builds the pair and unfits it; a resume from the checkpoint between the two keeps one copy
    (before: the file's unfitted copy loaded as pending and was stored next to the state's)."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    first = _person_search(questions, [PROGRAMMER])
    first.preferences = PreferenceStore(str(prefs))
    start = _checkpoint(first)
    first.ask_preferences()
    _answer_for_refine(questions, first)

    plan: list = []
    replay = _person_search(questions, [])
    replay._built_pair = lambda parent, skip: None if skip or not plan else plan.pop(0)
    replay.preferences = PreferenceStore(str(prefs))
    replay.load_state_dict(start)
    replay.ask_preferences()  # builds nothing: the answer is only read back
    between = _checkpoint(replay)
    plan.append(PROGRAMMER)
    replay.ask_preferences()  # builds the pair: the answer is unfitted
    assert not [c for c in replay.preferences.comparisons if PROGRAMMER[1].hash() in (c.a, c.b)][0].fitted

    resumed = _person_search(questions, [])
    resumed.preferences = PreferenceStore(str(prefs))
    resumed.load_state_dict(between)
    resumed.ask_preferences()
    assert max(_keys(resumed).values()) == 1
    assert len(prefs.read_text().splitlines()) == len(resumed.preferences.comparisons)
    assert not [c for c in resumed.preferences.comparisons if PROGRAMMER[1].hash() in (c.a, c.b)][0].fitted


def test_a_built_answer_read_after_the_callbacks_refresh_keeps_its_mark(tmp_path):
    """The callback refreshes the trained backbone before each run, which drops the built pair's
    traces from the cache; the person's answer (the programmer edit, right where the best is
    wrong: explained by the fitness) is still stored unfitted (before: fitted, no trace cached)."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    search = _person_search(questions, [PROGRAMMER])
    search.preferences = PreferenceStore(str(prefs))
    search.ask_preferences()
    _answer_for_refine(questions, search)
    search.refresh("cheap")  # callbacks/hflow.py's _run, before search.run
    search.rater = FileRater(str(questions))
    search.ask_preferences()
    child = PROGRAMMER[1].hash()
    answer = next(c for c in search.preferences.comparisons if child in (c.a, c.b))
    assert {"a": answer.a, "b": answer.b}[answer.winner] == child
    assert not answer.fitted and _queued(search) == []
    rows = [json.loads(line) for line in prefs.read_text().splitlines()]
    assert [r["fitted"] for r in rows if child in (r["a"], r["b"])] == [False]


def test_a_waiting_answer_whose_line_the_person_deleted_is_decided_in_that_generation(tmp_path):
    """The run read the person's liked answer, then the person tidied the answered line away, and
    the search resumed from the checkpoint saved while the question waited: the answer comes back
    from preferences.jsonl at the end of the contender questions, and the edit is a child of this
    generation (before: the record waited a generation more, its child one generation late)."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    first = _person_search(questions, [TWICE_REFINED])
    first.preferences = PreferenceStore(str(prefs))
    first.ask_preferences()
    waiting = _checkpoint(first)
    _answer_for_refine(questions, first)
    first.rater = FileRater(str(questions))
    first.ask_preferences()  # read back: stored in preferences.jsonl
    rows = [json.loads(line) for line in questions.read_text().splitlines()]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows if r["winner"] is None))

    resumed = _person_search(questions, [])
    resumed.preferences = PreferenceStore(str(prefs))
    resumed.load_state_dict(waiting)
    resumed.ask_preferences()
    child = TWICE_REFINED[1].hash()
    assert _queued(resumed).count(child) == 1 and "op:refine" in resumed.built_won
    assert not resumed.state_dict()["built_waiting"]
