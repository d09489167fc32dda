"""An execution-based verifier for BFCL multi-turn trials, on BFCL's own API classes (optional).

:class:`~lightning_agents.tasks.tau_actions.BFCLActionVerifier` decides a BFCL v4 multi-turn trial
from the calls alone. BFCL itself executes the model's calls and the ground truth in its API classes
(``GorillaFileSystem``, ``TwitterAPI``, ``MessageAPI``, ``TicketAPI``, ``TradingBot``,
``TravelAPI``, ``VehicleControlAPI``, ``MathAPI``) and compares the instances after each turn.
:class:`BFCLExecutionVerifier` does that too, with the classes of the ``bfcl-eval`` package, so a
different call sequence that reaches the same state passes, as in BFCL.

``bfcl-eval`` is not a dependency of this package: its declared requirements are pinned (numpy,
networkx, vllm, ...) and conflict with ours, while the API classes import only the standard library
and ``mpmath``. Install it with ``pip install --no-deps bfcl-eval``.

No model text is ever evaluated (BFCL's own checker runs each call string with ``eval``; rewards here
score model output in RL). A call is a name and literal arguments: call strings are parsed with
``ast`` and each argument read with :func:`ast.literal_eval`. A trial with a call that is not such
a call, whose name or an argument name starts with ``_`` (``_load_scenario``, ``__class__``), or
whose arguments would cost without bound (``power``'s exponent or result size, a ``precision``) scores 0 with
nothing executed. Only a function the involved classes document
(``bfcl_eval/data/multi_turn_func_doc/``) that is a public method of its class is dispatched; any
other name is an error result, as in BFCL. Nothing here imports torch or Lightning.
"""

from __future__ import annotations

import ast
import copy
import decimal
import functools
import importlib
import inspect
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_agents.tasks.tau_actions import ActionReferenceError, _loads, episode_actions

__all__ = [
    "BFCL_API_CLASSES",
    "BFCL_EVAL_INSTALL",
    "BFCLExecutionVerifier",
    "RefusedCall",
    "bfcl_eval_identity",
    "doc_tool",
    "json_schema",
    "shared_verifier",
    "parse_literal_call",
]

log = logging.getLogger(__name__)

#: How to install the optional package (its pinned requirements conflict with this package's).
BFCL_EVAL_INSTALL = "pip install --no-deps bfcl-eval"

_SOURCE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

#: BFCL's multi-turn API classes: ``(module under bfcl_eval's func_source_code, func doc file)``.
BFCL_API_CLASSES: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}

# MathAPI holds no state and has no `_load_scenario` (BFCL builds it without a configuration).
_STATELESS = frozenset({"MathAPI"})

# Bounds on arguments whose cost grows with their value (an RL policy can write any number):
# `power(base=9, exponent=10**9)` or `square_root(..., precision=10**9)` would stall the reward.
# BFCL's data stays far below them.
_MAX_EXPONENT = 1024
# ... and on the size of `power`'s result: a 4,000-digit base to the 1024th took 2.7 s a call.
_MAX_POWER_BITS = 100_000
_MAX_PRECISION = 1000
# Entries a file system may reach. `cp` copies a directory shallowly and `mv` shares its contents,
# so `cp(L, M)` then `mv(M, L)` doubles the paths under L: 45 such calls took 1.2 GB to hash and
# days for one `du`. BFCL's tasks stay far below it.
_MAX_FILE_SYSTEM_ENTRIES = 50_000
# MathAPI sets the process's mpmath precision and the thread's decimal context: calls hold this lock
# and put both back, so a policy's `precision` does not outlive its call (another thread using mpmath
# during the call would still see it; nothing in this package does).
_NUMERICS = threading.Lock()
_PRECISION_AT = {"square_root": 1, "logarithm": 2}  # its position when passed positionally


class RefusedCall(ActionReferenceError):
    """A call that is not executed: not a plain call with literal arguments, a private or undocumented
    name, or an argument too costly to compute. The trial that made it scores 0."""


class OversizedState(RefusedCall):
    """A call that grew the environment past its bound (it ran: the state stays too big)."""


def bfcl_eval_identity() -> str | None:
    """What :class:`BFCLExecutionVerifier` scores with, for a curation's fingerprint: the installed
    bfcl-eval's version and one SHA-256 of the func docs and API classes' source it reads
    (``data/multi_turn_func_doc/*.json``, ``eval_checker/multi_turn_eval/func_source_code/*.py``),
    as ``"<version> <sha256 prefix>"``; ``None`` where bfcl-eval is not installed. The hash, not
    only the version, since an editable or patched install changes them under one version.
    bfcl_eval is located, not imported."""
    import hashlib
    import importlib.metadata
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256()
    for folder, pattern in (
        ("data/multi_turn_func_doc", "*.json"),
        (_SOURCE.split(".", 1)[1].replace(".", "/"), "*.py"),
    ):
        for path in sorted((root / folder).glob(pattern)):
            digest.update(f"{folder}/{path.name}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"{version} {digest.hexdigest()[:32]}"


def _bfcl_eval() -> Any:
    try:
        import bfcl_eval
    except ImportError as exc:
        raise ImportError(
            f"BFCLExecutionVerifier needs BFCL's API classes from the bfcl-eval package: {BFCL_EVAL_INSTALL} "
            "(--no-deps: its pinned requirements, numpy==1.26.4, vllm and more, conflict with this package's; "
            "the API classes need only the standard library and mpmath)"
        ) from exc
    return bfcl_eval


def parse_literal_call(text: str) -> tuple[str, tuple, dict]:
    """``(name, positional arguments, keyword arguments)`` of a call string such as ``mv(source='a', destination='b')``.

    Only a bare function name applied to literals is accepted: nothing is evaluated, and a name
    inside the arguments (``__import__('os')``), an attribute call, ``*args`` or ``**kwargs`` is refused.

    Raises:
        RefusedCall: the text is not such a call.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise RefusedCall(f"call {text[:200]!r} is not Python call syntax") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise RefusedCall(f"call {text[:200]!r} is not a call of a plain function name")
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ValueError("**kwargs")
            kwargs[keyword.arg] = ast.literal_eval(keyword.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise RefusedCall(f"call {text[:200]!r} has an argument that is not a literal") from None
    return node.func.id, args, kwargs


def _result_text(value: Any) -> str:
    """A result as the text BFCL compares: strings unchanged, dicts as JSON, anything else ``str``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _public_state(instance: Any) -> dict[str, Any]:
    # BFCL keeps caches and handles in `_`-prefixed attributes; the state it judges is the rest.
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


class _Run:
    """One fresh set of API instances for one side (model or ground truth) of one trial."""

    def __init__(self, classes: Mapping[str, type], allowed: Mapping[str, set[str]], config: dict, long_context: bool):
        self.instances: dict[str, Any] = {}
        self.owner: dict[str, str] = {}
        for name, cls in classes.items():
            instance = cls()
            if name not in _STATELESS:
                # A copy: the classes keep references into the configuration and change them.
                instance._load_scenario(copy.deepcopy(config.get(name, {})), long_context=long_context)
            self.instances[name] = instance
            # Later classes win a shared name, as in BFCL's own dispatch.
            self.owner.update((method, name) for method in allowed[name])

    def call(self, name: str, args: tuple, kwargs: dict) -> str:
        """BFCL's output of one call (an ``Error during execution: ...`` text when it fails).

        Raises:
            OversizedState: the call grew a file system beyond :data:`_MAX_FILE_SYSTEM_ENTRIES`.
        """
        owner = self.owner.get(name)
        if owner is None:
            return f"Error during execution: name '{name}' is not defined"
        method = getattr(self.instances[owner], name)
        import mpmath

        with _NUMERICS, decimal.localcontext():
            digits = mpmath.mp.dps
            try:
                output = _result_text(method(*args, **kwargs))
            except Exception as exc:  # noqa: BLE001 - a failing call is an error result, as in BFCL
                output = f"Error during execution: {exc}"
            finally:
                mpmath.mp.dps = digits
        root = getattr(self.instances[owner], "root", None)
        if root is not None and _entries_beyond(root, _MAX_FILE_SYSTEM_ENTRIES):
            raise OversizedState(f"{name} grew the file system beyond {_MAX_FILE_SYSTEM_ENTRIES} entries")
        return output


class BFCLExecutionVerifier:
    """1.0 when a BFCL multi-turn episode, executed in BFCL's API classes, leaves after every turn with
    ground truth the state the ground truth leaves and produced the ground truth's outputs.

    For each trial the model's calls and the ground truth's run on two fresh sets of the involved
    API instances, built from the task's ``initial_config`` (with BFCL's long-context data for the
    ``long_context`` and ``composite`` categories). After each turn whose ground truth is not empty:

    * the model made at least one call in the turn;
    * every involved instance has the same public attributes (``_``-prefixed ones are caches) on
      both sides;
    * every output of the turn's ground-truth calls is among the outputs of all the model's calls so
      far (a multiset, any order: a read made a turn early counts).

    A turn with empty ground truth (miss_param, miss_func) is executed but not checked; a different
    number of turns than the ground truth's scores 0. These are the rules of BFCL's multi-turn
    checker, re-implemented without its ``eval``: see the module for what a call may be. A call of a
    miss_func function before the turn that offers it executes like any other, as in BFCL.

    The reference is the JSON :class:`~lightning_agents.tasks.tau_actions.BFCLActionVerifier` reads
    (``ground_truth``: call strings per turn) plus the task's environment ``{"initial_config",
    "involved_classes", "category"}`` (or ``"long_context": bool`` instead of the category), either
    under an ``"environment"`` key (where the BFCL reader puts it, given the question file, so RL
    records carry it) or at the top level, or given to :meth:`score_turns`. The reader names this
    verifier in its records with ``bfcl_verifier="execution"``.

    Args:
        max_calls: most model calls executed per trial; past it the trial scores 0 (a policy that
            loops on calls must not stall the reward).

    Raises:
        ImportError: ``bfcl-eval`` is not installed (the message says how: ``pip install --no-deps bfcl-eval``).
    """

    scores_episodes = True  # see lightning_agents.tasks.tau_actions.TauActionVerifier.scores_episodes

    def __init__(self, max_calls: int = 1000) -> None:
        package = _bfcl_eval()
        self.max_calls = int(max_calls)
        self._classes: dict[str, type] = {}
        self._allowed: dict[str, set[str]] = {}
        docs = _doc_folder(package)
        for name, (module, doc_file) in BFCL_API_CLASSES.items():
            cls = getattr(importlib.import_module(f"{_SOURCE}.{module}"), name)
            documented = {
                json.loads(line)["name"] for line in (docs / doc_file).read_text().splitlines() if line.strip()
            }
            public = {n for n, v in vars(cls).items() if not n.startswith("_") and inspect.isfunction(v)}
            self._classes[name] = cls
            self._allowed[name] = documented & public

    def _environment(self, reference: dict, environment: Mapping | None) -> tuple[list[str], dict, bool]:
        env = environment if environment is not None else reference.get("environment") or reference
        if not isinstance(env, Mapping) or "involved_classes" not in env or "initial_config" not in env:
            raise ActionReferenceError(
                "BFCLExecutionVerifier needs the task's environment: 'initial_config' and 'involved_classes' "
                "(BFCL's question file; the BFCL reader's info['environment'], the RL record's 'environment'), "
                "in the reference or given to score_turns"
            )
        involved = list(env["involved_classes"] or [])
        unknown = [c for c in involved if c not in self._classes]
        if unknown:
            raise ActionReferenceError(f"involved classes {unknown} are not BFCL multi-turn API classes")
        config = env["initial_config"] or {}
        if not isinstance(config, Mapping):
            raise ActionReferenceError("'initial_config' must be an object of class name -> configuration")
        broken = sorted(c for c in involved if c not in _STATELESS and not isinstance(config.get(c, {}), Mapping))
        if broken:
            # `_load_scenario` would fail on it inside the reward, far from the record that holds it.
            raise ActionReferenceError(f"'initial_config' of {broken} must be an object (that class's configuration)")
        if "long_context" in env:
            long_context = bool(env["long_context"])
        else:
            category = str(env.get("category") or "")
            long_context = "long_context" in category or "composite" in category
        return involved, dict(config), long_context

    def check_reference(self, reference: dict, environment: Mapping | None = None) -> None:
        """Raise what :meth:`score_turns` would raise on this reference, without executing anything:
        a reader checks each record once, where it can name the file and line.

        Raises:
            ActionReferenceError: no ground truth of call strings per turn, a ground-truth call that
                is not a literal call, or no usable environment (see the class).
        """
        truth = reference.get("ground_truth")
        if not isinstance(truth, list) or not all(
            isinstance(turn, list) and all(isinstance(c, str) for c in turn) for turn in truth
        ):
            raise ActionReferenceError(
                "reference has no 'ground_truth' list of turns of call strings (a BFCL multi-turn possible answer)"
            )
        self._environment(reference, environment)
        for turn in truth:
            for call in turn:
                parse_literal_call(call)

    def _model_call(self, call: Any) -> tuple[str, tuple, dict]:
        if isinstance(call, str):
            return parse_literal_call(call)
        name, arguments = call[0], call[1]
        if not isinstance(name, str) or not isinstance(arguments, Mapping) or not all(map(_is_text, arguments)):
            raise RefusedCall(f"call {call!r:.200} is not (name, arguments)")
        positional = sorted(
            (int(k[1:]), v) for k, v in arguments.items() if k.startswith("_") and k[1:].isdigit()
        )  # the BFCL reader names positional arguments `_0`, `_1`, ... when it has no parameter order
        kwargs = {k: v for k, v in arguments.items() if not (k.startswith("_") and k[1:].isdigit())}
        if [i for i, _ in positional] != list(range(len(positional))):
            raise RefusedCall(f"call {name} has positional arguments out of order")
        return name, tuple(v for _, v in positional), kwargs

    def _check(self, name: str, args: tuple, kwargs: dict) -> None:
        if not name.isidentifier() or name.startswith("_"):
            raise RefusedCall(f"call of {name!r:.100}: private and special names are never called")
        if not all(isinstance(k, str) and k.isidentifier() and not k.startswith("_") for k in kwargs):
            raise RefusedCall(f"call of {name}: argument names must be plain identifiers")
        values = {**dict(enumerate(args)), **kwargs}
        if name == "power":
            base, exponent = values.get("base", args[0] if args else 0), values.get("exponent", values.get(1, 0))
            if _too_big(exponent, _MAX_EXPONENT):
                raise RefusedCall(f"power with an exponent beyond {_MAX_EXPONENT}")
            if isinstance(base, int) and _is_number(exponent) and abs(base).bit_length() * exponent > _MAX_POWER_BITS:
                raise RefusedCall(f"power with a result beyond {_MAX_POWER_BITS} bits")
        precision = values.get("precision", values.get(_PRECISION_AT.get(name, -1)))
        if _too_big(precision, _MAX_PRECISION) or (_is_number(precision) and precision < 1):
            raise RefusedCall(f"{name} with a precision outside 1..{_MAX_PRECISION}")
        if name == "multiply" and not all(_is_number(v) for v in values.values()):
            raise RefusedCall("multiply of something other than numbers (a text times a number repeats it)")

    def score_turns(self, turns: Sequence[Sequence[Any]], reference: dict, environment: Mapping | None = None) -> float:
        """Score calls grouped per turn against a parsed reference.

        Args:
            turns: per turn, the model's calls in order, each ``(name, arguments)`` or ``(name,
                arguments, ok)`` (``ok`` is ignored: the call is executed and its own result counts),
                or a call string ``name(arg=literal, ...)``.
            reference: the parsed reference (see the class).
            environment: the task's environment (``initial_config``, ``involved_classes``,
                ``category``); ``None`` reads it from the reference.

        Raises:
            ActionReferenceError: the reference has no ground truth or environment, or a ground-truth
                call is not a literal call.
        """
        self.check_reference(reference, environment)
        truth = reference["ground_truth"]
        involved, config, long_context = self._environment(reference, environment)
        expected = [[parse_literal_call(c) for c in turn] for turn in truth]
        if len(turns) != len(expected):
            return 0.0  # BFCL: the model was cut off before the last turn
        try:
            made = [[self._model_call(call) for call in turn] for turn in turns]
            for name, args, kwargs in (c for turn in made for c in turn):
                self._check(name, args, kwargs)
        except RefusedCall as exc:
            log.debug("BFCL trial refused: %s", exc)
            return 0.0
        if sum(len(turn) for turn in made) > self.max_calls:
            return 0.0
        classes = {name: self._classes[name] for name in involved}
        allowed = {name: self._allowed[name] for name in involved}
        model = _Run(classes, allowed, config, long_context)
        ground = _Run(classes, allowed, config, long_context)
        outputs: list[str] = []
        for calls, want in zip(made, expected):
            try:
                outputs += [model.call(*call) for call in calls]
            except RefusedCall as exc:  # the model's calls grew a file system past its bound
                log.debug("BFCL trial refused: %s", exc)
                return 0.0
            want_outputs = [ground.call(*call) for call in want]
            if not want:
                continue  # BFCL checks no turn whose ground truth is empty
            if not calls:
                return 0.0
            for name in involved:
                if not _same_state(model.instances[name], ground.instances[name]):
                    return 0.0
            pool = list(outputs)
            for output in want_outputs:
                if output not in pool:
                    return 0.0
                pool.remove(output)
        return 1.0

    def __call__(self, completion: str, reference: str) -> float:
        """Score an episode (OpenAI messages, JSON; turns start at user messages) against a reference
        (JSON text with the environment; see the class). A completion that cannot be read scores 0."""
        ref = _loads(reference, "reference")
        try:
            actions, _ = episode_actions(completion)
        except (ActionReferenceError, KeyError, TypeError):
            return 0.0
        count = len(ref.get("ground_truth") or [])
        turns: list[list[tuple]] = [[] for _ in range(max(count, max((a[3] for a in actions), default=0)))]
        for name, arguments, _ok, turn in actions:
            turns[max(turn, 1) - 1].append((name, arguments))
        return self.score_turns(turns, ref)


@functools.cache
def shared_verifier() -> BFCLExecutionVerifier:
    """One execution verifier per process (building one imports BFCL's classes and reads their docs),
    shared by the BFCL reader, its world and anything else that scores or runs BFCL calls.

    Raises:
        ImportError: bfcl-eval is not installed (naming the install command).
    """
    return BFCLExecutionVerifier()


# BFCL's func docs use Python type names; OpenAI-style tool APIs (and JSON Schema) reject them.
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def json_schema(node: Any) -> Any:
    """A BFCL parameter schema with JSON Schema type names (``any`` becomes no type constraint)."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: json_schema(value) for key, value in node.items()}
    kind = out.get("type")
    if kind == "any":
        del out["type"]
    elif isinstance(kind, str) and kind in _BFCL_TYPES:
        out["type"] = _BFCL_TYPES[kind]
    return out


def doc_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """One entry of a ``multi_turn_func_doc/`` file as an OpenAI tool schema."""
    return {
        "type": "function",
        "function": {
            **{k: doc[k] for k in ("name", "description") if k in doc},
            **({"parameters": json_schema(doc["parameters"])} if "parameters" in doc else {}),
        },
    }


def _doc_folder(package: Any) -> Any:
    from importlib.resources import files

    folder = files(package) / "data" / "multi_turn_func_doc"
    if not folder.is_dir():
        raise ImportError(f"bfcl_eval has no data/multi_turn_func_doc/; reinstall it: {BFCL_EVAL_INSTALL}")
    return folder


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _entries_beyond(root: Any, limit: int) -> bool:
    """Whether a file system tree holds more than ``limit`` entries, counted as paths (a directory
    shared by two paths counts twice, as `du` and the state's hash walk it); stops at the limit."""
    stack, seen = [root], 0
    while stack:
        contents = getattr(stack.pop(), "contents", None)
        if not isinstance(contents, dict):
            continue
        seen += len(contents)
        if seen > limit:
            return True
        stack.extend(contents.values())
    return False


def _too_big(value: Any, bound: int) -> bool:
    return _is_number(value) and abs(value) > bound


def _same_state(model: Any, ground: Any) -> bool:
    want = _public_state(ground)
    have = _public_state(model)
    # The ground truth's attributes are the state to reach, as in BFCL's checker.
    return all(key in have and have[key] == value for key, value in want.items())
