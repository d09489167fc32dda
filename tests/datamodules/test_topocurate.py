import json
import random

import pytest

from lightning_agents.datamodules.topocurate import TopoCurateDataModule, curation_cache_key
from lightning_agents.tasks.arithmetic import CALCULATOR_TOOL


def _trial(task, trial, expression, answer, correct):
    """An embedded-task rollout in the OpenAI format the rollout command writes."""
    call = {"id": f"call_{trial}", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}
    said = answer if correct else str(int(answer) + 1)
    return {
        "task_id": task,
        "trial": trial,
        "reward": float(correct),
        "info": {"reference": answer, "verifier": "lightning_agents.rewards.arithmetic.ArithmeticVerifier"},
        "tools": [CALCULATOR_TOOL],
        "traj": [
            {"role": "user", "content": f"What is {expression}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "name": "calculator", "content": said},
            {"role": "assistant", "content": f"The answer is {said}."},
        ],
    }


@pytest.fixture
def rollout_file(tmp_path):
    records = []
    for t, (a, b) in enumerate([(12, 30), (45, 17), (99, 1), (5, 8)]):
        expression, answer = f"{a} + {b}", str(a + b)
        for k in range(4):
            # task 0 always right, task 3 never, tasks 1 and 2 half the time
            correct = {0: True, 3: False}.get(t, k % 2 == 0)
            records.append(_trial(f"task{t}", k, expression if k < 2 else f"{a}+{b}", answer, correct))
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(records))
    return path


def _dm(path, cache, **kwargs):
    return TopoCurateDataModule(rollouts=[str(path)], cache_dir=None if cache is None else str(cache), batch_size=4, max_length=256, **kwargs)


def test_sft_mode_tokenizes_the_selection(rollout_file, tmp_path):
    dm = _dm(rollout_file, tmp_path / "cache")
    dm.setup("fit")
    selection = dm.curated["selection"]["sft"]
    assert len(dm.datasets["fit"]) == len(selection) > 0
    assert all(task in {"task0", "task1", "task2"} for task, _ in selection)
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) >= {"input_ids", "labels"}
    assert (batch["labels"] != -100).any() and (batch["labels"] == -100).any()
    state = dm.state_dict()
    assert state["topocurate_selection"] == dm.curated["selection"] and state["topocurate_rollouts"] == 16


def test_curate_workers_select_the_same_data(rollout_file, monkeypatch):
    monkeypatch.setattr("lightning_agents.topology.pipeline._MIN_TASKS_PER_WORKER", 1)  # fork even for 4 tasks
    one, two = _dm(rollout_file, None), _dm(rollout_file, None, curate_workers=2)
    one.setup("fit")
    two.setup("fit")
    assert one.curated["selection"] == two.curated["selection"] and one.curated["sft"] == two.curated["sft"]
    with pytest.raises(ValueError, match="curate_workers"):
        _dm(rollout_file, None, curate_workers=-1)


def test_rl_mode_yields_prompt_records_without_degenerate_tasks(rollout_file, tmp_path):
    dm = _dm(rollout_file, tmp_path / "cache", mode="rl")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, list) and {r["id"] for r in dm.rl_records()} == {"task1", "task2"}
    record = batch[0]
    assert record["prompt"][-1]["role"] == "user" and record["reference"] in {"75", "62", "100", "13", "42"}
    assert record["verifier"].endswith("ArithmeticVerifier") and 0 < record["pass_rate"] < 1


def test_cache_is_reused_and_keyed_by_content_and_settings(rollout_file, tmp_path):
    cache = tmp_path / "cache"
    first = _dm(rollout_file, cache)
    first.curate()
    assert not first.cache_hit and len(list(cache.glob("*.json"))) == 1
    second = _dm(rollout_file, cache)
    second.curate()
    assert second.cache_hit and second.curated["selection"] == first.curated["selection"]
    other = _dm(rollout_file, cache, sft_per_task=1)
    other.curate()
    assert not other.cache_hit and len(list(cache.glob("*.json"))) == 2
    moved = tmp_path / "moved.json"
    moved.write_bytes(rollout_file.read_bytes())
    assert curation_cache_key([str(moved)], first.settings) == curation_cache_key([str(rollout_file)], first.settings)
    assert not list(cache.glob("*.tmp")) and not list(cache.glob(".*"))


def test_selection_is_identical_whatever_the_record_order(rollout_file, tmp_path):
    records = json.loads(rollout_file.read_text())
    random.Random(0).shuffle(records)
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps(records))
    a = _dm(rollout_file, None).curate()["selection"]
    b = _dm(shuffled, None).curate()["selection"]
    assert a == b


def test_real_tau_bench_rl_mode(shared_data, tmp_path):
    dm = TopoCurateDataModule(rollouts=str(shared_data / "tau_bench" / "gpt-4o-airline.json"), mode="rl", rl_top_n=5, cache_dir=None)
    dm.setup("fit")
    records = dm.rl_records()
    assert len(records) == 5 and all(0 < r["pass_rate"] < 1 for r in records)
    assert records[0]["prompt"][0]["role"] == "system"


def test_nothing_to_train_on_is_a_clear_error(tmp_path):
    path = tmp_path / "all_wrong.json"
    path.write_text(json.dumps([_trial("t", k, "1 + 1", "2", False) for k in range(3)]))
    with pytest.raises(ValueError, match="selected no successful trajectory"):
        _dm(path, None).setup("fit")
    with pytest.raises(ValueError, match="selected no RL task"):
        _dm(path, None, mode="rl").setup("fit")
    with pytest.raises(ValueError, match="mode must be"):
        _dm(path, None, mode="dpo")
