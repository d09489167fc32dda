"""BFCL's ``multi_turn_func_doc/`` is part of what a curation read: editing a func doc makes
another DataModule cache key and another shard fingerprint.

The question files' tools, and the verifier's parameter order and defaults, come from the func
docs beside them; before, only the rollout, ground-truth and tools files were hashed, so a cached
curation made with other docs was reused, and shards curated with other docs merged.

Real inputs: tests/data/bfcl_results (glyphh-ada-1.1's multi_turn_base results, BFCL's possible
answers, questions and func docs, from ShishirPatil/gorilla; see its README.md).
"""

import json
import shutil
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.topocurate import TopoCurateDataModule
from lightning_agents.topology.shards import ShardError, curation_inputs, inputs_key

BFCL = Path(__file__).resolve().parents[1] / "data" / "bfcl_results"
GLYPHH = str(BFCL / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json")
NAMES = ["BFCL_v4_multi_turn_base_possible_answer.json", "BFCL_v4_multi_turn_base.json"]


class _Tool(CurateCommand):
    pass


def _copy(folder: Path) -> list[str]:
    """The possible answers and questions with their func docs, in ``folder``."""
    folder.mkdir()
    shutil.copytree(BFCL / "multi_turn_func_doc", folder / "multi_turn_func_doc")
    return [shutil.copy(BFCL / name, folder) for name in NAMES]


def _edit_a_doc(truth: list[str]) -> None:
    """Reword one function's description, as a newer BFCL release does."""
    doc = Path(truth[0]).parent / "multi_turn_func_doc" / "gorilla_file_system.json"
    lines = doc.read_text().splitlines()
    first = json.loads(lines[0])
    first["description"] += " (edited)"
    doc.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")


def _key(truth: list[str]) -> str:
    files, settings = curation_inputs([GLYPHH], truth)
    return inputs_key(files, settings)


def test_an_edited_func_doc_changes_the_inputs_key(tmp_path):
    truth = _copy(tmp_path / "a")
    before = _key(truth)
    assert _key(_copy(tmp_path / "b")) == before  # the same docs elsewhere: the same key
    _edit_a_doc(truth)
    assert _key(truth) != before
    # A curation whose ground truth has no func docs keeps the key it had (no field added).
    files, settings = curation_inputs([GLYPHH], [str(BFCL.parent / "tau2_runs" / "airline-tasks-100c40a.json")])
    assert "func_docs" not in settings


def test_the_datamodule_does_not_reuse_a_curation_made_with_other_func_docs(tmp_path):
    truth = _copy(tmp_path / "truth")

    def module():
        return TopoCurateDataModule(rollouts=GLYPHH, ground_truth=truth, cache_dir=str(tmp_path / "cache"))

    first = module()
    first.curate()
    assert not first.cache_hit
    _edit_a_doc(truth)
    second = module()
    second.curate()
    # Before: a cache hit, the curation made with the old docs.
    assert not second.cache_hit and second.curated["cache_key"] != first.curated["cache_key"]


def test_shards_curated_with_other_func_docs_are_not_merged(tmp_path):
    one, other = _copy(tmp_path / "one"), _copy(tmp_path / "other")
    _edit_a_doc(other)
    shards = [
        _Tool().curate(
            rollouts=[GLYPHH], ground_truth=truth, output=str(tmp_path / f"s{i}"), num_shards=2, shard_index=i
        )["shard"]
        for i, truth in enumerate([one, other])
    ]
    # Before: merged into a result no single run gives.
    with pytest.raises(ShardError, match=r"cannot merge shards curated from different inputs \(func_docs differs\)"):
        _Tool().curate(merge=shards, output=str(tmp_path / "merged"))
