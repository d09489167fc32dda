"""File mode, resumed from a state saved before a built question was asked (session 53). Such a
state has no record of the question, and its replay may build another pair, so the answer comes
back only from the questions file: the search rebuilds the question's record from the pair it
knows (the evaluated best and its structural single edit) and decides it as one asked after the
state. Before, a liked edit never became a child and never won its feature, and without a trace
log an answer the fitness explains was fitted. A questions file written before the ``"built"``
mark (2fc6664 and earlier) is read by the question's problem: only a built pair is asked on a
search problem that is no rater problem."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from test_built_pairs_apart import WRONG_FOR_GEN
from test_built_pairs_file_liked import PROGRAMMER, _person_search, _queued
from test_built_pairs_fitted_everywhere import _answer_like_the_fitness
from test_preference_polish import GEN

from lightning_agents.hflow import FileRater, Node, PreferenceStore, Workflow
from lightning_agents.hflow.evaluation import Evaluator, Individual
from lightning_agents.hflow.mutation import Mutator

# GEN's structural edit adding a format step: never right where GEN is wrong nor cheaper at the
# same score, so preferring it is a taste
FORMAT = (
    "op:format",
    Workflow([Node("a", "generate", backbone="cheap"), Node("n1", "format")], [("a", "n1")], "n1"),
    "add:format",
)
# the keys of a question line as 2fc6664 and earlier wrote it (no "built")
OLD_KEYS = ["query_id", "workflow_a", "workflow_b", "problem", "question", "a", "b", "winner"]


def _answer_for_the_edits(path, search, edits) -> None:
    """The person answers as the fitness would, except that a side in ``edits`` (hashes) wins."""
    _answer_like_the_fitness(path, search)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        for side in ("a", "b"):
            if row[f"workflow_{side}"] in edits:
                row["winner"] = side
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _as_2fc6664_wrote_it(path) -> None:
    """``path`` rewritten as the code up to 2fc6664 wrote it: no line says ``"built"``."""
    rows = [{k: v for k, v in json.loads(line).items() if k != "built"} for line in path.read_text().splitlines()]
    assert all(list(r) == OLD_KEYS for r in rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(tmp_path, edits, trace_log):
    """A search asking ``edits``' built pairs of a person, one a round, every answer kept in
    preferences.jsonl and, with ``trace_log``, every trace streamed as evolve does."""
    search = _person_search(tmp_path / "questions.jsonl", edits)
    search.preferences = PreferenceStore(str(tmp_path / "preferences.jsonl"))
    search.config.final_questions = 1
    if trace_log:
        search.evaluator.trace_log = tmp_path / "traces.jsonl"
    return search


def _resume(tmp_path, edits, trace_log, state):
    """The next process: a fresh search (its replay builds ``edits``) resumed from ``state``."""
    search = _run(tmp_path, edits, False)
    if trace_log:  # the trace log read back, as a resumed evolve does
        search.evaluator = Evaluator(search.executor, search.config.lambda_cost, tmp_path / "traces.jsonl")
    search.load_state_dict(state)
    return search


def _checkpoint(search) -> dict:
    return json.loads(json.dumps(search.state_dict()))


def _about(search, child) -> list:
    return [c for c in search.preferences.comparisons if child in (c.a, c.b)]


@pytest.mark.parametrize("trace_log", [True, False], ids=["trace_log", "no_trace_log"])
def test_a_liked_edit_asked_after_the_state_resumed_from_is_a_child_though_the_replay_builds_another_pair(
    tmp_path, trace_log
):
    """The person prefers the format edit for a taste; the run resumes from a state saved before
    the question, and its replay builds the programmer edit instead. The question's record is
    rebuilt as it was asked (feature, edit, best, problem, what the fitness explains), the edit
    is queued once with its best as parent and its feature won, and the answer is fitted once.
    Before: nothing was queued or won (the record existed only in the later state)."""
    first = _run(tmp_path, [FORMAT], trace_log)
    before = _checkpoint(first)
    first.ask_preferences()
    asked = _checkpoint(first)["built_waiting"]
    child = FORMAT[1].hash()
    assert list(asked) == [child]
    _answer_for_the_edits(tmp_path / "questions.jsonl", first, {child})

    resumed = _resume(tmp_path, [PROGRAMMER], trace_log, before)
    resumed.ask_preferences()
    assert PROGRAMMER[1].hash() in resumed.built  # the replay built another pair
    assert _queued(resumed).count(child) == 1 and "op:format" in resumed.built_won
    about = _about(resumed, child)
    assert len(about) == 1 and about[0].fitted
    assert resumed.preference_model.n_comparisons == len([c for c in resumed.preferences.comparisons if c.fitted])
    assert child not in resumed._built_waiting  # decided once
    taken = {wf.hash(): (edit, parent.hash) for wf, edit, parent in resumed._take_built_liked()}
    assert taken[child] == ("add:format", GEN.hash())
    again = _resume(tmp_path, [], trace_log, before)
    again._ingest_file_answers()
    assert again._built_waiting == asked  # the record as the question was asked


def test_an_explained_built_answer_read_by_a_run_without_a_trace_log_stays_unfitted(tmp_path):
    """As the test above, with the programmer edit preferred for its right answer (what the
    fitness measures) and no trace log: the resumed search lacks the edit's trace, runs it again
    to rebuild the question, and keeps the answer unfitted, with no child. Before: the answer was
    fitted (no trace to tell it explained), and the model learnt accuracy from it."""
    first = _run(tmp_path, [PROGRAMMER], False)
    before = _checkpoint(first)
    first.ask_preferences()
    programmer = PROGRAMMER[1].hash()
    _answer_for_the_edits(tmp_path / "questions.jsonl", first, {programmer})

    resumed = _resume(tmp_path, [FORMAT], False, before)
    assert (programmer, WRONG_FOR_GEN[0]) not in resumed.evaluator.cache
    resumed.ask_preferences()
    about = _about(resumed, programmer)
    assert len(about) == 1 and not about[0].fitted
    assert {"a": about[0].a, "b": about[0].b}[about[0].winner] == programmer
    assert programmer not in _queued(resumed) and "op:programmer" not in resumed.built_won


@pytest.mark.parametrize("trace_log", [True, False], ids=["trace_log", "no_trace_log"])
def test_a_questions_file_written_before_the_built_mark_reads_its_built_pairs_by_the_problem(tmp_path, trace_log):
    """The questions file has the lines 2fc6664 wrote (no ``"built"``), the rater problems are
    not search problems (evolve's split), and the run resumes from a state saved before both
    built questions with a replay that builds none: the programmer answer, explained, stays
    unfitted; the liked format edit is queued and its feature won; the contender answer is
    fitted. Before: the explained answer was fitted and the liked edit lost."""
    first = _run(tmp_path, [PROGRAMMER, FORMAT], trace_log)
    before = _checkpoint(first)
    first.ask_preferences()
    first.ask_preferences()
    programmer, child = PROGRAMMER[1].hash(), FORMAT[1].hash()
    questions = tmp_path / "questions.jsonl"
    _answer_for_the_edits(questions, first, {programmer, child})
    _as_2fc6664_wrote_it(questions)
    assert not {p["id"] for p in first.problems} & {p["id"] for p in first.rater_problems}

    resumed = _resume(tmp_path, [], trace_log, before)
    resumed.ask_preferences()
    (explained,) = _about(resumed, programmer)
    (liked,) = _about(resumed, child)
    assert not explained.fitted and liked.fitted
    contenders = [c for c in resumed.preferences.comparisons if c.problem_id not in WRONG_FOR_GEN]
    assert contenders and all(c.fitted for c in contenders)
    assert _queued(resumed).count(child) == 1 and programmer not in _queued(resumed)
    assert "op:format" in resumed.built_won and "op:programmer" not in resumed.built_won


def test_a_liked_answer_read_in_the_final_round_after_an_older_state_waits_for_the_next_generation(tmp_path):
    """The run resumes from a state saved before the format question with its generations done,
    so only the final round reads the answer: it is stored and fitted, its rebuilt question
    waits in the state saved then, and a search that goes on from that state makes the edit a
    child. Before: the state saved after the round had the answer but no record, and the edit
    was never a child."""
    first = _run(tmp_path, [FORMAT], True)
    before = _checkpoint(first)
    first.ask_preferences()
    child = FORMAT[1].hash()
    _answer_for_the_edits(tmp_path / "questions.jsonl", first, {child})

    last = _resume(tmp_path, [], True, before)
    last.finish()
    (about,) = _about(last, child)
    assert about.fitted and last._built_liked == []
    saved = _checkpoint(last)
    assert child in saved["built_waiting"]

    goes_on = _resume(tmp_path, [], True, saved)
    goes_on.rater = FileRater(str(tmp_path / "questions.jsonl"))
    goes_on.ask_preferences()
    assert _queued(goes_on).count(child) == 1 and "op:format" in goes_on.built_won


@pytest.mark.parametrize("flip", [False, True], ids=["as_asked", "other_way_round"])
def test_an_answer_decided_before_is_not_rebuilt_the_other_way_round_once_its_edit_is_evaluated(tmp_path, flip):
    """The programmer edit replaces GEN's step, so either side is the other's structural single
    edit. The person prefers GEN, wrong where the edit is right (a taste, fitted); the answer is
    decided when read back (no child), and the edit is then evaluated. A later generation must
    not take the answer for an unrecorded question about the edit as the best and GEN as its
    edit, which would win GEN's step for the reach, whichever way round the answer is stored."""
    search = _run(tmp_path, [PROGRAMMER], True)
    search.ask_preferences()
    programmer = PROGRAMMER[1].hash()
    _answer_for_the_edits(tmp_path / "questions.jsonl", search, {GEN.hash()})
    search.rater = FileRater(str(tmp_path / "questions.jsonl"))
    search.ask_preferences()
    (k,) = [k for k, c in enumerate(search.preferences.comparisons) if programmer in (c.a, c.b)]
    c = search.preferences.comparisons[k]
    if flip:
        search.preferences.comparisons[k] = c = replace(c, a=c.b, b=c.a, winner={"a": "b", "b": "a"}[c.winner])
    assert {"a": c.a, "b": c.b}[c.winner] == GEN.hash() and c.fitted
    assert not search._built_waiting and not search.built_won
    res = search.evaluator.evaluate(PROGRAMMER[1], search.problems)
    search.seen[programmer] = Individual(PROGRAMMER[1], res.accuracy, res.cost, res.fitness, "replace:a", GEN.hash())
    search.ask_preferences()
    assert GEN.hash() not in search.built and not search._built_waiting and not search.built_won
    assert search.preferences.comparisons[k].fitted


def test_an_answer_rebuilt_once_both_sides_are_evaluated_does_not_take_the_fitter_for_the_best(tmp_path):
    """The state resumed from was saved before GEN, the best the programmer question was asked
    about, was evaluated, so the answer (GEN kept, wrong where the edit is right: a taste) waits
    for the replay; the replay evaluates both, the programmer edit the fitter. A replace edit
    fits both ways round, and the file does not say which side was the edit: the answer must not
    be decided as a question about the programmer workflow with GEN its edit, which would win
    GEN's step for the reach from an answer that preferred no edit (review of session 53)."""
    first = _run(tmp_path, [PROGRAMMER], True)
    before = _checkpoint(first)
    first.ask_preferences()
    programmer = PROGRAMMER[1].hash()
    _answer_for_the_edits(tmp_path / "questions.jsonl", first, {GEN.hash()})

    resumed = _resume(tmp_path, [], True, before)
    gen = resumed.seen.pop(GEN.hash())  # not evaluated yet in the state resumed from
    resumed._ingest_file_answers()
    assert not resumed._built_waiting
    res = resumed.evaluator.evaluate(PROGRAMMER[1], resumed.problems)
    resumed.seen[programmer] = Individual(PROGRAMMER[1], res.accuracy, res.cost, res.fitness, "replace:a", "")
    resumed.seen[GEN.hash()] = gen
    assert resumed.seen[programmer].fitness > gen.fitness
    resumed.ask_preferences()
    assert not resumed.built_won and GEN.hash() not in resumed.built and not resumed._built_waiting
    (about,) = _about(resumed, programmer)
    assert about.fitted  # against the objectives on the cached traces: a taste, fitted


def test_a_decided_built_answer_lists_no_neighbours_again_in_later_generations(tmp_path, monkeypatch):
    """Every generation goes over the stored built answers twice (:meth:`_rebuild_unrecorded`);
    listing a workflow's neighbours hashes some fifty workflows (~35 ms on a 4-node one), so for
    each answer it is done once, not every generation (before: 0.7 s a call with 10 decided
    answers, 3.5 s with 50; review of session 53)."""
    search = _run(tmp_path, [FORMAT], True)
    search.ask_preferences()
    _answer_for_the_edits(tmp_path / "questions.jsonl", search, {FORMAT[1].hash()})
    search.rater = FileRater(str(tmp_path / "questions.jsonl"))
    search.ask_preferences()
    assert "op:format" in search.built_won  # decided: its edit is in built
    listed = []
    neighbours = Mutator.neighbours
    monkeypatch.setattr(Mutator, "neighbours", lambda self, wf: listed.append(wf.hash()) or neighbours(self, wf))
    for _ in range(3):
        search._settle_built()
    assert listed == []


def _resumed_before_the_best(tmp_path, edit, liked, trace_log):
    """``edit``'s built question asked and answered (the side ``liked`` wins), then a run resumed
    from a state saved before GEN, the best asked about, was evaluated: the answer is read back
    with no side of it known, and GEN is evaluated afterwards (returned: the resumed search)."""
    first = _run(tmp_path, [edit], trace_log)
    before = _checkpoint(first)
    first.ask_preferences()
    _answer_for_the_edits(tmp_path / "questions.jsonl", first, {liked})
    resumed = _resume(tmp_path, [], trace_log, before)
    gen = resumed.seen.pop(GEN.hash())
    resumed._ingest_file_answers()
    assert not resumed._built_waiting and edit[1].hash() not in resumed.built  # nothing to rebuild from yet
    resumed.seen[GEN.hash()] = gen
    return resumed


def test_a_liked_answer_read_before_its_best_was_evaluated_is_decided_once_it_is(tmp_path):
    """The generation after GEN is evaluated rebuilds the question and decides it: the format
    edit is queued once with GEN as parent and its feature won (:meth:`_rebuild_unrecorded`;
    review of session 53: no test failed with that retry removed)."""
    resumed = _resumed_before_the_best(tmp_path, FORMAT, FORMAT[1].hash(), True)
    resumed._settle_built()
    child = FORMAT[1].hash()
    assert _queued(resumed).count(child) == 1 and "op:format" in resumed.built_won
    assert child in resumed.built and not resumed._built_waiting
    # the edit is known to the model from now on: the answer is in the fit
    assert resumed.preference_model.n_comparisons == len([c for c in resumed.preferences.comparisons if c.fitted])
    taken = {wf.hash(): (edit, parent.hash) for wf, edit, parent in resumed._take_built_liked()}
    assert taken[child] == ("add:format", GEN.hash())


def test_an_explained_answer_read_before_its_best_was_evaluated_is_unfitted_once_it_is(tmp_path):
    """No trace log: the programmer answer (right where GEN is wrong) is fitted when read, no
    trace telling it explained; once GEN is evaluated the rebuilt question runs the edit, finds
    the answer explained, unfits it and refits the model; no child, nothing won."""
    resumed = _resumed_before_the_best(tmp_path, PROGRAMMER, PROGRAMMER[1].hash(), False)
    programmer = PROGRAMMER[1].hash()
    (about,) = _about(resumed, programmer)
    assert about.fitted
    resumed._settle_built()
    (about,) = _about(resumed, programmer)
    assert not about.fitted
    assert resumed.preference_model.n_comparisons == len([c for c in resumed.preferences.comparisons if c.fitted])
    assert programmer not in _queued(resumed) and not resumed.built_won
