"""Shard payloads carry the curation code's version, and a merge refuses shards of two versions.

Before, a payload carried only its format version (never changed), so shards curated by an older
checkout on some nodes and a newer one on others merged without a word into a result that neither
code would have produced.
"""

import json

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.topocurate import CACHE_VERSION
from lightning_agents.topology.shards import CURATION_VERSION, ShardError

VERIFIER = "lightning_agents.rewards.ArithmeticVerifier"  # any: these RL records are never scored


class _Tool(CurateCommand):
    pass


def _episode(task, trial, ok):
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"n": task})}}
    return {
        "task_id": task,
        "trial": trial,
        "reward": 1.0 if ok else 0.0,
        "traj": [
            {"role": "user", "content": f"task {task}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "ok" if ok else "Error: no"},
            {"role": "assistant", "content": "done"},
        ],
    }


@pytest.fixture
def shards(tmp_path):
    rollouts = tmp_path / "run.json"
    rollouts.write_text(json.dumps([_episode(t, k, (t + k) % 2 == 0) for t in range(6) for k in range(2)]))
    return [
        _Tool().curate(
            rollouts=[str(rollouts)], output=str(tmp_path / "out"), num_shards=2, shard_index=i, verifier=VERIFIER
        )["shard"]
        for i in range(2)
    ]


def _rewrite(path, **fields):
    payload = json.loads(open(path).read())
    for key, value in fields.items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    open(path, "w").write(json.dumps(payload))


def test_a_shard_carries_the_curation_version_and_shards_of_one_version_merge(shards, tmp_path):
    assert CACHE_VERSION == CURATION_VERSION  # one number: the DataModule's cache and the shards
    assert [json.loads(open(s).read())["curation_version"] for s in shards] == [CURATION_VERSION] * 2
    _Tool().curate(merge=shards, output=str(tmp_path / "merged"))
    assert (tmp_path / "merged" / "sft.jsonl").exists()


def test_shards_of_another_code_version_are_refused_naming_the_files_and_versions(shards, tmp_path):
    _rewrite(shards[1], curation_version=CURATION_VERSION - 1)
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=shards, output=str(tmp_path / "merged"))
    message = str(caught.value)
    assert f"{shards[1]} (curation version {CURATION_VERSION - 1})" in message
    assert shards[0] not in message and f"curation version {CURATION_VERSION})" in message
    assert "curate every shard again" in message
    assert not (tmp_path / "merged" / "sft.jsonl").exists()


def test_a_shard_written_before_payloads_carried_a_version_is_refused(shards, tmp_path):
    # What every shard file written before this change looks like.
    _rewrite(shards[0], curation_version=None)
    with pytest.raises(ShardError, match="written before shards carried one"):
        _Tool().curate(merge=shards, output=str(tmp_path / "merged"))


def test_merge_shards_itself_refuses_mixed_versions(shards):
    from lightning_agents.topology.pipeline import merge_shards

    payloads = [json.loads(open(s).read()) for s in shards]
    payloads[0]["curation_version"] = CURATION_VERSION + 1
    with pytest.raises(ShardError, match=r"shard 0 \(curation version"):
        merge_shards(payloads)
