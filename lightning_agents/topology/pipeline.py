"""End-to-end curation: rollouts -> per-task quotient graphs -> metrics -> selections.

This is what the ``curate`` command and ``TopoCurateDataModule`` both call, so the two always
select the same data for the same input and settings.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import networkx as nx

from lightning_agents.topology.graph import build_quotient_graph, group_by_task
from lightning_agents.topology.metrics import analyze_task
from lightning_agents.topology.records import Rollout
from lightning_agents.topology.selection import (
    RLTaskScore,
    SelectionConfig,
    TaskAnalysis,
    outcome_filter,
    pass_rate_filter,
    select_rl,
    select_sft,
)
from lightning_agents.topology.signatures import SignatureConfig, abstract_text

log = logging.getLogger(__name__)

__all__ = ["CurationResult", "curate_rollouts", "paused_gc", "rl_prompt_record", "sft_conversation"]


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


def sft_conversation(rollout: Rollout, **extra: Any) -> dict[str, Any]:
    """A rollout as an SFT conversation ``{"messages", "tools", "task_id", "trial", "reward", ...}``."""
    record = {"messages": rollout.messages, "tools": rollout.tools, "task_id": rollout.task_id, "trial": rollout.trial, "reward": rollout.reward}
    record.update(extra)
    return record


def rl_prompt_record(rollout: Rollout, **extra: Any) -> dict[str, Any]:
    """The RL prompt record of a task from one of its rollouts.

    The prompt is the conversation up to and including the first user message (what the agent
    saw before acting); ``reference`` and ``verifier`` come from the reader's ``info``.
    """
    prompt = []
    for message in rollout.messages:
        prompt.append(message)
        if message.get("role") == "user":
            break
    reference = rollout.info.get("reference", "")
    record = {
        "id": rollout.task_id,
        "prompt": prompt,
        "reference": reference if isinstance(reference, str) else str(reference),
        "verifier": rollout.info.get("verifier"),
    }
    if rollout.tools:
        record["tools"] = rollout.tools
    # The task's class path (and, for tool worlds, the problem its world is built from) lets an RL
    # module rebuild the environment with lightning_agents.tasks.load_task.
    for key in ("task", "problem"):
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
        baselines: ``{"outcome": (sft, rl), "pass_rate": (sft, rl)}`` of the two baselines.
        rollouts: the rollouts by ``(task_id, trial)``.
        signatures: the signature settings the graphs were built with.
        success_threshold: the reward at or above which a trial counted as a success.
    """

    analyses: list[TaskAnalysis]
    sft: list[tuple[str, int]]
    rl: list[RLTaskScore]
    baselines: dict[str, tuple[list[tuple[str, int]], list[str]]]
    rollouts: dict[tuple[str, int], Rollout] = field(repr=False)
    signatures: SignatureConfig = field(default_factory=SignatureConfig, repr=False)
    success_threshold: float = 1.0

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
            return build_quotient_graph(trials, self.signatures, self.success_threshold)
        return analysis.graph

    def sft_conversations(self, keys: Iterable[tuple[str, int]] | None = None) -> list[dict[str, Any]]:
        """The chosen trials (default: TopoCurate's pick) as SFT conversations with their metrics."""
        metrics = {(t.task_id, t.trial): t for a in self.analyses for t in a.trajectories}
        out = []
        for key in self.sft if keys is None else keys:
            t = metrics[key]
            out.append(sft_conversation(self.rollouts[key], recovery=t.recovery, efficiency=t.efficiency))
        return out

    def rl_records(self) -> list[dict[str, Any]]:
        """TopoCurate's RL tasks as prompt records (``id``, ``prompt``, ``reference``, ``verifier``, scores)."""
        first_trial = {}
        for (task_id, trial), rollout in sorted(self.rollouts.items(), key=lambda kv: kv[0][1]):
            first_trial.setdefault(task_id, rollout)
        return [
            rl_prompt_record(
                first_trial[s.task_id],
                pass_rate=s.pass_rate,
                error_branch_ratio=s.error_branch_ratio,
                heterogeneity=s.heterogeneity,
                score=s.score,
            )
            for s in self.rl
        ]


def curate_rollouts(
    rollouts: Sequence[Rollout],
    selection: SelectionConfig | None = None,
    signatures: SignatureConfig | None = None,
    success_threshold: float = 1.0,
    progress: Callable[[Iterable], Iterable] | None = None,
    keep_graphs: bool = True,
    workers: int = 0,
) -> CurationResult:
    """Analyse every task of ``rollouts`` and run TopoCurate's selections and the baselines.

    Args:
        rollouts: rollouts of any number of tasks, in any order.
        selection: selection settings.
        signatures: signature settings (text abstraction, read-only tools).
        success_threshold: reward at or above which a trial is a success.
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

    Returns:
        A :class:`CurationResult`. The result depends only on the set of rollouts and the
        settings, not on input order.

    Raises:
        ValueError: ``workers`` is negative, or ``workers > 1`` with ``keep_graphs=True`` or a
            custom text abstraction.
    """
    selection = selection or SelectionConfig()
    signatures = signatures or SignatureConfig()
    if workers < 0:
        raise ValueError(f"workers must be 0 (in this process) or more, got {workers}")
    if workers > 1:
        if keep_graphs:
            raise ValueError("workers > 1 needs keep_graphs=False: graphs built in worker processes are not sent back")
        if signatures.text_abstractor is not abstract_text:
            raise ValueError(
                "workers > 1 needs the default text abstraction: an encoder's cluster labels depend on the order it "
                "sees texts, which parallel workers would change; use workers=0"
            )
        if "fork" not in multiprocessing.get_all_start_methods():
            log.warning("curate_rollouts: this platform cannot fork worker processes; curating in this process")
            workers = 0
    with paused_gc():
        return _curate(rollouts, selection, signatures, success_threshold, progress, keep_graphs, workers)


def _analyse(trials, selection, signatures, success_threshold, keep_graph) -> tuple[TaskAnalysis, list[tuple[str, int]]]:
    """One task's graph, metrics and SFT pick (made while the graph exists: it needs only that graph)."""
    graph = build_quotient_graph(trials, signatures, success_threshold)
    task, trajectories = analyze_task(graph)
    analysis = TaskAnalysis(graph, task, trajectories)
    picks = select_sft([analysis], selection)
    if not keep_graph:
        # networkx caches its views (graph.nodes, graph.succ, ...) on the graph, a reference
        # cycle that only the paused collector could free: emptying the graph frees its
        # contents now, by reference counting.
        graph.clear()
        analysis.graph = None
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
    baselines = {
        "outcome": outcome_filter(analyses),
        "pass_rate": pass_rate_filter(analyses, selection.pass_rate_low, selection.pass_rate_high),
    }
    return CurationResult(
        analyses=analyses,
        sft=sft,
        rl=select_rl(analyses, selection),
        baselines=baselines,
        rollouts={r.key: r for trials in groups.values() for r in trials},
        signatures=signatures,
        success_threshold=success_threshold,
    )
