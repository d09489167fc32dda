"""Pooling tau-bench run files of its two domains, whose files name none, and pooled task names.

Real inputs: the shared GPT-4o airline run (``../shared/data/tau_bench``), the GPT-4o retail
records in ``tests/data/tau_bench_other/`` (tasks 13, 47, 50; airline has tasks 13 and 47 too) and
the tau2 airline run files in ``tests/data/tau2_pooled/``.
"""

import copy
import csv
import json
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts
from lightning_agents.topology.graph import group_by_task

DATA = Path(__file__).resolve().parents[1] / "data"
RETAIL = DATA / "tau_bench_other" / "retail-gpt-4o-records.json"
TAU2_AIRLINE = DATA / "tau2_pooled" / "grok-3-airline-task11.json"
TAU2_TIGHTER = DATA / "tau2_pooled" / "grok-3-airline_tighter_policy-task11.json"


class _Tool(CurateCommand):
    pass


@pytest.fixture(scope="module")
def airline(shared_data):
    return shared_data / "tau_bench" / "gpt-4o-airline.json"


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_airline_and_retail_runs_pooled_keep_their_tasks_apart(airline, caplog):
    # Neither file names its domain: airline's task 13 and retail's task 13 were one task of 5
    # trials, scored against two ground truths (only a warning said so).
    with caplog.at_level("WARNING"):
        rollouts = load_rollouts([airline, RETAIL])
    tasks = group_by_task(rollouts)
    assert len(tasks) == 53
    assert len(tasks["airline/13"]) == 4 and len(tasks["retail/13"]) == 1
    assert "13" not in tasks and sorted(t for t in tasks if t.startswith("retail/")) == [
        "retail/13",
        "retail/47",
        "retail/50",
    ]
    assert {r.info["environment"]["domain"] for r in tasks["retail/47"]} == {"retail"}
    assert {r.info["environment"]["domain"] for r in tasks["airline/47"]} == {"airline"}
    # The bare id stays where the RL environment looks it up.
    assert tasks["retail/47"][0].info["environment"]["task_id"] == "47"
    assert rollouts.conflicting_references == {} and "different ground truths" not in caplog.text


def test_curate_names_the_pooled_tau_bench_tasks_by_domain(airline, tmp_path):
    _Tool().curate(rollouts=[str(airline), str(RETAIL)], output=str(tmp_path / "o"), draw_tasks=0)
    rows = {r["task_id"]: r for r in csv.DictReader((tmp_path / "o" / "report" / "tasks.csv").open())}
    assert len(rows) == 53 and rows["retail/13"]["trials"] == "1" and rows["airline/13"]["trials"] == "4"
    rl = [json.loads(line) for line in (tmp_path / "o" / "rl_tasks.jsonl").read_text().splitlines()]
    assert rl and all(r["id"] == f"{r['environment']['domain']}/{r['environment']['task_id']}" for r in rl)


def test_a_single_tau_bench_run_keeps_its_ids_and_names_its_domain(airline):
    rollouts = load_rollouts(airline)
    assert sorted({r.task_id for r in rollouts}, key=int) == [str(i) for i in range(50)]
    assert {r.info["domain"] for r in rollouts} == {"airline"}
    assert {r.info["environment"]["domain"] for r in rollouts} == {"airline"}
    assert {r.info["environment"]["domain"] for r in load_rollouts(RETAIL)} == {"retail"}


def test_the_domain_comes_from_the_actions_or_calls_when_the_prompt_is_gone(tmp_path):
    records = json.loads(RETAIL.read_text())
    for record in records:
        record["traj"] = [m for m in record["traj"] if m.get("role") != "system"]
    no_prompt = _write(tmp_path / "no_prompt.json", records)
    assert {r.info["environment"]["domain"] for r in load_rollouts(no_prompt)} == {"retail"}
    # No prompt and no ground-truth actions: the agent's retail-only calls tell.
    for record in records:
        if "task" in record["info"]:  # not the trial that raised
            record["info"]["task"]["actions"] = []
    calls_only = _write(tmp_path / "calls_only.json", records)
    assert {r.info["environment"]["domain"] for r in load_rollouts(calls_only)} == {"retail"}


def test_a_call_to_a_tool_of_the_other_domain_does_not_outvote_the_prompt(airline, tmp_path):
    records = json.loads(airline.read_text())[:8]
    call = next(m for m in records[0]["traj"] if m.get("tool_calls"))
    call["tool_calls"][0]["function"]["name"] = "get_order_details"  # a model calling a tool it lacks
    path = _write(tmp_path / "airline.json", records)
    assert {r.info["domain"] for r in load_rollouts([path, RETAIL])} == {"airline", "retail"}


def test_a_file_whose_records_point_at_both_domains_keeps_the_old_behaviour(airline, tmp_path, caplog):
    mixed = _write(tmp_path / "mixed.json", json.loads(airline.read_text())[:8] + json.loads(RETAIL.read_text()))
    with caplog.at_level("WARNING"):
        rollouts = load_rollouts(mixed)
    assert "names no domain and its records point at several tau-bench domains (airline at" in caplog.text
    assert "retail at" in caplog.text
    assert all("domain" not in r.info and "domain" not in r.info["environment"] for r in rollouts)
    assert "13" in {r.task_id for r in rollouts}


def test_every_shard_names_the_inferred_domains_alike(airline):
    ids = set()
    for shard in range(3):
        ids |= {r.task_id for r in load_rollouts([airline, RETAIL], num_shards=3, shard_index=shard)}
    assert len(ids) == 53 and {"airline/13", "retail/13"} <= ids


def test_tau_bench_and_tau2_airline_pooled_stay_two_benchmarks(airline):
    # Both domains are called airline; their task 11s are different versions of the task.
    rollouts = load_rollouts([airline, TAU2_AIRLINE])
    tasks = group_by_task(rollouts)
    assert len(tasks["tau-bench/airline/11"]) == 4 and len(tasks["tau2-bench/airline/11"]) == 1
    assert len(tasks) == 51
    # With tau2's other airline domain too, only the shared name is qualified.
    tasks = group_by_task(load_rollouts([airline, TAU2_AIRLINE, TAU2_TIGHTER]))
    assert {"tau-bench/airline/11", "tau2-bench/airline/11", "airline_tighter_policy/11"} <= set(tasks)


def _tau2_copy(tmp_path, name, domain, task_id):
    data = json.loads(TAU2_AIRLINE.read_text())
    data["info"]["environment_info"]["domain_name"] = domain
    data["tasks"][0]["id"] = task_id
    for sim in data["simulations"]:
        sim["task_id"] = task_id
    return _write(tmp_path / name, data)


def test_task_ids_with_a_slash_that_would_take_one_pooled_name_are_refused(tmp_path):
    # Domain "a"'s task "b/c" and domain "a/b"'s task "c" were both named "a/b/c": one task.
    one = _tau2_copy(tmp_path, "one.json", "a", "b/c")
    two = _tau2_copy(tmp_path, "two.json", "a/b", "c")
    with pytest.raises(RolloutFormatError) as info:
        load_rollouts([one, two])
    message = str(info.value)
    assert "name two tasks 'a/b/c'" in message and str(one) in message and str(two) in message
    assert "task 'b/c' of domain 'a'" in message and "task 'c' of domain 'a/b'" in message
    # Every shard refuses alike, whichever holds each task.
    for shard in range(2):
        with pytest.raises(RolloutFormatError, match="name two tasks 'a/b/c'"):
            load_rollouts([one, two], num_shards=2, shard_index=shard)
    # Ids with a slash that take distinct names are fine.
    tasks = group_by_task(load_rollouts([one, _tau2_copy(tmp_path, "three.json", "b", "b/c")]))
    assert sorted(tasks) == ["a/b/c", "b/b/c"]


def test_a_bare_id_that_is_another_files_pooled_name_is_refused(tmp_path):
    # A file naming no domain keeps bare ids: its task "airline/11" met tau2's airline task 11.
    single = json.loads((DATA / "tau2_runs" / "sierra-gpt-4.1-retail.json").read_text())
    record = {"task": copy.deepcopy(single["tasks"][0]), "simulation_run": copy.deepcopy(single["simulations"][0])}
    record["task"]["id"] = record["simulation_run"]["task_id"] = "airline/11"
    bare = _write(tmp_path / "bare.json", record)
    with pytest.raises(RolloutFormatError, match=r"name two tasks 'airline/11': .*no domain in .*bare\.json"):
        load_rollouts([bare, TAU2_AIRLINE, TAU2_TIGHTER])
