"""Pooling tau-bench run files of its two domains, whose files name none, and pooled task names.

Real inputs: the shared GPT-4o airline run (``../shared/data/tau_bench``), the GPT-4o retail
records in ``tests/data/tau_bench_other/`` (tasks 13, 47, 50; airline has tasks 13 and 47 too), a
real retail run file there whose only trial raised (nothing in it names a domain), the tau2 airline
run files in ``tests/data/tau2_pooled/`` and the shared tau2 retail record (``../shared/data/tau2_bench``).
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
ERRORED = DATA / "tau_bench_other" / "retail-all-errored-run.json"


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


def test_a_file_whose_records_point_at_both_domains_names_each_record_by_its_own(airline, tmp_path, caplog):
    # Two runs concatenated: the file used to keep bare ids for all its records (a warning said so).
    mixed = _write(tmp_path / "mixed.json", json.loads(airline.read_text())[:8] + json.loads(RETAIL.read_text()))
    with caplog.at_level("WARNING"):
        rollouts = load_rollouts(mixed)
    assert "names no domain and its records point at several domains (airline at" in caplog.text
    assert "retail at" in caplog.text and "each record takes the domain its own" in caplog.text
    # Retail's task 22 raised (no messages, no task): no rollout, so nothing keeps a bare id.
    assert "keep their bare task ids" not in caplog.text
    tasks = group_by_task(rollouts)
    assert sorted(t for t in tasks if t.startswith("retail/")) == ["retail/13", "retail/47", "retail/50"]
    assert sorted(t for t in tasks if t.startswith("airline/")) == [f"airline/{i}" for i in range(8)]
    assert len(tasks) == 11
    assert {r.info["environment"]["domain"] for r in tasks["retail/13"]} == {"retail"}


def test_a_task_split_between_a_run_file_and_a_concatenated_one_stays_one_task(airline, tmp_path, caplog):
    # The airline run's trials 0-1 in one file, its trials 2-3 concatenated with a retail run in
    # another: airline's task 13 was two tasks, airline/13 (2 trials) and 13 (the other 2 and retail's).
    records = json.loads(airline.read_text())
    first = _write(tmp_path / "airline_t01.json", [r for r in records if r["trial"] < 2])
    rest = _write(
        tmp_path / "airline_t23_plus_retail.json",
        [r for r in records if r["trial"] >= 2] + json.loads(RETAIL.read_text()),
    )
    with caplog.at_level("WARNING"):
        tasks = group_by_task(load_rollouts([first, rest]))
    assert len(tasks) == 53 and all("/" in t for t in tasks)
    assert sorted(r.trial for r in tasks["airline/13"]) == [0, 1, 2, 3] and len(tasks["retail/13"]) == 1
    assert "different ground truths" not in caplog.text


def test_records_of_a_mixed_file_that_tell_no_domain_keep_bare_ids_and_are_named(airline, tmp_path, caplog):
    retail = json.loads(RETAIL.read_text())
    blind = copy.deepcopy(retail[0])  # its task and prompt dropped: nothing tells its domain
    del blind["info"]["task"]
    blind["traj"] = [m for m in blind["traj"] if m["role"] != "system"]
    blind["task_id"] = 900
    mixed = _write(tmp_path / "mixed.json", json.loads(airline.read_text())[:8] + retail + [blind])
    with caplog.at_level("WARNING"):
        tasks = group_by_task(load_rollouts(mixed))
    assert "900" in tasks and "retail/50" in tasks
    assert f"{mixed} names no domain" in caplog.text
    assert "1 record(s) that point at none or at several keep their bare task ids (first: '900')" in caplog.text


def test_a_run_whose_trials_all_raised_does_not_split_a_single_domain_run(tmp_path, caplog):
    # A real retail run file whose only trial raised names no domain and tells none: it counted as a
    # domain of its own, so the retail records' ids became retail/13, retail/47, retail/50.
    for files in ([RETAIL, ERRORED], [ERRORED, RETAIL]):
        with caplog.at_level("WARNING"):
            rollouts = load_rollouts(files)
        assert sorted({r.task_id for r in rollouts}) == ["13", "47", "50"]
        assert {r.info["domain"] for r in rollouts} == {"retail"}
        assert {r.info["environment"]["domain"] for r in rollouts} == {"retail"}
        assert len(rollouts.not_run) == 2 and "keep their bare ids" not in caplog.text
    # Through the CLI too: the outputs name the same tasks as the retail records' alone.
    _Tool().curate(rollouts=[str(RETAIL), str(ERRORED)], output=str(tmp_path / "with"), draw_tasks=0)
    _Tool().curate(rollouts=[str(RETAIL)], output=str(tmp_path / "without"), draw_tasks=0)
    for name in ("sft.jsonl", "rl_tasks.jsonl", "report/tasks.csv"):
        assert (tmp_path / "with" / name).read_text() == (tmp_path / "without" / name).read_text(), name


def test_a_file_that_is_not_tau_benchs_stays_apart_from_the_one_domain_of_the_pool(tmp_path, caplog):
    # Records with trajectories but no tau-bench task (another harness's run, this project's own
    # rollouts): nothing says they are retail's, so their task 13 is not merged into retail's 13.
    # (21230d2 joined them to retail silently, as trials 14 of retail's tasks.)
    retail = json.loads(RETAIL.read_text())
    for record in retail:
        record.get("info", {}).pop("task", None)
        record["traj"] = [m for m in record["traj"] if m["role"] != "system"]
    blind = _write(tmp_path / "blind.json", retail)
    with caplog.at_level("WARNING"):
        tasks = group_by_task(load_rollouts([RETAIL, blind]))
    assert sorted(tasks) == ["13", "47", "50", "retail/13", "retail/47", "retail/50"]
    assert [r.trial for r in tasks["13"]] == [13] and "domain" not in tasks["13"][0].info
    assert f"{blind}: its records name no domain" in caplog.text
    assert "the tau-bench domain 'retail', which only a tau-bench run whose trials all raised joins" in caplog.text


def test_a_tau2_record_without_ground_truth_actions_does_not_join_another_tau2_domain(tmp_path, caplog):
    # tau2's airline task 0 has no ground-truth actions (as 7 of its 50 airline tasks): in the
    # {task, simulation_run} form nothing tells its domain. Renumbered 12 here, the id of a task
    # of the real tau2 retail run it is pooled with: 21230d2 numbered it retail task 12's trial 1,
    # labelled retail (environment.domain too), and dropped the retail ids' prefix.
    airline = json.loads((DATA / "tau2_pooled" / "grok-3-airline-task0-1trial.json").read_text())
    assert airline["tasks"][0]["evaluation_criteria"]["actions"] == []
    task, run = airline["tasks"][0], airline["simulations"][0]
    task["id"] = run["task_id"] = "12"
    record = _write(tmp_path / "airline-12.json", {"task": task, "simulation_run": run})
    retail = DATA / "tau2_runs" / "sierra-gpt-4.1-retail.json"
    with caplog.at_level("WARNING"):
        rollouts = load_rollouts([retail, record])
    tasks = group_by_task(rollouts)
    assert sorted(tasks) == ["12", "retail/108", "retail/12"]
    assert [r.trial for r in tasks["12"]] == [0] and "domain" not in tasks["12"][0].info
    assert "domain" not in tasks["12"][0].info["environment"]
    assert tasks["retail/12"][0].info["environment"]["domain"] == "retail"
    assert f"{record}: its records name no domain" in caplog.text
    assert "the tau2-bench domain 'retail', which only a tau-bench run whose trials all raised joins" in caplog.text


def test_a_file_that_tells_no_domain_in_a_pool_of_several_is_named_and_kept_apart(airline, tmp_path, caplog):
    retail = json.loads(RETAIL.read_text())
    for record in retail:
        record.get("info", {}).pop("task", None)
        record["traj"] = [m for m in record["traj"] if m["role"] != "system"]
    blind = _write(tmp_path / "blind.json", retail)
    with caplog.at_level("WARNING"):
        tasks = group_by_task(load_rollouts([airline, RETAIL, blind]))
    # Never merged into either domain: its 13 is neither airline's nor (by what it says) retail's.
    assert len(tasks["13"]) == 1 and len(tasks["retail/13"]) == 1 and len(tasks["airline/13"]) == 4
    assert f"{blind}: its records name no domain and point at none" in caplog.text
    assert "several tau-bench domains (airline, retail)" in caplog.text and "(first: '50')" in caplog.text
    # A file whose only trial raised has nothing to keep apart: no warning.
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_rollouts([airline, RETAIL, ERRORED])
    assert "its records name no domain" not in caplog.text


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
    # No ground-truth actions either, so nothing tells its domain (retail's tools would).
    record["task"]["evaluation_criteria"]["actions"] = []
    record["simulation_run"]["reward_info"].pop("action_checks", None)
    bare = _write(tmp_path / "bare.json", record)
    with pytest.raises(RolloutFormatError, match=r"name two tasks 'airline/11': .*no domain in .*bare\.json"):
        load_rollouts([bare, TAU2_AIRLINE, TAU2_TIGHTER])


def test_a_tau2_record_takes_its_domain_from_its_ground_truth_actions(airline, shared_data):
    # tau2's {task, simulation_run} form names no domain: pooled with tau-bench's airline run its
    # task 1 kept the bare id "1" (and no environment.domain for RL).
    record = shared_data / "tau2_bench" / "retail_example_trajectory.json"
    rollouts = load_rollouts([airline, record])
    (tau2,) = [r for r in rollouts if r.info["environment"]["benchmark"] == "tau2-bench"]
    assert tau2.task_id == "retail/1" and tau2.info["domain"] == "retail"
    assert tau2.info["environment"]["domain"] == "retail" and tau2.info["environment"]["task_id"] == "1"
    assert all("/" in r.task_id for r in rollouts)
    # Alone it keeps its id; with tau-bench's retail records, the two benchmarks' retail stay apart.
    assert [r.task_id for r in load_rollouts(record)] == ["1"]
    ids = {r.task_id for r in load_rollouts([RETAIL, record])}
    assert ids == {"tau-bench/retail/13", "tau-bench/retail/47", "tau-bench/retail/50", "tau2-bench/retail/1"}


def test_two_run_files_concatenated_into_one_are_refused_not_cut_to_the_first(airline, tmp_path):
    # cat airline.json retail.json: the reader stopped at the first list's "]" and dropped the
    # retail records silently (200 airline rollouts loaded, nothing said).
    both = tmp_path / "both.json"
    both.write_bytes(airline.read_bytes() + RETAIL.read_bytes())
    lines = airline.read_bytes().count(b"\n")
    for skip_invalid in (False, True):
        with pytest.raises(RolloutFormatError) as info:
            load_rollouts([both], skip_invalid=skip_invalid)
        message = str(info.value)
        assert message.startswith(f"{both}:{lines + 1}:1: more data after the JSON list ends ('[")
        assert "pass the files separately" in message
    # Whitespace after the list is no data.
    spaced = tmp_path / "spaced.json"
    spaced.write_bytes(RETAIL.read_bytes() + b"\n\n  \n")
    assert len(load_rollouts([spaced])) == len(load_rollouts([RETAIL]))
