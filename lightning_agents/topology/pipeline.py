"""End-to-end curation: rollouts -> per-task quotient graphs -> metrics -> selections.

This is what the ``curate`` command and ``TopoCurateDataModule`` both call, so the two always
select the same data for the same input and settings.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from lightning_agents.errors import LightningAgentsError
from lightning_agents.rollout.tool_calls import is_notice
from lightning_agents.topology.graph import build_quotient, build_quotient_graph, group_by_task
from lightning_agents.topology.metrics import analyze_task
from lightning_agents.topology.records import Rollout
from lightning_agents.topology.selection import (
    RLTaskScore,
    SelectionConfig,
    TaskAnalysis,
    select_rl,
    select_sft,
    size_matched_baselines,
)
from lightning_agents.topology.shards import CURATION_VERSION
from lightning_agents.topology.signatures import SignatureConfig, abstract_text

log = logging.getLogger(__name__)

__all__ = [
    "CurationError",
    "CurationResult",
    "curate_rollouts",
    "paused_gc",
    "require_scored",
    "rl_prompt_record",
    "sft_conversation",
]


@contextlib.contextmanager
def paused_gc():
    """Pause Python's cyclic garbage collector for the duration.

    Reading and curating create millions of small acyclic objects while everything read so far
    stays alive; every automatic collection then re-scans that whole live heap, which doubled
    the curation time of 100k trajectories. Reference counting still frees everything as usual.

    On the way out the objects made meanwhile are promoted to the oldest generation
    (``gc.freeze()`` then ``gc.unfreeze()``, a list splice): left in the youngest, the first
    allocation after the pause would scan all of them at once (1 s per 10k trajectories), although
    they are long-lived data the caller keeps. They stay collectable; the next full collection
    sees them, as it would in any program holding that heap.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


class CurationError(LightningAgentsError, ValueError):
    """Input that curation cannot turn into training data (nothing scored, no verifier for RL)."""


def _policy(messages: list[dict]) -> str | None:
    # The system message is where every format puts the policy the agent follows.
    return messages[0].get("content") if messages and messages[0].get("role") == "system" else None


def sft_conversation(rollout: Rollout, **extra: Any) -> dict[str, Any]:
    """A rollout as an SFT conversation: the messages the agent saw and produced (the system policy
    first, where the file records it), the ``tools`` it was offered first, ``tools_added`` (tools a
    later turn adds, by turn index, BFCL miss_func; that turn's user message describes them),
    ``task_id``, ``trial``, ``reward`` and ``extra``."""
    messages = rollout.messages
    record = {
        "messages": messages,
        "tools": rollout.tools,
        "policy": _policy(messages),
        "task_id": rollout.task_id,
        "trial": rollout.trial,
        "reward": rollout.reward,
    }
    if rollout.info.get("tools_added"):
        record["tools_added"] = rollout.info["tools_added"]
    record.update(extra)
    return record


def rl_prompt_record(rollout: Rollout, verifier: str | None = None, **extra: Any) -> dict[str, Any]:
    """The RL record of a task, the whole task as one of its rollouts shows it.

    Fields: ``id``; ``prompt`` (the conversation up to and including the first user message,
    what the agent saw before acting); ``policy`` (the system message); ``user_goal`` (the
    simulated user's instruction, tau-bench/tau2) and ``user_turns`` (every user message of the
    rollout, or BFCL's question turns); ``tools`` (those offered first; ``tools_added``: tools a later
    turn adds, by turn index, BFCL miss_func); ``environment`` (what names the environment
    instance: benchmark, user or task id, initial configuration); ``ground_truth`` (tau-bench
    ``info.task`` actions and outputs, tau2 evaluation criteria, BFCL possible answer);
    ``reference`` (its JSON text, what the verifier reads) and ``verifier`` (a class path).

    Args:
        rollout: a rollout of the task.
        verifier: class path used when the rollout's file names no verifier of its own.
        extra: more fields (scores).

    Raises:
        CurationError: neither the rollout nor ``verifier`` names a verifier; RL would otherwise
            fall back to some other task's verifier and learn from meaningless rewards.
    """
    messages = rollout.messages
    prompt = []
    for message in messages:
        prompt.append(message)
        if message.get("role") == "user":
            break
    chosen = rollout.info.get("verifier") or verifier
    if not chosen and rollout.info.get("no_verifier"):
        raise CurationError(
            f"task {rollout.task_id!r} ({rollout.source}): no verifier for its RL record: "
            f"{rollout.info['no_verifier']}; set the verifier setting to a class path that scores it"
        )
    if not chosen:
        raise CurationError(
            f"task {rollout.task_id!r} ({rollout.source}): no verifier for its RL record: the file names none and its format "
            "carries no ground truth (tau-bench info.task, tau2 evaluation_criteria, BFCL possible answers via ground_truth=); "
            "set the verifier setting to a class path"
        )
    reference = rollout.info.get("reference", "")
    user_turns = rollout.info.get("user_turns")
    if user_turns is None:
        # a malformed call's notice told as a user message is the environment's, no user turn
        user_turns = [m.get("content") for m in messages if m.get("role") == "user" and not is_notice(m)]
    record = {
        "id": rollout.task_id,
        "prompt": prompt,
        "policy": _policy(messages),
        "user_goal": rollout.info.get("instruction"),
        "user_turns": user_turns,
        "tools": rollout.tools,
        "environment": rollout.info.get("environment"),
        "ground_truth": rollout.info.get("ground_truth"),
        "reference": reference if isinstance(reference, str) else json.dumps(reference, sort_keys=True),
        "verifier": chosen,
    }
    # The task's class path (and, for tool worlds, the problem its world is built from) lets an RL
    # module rebuild the environment with lightning_agents.tasks.load_task.
    for key in ("task", "problem", "tools_added"):
        if rollout.info.get(key) is not None:
            record[key] = rollout.info[key]
    record.update(extra)
    return record


@dataclass
class CurationResult:
    """Everything one curation run found and chose.

    Args:
        analyses: per-task graph and metrics, tasks in sorted order (``graph`` is ``None`` when
            curated with ``keep_graphs=False``; :meth:`graph` rebuilds one on demand).
        sft: TopoCurate's SFT pick, ``(task_id, trial)``.
        rl: TopoCurate's RL pick with scores, best first.
        baselines: the size-matched baselines, ``{"sft": {name: keys}, "rl": {name: task ids}}``
            (:func:`~lightning_agents.topology.selection.size_matched_baselines`).
        rollouts: the rollouts by ``(task_id, trial)`` (empty for a result merged from shards).
        signatures: the signature settings the graphs were built with.
        success_threshold: the reward at or above which a trial counted as a success.
        verifier: class path given to RL records whose file names no verifier.
        records: SFT conversations by ``(task_id, trial)`` and RL records (or the error that
            prevents one) by task id, made in the shards; used where ``rollouts`` lacks a trial.
    """

    analyses: list[TaskAnalysis]
    sft: list[tuple[str, int]]
    rl: list[RLTaskScore]
    baselines: dict[str, dict[str, list]]
    rollouts: dict[tuple[str, int], Rollout] = field(repr=False)
    signatures: SignatureConfig = field(default_factory=SignatureConfig, repr=False)
    success_threshold: float = 1.0
    verifier: str | None = None
    records: dict[str, dict] = field(default_factory=lambda: {"sft": {}, "rl": {}}, repr=False)
    merged_user_tool_steps: int = 0

    @property
    def user_tool_steps(self) -> int:
        """Steps among :attr:`steps` that are the simulated user's own tool calls and their
        results (tau2 telecom), from the rollouts or, for a result merged from shards, the shards'."""
        return sum(r.info.get("user_tool_steps", 0) for r in self.rollouts.values()) or self.merged_user_tool_steps

    @property
    def steps(self) -> int:
        """Total number of signed steps analysed."""
        return sum(t.steps for a in self.analyses for t in a.trajectories)

    def analysis(self, task_id: str) -> TaskAnalysis:
        """The analysis of one task."""
        for item in self.analyses:
            if item.task.task_id == task_id:
                return item
        raise KeyError(f"task {task_id!r} is not among the curated tasks")

    def graph(self, task_id: str) -> nx.DiGraph:
        """The quotient graph of one task: the kept one, or rebuilt from its rollouts (same result)."""
        analysis = self.analysis(task_id)
        if analysis.graph is None:
            trials = [r for (task, _), r in self.rollouts.items() if task == task_id]
            if not trials:
                raise KeyError(f"task {task_id!r}: no rollouts to rebuild its graph from (a result merged from shards)")
            return build_quotient_graph(trials, self.signatures, self.success_threshold)
        return analysis.graph

    def sft_conversations(self, keys: Iterable[tuple[str, int]] | None = None) -> list[dict[str, Any]]:
        """The chosen trials (default: TopoCurate's pick) as SFT conversations with their metrics."""
        metrics = {(t.task_id, t.trial): t for a in self.analyses for t in a.trajectories}
        out = []
        for key in self.sft if keys is None else keys:
            key = tuple(key)
            rollout = self.rollouts.get(key)
            if rollout is None:
                out.append(self.records["sft"][key])
                continue
            t = metrics[key]
            out.append(sft_conversation(rollout, recovery=t.recovery, efficiency=t.efficiency, loops=t.loops))
        return out

    def rl_candidate(self, task_id: str) -> dict[str, Any]:
        """The RL record of one task, without scores (raises :class:`CurationError` without a verifier)."""
        trials = sorted(trial for (task, trial) in self.rollouts if task == task_id)
        if trials:
            return rl_prompt_record(self.rollouts[(task_id, trials[0])], self.verifier)
        found = self.records["rl"].get(task_id)
        if found is None:
            raise KeyError(f"task {task_id!r} has no rollouts and no RL record")
        if "error" in found:
            raise CurationError(found["error"])
        return dict(found)

    def rl_records(self) -> list[dict[str, Any]]:
        """TopoCurate's RL tasks as records (see :func:`rl_prompt_record`) with their scores, best first."""
        out = []
        for s in self.rl:
            record = self.rl_candidate(s.task_id)
            record.update(
                pass_rate=s.pass_rate,
                error_branch_ratio=s.error_branch_ratio,
                heterogeneity=s.heterogeneity,
                score=s.score,
            )
            out.append(record)
        return out


_BFCL_ID = re.compile(r"((?:multi_turn|live|simple|parallel|multiple|irrelevance)[a-z_]*?)_\d+(?:-\d+)*")


def require_scored(rollouts: Sequence[Rollout], sources: Sequence[str] = ()) -> None:
    """Raise :class:`CurationError` when no rollout has a reward: curation would select nothing.

    BFCL result files carry no score; their possible-answer file scores them (``ground_truth``).
    """
    if rollouts and all(r.reward is None for r in rollouts):
        # BFCL ids are "<category>_<n>": name the possible answers these records need, not base's,
        # which a miss_func run given base's answers was told to pass again.
        categories = sorted({m.group(1) for r in rollouts if (m := _BFCL_ID.fullmatch(str(r.task_id)))})
        if categories:
            files = ", ".join(f"possible_answer/BFCL_v4_{c}.json" for c in categories[:4])
            needed = f"the possible-answer file of their category ({', '.join(categories[:4])}: BFCL's {files})"
        else:
            needed = "their possible-answer file (e.g. BFCL's possible_answer/BFCL_v4_multi_turn_base.json)"
        raise CurationError(
            f"none of the {len(rollouts)} rollouts in {list(sources) or 'the input'} has a reward, so nothing can be selected; "
            f"BFCL result files carry no score: pass {needed} as ground_truth; one of another category has none "
            "of these ids"
        )


def curate_rollouts(
    rollouts: Sequence[Rollout],
    selection: SelectionConfig | None = None,
    signatures: SignatureConfig | None = None,
    success_threshold: float | None = None,
    progress: Callable[[Iterable], Iterable] | None = None,
    keep_graphs: bool = True,
    workers: int = 0,
    verifier: str | None = None,
) -> CurationResult:
    """Analyse every task of ``rollouts`` and run TopoCurate's selections and the baselines.

    Args:
        rollouts: rollouts of any number of tasks, in any order.
        selection: selection settings.
        signatures: signature settings (default: ``selection.signature_config()``; pass one to
            use an encoder's text abstraction).
        success_threshold: reward at or above which a trial is a success (default:
            ``selection.success_threshold``).
        progress: wraps the per-task loop, e.g. ``tqdm`` (``progress(iterable)`` must yield the
            same items).
        keep_graphs: keep every task's quotient graph in the result. ``False`` drops each graph
            once its task is analysed and its SFT pick made, so memory holds one graph at a time
            (the graphs of 100k trajectories take about 2 GB); :meth:`CurationResult.graph`
            rebuilds any one later. Metrics and selections are the same either way.
        workers: worker processes that build and analyse the task graphs in parallel (``0`` or
            ``1``: in this process). Workers are forked, so they share the rollouts already
            read instead of receiving copies; they need ``keep_graphs=False`` (graphs are not
            sent back) and the default text abstraction (an encoder's cluster labels depend on
            the order it sees texts). Each worker gets at least 256 tasks (fewer workers, or
            none, on small inputs, where starting them costs more than it saves); where fork is
            not available the work runs in this process, with a warning. The result is identical
            for any number of workers.
        verifier: class path for the RL records of tasks whose file names no verifier.

    Returns:
        A :class:`CurationResult`. The result depends only on the set of rollouts and the
        settings, not on input order.

    Raises:
        ValueError: ``workers`` is negative, or ``workers > 1`` with ``keep_graphs=True`` or a
            custom text abstraction.
    """
    selection = selection or SelectionConfig()
    signatures = signatures or selection.signature_config()
    if success_threshold is None:
        success_threshold = selection.success_threshold
    if workers < 0:
        raise CurationError(f"workers must be 0 (in this process) or more, got {workers}")
    if workers > 1:
        if keep_graphs:
            raise CurationError(
                "workers > 1 needs keep_graphs=False: graphs built in worker processes are not sent back"
            )
        if signatures.text_abstractor is not abstract_text:
            raise CurationError(
                "workers > 1 needs the default text abstraction: an encoder's cluster labels depend on the order it "
                "sees texts, which parallel workers would change; use workers=0"
            )
        if "fork" not in multiprocessing.get_all_start_methods():
            log.warning("curate_rollouts: this platform cannot fork worker processes; curating in this process")
            workers = 0
    with paused_gc():
        result = _curate(rollouts, selection, signatures, success_threshold, progress, keep_graphs, workers)
    result.verifier = verifier
    return result


def _analyse(
    trials, selection, signatures, success_threshold, keep_graph
) -> tuple[TaskAnalysis, list[tuple[str, int]]]:
    """One task's graph, metrics and SFT pick (made while the graph exists: it needs only that graph)."""
    # Metrics and the SFT pick read the plain form; a networkx graph is made only to be kept.
    quotient = build_quotient(trials, signatures, success_threshold)
    task, trajectories = analyze_task(quotient)
    analysis = TaskAnalysis(quotient, task, trajectories)
    picks = select_sft([analysis], selection)
    analysis.graph = quotient.to_networkx() if keep_graph else None
    return analysis, picks


# Fewer tasks than this per worker are curated in this process: forking and feeding the workers
# costs more than it saves (measured on 2 cores: 125 tasks took 0.20 s with 2 workers against
# 0.18 s in process; 1,250 tasks 1.2 s against 1.8 s).
_MIN_TASKS_PER_WORKER = 256

# What forked workers read: set in the parent just before the fork, so each worker inherits the
# rollouts (copy-on-write) instead of receiving them pickled.
_WORK: tuple | None = None


def _analyse_in_worker(index: int) -> tuple[TaskAnalysis, list[tuple[str, int]]]:
    groups, selection, signatures, success_threshold = _WORK
    return _analyse(groups[index], selection, signatures, success_threshold, False)


def _analysed(groups, selection, signatures, success_threshold, progress, keep_graphs, workers):
    """``(analysis, sft picks)`` per task in task order, from this process or from forked workers."""
    items: Iterable = groups.items()
    if progress is not None:
        items = progress(items)
    workers = min(workers, len(groups) // _MIN_TASKS_PER_WORKER)
    if workers <= 1:
        for _, trials in items:
            yield _analyse(trials, selection, signatures, success_threshold, keep_graphs)
        return
    global _WORK
    _WORK = (list(groups.values()), selection, signatures, success_threshold)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            # Results arrive in task order; taking one per item keeps `progress` counting finished tasks.
            results = pool.imap(_analyse_in_worker, range(len(groups)), chunksize=-(-len(groups) // (workers * 8)))
            for _ in items:
                yield next(results)
    finally:
        _WORK = None


def _curate(rollouts, selection, signatures, success_threshold, progress, keep_graphs, workers) -> CurationResult:
    groups = group_by_task(rollouts)
    analyses = []
    sft = []
    for analysis, picks in _analysed(groups, selection, signatures, success_threshold, progress, keep_graphs, workers):
        analyses.append(analysis)
        sft += picks
    rl = select_rl(analyses, selection)
    baselines = size_matched_baselines(analyses, sft, rl, selection)
    return CurationResult(
        analyses=analyses,
        sft=sft,
        rl=rl,
        baselines=baselines,
        rollouts={r.key: r for trials in groups.values() for r in trials},
        signatures=signatures,
        success_threshold=success_threshold,
    )


# ----------------------------------------------------------------------------- shards

SHARD_VERSION = 1


def shard_payload(
    result: CurationResult, num_shards: int = 1, shard_index: int = 0, selection: SelectionConfig | None = None
) -> dict[str, Any]:
    """What one shard's curation contributes to the global result, as plain JSON-ready data.

    Per task its metrics, per trajectory its metrics, TopoCurate's SFT pick with the picked
    conversations, and the RL record of every task RL could select (0 < p < 1), or the error
    that prevents one. Global choices (the RL ranking, the size-matched baselines) are made by
    :func:`merge_shards` over all shards.
    """
    rl_records: dict[str, Any] = {}
    for analysis in result.analyses:
        p = analysis.task.pass_rate
        if p is not None and 0.0 < p < 1.0:
            try:
                rl_records[analysis.task.task_id] = result.rl_candidate(analysis.task.task_id)
            except CurationError as exc:
                rl_records[analysis.task.task_id] = {"error": str(exc)}
    return {
        "version": SHARD_VERSION,
        "curation_version": CURATION_VERSION,
        "num_shards": num_shards,
        "shard_index": shard_index,
        "selection": (selection or SelectionConfig()).as_dict(),
        "success_threshold": result.success_threshold,
        "tasks": [a.task.as_dict() for a in result.analyses],
        "trajectories": [[t.as_dict() for t in a.trajectories] for a in result.analyses],
        "sft": [list(k) for k in result.sft],
        "sft_records": [[list(k), record] for k, record in zip(result.sft, result.sft_conversations())],
        "rl_records": rl_records,
        "user_tool_steps": result.user_tool_steps,
    }


def merge_shards(
    payloads: Sequence[dict[str, Any]], selection: SelectionConfig | None = None, sources: Sequence[str] = ()
) -> CurationResult:
    """The global curation result from every shard's :func:`shard_payload`.

    Equal to curating all rollouts in one process: per-task work is the same in any shard, and
    the RL ranking and the size-matched baselines are made here over all tasks.

    Args:
        payloads: every shard's :func:`shard_payload`.
        selection: the selection settings (default: those the shards were curated with).
        sources: the payloads' file names, named in errors.

    Raises:
        ShardError: a payload that is no shard payload, shards missing, repeated, written by other
            curation code (:data:`~lightning_agents.topology.shards.CURATION_VERSION`), curated from
            other inputs (``inputs_key``), of different shard counts or settings, or a task in two shards.
    """
    from lightning_agents.topology.graph import _task_sort_key
    from lightning_agents.topology.metrics import TaskMetrics, TrajectoryMetrics
    from lightning_agents.topology.shards import ShardError, check_shard_payloads

    if not payloads:
        raise ShardError("no shard results to merge")
    check_shard_payloads(payloads, sources)
    counts = {p.get("num_shards") for p in payloads}
    if len(counts) != 1:
        raise ShardError(f"shard results of different shard counts {sorted(counts)} cannot be merged")
    (num_shards,) = counts
    indices = sorted(p.get("shard_index") for p in payloads)
    if indices != list(range(num_shards)):
        raise ShardError(f"need every shard 0..{num_shards - 1} exactly once, got {indices}")
    settings = {json.dumps(p.get("selection"), sort_keys=True) for p in payloads}
    if len(settings) != 1:
        raise ShardError("shard results were made with different selection settings")
    selection = selection or SelectionConfig(**payloads[0]["selection"])
    analyses: list[TaskAnalysis] = []
    picks: dict[str, list[tuple[str, int]]] = {}
    records: dict[str, dict] = {"sft": {}, "rl": {}}
    seen: set[str] = set()
    for payload in payloads:
        for task, trajectories in zip(payload["tasks"], payload["trajectories"]):
            if task["task_id"] in seen:
                raise ShardError(f"task {task['task_id']!r} is in two shards")
            seen.add(task["task_id"])
            analyses.append(TaskAnalysis(None, TaskMetrics(**task), [TrajectoryMetrics(**t) for t in trajectories]))
        for task_id, trial in payload["sft"]:
            picks.setdefault(task_id, []).append((task_id, trial))
        for key, record in payload["sft_records"]:
            records["sft"][tuple(key)] = record
        records["rl"].update(payload["rl_records"])
    analyses.sort(key=lambda a: _task_sort_key(a.task.task_id))
    sft = [key for a in analyses for key in picks.get(a.task.task_id, [])]
    rl = select_rl(analyses, selection)
    return CurationResult(
        analyses=analyses,
        sft=sft,
        rl=rl,
        baselines=size_matched_baselines(analyses, sft, rl, selection),
        rollouts={},
        success_threshold=payloads[0].get("success_threshold", selection.success_threshold),
        records=records,
        # shards written before the count existed add 0: their summary reads as before
        merged_user_tool_steps=sum(p.get("user_tool_steps", 0) for p in payloads),
    )
