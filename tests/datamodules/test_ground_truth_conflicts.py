"""Ground-truth files that give one task two values of a field are refused, not silently merged
(tau2 task files of two domains are two tasks, each under its domain).

Real inputs (tests/data/tau2_runs/README.md): airline ``tasks.json`` of sierra-research/tau2-bench
at 100c40a and 81b4ea5 (tasks 0 and 2), the airline submission adaptive-agent (no ``tasks``, so it
takes its tasks from the ground-truth files) and the retail submission toolorchestra, whose
``tasks`` hold a retail task "0" (tau2-bench's data/tau2/domains/retail/tasks.json numbers its
tasks from "0", as airline's does). BFCL: tests/data/bfcl_results (possible answers and questions
of multi_turn_base, from ShishirPatil/gorilla).
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from lightning_agents.datamodules.bfcl_rollouts import ground_truth_order_matters
from lightning_agents.datamodules.trajectories import RolloutFormatError, load_ground_truth, load_rollouts

DATA = Path(__file__).resolve().parents[1] / "data"
TAU2 = DATA / "tau2_runs"
AIRLINE = TAU2 / "airline-tasks-100c40a.json"
AIRLINE_OLD = TAU2 / "airline-tasks-81b4ea5.json"
BFCL = DATA / "bfcl_results"
ANSWERS = BFCL / "BFCL_v4_multi_turn_base_possible_answer.json"
QUESTIONS = BFCL / "BFCL_v4_multi_turn_base.json"


@pytest.fixture
def retail(tmp_path):
    """A retail tasks file (a JSON list, as tasks.json is) holding the real retail task "0"."""
    path = tmp_path / "retail_tasks.json"
    path.write_text(json.dumps(json.loads((TAU2 / "toolorchestra-retail.json").read_text())["tasks"]))
    return path


def test_tau2_task_files_of_two_domains_load_together_each_task_under_its_domain(retail):
    # Session 40 refused them (both have a task "0"); before that, task "0" was retail's (the
    # later file's) and airline's task 0 was gone, silently. Each task names its domain
    # (user_scenario.instructions.domain), so both are kept.
    truth = load_ground_truth([AIRLINE, retail])
    assert set(truth["0"]) == {"tau2_task:airline", "tau2_task:retail"}
    assert truth["0"]["tau2_task:airline"] == json.loads(AIRLINE.read_text())[0]
    assert not ground_truth_order_matters([AIRLINE, retail])


def test_airline_rollouts_are_not_scored_against_retail_tasks(retail):
    # Before session 40: adaptive-agent's airline simulation of task 0 loaded with retail task 0's
    # criteria as its reference (Yusuf Rossi's return), and no warning. Its file names its domain
    # (a top-level `domain`), so with both domains' files it takes airline's task 0.
    airline_zero = json.dumps(json.loads(AIRLINE.read_text())[0]["evaluation_criteria"], sort_keys=True)
    for truth in ([AIRLINE, retail], [retail, AIRLINE], [AIRLINE]):
        rollouts = load_rollouts([TAU2 / "adaptive-agent-airline.json"], ground_truth=truth)
        assert next(r for r in rollouts if r.task_id == "0").info["reference"] == airline_zero


def test_two_versions_of_one_tasks_file_are_refused():
    # tau2-bench changed airline task 0's criteria between 81b4ea5 and 100c40a; before, the later file won.
    with pytest.raises(RolloutFormatError) as caught:
        load_ground_truth([AIRLINE_OLD, AIRLINE])
    assert str(caught.value).startswith(
        f"ground-truth files disagree on task '0': {AIRLINE_OLD}[0] and {AIRLINE}[0] give other tasks (their "
        "'evaluation_criteria' differ)"
    )


def test_identical_duplicates_merge_silently(tmp_path):
    copy = shutil.copy(AIRLINE, tmp_path / "tasks.json")
    assert load_ground_truth([AIRLINE, copy]) == load_ground_truth([AIRLINE]) == load_ground_truth([AIRLINE, AIRLINE])


def test_bfcl_question_and_answer_files_add_fields_in_either_order():
    # Each gives other fields of a task; neither order is refused, and both read the same.
    one, other = load_ground_truth([ANSWERS, QUESTIONS]), load_ground_truth([QUESTIONS, ANSWERS])
    assert one == other
    assert {"ground_truth", "question", "initial_config", "involved_classes"} <= set(one["multi_turn_base_0"])


def test_another_version_of_a_bfcl_answer_is_refused_naming_the_field_and_lines(tmp_path):
    lines = ANSWERS.read_text().splitlines()
    first = json.loads(lines[0])
    first["ground_truth"] = first["ground_truth"][:-1]
    edited = tmp_path / "BFCL_v4_multi_turn_base_possible_answer.json"
    edited.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(RolloutFormatError) as caught:
        load_ground_truth([ANSWERS, QUESTIONS, edited])
    assert str(caught.value).startswith(
        f"ground-truth files disagree on task {first['id']!r}: {ANSWERS}:1 and {edited}:1 give its 'ground_truth' "
        "other values"
    )


def test_one_id_twice_in_a_file_with_other_values_is_refused(tmp_path):
    lines = ANSWERS.read_text().splitlines()
    twice = json.loads(lines[0])
    twice["ground_truth"] = []
    path = tmp_path / "answers.json"
    path.write_text("\n".join([lines[0], json.dumps(twice)]) + "\n")
    with pytest.raises(RolloutFormatError, match=re.escape(f"{path}:1 and {path}:2 give its 'ground_truth' other")):
        load_ground_truth([path])
    path.write_text("\n".join([lines[0], lines[0]]) + "\n")  # the same line twice merges
    single = tmp_path / "single.json"
    single.write_text(lines[0] + "\n")
    assert load_ground_truth([path]) == load_ground_truth([single])
