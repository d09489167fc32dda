"""The curation fingerprint (DataModule cache key, shard ``inputs_key``) holds what is read and
nothing else: the func docs beside a BFCL question file (``*.json`` only), and, for
``bfcl_verifier=execution``, the installed bfcl-eval the verifier scores with.

Real inputs: tests/data/bfcl_results (BFCL's possible answers, questions and func docs, from
ShishirPatil/gorilla) and tests/data/tau2_runs/airline-tasks-100c40a.json (sierra-research/tau2-bench);
see their READMEs.
"""

import shutil
from pathlib import Path

import pytest

import lightning_agents.tasks.bfcl_execution as bfcl_execution
from lightning_agents.topology.shards import curation_inputs, inputs_key

DATA = Path(__file__).resolve().parents[1] / "data"
BFCL = DATA / "bfcl_results"
GLYPHH = str(BFCL / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json")
ANSWERS, QUESTIONS = "BFCL_v4_multi_turn_base_possible_answer.json", "BFCL_v4_multi_turn_base.json"
TAU2_TASKS = DATA / "tau2_runs" / "airline-tasks-100c40a.json"


def _copy(folder: Path, names=(ANSWERS, QUESTIONS)) -> list[str]:
    folder.mkdir()
    shutil.copytree(BFCL / "multi_turn_func_doc", folder / "multi_turn_func_doc")
    return [shutil.copy(BFCL / name, folder) for name in names]


def _key(truth, **settings) -> str:
    return inputs_key(*curation_inputs([GLYPHH], truth, **settings))


def test_a_stray_file_beside_the_func_docs_keeps_the_key(tmp_path):
    truth = _copy(tmp_path / "a")
    before = _key(truth)
    # Never read by the loader (it reads the docs of BFCL's classes): before, a new key.
    (tmp_path / "a" / "multi_turn_func_doc" / ".DS_Store").write_bytes(b"\0\1")
    (tmp_path / "a" / "multi_turn_func_doc" / "README").write_text("notes")
    assert _key(truth) == before


def test_func_docs_count_only_beside_a_question_file(tmp_path):
    # A tau2 tasks.json, or possible answers alone, beside a multi_turn_func_doc/ folder: the
    # loader reads no docs for them, so they are no input (before: the folder was hashed in).
    folder = tmp_path / "data"
    (answers,) = _copy(folder, names=(ANSWERS,))
    tasks = shutil.copy(TAU2_TASKS, folder / "tasks.json")
    assert "func_docs" not in curation_inputs([GLYPHH], [tasks])[1]
    assert "func_docs" not in curation_inputs([GLYPHH], [answers])[1]
    questions = shutil.copy(BFCL / QUESTIONS, folder)
    assert len(curation_inputs([GLYPHH], [answers, questions])[1]["func_docs"]) == 1


def test_the_execution_verifiers_bfcl_eval_is_in_the_key(tmp_path, monkeypatch):
    truth = _copy(tmp_path / "a")
    # Call match reads nothing of bfcl-eval: its key has no such field.
    assert "bfcl_eval" not in curation_inputs([GLYPHH], truth)[1]
    monkeypatch.setattr(bfcl_execution, "bfcl_eval_identity", lambda: "2026.3.23 aaaa")
    first = _key(truth, bfcl_verifier="execution")
    assert curation_inputs([GLYPHH], truth, bfcl_verifier="execution")[1]["bfcl_eval"] == "2026.3.23 aaaa"
    # Another bfcl-eval (an upgrade, or an edited install): another key (before: the same one).
    monkeypatch.setattr(bfcl_execution, "bfcl_eval_identity", lambda: "2026.4.1 bbbb")
    assert _key(truth, bfcl_verifier="execution") != first


def test_bfcl_eval_identity_names_the_installed_version():
    metadata = pytest.importorskip("importlib.metadata")
    try:
        version = metadata.version("bfcl-eval")
    except metadata.PackageNotFoundError:
        assert bfcl_execution.bfcl_eval_identity() is None
        return
    identity = bfcl_execution.bfcl_eval_identity()
    assert identity.split()[0] == version and len(identity.split()[1]) == 32
    assert identity == bfcl_execution.bfcl_eval_identity()  # stable
