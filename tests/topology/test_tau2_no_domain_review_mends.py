"""Mends of the review of db2ff16 (tau2 simulations checked on their own record): each test failed
on db2ff16. Excerpts of real files in tests/data/tau2_review_no_domain (sources in its README).

H1: an env assertion written without tau2's defaults (assert_value) was refused; H2: renumbered
medical_triage tasks were taken (the nl rule accepted any one assertion half-shared); M1: another
version's env_assertions were taken where the run checked none ([] read as "tells nothing"); M2: a
non-Latin assertion echoed verbatim was refused; L1: a tool reply without tau2's `error` field
counted as answered.
"""

import json
import logging
from pathlib import Path

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts

REPO = Path(__file__).resolve().parents[1] / "data"
HERE = REPO / "tau2_review_no_domain"
POOLED = REPO / "tau2_pooled_ground_truth"
MEDICAL = POOLED / "adaptive-agent-medical_triage.json"
MEDICAL_TASKS = POOLED / "medical_triage-tasks-59b1453.json"
AIRLINE = POOLED / "adaptive-agent-airline.json"
AIRLINE_TASKS = POOLED / "airline-tasks-59b1453.json"
TELECOM = REPO / "tau2_runs" / "sierra-gpt-4.1-telecom.json"


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


# --- H1 -------------------------------------------------------------------------------------------
def test_h1_a_task_file_leaving_out_assert_value_is_the_task_tau2_ran(tmp_path):
    # tau2's EnvAssertion has assert_value=True and message=None as defaults
    # (src/tau2/data_model/tasks.py), and tau2's own mock tasks.json and oscaralvaro/tau2-bench's
    # enosa_masias/burger tasks.json write them out that way; the run's reward_info copies the model
    # with the defaults filled in. The real telecom run, its task given that way as ground truth:
    run = json.loads(TELECOM.read_text())
    tasks = run.pop("tasks")
    for task in tasks:
        for assertion in task["evaluation_criteria"]["env_assertions"]:
            if assertion.get("assert_value") is True:
                del assertion["assert_value"]
            if assertion.get("message") is None:
                assertion.pop("message", None)
    rollouts = load_rollouts(_write(tmp_path / "telecom.json", run), ground_truth=[_write(tmp_path / "t.json", tasks)])
    assert len(rollouts) == 1  # db2ff16: RolloutFormatError "reward_info.env_assertions checked other criteria"


def test_h1_tau2s_own_mock_task_with_an_env_assertion(tmp_path):
    # sierra-research/tau2-bench data/tau2/domains/mock/tasks.json (a2c0247), task
    # update_task_with_history_and_env_assertions (reward_basis ENV_ASSERTION, no assert_value); the
    # simulation's reward_info is what tau2's EnvironmentEvaluator writes (EnvAssertionCheck dumped).
    (task,) = json.loads((HERE / "mock-tasks-a2c0247-env-assertions.json").read_text())
    checked = dict(task["evaluation_criteria"]["env_assertions"][0], assert_value=True, message=None)
    sim = {
        "id": "s0",
        "task_id": task["id"],
        "trial": 0,
        "messages": [
            {"role": "user", "content": "Please mark task_2 as completed."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "name": "update_task_status",
                        "arguments": {"task_id": "task_2", "status": "completed"},
                        "requestor": "assistant",
                    }
                ],
            },
            {"role": "tool", "id": "c1", "content": '{"task_id": "task_2", "status": "completed"}', "error": False},
            {"role": "assistant", "content": "Done: task_2 is completed."},
        ],
        "reward_info": {
            "reward": 1.0,
            "env_assertions": [{"env_assertion": checked, "met": True, "reward": 1.0}],
            "action_checks": None,
            "nl_assertions": None,
            "communicate_checks": None,
            "reward_basis": ["ENV_ASSERTION"],
        },
    }
    path = _write(tmp_path / "mock-run.json", {"domain": "mock", "simulations": [sim]})
    tasks = _write(tmp_path / "mock-tasks.json", [task])
    assert len(load_rollouts(path, ground_truth=[tasks])) == 1  # db2ff16: refused


# --- H2 -------------------------------------------------------------------------------------------
def test_h2_renumbered_medical_triage_tasks_are_refused(tmp_path):
    # medical_triage's tasks have no actions, so only the assertions tell. Tasks "1" (stroke) and "2"
    # (anaphylaxis) share "Agent must instruct ... to call 911 ...": the rule "any echoed assertion
    # shares half its words with any of the task's" takes each for the other. The file with its
    # tasks renumbered (as toolorchestra's retail/airline submissions were):
    data = json.loads(MEDICAL.read_text())
    tasks = json.loads(MEDICAL_TASKS.read_text())
    ids = [t["id"] for t in tasks]
    for task, new in zip(tasks, reversed(ids)):
        task["id"] = new
    data["tasks"] = tasks
    with pytest.raises(RolloutFormatError, match=r"nl_assertions"):
        load_rollouts(_write(tmp_path / "medical-renumbered.json", data))  # db2ff16: 2 rollouts, swapped references


def test_h2_the_judge_leaving_out_an_assertion_is_still_the_task(tmp_path):
    # Guard for a stricter rule: real judges echo fewer assertions than the task has (26 of 348 real
    # pairings); every echoed one is the task's. Passes on db2ff16 too.
    data = json.loads(MEDICAL.read_text())
    for sim in data["simulations"]:
        sim["reward_info"]["nl_assertions"] = sim["reward_info"]["nl_assertions"][:-1]
    tasks = json.loads(MEDICAL_TASKS.read_text())
    assert len(load_rollouts(_write(tmp_path / "m.json", data), ground_truth=[_write(tmp_path / "t.json", tasks)])) == 2


# --- M1 -------------------------------------------------------------------------------------------
def test_m1_a_version_adding_an_env_assertion_the_run_never_checked_is_refused():
    # The cascata medical_triage run (reward_info.env_assertions == [] for all 69: tau2 ran every
    # env assertion of its task, and there was none) against medical_triage/tasks.json at 786f096,
    # whose task "10" gained assert_pain_level_reported; at 20c65c6 it has none.
    run = HERE / "cascata-medical_triage-task10.json"
    assert len(load_rollouts(run, ground_truth=[HERE / "medical_triage-tasks-20c65c6-task10.json"])) == 1
    with pytest.raises(RolloutFormatError, match=r"env_assertions"):
        load_rollouts(run, ground_truth=[HERE / "medical_triage-tasks-786f096-task10.json"])  # db2ff16: taken


# --- M2 -------------------------------------------------------------------------------------------
def test_m2_an_assertion_echoed_verbatim_is_the_tasks_in_any_script(tmp_path):
    # tau2-bench has a Hindi language pack (data/tau2/multilingual/hi); a task whose assertions are
    # written in Devanagari (or CJK) has no [a-z0-9$] words, so even the judge's exact copy is
    # "another task's".
    hindi = ["एजेंट को तुरंत आपातकालीन सेवा बुलाने को कहना चाहिए", "एजेंट को मानव चिकित्सक के पास भेजना चाहिए"]
    data = json.loads(MEDICAL.read_text())
    tasks = json.loads(MEDICAL_TASKS.read_text())
    for task in tasks:
        task["evaluation_criteria"]["nl_assertions"] = list(hindi)
    for sim in data["simulations"]:
        sim["reward_info"]["nl_assertions"] = [
            dict(check, nl_assertion=text) for check, text in zip(sim["reward_info"]["nl_assertions"], hindi)
        ]
    data["tasks"] = tasks
    assert len(load_rollouts(_write(tmp_path / "hi.json", data))) == 2  # db2ff16: refused


# --- L1 -------------------------------------------------------------------------------------------
def test_l1_a_tool_reply_without_an_error_field_that_says_error_is_no_answer(tmp_path, caplog):
    # toolorchestra's submissions (sierra-research/tau2-bench web/leaderboard/public/submissions/
    # toolorchestra_nvidia_2025-12-02) write tool messages without tau2's `error` field, failures as
    # "Error: ..." text. An airline simulation naming no domain whose model called retail's
    # find_user_id_by_email and got an error text is still airline's; the parser itself reads such
    # a reply as an error (is_error_text), _called_domains as "answered".
    data = json.loads(AIRLINE.read_text())
    del data["domain"]
    for sim in data["simulations"]:
        sim.pop("policy", None)
        sim["reward_info"] = {"reward": sim["reward_info"]["reward"]}
        for m in sim["messages"]:
            if m.get("role") == "tool":
                m.pop("error", None)
        call = {"id": "x1", "name": "find_user_id_by_email", "arguments": {"email": "a@b.c"}, "requestor": "assistant"}
        sim["messages"][2:2] = [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "id": "x1",
                "content": "Error: Tool 'find_user_id_by_email' not found.",
                "requestor": "assistant",
            },
        ]
    path = _write(tmp_path / "airline-list.json", data["simulations"])
    with caplog.at_level(logging.WARNING):
        assert len(load_rollouts(path, ground_truth=[AIRLINE_TASKS])) == 2  # db2ff16: refused
