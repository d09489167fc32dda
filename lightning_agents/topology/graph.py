"""Prefix tree and semantic quotient graph of the trials of one task.

Every trial of a task is a sequence of step signatures. Laid on top of each other they form a
prefix tree rooted at the task's start; two trials share a node as long as their signatures agree
and split at the step where they first differ (a branch point).

The quotient merges tree nodes that stand for the same situation of the agent. A node's identity
is ``(anchor, writes, knowledge, pending)``:

- ``anchor``: the last environment state the file recorded (BFCL ``state_info``, keyed with its
  turn so that a later turn is never the same node as an earlier one; in a BFCL result file, which
  logs none, the turn and the writes so far as this graph's read-only tools tell them), or the start;
- ``writes``: the state-changing calls that succeeded since the anchor, in order. The environment
  state is a function of the writes applied to it, so two trials that performed the same writes
  are in the same state whatever they read or said in between;
- ``knowledge``: the *set* of successful reads (call and result) since the last write, what the
  agent has looked up since, plus its messages to the user counted per class (its second question is a new turn of
  the dialogue, not a repeat of the first). A set, because reading A then B leaves the agent
  where reading B then A does, and reading A twice teaches nothing new: a repeated read is a loop
  back to the same node;
- ``pending``: calls made whose result has not come back yet.

A call whose observation is an error changed nothing, so the error takes the trial back to the
node it called from: a retry loop becomes a cycle, and its traversals are counted on its edges.
A recorded state sits on a turn's last step; where that step comes back to a node of the trial
(a read made again, an error), the trial takes the loop and then moves on to the state's node.
User messages have no signature (they are context, see
:class:`~lightning_agents.topology.signatures.SignatureConfig`), so every edge is an agent
decision or an environment response. Each node and edge counts the distinct successful, failed
and unscored trials through it. Each trial's *strategy*, the sequence of its successful
state-changing calls, is recorded with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from lightning_agents.topology.records import CALL, OBSERVATION, TEXT, Rollout, TurnEndState
from lightning_agents.topology.signatures import (
    DEFAULT_CONFIG,
    STATELESS_TOOLS,
    Signature,
    SignatureConfig,
    canonical_arguments,
    step_signature,
    trajectory_signatures,
)

__all__ = [
    "TURN_END",
    "Quotient",
    "build_prefix_tree",
    "build_quotient",
    "build_quotient_graph",
    "group_by_task",
    "outcome_of",
]

ROOT = 0

#: The signature of the move from a node a turn's last step came back to (a loop) on to the state
#: after the turn; a trial's ``signatures`` hold it at that place, and it is no call or message.
TURN_END: Signature = ("turn_end", "environment", "", "turn end")


def outcome_of(reward: float | None, success_threshold: float = 1.0) -> bool | None:
    """``True`` for a success (reward at least ``success_threshold``), ``False`` for a failure, ``None`` unscored."""
    if reward is None:
        return None
    return reward >= success_threshold


def group_by_task(rollouts: Iterable[Rollout]) -> dict[str, list[Rollout]]:
    """Rollouts grouped by task id, tasks and trials in sorted order so results do not depend on input order.

    Raises:
        ValueError: when a task has two rollouts with the same trial number.
    """
    groups: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        groups.setdefault(rollout.task_id, []).append(rollout)
    for task_id, trials in groups.items():
        trials.sort(key=lambda r: r.trial)
        for a, b in zip(trials, trials[1:]):
            if a.trial == b.trial:
                raise ValueError(
                    f"task {task_id!r} has two rollouts numbered trial {a.trial} ({_where(a)} and {_where(b)})"
                )
    return {task_id: groups[task_id] for task_id in sorted(groups, key=_task_sort_key)}


def _where(rollout: Rollout) -> str:
    # A trial renumbered on pooling is named by the number its file gave it, which the user can find.
    own = rollout.info.get("source_trial")
    return rollout.source if own is None else f"{rollout.source}, trial {own} in its file"


def _task_sort_key(task_id: str) -> tuple:
    # Numeric task ids (tau-bench's 0..49) sort as numbers so reports read in the file's order.
    return (0, int(task_id), "") if task_id.lstrip("-").isdigit() else (1, 0, task_id)


def _count(attrs: dict, outcome: bool | None) -> None:
    attrs["success" if outcome else "failure" if outcome is not None else "unscored"] += 1


def _single_task(rollouts: Sequence[Rollout]) -> str:
    if not rollouts:
        raise ValueError("no rollouts given")
    task_ids = {r.task_id for r in rollouts}
    if len(task_ids) > 1:
        raise ValueError(
            f"rollouts of one task expected, got {len(task_ids)} tasks ({sorted(task_ids)[:5]}...); use group_by_task first"
        )
    return next(iter(task_ids))


def build_prefix_tree(
    rollouts: Sequence[Rollout],
    config: SignatureConfig = DEFAULT_CONFIG,
    success_threshold: float = 1.0,
) -> nx.DiGraph:
    """The prefix tree of the trials of one task.

    Args:
        rollouts: all trials of one task.
        config: how steps become signatures.
        success_threshold: reward at or above which a trial is a success.

    Returns:
        A tree rooted at node ``0`` (``graph.graph["root"]``). Nodes carry ``depth`` and the
        ``success``/``failure``/``unscored`` trial counts through them; edges carry the
        ``signature`` of their step. ``graph.graph["paths"]`` maps each trial number to its node
        path (root first).
    """
    task_id = _single_task(rollouts)
    tree = nx.DiGraph(task_id=task_id, root=ROOT, paths={})
    tree.add_node(ROOT, depth=0, success=0, failure=0, unscored=0)
    children: dict[tuple[int, Signature], int] = {}
    for rollout in sorted(rollouts, key=lambda r: r.trial):
        outcome = outcome_of(rollout.reward, success_threshold)
        node = ROOT
        _count(tree.nodes[ROOT], outcome)
        path = [ROOT]
        for sig, _ in trajectory_signatures(rollout, config):
            child = children.get((node, sig))
            if child is None:
                child = tree.number_of_nodes()
                children[(node, sig)] = child
                tree.add_node(child, depth=tree.nodes[node]["depth"] + 1, success=0, failure=0, unscored=0)
                tree.add_edge(node, child, signature=sig)
            _count(tree.nodes[child], outcome)
            path.append(child)
            node = child
        tree.graph["paths"][rollout.trial] = path
    return tree


class _Interner:
    """Maps sequences to small ints incrementally: id(seq + [x]) from (id(seq), x) in O(1)."""

    __slots__ = ("table",)

    def __init__(self) -> None:
        self.table: dict[tuple[int, object], int] = {}

    def extend(self, prefix_id: int, item: object) -> int:
        key = (prefix_id, item)
        found = self.table.get(key)
        if found is None:
            found = self.table[key] = len(self.table) + 1
        return found

    def of(self, items: Sequence[object]) -> int:
        current = 0
        for item in items:
            current = self.extend(current, item)
        return current


class _SetInterner:
    """Maps sets to small ints incrementally: id(set | {x}) from (id(set), x), O(1) when seen before."""

    __slots__ = ("members", "ids", "step")

    def __init__(self) -> None:
        self.members: list[frozenset] = [frozenset()]
        self.ids: dict[frozenset, int] = {frozenset(): 0}
        self.step: dict[tuple[int, object], int] = {}

    def add(self, set_id: int, item: object) -> int:
        key = (set_id, item)
        found = self.step.get(key)
        if found is None:
            members = self.members[set_id] | {item}
            found = self.ids.get(members)
            if found is None:
                found = self.ids[members] = len(self.members)
                self.members.append(members)
            self.step[key] = found
        return found


@dataclass(eq=False)
class Quotient:
    """A quotient graph as plain lists and dicts, what the metrics read (see :func:`build_quotient`).

    Curation of 100k trajectories builds and drops one graph per task; building a
    ``networkx.DiGraph`` for each cost more than computing every metric on it, so the pipeline
    works on this form and makes a DiGraph (:meth:`to_networkx`) only for graphs it keeps.

    Args:
        graph: ``task_id``, ``root`` and ``trials``, exactly the DiGraph's ``graph`` dict (metrics
            cache their intermediate results here too).
        nodes: per node id ``0..n-1``: ``[success, failure, unscored, ends_success, ends_failure,
            error]``.
        edges: per ``(u, v)``: ``[success, failure, unscored, traversals, error, {signature:
            count}]``, in the order the edges were first taken.
        successors: per node id, the nodes its edges lead to (in that order).
    """

    graph: dict
    nodes: list[list]
    edges: dict[tuple[int, int], list]
    successors: list[list[int]]

    def to_networkx(self) -> nx.DiGraph:
        """The same graph as a ``networkx.DiGraph`` with the attributes :func:`build_quotient_graph` documents."""
        graph = nx.DiGraph(**{k: v for k, v in self.graph.items() if not k.startswith("_")})
        # Plain node ids first, attributes after: add_nodes_from with (node, dict) pairs goes through
        # an exception per node and is several times slower.
        graph.add_nodes_from(range(len(self.nodes)))
        nx.set_node_attributes(
            graph,
            {
                n: {
                    "success": c[0],
                    "failure": c[1],
                    "unscored": c[2],
                    "ends_success": c[3],
                    "ends_failure": c[4],
                    "error": c[5],
                }
                for n, c in enumerate(self.nodes)
            },
        )
        graph.add_edges_from(
            (
                u,
                v,
                {
                    "success": c[0],
                    "failure": c[1],
                    "unscored": c[2],
                    "traversals": c[3],
                    "error": c[4],
                    "signatures": c[5],
                },
            )
            for (u, v), c in self.edges.items()
        )
        return graph

    @classmethod
    def from_networkx(cls, graph: nx.DiGraph) -> Quotient:
        """The plain form of a graph made by :func:`build_quotient_graph` (shares its ``trials``).

        Raises:
            ValueError: the graph's nodes are not ``0..n-1`` with the quotient's attributes.
        """
        n = graph.number_of_nodes()
        nodes: list = [None] * n
        keys = ("success", "failure", "unscored", "ends_success", "ends_failure", "error")
        try:
            for node, data in graph.nodes(data=True):
                nodes[node] = [data[k] for k in keys]
            edges = {
                (u, v): [d["success"], d["failure"], d["unscored"], d["traversals"], d["error"], d["signatures"]]
                for u, v, d in graph.edges(data=True)
            }
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"not a quotient graph from build_quotient_graph (nodes 0..n-1 with success/failure/... counts): {exc!r}"
            ) from None
        successors: list[list[int]] = [[] for _ in range(n)]
        for u, v in edges:
            successors[u].append(v)
        info = {k: graph.graph[k] for k in ("task_id", "root", "trials")}
        return cls(info, nodes, edges, successors)


def build_quotient_graph(
    rollouts: Sequence[Rollout],
    config: SignatureConfig = DEFAULT_CONFIG,
    success_threshold: float = 1.0,
) -> nx.DiGraph:
    """The semantic quotient graph of the trials of one task (see the module docstring).

    Args:
        rollouts: all trials of one task (any order; trials are processed by trial number).
        config: how steps become signatures and which tools are read-only (without its
            ``read_only_tools``, a rollout's ``info["read_only_tools"]``, BFCL's own list of
            reads, is used where its reader sets one, and the name guess for other tools).
        success_threshold: reward at or above which a trial is a success.

    Returns:
        A ``networkx.DiGraph`` with integer nodes, root ``0``. Node attributes: ``success``,
        ``failure``, ``unscored`` (distinct trials through the node), ``ends_success``,
        ``ends_failure`` (trials ending there), ``error`` (entered by an error observation at
        least once). Edge attributes: ``success``, ``failure``, ``unscored`` (distinct trials),
        ``traversals`` (all passes, loops included), ``signatures`` (a dict counting the step
        signatures that took it), ``error`` (an error observation). ``graph.graph`` holds
        ``task_id``, ``root`` and ``trials``: per trial number a dict with ``path`` (node list),
        ``outcome`` (True/False/None), ``reward``, ``errors`` (positions in ``path`` entered by an
        error observation of the agent's: the simulated user's failed calls are context),
        ``recovered`` (those errors the agent fixed later, see :func:`_recovered_errors`),
        ``signatures`` (the step signatures, in order, one per move along ``path``: :data:`TURN_END`
        where a turn's last step came back to a node of the trial and the turn's end then moved it
        on to the recorded state) and ``strategy`` (the agent's successful
        state-changing calls in order, a write repeated at once counted once).
    """
    return build_quotient(rollouts, config, success_threshold).to_networkx()


def _recovered_errors(failed: list[tuple[int, str | None]], answered: list[tuple[int, str, bool]]) -> list[int]:
    """Positions of the agent's errors that it fixed: a later call of the same tool came back
    without an error, or a later write did (another way to make the change).

    An error followed only by apologies, reads of something else or a hand-off is not a
    recovery even when the trial scores 1: on tau2 retail a trial whose two writes were both
    rejected passed because the task wanted no write, and ranked first for SFT as "recovered".
    An error observation with no call (``tool`` None) is fixed by any later successful call.
    """
    recovered = []
    for position, tool in failed:
        if any(later > position and (tool is None or name == tool or writes) for later, name, writes in answered):
            recovered.append(position)
    return recovered


def _known_or_guessed(known: frozenset[str], guess: Callable[[str], bool]) -> Callable[[str], bool]:
    """Read-only-ness from a format's own list of reads, else from ``guess``."""
    return lambda name: name in known or guess(name)


def _writes_so_far(state: TurnEndState, is_read_only: Callable[[str], bool]) -> tuple:
    """The writes a trial made up to the end of ``state.turn`` (calls the environment rejected
    are none), each as ``(name, canonical arguments)``: the name of a state no file logged."""
    return tuple(
        (call[0], canonical_arguments(call[1]))
        for turn in state.calls[: state.turn]
        for call in turn
        if not is_read_only(call[0]) and (len(call) < 3 or call[2] is not False)
    )


def _take(
    node: int,
    target: int,
    sig: Signature,
    is_error: bool,
    node_counts: list[list],
    edge_counts: dict[tuple[int, int], list],
    successors: list[list[int]],
) -> int:
    """Count one traversal of the edge ``node -> target`` by a step of signature ``sig``; returns ``target``."""
    edge = edge_counts.get((node, target))
    if edge is None:
        edge = edge_counts[(node, target)] = [0, 0, 0, 0, False, {sig: 1}]
        successors[node].append(target)
    else:
        taken = edge[5]
        taken[sig] = taken.get(sig, 0) + 1
    edge[3] += 1
    if is_error:
        edge[4] = True
        node_counts[target][5] = True
    return target


def build_quotient(
    rollouts: Sequence[Rollout],
    config: SignatureConfig = DEFAULT_CONFIG,
    success_threshold: float = 1.0,
) -> Quotient:
    """The quotient graph of the trials of one task as a :class:`Quotient` (plain data, no networkx).

    Same arguments and content as :func:`build_quotient_graph`; this is the form curation uses.
    """
    task_id = _single_task(rollouts)
    # node_counts[n] = [success, failure, unscored, ends_success, ends_failure, error]
    node_counts: list[list] = [[0, 0, 0, 0, 0, False]]
    successors: list[list[int]] = [[]]
    # edge_counts[(u, v)] = [success, failure, unscored, traversals, error, {signature: count}]
    edge_counts: dict[tuple[int, int], list] = {}
    node_of: dict[tuple[int, int, int, tuple], int] = {(0, 0, 0, ()): ROOT}
    sequences = _Interner()
    knowledge_sets = _SetInterner()
    add_knowledge = knowledge_sets.step.get  # (set id, item) -> set id, when seen before
    states: dict[str, int] = {}
    # (kind, actor, name, arguments, error, content) -> (signature, read_only) or None: trials of a
    # task repeat the same steps, and each distinct one is signed (canonicalised, hashed,
    # classified) and looked up once.
    memo: dict = {}
    trials_info: dict[int, dict] = {}
    sign = step_signature
    # Text steps left out of the topology (user turns are context, system text is off by default)
    # are skipped before building a memo key: a fifth of all steps on tau-bench-like files.
    unsigned_text = {"user"} if config.user_text == "context" else set()
    if not config.include_system:
        unsigned_text.add("system")
    for rollout in sorted(rollouts, key=lambda r: r.trial):
        # A format that knows which of its tools only read (BFCL: its own list, the one its
        # verifier scores with) says so in `info["read_only_tools"]`; the name guess covers the
        # rest. The config's own list, where given, decides alone.
        known = rollout.info.get("read_only_tools") if config.read_only_tools is None else None
        is_read_only = config.is_read_only if not known else _known_or_guessed(known, config.is_read_only)
        outcome = outcome_of(rollout.reward, success_threshold)
        slot = 0 if outcome else 1 if outcome is not None else 2
        anchor, writes_id, knowledge = 0, 0, 0
        said: dict[Signature, int] = {}  # messages per class since the last write
        # Calls awaiting their observation: their signatures (part of the node key) and whether
        # each is read-only, as two parallel tuples.
        pending: tuple = ()
        pending_ro: tuple = ()
        node = ROOT
        path = [ROOT]
        # Per agent error: (position, tool name or None for an observation without a call).
        failed_calls: list[tuple[int, str | None]] = []
        # Per agent call that came back without an error: (position, tool name, write).
        answered: list[tuple[int, str, bool]] = []
        signatures: list[Signature] = []
        strategy: list[Signature] = []
        for step in rollout.steps:
            kind = step.kind
            if kind == TEXT and step.actor in unsigned_text:
                continue
            arguments = step.arguments
            if kind == CALL and not isinstance(arguments, str):
                # Dict arguments are not hashable; canonicalise directly.
                sig = sign(step, config)
            else:
                key = (kind, step.actor, step.name, arguments, step.error, step.content)
                sig = memo.get(key, memo)
                if sig is memo:
                    sig = memo[key] = sign(step, config)
            if sig is None:
                continue
            signatures.append(sig)
            is_error = False
            if kind == CALL:
                pending += (sig,)
                pending_ro += (is_read_only(step.name or ""),)
            elif kind == OBSERVATION and pending:
                index = 0
                if len(pending) > 1:
                    name = sig[2]
                    index = next((i for i, call in enumerate(pending) if call[2] == name), 0)
                call = pending[index]
                read_only = pending_ro[index]
                if len(pending) == 1:
                    pending = pending_ro = ()
                else:
                    pending = pending[:index] + pending[index + 1 :]
                    pending_ro = pending_ro[:index] + pending_ro[index + 1 :]
                # The simulated user's own calls (tau2 telecom) are context, not the agent's errors or fixes.
                by_agent = call[1] != "user"
                if by_agent and step.error:
                    failed_calls.append((len(path), call[2]))
                elif by_agent:
                    # A hand-off that changes no data is no write that could fix an error.
                    answered.append((len(path), call[2], not read_only and call[2] not in STATELESS_TOOLS))
                if step.error:
                    # A failed call changed nothing and taught nothing new: back to where it was made.
                    is_error = True
                elif read_only:
                    # What was read, with what came back: a read whose result differs (another
                    # initial state, a non-deterministic tool) is different knowledge.
                    item = (call, sig[3])
                    knowledge = add_knowledge((knowledge, item)) or knowledge_sets.add(knowledge, item)
                else:
                    writes_id = sequences.extend(writes_id, call)
                    # The strategy is the agent's decisions: not the simulated user's own calls
                    # (tau2 telecom's user toggles their phone), not a hand-off that changes no data,
                    # not the same write made again at once: where the trial succeeded, the outcome
                    # shows the repeat left the state as it was (a pooled tau2 airline run sent one
                    # baggage update twice, a "strategy" of its own before).
                    if call[1] != "user" and call[2] not in STATELESS_TOOLS and (not strategy or strategy[-1] != call):
                        strategy.append(call)
                    knowledge = 0
                    said = {}
            else:
                # The agent's own messages (and, with user_text="abstract", the user's) are part of
                # what happened since the last write; an observation without a call is too.
                is_error = kind == OBSERVATION and step.error
                if is_error:
                    failed_calls.append((len(path), None))
                said[sig] = count = said.get(sig, 0) + 1
                item = (sig, count)
                knowledge = add_knowledge((knowledge, item)) or knowledge_sets.add(knowledge, item)
            key = (anchor, writes_id, knowledge, pending)
            state = step.state
            if state is not None:
                # A recorded environment state says everything the writes would: restart from it.
                if state.__class__ is TurnEndState:
                    # No state was logged: named by the writes so far, told by this graph's reads.
                    state = (state.turn, _writes_so_far(state, is_read_only))
                anchor = states.setdefault(state, len(states) + 1)
                writes_id, knowledge, said = 0, 0, {}
                pending = pending_ro = ()
                # The step itself may come back to a node of this trial (a read repeated as the
                # turn's last step, an error at the turn's end): a loop, which going straight to
                # the state's node hid. The trial takes it and the turn's end then moves it on to
                # the state, an edge of its own (TURN_END), as a closing message would.
                back = node_of.get(key)
                key = (anchor, 0, 0, ())
                if back is not None and back in path and back != node_of.get(key):
                    node = _take(node, back, sig, is_error, node_counts, edge_counts, successors)
                    path.append(node)
                    signatures.append(TURN_END)
                    sig, is_error = TURN_END, False
            target = node_of.get(key)
            if target is None:
                target = node_of[key] = len(node_counts)
                node_counts.append([0, 0, 0, 0, 0, False])
                successors.append([])
            node = _take(node, target, sig, is_error, node_counts, edge_counts, successors)
            path.append(node)
        # Outcome counts are per distinct trial, however often a loop revisits a node or edge.
        for visited in set(path):
            node_counts[visited][slot] += 1
        for edge_key in set(zip(path, path[1:])):
            edge_counts[edge_key][slot] += 1
        if outcome is True:
            node_counts[node][3] += 1
        elif outcome is False:
            node_counts[node][4] += 1
        trials_info[rollout.trial] = {
            "path": path,
            "outcome": outcome,
            "reward": rollout.reward,
            "errors": [position for position, _ in failed_calls],
            "recovered": _recovered_errors(failed_calls, answered),
            "signatures": signatures,
            "strategy": tuple(strategy),
        }
    return Quotient({"task_id": task_id, "root": ROOT, "trials": trials_info}, node_counts, edge_counts, successors)
