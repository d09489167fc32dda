"""The questions file a person answers between runs (session-35 audit, /work/h35/hflow/file_rater_typo.py)."""

from __future__ import annotations

import json

import pytest

from lightning_agents.hflow.preferences import FileRater, PreferenceFileError


def _questions(tmp_path, n=3):
    rows = [
        {"query_id": f"h{i}-g{i}-p{i}", "workflow_a": f"h{i}", "workflow_b": f"g{i}", "problem": f"p{i}"}
        | {"question": "2+2?", "a": {}, "b": {}, "winner": None}
        for i in range(n)
    ]
    path = tmp_path / "questions.jsonl"
    return path, "".join(json.dumps(r) + "\n" for r in rows)


def test_a_typo_in_the_last_answer_saved_without_a_newline_is_reported_not_deleted(tmp_path):
    path, text = _questions(tmp_path)
    lines = text.replace('"winner": null', '"winner": "b"').splitlines()
    lines[-1] = lines[-1].replace('"winner": "b"', '"winner": b"')  # a quote lost while editing
    path.write_text("\n".join(lines))  # and no final newline, as many editors save
    before = path.read_text()
    # before: taken for an append a kill cut short, dropped with a log line and deleted from the file
    with pytest.raises(PreferenceFileError, match=rf"{path}:3: not JSON .*gives an answer"):
        FileRater(str(path))
    assert path.read_text() == before


def test_a_question_a_kill_cut_short_is_still_dropped(tmp_path):
    path, text = _questions(tmp_path)
    path.write_text(text[: text.rindex('"winner"') + 12])  # the last append stopped at `"winner": n`
    rater = FileRater(str(path))
    assert len(path.read_text().splitlines()) == 2 and rater.answered() == []
