"""A person's answer to a built pair acts as the simulated rater's does (file mode). In file mode
the search writes a built question to the questions file and gets no answer (the person answers
between runs), and a built pair is never built again: the answer only ever comes back when the
next run reads the file (or takes it back from preferences.jsonl after a restart). Before, that
answer was stored but decided nothing: an edit the person preferred for a taste the fitness does
not measure never became a child and never won its feature for ``preference_built_reach``."""

from __future__ import annotations

import json

from test_built_pairs_apart import WRONG_FOR_GEN
from test_preference_polish import GEN, GEN_REFINED
from test_preference_taste_gate import _search

from lightning_agents.hflow import FileRater, Node, PreferenceStore, Workflow

# GEN's edits asked about, on problems where GEN is wrong: PROGRAMMER is right there (preferring it
# is what the fitness already says), TWICE_REFINED as wrong as GEN and dearer (preferring it is taste)
PROGRAMMER = ("op:programmer", Workflow([Node("a", "programmer", backbone="cheap")], output="a"), "replace:a")
TWICE_REFINED = (
    "op:refine",
    Workflow(
        [
            Node("a", "generate", backbone="cheap"),
            Node("r", "refine", backbone="cheap"),
            Node("s", "refine", backbone="cheap"),
        ],
        [("a", "r"), ("r", "s")],
        "s",
    ),
    "add:refine",
)


def _person_search(path, edits):
    """GEN best, GEN_REFINED the other contender, a person answering through ``path``; each
    round's built pair is the next of ``edits`` (``(feature, child, edit)``)."""
    search = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    search.rater = FileRater(str(path))
    plan = iter(edits)
    search._built_pair = lambda parent, skip: None if skip else next(plan, None)
    return search


def _answer_for_refine(path, search) -> None:
    """The person prefers the side with more refine steps, else the right answer (the score in
    ``search``'s cache), else the cheaper."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    cache = search.evaluator.cache
    for row in rows:
        a, b = (
            (
                sum(s["op"] == "refine" for s in row[k]["steps"]),
                cache[(row[f"workflow_{k}"], row["problem"])]["score"],
                -row[k]["cost"],
            )
            for k in ("a", "b")
        )
        row["winner"] = "a" if a > b else "b" if b > a else "tie"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _queued(search) -> list[str]:
    return [wf.hash() for wf, _, _ in search._built_liked]


def test_a_persons_taste_for_a_built_edit_makes_it_a_child_and_wins_its_feature(tmp_path):
    """Before: the edit the person preferred (dearer, no more right) was never a child and
    ``op:refine`` never won: only an immediate answer was decided."""
    path = tmp_path / "questions.jsonl"
    search = _person_search(path, [TWICE_REFINED])
    search.ask_preferences()
    assert not search._built_liked and not search.built_won  # the question waits for the person
    _answer_for_refine(path, search)
    search.rater = FileRater(str(path))  # the next run reads the answers back
    search.ask_preferences()
    child = TWICE_REFINED[1].hash()
    assert _queued(search).count(child) == 1
    assert "op:refine" in search.built_won
    taken = {wf.hash(): (edit, parent.hash) for wf, edit, parent in search._take_built_liked()}
    assert taken[child] == ("add:refine", GEN.hash())


def test_a_persons_answer_the_fitness_explains_makes_no_child(tmp_path):
    """Two built questions answered in one file: the programmer edit preferred for its right
    answer makes no child and wins nothing (and is not fitted), the refine edit preferred for taste
    does. Before: neither made a child."""
    path = tmp_path / "questions.jsonl"
    search = _person_search(path, [PROGRAMMER, TWICE_REFINED])
    search.ask_preferences()
    search.ask_preferences()
    _answer_for_refine(path, search)
    search.rater = FileRater(str(path))
    search.ask_preferences()
    programmer = PROGRAMMER[1].hash()
    explained = [c for c in search.preferences.comparisons if programmer in (c.a, c.b)]
    assert [{"a": c.a, "b": c.b}[c.winner] for c in explained] == [programmer]
    assert not explained[0].fitted
    assert programmer not in _queued(search) and "op:programmer" not in search.built_won
    assert TWICE_REFINED[1].hash() in _queued(search) and "op:refine" in search.built_won


def test_an_edit_evaluated_before_its_answer_wins_its_feature_but_is_no_second_child(tmp_path):
    """The liked edit was evaluated meanwhile (racing screened it out): not queued again, but the
    person's taste for its feature counts. Before: the feature was not won either."""
    path = tmp_path / "questions.jsonl"
    search = _person_search(path, [TWICE_REFINED])
    search.ask_preferences()
    search._screened.add(TWICE_REFINED[1].hash())
    _answer_for_refine(path, search)
    search.rater = FileRater(str(path))
    search.ask_preferences()
    assert TWICE_REFINED[1].hash() not in _queued(search)
    assert "op:refine" in search.built_won


def test_the_waiting_question_survives_a_restart_and_is_decided_once(tmp_path):
    """The search saves its state while the question waits; the next run restores it and reads
    the answer (the child queued once, however often it asks); a run that crashed after that and
    restarts from the same state takes the answer back from preferences.jsonl and decides it the
    same way. Before: the restored search knew nothing of the question and queued nothing."""
    questions, prefs = tmp_path / "questions.jsonl", tmp_path / "preferences.jsonl"
    first = _person_search(questions, [TWICE_REFINED])
    first.preferences = PreferenceStore(str(prefs))
    first.ask_preferences()
    saved = json.loads(json.dumps(first.state_dict()))
    _answer_for_refine(questions, first)
    child = TWICE_REFINED[1].hash()

    def resume():
        search = _person_search(questions, [])
        search.preferences = PreferenceStore(str(prefs))
        search.load_state_dict(saved)
        return search

    second = resume()
    assert second.preferences.pending == []
    second.ask_preferences()
    second.ask_preferences()
    assert _queued(second).count(child) == 1 and "op:refine" in second.built_won
    assert not second.state_dict()["built_waiting"]

    third = resume()  # crashed before saving: the answer is pending in preferences.jsonl
    assert any(child in (c.a, c.b) for c in third.preferences.pending)
    third.ask_preferences()
    assert _queued(third).count(child) == 1
    assert "op:refine" in third.built_won


def test_a_state_saved_before_the_record_loads_as_before(tmp_path):
    """A checkpoint without ``built_waiting`` restores with nothing waiting."""
    search = _person_search(tmp_path / "questions.jsonl", [TWICE_REFINED])
    search.ask_preferences()
    state = json.loads(json.dumps(search.state_dict()))
    assert TWICE_REFINED[1].hash() in state["built_waiting"]
    del state["built_waiting"]
    search.load_state_dict(state)
    assert search._built_waiting == {}
