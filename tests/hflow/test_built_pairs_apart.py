"""Built pairs that do not disturb the main search (issue 17, run 38). Run 37 found the built
pairs, in a benchmark whose rater answers by correctness then cost, making no child yet changing
HumanEval's main search: they took about 7 of 23 question slots from the contender questions,
their answers (all explained by the fitness) were fitted into the preference model, and their
coin, feature and problem draws came from the search's own random stream. Now they ask on top of
``questions_per_generation``, draw from their own generator, and an answer the fitness explains
is kept in preferences.jsonl but not fitted, before and after a restart."""

from __future__ import annotations

import json

from test_preference_polish import GEN, GEN_REFINED, PLAIN
from test_preference_taste_gate import _has_refine, _search

from lightning_agents.hflow import PreferenceStore
from lightning_agents.hflow.preferences import Comparison

# GEN's structural edits to a programmer or a pricey backbone are right where GEN is wrong on
# these problems: every built pair's answer is one the fitness explains (the edit, for being right)
WRONG_FOR_GEN = ("p1", "p2", "p3", "p4", "p6", "p7", "p8", "p9")


def _contender_answers(search) -> list[Comparison]:
    return [c for c in search.preferences.comparisons if c.a in search.seen and c.b in search.seen]


def _built_answers(search) -> list[Comparison]:
    return [c for c in search.preferences.comparisons if c.a in search.built or c.b in search.built]


def test_built_pairs_ask_on_top_of_the_contender_questions():
    """Before: with one question a generation the built pair took it, and GEN and GEN_REFINED
    (the same score, GEN_REFINED dearer) were never compared."""
    search = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    search.ask_preferences()
    assert len(_built_answers(search)) == 1
    assert len(_contender_answers(search)) == 1  # questions_per_generation=1, all the contenders'
    assert search.questions_asked == 2


def test_built_pairs_leave_the_search_random_stream_alone():
    """The search's generator ends where a search without built pairs leaves it, and its
    contender questions are the same. Before: the built pair's side coin, feature and problem
    order were drawn from ``search.rng``."""
    with_pairs = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    without = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    without.config.preference_built_pairs = 0
    for search in (with_pairs, without):  # room for both at HEAD too: only the draws differ
        search.config.questions_per_generation = 2
    assert with_pairs.rng.getstate() == without.rng.getstate()
    for _ in range(3):
        with_pairs.ask_preferences()
        without.ask_preferences()
    assert _built_answers(with_pairs) and not without.built
    assert with_pairs.rng.getstate() == without.rng.getstate()
    assert _contender_answers(with_pairs) == without.preferences.comparisons


def _fitted_rows(search) -> int:
    return search.preference_model.n_comparisons


def test_an_explained_built_answer_is_kept_but_not_fitted(tmp_path):
    """Every answer is in preferences.jsonl; a built pair's answer for the edit's right answer is
    marked ``fitted: false`` there and left out of the model. Before: it was fitted (no mark)."""
    path = tmp_path / "preferences.jsonl"
    search = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    search.preferences = PreferenceStore(str(path))
    for _ in range(3):
        search.ask_preferences()
    built = _built_answers(search)
    assert built and all(not c.fitted for c in built)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len(search.preferences.comparisons)
    assert sum(r.get("fitted", True) is False for r in rows) == len(built)
    assert _fitted_rows(search) == len(_contender_answers(search))
    # the model is the one fitted to the contender answers alone
    alone = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    alone.preferences.comparisons = _contender_answers(search)
    alone.built = dict(search.built)
    alone._fit_preferences()
    assert list(alone.preference_model.w) == list(search.preference_model.w)


def test_a_restart_fits_the_same_answers(tmp_path):
    """Resumed from the state saved after the first round, the second round's answers waiting in
    preferences.jsonl (pending, taken back as the questions come again, marks and all), the
    resumed search keeps and fits what the uninterrupted one did. Before: no mark was kept."""
    path = tmp_path / "preferences.jsonl"
    first = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    first.preferences = PreferenceStore(str(path))
    first.ask_preferences()
    saved = json.loads(json.dumps(first.state_dict()))
    first.ask_preferences()
    assert [c.fitted for c in first.preferences.comparisons].count(False) == 2

    resumed = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    resumed.preferences = PreferenceStore(str(path))
    resumed.load_state_dict(saved)
    assert len(resumed.preferences.pending) == 2 and _fitted_rows(resumed) == 1
    asked = resumed.questions_asked
    resumed.ask_preferences()
    assert resumed.preferences.comparisons == first.preferences.comparisons
    assert resumed.questions_asked - asked == 2 and not resumed.preferences.pending
    assert _fitted_rows(resumed) == _fitted_rows(first) == 2
    assert list(resumed.preference_model.w) == list(first.preference_model.w)


def test_a_built_answer_against_the_objectives_is_fitted():
    """A rater who wants a refine step prefers PLAIN's dearer refine edit: a taste, fitted."""
    search = _search((PLAIN, GEN), criterion=_has_refine)
    for _ in range(6):
        search.ask_preferences()
    liked = [c for c in _built_answers(search) if {"a": c.a, "b": c.b}.get(c.winner) in search.built]
    assert liked and all(c.fitted for c in liked)
    assert _fitted_rows(search) >= len(liked)


def test_a_fitted_mark_is_read_back_and_checked(tmp_path):
    """The mark survives the file (absent on ordinary rows, so older files read as before); a
    mark that is not true/false is refused with the file and line."""
    path = tmp_path / "preferences.jsonl"
    store = PreferenceStore(str(path))
    store.add(Comparison("x", "y", "p1", "a", "simulated", 0))
    store.add(Comparison("x", "z", "p1", "b", "simulated", 0, fitted=False))
    lines = path.read_text().splitlines()
    assert "fitted" not in json.loads(lines[0]) and json.loads(lines[1])["fitted"] is False
    assert [c.fitted for c in PreferenceStore(str(path)).pending] == [True, False]
    path.write_text(lines[1].replace("false", '"no"') + "\n")
    try:
        PreferenceStore(str(path))
    except ValueError as exc:
        assert f"{path}:1" in str(exc)
    else:
        raise AssertionError("a fitted mark of 'no' was accepted")
