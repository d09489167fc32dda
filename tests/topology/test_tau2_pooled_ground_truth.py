"""Simulations of several tau2 domains whose files carry no ``tasks`` curate together, each
scored against its own domain's ``tasks.json``.

Real inputs (tests/data/tau2_pooled_ground_truth/README.md): sierra-research/tau2-bench @ 59b1453,
the adaptive-agent submission's airline and medical_triage files (a layout with a top-level
``domain`` and no ``info`` or ``tasks``) and those domains' ``tasks.json``; both number their
tasks from "0", so both have a task "1" and a task "2".
"""

import json
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts

DATA = Path(__file__).resolve().parents[1] / "data" / "tau2_pooled_ground_truth"
AIRLINE = DATA / "adaptive-agent-airline.json"
MEDICAL = DATA / "adaptive-agent-medical_triage.json"
AIRLINE_TASKS = DATA / "airline-tasks-59b1453.json"
MEDICAL_TASKS = DATA / "medical_triage-tasks-59b1453.json"


def _criteria(path):
    return {str(t["id"]): json.dumps(t["evaluation_criteria"], sort_keys=True) for t in json.loads(path.read_text())}


class _Tool(CurateCommand):
    pass


def test_two_domains_pool_each_trial_scored_against_its_own_domains_task():
    # Before: refused ("ground-truth files disagree on task '1'"), so the two domains could not
    # be curated together from their task files at all.
    rollouts = load_rollouts([AIRLINE, MEDICAL], ground_truth=[AIRLINE_TASKS, MEDICAL_TASKS])
    expected = {"airline": _criteria(AIRLINE_TASKS), "medical_triage": _criteria(MEDICAL_TASKS)}
    assert sorted(r.task_id for r in rollouts) == ["airline/1", "airline/2", "medical_triage/1", "medical_triage/2"]
    for rollout in rollouts:
        domain, _, task = rollout.task_id.partition("/")
        assert rollout.info["domain"] == domain
        assert rollout.info["reference"] == expected[domain][task], rollout.task_id
        assert rollout.info["environment"]["domain"] == domain
    # The task files' order does not matter.
    again = load_rollouts([AIRLINE, MEDICAL], ground_truth=[MEDICAL_TASKS, AIRLINE_TASKS])
    assert [(r.task_id, r.info["reference"]) for r in again] == [(r.task_id, r.info["reference"]) for r in rollouts]


def test_two_domains_files_without_ground_truth_keep_their_tasks_apart(tmp_path):
    # Before: the files' top-level `domain` was not read, so airline's task "1" and
    # medical_triage's task "1" were one task of two trials, curated as one.
    _Tool().curate(rollouts=[str(AIRLINE), str(MEDICAL)], output=str(tmp_path), verifier="x.Y", draw_tasks=0)
    rows = (tmp_path / "report" / "tasks.csv").read_text().splitlines()[1:]
    assert sorted((row.split(",")[0], row.split(",")[1]) for row in rows) == [
        ("airline/1", "1"),
        ("airline/2", "1"),
        ("medical_triage/1", "1"),
        ("medical_triage/2", "1"),
    ]


def test_a_domain_whose_task_file_is_given_never_takes_another_domains_task(tmp_path, caplog):
    # medical_triage's task file given holds only task "1": its simulation of task "2" gets no
    # ground truth, though airline's file has a task "2". Before: refused (task "1" twice).
    only_one = tmp_path / "medical_triage-task1.json"
    only_one.write_text(json.dumps([t for t in json.loads(MEDICAL_TASKS.read_text()) if t["id"] == "1"]))
    rollouts = load_rollouts([MEDICAL], ground_truth=[AIRLINE_TASKS, only_one])
    references = {r.task_id: r.info.get("reference") for r in rollouts}
    assert references == {"1": _criteria(MEDICAL_TASKS)["1"], "2": None}
    assert "1 records have no entry in the ground-truth files (e.g. 2)" in caplog.text


def test_a_domain_without_its_task_file_is_refused_another_domains_tasks():
    # medical_triage is no variant of airline (not named airline_... or airline-...): airline's
    # tasks "1" and "2" are not what its simulations ran. Before (e290ec9): taken with a warning,
    # so its RL records held a medical_triage policy with airline's goal, database and actions.
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts([MEDICAL], ground_truth=[AIRLINE_TASKS])
    message = str(caught.value)
    assert message.startswith(f"{MEDICAL}:simulations[")
    assert "this simulation's domain 'medical_triage' has no task file among the ground truth" in message
    assert f"is the 'airline' domain's (from {AIRLINE_TASKS})" in message
    assert "give medical_triage's own tasks.json (tau2-bench's data/tau2/domains/medical_triage/tasks.json)" in message


def test_a_simulation_naming_no_domain_with_an_id_of_two_domains_is_refused(tmp_path):
    # Its file names no domain: which domain's task "1" it ran is unknown. Before: the refusal
    # was of the two task files, naming no simulation.
    data = json.loads(AIRLINE.read_text())
    del data["domain"]
    nameless = tmp_path / "nameless.json"
    nameless.write_text(json.dumps(data))
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts([nameless], ground_truth=[AIRLINE_TASKS, MEDICAL_TASKS])
    message = str(caught.value)
    assert message.startswith(f"{nameless}:simulations[")
    assert "the ground-truth files have a task '2' in several domains (airline, medical_triage)" in message
    assert "curate it with its own domain's tasks.json alone" in message
    # With one domain's file it takes that task, as before.
    rollouts = load_rollouts([nameless], ground_truth=[AIRLINE_TASKS])
    assert {r.task_id: r.info["reference"] for r in rollouts} == _criteria(AIRLINE_TASKS)
