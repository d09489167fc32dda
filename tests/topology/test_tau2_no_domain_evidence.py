"""A tau2 simulation whose file names no domain, and whose policy has no heading, takes its task
from a ground-truth ``tasks.json`` by id alone: what it carries of its own run decides whether
that task is the one it ran.

Real inputs (tests/data/tau2_pooled_ground_truth/README.md): sierra-research/tau2-bench @ 59b1453,
the adaptive-agent submission's airline and medical_triage files and the airline, retail and
medical_triage ``tasks.json`` (tasks "1" and "2" of each). Every real tau2 ``Results`` file names
its domain (``info.environment_info.domain_name`` is required since tau2-bench's first release,
37199f3); the files naming none are submissions' own layouts, as ironshell's adaptive-agent
simulation lists (a JSON list of simulations, each with its own ``policy``). The lists below are
those simulations written that way, with the policy left out (a harness that does not keep it,
or a policy with no heading, as telecom's).
"""

import json
import logging
from pathlib import Path

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts

DATA = Path(__file__).resolve().parents[1] / "data" / "tau2_pooled_ground_truth"
AIRLINE = DATA / "adaptive-agent-airline.json"
MEDICAL = DATA / "adaptive-agent-medical_triage.json"
AIRLINE_TASKS = DATA / "airline-tasks-59b1453.json"
RETAIL_TASKS = DATA / "retail-tasks-59b1453.json"
MEDICAL_TASKS = DATA / "medical_triage-tasks-59b1453.json"


def _no_domain_list(source: Path, tmp_path: Path, keep_reward_info: bool = True) -> Path:
    """The submission's simulations as a JSON list naming no domain, without their policy."""
    simulations = json.loads(source.read_text())["simulations"]
    for sim in simulations:
        sim.pop("policy")
        if not keep_reward_info:
            sim["reward_info"] = {"reward": sim["reward_info"]["reward"]}
    path = tmp_path / f"{source.stem}-list.json"
    path.write_text(json.dumps(simulations))
    return path


def _criteria(path):
    return {str(t["id"]): json.dumps(t["evaluation_criteria"], sort_keys=True) for t in json.loads(path.read_text())}


def test_medical_simulations_naming_nothing_are_refused_airlines_tasks_by_their_nl_assertions(tmp_path):
    # Before: loaded with a warning only, each medical_triage simulation scored against the airline
    # task of its id (tasks "1" and "2"): its RL ground truth was airline's gold actions.
    listed = _no_domain_list(MEDICAL, tmp_path)
    with pytest.raises(RolloutFormatError, match=r"-list\.json\[0\]: its reward_info\.nl_assertions checked other"):
        load_rollouts(listed, ground_truth=[AIRLINE_TASKS])
    skipped = load_rollouts(listed, ground_truth=[AIRLINE_TASKS], skip_invalid=True)
    assert len(skipped) == 0 and len(skipped.skipped) == 2
    assert "Agent must" in skipped.skipped[0]  # what it checked, from its own reward_info


def test_the_same_simulations_with_their_own_domains_tasks_are_taken(tmp_path, caplog):
    # A legitimate single-domain input naming no domain is not refused: its checks are its task's.
    listed = _no_domain_list(MEDICAL, tmp_path)
    with caplog.at_level(logging.WARNING):
        rollouts = load_rollouts(listed, ground_truth=[MEDICAL_TASKS])
    expected = _criteria(MEDICAL_TASKS)
    assert sorted(r.task_id for r in rollouts) == ["1", "2"]
    assert all(r.info["reference"] == expected[r.task_id] for r in rollouts)
    assert "name no domain" in caplog.text  # still told which tasks they took, by id alone


def test_airline_simulations_without_checks_are_refused_retails_tasks_by_their_answered_calls(tmp_path):
    # No policy, and a reward_info with nothing but the reward: before, loaded with a warning and
    # each airline simulation was scored against retail's task of its id. Its agent's
    # get_reservation_details calls were answered, and only airline has that tool.
    listed = _no_domain_list(AIRLINE, tmp_path, keep_reward_info=False)
    with pytest.raises(RolloutFormatError, match=r"\[0\]: its file names no domain.*get_reservation_details.*retail"):
        load_rollouts(listed, ground_truth=[RETAIL_TASKS])
    rollouts = load_rollouts(listed, ground_truth=[AIRLINE_TASKS])
    expected = _criteria(AIRLINE_TASKS)
    assert sorted(r.task_id for r in rollouts) == ["1", "2"]
    assert all(r.info["reference"] == expected[r.task_id] for r in rollouts)


def test_a_file_whose_tasks_are_another_domains_is_refused_by_its_nl_assertions(tmp_path):
    # The submission's own layout names its domain; given as its `tasks` another domain's tasks of
    # the same ids (medical_triage's tasks have no actions, so action_checks could not tell).
    medical = json.loads(MEDICAL.read_text())
    medical["tasks"] = json.loads(AIRLINE_TASKS.read_text())
    path = tmp_path / "medical-with-airline-tasks.json"
    path.write_text(json.dumps(medical))
    with pytest.raises(RolloutFormatError, match=r"simulations\[0\]: its reward_info\.nl_assertions"):
        load_rollouts(path)
    medical["tasks"] = json.loads(MEDICAL_TASKS.read_text())
    path.write_text(json.dumps(medical))
    assert len(load_rollouts(path)) == 2


def test_assertions_the_judge_wrote_back_in_its_own_words_are_still_the_tasks():
    # sierra-research/tau2-bench's gpt-4.1 airline run (tests/data/tau2_runs/README.md): the judge's
    # echo of task 18's and 44's assertions differs from the tasks' text (a trailing space, "the.
    # agent"); comparing the texts as written refused this real, correctly paired file.
    path = Path(__file__).resolve().parents[1] / "data" / "tau2_runs" / "sierra-gpt-4.1-airline-nl-echo.json"
    raw = json.loads(path.read_text())
    echoed = [c["nl_assertion"] for c in raw["simulations"][0]["reward_info"]["nl_assertions"]]
    assert echoed != raw["tasks"][0]["evaluation_criteria"]["nl_assertions"]
    rollouts = load_rollouts(path)
    assert sorted(r.task_id for r in rollouts) == ["18", "44"]
