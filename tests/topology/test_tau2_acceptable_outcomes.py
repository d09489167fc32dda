"""Real tau2 fork runs whose task gives several `acceptable_outcomes` instead of one list of actions.

The records are in ``tests/data/tau2_acceptable_outcomes/`` (see its README for the source and
commit). The fork's evaluator passes a trial that matches any of the outcomes' action sets and
ignores ``actions``; the action-match verifier reads only ``actions``.
"""

import csv
import json
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology.pipeline import CurationError

DATA = Path(__file__).resolve().parents[1] / "data" / "tau2_acceptable_outcomes"
GROK3 = DATA / "grok-3-mini-airline-relaxed-task8.json"
GROK4 = DATA / "grok-4-fast-airline-relaxed-task8.json"


class _Tool(CurateCommand):
    pass


def test_curate_says_the_task_gives_acceptable_outcomes_the_verifier_does_not_read(tmp_path):
    # Before: "the file names none and its format carries no ground truth (... tau2
    # evaluation_criteria ...)", untrue of a file whose every task has evaluation_criteria.
    with pytest.raises(CurationError) as caught:
        _Tool().curate(rollouts=[str(GROK3), str(GROK4)], output=str(tmp_path / "o"))
    message = str(caught.value)
    assert f"task '8' ({GROK3}:simulations[1])" in message  # its trial 1, the lowest
    assert "3 acceptable_outcomes" in message and "carries no ground truth" not in message
    assert not (tmp_path / "o").exists()


def test_a_task_with_actions_and_acceptable_outcomes_names_no_action_match_verifier(tmp_path):
    # The fork ignores `actions` when outcomes are given: naming the action-match verifier then
    # (as before) scored RL against one outcome while the file's rewards credit any of three.
    data = json.loads(GROK4.read_text())
    criteria = data["tasks"][0]["evaluation_criteria"]
    criteria["actions"] = criteria["acceptable_outcomes"][0]["actions"]
    path = tmp_path / "with-actions.json"
    path.write_text(json.dumps(data))
    rollouts = load_rollouts([path])
    assert all("verifier" not in r.info and "acceptable_outcomes" in r.info["no_verifier"] for r in rollouts)


def test_the_pooled_runs_curate_as_the_files_say_with_a_verifier_given(tmp_path):
    out = tmp_path / "o"
    verifier = "lightning_agents.rewards.ArithmeticVerifier"  # any class: only the records name it
    _Tool().curate(rollouts=[str(GROK3), str(GROK4)], output=str(out), verifier=verifier, draw_tasks=0)
    rows = list(csv.DictReader((out / "report" / "trajectories.csv").open()))
    # One domain (airline-relaxed) in both files: task 8 keeps its id; the first file keeps its
    # trial numbers (1, 3), the second's follow in its order (2 -> 4, 0 -> 5).
    got = [(r["task_id"], r["trial"], r["reward"], r["errors"], r["writes"]) for r in rows]
    assert got == [
        ("8", "1", "0.0", "1", "0"),  # Not enough seats on HAT139: the failed booking is no write
        ("8", "3", "0.0", "0", "1"),  # booked economy
        ("8", "4", "1.0", "0", "1"),  # booked basic economy
        ("8", "5", "0.0", "0", "1"),  # booked economy
    ]
    sft = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["trial"]) for r in sft] == [("8", 4)]
    assert sft[0]["messages"][0]["role"] == "system" and "Airline Agent Policy" in sft[0]["messages"][0]["content"]
    (rl,) = [json.loads(line) for line in (out / "rl_tasks.jsonl").read_text().splitlines()]
    assert rl["pass_rate"] == 0.25 and rl["verifier"] == verifier
    assert json.loads(rl["reference"])["acceptable_outcomes"][0]["outcome_id"] == "8_outcome_A"
    # The task's criteria are the record's ground truth, as for every other tau2 task (before:
    # None, so the verifier named had only the reference text to go on).
    criteria = json.loads(GROK3.read_text())["tasks"][0]["evaluation_criteria"]
    assert rl["ground_truth"] == criteria and len(rl["ground_truth"]["acceptable_outcomes"]) == 3


def test_a_task_whose_actions_are_null_keeps_its_criteria_as_ground_truth(tmp_path):
    data = json.loads(GROK4.read_text())
    criteria = data["tasks"][0]["evaluation_criteria"]
    del criteria["acceptable_outcomes"]  # actions null and nothing else to match: no verifier either
    path = tmp_path / "actions-null.json"
    path.write_text(json.dumps(data))
    rollouts = load_rollouts([path])
    assert all(r.info["ground_truth"] == criteria and "no actions (null)" in r.info["no_verifier"] for r in rollouts)
