"""The one internal record every rollout reader produces: a trial of a task as a list of steps.

Readers (``lightning_agents.datamodules.trajectories``) turn tau-bench, tau2-bench and BFCL files
into :class:`Rollout` objects; everything in :mod:`lightning_agents.topology` works on these only,
so a new format needs a reader and nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EncodedMessages", "Rollout", "Step", "TurnEndState", "CALL", "OBSERVATION", "TEXT"]

CALL = "call"
OBSERVATION = "observation"
TEXT = "text"


@dataclass(slots=True)
class Step:
    """One step of a trajectory.

    Args:
        kind: ``"call"`` (an actor invokes a tool), ``"observation"`` (a tool's result) or
            ``"text"`` (a free-text message).
        actor: who produced it: ``assistant``, ``user``, ``tool`` or ``system``.
        name: the tool name for calls and observations, ``None`` for text.
        arguments: the call's arguments (a dict, or the raw JSON string the file held); ``None``
            for other kinds.
        content: the message or observation text.
        error: the observation reports an error (from the format's own flag when it has one).
        state: a hash of the environment state after this step, where the format records it
            (BFCL ``state_info``), a :class:`TurnEndState` where a turn ends in a file that logged
            no state (BFCL result files); ``None`` elsewhere.
    """

    kind: str
    actor: str
    name: str | None = None
    arguments: Any = None
    content: str = ""
    error: bool = False
    state: str | None = None


class TurnEndState(str):
    """The state after a user turn that the file did not log (BFCL result files), named by the
    writes made so far: the text is the name under the reader's own read-only list, and the
    quotient graph names it again from ``calls`` with the read-only tools it is told
    (``selection.read_only_tools``), so that a list given by the user decides at turn ends too.

    Args:
        value: the state's name (``"<turn>:calls:<hash of the writes>"``).
        turn: the turn it ends, 1 for the first (turns count from the file's first, empty ones included).
        calls: the trial's calls per turn (``(name, arguments)``, or ``(name, arguments, False)``
            for a call the environment rejected); the first ``turn`` lists are the calls so far.
    """

    turn: int
    calls: list

    def __new__(cls, value: str, turn: int, calls: list) -> TurnEndState:
        state = super().__new__(cls, value)
        state.turn = turn
        state.calls = calls
        return state

    def __getnewargs__(self) -> tuple:  # type: ignore[override]
        # Pickled to curation workers: str's own (text,) would call __new__ without the turn.
        return (str(self), self.turn, self.calls)


@dataclass(frozen=True)
class EncodedMessages:
    """A rollout's messages still as the JSON text they were read from, decoded on first use.

    Curation needs only the steps; the messages are read again just for the trials that are
    written out. Keeping one string per rollout instead of its parsed message dicts cuts the
    memory of 100k trajectories by a third and their reading time by about 30%.

    Args:
        text: one JSON object (a JSON Lines record).
        key: the field of that object that holds the message list.
    """

    text: str
    key: str

    def decode(self) -> list[dict]:
        """The message list."""
        return json.loads(self.text)[self.key]


class _Messages:
    """Descriptor of ``Rollout.messages``: stores a list or :class:`EncodedMessages`, returns a list."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return None  # the dataclass default: no messages
        value = obj.__dict__[self._slot]
        if isinstance(value, EncodedMessages):
            value = obj.__dict__[self._slot] = value.decode()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self._slot] = [] if value is None else value


@dataclass
class Rollout:
    """One trial of one task.

    Args:
        task_id: the task this trial attempts; trials of a task share it.
        trial: the trial number within the task.
        reward: the trial's reward, ``None`` when the file does not score it (BFCL result files).
        steps: the trajectory as :class:`Step` objects.
        messages: the trajectory as OpenAI chat messages (tool-call arguments as JSON strings),
            what SFT trains on. Readers may pass :class:`EncodedMessages`, decoded on first
            access; reading the attribute always gives the list.
        tools: OpenAI tool schemas offered in the trial, when the file records them.
        source: ``file[index]`` or ``file:line`` the record came from, for messages.
        info: format-specific extras (task description, reference answer, verifier).
    """

    task_id: str
    trial: int
    reward: float | None
    steps: list[Step]
    messages: _Messages = _Messages()  # type: ignore[assignment]  # a list once read
    tools: list[dict] | None = None
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        """Dict-style access (``rollout["reward"]``) for code written against plain records."""
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    @property
    def key(self) -> tuple[str, int]:
        """``(task_id, trial)``, the identity used in selections."""
        return (self.task_id, self.trial)
