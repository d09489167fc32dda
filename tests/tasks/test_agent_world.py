"""The stateful shop world: tools, preconditions, confirmation, the final-state checker, gold episodes."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.tasks import load_task
from lightning_agents.tasks.agent_world import (
    CUSTOMER_NAMES,
    AgentWorldTask,
    ShopWorld,
    check_final_state,
    make_agent_world_split,
    shop_conversation,
)

STATE = {
    "accounts": {"Ava": 30, "Ben": 50},
    "orders": {
        "512": {"customer": "Ava", "total": 45, "status": "pending"},
        "613": {"customer": "Ben", "total": 20, "status": "shipped"},
        "714": {"customer": "Ben", "total": 10, "status": "paid"},
    },
}


def test_payment_precondition_confirmation_and_recovery():
    world = ShopWorld(STATE)
    assert world.execute("pay_order", {"order": 512}) == ("error: Ava has 30, order 512 costs 45", True)
    assert world.execute("confirm", "{}") == ("error: nothing to confirm", True)
    assert world.execute("add_funds", '{"customer": "Ava", "amount": 15}') == ("Ava: 45", False)
    assert world.execute("pay_order", {"order": 512}) == ("confirm paying 45 for order 512", False)
    assert world.state()["orders"]["512"]["status"] == "pending"  # nothing happens before confirm
    assert world.execute("confirm", {}) == ("done: order 512 paid, Ava: 0", False)
    assert world.execute("pay_order", {"order": 512}) == ("error: order 512 is paid", True)
    assert STATE["accounts"]["Ava"] == 30  # the initial state is never modified


def test_cancel_return_refund_and_a_dropped_confirmation():
    world = ShopWorld(STATE)
    assert world.execute("cancel_order", {"order": 613}) == ("error: order 613 has shipped, use return_order", True)
    assert world.execute("return_order", {"order": 714}) == ("error: order 714 is paid, not shipped", True)
    assert world.execute("cancel_order", {"order": 714})[1] is False
    world.execute("get_balance", {"customer": "Ben"})  # any other call drops the prepared action
    assert world.execute("confirm", {})[0] == "error: nothing to confirm"
    world.execute("cancel_order", {"order": 714})
    assert world.execute("confirm", {}) == ("done: order 714 cancelled, Ben: 60", False)  # refunded
    world.execute("return_order", {"order": 613})
    assert world.execute("confirm", {}) == ("done: order 613 returned, Ben: 80", False)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("refund", {}, "error: unknown tool refund"),
        ("pay_order", "{bad", "error: arguments are not valid JSON"),
        ("pay_order", {}, "error: pay_order needs an order number"),
        ("pay_order", {"order": 999}, "error: no order 999"),
        ("get_balance", {"customer": "Zed"}, "error: no customer Zed"),
        ("add_funds", {"customer": "Ava", "amount": 0}, "error: add_funds needs an amount"),
    ],
)
def test_bad_calls_are_error_observations(name, arguments, message):
    content, error = ShopWorld(STATE).execute(name, arguments)
    assert error and content.startswith(message)


def test_checker_requires_the_goal_and_no_side_effects():
    goal = {"order": 512, "status": "paid"}
    world = ShopWorld(STATE)
    for name, args in [
        ("add_funds", {"customer": "Ava", "amount": 45}),
        ("pay_order", {"order": 512}),
        ("confirm", {}),
    ]:
        world.execute(name, args)
    assert check_final_state(STATE, world.state(), goal)
    assert not check_final_state(STATE, STATE, goal)  # nothing done
    side = ShopWorld(world.state())
    side.execute("add_funds", {"customer": "Ben", "amount": 5})  # another account touched
    assert not check_final_state(STATE, side.state(), goal)
    other = ShopWorld(world.state())
    other.execute("cancel_order", {"order": 714})
    other.execute("confirm", {})  # another order touched
    assert not check_final_state(STATE, other.state(), goal)


def test_splits_are_seeded_disjoint_and_mixed():
    val, test = make_agent_world_split("val"), make_agent_world_split("test")
    assert len(val) == len(test) == 256 and make_agent_world_split("val") == val
    assert not {p["id"] for p in val} & {p["id"] for p in test}
    kinds = Counter(p["kind"] for p in test)
    assert set(kinds) == {"pay", "cancel-pending", "cancel-paid", "cancel-shipped"}
    short = [
        p
        for p in test
        if p["kind"] == "pay"
        and p["state"]["accounts"][p["state"]["orders"][str(p["goal"]["order"])]["customer"]]
        < p["state"]["orders"][str(p["goal"]["order"])]["total"]
    ]
    assert 0.3 < len(short) / kinds["pay"] < 0.7  # about half the payments need a top-up first


@pytest.mark.parametrize("strategy", ["direct", "lookup"])
@pytest.mark.parametrize("top_up", ["difference", "total"])
def test_every_gold_strategy_solves_every_problem(strategy, top_up):
    task = AgentWorldTask("val")
    calls = Counter()
    for problem in task.problems:
        conv = shop_conversation(problem, strategy, top_up)
        n = sum(1 for m in conv["messages"] if m.get("tool_calls"))
        assert 2 <= n <= 5
        calls[n] += 1
        assert task.verify_episode(conv["messages"], None, problem) == 1.0  # replayed from the calls
        errors = [m for m in conv["messages"] if m["role"] == "tool" and m["content"].startswith("error:")]
        assert (len(errors) > 0) == (
            strategy == "direct"
            and problem["kind"] in ("pay", "cancel-shipped")
            and (
                problem["kind"] == "cancel-shipped"
                or problem["state"]["accounts"][problem["state"]["orders"][str(problem["goal"]["order"])]["customer"]]
                < problem["state"]["orders"][str(problem["goal"]["order"])]["total"]
            )
        )
    assert len(calls) >= 3  # tasks of different lengths


def test_episode_verifier_needs_a_final_reply_and_the_goal_state():
    task = load_task("embedded:agent_world/val")
    problem = next(p for p in task.problems if p["kind"] == "cancel-shipped")
    conv = shop_conversation(problem, "direct")
    assert task.verify_episode(conv["messages"], None, problem) == 1.0
    assert task.verify_episode(conv["messages"][:-1], None, problem) == 0.0  # ended on a tool message
    wrong = [conv["messages"][0], {"role": "assistant", "content": "Done."}]
    assert task.verify_episode(wrong, None, problem) == 0.0
    assert json.loads(problem["reference"]) == problem["goal"]
    with pytest.raises(VerifierError):
        task.check("Done.", problem["reference"])


def test_customer_names_are_whole_tokens_of_the_embedded_tokenizer_and_leave_arithmetic_alone():
    # A name split into byte pieces is what the 2-layer student could not copy into a call.
    from lightning_agents.models import load_tokenizer
    from lightning_agents.tasks.arithmetic import make_arithmetic_split

    for checkpoint in ("embedded:student", "embedded:teacher"):
        tokenizer = load_tokenizer(checkpoint)
        for name in CUSTOMER_NAMES:
            assert tokenizer.tokenize(f'Pay order 512 for {name}. {{"customer": "{name}"}}').count(name) == 2, name
        # single_word tokens: a name inside a longer word stays ordinary text.
        assert "Tom" not in tokenizer.tokenize("Tomorrow")
    problems = make_agent_world_split("test")
    assert {c for p in problems for c in p["state"]["accounts"]} <= set(CUSTOMER_NAMES)
    questions = " ".join(r["question"] for r in make_arithmetic_split("test"))
    assert not any(re.search(rf"\b{name}\b", questions) for name in CUSTOMER_NAMES)
