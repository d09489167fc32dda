"""File mode across restarts and the final round: a person's answer is stored once and fitted
once, whatever state the search resumes from (session 52). The search writes its questions to the
questions file, the person answers between runs, and the next run reads the answers back; a run
restarted from a state saved before it asked a question asks it again and the file gives the same
answer, which before was stored (and fitted) a second time. An answer read in the final round
counts for the choice but queues no child that no generation makes, and an answer is marked as a
built pair's by the question it answers, not by a side having once been built."""

from __future__ import annotations

import json
from collections import Counter

from test_built_pairs_apart import WRONG_FOR_GEN
from test_built_pairs_file_liked import PROGRAMMER, TWICE_REFINED, _answer_for_refine, _person_search, _queued
from test_built_pairs_fitted_everywhere import _answer_like_the_fitness
from test_preference_polish import GEN, GEN_REFINED
from test_preference_taste_gate import _search

from lightning_agents.hflow import FileRater, PreferenceStore
from lightning_agents.hflow.evaluation import Evaluator


def _file_search(questions, prefs, state=None):
    """The real built pairs (:meth:`HFlowSearch._built_pair`) asked of a person through
    ``questions``, every answer kept in ``prefs``; ``state``: a checkpoint to resume from."""
    search = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    search.rater = FileRater(str(questions))
    search.preferences = PreferenceStore(str(prefs))
    if state is not None:
        search.load_state_dict(state)
    return search


def _keys(search) -> Counter:
    """How often each question (pair either way round, problem) is stored."""
    return Counter((frozenset((c.a, c.b)), c.problem_id) for c in search.preferences.comparisons)


def _as_asked(search) -> set[tuple]:
    """Every stored answer as (pair, problem, winning workflow, fitted)."""
    return {
        (frozenset((c.a, c.b)), c.problem_id, {"a": c.a, "b": c.b}.get(c.winner, "tie"), c.fitted)
        for c in search.preferences.comparisons
    }


def _checkpoint(search) -> dict:
    return json.loads(json.dumps(search.state_dict()))


def test_a_restart_from_before_the_questions_stores_each_answer_once(tmp_path):
    """The run asks a built and a contender question and stops; the checkpoint it resumes from was
    saved before them; the person has answered both. The replayed generation knows the built pair
    from its answer, as a resume from after the questions does (session 53; before, it built and
    asked it again): the answers are stored once each, with the marks a resume from after the
    questions gives (the built one, explained by the fitness, unfitted). Before: both answers were
    stored twice, and the built one fitted once (read back before the pair was known as built)."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    first = _file_search(questions, prefs)
    before = _checkpoint(first)
    assert first.ask_preferences() == 0  # both questions wait for the person
    after = _checkpoint(first)
    assert first.built and len(after["built_waiting"]) == 1
    _answer_like_the_fitness(questions, first)

    resumed_after = _file_search(questions, tmp_path / "preferences_after.jsonl", after)
    resumed_after.ask_preferences()
    resumed_before = _file_search(questions, prefs, before)
    resumed_before.ask_preferences()
    # the answered pair is known as on a resume from after it (not built and asked again: session 53)
    assert set(first.built) < set(resumed_before.built) == set(resumed_after.built)
    assert max(_keys(resumed_before).values()) == 1
    assert _as_asked(resumed_before) == _as_asked(resumed_after)
    built = [c for c in resumed_before.preferences.comparisons if set(first.built) & {c.a, c.b}]
    assert len(built) == 1 and not built[0].fitted
    rows = [json.loads(line) for line in prefs.read_text().splitlines()]
    assert len(rows) == len(resumed_before.preferences.comparisons) == 2


def test_a_restart_from_before_a_liked_built_question_fits_its_answer_once_and_makes_the_child(tmp_path):
    """The person prefers the built edit for a taste (two refine steps, dearer, no more right),
    and the run resumes from a state saved before the question: the answer is stored and fitted
    once, the edit queued once and its feature won. Before: the answer was stored and fitted
    twice."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    first = _person_search(questions, [TWICE_REFINED])
    first.preferences = PreferenceStore(str(prefs))
    before = _checkpoint(first)
    first.ask_preferences()
    _answer_for_refine(questions, first)

    resumed = _person_search(questions, [TWICE_REFINED])  # the replay builds the same pair
    resumed.preferences = PreferenceStore(str(prefs))
    resumed.load_state_dict(before)
    resumed.ask_preferences()
    child = TWICE_REFINED[1].hash()
    about = [c for c in resumed.preferences.comparisons if child in (c.a, c.b)]
    assert len(about) == 1 and about[0].fitted
    assert {"a": about[0].a, "b": about[0].b}[about[0].winner] == child
    assert max(_keys(resumed).values()) == 1
    assert resumed.preference_model.n_comparisons == len(resumed.preferences.comparisons)
    assert _queued(resumed).count(child) == 1 and "op:refine" in resumed.built_won


def test_a_restart_that_builds_another_pair_keeps_the_explained_answer_unfitted(tmp_path):
    """The run asks about the programmer edit, which the person prefers for being right where the
    best is wrong (what the fitness measures); the run resumes from a state saved before that
    question and its replay builds another pair. The answer, read back with no record of the
    question, is still a built pair's (the questions file says so) and is kept unfitted. Before:
    it was fitted, and once the edit was known to the model it taught accuracy again."""
    questions, prefs, traces = (tmp_path / f for f in ("questions.jsonl", "preferences.jsonl", "traces.jsonl"))
    first = _person_search(questions, [PROGRAMMER])
    first.preferences = PreferenceStore(str(prefs))
    first.evaluator.trace_log = traces  # as evolve streams every trace, read back after a restart
    before = _checkpoint(first)
    first.ask_preferences()
    _answer_for_refine(questions, first)
    programmer = PROGRAMMER[1].hash()
    rows = [json.loads(line) for line in questions.read_text().splitlines()]
    assert [r.get("built", False) for r in rows if programmer in (r["workflow_a"], r["workflow_b"])] == [True]

    resumed = _person_search(questions, [TWICE_REFINED])
    resumed.preferences = PreferenceStore(str(prefs))
    resumed.evaluator = Evaluator(resumed.executor, resumed.config.lambda_cost, traces)
    resumed.load_state_dict(before)
    resumed.ask_preferences()
    assert TWICE_REFINED[1].hash() in resumed.built  # the replay built another pair
    about = [c for c in resumed.preferences.comparisons if programmer in (c.a, c.b)]
    assert len(about) == 1 and not about[0].fitted
    assert {"a": about[0].a, "b": about[0].b}[about[0].winner] == programmer


def test_a_question_asked_again_in_a_later_generation_keeps_its_one_answer(tmp_path):
    """The contender pair is asked on the only rater problem, answered, and the next run asks the
    same pair on it again: the file's answer is used, not stored a second time, and no second
    question is written for the person. Before: every later ask stored the same answer again."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    first = _file_search(questions, prefs)
    first.config.preference_built_pairs = 0
    first.rater_problems = first.rater_problems[:1]
    first.ask_preferences()
    saved = _checkpoint(first)
    _answer_like_the_fitness(questions, first)

    resumed = _file_search(questions, prefs)
    resumed.config.preference_built_pairs = 0
    resumed.load_state_dict(saved)
    resumed.rater_problems = resumed.rater_problems[:1]
    for _ in range(3):
        resumed.ask_preferences()
    assert resumed.questions_asked == 4  # the pair was asked again each time
    assert len(resumed.preferences.comparisons) == 1
    assert len(questions.read_text().splitlines()) == 1


def test_an_answer_read_in_the_final_round_counts_for_the_choice_and_queues_no_child(tmp_path):
    """A run that resumes with its generations done reads the person's answer in the final round
    (:meth:`HFlowSearch.finish`): it is stored and fitted, but the built question stays waiting,
    so no child is queued that no generation makes; a search that goes on from a state saved
    then decides it in its next generation. Before: the edit was queued, the record gone, and a
    state saved after the round lost the child."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    search = _person_search(questions, [TWICE_REFINED])
    search.preferences = PreferenceStore(str(prefs))
    search.config.final_questions = 1
    search.ask_preferences()
    _answer_for_refine(questions, search)
    search.rater = FileRater(str(questions))  # the next run: no generation left, only finish()
    search.finish()
    child = TWICE_REFINED[1].hash()
    about = [c for c in search.preferences.comparisons if child in (c.a, c.b)]
    assert len(about) == 1 and about[0].fitted
    assert search.preference_model.n_comparisons == len(search.preferences.comparisons)
    assert search._built_liked == [] and "op:refine" not in search.built_won
    saved = _checkpoint(search)
    assert child in saved["built_waiting"]

    goes_on = _person_search(questions, [])
    goes_on.preferences = PreferenceStore(str(prefs))
    goes_on.config.final_questions = 1
    goes_on.load_state_dict(saved)
    goes_on.ask_preferences()
    assert _queued(goes_on).count(child) == 1 and "op:refine" in goes_on.built_won
    assert not goes_on.state_dict()["built_waiting"]
    assert max(_keys(goes_on).values()) == 1


def test_a_contender_answer_about_an_evaluated_built_edit_is_fitted(tmp_path):
    """The person's taste made the built edit a child, and it was evaluated; a contender question
    then pits it against the best on another problem and the person answers it as the fitness
    would. That answer is fitted like any contender answer: only the answer to the built pair
    asked (the same edit, parent and problem) is a built pair's. Before: any answer with a built
    side was left unfitted when the fitness explained it."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    search = _person_search(questions, [TWICE_REFINED])
    search.preferences = PreferenceStore(str(prefs))
    search.ask_preferences()
    _answer_for_refine(questions, search)
    search.rater = FileRater(str(questions))
    search.step()  # reads the answer back and makes the edit a child
    child = TWICE_REFINED[1].hash()
    assert child in search.seen and child in search.built
    built_answer = next(c for c in search.preferences.comparisons if child in (c.a, c.b))

    edit, best = search.seen[child], search.seen[GEN.hash()]
    search.rater_problems = [p for p in search.rater_problems if p["id"] != built_answer.problem_id]
    search._ask(lambda tried: [] if tried else [(edit, best)], 1)
    _answer_like_the_fitness(questions, search)
    search.rater = FileRater(str(questions))
    search.ask_preferences()
    contender = [
        c for c in search.preferences.comparisons if {c.a, c.b} == {child, best.hash} and c is not built_answer
    ]
    assert contender and all(c.fitted for c in contender)
    assert max(_keys(search).values()) == 1
