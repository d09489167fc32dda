"""BFCL multi-turn result files as rollouts, scored against BFCL's possible answers.

A result record (``id``, ``result`` and, with ``--include-input-log``, ``inference_log``) gives the
calls per turn (``info["turn_calls"]``: per turn, ``(name, arguments)``, or ``(name, arguments,
False)`` for a call whose logged result was an error); its ``state_info`` snapshots give the
environment states. A record of a failed inference is a trial never played. Question and
possible-answer files (:func:`load_ground_truth`) give the user's turns, the tools (from
``multi_turn_func_doc/``), miss_func's held-out functions and the ground truth; the question file's
environment (``initial_config``, ``involved_classes``) goes into each trial's reference.
:data:`BFCL_VERIFIERS` are the verifiers that may score trials from the possible answers and be named in
their records: call match (the default) or execution in BFCL's own classes (``bfcl_verifier``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lightning_agents.datamodules._rollout_fields import (
    RolloutFormatError,
    _Bad,
    _first_line,
    _NotRun,
    _parse_arguments,
    _require,
    _reward,
    _task_id,
    _trial,
)
from lightning_agents.json_text import JSONTextError, loads_json
from lightning_agents.tasks.bfcl_execution import BFCL_API_CLASSES, doc_tool, json_schema
from lightning_agents.tasks.tau_actions import BFCL_READ_ONLY_TOOLS
from lightning_agents.topology.records import CALL, OBSERVATION, TEXT, Rollout, Step, TurnEndState
from lightning_agents.topology.signatures import canonical_arguments, hash_observation, is_error_text, is_read_only_tool

__all__ = [
    "BFCL_EXECUTION_VERIFIER",
    "BFCL_VERIFIER",
    "BFCL_VERIFIERS",
    "BFCL_WORLD_TASK",
    "GroundTruth",
    "bfcl_inference_failed",
    "bfcl_verifier",
    "ground_truth_order_matters",
    "load_ground_truth",
    "parse_bfcl",
    "tau2_domains",
    "tau2_ground_truth",
    "tau2_variant_of",
]

log = logging.getLogger(__name__)

#: The call-match verifier (the calls alone; no optional package), the default.
BFCL_VERIFIER = "lightning_agents.tasks.tau_actions.BFCLActionVerifier"
#: The execution verifier (BFCL's own API classes, from the optional bfcl-eval package).
BFCL_EXECUTION_VERIFIER = "lightning_agents.tasks.bfcl_execution.BFCLExecutionVerifier"
#: ``bfcl_verifier`` (``curate --bfcl_verifier``, ``TopoCurateDataModule(bfcl_verifier=...)``): which
#: verifier scores BFCL trials from the possible answers and is named in their RL records.
BFCL_VERIFIERS = {"call_match": BFCL_VERIFIER, "execution": BFCL_EXECUTION_VERIFIER}
#: The task that BFCL RL records scored by execution name: RSTG runs their episodes in its world.
BFCL_WORLD_TASK = "lightning_agents.tasks.bfcl_world.BFCLWorldTask"


#: How BFCL's runner starts ``result`` when the model's inference failed (API error, crash): the
#: record then holds ``id``, that text and a ``traceback``, and no turn was played.
_INFERENCE_ERROR = "Error during inference"


def bfcl_inference_failed(record: Any) -> bool:
    """Whether a BFCL result record is BFCL's note of a failed inference (``{"id", "result": "Error
    during inference: ...", "traceback"}``): a trial never played, not a model that did nothing."""
    return (
        isinstance(record, dict)
        and "inference_log" not in record
        and isinstance(record.get("result"), str)
        and record["result"].startswith(_INFERENCE_ERROR)
    )


def bfcl_verifier(choice: str = "call_match") -> str:
    """The class path of the verifier that scores BFCL trials and that their records name.

    Call match is the default so that rewards, SFT picks and RL records do not change with what a
    machine has installed; ``execution`` scores as BFCL does (800 of 800 real trials against 656).

    Args:
        choice: ``call_match`` or ``execution``.

    Raises:
        ValueError: another choice (naming the setting).
        ImportError: ``execution`` without the ``bfcl-eval`` package (naming the install command).
    """
    if choice not in BFCL_VERIFIERS:
        raise ValueError(f"bfcl_verifier={choice!r}: expected one of {', '.join(BFCL_VERIFIERS)}")
    if choice == "execution":
        _execution_verifier()  # fails here, naming the install command, rather than at the first record
    return BFCL_VERIFIERS[choice]


def _execution_verifier() -> Any:
    """The process's execution verifier (:func:`~lightning_agents.tasks.bfcl_execution.shared_verifier`),
    its ImportError naming this setting too."""
    from lightning_agents.tasks.bfcl_execution import BFCL_EVAL_INSTALL, shared_verifier

    try:
        return shared_verifier()
    except ImportError as exc:
        raise ImportError(
            "bfcl_verifier=execution scores BFCL trials in BFCL's own API classes, from the "
            f"bfcl-eval package: {BFCL_EVAL_INSTALL} (or set bfcl_verifier=call_match). {exc}"
        ) from exc


def bfcl_read_only(name: str) -> bool:
    """Whether BFCL function ``name`` changes nothing BFCL's checker compares: BFCL's own list
    (:data:`~lightning_agents.tasks.tau_actions.BFCL_READ_ONLY_TOOLS`), else the name guess (a
    function outside BFCL's classes), the rule :class:`~lightning_agents.tasks.tau_actions.BFCLActionVerifier`
    scores with."""
    return name in BFCL_READ_ONLY_TOOLS or is_read_only_tool(name)


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
            parameters = json_schema(tool.get("input_schema") or tool.get("parameters")) or {
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


def _assistant_turn(
    parts: list[Any],
    what: Callable[[int], str],
    call_id: Callable[[int], str],
    steps: list[Step],
    messages: list[dict],
    turn_calls: list[tuple[str, dict]],
) -> list[dict]:
    """One assistant reply of ``{name: arguments}`` calls and text, as steps and one message, in
    either record form (``inference_log`` or ``result``); returns its OpenAI tool calls.

    Args:
        parts: the reply's parts.
        what: names part ``c`` in an error message.
        call_id: the id of part ``c``'s call.
        steps, messages, turn_calls: appended to.
    """
    calls, texts = [], []
    for c, part in enumerate(parts):
        call = _bfcl_call(part, lambda: what(c))
        if call is None:
            texts.append(part)
            continue
        name, arguments = call
        steps.append(Step(CALL, "assistant", name, arguments))
        turn_calls.append(call)
        calls.append(
            {"id": call_id(c), "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        )
    text = "\n".join(texts)
    if calls:
        messages.append({"role": "assistant", "content": text, "tool_calls": calls})
    else:
        steps.append(Step(TEXT, "assistant", None, None, text))
        messages.append({"role": "assistant", "content": text})
    return calls


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


SINGLE_TURN_NOTE = (
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
    verifier: str = "call_match",
) -> Rollout:
    task_id = _task_id(obj.get("id"), "id")
    if not steps:
        raise _Bad("no turn found (neither inference_log nor result holds one)")
    # The topology tells BFCL's reads by BFCL's own list, as the verifier does, not by the name
    # guess alone (which takes `sort`, `compute_exchange_rate` or `displayCarStatus` for writes).
    info: dict[str, Any] = {"turn_calls": turn_calls, "read_only_tools": BFCL_READ_ONLY_TOOLS}
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
            if truth.get("tool_classes"):
                # Which API instance each tool reads or changes (the verifier keys reads with its writes only).
                reference["tool_classes"] = truth["tool_classes"]
            if "environment" in info:
                # Inline, not a path to the question file: an RL record is scored where it is read,
                # from its reference alone; it adds 4.5% to a BFCL RL record (median, ~21 KB).
                reference["environment"] = info["environment"]
            info["reference"] = json.dumps(reference, sort_keys=True)
            info["ground_truth"] = truth["ground_truth"]
            info["verifier"] = verifier = bfcl_verifier(verifier)
            if verifier == BFCL_EXECUTION_VERIFIER:
                _check_execution_reference(reference, task_id)
                # Its RL record names the task whose world runs the episode in BFCL's classes, so that
                # RSTG plays it (the call-match verifier's records stay without one: no world there).
                info["task"] = BFCL_WORLD_TASK
            if reward is None:
                reward = _score(verifier, turn_calls, reference, task_id)
                info["reward_source"] = "possible_answer"
    return Rollout(task_id, _trial(obj.get("trial"), trial_default), reward, steps, messages, tools, where, info)


def _check_execution_reference(reference: dict, task_id: str) -> None:
    """Refuse a trial the execution verifier could not score, before its RL record is written."""
    from lightning_agents.tasks.tau_actions import ActionReferenceError

    if "environment" not in reference:
        raise _Bad(
            f"task {task_id!r} has no environment for bfcl_verifier=execution (initial_config, "
            "involved_classes): pass its BFCL question file (BFCL_v4_<category>.json) in ground_truth beside the "
            "possible answers, or set bfcl_verifier=call_match"
        )
    try:
        _execution_verifier().check_reference(reference)
    except ActionReferenceError as exc:
        raise _Bad(f"task {task_id!r}: its ground truth cannot be executed: {exc}") from None


def _score(verifier: str, turn_calls: list, reference: dict, task_id: str) -> float:
    """The trial's reward from the possible answer, by the verifier its records name."""
    if verifier == BFCL_EXECUTION_VERIFIER:
        scorer = _execution_verifier()
    else:
        from lightning_agents.tasks.tau_actions import BFCLActionVerifier

        scorer = BFCLActionVerifier()
    try:
        return scorer.score_turns(turn_calls, reference)
    except ValueError as exc:
        raise _Bad(f"cannot score against the possible answer of {task_id!r}: {exc}") from None


def parse_bfcl(
    obj: Any, where: str, trial_default: int, truth: dict | None = None, verifier: str = "call_match"
) -> Rollout:
    """A BFCL result record as a rollout (``truth``: its entry of :func:`load_ground_truth`;
    ``verifier``: a key of :data:`BFCL_VERIFIERS`, which scores it from the possible answer)."""
    if not isinstance(obj, dict):
        raise _Bad(f"expected an object, got {type(obj).__name__}")
    if bfcl_inference_failed(obj):
        raise _NotRun(f"BFCL recorded no trial: {_first_line(obj['result'])}")
    if "inference_log" not in obj:
        return _parse_bfcl_result(obj, where, trial_default, truth, verifier)
    log_entries = _require(obj, "inference_log", list)
    steps: list[Step] = []
    messages: list[dict] = []
    turn_calls: list[list[tuple]] = []
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
            # The calls of the last reply still waiting for their result, with their index in the turn.
            pending: list[tuple[dict, int]] = []
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
                    first_call = len(turn_calls[-1])
                    calls = _assistant_turn(
                        content,
                        lambda c: f"{where_step}[{k}].content[{c}]",
                        lambda c: f"call_{turns}_{key[5:]}_{c}",
                        steps,
                        messages,
                        turn_calls[-1],
                    )
                    if calls:
                        pending = [(call, first_call + i) for i, call in enumerate(calls)]
                elif role == "tool":
                    text = content if isinstance(content, str) else json.dumps(content)
                    call, index = pending.pop(0) if pending else (None, None)
                    name = call["function"]["name"] if call else ""
                    error = is_error_text(text)
                    if error and index is not None:
                        # BFCL's execution rejected the call ({"error": ...}): it changed nothing, and the
                        # verifier must not count it as a write (turn_calls: (name, arguments, False)).
                        turn_calls[-1][index] = (*turn_calls[-1][index][:2], False)
                    steps.append(Step(OBSERVATION, "tool", name, None, text, error))
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"] if call else "", "name": name, "content": text}
                    )
        added = ((truth or {}).get("tools_added") or tools_added).get(turns - 1)
        if added and first_message < len(messages) and messages[first_message]["role"] == "user":
            message = messages[first_message]
            messages[first_message] = {**message, "content": _holdout_message(message["content"], added)}
    return _bfcl_finish(obj, where, trial_default, steps, messages, tools, turn_calls, truth, tools_added, verifier)


def _parse_bfcl_result(obj: dict, where: str, trial_default: int, truth: dict | None, verifier: str) -> Rollout:
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
            if str(obj.get("id", "")).startswith("multi_turn"):
                # A multi-turn id with flat turns: blaming single-turn categories would send the
                # user looking for another file when this one is malformed (AIREV's results).
                raise _Bad(
                    f"result[{t}] is a {type(turn).__name__}, not a list of steps: this multi-turn record's "
                    "'result' holds one value per turn instead of BFCL's multi-turn layout, a list per turn of "
                    "the model's steps (each a list of {name: arguments} calls, or the step's text); in this "
                    "layout a turn's steps cannot be told apart, so it is not read"
                )
            raise _Bad(f"result[{t}] must be a list of steps, got {type(turn).__name__}; {SINGLE_TURN_NOTE}")
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
            calls = _assistant_turn(
                parts,
                lambda c: f"result[{t}][{k}][{c}]",
                lambda c: f"call_{t + 1}_{k}_{c}",
                steps,
                messages,
                turn_calls[-1],
            )
            # BFCL ran each call before the model's next step; only its output went unlogged. In
            # the topology a call with no observation stays pending: it was never a write, so the
            # trial's writes and strategy were empty and, pooled with a run that logged outputs,
            # every state-changing call split the trials as if it were a decision. The output is
            # unknown (empty here, as for the verifier, which counts such a call as made); the SFT
            # messages get no invented tool message.
            steps.extend(Step(OBSERVATION, "tool", call["function"]["name"], None, "") for call in calls)
        if turn:
            # The state after the turn, keyed with the turn as the inference_log reader keys its
            # state_info snapshots: without it, a read the user asks for again in a later turn
            # came back to the node of the first one, a loop, and a perfect trial lost efficiency
            # (glyphh-ada-1.1 multi_turn_miss_param_139: loops 1, efficiency 0.75). No snapshot
            # was logged, so the state is named by the writes made so far, in order; the graph
            # tells the writes again with the read-only tools it is given (TurnEndState).
            steps[-1].state = TurnEndState(f"{t + 1}:{_writes_digest(turn_calls)}", t + 1, turn_calls)
    return _bfcl_finish(obj, where, trial_default, steps, messages, None, turn_calls, truth, verifier=verifier)


def _writes_digest(turn_calls: list[list[tuple]]) -> str:
    """A name for the state a result-only record's writes so far leave (no snapshot was logged):
    its writes in order (BFCL's own read-only list tells the reads), apart from every
    ``state_info`` hash by its ``calls:`` prefix. The quotient graph keys the state by the writes
    its own read-only tools tell (the same ones unless ``selection.read_only_tools`` is given)."""
    writes = [(c[0], canonical_arguments(c[1])) for turn in turn_calls for c in turn if not bfcl_read_only(c[0])]
    return "calls:" + hash_observation(json.dumps(writes))


class GroundTruth(dict):
    """:func:`load_ground_truth`'s result: ground truth by task id (a plain ``dict`` otherwise).

    ``tau2_files`` maps ``(task id, domain its task names or None)`` to the file the tau2 task was
    first read from, so that messages about a task taken by a simulation name its file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tau2_files: dict[tuple[str, str | None], str] = {}


def load_ground_truth(paths: str | Path | Sequence[str | Path]) -> GroundTruth:
    """Ground truth by task id from BFCL possible-answer and question files (JSON Lines, ``id`` per
    line) or tau2-bench task files (a JSON list of tasks, ``data/tau2/domains/<domain>/tasks.json``).

    Possible-answer lines give ``ground_truth`` (the call strings per turn), question lines the
    user's ``question`` turns, ``initial_config`` and ``involved_classes``; both may be given and
    are merged per id. Tool schemas come from ``multi_turn_func_doc/`` next to a question file.
    A tau2 task is kept whole, per domain: as ``tau2_task:<domain>`` where the task names its
    domain (``user_scenario.instructions.domain``, as every task of tau2's airline, retail,
    telecom and medical_triage files does), else as ``tau2_task``. Simulations of a results file
    without its own ``tasks`` (some leaderboard submissions) take their task from it by
    ``task_id`` and their domain (:func:`tau2_ground_truth`), so the task files of several domains,
    which all number their tasks from "0", are given together.

    A task given twice with the same values (one file given twice, a copy) merges silently, and a
    later file may add fields an earlier one lacks (a question file after its possible answers).
    Two values of one field of one task are refused: the later one used to replace the earlier
    one silently (two versions of one domain's ``tasks.json``, two versions of a BFCL file).

    Raises:
        RolloutFormatError: a line that is not a JSON object with an ``id``, a JSON list whose
            items are not tau2 tasks (naming file and line or item), or two places (files, lines
            or items) that give one task's field other values (naming both, the id and the field).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    truth = GroundTruth()
    given: dict[tuple[str, str], str] = {}  # (task id, field) -> where its value was read
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"ground-truth file {path} does not exist")
        if _starts_with_list(path):
            for index, (task_id, task) in enumerate(_tau2_tasks(path)):
                _give(truth, given, task_id, {_tau2_field(task): task}, f"{path}[{index}]")
                truth.tau2_files.setdefault((task_id, _tau2_task_domain(task)), str(path))
            continue
        docs_dir = path.parent / "multi_turn_func_doc"
        docs: dict[str, list[dict]] = {}
        warned_no_docs = False
        # (line, names) of each question whose missed_function names a tool its classes lack: one
        # warning per file, not one line per question
        not_offered: list[tuple[int, list[str]]] = []
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
                _check_environment(obj, path, lineno)
                entry = _give(
                    truth, given, str(obj["id"]), {k: v for k, v in obj.items() if k != "id"}, f"{path}:{lineno}"
                )
                if "involved_classes" in obj and not warned_no_docs and not docs_dir.is_dir():
                    # Without the docs the rollouts have no tools, positional ground-truth arguments
                    # cannot be named and optional ones not filled: the verifier scores such tasks 0 or not at all.
                    log.warning(
                        "%s: no %s beside this BFCL question file: rollouts get no tools, and the verifier no "
                        "parameter order or defaults; copy BFCL's bfcl_eval/data/multi_turn_func_doc there",
                        path,
                        docs_dir,
                    )
                    warned_no_docs = True
                if "involved_classes" in obj and docs_dir.is_dir() and "tools" not in entry:
                    tools = []
                    entry["tool_classes"] = {}
                    for name in obj["involved_classes"]:
                        doc_file = BFCL_API_CLASSES.get(name, ("", "-"))[1]
                        if name not in docs and (docs_dir / doc_file).is_file():
                            docs[name] = [
                                json.loads(x) for x in (docs_dir / doc_file).read_text().splitlines() if x.strip()
                            ]
                        entry["tool_classes"].update((d["name"], name) for d in docs.get(name, []) if "name" in d)
                        tools += [doc_tool(d) for d in docs.get(name, [])]
                    entry["tools"], entry["tools_added"] = _held_out(
                        tools, obj.get("missed_function"), path, lineno, not_offered
                    )
                    entry["tools"] = entry["tools"] or None
        if not_offered:
            # BFCL skips such names too (its unused composite category has one: update_market_status).
            log.warning(
                "%s: %d question(s) name missed_function entries not among the tools of their involved_classes "
                "(left out, as BFCL does); first: %s:%d: %s",
                path,
                len(not_offered),
                path,
                *not_offered[0],
            )
    return truth


def _give(truth: dict[str, dict], given: dict[tuple[str, str], str], task_id: str, fields: dict, where: str) -> dict:
    """Merge one task's ``fields`` read at ``where`` into its entry of ``truth``, refusing a field
    an earlier place gave another value; returns the entry."""
    entry = truth.setdefault(task_id, {})
    for field, value in fields.items():
        first = given.get((task_id, field))
        if first is not None and entry[field] != value:
            raise RolloutFormatError(_disagreement(task_id, field, entry[field], value, first, where))
        # An equal value is taken as before (the later one), so the outputs keep its key order.
        entry[field] = value
        given[(task_id, field)] = where
    return entry


#: The ground-truth field of a tau2 task that names no domain; one that does is ``tau2_task:<domain>``.
TAU2_TASK = "tau2_task"


def _tau2_task_domain(task: dict) -> str | None:
    """The domain a tau2 task names (``user_scenario.instructions.domain``), or ``None``."""
    scenario = task.get("user_scenario")
    instructions = scenario.get("instructions") if isinstance(scenario, dict) else None
    domain = instructions.get("domain") if isinstance(instructions, dict) else None
    return domain if isinstance(domain, str) and domain else None


def _tau2_field(task: dict) -> str:
    """The ground-truth field a tau2 task is kept under: one per domain, since every domain
    numbers its tasks from "0" (two versions of one domain's task still meet in one field)."""
    domain = _tau2_task_domain(task)
    return TAU2_TASK if domain is None else f"{TAU2_TASK}:{domain}"


def tau2_domains(truth: dict[str, dict]) -> set[str | None]:
    """The domains whose tau2 tasks a :func:`load_ground_truth` result holds (``None``: tasks
    naming no domain)."""
    return {
        field[len(TAU2_TASK) + 1 :] or None
        for entry in truth.values()
        for field in entry
        if field == TAU2_TASK or field.startswith(TAU2_TASK + ":")
    }


def tau2_variant_of(domain: str, base: str) -> bool:
    """Whether tau2 domain ``domain`` is by its name a variant of ``base`` that runs ``base``'s
    tasks: ``base`` followed by ``_`` or ``-`` (airline_tighter_policy and airline-relaxed of
    airline, telecom-workflow of telecom, as tau2-bench's registry and its forks name them)."""
    return domain.startswith((base + "_", base + "-"))


def tau2_ground_truth(
    entry: dict | None, domain: str | None, task_id: str, given: set[str | None]
) -> tuple[dict | None, str | None]:
    """The tau2 task of ``task_id`` that a simulation of ``domain`` (``None``: its file names
    none) takes from its :func:`load_ground_truth` entry, with the domain the task names; ``(None,
    None)`` where there is none. ``given``: every domain of the ground truth (:func:`tau2_domains`).

    A simulation whose domain has a task file among the ground truth takes that domain's task (or
    else one naming no domain), never another domain's: with airline's and medical_triage's task
    files both given, each domain's task "1" is its own. Where no task file of its domain is given,
    it takes the only task of its id, and so does a simulation naming no domain. The caller
    (``load_rollouts``) judges that task: a variant domain (:func:`tau2_variant_of`) runs its base
    domain's tasks, which name the base (warned); another domain's is refused; a simulation naming
    no domain is refused where its own policy's heading names another domain, else warned; a task
    naming no domain is warned.

    Raises:
        _Bad: the simulation's domain has no task file given, or it names none, and tasks of
            several domains have its id: which one it ran is not known.
    """
    tasks = {
        field[len(TAU2_TASK) + 1 :] or None: task
        for field, task in (entry or {}).items()
        if field == TAU2_TASK or field.startswith(TAU2_TASK + ":")
    }
    if domain is not None and domain in given:
        own = domain if domain in tasks else None
        return tasks.get(own), own
    if len(tasks) > 1:
        names = ", ".join(sorted(d or "(none named)" for d in tasks))
        whose = (
            f"this simulation's domain {domain!r} has no task file among them"
            if domain is not None
            else "this simulation's file names no domain (tau2's info.environment_info.domain_name, or a top-level "
            "`domain`)"
        )
        raise _Bad(
            f"the ground-truth files have a task {task_id!r} in several domains ({names}) and {whose}: which one it "
            "ran is not known; curate it with its own domain's tasks.json alone"
        )
    return next(iter(tasks.values()), None), next(iter(tasks), None)


def _disagreement(task_id: str, field: str, old: Any, new: Any, first: str, where: str) -> str:
    """The refusal of two ground truths of one task: which, where, and what to do instead."""
    if field == TAU2_TASK or field.startswith(TAU2_TASK + ":"):
        keys = sorted(k for k in {*old, *new} if old.get(k) != new.get(k)) if isinstance(old, dict) else []
        what = f"other tasks (their {', '.join(map(repr, keys))} differ)" if keys else "other tasks"
        domain = field.partition(":")[2]
        hint = (
            f"both files' tasks name domain {domain!r}: two releases of {domain}'s tasks.json, or a variant "
            f"domain's own tasks.json (whose tasks name their base domain, as airline-relaxed's name airline) "
            f"beside {domain}'s; give only the task file the rollouts ran, and curate a variant's rollouts "
            "apart from its base domain's"
            if domain
            else "two tau2 task files that name no domain (user_scenario.instructions.domain) both have this id "
            "(two versions of one domain's tasks.json, or two domains' files): give only the tasks.json of the "
            "domain and version the rollouts ran, and curate each domain's rollouts separately (results files "
            "that carry their own `tasks` need no ground-truth file and pool across domains)"
        )
    else:
        what = f"its {field!r} other values"
        hint = (
            "two versions of one BFCL file, or files of two categories with one id? give only the files of the "
            "category and version the results were run on"
        )
    return (
        f"ground-truth files disagree on task {task_id!r}: {first} and {where} give {what}; the later one "
        f"would replace the earlier one, scoring the task's trials against one of them silently. {hint}"
    )


def ground_truth_order_matters(paths: Sequence[str | Path]) -> bool:
    """Whether the order of ground-truth files changes what :func:`load_ground_truth` gives.

    A task's tools come from the first question file naming its classes, with that file's
    ``multi_turn_func_doc/``; two files that give one field of one task other values (two
    versions of one domain's tau2 ``tasks.json``; two versions of an answer file) are told here
    too, though :func:`load_ground_truth` refuses them (the later file's value used to replace the
    earlier one's). BFCL's possible answers and questions give other fields of
    each task, in any order.
    """
    seen: dict[tuple[str, str], Any] = {}
    for path in paths:
        path = Path(path)
        if _starts_with_list(path):
            fields = (((task_id, _tau2_field(task)), task) for task_id, task in _tau2_tasks(path))
        else:
            fields = (
                ((str(obj["id"]), k), (v, str(path.parent)) if k == "involved_classes" else v)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and isinstance(obj := loads_json(line), dict) and "id" in obj
                for k, v in obj.items()
                if k != "id"
            )
        for key, value in fields:
            if seen.setdefault(key, value) != value:
                return True
    return False


def _check_environment(obj: dict, path: Path, lineno: int) -> None:
    """Refuse a question line whose environment is not BFCL's shape: it would reach RL records and
    fail only when a reward is computed, far from this line."""
    if "initial_config" in obj:
        config = obj["initial_config"]
        if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
            raise RolloutFormatError(f"{path}:{lineno}: 'initial_config' must be an object of class name -> object")
    if "involved_classes" in obj:
        classes = obj["involved_classes"]
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise RolloutFormatError(f"{path}:{lineno}: 'involved_classes' must be a list of BFCL class names")


def _starts_with_list(path: Path) -> bool:
    with path.open(encoding="utf-8") as handle:
        head = handle.read(4096).lstrip("\ufeff \t\r\n")
    return head.startswith("[")


def _tau2_tasks(path: Path) -> Iterator[tuple[str, dict]]:
    try:
        tasks = loads_json(path.read_text(encoding="utf-8"))
    except JSONTextError as exc:
        raise RolloutFormatError(f"{path}:{exc.lineno or 1}: invalid JSON ({exc})") from None
    for index, task in enumerate(tasks):
        if not isinstance(task, dict) or "id" not in task or "evaluation_criteria" not in task:
            raise RolloutFormatError(
                f"{path}[{index}]: a JSON list of ground truth must hold tau2 tasks (objects with 'id' and "
                "'evaluation_criteria'); BFCL possible answers are JSON Lines"
            )
        yield str(task["id"]), task


def _held_out(
    tools: list[dict], missed: Any, path: Path, lineno: int, not_offered: list[tuple[int, list[str]]]
) -> tuple[list[dict], dict[int, list[dict]]]:
    """Split a miss_func entry's tools into those offered first and those each later turn adds.

    BFCL's miss_func category withholds ``missed_function`` (``{turn: [names]}``) until that turn:
    before it the right answer is to say the function is missing, so offering it from the start
    would make the possible answer wrong. Names that none of ``tools`` has are appended to
    ``not_offered`` as ``(lineno, names)`` (the caller warns once per file).
    """
    if not missed:
        return tools, {}
    if not isinstance(missed, dict):
        raise RolloutFormatError(f"{path}:{lineno}: 'missed_function' must be an object of turn -> names")
    by_name = {tool["function"]["name"]: tool for tool in tools}
    added: dict[int, list[dict]] = {}
    unknown: list[str] = []
    for turn, names in missed.items():
        if not str(turn).isdigit() or not isinstance(names, list):
            raise RolloutFormatError(f"{path}:{lineno}: 'missed_function' must map turn numbers to lists of names")
        unknown += [name for name in names if name not in by_name]
        added[int(turn)] = [by_name[name] for name in names if name in by_name]
    if unknown:
        not_offered.append((lineno, unknown))
    late = {name for names in missed.values() for name in names}
    return [tool for tool in tools if tool["function"]["name"] not in late], added
