"""BFCL multi-turn tasks as a tool world: RL episodes on the records ``lightning-agents curate`` writes.

A BFCL v4 multi-turn task is a conversation of fixed user turns over a set of BFCL's API classes
(``GorillaFileSystem``, ``TwitterAPI``, ...) built from the task's ``initial_config``. Its RL record
(``curate`` with ``bfcl_verifier=execution``) holds the first user turn as ``prompt``, every turn as
``user_turns``, the offered ``tools``, the ``environment`` and the possible answer in ``reference``.

:class:`BFCLWorldTask` runs such a record as an episode: :class:`BFCLWorld` executes each tool call in
a fresh set of the involved API instances and returns BFCL's own output as the tool result; when the
model answers a turn without a call, :meth:`BFCLWorldTask.next_user_turn` delivers the next user turn
(the agent loop asks for it); after the last turn the episode ends and
:class:`~lightning_agents.tasks.bfcl_execution.BFCLExecutionVerifier` scores it, as BFCL does.

The world's :meth:`~BFCLWorld.state` is the snapshot BFCL logs after each turn (``state_info``: the
public attributes of every stateful instance); :meth:`~BFCLWorld.state_hash` hashes it as the BFCL
reader hashes a result file's snapshots, so :func:`~lightning_agents.rollout.agent_loop.run_agent_loop`
records per user turn the same state keys a BFCL result file gives, and TopoCurate merges trials,
ours or BFCL's, that reach the same state.

Calls run by the same rules as the verifier's: literal JSON arguments, a documented public method of
an involved class, never ``eval``; a refused call is an error observation. Needs the optional
``bfcl-eval`` package (``pip install --no-deps bfcl-eval``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_agents.errors import VerifierError
from lightning_agents.tasks.base import Problem, Task
from lightning_agents.tasks.bfcl_execution import shared_verifier
from lightning_agents.tasks.tools import ToolWorld, parse_arguments

__all__ = ["BFCLWorld", "BFCLWorldTask", "bfcl_tools"]


@functools.cache
def _class_tools(name: str) -> tuple[dict[str, Any], ...]:
    from lightning_agents.tasks.bfcl_execution import BFCL_API_CLASSES, _bfcl_eval, _doc_folder, doc_tool

    doc = _doc_folder(_bfcl_eval()) / BFCL_API_CLASSES[name][1]
    return tuple(doc_tool(json.loads(line)) for line in doc.read_text().splitlines() if line.strip())


def bfcl_tools(involved_classes: list[str] | None = None) -> list[dict[str, Any]]:
    """OpenAI schemas of the functions of BFCL's API classes (default: all eight), from bfcl-eval's docs.

    Raises:
        ImportError: bfcl-eval is not installed (naming the install command).
    """
    from lightning_agents.tasks.bfcl_execution import BFCL_API_CLASSES

    shared_verifier()  # fails with the install command when bfcl-eval is missing
    return [tool for name in involved_classes or list(BFCL_API_CLASSES) for tool in _class_tools(name)]


class _EveryBFCLTool:
    """:attr:`BFCLWorldTask.tools`: every BFCL function, read on first use so that importing this
    module does not need bfcl-eval. An episode offers its own record's tools (:attr:`BFCLWorld.tools`)."""

    def __get__(self, obj: Any, owner: type) -> list[dict[str, Any]]:
        return bfcl_tools()


class BFCLWorld(ToolWorld):
    """Fresh instances of a BFCL task's API classes; each tool call runs on them.

    Args:
        environment: ``{"initial_config", "involved_classes", "category"}`` (the record's
            ``environment``); ``category`` decides BFCL's long-context data, as in BFCL.
        tools: the schemas offered to the model (default: every function of the involved classes).
    """

    def __init__(self, environment: Mapping[str, Any], tools: list[dict[str, Any]] | None = None) -> None:
        from lightning_agents.tasks.bfcl_execution import _Run

        verifier = shared_verifier()
        involved, config, long_context = verifier._environment({}, environment)
        self.tools = list(tools or bfcl_tools(involved))
        #: a call grew the file system past its bound: nothing runs any more, the episode scores 0
        self.broken = False
        #: calls passed to :meth:`execute` (the reward's replay must hold as many)
        self.calls = 0
        self._verifier = verifier
        self._run = _Run(
            {n: verifier._classes[n] for n in involved},
            {n: verifier._allowed[n] for n in involved},
            config,
            long_context,
        )

    @property
    def instances(self) -> dict[str, Any]:
        """The API instances by class name (their public attributes are the state BFCL compares)."""
        return self._run.instances

    def state(self) -> list[dict[str, Any]]:
        """The instances' state as BFCL logs it (``inference_log``'s ``state_info`` list): per class,
        its public attributes, made JSON-able as BFCL writes them (what JSON cannot hold as its
        ``str``). MathAPI (stateless) and the memory/web-search classes are left out, as in BFCL."""
        from bfcl_eval.constants.executable_backend_config import OMIT_STATE_INFO_CLASSES, STATELESS_CLASSES

        skip = {*STATELESS_CLASSES, *OMIT_STATE_INFO_CLASSES}
        return [
            {
                "role": "state_info",
                "class_name": name,
                # The JSON round trip of BFCL's file: int keys become strings, tuples lists.
                "content": json.loads(
                    json.dumps(_json_able({k: v for k, v in vars(instance).items() if not k.startswith("_")}))
                ),
            }
            for name, instance in self.instances.items()
            if name not in skip
        ]

    def state_hash(self) -> str:
        """A hash of :meth:`state`, the one the BFCL reader keys a result file's snapshot with
        (``lightning_agents.datamodules.bfcl_rollouts``), so equal states hash equal whoever played."""
        from lightning_agents.datamodules.bfcl_rollouts import _bfcl_state_hash

        return _bfcl_state_hash(self.state(), "BFCLWorld.state()")

    def execute(self, name: str, arguments: str | dict) -> tuple[str, bool]:
        """Run one call; BFCL's output text, and whether it is an error (BFCL's ``{"error": ...}``
        or a failed execution). The call is read and checked by the verifier's own rules, so the
        world runs what the reward's replay runs (``_0``-named arguments positionally, as the
        replay does); a call the verifier refuses runs nothing here and, as in the replay, scores
        the episode 0 (the observation says so)."""
        from lightning_agents.tasks.bfcl_execution import OversizedState, RefusedCall
        from lightning_agents.topology.signatures import is_error_text

        self.calls += 1
        if self.broken:
            return "error: the file system grew past its bound; nothing runs any more (the episode scores 0)", True
        kwargs, error = parse_arguments(arguments)
        if error:
            return error, True
        try:
            call, args, kwargs = self._verifier._model_call((name, kwargs))
            self._verifier._check(call, args, kwargs)
            output = self._run.call(call, args, kwargs)
        except RefusedCall as exc:
            # growth is found after the call ran: the tree stays too big, so the world stops here
            self.broken = isinstance(exc, OversizedState)
            return f"error: {exc} (a refused call scores the episode 0)", True
        if len(output) > _MAX_OBSERVATION:
            output = output[:_MAX_OBSERVATION] + f"... [{len(output) - _MAX_OBSERVATION} more characters]"
        return output, output.startswith("Error during execution") or is_error_text(output)


# Longest tool result put into the conversation (a `find` over a big tree was 10 million characters).
_MAX_OBSERVATION = 20_000


def _calls_in(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def _as_executed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode as its world ran it: a call past ``max_tool_calls`` (its result says so) was not
    run and is left out with that result, so the reward replays what the world did (writing the
    ground truth's calls blind past a limit of 0 scored 1.0 on 20 of 20 tasks). Each call is matched
    to the result that follows its own message (ids may repeat across turns)."""
    from lightning_agents.rollout.agent_turn import TOOL_CALL_LIMIT_NOTE

    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            out.append(message)
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        results = messages[i + 1 : j]
        skipped = {
            r.get("tool_call_id") for r in results if TOOL_CALL_LIMIT_NOTE.fullmatch(str(r.get("content") or ""))
        }
        kept = [c for c in calls if c.get("id") not in skipped]
        message = {**message, "tool_calls": kept}
        if not kept:
            del message["tool_calls"]
        out.append(message)
        out += [r for r in results if r.get("tool_call_id") not in skipped]
        i = j
    return out


def _json_able(value: Any) -> Any:
    """``value`` as BFCL's ``make_json_serializable`` leaves it: dicts and lists walked, any other
    value kept when JSON can hold it, else its ``str`` (a ``Directory``'s repr)."""
    if isinstance(value, dict):
        return {k: _json_able(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_able(v) for v in value]
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
    return value


def _user_turns(problem: Problem) -> list[list[dict[str, Any]]]:
    turns = problem.get("user_turns")
    if not isinstance(turns, list) or not turns:
        raise VerifierError(
            f"BFCL record {problem.get('id')!r} has no user_turns (curate's BFCL RL records carry them)"
        )
    # A record curated from our own rollouts lists each turn as its text (the user messages' content).
    return [
        list(turn)
        if isinstance(turn, list)
        else [turn if isinstance(turn, dict) else {"role": "user", "content": turn}]
        for turn in turns
    ]


class BFCLWorldTask(Task):
    """BFCL multi-turn RL records as a task with tools: BFCL's API classes are the world, its fixed
    user turns come one after another, and BFCL's execution check is the reward.

    Problems are the records themselves (``curate``'s ``rl_tasks.jsonl`` lines with
    ``bfcl_verifier=execution``, which name this class as their ``task``).

    Args:
        path: an ``rl_tasks.jsonl`` file of such records (only needed to list :attr:`problems`;
            RSTG passes the records of its data to the agent loop directly).
        split, n, seed, name: see :class:`~lightning_agents.tasks.base.Task` (one file serves every split).
    """

    default_name = "bfcl"
    domain = "agent"
    tools = _EveryBFCLTool()  # type: ignore[assignment]
    answer_template = "{answer}"

    def __init__(
        self,
        path: str | None = None,
        split: str = "val",
        n: int | None = None,
        seed: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(split, n, seed, name)
        self.path = path

    def load(self, split: str) -> list[Problem]:
        if self.path is None:
            raise ValueError("BFCLWorldTask(path=None) has no problems of its own: give path= an rl_tasks.jsonl")
        from lightning_agents.tasks._files import TaskDataError, iter_jsonl

        problems = []
        for where, record in iter_jsonl(Path(self.path)):
            if "environment" not in record or "user_turns" not in record:
                raise TaskDataError(f"{where}: not a BFCL RL record (no environment or user_turns)")
            problems.append({**record, "question": self.user_message(record)})
        return problems

    def user_message(self, problem: Problem) -> str:
        """The first user turn's text."""
        return str(_user_turns(problem)[0][-1].get("content") or "")

    def prompt(self, problem: Problem) -> list[dict[str, Any]]:
        """The record's ``prompt`` (the conversation up to the first user turn), else that turn."""
        return [dict(m) for m in problem.get("prompt") or _user_turns(problem)[0]]

    def environment(self, problem: Problem) -> BFCLWorld:
        return BFCLWorld(problem["environment"], problem.get("tools"))

    def next_user_turn(
        self, messages: list[dict[str, Any]], world: ToolWorld | None, problem: Problem
    ) -> list[dict[str, Any]] | None:
        """The user's next turn once the model has answered one without a call (``None`` after the last).

        The turn is found from the user messages already in the conversation, so the episode needs
        no counter of its own and a copied episode continues where it was.
        """
        seen = sum(m.get("role") == "user" for m in messages)
        at = 0
        for turn in _user_turns(problem):
            if at >= seen:
                return [dict(m) for m in turn]
            at += len(turn)
        return None

    def verify_episode(self, messages: list[dict[str, Any]], world: ToolWorld | None, problem: Problem) -> float:
        """BFCL's verdict on the episode (:class:`~lightning_agents.tasks.bfcl_execution.BFCLExecutionVerifier`):
        the calls of each user turn are executed again on fresh instances and compared with the
        ground truth's; an episode that did not reach the last turn scores 0.

        Raises:
            VerifierError: the record's reference cannot be scored (no ground truth or environment).
        """
        from lightning_agents.tasks.tau_actions import ActionReferenceError

        last = messages[-1] if messages else {}
        if last.get("role") != "assistant" or last.get("tool_calls"):
            return 0.0
        messages = _as_executed(messages)
        if isinstance(world, BFCLWorld) and (world.broken or _calls_in(messages) != world.calls):
            # the replay would not be the episode the world ran (a tool's own output that reads like
            # the limit's note must not take a call that ran out of the replay)
            return 0.0
        try:
            reference = json.loads(problem["reference"])
            if "environment" not in reference and "environment" in problem:
                reference["environment"] = problem["environment"]
            return float(shared_verifier()(json.dumps(messages), json.dumps(reference)))
        except (ActionReferenceError, ValueError, KeyError) as exc:
            raise VerifierError(f"BFCL record {problem.get('id')!r}: {exc}") from exc

    def verifier_spec(self) -> str:
        """Records name BFCL's execution verifier, which scores an episode's messages."""
        from lightning_agents.datamodules.bfcl_rollouts import BFCL_EXECUTION_VERIFIER

        return BFCL_EXECUTION_VERIFIER

    def check(self, completion: str, reference: str) -> float:
        raise VerifierError(
            "a BFCL answer is verified from the whole episode (BFCLWorldTask.verify_episode), not from one completion"
        )
