"""BFCLActionVerifier on real BFCL results (glyphh-ada-1.1 FC, AIREV-Agent-0.8B prompt replies), against
the verdicts of BFCL's own checker (its committed score files; tests/data/bfcl_results/README.md)."""

from __future__ import annotations

import json

import pytest
from bfcl_glyphh import BFCL_VALID, DATA, glyphh_rollouts, turn_messages

from lightning_agents.tasks.tau_actions import BFCL_READ_ONLY_TOOLS, BFCLActionVerifier, parse_python_calls
from lightning_agents.topology.signatures import is_read_only_tool


def _score(rollout, verifier=None) -> float:
    return (verifier or BFCLActionVerifier()).score_turns(
        rollout.info["turn_calls"], json.loads(rollout.info["reference"])
    )


def test_bfcl_read_only_functions():
    # multi_turn_base_180 converts a currency (compute_exchange_rate) and contacts support (a fixed
    # reply): neither changes the TravelAPI instance; guessed from the name they were writes.
    rollouts = glyphh_rollouts()
    assert _score(rollouts["multi_turn_base_180"]) == 1.0 == BFCL_VALID["multi_turn_base_180"]
    names = {
        n
        for doc in (DATA / "multi_turn_func_doc").glob("*.json")
        for n in (json.loads(x)["name"] for x in doc.read_text().splitlines() if x.strip())
    }
    guessed = BFCLActionVerifier(sorted(n for n in names if is_read_only_tool(n)))
    assert _score(rollouts["multi_turn_base_180"], guessed) == 0.0
    assert {"displayCarStatus", "travel_get_login_status", "liter_to_gallon", "mean", "sort"} <= BFCL_READ_ONLY_TOOLS
    assert not {"cd", "mkdir", "startEngine", "book_flight", "message_login"} & BFCL_READ_ONLY_TOOLS


def test_turns_without_ground_truth_are_not_checked():
    # miss_param_145 turn 0 lacks a parameter (ground truth []), and the model checked its login there.
    assert _score(glyphh_rollouts()["multi_turn_miss_param_145"]) == 1.0 == BFCL_VALID["multi_turn_miss_param_145"]


def test_turns_compare_cumulatively():
    rollouts = glyphh_rollouts()
    # miss_param_0: the mv the ground truth makes in turn 4 the model made in turn 1 (BFCL checks no
    # turn in between whose state could differ); base_113: the watchlist read in the turn before.
    assert _score(rollouts["multi_turn_miss_param_0"]) == 1.0
    assert _score(rollouts["multi_turn_base_113"]) == 1.0


def test_reads_count_at_the_state_they_read():
    # miss_param_133: the model read the watchlist before adding AAPL, the ground truth after: BFCL
    # sees different outputs and fails it; a read compared by its call alone would pass it.
    assert _score(glyphh_rollouts()["multi_turn_miss_param_133"]) == 0.0 == BFCL_VALID["multi_turn_miss_param_133"]


def test_calls_the_environment_rejected_change_nothing():
    rollouts = glyphh_rollouts()
    turns = [list(turn) for turn in rollouts["multi_turn_base_0"].info["turn_calls"]]
    assert _score(rollouts["multi_turn_base_0"]) == 0.0  # a result-only file cannot tell errors
    # In BFCL's execution (its checker, run on this record) `mv(destination='temp/final_report.pdf')`
    # and the grep before `cd(folder='temp')` returned errors: marked so, the trial passes, as in BFCL.
    turns[0][2] = (*turns[0][2], False)
    turns[1][0] = (*turns[1][0], False)
    reference = json.loads(rollouts["multi_turn_base_0"].info["reference"])
    assert BFCLActionVerifier().score_turns(turns, reference) == 1.0 == BFCL_VALID["multi_turn_base_0"]
    # The same through messages: a tool result {"error": ...} marks the call.
    messages = turn_messages(turns, lambda call: json.dumps({"error": "rejected"} if len(call) > 2 else {"ok": True}))
    assert BFCLActionVerifier()(json.dumps(messages), json.dumps(reference)) == 1.0


@pytest.mark.parametrize(
    ("task", "turn", "calls"),
    [
        ("multi_turn_base_29", 0, [("cd", {"folder": "VisionX"}), ("du", {"human_readable": True})]),
        ("multi_turn_base_33", 0, [("ls", {"a": False, "h": True})]),
        ("multi_turn_base_8", 0, [("mkdir", {"dir_name": "projects"}), ("ls", {"_0": "current_directory_content"})]),
    ],
)
def test_prompt_replies_with_json_literals_and_bare_names(task, turn, calls):
    # AIREV-Agent-0.8B writes JSON's true/false and a bare name; BFCL's decoder reads them.
    record = next(
        json.loads(x)
        for x in (DATA / "AIREV-Agent-0.8B_BFCL_v4_multi_turn_base_result.json").read_text().splitlines()
        if json.loads(x)["id"] == task
    )
    assert parse_python_calls(record["result"][turn]) == calls


def test_prompt_replies_never_evaluate():
    # A call among the arguments (BFCL's decoder nests it) stays text; nothing is evaluated.
    assert parse_python_calls('[mean(numbers=[wc(file_name="Reports", mode="c")])]') is None
    assert parse_python_calls("[ls(a=__import__('os').system('x'))]") is None
    assert parse_python_calls("[ls(a=null)]") == [("ls", {"a": None})]


def test_arguments_the_function_never_reads():
    # BFCL's purchase_insurance never reads insurance_type, contact_customer_support never its
    # message: the model's other insurance type (base_159) and wording (base_170) change nothing.
    rollouts = glyphh_rollouts()
    assert _score(rollouts["multi_turn_base_159"]) == 1.0 == BFCL_VALID["multi_turn_base_159"]
    assert _score(rollouts["multi_turn_base_170"]) == 1.0 == BFCL_VALID["multi_turn_base_170"]


def test_reads_depend_on_their_own_api_instance():
    # base_143: the model read its trading account before logging in to the messaging API, the
    # ground truth after; TradingBot's answer is the same either way.
    rollout = glyphh_rollouts()["multi_turn_base_143"]
    reference = json.loads(rollout.info["reference"])
    assert reference["tool_classes"]["get_account_info"] == "TradingBot"
    assert _score(rollout) == 1.0 == BFCL_VALID["multi_turn_base_143"]
    del reference["tool_classes"]  # without it every earlier write counts: stricter
    assert BFCLActionVerifier().score_turns(rollout.info["turn_calls"], reference) == 0.0
