"""Action-match verifiers on the real tau-bench and BFCL ground truth."""

import copy
import json

import pytest

from lightning_agents.tasks.tau_actions import BFCLActionVerifier, TauActionVerifier, parse_call_string


@pytest.fixture(scope="module")
def tau(shared_data):
    return json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text())


def _episode(actions, outputs=()):
    messages = []
    for i, action in enumerate(actions):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": action["name"], "arguments": json.dumps(action["kwargs"])},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "name": action["name"], "content": "{}"},
        ]
    messages.append({"role": "assistant", "content": "Done. " + " ".join(map(str, outputs))})
    return json.dumps(messages)


def test_ground_truth_scores_one_and_a_missing_or_changed_write_zero(tau):
    verifier = TauActionVerifier()
    tasks = {r["task_id"]: r["info"]["task"] for r in tau}
    checked = 0
    for task in tasks.values():
        reference = json.dumps(task)
        assert verifier(_episode(task["actions"], task["outputs"]), reference) == 1.0
        writes = [i for i, a in enumerate(task["actions"]) if verifier.is_write(a["name"])]
        if not writes:
            continue
        checked += 1
        missing = [a for i, a in enumerate(task["actions"]) if i != writes[-1]]
        assert verifier(_episode(missing, task["outputs"]), reference) == 0.0
        changed = copy.deepcopy(task["actions"])
        key = sorted(changed[writes[0]]["kwargs"])[0]
        changed[writes[0]]["kwargs"][key] = "something else"
        assert verifier(_episode(changed, task["outputs"]), reference) == 0.0
        # An extra write changes the database too.
        assert verifier(_episode(task["actions"] + [task["actions"][writes[0]]], task["outputs"]), reference) == 0.0
    assert checked >= 30


def test_reads_are_free_and_failed_writes_did_not_happen(tau):
    verifier = TauActionVerifier()
    task = next(r["info"]["task"] for r in tau if r["task_id"] == 11)
    reads = [
        {"name": "get_user_details", "kwargs": {"user_id": task["user_id"]}},
        {"name": "think", "kwargs": {"thought": "hm"}},
    ]
    assert verifier(_episode(reads + task["actions"], task["outputs"]), json.dumps(task)) == 1.0
    episode = json.loads(_episode(task["actions"], task["outputs"]))
    for message in episode:  # every write answered with an error: nothing was written
        if message["role"] == "tool":
            message["content"] = "Error: payment amount does not add up"
    assert verifier(json.dumps(episode), json.dumps(task)) == 0.0


def test_agrees_with_tau_bench_replay_on_the_real_trajectories(tau):
    # tau-bench replays each trajectory in its environment; the action match agrees on 198 of 200
    # (197 while a flight passed with its origin and destination counted as another flight).
    verifier = TauActionVerifier()
    agree = sum(verifier(json.dumps(r["traj"]), json.dumps(r["info"]["task"])) == r["reward"] for r in tau)
    assert agree == 198


def test_bfcl_possible_answers(shared_data):
    answers = {
        json.loads(line)["id"]: json.loads(line)["ground_truth"]
        for line in (shared_data / "bfcl" / "BFCL_v4_multi_turn_base_possible_answer.json").read_text().splitlines()
    }
    truth = answers["multi_turn_base_0"]
    order = {"sort": ["file_name"]}
    reference = {"ground_truth": truth, "parameter_order": order}
    turns = [[parse_call_string(c, order) for c in turn] for turn in truth]
    verifier = BFCLActionVerifier()
    assert verifier.score_turns(turns, reference) == 1.0
    assert parse_call_string("sort('final_report.pdf')", order) == ("sort", {"file_name": "final_report.pdf"})
    # Reads around the calls are allowed; a missing call, a changed argument or an extra write are not.
    assert verifier.score_turns([[("pwd", {}), ("ls", {}), *turns[0]], *turns[1:]], reference) == 1.0
    assert verifier.score_turns([turns[0][:-1], *turns[1:]], reference) == 0.0
    changed = [("mkdir", {"dir_name": "tmp"}) if n == "mkdir" else (n, a) for n, a in turns[0]]
    assert verifier.score_turns([changed, *turns[1:]], reference) == 0.0
    assert verifier.score_turns([[*turns[0], ("rm", {"file_name": "x"})], *turns[1:]], reference) == 0.0
    # The same through messages: user messages start turns.
    messages = []
    for t, turn in enumerate(turns):
        messages.append({"role": "user", "content": f"turn {t}"})
        for i, (name, arguments) in enumerate(turn):
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": f"{t}{i}", "function": {"name": name, "arguments": json.dumps(arguments)}}],
                }
            )
    assert verifier(json.dumps(messages), json.dumps(reference)) == 1.0
    # Without the parameter order the positional `sort(...)` of the answer can match nothing: that is
    # a reference that cannot be scored, not an episode that scores 0.
    with pytest.raises(ValueError, match="sort positional arguments, which cannot be named"):
        verifier(json.dumps(messages), json.dumps({"ground_truth": truth}))


def _write(name, **kwargs):
    return {"name": name, "kwargs": kwargs}


def test_sorted_list_arguments_and_extra_nested_keys_leave_the_same_database():
    verifier = TauActionVerifier()
    gold = [
        _write("return_delivered_order_items", order_id="#W1", item_ids=["1", "2"], payment_method_id="gc_1"),
        _write("update_reservation_flights", reservation_id="R", flights=[{"flight_number": "H1", "date": "d"}]),
    ]
    task = json.dumps({"actions": gold, "outputs": []})
    made = [
        _write("return_delivered_order_items", order_id="#W1", item_ids=["2", "1"], payment_method_id="gc_1"),
        _write(
            "update_reservation_flights",
            reservation_id="R",
            flights=[{"flight_number": "H1", "date": "d", "origin": "JFK", "price": 71}],
        ),
    ]
    assert verifier(_episode(made), task) == 1.0
    # A list the tool keeps in order, a changed nested value, a missing nested key or an unknown
    # top-level argument still differ.
    flights = [_write("update_reservation_flights", reservation_id="R", flights=[{"flight_number": "H2", "date": "d"}])]
    assert verifier(_episode([made[0], *flights]), task) == 0.0
    partial = [_write("update_reservation_flights", reservation_id="R", flights=[{"flight_number": "H1"}])]
    assert verifier(_episode([made[0], *partial]), task) == 0.0
    extra_top = [{**made[1], "kwargs": {**made[1]["kwargs"], "cabin": "economy"}}]
    assert verifier(_episode([made[0], *extra_top]), task) == 0.0
    ordered = TauActionVerifier(unordered_arguments={})
    assert ordered(_episode(made), task) == 0.0


def test_tau2_reward_basis_decides_what_is_compared():
    from lightning_agents.tasks.tau_actions import ActionReferenceError

    verifier = TauActionVerifier()
    write = {"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}, "requestor": "assistant"}
    criteria = {"actions": [write], "communicate_info": ["42"]}
    said_only = _episode([], ["42"])
    assert verifier(said_only, json.dumps({**criteria, "reward_basis": ["COMMUNICATE"]})) == 1.0
    assert verifier(said_only, json.dumps({**criteria, "reward_basis": ["DB", "COMMUNICATE"]})) == 0.0
    wrote_only = _episode([{"name": write["name"], "kwargs": write["arguments"]}])
    assert verifier(wrote_only, json.dumps({**criteria, "reward_basis": ["DB"]})) == 1.0
    for basis in (["ENV_ASSERTION"], ["DB", "NL_ASSERTION"], ["ENV_ASSERTION", "ACTION"]):
        with pytest.raises(ActionReferenceError, match=basis[-1]):
            verifier(wrote_only, json.dumps({**criteria, "reward_basis": basis}))
    user_action = {"name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}
    with pytest.raises(ActionReferenceError, match="toggle_airplane_mode"):
        verifier(wrote_only, json.dumps({"actions": [write, user_action], "reward_basis": ["DB"]}))
