"""Readers of multi-trial tool-use rollout files into :class:`~lightning_agents.topology.records.Rollout`.

Three formats, detected from the first record of each file or named with ``format=``:

- ``openai``: OpenAI chat-format trajectories, as in tau-bench's ``historical_trajectories``: a
  JSON list (or JSON Lines) of ``{task_id, trial, reward, info, traj}``; ``messages`` is accepted
  for ``traj``. Assistant ``tool_calls[{id, type, function{name, arguments}}]``, tool messages
  ``{tool_call_id, name, content}``. This is also what ``lightning-agents rollout`` writes.
- ``tau2``: tau2-bench results: a ``Results`` object with ``tasks`` and ``simulations``, or single
  ``{task, simulation_run}`` records. Tool calls ``{id, name, arguments (dict), requestor}``, tool
  messages ``{id, role: tool, content, error}``, the reward in ``reward_info.reward``.
- ``bfcl``: BFCL multi-turn result files (JSON Lines with ``id``, ``result`` and
  ``inference_log``). The ``state_info`` snapshots between turns give the environment state.
  Result files carry no score: a record's ``valid`` (from a BFCL score file) or ``reward`` field
  is used when present, otherwise the reward is ``None`` (unscored).

Nothing here imports torch or Lightning.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.json_text import JSONTextError, json_error_text, loads_json
from lightning_agents.topology.pipeline import paused_gc
from lightning_agents.topology.records import CALL, OBSERVATION, TEXT, EncodedMessages, Rollout, Step
from lightning_agents.topology.signatures import canonical_arguments, hash_observation, is_error_text

log = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "RolloutFormatError",
    "RolloutSet",
    "detect_format",
    "load_ground_truth",
    "load_rollouts",
    "read_records",
]

FORMATS = ("openai", "tau2", "bfcl")
_ROLES = {"system", "user", "assistant", "tool"}

# Verifiers (class paths in the task layer) of the formats whose files carry ground truth.
BFCL_VERIFIER = "lightning_agents.tasks.tau_actions.BFCLActionVerifier"
TAU_VERIFIER = "lightning_agents.tasks.tau_actions.TauActionVerifier"


class RolloutFormatError(LightningAgentsError, ValueError):
    """A rollout record that cannot be read; the message starts with ``file[index]`` or ``file:line``."""


class RolloutSet(list):
    """The rollouts read (a plain list) plus what was skipped.

    Attributes:
        skipped: one ``"location: reason"`` string per record skipped with ``skip_invalid``.
        renumbered: trials given a new number because an earlier file used theirs.
    """

    def __init__(self, items: Iterable[Rollout] = (), skipped: list[str] | None = None) -> None:
        super().__init__(items)
        self.skipped: list[str] = list(skipped or [])
        self.renumbered = 0

    @property
    def skipped_count(self) -> int:
        """Number of records skipped."""
        return len(self.skipped)


class _Bad(Exception):
    """Raised inside a parser with the reason only; the caller adds the location."""


# ----------------------------------------------------------------------------- file reading


def read_records(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Yield ``(location, object)`` for every record of a rollout file.

    A JSON list gives ``file[i]``; a tau2 ``Results`` object gives ``file:simulations[i]`` (each
    simulation with its task attached as ``_task``); JSON Lines give ``file:line``; a single
    object gives ``file``. JSON Lines are recognised by the ``.jsonl`` suffix or by a ``.json``
    file holding several objects (BFCL writes those).

    Raises:
        FileNotFoundError: the file does not exist.
        RolloutFormatError: the file is not JSON / JSON Lines (the message gives the line).
    """
    for where, obj, _ in _read_records(path):
        yield where, obj


def _read_records(path: str | Path) -> Iterator[tuple[str, Any, str | None]]:
    """:func:`read_records`, plus each record's own JSON text where it was read one by one (``None`` otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"rollout file {path} does not exist")
    if path.suffix != ".jsonl":
        if _first_char(path) == "[":
            # A JSON list streams one element at a time: a 100k-trajectory list is never held whole.
            try:
                yield from _stream_json_list(path)
            except RolloutFormatError as exc:
                # A list cut short (a run killed while writing it): the records before the cut were
                # read, and with skip_invalid they are kept; the broken tail is one skipped record.
                yield str(path), exc, None
            return
        try:
            data = loads_json(path.read_text(encoding="utf-8"))
        except JSONTextError as exc:
            if exc.lineno is None:  # a 4300+ digit number, nesting past the recursion limit
                raise RolloutFormatError(f"{path}: invalid JSON ({exc})") from None
            if exc.reason != "Extra data":  # "Extra data": JSON Lines in a .json file, read below
                raise RolloutFormatError(
                    f"{path}:{exc.lineno}: invalid JSON ({json_error_text(exc.reason, None, exc.colno)})"
                ) from None
        else:
            for where, obj in _records_of(path, data):
                yield where, obj, None
            return
    # JSON Lines stream line by line: a 100k-trajectory file is never held as one string.
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = loads_json(line)
            except JSONTextError as exc:
                yield f"{path}:{lineno}", RolloutFormatError(f"{path}:{lineno}: invalid JSON ({exc})"), None
                continue
            yield f"{path}:{lineno}", obj, line


def _first_char(path: Path) -> str:
    with path.open(encoding="utf-8") as handle:
        while True:
            block = handle.read(4096)
            if not block:
                return ""
            stripped = block.lstrip()
            if stripped:
                return stripped[0]


_CHUNK = 1 << 20


def _stream_json_list(path: Path) -> Iterator[tuple[str, Any, str]]:
    """Yield ``(file[i], element, element text)`` of a top-level JSON list, reading 1 MiB at a time.

    Each element is decoded with ``json.JSONDecoder.raw_decode`` from a buffer that holds the
    unread rest of the current chunk plus as much more as the element needs; memory is one
    element plus one chunk, whatever the file size.
    """
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8") as handle:
        buffer = handle.read(_CHUNK)
        eof = not buffer
        line = 1  # line number of buffer[0], for error messages
        pos = buffer.index("[") + 1
        index = 0
        expect_comma = False

        def fail(message: str, at: int) -> RolloutFormatError:
            return RolloutFormatError(f"{path}:{line + buffer.count(chr(10), 0, at)}: invalid JSON ({message})")

        while True:
            # Skip whitespace (and the comma between elements), refilling as needed.
            while True:
                while pos < len(buffer) and buffer[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buffer) or eof:
                    break
                line += buffer.count("\n", 0, pos)
                buffer, pos = handle.read(_CHUNK), 0
                eof = not buffer
            if pos >= len(buffer):
                raise fail("the list is not closed", pos)
            char = buffer[pos]
            if char == "]":
                return
            if expect_comma:
                if char != ",":
                    raise fail(f"expected ',' or ']' between list elements, got {char!r}", pos)
                pos += 1
                expect_comma = False
                continue
            while True:
                try:
                    obj, end = decoder.raw_decode(buffer, pos)
                    # A number or literal cut at the chunk's end would decode short: need what follows.
                    if end < len(buffer) or eof:
                        break
                except json.JSONDecodeError as exc:
                    if eof:
                        column = exc.pos - buffer.rfind("\n", 0, exc.pos)
                        raise fail(f"{json_error_text(exc.msg, None, column)}, in element {index}", exc.pos) from None
                except (ValueError, RecursionError) as exc:  # a 4300+ digit number, too deep
                    raise fail(f"{exc or 'nested too deeply'} in element {index}", pos) from None
                more = handle.read(_CHUNK)
                eof = not more
                line += buffer.count("\n", 0, pos)
                buffer, pos = buffer[pos:] + more, 0
            yield f"{path}[{index}]", obj, buffer[pos:end]
            index += 1
            expect_comma = True
            pos = end
            if pos > _CHUNK:
                line += buffer.count("\n", 0, pos)
                buffer, pos = buffer[pos:], 0


def _records_of(path: Path, data: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(data, list):
        for index, item in enumerate(data):
            yield f"{path}[{index}]", item
    elif isinstance(data, dict) and "simulations" in data:
        simulations = data["simulations"]
        if not isinstance(simulations, list):
            raise RolloutFormatError(f"{path}: 'simulations' must be a list, got {type(simulations).__name__}")
        tasks = {}
        for task in data.get("tasks") or []:
            if isinstance(task, dict) and "id" in task:
                tasks[str(task["id"])] = task
        # tau2 keeps the agent's policy (its system prompt) once per file, not in the messages.
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        environment = info.get("environment_info") if isinstance(info.get("environment_info"), dict) else {}
        policy = environment.get("policy") if isinstance(environment.get("policy"), str) else None
        for index, sim in enumerate(simulations):
            if isinstance(sim, dict):
                sim = dict(sim, _task=tasks.get(str(sim.get("task_id"))), _policy=policy)
            yield f"{path}:simulations[{index}]", sim
    elif isinstance(data, dict):
        yield str(path), data
    else:
        raise RolloutFormatError(
            f"{path}: expected a JSON list, object or JSON Lines of rollouts, got {type(data).__name__}"
        )


def detect_format(record: Any) -> str | None:
    """The format of one record (``openai``, ``tau2`` or ``bfcl``), or ``None`` if unrecognised."""
    if not isinstance(record, dict):
        return None
    if "inference_log" in record or (
        isinstance(record.get("result"), list) and isinstance(record.get("id"), str) and "traj" not in record
    ):
        return "bfcl"
    if "simulation_run" in record or (
        "messages" in record and ("termination_reason" in record or "reward_info" in record)
    ):
        return "tau2"
    if "traj" in record or "messages" in record:
        return "openai"
    return None


# ----------------------------------------------------------------------------- helpers


def _require(obj: dict, key: str, types: type | tuple[type, ...], what: str | None = None) -> Any:
    if key not in obj:
        raise _Bad(f"missing field {what or key!r}")
    value = obj[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = "/".join(t.__name__ for t in allowed)
        raise _Bad(f"field {what or key!r} must be {names}, got {type(value).__name__}")
    return value


def _reward(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        raise _Bad(f"field {what!r} must be a number, got {type(value).__name__} {value!r:.40}")
    return float(value)


def _task_id(value: Any, what: str = "task_id") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise _Bad(f"field {what!r} must be a non-empty string or integer, got {value!r:.40}")
    return str(value)


def _trial(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"field 'trial' must be an integer, got {value!r:.40}")
    return value


def _parse_arguments(raw: Any, what: Callable[[], str]) -> Any:
    """Arguments as a dict; a JSON string is parsed and must hold an object.

    ``what()`` names the field and is only called for an error message: formatting every call's
    location up front took a fifth of the reading time.
    """
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = loads_json(raw)
        except JSONTextError as exc:
            raise _Bad(f"{what()} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise _Bad(f"{what()} must be a JSON object, got {type(raw).__name__}")
    return raw


# ----------------------------------------------------------------------------- openai


def _check_message(message: Any, what: str, index: int) -> tuple[str, str]:
    """Validate message ``what[index]`` of either reader; returns its role and text content ("" for null)."""
    if not isinstance(message, dict):
        raise _Bad(f"{what}[{index}] is a {type(message).__name__}, not an object")
    role = message.get("role")
    if role not in _ROLES:
        raise _Bad(f"{what}[{index}].role is {role!r}; expected one of {sorted(_ROLES)}")
    content = message.get("content")
    if content is None:
        return role, ""
    if not isinstance(content, str):
        raise _Bad(f"{what}[{index}].content must be a string or null, got {type(content).__name__}")
    return role, content


# Argument JSON texts already parsed and found to hold an object. Trials of a task repeat their
# calls verbatim, so most texts are seen several times; parsing each once took a fifth of reading
# a tau-bench-like file. Bounded: cleared when full (a cache miss only costs a parse).
_VALID_ARGUMENT_TEXTS: set[str] = set()
_VALID_ARGUMENT_TEXTS_MAX = 65536


def _openai_steps(messages: list, what: str) -> tuple[list[Step], list[dict]]:
    steps: list[Step] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        role, content = _check_message(message, what, i)
        if role == "tool":
            name = message.get("name") or call_names.get(message.get("tool_call_id"), "")
            error = message.get("error")
            steps.append(
                Step(
                    OBSERVATION,
                    "tool",
                    name,
                    None,
                    content,
                    bool(error) if error is not None else is_error_text(content),
                )
            )
            continue
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            raise _Bad(f"{what}[{i}].tool_calls must be a list, got {type(calls).__name__}")
        if role == "assistant" and calls:
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                    raise _Bad(f"{what}[{i}].tool_calls[{j}].function.name is missing")
                raw = fn.get("arguments")
                if raw.__class__ is str and raw in _VALID_ARGUMENT_TEXTS:
                    arguments = raw  # validated before: trials repeat the same calls verbatim
                else:
                    arguments = _parse_arguments(raw, lambda: f"{what}[{i}].tool_calls[{j}].function.arguments")
                    if raw.__class__ is str:
                        if len(_VALID_ARGUMENT_TEXTS) >= _VALID_ARGUMENT_TEXTS_MAX:
                            _VALID_ARGUMENT_TEXTS.clear()
                        _VALID_ARGUMENT_TEXTS.add(raw)
                if isinstance(call.get("id"), str):
                    call_names[call["id"]] = fn["name"]
                # The raw JSON text (validated above) is kept: trials repeat it verbatim, so the
                # signature step can canonicalise each distinct string once.
                steps.append(Step(CALL, "assistant", fn["name"], raw if isinstance(raw, str) else arguments))
        else:
            steps.append(Step(TEXT, role, None, None, content))
    return steps, messages


def _openai_reference(info: dict) -> str:
    if "reference" in info:
        return str(info["reference"])
    task = info.get("task")
    if isinstance(task, dict) and ("actions" in task or "outputs" in task):
        # tau-bench grades by the final database state, which its ground-truth actions produce.
        return json.dumps({"actions": task.get("actions", []), "outputs": task.get("outputs", [])}, sort_keys=True)
    return ""


def _parse_openai(obj: Any, where: str, trial_default: int) -> Rollout:
    if not isinstance(obj, dict):
        raise _Bad(f"expected an object, got {type(obj).__name__}")
    key = "traj" if "traj" in obj else "messages"
    messages = _require(obj, key, list)
    if not messages:
        raise _Bad(f"field {key!r} is empty")
    task_id = _task_id(obj.get("task_id", obj.get("id")))
    if "reward" not in obj:
        raise _Bad("missing field 'reward'")
    reward = _reward(obj["reward"], "reward")
    info = obj.get("info") or {}
    if not isinstance(info, dict):
        raise _Bad(f"field 'info' must be an object, got {type(info).__name__}")
    steps, messages = _openai_steps(messages, key)
    tools = obj.get("tools", info.get("tools"))
    if tools is not None and not isinstance(tools, list):
        raise _Bad(f"field 'tools' must be a list, got {type(tools).__name__}")
    kept: dict[str, Any] = {"reference": _openai_reference(info)}
    for name in ("verifier", "question", "answer", "problem", "environment"):
        if name in info:
            kept[name] = info[name]
    task = info.get("task")
    if isinstance(task, str):
        kept["task"] = task  # a lightning_agents.tasks class path (our own rollouts)
    if isinstance(task, dict):
        if "instruction" in task:
            kept["instruction"] = task["instruction"]
        if "actions" in task:
            # tau-bench's ground truth: the actions whose replay gives the expected database.
            kept["ground_truth"] = {"actions": task.get("actions", []), "outputs": task.get("outputs", [])}
            kept.setdefault("verifier", TAU_VERIFIER)
            kept.setdefault(
                "environment", {"benchmark": "tau-bench", "user_id": task.get("user_id"), "task_id": task_id}
            )
    return Rollout(task_id, _trial(obj.get("trial"), trial_default), reward, steps, messages, tools, where, kept)


# ----------------------------------------------------------------------------- tau2


def _parse_tau2(obj: Any, where: str, trial_default: int) -> Rollout:
    if not isinstance(obj, dict):
        raise _Bad(f"expected an object, got {type(obj).__name__}")
    if "simulation_run" in obj:
        sim = _require(obj, "simulation_run", dict)
        task = obj.get("task")
        prefix = "simulation_run."
    else:
        sim, task, prefix = obj, obj.get("_task"), ""
    if task is not None and not isinstance(task, dict):
        raise _Bad(f"field 'task' must be an object, got {type(task).__name__}")
    raw_task_id = sim.get("task_id", (task or {}).get("id"))
    task_id = _task_id(raw_task_id, prefix + "task_id")
    messages = _require(sim, "messages", list, prefix + "messages")
    if not messages:
        raise _Bad(f"field {prefix + 'messages'!r} is empty")
    reward_info = sim.get("reward_info")
    if reward_info is not None and not isinstance(reward_info, dict):
        raise _Bad(f"field {prefix + 'reward_info'!r} must be an object, got {type(reward_info).__name__}")
    reward = _reward((reward_info or {}).get("reward"), prefix + "reward_info.reward")
    steps: list[Step] = []
    out: list[dict] = []
    call_names: dict[str, tuple[str, str]] = {}
    for i, message in enumerate(messages):
        role, content = _check_message(message, prefix + "messages", i)
        if role == "tool":
            call_id = message.get("id")
            name, requestor = call_names.get(call_id, ("", message.get("requestor", "assistant")))
            error = message.get("error")
            steps.append(
                Step(
                    OBSERVATION,
                    "tool",
                    name,
                    None,
                    content,
                    bool(error) if error is not None else is_error_text(content),
                )
            )
            # Results of the user's own tools are not agent turns, so SFT data leaves them out.
            if requestor != "user":
                out.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            continue
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            raise _Bad(f"{prefix}messages[{i}].tool_calls must be a list, got {type(calls).__name__}")
        if calls:
            openai_calls = []
            for j, call in enumerate(calls):
                if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
                    raise _Bad(f"{prefix}messages[{i}].tool_calls[{j}].name is missing")
                arguments = _parse_arguments(
                    call.get("arguments"), lambda: f"{prefix}messages[{i}].tool_calls[{j}].arguments"
                )
                requestor = call.get("requestor", role)
                call_names[call.get("id")] = (call["name"], requestor)
                steps.append(Step(CALL, requestor, call["name"], arguments))
                openai_calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": call["name"], "arguments": json.dumps(arguments)},
                    }
                )
            if role == "assistant":
                out.append({"role": "assistant", "content": content, "tool_calls": openai_calls})
            elif content:
                out.append({"role": role, "content": content})
        else:
            steps.append(Step(TEXT, role, None, None, content))
            out.append({"role": role, "content": content})
    policy = obj.get("_policy")
    if policy and not (out and out[0]["role"] == "system"):
        # The agent saw it as its system message: SFT data and RL prompts carry it, as for tau-bench.
        out.insert(0, {"role": "system", "content": policy})
        steps.insert(0, Step(TEXT, "system", None, None, policy))
    info: dict[str, Any] = {}
    if task:
        criteria = task.get("evaluation_criteria")
        info["reference"] = json.dumps(criteria, sort_keys=True) if criteria is not None else ""
        if isinstance(criteria, dict) and criteria.get("actions") is not None:
            info["ground_truth"] = criteria
            info["verifier"] = TAU_VERIFIER
        scenario = task.get("user_scenario")
        if scenario is not None:
            info["instruction"] = scenario
        info["environment"] = {
            "benchmark": "tau2-bench",
            "task_id": task_id,
            "initial_state": task.get("initial_state"),
        }
    return Rollout(task_id, _trial(sim.get("trial"), trial_default), reward, steps, out, None, where, info)


# ----------------------------------------------------------------------------- bfcl


def _bfcl_state_hash(snapshot: list, what: str) -> str:
    parts = []
    for j, entry in enumerate(snapshot):
        if not isinstance(entry, dict) or entry.get("role") != "state_info":
            raise _Bad(f"{what}[{j}] must be a state_info object")
        parts.append((str(entry.get("class_name")), canonical_arguments(entry.get("content"))))
    return hash_observation(json.dumps(sorted(parts)))


def _bfcl_text(content: Any, what: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
            else:
                raise _Bad(f"{what} has a content part that is neither text nor a string")
        return "\n".join(texts)
    raise _Bad(f"{what} must be a string or a list of text parts, got {type(content).__name__}")


def _bfcl_tools(inputs: dict) -> list[dict] | None:
    tools = inputs.get("tools")
    if not isinstance(tools, list):
        return None
    out = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            parameters = _json_schema(tool.get("input_schema") or tool.get("parameters")) or {
                "type": "object",
                "properties": {},
            }
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool.get("description", ""),
                        "parameters": parameters,
                    },
                }
            )
    return out or None


# BFCL's API classes and the files of `multi_turn_func_doc/` that document their tools.
_BFCL_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}


def _bfcl_prompt_calls(text: str, tools: list[dict] | None) -> list[dict] | None:
    """A prompt-mode (non-FC) model's reply as ``{name: arguments}`` parts when it is calls written
    as Python (:func:`~lightning_agents.tasks.tau_actions.parse_python_calls`), else ``None``."""
    from lightning_agents.tasks.tau_actions import parse_python_calls

    calls = parse_python_calls(text, _parameter_order(tools))
    return None if calls is None else [{name: arguments} for name, arguments in calls]


def _bfcl_call(part: Any, what: Callable[[], str]) -> tuple[str, dict] | None:
    """``{name: arguments}`` as ``(name, arguments)``; ``None`` for text."""
    if isinstance(part, str):
        return None
    if isinstance(part, dict) and len(part) == 1:
        ((name, raw),) = part.items()
        return name, _parse_arguments(raw, what)
    raise _Bad(f"{what()} must be text or a single {{name: arguments}} call")


def _parameter_order(tools: list[dict] | None) -> dict[str, list[str]]:
    order = {}
    for tool in tools or []:
        fn = tool.get("function", tool)
        properties = (fn.get("parameters") or {}).get("properties") or {}
        order[fn.get("name")] = list(properties)
    return order


def _parameter_defaults(tools: list[dict] | None) -> dict[str, dict[str, Any]]:
    """Per tool, the documented defaults of its optional parameters (BFCL writes ``"None"`` for None).

    BFCL executes calls, so ``tail(file_name='a', lines=10)`` and ``tail(file_name='a')`` are the
    same call when 10 is the default; comparing calls needs the defaults filled in.
    """
    defaults: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        fn = tool.get("function", tool)
        parameters = fn.get("parameters") or {}
        required = set(parameters.get("required") or [])
        found = {
            name: None if spec["default"] == "None" else spec["default"]
            for name, spec in (parameters.get("properties") or {}).items()
            if isinstance(spec, dict) and "default" in spec and name not in required
        }
        if found:
            defaults[fn.get("name")] = found
    return defaults


# BFCL's func docs use Python type names; OpenAI-style tool APIs (and JSON Schema) reject them.
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def _json_schema(node: Any) -> Any:
    """A BFCL parameter schema with JSON Schema type names (``any`` becomes no type constraint)."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _json_schema(value) for key, value in node.items()}
    kind = out.get("type")
    if kind == "any":
        del out["type"]
    elif isinstance(kind, str) and kind in _BFCL_TYPES:
        out["type"] = _BFCL_TYPES[kind]
    return out


# What BFCL's function-calling runner says to the model when a held-out function arrives (miss_func).
_BFCL_HOLDOUT_TEXT = "I have updated some more functions you can choose from. What about now?"


def _holdout_message(text: str, added: list[dict]) -> str:
    """The user message of a turn that adds functions, with their schemas.

    A chat template renders one tool list for the whole conversation, so functions that arrive
    later are described in the message that brings them (as BFCL's prompt-mode runner does).
    """
    docs = "\n".join(json.dumps(tool.get("function", tool), sort_keys=True) for tool in added)
    return f"{text}\n\nNew functions:\n{docs}"


def _bfcl_user_turns(truth: dict) -> list:
    """BFCL's question turns, with the message BFCL sends at a turn that adds held-out functions
    (the question file leaves those turns empty)."""
    turns = [list(turn) for turn in truth.get("question") or []]
    for turn, added in (truth.get("tools_added") or {}).items():
        if turn < len(turns) and not turns[turn]:
            turns[turn] = [{"role": "user", "content": _holdout_message(_BFCL_HOLDOUT_TEXT, added)}]
    return turns


_SINGLE_TURN = (
    "only BFCL's multi-turn categories are rollouts: single-turn results (simple, multiple, parallel, live_*, "
    "irrelevance) are not read"
)


def _bfcl_finish(
    obj: dict,
    where: str,
    trial_default: int,
    steps: list[Step],
    messages: list[dict],
    tools,
    turn_calls,
    truth,
    tools_added: dict[int, list[dict]] | None = None,
) -> Rollout:
    task_id = _task_id(obj.get("id"), "id")
    if not steps:
        raise _Bad("no turn found (neither inference_log nor result holds one)")
    info: dict[str, Any] = {"turn_calls": turn_calls}
    reward = _reward(obj.get("valid", obj.get("reward")), "valid" if "valid" in obj else "reward")
    tools_added = (truth or {}).get("tools_added") or tools_added or {}
    if tools_added:
        # miss_func: functions that arrive at a later turn; `tools` are the ones offered first.
        info["tools_added"] = {str(turn): added for turn, added in sorted(tools_added.items())}
    if truth is not None:
        every_tool = [
            *(tools or []),
            *(truth.get("tools") or []),
            *(t for added in tools_added.values() for t in added),
        ]
        tools = tools or truth.get("tools")
        if "question" in truth:
            info["user_turns"] = _bfcl_user_turns(truth)
        if "initial_config" in truth:
            info["environment"] = {
                "benchmark": "bfcl",
                # e.g. multi_turn_long_context: BFCL builds that category's API instances with long data
                "category": re.sub(r"_\d+$", "", task_id),
                "initial_config": truth["initial_config"],
                "involved_classes": truth.get("involved_classes"),
            }
        if "ground_truth" in truth:
            reference = {
                "ground_truth": truth["ground_truth"],
                "parameter_order": _parameter_order(every_tool),
                "parameter_defaults": _parameter_defaults(every_tool),
            }
            info["reference"] = json.dumps(reference, sort_keys=True)
            info["ground_truth"] = truth["ground_truth"]
            info["verifier"] = BFCL_VERIFIER
            if reward is None:
                from lightning_agents.tasks.tau_actions import BFCLActionVerifier

                try:
                    reward = BFCLActionVerifier().score_turns(turn_calls, reference)
                except ValueError as exc:
                    raise _Bad(f"cannot score against the possible answer of {task_id!r}: {exc}") from None
                info["reward_source"] = "possible_answer"
    return Rollout(task_id, _trial(obj.get("trial"), trial_default), reward, steps, messages, tools, where, info)


def _parse_bfcl(obj: Any, where: str, trial_default: int, truth: dict | None = None) -> Rollout:
    if not isinstance(obj, dict):
        raise _Bad(f"expected an object, got {type(obj).__name__}")
    if "inference_log" not in obj:
        return _parse_bfcl_result(obj, where, trial_default, truth)
    log_entries = _require(obj, "inference_log", list)
    steps: list[Step] = []
    messages: list[dict] = []
    turn_calls: list[list[tuple[str, dict]]] = []
    tools = None
    # Every tool offered so far, by name: miss_func offers a held-out function from a later turn on.
    known = {t["function"]["name"]: t for t in (truth or {}).get("tools") or []}
    for added in ((truth or {}).get("tools_added") or {}).values():
        known.update((t["function"]["name"], t) for t in added)
    tools_added: dict[int, list[dict]] = {}
    turns = 0
    for t, entry in enumerate(log_entries):
        what = f"inference_log[{t}]"
        if isinstance(entry, list):
            # Keyed with the turn: an unchanged state after a later turn is a later situation, and
            # without the turn a perfect trial whose turn only reads would loop back on itself.
            state = f"{turns}:{_bfcl_state_hash(entry, what)}"
            # The first snapshot is the initial state, shared by every trial: it is the root.
            if steps:
                steps[-1].state = state
            continue
        if not isinstance(entry, dict):
            raise _Bad(f"{what} must be a state_info list or a turn object, got {type(entry).__name__}")
        turns += 1
        turn_calls.append([])
        first_message = len(messages)
        for q, query in enumerate(entry.get("begin_of_turn_query") or []):
            if not isinstance(query, dict):
                raise _Bad(f"{what}.begin_of_turn_query[{q}] must be an object")
            text = _bfcl_text(query.get("content", ""), f"{what}.begin_of_turn_query[{q}].content")
            steps.append(Step(TEXT, query.get("role", "user"), None, None, text))
            messages.append({"role": "user", "content": text})
        step_keys = sorted(
            (k for k in entry if k.startswith("step_")), key=lambda k: int(k[5:]) if k[5:].isdigit() else -1
        )
        for key in step_keys:
            where_step = f"{what}.{key}"
            items = entry[key]
            if not isinstance(items, list):
                raise _Bad(f"{where_step} must be a list, got {type(items).__name__}")
            pending: list[dict] = []
            for k, item in enumerate(items):
                if not isinstance(item, dict) or "role" not in item:
                    raise _Bad(f"{where_step}[{k}] must be an object with a role")
                role, content = item["role"], item.get("content")
                if role == "inference_input":
                    offered = _bfcl_tools(content) if isinstance(content, dict) else None
                    if tools is None:
                        tools = offered
                        known.update((t["function"]["name"], t) for t in tools or [])
                    for tool in offered or []:
                        if tool["function"]["name"] not in known:
                            known[tool["function"]["name"]] = tool
                            tools_added.setdefault(turns - 1, []).append(tool)
                elif role == "assistant":
                    if isinstance(content, str):
                        # Prompt-mode models: BFCL logs the raw reply, calls written as Python.
                        content = _bfcl_prompt_calls(content, list(known.values())) or [content]
                    if not isinstance(content, list):
                        raise _Bad(f"{where_step}[{k}].content must be a list or text, got {type(content).__name__}")
                    calls, texts = [], []
                    for c, part in enumerate(content):
                        call = _bfcl_call(part, lambda: f"{where_step}[{k}].content[{c}]")
                        if call is None:
                            texts.append(part)
                            continue
                        name, arguments = call
                        steps.append(Step(CALL, "assistant", name, arguments))
                        turn_calls[-1].append(call)
                        call_id = f"call_{turns}_{key[5:]}_{c}"
                        calls.append(
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(arguments)},
                            }
                        )
                    text = "\n".join(texts)
                    if calls:
                        messages.append({"role": "assistant", "content": text, "tool_calls": calls})
                        pending = list(calls)
                    else:
                        steps.append(Step(TEXT, "assistant", None, None, text))
                        messages.append({"role": "assistant", "content": text})
                elif role == "tool":
                    text = content if isinstance(content, str) else json.dumps(content)
                    call = pending.pop(0) if pending else None
                    name = call["function"]["name"] if call else ""
                    steps.append(Step(OBSERVATION, "tool", name, None, text, is_error_text(text)))
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"] if call else "", "name": name, "content": text}
                    )
        added = ((truth or {}).get("tools_added") or tools_added).get(turns - 1)
        if added and first_message < len(messages) and messages[first_message]["role"] == "user":
            message = messages[first_message]
            messages[first_message] = {**message, "content": _holdout_message(message["content"], added)}
    return _bfcl_finish(obj, where, trial_default, steps, messages, tools, turn_calls, truth, tools_added)


def _parse_bfcl_result(obj: dict, where: str, trial_default: int, truth: dict | None) -> Rollout:
    """A BFCL result record without ``inference_log``: the calls per turn from ``result``.

    ``result`` holds, per turn, the model's steps, each a list of ``{name: arguments}`` calls or
    text. There are no tool outputs and no states; the user's turns come from the question file
    when given.
    """
    result = _require(obj, "result", list)
    questions = _bfcl_user_turns(truth) if truth else []
    every_tool = [
        *((truth or {}).get("tools") or []),
        *(t for a in ((truth or {}).get("tools_added") or {}).values() for t in a),
    ]
    steps: list[Step] = []
    messages: list[dict] = []
    turn_calls: list[list[tuple[str, dict]]] = []
    for t, turn in enumerate(result):
        if not isinstance(turn, list):
            raise _Bad(f"result[{t}] must be a list of steps, got {type(turn).__name__}; {_SINGLE_TURN}")
        turn_calls.append([])
        if t < len(questions):
            for query in questions[t]:
                text = _bfcl_text(query.get("content", ""), f"question[{t}]")
                steps.append(Step(TEXT, "user", None, None, text))
                messages.append({"role": "user", "content": text})
        for k, step in enumerate(turn):
            if isinstance(step, str):
                # A prompt-mode model's reply: its calls written as Python (BFCL decodes them so).
                step = _bfcl_prompt_calls(step, every_tool) or step
            parts = step if isinstance(step, list) else [step]
            calls, texts = [], []
            for c, part in enumerate(parts):
                call = _bfcl_call(part, lambda: f"result[{t}][{k}][{c}]")
                if call is None:
                    texts.append(part)
                    continue
                steps.append(Step(CALL, "assistant", call[0], call[1]))
                turn_calls[-1].append(call)
                calls.append(
                    {
                        "id": f"call_{t + 1}_{k}_{c}",
                        "type": "function",
                        "function": {"name": call[0], "arguments": json.dumps(call[1])},
                    }
                )
            if calls:
                messages.append({"role": "assistant", "content": "\n".join(texts), "tool_calls": calls})
            else:
                steps.append(Step(TEXT, "assistant", None, None, "\n".join(texts)))
                messages.append({"role": "assistant", "content": "\n".join(texts)})
    return _bfcl_finish(obj, where, trial_default, steps, messages, None, turn_calls, truth)


def load_ground_truth(paths: str | Path | Sequence[str | Path]) -> dict[str, dict]:
    """Ground truth by task id from BFCL possible-answer and question files (JSON Lines, ``id`` per line).

    Possible-answer lines give ``ground_truth`` (the call strings per turn), question lines the
    user's ``question`` turns, ``initial_config`` and ``involved_classes``; both may be given and
    are merged per id. Tool schemas come from ``multi_turn_func_doc/`` next to a question file.

    Raises:
        RolloutFormatError: a line that is not a JSON object with an ``id`` (naming file and line).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    truth: dict[str, dict] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"ground-truth file {path} does not exist")
        docs_dir = path.parent / "multi_turn_func_doc"
        docs: dict[str, list[dict]] = {}
        with path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = loads_json(line)
                except JSONTextError as exc:
                    raise RolloutFormatError(f"{path}:{lineno}: invalid JSON ({exc})") from None
                if not isinstance(obj, dict) or "id" not in obj:
                    raise RolloutFormatError(f"{path}:{lineno}: a ground-truth line must be an object with an 'id'")
                entry = truth.setdefault(str(obj["id"]), {})
                entry.update({k: v for k, v in obj.items() if k != "id"})
                if "involved_classes" in obj and docs_dir.is_dir() and "tools" not in entry:
                    tools = []
                    for name in obj["involved_classes"]:
                        if name not in docs and (docs_dir / _BFCL_DOC_FILES.get(name, "-")).is_file():
                            docs[name] = [
                                json.loads(x)
                                for x in (docs_dir / _BFCL_DOC_FILES[name]).read_text().splitlines()
                                if x.strip()
                            ]
                        tools += [
                            {
                                "type": "function",
                                "function": {
                                    **{k: d[k] for k in ("name", "description") if k in d},
                                    **({"parameters": _json_schema(d["parameters"])} if "parameters" in d else {}),
                                },
                            }
                            for d in docs.get(name, [])
                        ]
                    entry["tools"], entry["tools_added"] = _held_out(tools, obj.get("missed_function"), path, lineno)
                    entry["tools"] = entry["tools"] or None
    return truth


def _held_out(tools: list[dict], missed: Any, path: Path, lineno: int) -> tuple[list[dict], dict[int, list[dict]]]:
    """Split a miss_func entry's tools into those offered first and those each later turn adds.

    BFCL's miss_func category withholds ``missed_function`` (``{turn: [names]}``) until that turn:
    before it the right answer is to say the function is missing, so offering it from the start
    would make the possible answer wrong.
    """
    if not missed:
        return tools, {}
    if not isinstance(missed, dict):
        raise RolloutFormatError(f"{path}:{lineno}: 'missed_function' must be an object of turn -> names")
    by_name = {tool["function"]["name"]: tool for tool in tools}
    added: dict[int, list[dict]] = {}
    for turn, names in missed.items():
        if not str(turn).isdigit() or not isinstance(names, list):
            raise RolloutFormatError(f"{path}:{lineno}: 'missed_function' must map turn numbers to lists of names")
        unknown = [name for name in names if name not in by_name]
        if unknown:
            # BFCL skips such names too (its unused composite category has one: update_market_status).
            log.warning("%s:%d: missed_function %s not among the tools of its involved_classes", path, lineno, unknown)
        added[int(turn)] = [by_name[name] for name in names if name in by_name]
    late = {name for names in missed.values() for name in names}
    return [tool for tool in tools if tool["function"]["name"] not in late], added


_PARSERS: dict[str, Callable[[Any, str, int], Rollout]] = {
    "openai": _parse_openai,
    "tau2": _parse_tau2,
    "bfcl": _parse_bfcl,
}


# ----------------------------------------------------------------------------- entry point


def load_rollouts(
    paths: str | Path | Sequence[str | Path],
    format: str = "auto",
    skip_invalid: bool = False,
    ground_truth: str | Path | Sequence[str | Path] = (),
    tools: str | Path | None = None,
    num_shards: int = 1,
    shard_index: int = 0,
) -> RolloutSet:
    """Read rollout files into :class:`~lightning_agents.topology.records.Rollout` records.

    Args:
        paths: one file or a list of files; they may mix formats under ``format="auto"``.
        format: ``auto`` (detect per file from its first readable record), ``openai``, ``tau2``
            or ``bfcl``.
        skip_invalid: skip bad records, collecting ``"location: reason"`` in the result's
            ``skipped`` (and logging a count), instead of raising on the first.
        ground_truth: files with each task's ground truth by id: BFCL possible-answer and
            question files (:func:`load_ground_truth`). BFCL result files carry no score; with
            the possible answers each trial is scored by
            :class:`~lightning_agents.tasks.tau_actions.BFCLActionVerifier`.
        tools: a JSON file with the list of OpenAI tool schemas the agent was offered, attached
            to every rollout whose file does not record its tools (tau-bench's files do not).
        num_shards: split the tasks into this many shards by a stable hash of the task id.
        shard_index: read only the rollouts of this shard (0-based); other records are skipped
            before they are parsed.

    Returns:
        A :class:`RolloutSet` (a list of rollouts with a ``skipped`` list). Trials without a
        ``trial`` field are numbered by their order of appearance within their task, across
        files, so several result files of the same tasks become trials 0, 1, ... A trial number
        that an earlier file already used for the task is renumbered to the next free one (its
        own number kept in ``info["source_trial"]``), so several run files of one benchmark pool.

    Raises:
        RolloutFormatError: naming the file, the record index or line, and what is wrong.
        FileNotFoundError: a path does not exist.
    """
    from lightning_agents.topology.shards import check_shard

    if format != "auto" and format not in FORMATS:
        raise RolloutFormatError(f"unknown rollout format {format!r}; expected auto or one of {', '.join(FORMATS)}")
    check_shard(num_shards, shard_index)
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise RolloutFormatError("no rollout files given")
    resolved = [Path(p).resolve() for p in paths]
    twice = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if twice:
        raise RolloutFormatError(
            f"rollout file(s) given twice: {twice}; several runs of one benchmark are pooled from different files"
        )
    truth = load_ground_truth(ground_truth) if ground_truth else {}
    schemas = _read_tools(tools) if tools is not None else None
    with paused_gc():
        result = _load(paths, format, skip_invalid, truth, schemas, num_shards, shard_index)
    if result.skipped:
        for message in result.skipped[:10]:
            log.warning("skipped %s", message)
        log.warning("skipped %d invalid rollout record(s) (first 10 shown)", len(result.skipped))
    if result.renumbered:
        log.info(
            "renumbered %d trial(s) whose number an earlier file already used for the same task", result.renumbered
        )
    return result


def _read_tools(path: str | Path) -> list[dict]:
    path = Path(path)
    try:
        tools = loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"tools file {path} does not exist") from None
    except JSONTextError as exc:
        raise RolloutFormatError(f"{path}:{exc.lineno or 1}: invalid JSON ({exc})") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RolloutFormatError(f"{path}: expected a JSON list of OpenAI tool schemas")
    return tools


def _task_hint(obj: Any, file_format: str) -> str | None:
    if not isinstance(obj, dict):
        return None
    hint = obj.get("task_id", obj.get("id"))
    if file_format == "tau2" and isinstance(obj.get("simulation_run"), dict):
        hint = obj["simulation_run"].get("task_id")
    return None if hint is None else str(hint)


def _load(paths, format, skip_invalid, truth, schemas, num_shards, shard_index) -> RolloutSet:
    from lightning_agents.topology.shards import shard_of

    result = RolloutSet()
    seen: dict[str, int] = {}
    used: dict[str, dict[int, int]] = {}  # task -> trial number -> index of the file that used it
    no_truth: dict[str, list[str]] = {}  # BFCL records whose id the ground-truth files lack, by file
    for file_index, path in enumerate(paths):
        file_format = None if format == "auto" else format
        for where, obj, text in _read_records(path):
            try:
                if isinstance(obj, RolloutFormatError):
                    raise obj
                if file_format is None:
                    file_format = detect_format(obj)
                    if file_format is None:
                        keys = sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__
                        hint = f"; {_SINGLE_TURN}" if isinstance(obj, dict) and "result" in obj else ""
                        raise RolloutFormatError(
                            f"{where}: cannot tell the rollout format (fields {keys}); expected 'traj'/'messages' (openai), "
                            "'simulation_run'/'simulations' (tau2) or 'inference_log'/'result' (bfcl), or pass "
                            f"format={hint}"
                        )
                task_hint = _task_hint(obj, file_format)
                if num_shards > 1 and task_hint is not None and shard_of(task_hint, num_shards) != shard_index:
                    continue
                default_trial = seen.get(str(task_hint), 0)
                if file_format == "bfcl":
                    if truth and str(task_hint) not in truth:
                        no_truth.setdefault(str(path), []).append(str(task_hint))
                    rollout = _parse_bfcl(obj, where, default_trial, truth.get(str(task_hint)))
                else:
                    rollout = _PARSERS[file_format](obj, where, default_trial)
                if text is not None and file_format == "openai":
                    # The parsed messages are the record's own list; its text is a quarter of
                    # their memory and only the trials written out need them again.
                    rollout.messages = EncodedMessages(text, "traj" if "traj" in obj else "messages")
            except _Bad as exc:
                message = f"{where}: {exc} ({file_format} format)"
                if not skip_invalid:
                    raise RolloutFormatError(message) from None
                result.skipped.append(message)
                continue
            except RolloutFormatError as exc:
                if not skip_invalid:
                    raise
                result.skipped.append(str(exc))
                continue
            if num_shards > 1 and shard_of(rollout.task_id, num_shards) != shard_index:
                continue
            numbers = used.setdefault(rollout.task_id, {})
            owner = numbers.get(rollout.trial)
            if owner is not None and owner != file_index:
                # Another run file of the same benchmark: pool its trials under fresh numbers.
                rollout.info["source_trial"] = rollout.trial
                rollout.trial = max(numbers) + 1
                result.renumbered += 1
            numbers.setdefault(rollout.trial, file_index)
            if schemas is not None and not rollout.tools:
                rollout.tools = schemas
            seen[rollout.task_id] = max(seen.get(rollout.task_id, 0), rollout.trial + 1)
            result.append(rollout)
    for path, ids in no_truth.items():
        # Usually the possible answers of another category: those trials stay unscored.
        log.warning(
            "%s: %d records have no entry in the ground-truth files (e.g. %s); they are not scored against it",
            path,
            len(ids),
            ", ".join(sorted(set(ids))[:3]),
        )
    return result
