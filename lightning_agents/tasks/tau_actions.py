"""Action-match verifiers for tool-use tasks whose ground truth is a list of actions.

tau-bench and tau2-bench judge an episode by replaying it in their simulated environment: the
reward is 1 when the database the agent left equals the one the ground-truth actions produce
(and the required outputs were said). That replay needs the benchmark's environment code and data.
:class:`TauActionVerifier` decides the same question without them, from the actions alone: the
episode's successful *state-changing* calls must be exactly the ground truth's state-changing
actions (as a multiset: independent writes commute; a missing, changed or extra write gives 0),
and every expected output must appear in the assistant's messages, as tau-bench checks it. Reads
(``get_*``, ``search_*``, ``think``, ...) are free: they do not change the database.

BFCL's multi-turn checker likewise executes the model's calls and the ground truth in its API
classes and, after every turn with ground truth, compares the instances' state and requires the
turn's ground-truth outputs among every output the model produced so far. :class:`BFCLActionVerifier`
decides that from the calls: after each such turn the model's successful state-changing calls so far
must be the ground truth's so far, and each ground-truth read must have been made by the model at
the same point of its writes. It is stricter than BFCL where two different call sequences reach the
same state or two reads return the same output.

Both take ``(completion, reference)`` like every verifier of this package: the completion is the
episode (a JSON list of OpenAI chat messages, or a JSON list of ``{name, arguments}`` actions) and
the reference the JSON text a TopoCurate RL record carries. Nothing here imports torch.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.json_text import JSONTextError, loads_json
from lightning_agents.topology.signatures import STATELESS_TOOLS, canonical_arguments, is_error_text, is_read_only_tool

__all__ = [
    "TAU2_ACTION_BASES",
    "TAU_UNORDERED_ARGUMENTS",
    "BFCL_READ_ONLY_TOOLS",
    "BFCL_UNREAD_ARGUMENTS",
    "ActionReferenceError",
    "BFCLActionVerifier",
    "TauActionVerifier",
    "episode_actions",
    "parse_call_string",
    "parse_python_calls",
    "unsupported_tau2_basis",
]


class ActionReferenceError(LightningAgentsError, ValueError):
    """A reference or completion that is not in the expected form."""


def _loads(text: Any, what: str) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return loads_json(text)
    except JSONTextError as exc:
        raise ActionReferenceError(f"{what} is not valid JSON ({exc})") from None


def _arguments(raw: Any) -> dict:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        raw = _loads(raw, "tool call arguments")
    if not isinstance(raw, dict):
        raise ActionReferenceError(f"tool call arguments must be an object, got {type(raw).__name__}")
    return raw


def episode_actions(completion: Any) -> tuple[list[tuple[str, dict, bool, int]], list[str]]:
    """The calls an episode made and the assistant's texts.

    Args:
        completion: OpenAI chat messages (a list, or its JSON text, or ``{"messages": [...]}``),
            or a list of actions ``{name, arguments | kwargs}`` (all taken as successful).

    Returns:
        ``([(name, arguments, succeeded, turn), ...], assistant_texts)``; ``turn`` counts user
        messages seen before the call (0 before the first), and a call succeeded unless its tool
        message is flagged ``error`` or reads as an error (``Error: ...``).
    """
    data = _loads(completion, "completion")
    if isinstance(data, dict) and "messages" in data:
        data = data["messages"]
    if not isinstance(data, list):
        raise ActionReferenceError(f"completion must be a list of messages or actions, got {type(data).__name__}")
    calls: list[list] = []
    texts: list[str] = []
    by_id: dict[str, list] = {}
    turn = 0
    for item in data:
        if not isinstance(item, dict):
            raise ActionReferenceError(f"completion items must be objects, got {type(item).__name__}")
        if "role" not in item:
            calls.append([item["name"], _arguments(item.get("arguments", item.get("kwargs"))), True, turn])
            continue
        role = item["role"]
        if role == "user":
            turn += 1
        elif role == "assistant":
            if item.get("content"):
                texts.append(str(item["content"]))
            for call in item.get("tool_calls") or []:
                fn = call.get("function", call)
                entry = [fn["name"], _arguments(fn.get("arguments")), True, turn]
                calls.append(entry)
                by_id[str(call.get("id"))] = entry
        elif role == "tool":
            entry = by_id.get(str(item.get("tool_call_id", item.get("id"))))
            if entry is None:
                continue
            flag = item.get("error")
            entry[2] = not (bool(flag) if flag is not None else is_error_text(str(item.get("content") or "")))
    return [tuple(c) for c in calls], texts


def _key(name: str, arguments: dict) -> tuple[str, str]:
    return (name, canonical_arguments(arguments))


def _same_writes(made: Counter, expected: Counter) -> bool:
    """Whether the writes made equal the expected ones once keys inside nested objects that the
    ground truth does not give are dropped.

    tau-bench's and tau2's tools read a nested object into a model of their own fields
    (``FlightInfo`` keeps ``flight_number`` and ``date``; ``Passenger`` its name and birth date), so
    an agent that also passes a flight's ``origin`` or ``price`` leaves the same database. Top-level
    arguments still have to match exactly: an unknown one is a failed call.
    """
    if sum(made.values()) != sum(expected.values()):
        return False
    pool = [(name, loads_json(text)) for (name, text), count in made.items() for _ in range(count)]
    for (name, text), count in expected.items():
        want = loads_json(text)
        for _ in range(count):
            hit = next((i for i, (n, args) in enumerate(pool) if n == name and _covers(args, want, top=True)), None)
            if hit is None:
                return False
            pool.pop(hit)
    return True


def _covers(value: Any, want: Any, top: bool = False) -> bool:
    """``value`` equals ``want``, except that nested objects may hold keys ``want`` lacks."""
    if isinstance(want, dict):
        if not isinstance(value, dict) or (top and set(value) != set(want)) or not set(want) <= set(value):
            return False
        return all(_covers(value[key], item) for key, item in want.items())
    if isinstance(want, list):
        return isinstance(value, list) and len(value) == len(want) and all(map(_covers, value, want))
    return (
        value == want
        and type(value) is type(want)
        or (
            isinstance(value, (int, float))
            and isinstance(want, (int, float))
            and not isinstance(value, bool)
            and not isinstance(want, bool)
            and value == want
        )
    )


def _sort_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


#: List arguments that tau-bench's and tau2-bench's retail tools store sorted, so their order
#: cannot change the database: returning ``[a, b]`` or ``[b, a]`` leaves the same order record.
TAU_UNORDERED_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "return_delivered_order_items": ("item_ids",),
    "exchange_delivered_order_items": ("item_ids", "new_item_ids"),
}

#: tau2-bench reward bases an action match decides: the database the writes leave (``DB``) and
#: the outputs the agent must say (``COMMUNICATE``). ``ENV_ASSERTION`` checks the user's device
#: after the user's own tool calls, ``NL_ASSERTION`` asks an LLM judge: neither follows from the
#: agent's calls.
TAU2_ACTION_BASES = frozenset({"DB", "COMMUNICATE"})


def _basis(criteria: dict) -> frozenset[str] | None:
    """A tau2 task's ``reward_basis`` as a set; ``None`` for tau-bench, which has none (DB and outputs)."""
    basis = criteria.get("reward_basis")
    if basis is None:
        return None
    return frozenset(str(b) for b in (basis if isinstance(basis, list) else [basis]))


def unsupported_tau2_basis(criteria: Any) -> str | None:
    """Why :class:`TauActionVerifier` cannot score a tau2 task, or ``None`` when it can.

    Args:
        criteria: the task's ``evaluation_criteria`` (tau-bench's ``info.task`` has no basis and
            is always scorable).
    """
    if not isinstance(criteria, dict):
        return None
    basis = _basis(criteria)
    if basis is not None:
        other = sorted(basis - TAU2_ACTION_BASES)
        if other:
            return (
                f"its tau2 reward_basis includes {', '.join(other)}, which needs tau2's own environment or judge "
                "(the action-match verifier decides DB and COMMUNICATE only)"
            )
    users = [
        a.get("name") for a in criteria.get("actions") or [] if isinstance(a, dict) and a.get("requestor") == "user"
    ]
    if users and (basis is None or "DB" in basis):
        return (
            f"its ground truth has actions the user makes ({', '.join(sorted(set(map(str, users)))[:3])}), whose effect "
            "on the user's database the agent's messages do not show"
        )
    return None


class TauActionVerifier:
    """1.0 when an episode made exactly the ground truth's state-changing actions and said its outputs.

    The reference is the JSON of ``{"actions": [{name, kwargs | arguments}], "outputs": [...]}``
    (tau-bench's ``info.task``) or a tau2-bench ``evaluation_criteria`` (``actions`` with
    ``arguments``, ``communicate_info`` as outputs). Only actions of the agent count
    (``requestor`` other than ``user``). A tau2 task whose ``reward_basis`` needs more than that
    (``ENV_ASSERTION``, ``NL_ASSERTION``: telecom's tasks), or whose ground truth has the user's
    own actions, raises :class:`ActionReferenceError` instead of getting a guessed reward. A full environment replay, what tau-bench itself does,
    also credits a different write sequence that reaches the same database; this verifier does not.

    Args:
        read_only_tools: tools that never change the environment; ``None`` guesses from the
            name as TopoCurate does (``get_*``, ``search_*``, ``list_*``, ``calculate``, ``think``).
        check_outputs: require each expected output in some assistant message (case-insensitive,
            commas ignored, as tau-bench checks it).
        stateless_tools: tools that end or hand off the episode without touching the database;
            tau-bench's ``transfer_to_human_agents`` is one (its reward ignores it).
        unordered_arguments: per tool, list arguments whose order does not change the database
            (the tool stores them sorted); ``None`` takes :data:`TAU_UNORDERED_ARGUMENTS`, the
            retail return and exchange tools of tau-bench and tau2-bench.
    """

    #: Scores a whole agent episode (its calls with their results, across the user's turns), never
    #: one generated text: RL can use it only where an environment runs the episode.
    scores_episodes = True

    def __init__(
        self,
        read_only_tools: Sequence[str] | None = None,
        check_outputs: bool = True,
        stateless_tools: Sequence[str] = tuple(STATELESS_TOOLS),
        unordered_arguments: dict[str, Sequence[str]] | None = None,
    ) -> None:
        self.read_only_tools = frozenset(read_only_tools) if read_only_tools is not None else None
        self.check_outputs = check_outputs
        self.stateless_tools = frozenset(stateless_tools)
        unordered = TAU_UNORDERED_ARGUMENTS if unordered_arguments is None else unordered_arguments
        self.unordered_arguments = {tool: frozenset(names) for tool, names in unordered.items()}

    def _write_key(self, name: str, arguments: dict) -> tuple[str, str]:
        unordered = self.unordered_arguments.get(name)
        if unordered:
            arguments = {
                key: sorted(value, key=_sort_key) if key in unordered and isinstance(value, list) else value
                for key, value in arguments.items()
            }
        return _key(name, arguments)

    def is_write(self, name: str) -> bool:
        """Whether tool ``name`` changes the environment."""
        if name in self.stateless_tools:
            return False
        if self.read_only_tools is not None:
            return name not in self.read_only_tools
        return not is_read_only_tool(name)

    def expected_writes(self, reference: dict) -> Counter:
        """The reference's state-changing actions as a multiset of ``(name, canonical arguments)``."""
        actions = reference.get("actions")
        if not isinstance(actions, list):
            raise ActionReferenceError(
                "reference has no 'actions' list (tau-bench info.task or tau2 evaluation_criteria)"
            )
        unsupported = unsupported_tau2_basis(reference)
        if unsupported:
            raise ActionReferenceError(f"cannot score this task by its actions: {unsupported}")
        return Counter(
            self._write_key(a["name"], _arguments(a.get("kwargs", a.get("arguments"))))
            for a in actions
            if a.get("requestor", "assistant") != "user" and self.is_write(a["name"])
        )

    def score(self, actions: Iterable[tuple], reference: dict, assistant_texts: Sequence[str] = ()) -> float:
        """Score decoded actions (``(name, arguments, succeeded, ...)``) against a parsed reference."""
        made = Counter(
            self._write_key(name, arguments) for name, arguments, ok, *_ in actions if ok and self.is_write(name)
        )
        expected = self.expected_writes(reference)
        basis = _basis(reference)
        # tau2 scores only what its reward_basis names: COMMUNICATE-only tasks ignore the database.
        if (basis is None or "DB" in basis) and made != expected and not _same_writes(made, expected):
            return 0.0
        if self.check_outputs and (basis is None or "COMMUNICATE" in basis):
            outputs = reference.get("outputs") or reference.get("communicate_info") or []
            said = [t.lower().replace(",", "") for t in assistant_texts]
            if not all(any(str(o).lower().replace(",", "") in t for t in said) for o in outputs):
                return 0.0
        return 1.0

    def __call__(self, completion: str, reference: str) -> float:
        """Score an episode (messages or actions, JSON) against a reference (JSON)."""
        actions, texts = episode_actions(completion)
        return self.score(actions, _loads(reference, "reference"), texts)


def parse_call_string(text: str, parameter_order: dict[str, list[str]] | None = None) -> tuple[str, dict]:
    """A BFCL ground-truth call string (``"mv(source='a', destination='b')"``) as ``(name, arguments)``.

    Positional arguments are named by the tool's parameter order (from its schema) when given.

    Raises:
        ValueError: the text is not a single call with literal arguments.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ActionReferenceError(f"ground-truth call {text!r} does not parse ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; absurdly deep expressions
        raise ActionReferenceError(f"ground-truth call {text[:200]!r} does not parse ({type(exc).__name__})") from None
    return _call_of(node, text, parameter_order)


def parse_python_calls(text: str, parameter_order: dict[str, list[str]] | None = None) -> list[tuple[str, dict]] | None:
    """The calls in text a model wrote as Python, the way BFCL decodes prompt-mode replies: a list
    of calls (``[cd(folder='docs'), ls()]``), a tuple or a bare call, optionally in a code fence.
    ``None`` when the text is not that (it is a reply in words).

    Args:
        text: the reply.
        parameter_order: per tool, its parameter names in order (names positional arguments).
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0].strip()
    if not body or body[0] not in "[(" and "(" not in body[:80]:
        return None
    try:
        node = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    elements = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    if not elements:
        return None
    try:
        return [_call_of(element, body, parameter_order, bare_names=True) for element in elements]
    except ActionReferenceError:
        return None


# How a model's reply spells JSON's literals when it writes calls as Python (`ls(a=true)`).
_JSON_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


class _BareNames(ast.NodeTransformer):
    """Turns each bare name in an argument into a constant: ``true``/``false``/``null`` into what JSON
    reads them as, any other name into its own text, so that ``ast.literal_eval`` can read the
    argument and nothing is ever evaluated. BFCL's prompt decoder reads a bare name as its text;
    ``true`` as ``True`` does what BFCL's execution of ``"true"`` (a true value) does."""

    def visit_Name(self, node: ast.Name) -> ast.Constant:
        return ast.copy_location(ast.Constant(_JSON_LITERALS.get(node.id, node.id)), node)


def _literal(node: ast.expr, bare_names: bool) -> Any:
    if bare_names:
        node = _BareNames().visit(node)
    return ast.literal_eval(node)


def _call_of(
    node: ast.expr, text: str, parameter_order: dict[str, list[str]] | None, bare_names: bool = False
) -> tuple[str, dict]:
    """``(name, arguments)`` of a parsed call with literal arguments (``text``: for messages).

    ``bare_names``: read a bare name among the arguments as a JSON literal or its text (model
    replies); a ground-truth call must be literal. A call among the arguments is never read.
    """
    if not isinstance(node, ast.Call):
        raise ActionReferenceError(f"ground-truth call {text!r} is not a call")
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name is None:
        raise ActionReferenceError(f"ground-truth call {text!r} has no plain function name")
    try:
        arguments = {kw.arg: _literal(kw.value, bare_names) for kw in node.keywords}
        order = (parameter_order or {}).get(name, [])
        for position, value in enumerate(node.args):
            key = order[position] if position < len(order) else f"_{position}"
            arguments[key] = _literal(value, bare_names)
    except (ValueError, TypeError, RecursionError, MemoryError):
        raise ActionReferenceError(f"ground-truth call {text!r} has a non-literal argument") from None
    return name, arguments


#: BFCL's multi-turn functions that change nothing BFCL's checker compares: it compares the public
#: attributes of each API instance after a turn (``_``-prefixed ones are skipped). Read from the API
#: classes (``bfcl_eval/eval_checker/multi_turn_eval/func_source_code/``, gorilla @55e023f): each of
#: these only reads the instance, or computes from its arguments, or writes a private cache.
#: The name guess (``get_*``, ``ls``, ...) misses camelCase (``displayCarStatus``), the class-prefixed
#: login checks and the computing functions; the other BFCL functions all change public state.
BFCL_READ_ONLY_TOOLS = frozenset(
    {
        # GorillaFileSystem: read files and directories; `sort` returns the sorted text, the file is unchanged.
        *("pwd", "ls", "cat", "find", "wc", "sort", "grep", "du", "tail", "diff"),
        # MathAPI: stateless, computes from its arguments (`logarithm`/`square_root` set a module-wide precision).
        *("absolute_value", "add", "divide", "imperial_si_conversion", "logarithm", "max_value", "mean"),
        *("min_value", "multiply", "percentage", "power", "round_number", "si_unit_conversion", "square_root"),
        *("standard_deviation", "subtract", "sum_values"),
        # MessageAPI: lookups; `view_messages_sent`/`get_message_stats` build their answer in new objects.
        *("list_users", "get_user_id", "message_get_login_status", "view_messages_sent", "search_messages"),
        "get_message_stats",
        # TwitterAPI (posting_api)
        *("posting_get_login_status", "list_all_following", "get_tweet", "get_user_tweets", "search_tweets"),
        *("get_tweet_comments", "get_user_stats"),
        # TicketAPI
        *("get_ticket", "ticket_get_login_status", "get_user_tickets"),
        # TradingBot: long-context variants extend copies; `filter_stocks_by_price` and
        # `notify_price_change` only read prices.
        *("get_current_time", "get_symbol_by_name", "get_stock_info", "get_order_details", "get_account_info"),
        *("trading_get_login_status", "get_watchlist", "get_order_history", "get_transaction_history"),
        *("get_available_stocks", "filter_stocks_by_price", "notify_price_change"),
        # TravelAPI: `get_flight_cost` writes only the private `_flight_cost_lookup`;
        # `contact_customer_support` returns a fixed reply; `verify_traveler_information` and
        # `compute_exchange_rate` check or compute from their arguments.
        *("travel_get_login_status", "get_budget_fiscal_year", "get_flight_cost", "get_credit_card_balance"),
        *("retrieve_invoice", "get_booking_history", "list_all_airports", "compute_exchange_rate"),
        *("verify_traveler_information", "get_nearest_airport_by_city", "contact_customer_support"),
        "get_all_credit_cards",
        # VehicleControlAPI: status reports build new dicts; unit conversions and distance lookups compute.
        *("get_outside_temperature_from_google", "get_outside_temperature_from_weather_com", "displayCarStatus"),
        *("get_current_speed", "display_log", "estimate_drive_feasibility_by_mileage", "liter_to_gallon"),
        *("gallon_to_liter", "estimate_distance", "get_zipcode_based_on_city", "check_tire_pressure"),
        "find_nearest_tire_shop",
    }
)


#: Parameters of BFCL functions that the function's code never reads (same source as
#: :data:`BFCL_READ_ONLY_TOOLS`): calls that differ only there do the same and return the same, so
#: they are left out when calls are compared (a support message, an insurance type BFCL does not store).
BFCL_UNREAD_ARGUMENTS: dict[str, frozenset[str]] = {
    "trading_login": frozenset({"username", "password"}),
    "authenticate_travel": frozenset({"client_id", "client_secret", "refresh_token"}),
    "get_budget_fiscal_year": frozenset({"lastModifiedAfter", "includeRemoved"}),
    "retrieve_invoice": frozenset({"insurance_id"}),
    "purchase_insurance": frozenset({"insurance_type"}),
    "contact_customer_support": frozenset({"message"}),
}


def _writes_state(writes: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """What a sequence of successful writes leaves, as far as it can be told without executing them:
    writes between two ``cd`` calls in any order (creating, writing or moving different files, or
    changes to different API instances, commute), each ``cd`` where it is (it changes what every
    later relative path names)."""
    segments: list[list[tuple[str, str]]] = [[]]
    for key in writes:
        if key[0] == "cd":
            segments += [[key], []]
        else:
            segments[-1].append(key)
    return [sorted(segment) for segment in segments if segment]


class BFCLActionVerifier:
    """1.0 when a BFCL multi-turn episode leaves, after every turn with ground truth, the state the
    ground truth leaves, and made the ground truth's reads.

    BFCL's checker executes both call lists and, after each turn whose ground truth is not empty,
    compares the API instances and requires that turn's ground-truth outputs among all outputs the
    model produced so far (any turn, any order). Without executing, this verifier compares calls:

    * the model's *successful* state-changing calls of all turns so far must equal the ground
      truth's of all turns so far as a multiset, keeping each ``cd`` in place (a write made a turn
      early, in a turn BFCL does not check, or in another order among independent writes passes;
      a call whose result was an error changed nothing and is left out);
    * every ground-truth read of the turn (:data:`BFCL_READ_ONLY_TOOLS`) must have been made by the
      model, in this or an earlier turn, after the same writes (same call at the same state, same
      output); the model's other reads are free;
    * a turn whose ground truth is empty (miss_param, miss_func: the model should ask or say the
      function is missing) is not checked, as BFCL's checker does not; its writes count at the next
      checked turn; a checked turn in which the model made no call fails.

    Calls compare by name and arguments after canonicalisation, with optional arguments left out
    filled with their documented defaults on both sides (``ls(a=False)`` matches ``ls()``) and
    arguments the function never reads (:data:`BFCL_UNREAD_ARGUMENTS`) left out; reads are keyed
    with the writes to their own API instance when the reference's ``tool_classes`` names it. The
    reference is the JSON of ``{"ground_truth": [[call strings of turn 1], ...], "parameter_order":
    {tool: [names]}, "parameter_defaults": {tool: {name: default}}}``, what TopoCurate's RL records and
    the BFCL reader build from the possible-answer file and the tool docs (with ``"tool_classes":
    {tool: API class}`` when the question file's ``multi_turn_func_doc/`` was found). Stricter than
    BFCL where different calls reach the same state or give the same output (a write repeated as a
    no-op or overwritten, a read with other arguments); more lenient only where a call
    that failed in BFCL's execution is not known as failed (``result``-only files).

    Args:
        read_only_tools: tools that change nothing; ``None``: :data:`BFCL_READ_ONLY_TOOLS`, and for
            other tools a guess from the name.
    """

    scores_episodes = True  # see TauActionVerifier.scores_episodes

    def __init__(self, read_only_tools: Sequence[str] | None = None) -> None:
        self.read_only_tools = frozenset(read_only_tools) if read_only_tools is not None else None

    def _read_only(self, name: str) -> bool:
        if self.read_only_tools is not None:
            return name in self.read_only_tools
        return name in BFCL_READ_ONLY_TOOLS or is_read_only_tool(name)

    def turn_passes(self, made: Sequence[tuple[str, dict]], expected: Sequence[tuple[str, dict]]) -> bool:
        """Whether one turn's calls contain the expected ones in order, with only reads besides
        (a single turn on its own; :meth:`score_turns` compares turns cumulatively)."""
        wanted = [_key(n, a) for n, a in expected]
        position = 0
        for name, arguments in made:
            key = _key(name, arguments)
            if position < len(wanted) and key == wanted[position]:
                position += 1
            elif not self._read_only(name):
                return False
        return position == len(wanted)

    def score_turns(self, turns: Sequence[Sequence[tuple]], reference: dict) -> float:
        """Score calls grouped per turn against a parsed reference.

        Args:
            turns: per turn, the model's calls in order, each ``(name, arguments)`` or
                ``(name, arguments, ok)``; ``ok`` false marks a call the environment rejected (its
                result was an error).
            reference: the parsed reference (see the class).
        """
        truth = reference.get("ground_truth")
        if not isinstance(truth, list):
            raise ActionReferenceError("reference has no 'ground_truth' list of turns (BFCL possible answer)")
        if not all(isinstance(turn, list) and all(isinstance(c, str) for c in turn) for turn in truth):
            raise ActionReferenceError(
                "'ground_truth' must hold, per turn, a list of call strings (a BFCL multi-turn possible answer); "
                "BFCL's memory and web_search answers are answer strings, which this verifier does not read"
            )
        order = reference.get("parameter_order") or {}
        expected = [[parse_call_string(c, order) for c in turn] for turn in truth]
        for name, arguments in (call for turn in expected for call in turn):
            # Without the tool's parameter order `mv('a', 'b')` never matches
            # `mv(source='a', destination='b')`, and every episode would score 0.
            if any(key.startswith("_") and key[1:].isdigit() for key in arguments):
                raise ActionReferenceError(
                    f"the possible answer passes {name} positional arguments, which cannot be named without "
                    "the tool schemas (parameter_order; for BFCL files, give the question file too: "
                    "ground_truth=[BFCL_v4_multi_turn_<category>.json, its possible-answer file])"
                )
        if len(turns) != len(expected):
            return 0.0
        # BFCL executes calls: an optional argument written at its documented default is the call without it.
        defaults = reference.get("parameter_defaults") or {}

        def key(name: str, arguments: dict) -> tuple[str, str]:
            unread = BFCL_UNREAD_ARGUMENTS.get(name, ())
            filled = {**defaults.get(name, {}), **arguments}
            return _key(name, {k: v for k, v in filled.items() if k not in unread})

        # A read's output depends on the state it reads: reads are keyed with the writes before them,
        # only those to the read's own API instance when the reference names each tool's class
        # (BFCL's instances are separate objects; `get_user_id` does not read the file system).
        classes = reference.get("tool_classes") or {}

        def read_key(name: str, arguments: dict, writes: list[tuple[str, str]]) -> tuple:
            own = classes.get(name)
            if own is not None:
                writes = [w for w in writes if classes.get(w[0], own) == own]
            return key(name, arguments), repr(_writes_state(writes))

        made_writes: list[tuple[str, str]] = []
        want_writes: list[tuple[str, str]] = []
        made_reads: Counter = Counter()
        for made, want in zip(turns, expected):
            for call in made:
                name, arguments = call[0], call[1]
                if len(call) > 2 and not call[2]:
                    continue  # rejected by the environment: changed nothing, output an error
                if self._read_only(name):
                    made_reads[read_key(name, arguments, made_writes)] += 1
                else:
                    made_writes.append(key(name, arguments))
            want_reads: Counter = Counter()
            for name, arguments in want:
                if self._read_only(name):
                    want_reads[read_key(name, arguments, want_writes)] += 1
                else:
                    want_writes.append(key(name, arguments))
            if not want:
                continue  # BFCL's checker checks no turn whose ground truth is empty
            if not made or _writes_state(made_writes) != _writes_state(want_writes):
                return 0.0
            if any(made_reads[read] < count for read, count in want_reads.items()):
                return 0.0
        return 1.0

    def __call__(self, completion: str, reference: str) -> float:
        """Score an episode (OpenAI messages, JSON; turns start at user messages) against a reference."""
        actions, _ = episode_actions(completion)
        ref = _loads(reference, "reference")
        count = len(ref.get("ground_truth") or [])
        turns: list[list[tuple[str, dict]]] = [[] for _ in range(max(count, max((a[3] for a in actions), default=0)))]
        for name, arguments, ok, turn in actions:
            turns[max(turn, 1) - 1].append((name, arguments, ok))
        return self.score_turns(turns, ref)
