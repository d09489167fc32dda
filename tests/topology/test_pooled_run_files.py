"""Pooling real tau2-bench run files: several runs of the same tasks, and runs of several domains.

The records are in ``tests/data/tau2_pooled/`` (see its README for sources, commit and license).
"""

import csv
import json
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology.graph import group_by_task
from lightning_agents.topology.pipeline import curate_rollouts
from lightning_agents.topology.report import selection_summary, summary_markdown

DATA = Path(__file__).resolve().parents[1] / "data"
ONE_TRIAL = DATA / "tau2_pooled" / "grok-3-airline-task0-1trial.json"
THREE_TRIALS = DATA / "tau2_pooled" / "grok-4-fast-airline-task0-3trials.json"
AIRLINE = DATA / "tau2_pooled" / "grok-3-airline-task11.json"
TIGHTER = DATA / "tau2_pooled" / "grok-3-airline_tighter_policy-task11.json"


class _Tool(CurateCommand):
    pass


def _trials(rollouts):
    return [(r.task_id, r.trial, r.info.get("source_trial"), Path(r.source.split(":")[0]).name) for r in rollouts]


def test_run_files_of_the_same_task_pool_in_either_order():
    # A file with one trial of task 0 before one with trials 0, 1, 2: the later file's trial 0
    # became 1 and its own trial 1 then collided with it ("two rollouts numbered trial 1").
    rollouts = load_rollouts([ONE_TRIAL, THREE_TRIALS])
    group_by_task(rollouts)
    assert _trials(rollouts) == [
        ("0", 0, None, ONE_TRIAL.name),
        ("0", 1, 0, THREE_TRIALS.name),
        ("0", 2, 1, THREE_TRIALS.name),
        ("0", 3, 2, THREE_TRIALS.name),
    ]
    assert rollouts.renumbered == 3
    # The other order: the first file keeps its numbers, the later one follows them.
    rollouts = load_rollouts([THREE_TRIALS, ONE_TRIAL])
    group_by_task(rollouts)
    assert [(t, n, s) for t, n, s, _ in _trials(rollouts)] == [
        ("0", 0, None),
        ("0", 1, None),
        ("0", 2, None),
        ("0", 3, 0),
    ]


def test_curate_pools_the_files_in_the_order_that_crashed(tmp_path):
    _Tool().curate(rollouts=[str(ONE_TRIAL), str(THREE_TRIALS)], output=str(tmp_path / "o"), draw_tasks=0)
    rows = list(csv.DictReader((tmp_path / "o" / "report" / "tasks.csv").open()))
    assert [(r["task_id"], r["trials"]) for r in rows] == [("0", "4")]


def test_two_trials_with_one_number_in_one_file_remain_an_error(tmp_path):
    data = json.loads(THREE_TRIALS.read_text())
    data["simulations"][2]["trial"] = 1  # now trials 0, 1, 1
    copy = tmp_path / "dup.json"
    copy.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"two rollouts numbered trial 1 .*dup.json"):
        group_by_task(load_rollouts([copy]))
    # Pooled after another file, the clash is still found, and named by the file's own number.
    with pytest.raises(ValueError, match=r"two rollouts numbered trial 2 .*trial 1 in its file"):
        group_by_task(load_rollouts([ONE_TRIAL, copy]))


def test_tasks_of_two_domains_with_one_id_stay_two_tasks(tmp_path):
    # airline and airline_tighter_policy both have a task 11; they were merged into one task.
    rollouts = load_rollouts([AIRLINE, TIGHTER])
    assert sorted(group_by_task(rollouts)) == ["airline/11", "airline_tighter_policy/11"]
    assert {r.info["environment"]["domain"] for r in rollouts} == {"airline", "airline_tighter_policy"}
    _Tool().curate(rollouts=[str(AIRLINE), str(TIGHTER)], output=str(tmp_path / "o"), draw_tasks=0)
    rows = list(csv.DictReader((tmp_path / "o" / "report" / "tasks.csv").open()))
    assert [(r["task_id"], r["pass_rate"]) for r in rows] == [
        ("airline/11", "0.0"),
        ("airline_tighter_policy/11", "1.0"),
    ]
    sft = [json.loads(line) for line in (tmp_path / "o" / "sft.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in sft] == ["airline_tighter_policy/11"]


def test_a_single_domain_keeps_its_task_ids():
    (rollout,) = load_rollouts(AIRLINE)
    assert rollout.task_id == "11" and rollout.info["environment"]["domain"] == "airline"
    assert rollout.info["environment"]["task_id"] == "11"


def test_every_shard_names_the_tasks_of_pooled_domains_alike():
    # Every shard reads every file's domain, so each names the tasks as the whole run does.
    ids = set()
    for shard in range(2):
        ids |= {r.task_id for r in load_rollouts([AIRLINE, TIGHTER], num_shards=2, shard_index=shard)}
    assert ids == {"airline/11", "airline_tighter_policy/11"}


def test_the_summary_tells_the_simulated_users_tool_calls_from_the_agents():
    # tau2 telecom: the user toggles its own phone; 'agent-side steps' counted those calls and results.
    rollouts = load_rollouts(DATA / "tau2_runs" / "sierra-gpt-4.1-telecom.json")
    summary = selection_summary(curate_rollouts(rollouts))
    assert summary["input"]["steps"] == 15 and summary["input"]["user_tool_steps"] == 4
    line = summary_markdown(summary).splitlines()[0]
    assert "15 steps (11 agent-side, 4 the simulated user's own tool calls and their results" in line
    assert "15 agent-side steps" not in line


def test_merged_shards_keep_the_simulated_users_steps(tmp_path):
    # The count came from the rollouts, which a result merged from shards does not hold: the merged
    # summary lost it and read "15 agent-side steps" again.
    telecom = str(DATA / "tau2_runs" / "sierra-gpt-4.1-telecom.json")
    _Tool().curate(rollouts=[telecom], output=str(tmp_path / "one"), draw_tasks=0)
    for shard in range(2):
        _Tool().curate(rollouts=[telecom], output=str(tmp_path / "s"), num_shards=2, shard_index=shard)
    shards = sorted(str(p) for p in (tmp_path / "s" / "shards").glob("*.json"))
    _Tool().curate(merge=shards, output=str(tmp_path / "merged"), draw_tasks=0)
    one, merged = (json.loads((tmp_path / d / "report" / "summary.json").read_text()) for d in ("one", "merged"))
    assert one["input"]["user_tool_steps"] == 4
    assert merged["input"]["user_tool_steps"] == one["input"]["user_tool_steps"]


def test_a_later_files_unnumbered_trial_takes_no_number_of_its_file(tmp_path):
    # The later file's first simulation without a 'trial' field was given the next number in
    # order of appearance (1), which its file's own trial 0 was then mapped to as well.
    data = json.loads(THREE_TRIALS.read_text())
    data["simulations"].sort(key=lambda s: s["trial"])
    del data["simulations"][0]["trial"]
    later = tmp_path / "later.json"
    later.write_text(json.dumps(data))
    for order in ([ONE_TRIAL, later], [later, ONE_TRIAL]):
        rollouts = load_rollouts(order)
        group_by_task(rollouts)  # no two trials with one number
        assert sorted(r.trial for r in rollouts) == [0, 1, 2, 3]


def test_draw_tasks_refuses_a_negative_count_and_unknown_ids_of_a_merged_run(tmp_path):
    with pytest.raises(Exception, match="at least 0"):
        _Tool().curate(rollouts=[str(AIRLINE)], output=str(tmp_path / "a"), draw_tasks=-1)
    _Tool().curate(rollouts=[str(AIRLINE)], output=str(tmp_path / "s"), num_shards=1, shard_index=0)
    shards = [str(p) for p in (tmp_path / "s" / "shards").glob("*.json")]
    if not shards:
        pytest.skip("one shard writes no payload")
    with pytest.raises(Exception, match="no_such_task"):
        _Tool().curate(merge=shards, output=str(tmp_path / "m"), draw_tasks=["no_such_task"])


def test_a_pooled_runs_unknown_bare_id_points_at_the_domain_ids(tmp_path):
    with pytest.raises(Exception, match=r"named <domain>/<id> in this run, e.g. airline/11"):
        _Tool().curate(rollouts=[str(AIRLINE), str(TIGHTER)], output=str(tmp_path / "o"), draw_tasks=["11"])
