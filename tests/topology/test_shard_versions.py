"""Shard payloads carry the curation code's version and a fingerprint of their inputs, and a
merge refuses shards of two versions, of other inputs, or a file that is no shard at all.

Before, a payload carried only its format version (never changed), so shards curated by an older
checkout on some nodes and a newer one on others merged without a word into a result that neither
code would have produced; so did shards of other rollout files or another verifier.
"""

import json
import shutil
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.bfcl_rollouts import ground_truth_order_matters
from lightning_agents.topology.shards import CURATION_VERSION, ShardError, check_shard_inputs

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
    assert message.startswith("cannot merge shards curated from different inputs (the rollout files' bytes differ)")
    assert f"{mixed[0]} (rollouts [{str(tmp_path / 'run.json')!r}])" in message
    assert f"{mixed[1]} (rollouts [{other!r}])" in message
    assert not (tmp_path / "merged").exists()


def test_shards_of_another_verifier_are_refused_naming_the_setting(shards, tmp_path):
    other = _shard(str(tmp_path / "run.json"), tmp_path / "other-out", 1, verifier="some.OtherVerifier")
    with pytest.raises(ShardError, match=r"different inputs \(verifier differs\).*'some.OtherVerifier'"):
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


BFCL = Path(__file__).resolve().parents[1] / "data" / "bfcl_results"
GLYPHH = str(BFCL / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json")
TRUTH = [str(BFCL / "BFCL_v4_multi_turn_base_possible_answer.json"), str(BFCL / "BFCL_v4_multi_turn_base.json")]


def _bfcl_shard(rollouts, truth, output, index):
    return _Tool().curate(rollouts=[rollouts], ground_truth=truth, output=str(output), num_shards=2, shard_index=index)[
        "shard"
    ]


def test_rollout_files_in_another_order_are_refused_saying_so(tmp_path):
    # Before: "the files' contents differ", of the same two files.
    first, second = _run(tmp_path / "a.json"), _run(tmp_path / "b.json", flip=True)
    mixed = [
        _Tool().curate(
            rollouts=[first, second], output=str(tmp_path / "o0"), num_shards=2, shard_index=0, verifier=VERIFIER
        )["shard"],
        _Tool().curate(
            rollouts=[second, first], output=str(tmp_path / "o1"), num_shards=2, shard_index=1, verifier=VERIFIER
        )["shard"],
    ]
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=mixed, output=str(tmp_path / "merged"))
    assert str(caught.value).startswith(
        "cannot merge shards curated from different inputs (the same rollout files in another order (a task's trials "
        "are numbered in file order))"
    )


def test_bfcl_ground_truth_in_another_order_merges_into_the_single_run(tmp_path):
    # Possible answers and questions give other fields of each task, so their order changes
    # nothing: shards given them in either order are one run. Before: refused ("they differ in ground_truth").
    assert not ground_truth_order_matters(TRUTH)
    shards = [_bfcl_shard(GLYPHH, TRUTH, tmp_path / "s0", 0), _bfcl_shard(GLYPHH, TRUTH[::-1], tmp_path / "s1", 1)]
    _Tool().curate(merge=shards, output=str(tmp_path / "merged"), draw_tasks=0)
    _Tool().curate(rollouts=[GLYPHH], ground_truth=TRUTH[::-1], output=str(tmp_path / "single"), draw_tasks=0)
    for name in ("sft.jsonl", "rl_tasks.jsonl", "report/tasks.csv", "report/trajectories.csv"):
        assert (tmp_path / "merged" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name


def test_truth_copied_elsewhere_is_not_blamed_when_the_rollouts_differ(tmp_path):
    # Before: "they differ in ground_truth", naming the copies, whose bytes are the same.
    copies = tmp_path / "copies"
    copies.mkdir()
    truth = [shutil.copy(p, copies) for p in TRUTH]
    shutil.copytree(BFCL / "multi_turn_func_doc", copies / "multi_turn_func_doc")
    fewer = tmp_path / "fewer_result.json"
    fewer.write_text("".join(open(GLYPHH).readlines()[:-1]))
    shards = [_bfcl_shard(GLYPHH, TRUTH, tmp_path / "s0", 0), _bfcl_shard(str(fewer), truth, tmp_path / "s1", 1)]
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=shards, output=str(tmp_path / "merged"))
    message = str(caught.value)
    assert message.startswith("cannot merge shards curated from different inputs (the rollout files' bytes differ):")
    assert "ground_truth [" not in message  # the copies are not named


def test_ground_truth_order_matters_where_two_files_give_one_field_of_a_task(tmp_path):
    # tau2 task files of two domains both number their tasks from "0": the later file's task 0 is
    # the one read, so shards given them in another order read other tasks.
    def tasks(name, domain):
        path = tmp_path / name
        path.write_text(json.dumps([{"id": "0", "description": domain, "evaluation_criteria": {"actions": []}}]))
        return str(path)

    airline, retail = tasks("airline.json", "airline"), tasks("retail.json", "retail")
    assert ground_truth_order_matters([airline, retail])
    assert not ground_truth_order_matters([airline, airline])  # the same task twice: no matter
    payloads = [
        {"inputs_key": k, "inputs": {"ground_truth": g, "sha256": {"ground_truth": h}}}
        for k, g, h in [("a", [airline, retail], ["1", "2"]), ("b", [retail, airline], ["2", "1"])]
    ]
    with pytest.raises(ShardError, match=r"the same ground-truth files in another order \(two of them give one field"):
        check_shard_inputs(payloads)


def test_merge_of_a_json_lines_rollout_file_says_it_is_no_shard_file(shards, tmp_path):
    # Before: "...: shard file is not valid JSON (Extra data)", of a BFCL result file.
    with pytest.raises(ShardError) as caught:
        _Tool().curate(merge=[shards[0], GLYPHH], output=str(tmp_path / "merged"))
    message = str(caught.value)
    assert message.startswith(f"{GLYPHH} is not a shard file: it holds JSON Lines")
    assert "rollout files are curated with --rollouts, not --merge" in message
