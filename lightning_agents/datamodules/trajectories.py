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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lightning_agents.datamodules._rollout_fields import (
    RolloutFormatError,
    _argument_object,
    _Bad,
    _first_line,
    _NotRun,
    _parse_arguments,
    _require,
    _reward,
    _task_id,
    _trial,
)
from lightning_agents.datamodules.bfcl_rollouts import (
    SINGLE_TURN_NOTE,
    bfcl_inference_failed,
    load_ground_truth,
    parse_bfcl,
    tau2_domains,
    tau2_ground_truth,
    tau2_variant_of,
)
from lightning_agents.datamodules.bfcl_rollouts import bfcl_verifier as bfcl_verifier_path
from lightning_agents.datamodules.sources import open_text
from lightning_agents.json_text import JSONTextError, json_error_text, loads_json
from lightning_agents.rollout.tool_calls import is_notice
from lightning_agents.tasks.tau_actions import unsupported_tau2_basis
from lightning_agents.topology.pipeline import paused_gc
from lightning_agents.topology.records import CALL, OBSERVATION, TEXT, EncodedMessages, Rollout, Step
from lightning_agents.topology.signatures import canonical_arguments, is_error_text

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
TAU_VERIFIER = "lightning_agents.tasks.tau_actions.TauActionVerifier"


class RolloutSet(list):
    """The rollouts read (a plain list) plus what was skipped.

    Attributes:
        skipped: one ``"location: reason"`` string per record skipped with ``skip_invalid``.
        not_run: one ``"location: error"`` string per trial the run recorded as an error of its
            own (an API quota, a crashed evaluator) instead of a trajectory; always left out.
        renumbered: trials given a new number because an earlier file used theirs.
        conflicting_references: task ids whose trials carry different ground truths (files of
            two versions of a benchmark's tasks pooled), each with a trial's location per version.
        per_file: for each kind of record noted (``skipped``, ``not_run``, ``python_literals``),
            each file's count and first message; the load logs one warning per file and kind.
    """

    def __init__(self, items: Iterable[Rollout] = (), skipped: list[str] | None = None) -> None:
        super().__init__(items)
        self.skipped: list[str] = list(skipped or [])
        self.not_run: list[str] = []
        self.conflicting_references: dict[str, list[str]] = {}
        self.renumbered = 0
        # kind ("skipped", "not_run", "python_literals") -> file -> [how many, the first's location]:
        # the load warns once per file and kind, not once per record (a file of 200 records that
        # all lack a task id printed ten identical lines and hid the other files' reasons).
        self.per_file: dict[str, dict[str, list]] = {}

    def note(self, kind: str, path: str | Path, message: str) -> None:
        """Count one record of ``kind`` in ``path`` for the per-file warning, keeping the first message."""
        entry = self.per_file.setdefault(kind, {}).setdefault(str(path), [0, message])
        entry[0] += 1

    @property
    def skipped_count(self) -> int:
        """Number of records skipped."""
        return len(self.skipped)


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
    if path.is_dir():
        if (path / "results.json").is_file() and (path / "simulations").is_dir():
            raise RolloutFormatError(f"{path} is a folder: {_tau2_directory_note(path)}")
        raise RolloutFormatError(f"{path} is a folder, not a rollout file: pass the rollout files in it")
    if not path.is_file():
        raise FileNotFoundError(f"rollout file {path} does not exist")
    if path.parent.name == "simulations" and (path.parent.parent / "results.json").is_file():
        # One simulation of the layout read alone loaded as a trial without the run's policy
        # (its system message) or its task (ground truth, verifier), and said nothing.
        raise RolloutFormatError(
            f"{path} is one simulation of a tau2 run folder ({path.parent.parent}): "
            f"{_tau2_directory_note(path.parent.parent)}"
        )
    if path.suffix != ".jsonl":
        if _first_char(path) == "[":
            # A JSON list streams one element at a time: a 100k-trajectory list is never held whole.
            try:
                yield from _stream_json_list(path)
            except _ExtraData:
                raise
            except RolloutFormatError as exc:
                # A list cut short (a run killed while writing it): the records before the cut were
                # read, and with skip_invalid they are kept; the broken tail is one skipped record.
                yield str(path), exc, None
            return
        try:
            data = loads_json(_read_text(path))
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
    with open_text(path) as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = loads_json(line)
            except JSONTextError as exc:
                yield f"{path}:{lineno}", RolloutFormatError(f"{path}:{lineno}: invalid JSON ({exc})"), None
                continue
            yield f"{path}:{lineno}", obj, line


def _read_text(path: Path) -> str:
    with open_text(path) as handle:
        return handle.read()


def _first_char(path: Path) -> str:
    with open_text(path) as handle:
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
    with open_text(path) as handle:
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
                _check_nothing_after(path, handle, buffer, pos + 1, line)
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


class _ExtraData(RolloutFormatError):
    """Text after a file's JSON list: another run's records (``cat a.json b.json``), never one
    broken record, so it is refused whatever ``skip_invalid`` says."""


def _check_nothing_after(path: Path, handle: Any, buffer: str, pos: int, line: int) -> None:
    """Refuse anything but whitespace after the list's closing ``]`` (``line``: that of ``buffer[0]``)."""
    while True:
        rest = buffer[pos:].lstrip(" \t\r\n")
        if rest:
            at = len(buffer) - len(rest)
            line += buffer.count("\n", 0, at)
            column = at - buffer.rfind("\n", 0, at)
            raise _ExtraData(
                f"{path}:{line}:{column}: more data after the JSON list ends ({rest[:20]!r}...), as where two "
                "run files are concatenated (cat a.json b.json); its records would be dropped unread: pass the "
                "files separately"
            )
        line += buffer.count("\n")
        buffer, pos = handle.read(_CHUNK), 0
        if not buffer:
            return


def _tau2_tools(tool_defs: Any) -> list[dict] | None:
    """OpenAI tool schemas from a tau2 results file's ``info.environment_info.tool_defs`` (the
    agent's tools, ``{name: {name, doc, params (JSON schema), returns}}``), which its runner
    fills when asked to include tool info; ``None`` when the file has none."""
    if not isinstance(tool_defs, dict) or not tool_defs:
        return None
    tools = []
    for name, signature in tool_defs.items():
        if not isinstance(signature, dict):
            return None
        params = signature.get("params")
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": str(signature.get("name") or name),
                    "description": str(signature.get("doc") or ""),
                    "parameters": params if isinstance(params, dict) else {"type": "object", "properties": {}},
                },
            }
        )
    return tools


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
        tools = _tau2_tools(environment.get("tool_defs"))
        # Task ids are per domain: airline and airline_tighter_policy both have a task "11".
        domain = environment.get("domain_name") if isinstance(environment.get("domain_name"), str) else None
        if domain is None and isinstance(data.get("domain"), str) and data["domain"]:
            # Some leaderboard submissions write their own layout, the domain at the top and no
            # info or tasks (sierra-research/tau2-bench's adaptive-agent_community_2026-03-23):
            # without it, two domains' task "0" would be one task and take one domain's ground truth.
            domain = data["domain"]
        for index, sim in enumerate(simulations):
            if isinstance(sim, dict):
                sim = dict(sim, _task=tasks.get(str(sim.get("task_id"))), _policy=policy, _tools=tools)
                if domain is not None:
                    sim["_domain"] = domain
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
        isinstance(record.get("id"), str)
        and "traj" not in record
        and (isinstance(record.get("result"), list) or bfcl_inference_failed(record))
    ):
        return "bfcl"
    if "simulation_run" in record or (
        "messages" in record and ("termination_reason" in record or "reward_info" in record)
    ):
        return "tau2"
    if "traj" in record or "messages" in record:
        return "openai"
    return None


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


def _openai_steps(messages: list, what: str) -> tuple[list[Step], list[dict], int]:
    """The steps of an OpenAI-format message list, the list, and how many calls' arguments were
    Python dict literals (rewritten in the list as JSON)."""
    steps: list[Step] = []
    python_literals = 0
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        role, content = _check_message(message, what, i)
        if is_notice(message):
            # a malformed call's notice told as a user message (Gemma 4's template shows no lone
            # tool message): the environment's error, as the tool notice of other templates is
            steps.append(Step(OBSERVATION, "tool", "invalid", None, content, True))
            continue
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
                    arguments, literal = _argument_object(
                        raw, lambda: f"{what}[{i}].tool_calls[{j}].function.arguments"
                    )
                    if literal:
                        # str(dict) text: the message carries it as JSON from here on, so SFT data
                        # and the signatures see what a JSON-writing harness would have logged.
                        raw = fn["arguments"] = json.dumps(arguments, ensure_ascii=False)
                        python_literals += 1
                    elif raw.__class__ is str:
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
    return steps, messages, python_literals


def _recorded_states(steps: list[Step], messages: list, states: Any) -> None:
    """Set the environment states our agent loop records (``info.states``: ``[message index,
    key]`` per user turn, BFCL's worlds) on the last step of that message, as the BFCL reader sets a
    result file's ``state_info`` on the turn's last step; TopoCurate merges trials on them."""
    ends, n = [], 0
    for m in messages:
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        n += len(calls) if isinstance(calls, list) and calls else 1  # one step per call, else one
        ends.append(n - 1)
    if not isinstance(states, list):
        raise _Bad(f"info.states must be a list of [message index, state], got {type(states).__name__}")
    for j, entry in enumerate(states):
        if not (
            isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and 0 <= entry[0] < len(ends)
        ):
            raise _Bad(f"info.states[{j}] must be [message index < {len(ends)}, state], got {entry!r}")
        steps[ends[entry[0]]].state = str(entry[1])


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
        error = obj.get("info", {}).get("error") if isinstance(obj.get("info"), dict) else None
        if error is not None:
            # tau-bench's run.py writes a trial that raised (API error, timeout) as reward 0 with
            # an empty trajectory and the exception in info.error: no rollout, not an agent failure.
            raise _NotRun(f"info.error: {_first_line(error)}")
        raise _Bad(f"field {key!r} is empty")
    task_id = _task_id(obj.get("task_id", obj.get("id")))
    if "reward" not in obj:
        raise _Bad("missing field 'reward'")
    reward = _reward(obj["reward"], "reward")
    info = obj.get("info") or {}
    if not isinstance(info, dict):
        raise _Bad(f"field 'info' must be an object, got {type(info).__name__}")
    steps, messages, python_literals = _openai_steps(messages, key)
    if info.get("states"):
        _recorded_states(steps, messages, info["states"])
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
    if python_literals:
        # Read by the loader, which then keeps these rewritten messages instead of the record's text.
        kept[_PYTHON_LITERALS] = python_literals
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
        reason = sim.get("termination_reason")
        error = (sim.get("info") or {}).get("error") if isinstance(sim.get("info"), dict) else None
        if error is not None or (isinstance(reason, str) and reason.endswith("_error")):
            # tau2's runner writes a simulation that its retries could not finish (a rate limit,
            # an evaluator's unparsable reply) with no messages and no reward_info.
            raise _NotRun(f"termination_reason {reason}" + (f", info.error: {_first_line(error)}" if error else ""))
        raise _Bad(f"field {prefix + 'messages'!r} is empty")
    reward_info = sim.get("reward_info")
    if reward_info is not None and not isinstance(reward_info, dict):
        raise _Bad(f"field {prefix + 'reward_info'!r} must be an object, got {type(reward_info).__name__}")
    reward = _reward((reward_info or {}).get("reward"), prefix + "reward_info.reward")
    steps: list[Step] = []
    out: list[dict] = []
    call_names: dict[str, tuple[str, str]] = {}
    user_steps = 0  # the simulated user's own tool calls and their results (tau2 telecom)
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
            if requestor == "user":
                user_steps += 1
            else:
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
                user_steps += requestor == "user"
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
    # tau2's SimulationRun.policy, "the policy/system prompt used for this simulation", comes
    # before the file's: it varies per simulation in the knowledge domain, and some submissions
    # write only it (sierra-research/tau2-bench's adaptive-agent files have no environment_info).
    own_policy = sim.get("policy")
    policy = own_policy if isinstance(own_policy, str) and own_policy else obj.get("_policy")
    if policy and not (out and out[0]["role"] == "system"):
        # The agent saw it as its system message: SFT data and RL prompts carry it, as for tau-bench.
        out.insert(0, {"role": "system", "content": policy})
        steps.insert(0, Step(TEXT, "system", None, None, policy))
    ticket = (task or {}).get("ticket")
    if isinstance(ticket, str) and ticket and not any(m["role"] == "user" for m in out):
        # A solo run (tau2's no-user mode): the agent got the task as a ticket in its prompt and
        # never hears from a user. Without it, SFT teaches calls whose arguments (a phone number)
        # come from nowhere and the RL prompt has no task; it goes in as the user's request.
        at = 1 if out and out[0]["role"] == "system" else 0
        out.insert(at, {"role": "user", "content": ticket})
        steps.insert(at, Step(TEXT, "user", None, None, ticket))
    info: dict[str, Any] = {}
    if user_steps:
        info["user_tool_steps"] = user_steps
    if task:
        criteria = task.get("evaluation_criteria")
        info["reference"] = json.dumps(criteria, sort_keys=True) if criteria is not None else ""
        outcomes = criteria.get("acceptable_outcomes") if isinstance(criteria, dict) else None
        if isinstance(criteria, dict):
            # Before the verifier branches: a task with no actions (medical_triage's) is checked too.
            _check_scored_against(
                criteria, reward_info, task_id, check_actions=not outcomes and criteria.get("actions") is not None
            )
            # The task's criteria are its ground truth in the RL record whichever verifier scores
            # them, the action-match one or one the user names for a task it cannot score.
            info["ground_truth"] = criteria
        if isinstance(outcomes, list) and outcomes:
            # A tau2 fork's extension (blakeelias/tau2-bench): the trial passes if it matches any
            # of several action sets, and `actions` is null or ignored. Matching `actions` alone
            # would score such a trial against the wrong ground truth, or against none.
            info["no_verifier"] = (
                f"its task's evaluation_criteria gives {len(outcomes)} acceptable_outcomes (alternative action "
                "sets, an extension some tau2 forks make) instead of one list of actions; the action-match verifier "
                "reads only `actions`"
            )
        elif isinstance(criteria, dict) and criteria.get("actions") is None:
            info["no_verifier"] = "its task's evaluation_criteria has no actions (null) for the action-match verifier"
        elif isinstance(criteria, dict):
            unsupported = unsupported_tau2_basis(criteria)
            if unsupported:
                # Naming the action-match verifier here would hand RL a reward that disagrees with
                # tau2's own on a third of telecom's trials; curate asks for a verifier instead.
                info["no_verifier"] = f"the action-match verifier cannot score it: {unsupported}"
            else:
                info["verifier"] = TAU_VERIFIER
        scenario = task.get("user_scenario")
        if scenario is not None:
            info["instruction"] = scenario
        if sim.get("termination_reason") is not None:
            info["termination_reason"] = str(sim["termination_reason"])
        info["environment"] = {
            "benchmark": "tau2-bench",
            "task_id": task_id,
            "initial_state": task.get("initial_state"),
        }
        if obj.get("_domain") is not None:
            info["environment"]["domain"] = obj["_domain"]
    return Rollout(task_id, _trial(sim.get("trial"), trial_default), reward, steps, out, obj.get("_tools"), where, info)


def _assertion_words(text: Any) -> set[str]:
    return set(re.findall(r"[\w$]+", str(text).lower()))


def _same_assertion(checked: Any, given: Any) -> bool:
    """Whether an assertion tau2's judge echoed is one of its task's: at least half of their
    words shared. The judge writes back each assertion in its own words, not copied: gpt-4.1's
    airline run (sierra-research/tau2-bench src/experiments/model_training/results) has
    ``'Reservation X7BYG1 is updated to economy.'`` for the task's ``'... economy. '`` and
    ``'The total cost that the agent mentions ...'`` for ``'The total cost that the. agent ...'``."""
    if str(checked).strip() == str(given).strip():
        return True
    a, b = _assertion_words(checked), _assertion_words(given)
    return bool(a | b) and 2 * len(a & b) >= len(a | b)


def _env_assertion_key(assertion: Any) -> str:
    """An environment assertion without the fields tau2's model fills with defaults when it copies it."""
    if not isinstance(assertion, dict):
        return json.dumps(assertion, sort_keys=True)
    key = {k: assertion.get(k) for k in ("env_type", "func_name", "arguments")}
    key["assert_value"] = assertion.get("assert_value", True)
    return json.dumps(key, sort_keys=True, default=str)


def _check_scored_against(criteria: dict, reward_info: dict | None, task_id: str, check_actions: bool = True) -> None:
    """Refuse a simulation whose own evaluation checked other criteria than its task's.

    tau2 copies what it checked into ``reward_info``: the gold actions into ``action_checks``,
    each fact to communicate into ``communicate_checks`` and each environment assertion into
    ``env_assertions``; its LLM judge writes each natural-language assertion back, in its own
    words, into ``nl_assertions``, so that list is another task's only where none of it is one of
    the task's assertions (:func:`_same_assertion`). A file whose
    ``tasks`` were renumbered or taken from another split, or a simulation naming no domain that
    took another domain's task from a ground-truth ``tasks.json``, pairs it with some other task:
    its reference would then score RL against the wrong ground truth, silently. The assertions
    tell where actions cannot: medical_triage's tasks have none, and a simulation naming no
    domain whose policy has no heading (telecom's, or none at all) said nothing else. A list
    that is empty or absent (tau2 leaves out what its task's reward basis does not evaluate), or
    whose entries are not tau2's shape (an older or foreign layout), tells nothing.
    ``check_actions``: ``False`` where the task's ``acceptable_outcomes`` replace its actions or its
    actions are null; its ``action_checks`` are then not compared.
    """
    reward_info = reward_info if isinstance(reward_info, dict) else {}
    checks = reward_info.get("action_checks") if check_actions else None
    actions = [c.get("action") if isinstance(c, dict) else None for c in checks or ()]
    # An older or foreign layout (an entry without tau2's action) tells nothing.
    if actions and all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in actions):
        checked = Counter((a["name"], canonical_arguments(a.get("arguments"))) for a in actions)
        gold = Counter(
            (a.get("name"), canonical_arguments(a.get("arguments")))
            for a in criteria.get("actions") or []
            if isinstance(a, dict)
        )
        if checked != gold:
            first = next(iter(checks))["action"]
            raise _Bad(
                f"its reward_info.action_checks evaluated other actions than task {task_id!r}'s evaluation_criteria "
                f"(e.g. {first['name']} with action_id {first.get('action_id')!r}): the task given for it (the file's "
                "`tasks` or a ground-truth tasks.json) is not the one it ran (renumbered, or another version), so its "
                "ground truth would score RL against another task"
            )
    given = criteria.get("nl_assertions")
    given = given if isinstance(given, list) else []
    checked = _copied_checks(reward_info, "nl_assertions", "nl_assertion")
    if checked and (len(checked) > len(given) or not all(any(_same_assertion(c, g) for g in given) for c in checked)):
        # The judge's echo is no copy, so each echoed assertion must be close to one of the task's (not
        # just any one of them: medical_triage tasks share generic assertions such as calling 911).
        raise _Bad(_other_criteria(task_id, "nl_assertions", checked[0], len(checked), "nl_assertions", len(given)))
    given = criteria.get("communicate_info")
    given = given if isinstance(given, list) else []
    checked = _copied_checks(reward_info, "communicate_checks", "info")
    if checked and Counter(map(str, checked)) != Counter(map(str, given)):
        raise _Bad(
            _other_criteria(task_id, "communicate_checks", checked[0], len(checked), "communicate_info", len(given))
        )
    given = criteria.get("env_assertions")
    given = given if isinstance(given, list) else []
    checked = _copied_checks(reward_info, "env_assertions", "env_assertion")
    ran_none = reward_info.get("env_assertions") == []
    if (checked or (ran_none and given)) and Counter(map(_env_assertion_key, checked)) != Counter(
        map(_env_assertion_key, given)
    ):
        first = checked[0] if checked else "none"
        raise _Bad(_other_criteria(task_id, "env_assertions", first, len(checked), "env_assertions", len(given)))


def _copied_checks(reward_info: dict, key: str, field: str) -> list:
    """What tau2 copied into ``reward_info[key]`` (each entry's ``field``); empty where it is
    absent or empty (not evaluated) or not tau2's shape (an older or foreign layout)."""
    checks = reward_info.get(key)
    if not isinstance(checks, list) or not all(isinstance(c, dict) and c.get(field) is not None for c in checks):
        return []
    return [c[field] for c in checks]


def _other_criteria(task_id: str, key: str, first: Any, count: int, field: str, given: int) -> str:
    return (
        f"its reward_info.{key} checked other criteria than task {task_id!r}'s evaluation_criteria.{field} "
        f"({given} there; it checked {count}, e.g. {str(first)[:120]!r}): the task given for it (the file's "
        "`tasks` or a ground-truth tasks.json) is not the one it ran (renumbered, another version, or another "
        "domain's task of the same id), so its ground truth would score RL against another task; give the "
        "tasks.json of the domain and version it ran"
    )


_PARSERS: dict[str, Callable[[Any, str, int], Rollout]] = {
    "openai": _parse_openai,
    "tau2": _parse_tau2,
    "bfcl": parse_bfcl,
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
    bfcl_verifier: str = "call_match",
) -> RolloutSet:
    """Read rollout files into :class:`~lightning_agents.topology.records.Rollout` records.

    Args:
        paths: one file or a list of files; they may mix formats under ``format="auto"``.
        format: ``auto`` (detect per file from its first readable record), ``openai``, ``tau2``
            or ``bfcl``.
        skip_invalid: skip bad records, collecting ``"location: reason"`` in the result's
            ``skipped`` (and logging a count), instead of raising on the first.
        ground_truth: files with each task's ground truth by id: BFCL possible-answer and
            question files, or tau2-bench ``tasks.json`` files (:func:`load_ground_truth`). BFCL
            result files carry no score; with the possible answers each trial is scored by the
            verifier ``bfcl_verifier`` names. A tau2 results file
            without its own ``tasks`` takes each simulation's task from the tau2 task files, by id
            and domain (:func:`~lightning_agents.datamodules.bfcl_rollouts.tau2_ground_truth`), so
            the task files of several domains, all numbered from "0", are given together. Files
            that give one task two values of a field (two versions of one domain's tasks) are refused.
        tools: a JSON file with the list of OpenAI tool schemas the agent was offered, attached
            to every rollout whose file does not record its tools (tau-bench's files do not).
        num_shards: split the tasks into this many shards by a stable hash of the task id.
        shard_index: read only the rollouts of this shard (0-based); other records are skipped
            before they are parsed.
        bfcl_verifier: what scores BFCL trials from the possible answers and is named in their RL
            records: ``call_match`` (:class:`~lightning_agents.tasks.tau_actions.BFCLActionVerifier`)
            or ``execution`` (:class:`~lightning_agents.tasks.bfcl_execution.BFCLExecutionVerifier`,
            BFCL's own verdicts; needs the optional bfcl-eval package and the question files, whose
            environment then goes into each reference).

    Returns:
        A :class:`RolloutSet` (a list of rollouts with a ``skipped`` list, and a ``not_run``
        list of the trials the run recorded as its own error instead of a trajectory: tau-bench's
        empty ``traj`` with ``info.error``, tau2's empty ``messages`` with an ``*_error``
        termination; these are always left out and logged, never scored 0). Trials without a
        ``trial`` field are numbered by their order of appearance within their task, across
        files, so several result files of the same tasks become trials 0, 1, ... Several run
        files of one benchmark pool, in any order: the first file with trials of a task keeps
        their numbers; a later file's trials of that task are numbered after the highest number
        so far, in the later file's order (a trial's own number is kept in
        ``info["source_trial"]`` where it changes). Two trials of one task with one number in the
        same file remain an error (:func:`~lightning_agents.topology.graph.group_by_task`). Task
        ids are per domain where the file names one (tau2's ``info.environment_info.domain_name``,
        or a top-level ``domain`` in a submission's layout without ``info``, kept in
        ``info["domain"]`` and the RL record's ``environment.domain``): when files of
        several domains are pooled, each such task id becomes ``"<domain>/<id>"`` (``airline/11``),
        so airline's task 11 and airline_tighter_policy's are two tasks; a single-domain run keeps
        its files' ids. tau-bench's files name no domain; its airline and retail tasks both
        number from 0, so a tau-bench file's domain is read from its records (the policy that
        opens the system prompt, ``# Airline Agent Policy`` / ``# Retail agent policy``, and the
        tools only one domain has, in the task's ground-truth actions or else in the agent's
        calls) when they all point at one, and named like tau2's (``airline/13``, ``retail/13``;
        ``environment.domain``); tau2's single-record form, which names none either, by its task's
        ground-truth actions. In a file whose records point at several domains (two runs
        concatenated; logged) each record takes its own, and those that point at none or at
        several keep bare ids. A file whose records tell no domain at all (a tau-bench run whose
        trials all raised) joins the pool's one domain of its benchmark, so it never turns a
        single-domain run into a pooled one; with several (logged) it keeps bare ids, never merged
        into one of them. Where tau-bench and tau2 both have a domain of one name in the pool,
        those tasks are ``<benchmark>/<domain>/<id>`` (``tau-bench/airline/11``,
        ``tau2-bench/airline/11``: other versions of the task). Two tasks that would take one name
        (domain ``a``'s task ``b/c`` and domain ``a/b``'s task ``c``, or a file naming no domain
        whose bare id is another's ``<domain>/<id>``) are refused, naming both files. Call
        arguments logged as a Python dict literal (``str(dict)``) instead of JSON are read with
        :func:`ast.literal_eval`, only where the text is exactly what ``str(dict)`` writes for the
        value read (within ``PYTHON_LITERAL_MAX_TOKENS`` tokens and ``PYTHON_LITERAL_MAX_CHARS``
        characters), and kept as JSON (the count logged as a warning).

    Raises:
        RolloutFormatError: naming the file, the record index or line, and what is wrong.
        FileNotFoundError: a path does not exist.
    """
    from lightning_agents.topology.shards import check_shard

    if format != "auto" and format not in FORMATS:
        raise RolloutFormatError(f"unknown rollout format {format!r}; expected auto or one of {', '.join(FORMATS)}")
    check_shard(num_shards, shard_index)
    bfcl_verifier_path(bfcl_verifier)  # an unknown name, or execution without bfcl-eval, fails before any file is read
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
    for names in _same_content(resolved):
        # A warning, not an error: two deterministic runs (greedy agent, scripted user) can write the
        # same bytes; a copy of one run under another name usually is a mistake
        log.warning(
            "rollout files with the same content: %s; if they are one run copied, each of its trials counts "
            "twice (a task's pass rate is unchanged, but its graph's counts and the SFT and RL picks are not)",
            names,
        )
    truth = load_ground_truth(ground_truth) if ground_truth else {}
    schemas = _read_tools(tools) if tools is not None else None
    with paused_gc():
        result = _load(paths, format, skip_invalid, truth, schemas, num_shards, shard_index, bfcl_verifier)
    _warn_per_file(result, num_shards, shard_index)
    conflicts = _conflicting_references(result)
    if conflicts:
        result.conflicting_references = conflicts
        first = next(iter(conflicts.items()))
        log.warning(
            "%d task(s) have different ground truths in different files (another version of the benchmark's "
            "tasks, or another domain whose files name none and whose records do not tell it? pool those "
            "separately): each trial is scored by its own file, but an RL record takes one trial's; first: task %s in %s",
            len(conflicts),
            first[0],
            " vs ".join(first[1][:2]),
        )
    if result.renumbered:
        log.info(
            "renumbered %d trial(s) of tasks an earlier file has: numbered after that task's highest trial so far, "
            "in file order (each keeps its own number in info['source_trial'])",
            result.renumbered,
        )
    return result


# What each per-file warning says after "<file>: ", and before "; first: <location: reason>".
_PER_FILE_WARNINGS = {
    "skipped": "skipped {count} invalid rollout record(s)",
    "not_run": (
        "left out {count} trial(s) that the run recorded as an error of its own instead of a trajectory (not agent "
        "failures, so they do not count against a task's pass rate)"
    ),
    # A warning: the SFT data then carries arguments the files did not write (as JSON), and a
    # harness that logs str(dict) may log other things its own way too.
    "python_literals": (
        "read the tool-call arguments of {count} record(s) written as Python dict literals (str(dict), not JSON) "
        "and kept them as JSON"
    ),
}


def _warn_per_file(result: RolloutSet, num_shards: int, shard_index: int) -> None:
    """One warning per file (and shard) and kind of record noted in ``result``, with the count and the first."""
    shard = f" (shard {shard_index} of {num_shards})" if num_shards > 1 else ""
    for kind, text in _PER_FILE_WARNINGS.items():
        for path, (count, first) in result.per_file.get(kind, {}).items():
            log.warning("%s%s: %s; first: %s", path, shard, text.format(count=count), first)


def _same_content(paths: Sequence[Path]) -> list[list[str]]:
    """Groups of files with byte-identical content (only files of equal size are read)."""
    import hashlib

    by_size: dict[int, list[Path]] = {}
    for path in paths:
        if path.is_file():
            by_size.setdefault(path.stat().st_size, []).append(path)
    groups: dict[str, list[str]] = {}
    for same_size in by_size.values():
        if len(same_size) < 2:
            continue
        for path in same_size:
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            groups.setdefault(digest.hexdigest(), []).append(str(path))
    return [names for names in groups.values() if len(names) > 1]


def _conflicting_references(rollouts: Sequence[Rollout]) -> dict[str, list[str]]:
    """Task ids whose trials carry ground truths that score differently, with the location of one
    trial per version."""
    seen: dict[str, dict[str, str]] = {}
    keys: dict[str, str] = {}  # reference text -> what it scores, each text read once
    for rollout in rollouts:
        reference = rollout.info.get("reference")
        if reference:
            if reference not in keys:
                keys[reference] = _scored_substance(reference, rollout.info.get("verifier"))
            seen.setdefault(rollout.task_id, {}).setdefault(keys[reference], rollout.source)
    return {task: list(sources.values()) for task, sources in seen.items() if len(sources) > 1}


def _scored_substance(reference: str, verifier: str | None) -> str:
    """What a reference makes its verifier score: for the action match, the expected writes, the
    outputs and the reward basis. tau2 versions differ in what it does not read: a null field left
    out, ``requestor: assistant`` written or defaulted, reworded NL assertions (a 2026 airline
    submission against a 2025 one differed so on 43 of 50 tasks with the same actions)."""
    from lightning_agents.tasks.tau_actions import ActionReferenceError, TauActionVerifier

    try:
        parsed = json.loads(reference)
        if verifier == TAU_VERIFIER and isinstance(parsed, dict):
            writes = sorted(TauActionVerifier().expected_writes(parsed).elements())
            outputs = parsed.get("outputs") or parsed.get("communicate_info") or []
            return json.dumps([writes, sorted(map(str, outputs)), sorted(map(str, parsed.get("reward_basis") or []))])
        return json.dumps(parsed, sort_keys=True)
    except (ValueError, RecursionError, ActionReferenceError):
        return reference


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


def _json_type(obj: Any) -> str:
    """The JSON name of a parsed value's type (``list`` is an array, ``str`` a string)."""
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(obj), type(obj).__name__)


def _task_hint(obj: Any, file_format: str) -> str | None:
    if not isinstance(obj, dict):
        return None
    hint = obj.get("task_id", obj.get("id"))
    if file_format == "tau2" and isinstance(obj.get("simulation_run"), dict):
        hint = obj["simulation_run"].get("task_id")
    return None if hint is None else str(hint)


# tau-bench's two domains, as its code names them (tau_bench/envs/<domain>/tools/ and the first
# line of wiki.md, the agent's system prompt, in sierra-research/tau-bench @ 59a200c). Its run files
# name no domain, and both domains number their tasks from 0.
_TAU_BENCH_POLICIES = {"# airline agent policy": "airline", "# retail agent policy": "retail"}
_TAU_BENCH_TOOLS = {
    "airline": {
        "book_reservation", "calculate", "cancel_reservation", "get_reservation_details", "get_user_details",
        "list_all_airports", "search_direct_flight", "search_onestop_flight", "send_certificate", "think",
        "transfer_to_human_agents", "update_reservation_baggages", "update_reservation_flights",
        "update_reservation_passengers",
    },
    "retail": {
        "calculate", "cancel_pending_order", "exchange_delivered_order_items", "find_user_id_by_email",
        "find_user_id_by_name_zip", "get_order_details", "get_product_details", "get_user_details",
        "list_all_product_types", "modify_pending_order_address", "modify_pending_order_items",
        "modify_pending_order_payment", "modify_user_address", "return_delivered_order_items", "think",
        "transfer_to_human_agents",
    },
}  # fmt: skip
# The tools only one domain has (calculate, think, get_user_details, ... are in both).
_TAU_BENCH_TOOL_DOMAIN = {
    tool: domain
    for domain, tools in _TAU_BENCH_TOOLS.items()
    for tool in tools
    if not any(tool in others for other, others in _TAU_BENCH_TOOLS.items() if other != domain)
}
# Set by the OpenAI reader on a rollout whose call arguments it rewrote from Python literals to JSON.
_PYTHON_LITERALS = "_python_literal_arguments"


def _tau_bench_domains(obj: dict) -> set[str]:
    """The tau-bench domains an OpenAI-format record points at; empty for a record that is not
    tau-bench's (no ``info.task`` with ground-truth ``actions``) or tells none.

    The run's own evidence is its system prompt (the domain's policy) and its task's ground-truth
    actions; only where both say nothing do the agent's calls count, since a model may call a
    tool it was not offered.
    """
    info = obj.get("info")
    task = info.get("task") if isinstance(info, dict) else None
    if not isinstance(task, dict) or "actions" not in task:
        return set()
    messages = obj.get("traj", obj.get("messages"))
    messages = messages if isinstance(messages, list) else []
    found = set()
    first = messages[0] if messages else None
    if isinstance(first, dict) and first.get("role") == "system" and isinstance(first.get("content"), str):
        heading = first["content"][:64].lstrip().split("\n", 1)[0].strip().lower()
        if heading in _TAU_BENCH_POLICIES:
            found.add(_TAU_BENCH_POLICIES[heading])
    found |= _action_domains(task.get("actions"))
    if found:
        return found
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if isinstance(calls, list):
            found |= _action_domains([call.get("function") for call in calls if isinstance(call, dict)])
    return found


def _action_domains(actions: Any) -> set[str]:
    """The tau-bench domains whose own tools a list of actions or calls (dicts with a ``name``) uses."""
    return {
        _TAU_BENCH_TOOL_DOMAIN[a["name"]]
        for a in (actions if isinstance(actions, list) else ())
        if isinstance(a, dict) and a.get("name") in _TAU_BENCH_TOOL_DOMAIN
    }


def _tau2_domains(obj: dict) -> set[str]:
    """The domains a tau2 record's task points at by its ground-truth actions' tools (tau2's
    airline and retail domains keep tau-bench's tool names); empty where they tell none."""
    task = obj.get("task") if isinstance(obj.get("task"), dict) else obj.get("_task")
    criteria = task.get("evaluation_criteria") if isinstance(task, dict) else None
    return _action_domains(criteria.get("actions") if isinstance(criteria, dict) else None)


def _record_domains(obj: dict, file_format: str | None) -> set[tuple[str, str]]:
    """The ``(benchmark, domain)`` pairs a record that names no domain points at by its own content."""
    if file_format == "openai":
        return {("tau-bench", name) for name in _tau_bench_domains(obj)}
    if file_format == "tau2":
        return {("tau2-bench", name) for name in _tau2_domains(obj)}
    return set()


# The benchmark whose domain a file of each format that tells none may join (BFCL has no domains).
_FORMAT_BENCHMARK = {"openai": "tau-bench", "tau2": "tau2-bench"}


class _FileRead:
    """One file's records, read before any is numbered: a file's domain may come from all its
    records, and a file whose records tell none from the other files of the pool."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.format: str | None = None
        # (the rollout, the domain the record names or alone points at, or None)
        self.parsed: list[tuple[Rollout, tuple[str, str] | None]] = []
        # (that domain, task id) of every record before the shard filter; a dict keeps the file's order
        self.tasks: dict[tuple, None] = {}
        self.votes: dict[tuple[str, str], str] = {}  # domain a record points at -> the first such record
        self.named = False  # a record names its domain (tau2's Results files)
        # Every record is a tau-bench trial that raised (traj [], info.error, no task): the only
        # file whose telling no domain means "a trial of this run", so the only one that joins.
        self.raised_only = True
        # Tasks of records that point at no one domain (a trial that raised, with no messages, is none)
        self.unknown: list[str | None] = []
        self.domain: tuple[str, str] | None = None  # the whole file's, where it has one

    @property
    def mixed(self) -> bool:
        """Its records point at several domains: each record takes its own."""
        return len(self.votes) > 1

    @property
    def blank(self) -> bool:
        """No record names or points at a domain."""
        return not self.named and not self.votes

    def resolve(self) -> None:
        """The file's domain when its records point at one; a mixed file is logged."""
        if len(self.votes) == 1:
            self.domain = next(iter(self.votes))
        elif self.mixed:
            unknown = self.unknown
            log.warning(
                "%s names no domain and its records point at several domains (%s): each record takes the domain "
                "its own policy, ground-truth actions or calls point at%s",
                self.path,
                ", ".join(f"{name} at {where}" for (_, name), where in sorted(self.votes.items())),
                f"; {len(unknown)} record(s) that point at none or at several keep their bare task ids (first: "
                f"{unknown[0]!r}), apart from those domains' <domain>/<id>"
                if unknown
                else "",
            )

    def join(self, pool: set[tuple[str, str] | None]) -> None:
        """A blank file takes the pool's one domain of its benchmark; with several it keeps bare
        ids (logged): merging its tasks into one of them could join two domains' tasks."""
        bench = _FORMAT_BENCHMARK.get(self.format or "")
        named = {d for d in pool if d is not None}
        if not self.tasks or bench is None or not named:
            return
        candidates = sorted(d for d in named if d[0] == bench)
        # Only a tau-bench run whose trials all raised says nothing because nothing ran. A tau2
        # record without ground-truth actions (7 of tau2's 50 airline tasks, telecom's) or an
        # OpenAI-format file that is not tau-bench's is a real trajectory of an unknown domain:
        # joining would merge its task with another domain's task of the same id.
        if len(candidates) == 1 and self.raised_only and self.format == "openai":
            self.domain = candidates[0]
            return
        if not self.unknown:
            return  # every trial of it raised (no messages): nothing of it is curated
        log.warning(
            "%s: its records name no domain and point at none (no agent policy, ground-truth actions or calls of "
            "one domain), and the pooled files have %s: its %d task(s) keep their bare ids (first: %r), apart from "
            "the others' <domain>/<id>; curate it with its own domain's files alone to pool it with them",
            self.path,
            f"several {bench} domains ({', '.join(name for _, name in candidates)})"
            if len(candidates) > 1
            else f"the {bench} domain {candidates[0][1]!r}, which only a tau-bench run whose trials all raised joins"
            if candidates
            else f"no {bench} domain ({', '.join(sorted(f'{n} ({b})' for b, n in named))})",
            len(set(self.unknown)),
            self.unknown[0],
        )

    def domain_of(self, own: tuple[str, str] | None) -> tuple[str, str] | None:
        """A record's domain: its own where it names or alone points at one in a mixed file, else the file's."""
        return own if own is not None and (self.mixed or self.named) else self.domain


def _domain_labels(domains: set[tuple[str, str] | None]) -> dict[tuple[str, str], str]:
    """How each pooled domain prefixes its task ids: its name, or ``<benchmark>/<name>`` where two
    benchmarks have a domain of that name (tau-bench's airline tasks are not tau2's)."""
    named = [d for d in domains if d is not None]
    count = Counter(name for _, name in named)
    return {(bench, name): name if count[name] == 1 else f"{bench}/{name}" for bench, name in named}


def _check_pooled_names(task_files: dict[tuple, str], labels: dict[tuple[str, str], str]) -> None:
    """Refuse a pool where two tasks get one name: a task id with a ``/`` (domain ``a``'s task
    ``b/c`` against domain ``a/b``'s task ``c``), or a file naming no domain whose id is another
    file's ``<domain>/<id>``. Trials of the two would be curated as one task's."""
    owners: dict[str, tuple] = {}
    for (domain, task), path in task_files.items():
        name = task if domain is None else f"{labels[domain]}/{task}"
        owner = owners.setdefault(name, (domain, task, path))
        if owner[:2] != (domain, task):

            def what(domain, task, path):
                where = "no domain" if domain is None else f"domain {domain[1]!r} ({domain[0]})"
                return f"task {task!r} of {where} in {path}"

            raise RolloutFormatError(
                f"pooled rollout files name two tasks {name!r}: {what(*owner)} and {what(domain, task, path)}; "
                "curate those files in separate runs"
            )


def _raised_trial(obj: Any) -> bool:
    """A tau-bench trial that raised: its ``run.py`` writes ``traj: []`` and the exception in
    ``info.error``, with no ``info.task``, so nothing in it tells a domain."""
    info = obj.get("info") if isinstance(obj, dict) else None
    return (
        isinstance(info, dict)
        and "error" in info
        and "task" not in info
        and not obj.get("traj")
        and not obj.get("messages")
    )


def _lacks_task(obj: dict) -> bool:
    """A tau2 simulation whose file carries no task for it (a results file without ``tasks``)."""
    return obj.get("_task") is None and not isinstance(obj.get("task"), dict)


def _tau2_directory_note(path: str | Path) -> str:
    """What to do with tau2's directory layout, given its folder or its ``results.json``.

    tau2's newer runner writes a run as a folder: ``results.json`` (info and tasks, no
    simulations) and ``simulations/<id>.json``, one file each; only the single ``Results`` file is
    a rollout file, and tau2-bench converts one layout into the other itself (``tau2
    convert-results``, ``src/tau2/cli.py``)."""
    return (
        "it is tau2's directory layout of a run (results.json holds its info and tasks, the simulations are "
        "files in the simulations/ folder beside it), which is not read: convert it into one tau2 Results file "
        f"with tau2-bench's own command `tau2 convert-results {path} --to json` (it writes every simulation into "
        "results.json, keeping a .bak copy) and pass that results.json"
    )


def _is_tau2_directory_results(obj: Any) -> bool:
    """Whether ``obj`` is the ``results.json`` of tau2's directory layout (info and tasks, no simulations)."""
    return isinstance(obj, dict) and {"info", "tasks"} <= set(obj) and not {"simulations", "simulation_run"} & set(obj)


# A tau2 policy's heading: "# Airline Agent Policy", "# Medical Triage Agent Policy", "# Retail agent policy".
_POLICY_HEADING = re.compile(r"#+\s*(.+?)\s+(?:agent\s+)?polic(?:y|ies)\s*", re.IGNORECASE)
_GENERIC_WORDS = {"agent", "policy", "domain", "tau2", "the"}


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - _GENERIC_WORDS


def _called_domains(sim: dict) -> dict[str, str]:
    """The tau-bench domains (tau2's airline and retail keep its tool names) whose own tools the
    agent of tau2 simulation ``sim`` called with success, each with the first such tool. A call
    answered without error shows the environment has the tool: tau2 answers a tool its domain
    lacks with an error, so a failed call (a model may call a tool it was not offered) tells nothing."""
    messages = sim.get("messages") if isinstance(sim.get("messages"), list) else []
    answered = {
        m.get("id"): not m["error"] if m.get("error") is not None else not is_error_text(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool" and m.get("requestor", "assistant") == "assistant"
    }
    found: dict[str, str] = {}
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            name = call.get("name") if isinstance(call, dict) else None
            if name in _TAU_BENCH_TOOL_DOMAIN and answered.get(call.get("id")) and call.get("requestor") != "user":
                found.setdefault(_TAU_BENCH_TOOL_DOMAIN[name], name)
    return found


def _not_of_domain(sim: dict, domain: str | None, task: dict | None = None) -> str | None:
    """Why tau2 simulation ``sim`` did not run a task of ``domain`` (``task``: the task, for one
    naming no domain); ``None`` where nothing in it says so. Its policy (its own, else its file's)
    headed with another domain's name ("# Medical Triage Agent Policy" against airline) says so:
    tau2's policies are headed with their domain's name ("# Airline Agent Policy", "# Retail agent
    policy"), and a variant's with its base's. A policy without such a heading (telecom's starts
    ``<main_policy>``) tells nothing.

    Neither do the tools the agent called, mostly: the gold actions of a domain's tasks leave out
    most of its tools (telecom's hold none of the lookups its agents call, medical_triage's none at
    all). What does tell is a call answered without error to a tool only the other of tau2's
    airline and retail domains has (:func:`_called_domains`), where the task is airline's or
    retail's (the domain it names, its base's, or else its gold actions' tools): a retail
    simulation whose file names no domain found users by email, which airline cannot."""
    policy = sim.get("policy") if isinstance(sim.get("policy"), str) and sim.get("policy") else sim.get("_policy")
    first = next((line.strip() for line in policy.splitlines() if line.strip()), "") if isinstance(policy, str) else ""
    heading = _POLICY_HEADING.fullmatch(first)
    if domain is not None and heading and _words(heading.group(1)) and not _words(heading.group(1)) & _words(domain):
        return f"its policy is headed {first!r}, which is not the {domain} domain's"
    # The task's tau-bench domain, by the domain it names (or its base's) or else its gold actions' tools.
    bases = {d for d in _TAU_BENCH_TOOLS if domain == d or tau2_variant_of(domain, d)} if domain else set()
    if not domain and isinstance(task, dict):
        bases = _tau2_domains({"_task": task})
    others = {d: tool for d, tool in _called_domains(sim).items() if d not in bases}
    if len(bases) == 1 and others:
        (other, tool), (base,) = next(iter(others.items())), bases
        named = f"the {domain} domain's" if domain else f"{base}'s by its actions' tools"
        return (
            f"its agent called {tool} with success, a tool only the {other} domain has (tau-bench's and tau2's "
            f"tool names), and the task is {named}"
        )
    return None


def _own_task_file(source: str | None, domain: str) -> bool:
    """Whether tau2 task file ``source`` is ``domain``'s own by its place (tau2's
    ``data/tau2/domains/<domain>/tasks.json``) or name (``<domain>_tasks.json``): a variant
    domain's own tasks name their base domain (blakeelias's airline-relaxed tasks name airline)."""
    if source is None:
        return False
    path = Path(source)
    before_tasks = path.stem.split("tasks")[0].rstrip("_-.")
    return (
        path.parent.name == domain or re.search(rf"(?:^|[^A-Za-z0-9-]){re.escape(domain)}$", before_tasks) is not None
    )


def _check_taken_task(
    obj: dict, named: str | None, task_domain: str | None, source: str | None, task_id: str, task: dict | None = None
) -> None:
    """Refuse (``_Bad``) a tau2 simulation taking a task of ``task_domain`` from ``source`` where no
    task file of its own domain ``named`` (``None``: its file names none) was given, when it is
    clear that it ran another domain: ``named`` is another domain than ``task_domain`` and no
    variant of it, or its policy or its agent's answered calls (:func:`_not_of_domain`) show
    another domain. Its reward_info's own checks are compared in :func:`_check_scored_against`."""
    given_by = f" (from {source})" if source else ""
    if named is not None and task_domain is not None and not tau2_variant_of(named, task_domain):
        raise _Bad(
            f"this simulation's domain {named!r} has no task file among the ground truth, and task {task_id!r} "
            f"there is the {task_domain!r} domain's{given_by}: another domain's task, which it did not run (only a "
            f"variant named {task_domain}_... or {task_domain}-..., as airline_tighter_policy of airline, runs "
            f"{task_domain}'s tasks); give {named}'s own tasks.json (tau2-bench's data/tau2/domains/{named}/"
            "tasks.json) as ground truth"
        )
    why = _not_of_domain(obj, task_domain, task)
    if why is not None:
        whose = (
            "its file names no domain (tau2's info.environment_info.domain_name, or a top-level `domain`)"
            if named is None
            else f"its domain {named!r} has no task file among the ground truth"
        )
        raise _Bad(
            f"{whose}, so it took task {task_id!r} of the {task_domain or '(none named)'} tasks{given_by}, which it "
            f"did not run: {why}; give the tasks.json of the domain it ran"
        )


def _warn_taken(taken: dict[tuple[str, str | None, str | None], list]) -> None:
    """Warn, once per (file, its domain, the tasks' domain), of tau2 simulations scored against
    tasks whose domain is not known to be theirs (see :func:`_check_taken_task`)."""
    for (path, named, task_domain), (where, source, count) in taken.items():
        tasks = f"the {task_domain!r} domain's tasks" if task_domain else "tasks that name no domain ((none named))"
        if named is None:
            whose = "name no domain (tau2's info.environment_info.domain_name, or a top-level `domain`)"
        elif task_domain is None:
            whose = f"are of domain {named!r}, and no task file of that domain is among the ground truth"
        else:
            whose = (
                f"are of domain {named!r}, a variant of {task_domain!r} by its name, and no task file naming "
                f"{named!r} is among the ground truth"
            )
        log.warning(
            "%s: its simulations %s: %d of them take %s of their ids from %s (first: %s); their policy names no other "
            "domain, but if they ran another domain, give its own tasks.json instead",
            path,
            whose,
            count,
            tasks,
            source or "the ground truth",
            where,
        )


def _other_shard(task_hint: Any, num_shards: int, shard_index: int) -> bool:
    """Whether a record that failed to parse is counted by another shard. One that names no task
    belongs to no shard and every shard reads it: shard 0 alone counts it, so the counts of a
    merge are those of a run in one process (each shard counted it, twice for two shards)."""
    return num_shards > 1 and task_hint is None and shard_index != 0


def _load(paths, format, skip_invalid, truth, schemas, num_shards, shard_index, bfcl_verifier) -> RolloutSet:
    from lightning_agents.topology.shards import shard_of

    result = RolloutSet()
    # A domain is (benchmark, name), or None where the file names none and none is inferred.
    seen: dict[tuple, int] = {}  # (domain, task) -> next trial number for a record without one
    first_file: dict[tuple, int] = {}  # (domain, task) -> index of the first file with a trial of it
    top: dict[tuple, int] = {}  # (domain, task) -> highest trial number so far
    moved: dict[tuple, dict[int, int]] = {}  # (domain, task, file index) -> its own trial number -> new one
    domains: set[tuple[str, str] | None] = set()
    keys: list[tuple[str, str] | None] = []  # the domain of each rollout in result
    task_files: dict[tuple, str] = {}  # (domain, task id) -> the first file with it, every shard alike
    no_truth: dict[str, list[str]] = {}  # BFCL records whose id the ground-truth files lack, by file
    truth_domains = tau2_domains(truth)  # the domains of the tau2 task files given
    tau2_files = getattr(truth, "tau2_files", {})
    # (file, its domain, the tasks' domain) -> [first record, the tasks' file, how many], for a warning
    taken: dict[tuple[str, str | None, str | None], list] = {}
    files: list[_FileRead] = []
    for path in paths:
        file = _FileRead(path)
        files.append(file)
        file_format = None if format == "auto" else format
        for where, obj, text in _read_records(path):
            task_hint = None  # not the previous record's where this one fails before naming a task
            try:
                if isinstance(obj, RolloutFormatError):
                    raise obj
                if file_format in (None, "tau2") and _is_tau2_directory_results(obj):
                    # Read as a tau2 record (format=tau2) it failed on a missing task_id instead.
                    raise RolloutFormatError(f"{where}: {_tau2_directory_note(path)}")
                if file_format is None:
                    file_format = detect_format(obj)
                    if file_format is None:
                        if isinstance(obj, dict):
                            what = f"fields {sorted(obj)[:8]}"
                        else:
                            # A line that is only the model's output (a result file of its own
                            # layout: one JSON list of call strings per line) names no task.
                            what = (
                                f"a JSON {_json_type(obj)} ({json.dumps(obj)[:80]}), not a record: an object naming "
                                "its task and holding the trial"
                            )
                        hint = f"; {SINGLE_TURN_NOTE}" if isinstance(obj, dict) and "result" in obj else ""
                        raise RolloutFormatError(
                            f"{where}: cannot tell the rollout format ({what}); expected 'traj'/'messages' (openai), "
                            "'simulation_run'/'simulations' (tau2) or 'inference_log'/'result' (bfcl) records, or "
                            f"give the format setting (load_rollouts format=, curate --format: openai, tau2 or bfcl){hint}"
                        )
                task_hint = _task_hint(obj, file_format)
                if not _raised_trial(obj):
                    file.raised_only = False
                own = None
                if isinstance(obj, dict):  # a malformed record (skipped later) names no domain
                    if obj.get("_domain") is not None:
                        own = ("tau2-bench", str(obj["_domain"]))
                        file.named = True
                    else:
                        pointed = _record_domains(obj, file_format)
                        for domain in sorted(pointed):
                            file.votes.setdefault(domain, where)
                        own = next(iter(pointed)) if len(pointed) == 1 else None
                        if own is None and (file_format != "openai" or obj.get("traj", obj.get("messages"))):
                            file.unknown.append(task_hint)
                    # Before the shard filter: every shard names tasks alike.
                    file.tasks.setdefault((own, task_hint))
                if num_shards > 1 and task_hint is not None and shard_of(task_hint, num_shards) != shard_index:
                    continue
                # None: a record without a trial number is numbered below, once it is known whether
                # an earlier file has its task (then it goes after the highest number so far)
                default_trial = None
                if file_format == "bfcl":
                    if truth and str(task_hint) not in truth:
                        no_truth.setdefault(str(path), []).append(str(task_hint))
                    rollout = parse_bfcl(obj, where, default_trial, truth.get(str(task_hint)), bfcl_verifier)
                else:
                    if file_format == "tau2" and truth and isinstance(obj, dict) and _lacks_task(obj):
                        named = obj.get("_domain")
                        task, task_domain = tau2_ground_truth(
                            truth.get(str(task_hint)), named, str(task_hint), truth_domains
                        )
                        if task is not None and task_domain != named and (named is None or named not in truth_domains):
                            # Not its own domain's task file: a variant's base domain's tasks, the
                            # tasks of a file naming no domain, or (refused) another domain's.
                            source = tau2_files.get((str(task_hint), task_domain))
                            _check_taken_task(obj, named, task_domain, source, str(task_hint), task)
                            if named is None or task_domain is None or not _own_task_file(source, named):
                                taken.setdefault((str(path), named, task_domain), [where, source, 0])[2] += 1
                        if task is None:
                            no_truth.setdefault(str(path), []).append(str(task_hint))
                        else:
                            obj = dict(obj, _task=task)
                    rollout = _PARSERS[file_format](obj, where, default_trial)
                if rollout.info.pop(_PYTHON_LITERALS, 0):
                    # Its messages were rewritten with JSON arguments: they, not the record's text, are kept.
                    result.note("python_literals", path, where)
                elif text is not None and file_format == "openai":
                    # The parsed messages are the record's own list; its text is a quarter of
                    # their memory and only the trials written out need them again.
                    rollout.messages = EncodedMessages(text, "traj" if "traj" in obj else "messages")
            except _NotRun as exc:
                if _other_shard(task_hint, num_shards, shard_index):
                    continue
                result.not_run.append(f"{where}: {exc}")
                result.note("not_run", path, result.not_run[-1])
                continue
            except _Bad as exc:
                message = f"{where}: {exc} ({file_format} format)"
                if not skip_invalid:
                    raise RolloutFormatError(message) from None
                if _other_shard(task_hint, num_shards, shard_index):
                    continue
                result.skipped.append(message)
                result.note("skipped", path, message)
                continue
            except RolloutFormatError as exc:
                if not skip_invalid:
                    raise
                if _other_shard(task_hint, num_shards, shard_index):
                    continue
                result.skipped.append(str(exc))
                result.note("skipped", path, str(exc))
                continue
            if num_shards > 1 and shard_of(rollout.task_id, num_shards) != shard_index:
                continue
            file.parsed.append((rollout, own))
        file.format = file_format
        file.resolve()
    # The pool's domains from the files whose records tell them; a tau-bench run whose trials all
    # raised (written with no task) then joins the one tau-bench domain, so it does not split a
    # single-domain run; any other file that tells none keeps bare ids (see _FileRead.join).
    pool = {file.domain_of(own) for file in files if not file.blank for own, _ in file.tasks}
    for file in files:
        if file.blank:
            file.join(pool)
    for file_index, file in enumerate(files):
        path = file.path
        for own, task in file.tasks:
            domain = file.domain_of(own)
            domains.add(domain)
            if task is not None:
                task_files.setdefault((domain, task), str(path))
        for rollout, own in file.parsed:
            domain = file.domain_of(own)
            key = (domain, rollout.task_id)
            if rollout.trial is None:
                # Unnumbered: numbered by its order of appearance within its task, across files,
                # never through a later file's mapping of its own numbers (where it could take a
                # number one of that file's numbered trials is mapped to).
                rollout.trial = seen.get(key, 0) if first_file.get(key, file_index) == file_index else top[key] + 1
                first_file.setdefault(key, file_index)
            elif first_file.setdefault(key, file_index) != file_index:
                # Another run file of a task an earlier file has: its trials are numbered after the
                # highest number so far, in its own order, whatever numbers it gives them. The
                # mapping is per file, so two trials of one file with one number still collide.
                mapping = moved.setdefault((*key, file_index), {})
                if rollout.trial not in mapping:
                    mapping[rollout.trial] = top[key] + 1
                    top[key] += 1
                if mapping[rollout.trial] != rollout.trial:
                    rollout.info["source_trial"] = rollout.trial
                    rollout.trial = mapping[rollout.trial]
                    result.renumbered += 1
            top[key] = max(top.get(key, -1), rollout.trial)
            if domain is not None:
                rollout.info["domain"] = domain[1]
                environment = rollout.info.get("environment")
                if isinstance(environment, dict) and environment.get("benchmark") == domain[0]:
                    # What an RL environment needs to rebuild the trial: the env's domain name.
                    environment.setdefault("domain", domain[1])
            if schemas is not None and not rollout.tools:
                rollout.tools = schemas
            seen[key] = max(seen.get(key, 0), rollout.trial + 1)
            result.append(rollout)
            keys.append(domain)
        file.parsed = []
    if len(domains) > 1:
        # Several domains pooled: their task ids overlap (tau2 airline and airline_tighter_policy,
        # tau-bench airline and retail, all number tasks from 0), so each task is named by its
        # domain. A single-domain run keeps the ids its files use.
        labels = _domain_labels(domains)
        _check_pooled_names(task_files, labels)
        for rollout, domain in zip(result, keys):
            if domain is not None:
                rollout.task_id = f"{labels[domain]}/{rollout.task_id}"
    _warn_taken(taken)
    for path, ids in no_truth.items():
        # Usually the possible answers of another category or the tasks of another domain.
        log.warning(
            "%s: %d records have no entry in the ground-truth files (e.g. %s); they get no ground truth from them",
            path,
            len(ids),
            ", ".join(sorted(set(ids))[:3]),
        )
    return result
