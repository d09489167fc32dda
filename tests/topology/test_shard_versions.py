"""Shard payloads carry the curation code's version and a fingerprint of their inputs, and a
merge refuses shards of two versions, of other inputs, or a file that is no shard at all.

Before, a payload carried only its format version (never changed), so shards curated by an older
checkout on some nodes and a newer one on others merged without a word into a result that neither
code would have produced; so did shards of other rollout files or another verifier.
"""

import json

import pytest

from lightning_agents.commands.curate import CurateCommand
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


def _run(path, flip=False):
    path.write_text(json.dumps([_episode(t, k, (t + k + flip) % 2 == 0) for t in range(6) for k in range(2)]))
    return str(path)


def _shard(rollouts, output, index, verifier=VERIFIER):
    return _Tool().curate(rollouts=[rollouts], output=str(output), num_shards=2, shard_index=index, verifier=verifier)[
        "shard"
    ]


@pytest.fixture
def shards(tmp_path):
    rollouts = _run(tmp_path / "run.json")
    return [_shard(rollouts, tmp_path / "out", i) for i in range(2)]


def _rewrite(path, **fields):
    payload = json.loads(open(path).read())
    for key, value in fields.items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    open(path, "w").write(json.dumps(payload))


def test_a_shard_carries_the_curation_version_and_shards_of_one_version_merge(shards, tmp_path):
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


def test_shards_of_newer_code_say_to_merge_with_that_code(shards, tmp_path):
    for shard in shards:
        _rewrite(shard, curation_version=CURATION_VERSION + 1)
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=shards, output=str(tmp_path / "merged"))
    message = str(caught.value)
    assert f"merge them with the code that wrote them (curation version {CURATION_VERSION + 1}, newer" in message
    assert "or curate every shard again with this code" in message


def test_shards_of_other_rollout_files_are_refused_naming_the_files(shards, tmp_path):
    # Same tasks, other outcomes: the merge made a run of neither file.
    other = _run(tmp_path / "other.json", flip=True)
    mixed = [shards[0], _shard(other, tmp_path / "other-out", 1)]
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=mixed, output=str(tmp_path / "merged"))
    message = str(caught.value)
    assert message.startswith("cannot merge shards curated from different inputs (the files' contents differ)")
    assert f"{mixed[0]} (rollouts [{str(tmp_path / 'run.json')!r}])" in message
    assert f"{mixed[1]} (rollouts [{other!r}])" in message
    assert not (tmp_path / "merged").exists()


def test_shards_of_another_verifier_are_refused_naming_the_setting(shards, tmp_path):
    other = _shard(str(tmp_path / "run.json"), tmp_path / "other-out", 1, verifier="some.OtherVerifier")
    with pytest.raises(ShardError, match=r"different inputs \(they differ in verifier\).*'some.OtherVerifier'"):
        _Tool().curate(merge=[shards[0], other], output=str(tmp_path / "merged"))


def test_shards_of_the_same_file_read_elsewhere_merge(shards, tmp_path):
    # The fingerprint is of the contents: another node's mount of the same file is the same input.
    moved = tmp_path / "elsewhere" / "run.json"
    moved.parent.mkdir()
    moved.write_bytes((tmp_path / "run.json").read_bytes())
    _Tool().curate(merge=[shards[0], _shard(str(moved), tmp_path / "o2", 1)], output=str(tmp_path / "merged"))
    assert (tmp_path / "merged" / "sft.jsonl").exists()


@pytest.mark.parametrize("content", [[{"task_id": 1, "traj": []}], {"info": {}, "tasks": [], "simulations": []}])
def test_merge_of_a_file_that_is_no_shard_says_so(shards, tmp_path, content):
    # Before: AttributeError ('list' object has no attribute 'get') for a JSON list, and "written
    # before shards carried one" (a version refusal) for a tau2 Results file.
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=[shards[0], str(path)], output=str(tmp_path / "merged"))
    message = str(caught.value)
    assert message.startswith(f"{path} is not a shard file: it holds ")
    assert "rollout files are curated with --rollouts, not --merge" in message
