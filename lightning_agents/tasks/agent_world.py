"""The stateful embedded agent world: a small shop with customer accounts and orders.

An agent pays or cancels orders through six tools. Tools read and change the state; a write is
only prepared by ``pay_order`` / ``cancel_order`` / ``return_order`` and happens when the agent
calls ``confirm``; a payment fails while the customer's balance is below the order's total and a
cancellation fails once the order has shipped. Every failure is an ``error: ...`` observation that
says what is wrong, so an agent can recover (top up the account, return instead of cancel).

Tasks need 2 to 5 calls in order and several are solved more than one way (pay first and top up
on failure, or look the order and balance up first; top up by the difference or by the whole
total). Success is decided by a deterministic check of the final state: the target order is in the
goal status and nothing else changed (no other order touched, no other account topped up).

Pure Python; the problems are generated from seeds, so every split is reproducible and held out.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from typing import Any, Literal

from lightning_agents.errors import VerifierError
from lightning_agents.tasks.base import Problem, Task
from lightning_agents.tasks.tools import ToolWorld, parse_arguments

__all__ = [
    "AGENT_WORLD_SPLIT_SIZES",
    "AgentWorldTask",
    "CUSTOMER_NAMES",
    "SHOP_TOOLS",
    "ShopWorld",
    "check_final_state",
    "make_agent_world_split",
    "shop_conversation",
]

AGENT_WORLD_SPLIT_SIZES = {"train": 6000, "val": 256, "test": 256}
_SPLIT_SEEDS = {"train": 5101, "val": 5203, "test": 5309}
# Shop customers. Distinct from the arithmetic task's names, so that the embedded tokenizer can hold
# each as one whole token (scripts/build_embedded.py adds them) without changing how arithmetic text
# tokenizes: split into 2-4 pieces, the 2-layer student could not copy a name from the question into
# a call (64% of its tool errors were `no customer X`, nearly all naming a customer it made up).
CUSTOMER_NAMES = [
    "Olga",
    "Pia",
    "Rosa",
    "Sol",
    "Tom",
    "Uma",
    "Vera",
    "Walt",
    "Xia",
    "Yuri",
    "Zoe",
    "Omar",
    "Ines",
    "Remy",
]


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    kinds = {"order": "integer", "amount": "integer", "customer": "string"}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": kinds[p], "description": d} for p, d in params.items()},
                "required": list(params),
            },
        },
    }


SHOP_TOOLS: list[dict[str, Any]] = [
    _tool("get_order", "Look up an order: customer, total and status.", order="order number"),
    _tool("get_balance", "A customer's account balance.", customer="customer name"),
    _tool("add_funds", "Top up a customer's account.", customer="customer name", amount="amount to add, 1 to 999"),
    _tool(
        "pay_order", "Prepare paying a pending order from its customer's balance; needs confirm.", order="order number"
    ),
    _tool(
        "cancel_order",
        "Prepare cancelling an order that has not shipped (refunds a paid one); needs confirm.",
        order="order number",
    ),
    _tool("return_order", "Prepare returning a shipped order (refunds it); needs confirm.", order="order number"),
    _tool("confirm", "Carry out the prepared pay, cancel or return."),
]
_TOOL_NAMES = [t["function"]["name"] for t in SHOP_TOOLS]
# The status each prepared action leaves the order in.
_DONE = {"pay": "paid", "cancel": "cancelled", "return": "returned"}


class ShopWorld(ToolWorld):
    """The shop's state and its tools; one instance per episode.

    Args:
        state: ``{"accounts": {name: balance}, "orders": {id: {"customer", "total", "status"}}}``
            (order ids as strings, as JSON keeps them); copied, never modified in place.
    """

    tools = SHOP_TOOLS

    def __init__(self, state: dict[str, Any]) -> None:
        self.accounts: dict[str, int] = dict(state["accounts"])
        self.orders: dict[str, dict[str, Any]] = copy.deepcopy(state["orders"])
        self.pending: tuple[str, str] | None = None

    def state(self) -> dict[str, Any]:
        """The accounts and orders now (a pending, unconfirmed action is not part of the state)."""
        return {"accounts": dict(self.accounts), "orders": copy.deepcopy(self.orders)}

    def _order(self, arguments: dict[str, Any], tool: str) -> tuple[str | None, str | None]:
        order = arguments.get("order")
        if isinstance(order, str) and order.strip().isdigit():
            order = int(order)
        if not isinstance(order, int) or isinstance(order, bool):
            return None, f"error: {tool} needs an order number"
        if str(order) not in self.orders:
            return None, f"error: no order {order}"
        return str(order), None

    def _customer(self, arguments: dict[str, Any], tool: str) -> tuple[str | None, str | None]:
        customer = arguments.get("customer")
        if not isinstance(customer, str) or not customer:
            return None, f"error: {tool} needs a customer name"
        if customer not in self.accounts:
            return None, f"error: no customer {customer}"
        return customer, None

    def execute(self, name: str, arguments: str | dict) -> tuple[str, bool]:
        """Run one tool call; ``(observation, is_error)``. Any call but ``confirm`` drops a prepared action."""
        if name not in _TOOL_NAMES:
            return f"error: unknown tool {name}", True
        arguments, error = parse_arguments(arguments)
        if error:
            return error, True
        pending, self.pending = self.pending, None
        if name == "confirm":
            if pending is None:
                return "error: nothing to confirm", True
            action, oid = pending
            order = self.orders[oid]
            if action == "pay":
                self.accounts[order["customer"]] -= order["total"]
            elif order["status"] in ("paid", "shipped"):
                self.accounts[order["customer"]] += order["total"]
            order["status"] = _DONE[action]
            return (
                f"done: order {oid} {order['status']}, {order['customer']}: {self.accounts[order['customer']]}",
                False,
            )
        if name in ("get_balance", "add_funds"):
            customer, error = self._customer(arguments, name)
            if error:
                return error, True
            if name == "add_funds":
                amount = arguments.get("amount")
                if isinstance(amount, str) and amount.strip().isdigit():
                    amount = int(amount)
                if not isinstance(amount, int) or isinstance(amount, bool) or not 1 <= amount <= 999:
                    return "error: add_funds needs an amount from 1 to 999", True
                self.accounts[customer] += amount
            return f"{customer}: {self.accounts[customer]}", False
        oid, error = self._order(arguments, name)
        if error:
            return error, True
        order = self.orders[oid]
        status, customer, total = order["status"], order["customer"], order["total"]
        if name == "get_order":
            return f"order {oid}: {customer}, {total}, {status}", False
        if name == "pay_order":
            if status != "pending":
                return f"error: order {oid} is {status}", True
            if self.accounts[customer] < total:
                return f"error: {customer} has {self.accounts[customer]}, order {oid} costs {total}", True
            self.pending = ("pay", oid)
            return f"confirm paying {total} for order {oid}", False
        if name == "cancel_order":
            if status == "shipped":
                return f"error: order {oid} has shipped, use return_order", True
            if status not in ("pending", "paid"):
                return f"error: order {oid} is {status}", True
            self.pending = ("cancel", oid)
            return f"confirm cancelling order {oid}", False
        # return_order
        if status != "shipped":
            return f"error: order {oid} is {status}, not shipped", True
        self.pending = ("return", oid)
        return f"confirm returning order {oid}", False


def check_final_state(initial: dict[str, Any], final: dict[str, Any], goal: dict[str, Any]) -> bool:
    """True when the target order reached the goal status and nothing else changed.

    ``goal`` is ``{"order": id, "status": wanted status}``. Other orders must be untouched; the
    target's customer may have been topped up (any amount: topping up by the difference and by the
    whole total are both valid), every other account must be unchanged.
    """
    oid = str(goal["order"])
    if final["orders"].get(oid, {}).get("status") != goal["status"]:
        return False
    if any(final["orders"][o] != initial["orders"][o] for o in initial["orders"] if o != oid):
        return False
    owner = initial["orders"][oid]["customer"]
    return all(final["accounts"][c] == b for c, b in initial["accounts"].items() if c != owner)


def _draw(rng: random.Random, key_seen: set[str]) -> Problem | None:
    names = rng.sample(CUSTOMER_NAMES, 2)
    ids = rng.sample(range(100, 1000), 3)
    kind = rng.choice(["pay", "pay", "cancel"])
    owner = names[0]
    orders: dict[str, dict[str, Any]] = {}
    target = str(ids[0])
    total = rng.randint(10, 99)
    if kind == "pay":
        # About half the payments meet the balance precondition, half need a top-up first.
        balance = rng.randint(total, 99) if rng.random() < 0.5 else rng.randint(0, total - 1)
        orders[target] = {"customer": owner, "total": total, "status": "pending"}
        question = rng.choice(["Pay order {o} for {c}.", "{c} wants to pay order {o}.", "Please pay order {o} of {c}."])
        goal_status = "paid"
    else:
        balance = rng.randint(0, 99)
        status = rng.choice(["pending", "paid", "shipped"])
        orders[target] = {"customer": owner, "total": total, "status": status}
        question = rng.choice(
            ["Cancel order {o} for {c}.", "{c} wants to cancel order {o}.", "Please cancel order {o} of {c}."]
        )
        goal_status = "returned" if status == "shipped" else "cancelled"
    for oid in ids[1:]:
        orders[str(oid)] = {
            "customer": rng.choice(names),
            "total": rng.randint(10, 99),
            "status": rng.choice(["pending", "paid", "shipped"]),
        }
    state = {"accounts": {owner: balance, names[1]: rng.randint(0, 99)}, "orders": orders}
    question = question.format(o=target, c=owner)
    key = hashlib.sha1(json.dumps([question, state], sort_keys=True).encode()).hexdigest()[:12]
    if key in key_seen:
        return None
    key_seen.add(key)
    goal = {"order": int(target), "status": goal_status}
    return {
        "id": f"shop-{key}",
        "question": question,
        "reference": json.dumps(goal),
        "state": state,
        "goal": goal,
        "kind": kind if kind == "pay" else f"cancel-{orders[target]['status']}",
    }


_SPLIT_CACHE: dict[tuple[str, int, int], list[Problem]] = {}


def make_agent_world_split(split: str, n: int | None = None, seed: int | None = None) -> list[Problem]:
    """The problems of one split of the agent world.

    Args:
        split: ``train``, ``val`` or ``test``; val and test never repeat a problem of the splits before them.
        n: number of problems (default :data:`AGENT_WORLD_SPLIT_SIZES` ``[split]``).
        seed: override the split's seed (a differently drawn set).

    Returns:
        Dicts with ``id``, ``question``, ``reference`` (the goal as JSON), ``state`` (the initial
        state), ``goal`` and ``kind`` (``pay``, ``cancel-pending``, ``cancel-paid``, ``cancel-shipped``).
    """
    if split not in _SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(_SPLIT_SEEDS)}")
    n = AGENT_WORLD_SPLIT_SIZES[split] if n is None else n
    seed = _SPLIT_SEEDS[split] if seed is None else seed
    key = (split, n, seed)
    if key not in _SPLIT_CACHE:
        seen: set[str] = set()
        for earlier in ("train", "val"):
            if earlier == split:
                break
            seen.update(p["id"][len("shop-") :] for p in make_agent_world_split(earlier))
        rng = random.Random(seed)
        out: list[Problem] = []
        while len(out) < n:
            problem = _draw(rng, seen)
            if problem is not None:
                out.append(problem)
        _SPLIT_CACHE[key] = out
    return copy.deepcopy(_SPLIT_CACHE[key])


Strategy = Literal["direct", "lookup"]
Slip = Literal["order", "customer", "amount"]
SLIP_KINDS: tuple[str, ...] = ("order", "customer", "amount")


def shop_conversation(
    problem: Problem,
    strategy: Strategy = "direct",
    top_up: Literal["difference", "total"] = "difference",
    call_prefix: str = "call",
    slip: bool | Slip = False,
) -> dict[str, Any]:
    """A gold episode for ``problem``, with the world's real observations.

    Args:
        problem: a problem from :func:`make_agent_world_split`.
        strategy: ``direct`` (act first, recover from the error the world returns) or ``lookup``
            (read the order, and for payments the balance, before acting; no error).
        top_up: a payment short of funds tops up by the ``difference`` or by the whole ``total``.
        call_prefix: prefix of the tool call ids.
        slip: one mistake of the kind a small model makes, then the world's error and the way on:
            ``"order"`` (or ``True``) a mistyped order number (``error: no order N``) on the first
            or second call that names the order; ``"customer"`` a misspelt customer on a balance
            call or top-up (``error: no customer X``); ``"amount"`` a top-up a few short, so the
            payment fails again and a second top-up follows (direct strategy, ``difference``
            top-ups). A slip the episode has no place for is left out. Mistaken assistant
            messages are marked ``"slip": True`` so that training can leave them out of the loss
            (learn the recovery, not the mistake).

    Returns:
        ``{"messages", "tools"}`` in OpenAI format; the episode passes :func:`check_final_state`.
    """
    world = ShopWorld(problem["state"])
    oid = problem["goal"]["order"]
    order = problem["state"]["orders"][str(oid)]
    customer = order["customer"]
    messages: list[dict[str, Any]] = [{"role": "user", "content": problem["question"]}]
    kind = "order" if slip is True else (slip or None)
    if kind is not None and kind not in SLIP_KINDS:
        raise ValueError(f"unknown slip {slip!r}; expected one of {SLIP_KINDS}")
    rng = random.Random(f"{problem['id']}-{kind}-{strategy}")
    # The slip goes on the first call that can carry it, or (40%) on the second one.
    armed = {"kind": kind, "skip": kind != "amount" and rng.random() < 0.4}

    def record(name: str, arguments: dict[str, Any], slipped: bool = False) -> tuple[str, bool]:
        cid = f"{call_prefix}_{sum(m['role'] == 'tool' for m in messages)}"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                ],
            }
        )
        if slipped:
            messages[-1]["slip"] = True
        observation, is_error = world.execute(name, arguments)
        messages.append({"role": "tool", "tool_call_id": cid, "name": name, "content": observation})
        return observation, is_error

    def take_slip(field: str) -> bool:
        if armed["kind"] != field:
            return False
        if armed["skip"]:
            armed["skip"] = False
            return False
        armed["kind"] = None
        return True

    def call(name: str, **arguments: Any) -> tuple[str, bool]:
        if "order" in arguments and take_slip("order"):
            # A near miss of the right number, as a copying error would be; never an existing order.
            wrong = oid
            while str(wrong) in problem["state"]["orders"]:
                wrong = min(max(oid + rng.choice([-10, -1, 1, 10, 100, -100]), 100), 999)
            record(name, {**arguments, "order": wrong}, slipped=True)
        elif "customer" in arguments and take_slip("customer"):
            others = [n for n in CUSTOMER_NAMES if n not in problem["state"]["accounts"] and n[0] != customer[0]]
            wrong = rng.choice([customer.lower(), customer[:-1], rng.choice(others)])
            record(name, {**arguments, "customer": wrong}, slipped=True)
        elif name == "add_funds" and arguments["amount"] > 1 and take_slip("amount"):
            # Too little: the payment that follows fails again and needs a second top-up.
            short = rng.randint(1, min(9, arguments["amount"] - 1))
            return record(name, {**arguments, "amount": arguments["amount"] - short}, slipped=True)
        return record(name, arguments)

    def top_up_amount() -> int:
        short = order["total"] - world.accounts[customer]
        first_top_up = world.accounts[customer] == problem["state"]["accounts"][customer]
        return order["total"] if top_up == "total" and first_top_up else short

    if kind == "amount" and (strategy != "direct" or top_up != "difference"):
        armed["kind"] = None
    if problem["goal"]["status"] == "paid":
        if strategy == "lookup":
            call("get_order", order=oid)
            call("get_balance", customer=customer)
            if world.accounts[customer] < order["total"]:
                call("add_funds", customer=customer, amount=top_up_amount())
        _, failed = call("pay_order", order=oid)
        for _ in range(2):
            if not failed:
                break
            call("add_funds", customer=customer, amount=top_up_amount())
            _, failed = call("pay_order", order=oid)
    else:
        if strategy == "lookup":
            call("get_order", order=oid)
            call("return_order" if order["status"] == "shipped" else "cancel_order", order=oid)
        else:
            _, failed = call("cancel_order", order=oid)
            if failed:
                call("return_order", order=oid)
    call("confirm")
    messages.append({"role": "assistant", "content": f"Order {oid} is {problem['goal']['status']}."})
    assert check_final_state(problem["state"], world.state(), problem["goal"]), problem
    return {"messages": messages, "tools": SHOP_TOOLS}


def _replay(messages: list[dict[str, Any]], state: dict[str, Any]) -> ShopWorld:
    world = ShopWorld(state)
    for message in messages:
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            world.execute(fn["name"], fn.get("arguments", {}))
    return world


class AgentWorldTask(Task):
    """The shop world as a task: pay or cancel an order with the shop's tools; success is the final state.

    Args:
        split: ``train``, ``val`` or ``test``.
        n: number of problems (``None``: the split's default size).
        seed: draw a different set of problems than the split's default.
        name: task name (default ``agent_world-<split>``).
    """

    default_name = "agent_world"
    domain = "agent"
    tools = SHOP_TOOLS
    answer_template = "{answer}"

    def __init__(
        self, split: str = "val", n: int | None = None, seed: int | None = None, name: str | None = None
    ) -> None:
        super().__init__(split, n, seed, name or f"agent_world-{split}")

    def load(self, split: str) -> list[Problem]:
        return make_agent_world_split(split, seed=self.seed)

    def get_problems(self, split: str | None = None, n: int | None = None, seed: int | None = None) -> list[Problem]:
        """The first ``n`` problems of the split (already a random draw; the constructor's ``seed`` picks another)."""
        return make_agent_world_split(split or self.split_name, n=n, seed=self.seed)

    def conversation(self, problem: Problem, strategy: Strategy = "direct") -> dict[str, Any]:
        """A gold episode (see :func:`shop_conversation`)."""
        return shop_conversation(problem, strategy)

    def environment(self, problem: Problem) -> ShopWorld:
        return ShopWorld(problem["state"])

    def verify_episode(self, messages: list[dict[str, Any]], world: ToolWorld | None, problem: Problem) -> float:
        """1.0 when the episode ended with a reply (no call left open) and the final state meets the goal.

        Without the live ``world`` the episode's tool calls are replayed on a fresh one, which gives
        the same state because the world is deterministic.
        """
        last = messages[-1] if messages else {}
        if last.get("role") != "assistant" or last.get("tool_calls"):
            return 0.0
        world = world if isinstance(world, ShopWorld) else _replay(messages, problem["state"])
        return float(check_final_state(problem["state"], world.state(), problem["goal"]))

    def check(self, completion: str, reference: str) -> float:
        raise VerifierError(
            "an agent-world answer is verified from the episode's final state "
            "(AgentWorldTask.verify_episode), not from a single completion"
        )
