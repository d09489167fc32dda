"""A built pair's answer the fitness explains is kept but not fitted (run 38) however it comes in:
asked of a simulated rater, given by a person in the questions file (file mode: the search asks,
the person answers between runs, the next run reads the answer back), or taken back after a
restart from a preferences.jsonl written before the ``fitted`` mark existed (review of 6916f60)."""

from __future__ import annotations

import json

from test_built_pairs_apart import WRONG_FOR_GEN, _built_answers, _contender_answers
from test_preference_polish import GEN, GEN_REFINED
from test_preference_taste_gate import _search

from lightning_agents.hflow import FileRater, PreferenceStore


def _answer_like_the_fitness(path, search) -> None:
    """The person prefers the right answer, then the cheaper, else says tie, as the main
    benchmark's rater does: every answer one the fitness explains."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    cache = search.evaluator.cache
    for row in rows:
        ta, tb = (cache[(row[f"workflow_{s}"], row["problem"])] for s in ("a", "b"))
        a, b = (ta["score"], -ta["cost"]), (tb["score"], -tb["cost"])
        row["winner"] = "a" if a > b else "b" if b > a else "tie"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_persons_explained_built_answer_read_back_from_the_file_is_not_fitted(tmp_path):
    """The built question goes to questions.jsonl; the person answers it for the edit's right
    answer; the next generation reads it back. Before: it was fitted (the file's answers came in
    marked fitted, whatever pair they were about), so in file mode, the mode a person uses, the
    run-38 rule never held: a built pair is not built twice, so its answer only ever comes back
    through the file."""
    path = tmp_path / "questions.jsonl"
    search = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    search.rater = FileRater(str(path))
    assert search.ask_preferences() == 0  # both questions wait for the person
    assert search.questions_asked == 2 and search.built
    _answer_like_the_fitness(path, search)
    search.rater = FileRater(str(path))  # the next run reads the answers back
    search.ask_preferences()
    built = _built_answers(search)
    assert built and all(not c.fitted for c in built)
    assert all(c.fitted for c in _contender_answers(search))
    fitted = [c for c in search.preferences.comparisons if c.fitted]
    assert search.preference_model.n_comparisons == len(fitted)


def test_a_restart_on_a_file_without_marks_fits_what_the_search_would(tmp_path):
    """preferences.jsonl and the checkpoint written by a search from before the mark (no
    ``fitted`` anywhere): the resumed search, taking the second round's built answer back, fits
    what an uninterrupted search of this code fits. Before: the taken answer kept the file's
    (absent, so true) mark and was fitted."""
    path = tmp_path / "preferences.jsonl"
    first = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    first.preferences = PreferenceStore(str(path))
    first.ask_preferences()
    saved = json.loads(json.dumps(first.state_dict()))
    first.ask_preferences()
    # as the code before run 38 wrote them: no mark, and the first round's answers fitted
    for c in saved["preferences"]["comparisons"]:
        c.pop("fitted", None)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "fitted"}) + "\n" for r in rows))

    resumed = _search((GEN, GEN_REFINED), problems=WRONG_FOR_GEN)
    resumed.preferences = PreferenceStore(str(path))
    resumed.load_state_dict(saved)
    assert len(resumed.preferences.pending) == 2
    resumed.ask_preferences()
    second = slice(len(saved["preferences"]["comparisons"]), None)
    assert resumed.preferences.comparisons[second] == first.preferences.comparisons[second]
