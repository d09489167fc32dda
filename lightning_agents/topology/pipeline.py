"""End-to-end curation: rollouts -> per-task quotient graphs -> metrics -> selections.

This is what the ``curate`` command and ``TopoCurateDataModule`` both call, so the two always
select the same data for the same input and settings.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

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
from lightning_agents.topology.signatures import SignatureConfig

__all__ = ["CurationResult", "curate_rollouts", "paused_gc", "rl_prompt_record", "sft_conversation"]


@contextlib.contextmanager
def paused_gc():
    """Pause Python's cyclic garbage collector for the duration.

    Reading and curating create millions of small acyclic objects while everything read so far
    stays alive; every automatic collection then re-scans that whole live heap, which doubled
    the curation time of 100k trajectories. Reference counting still frees everything as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
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
    record.update(extra)
    return record


@dataclass
class CurationResult:
    """Everything one curation run found and chose.

    Args:
        analyses: per-task graph and metrics, tasks in sorted order.
        sft: TopoCurate's SFT pick, ``(task_id, trial)``.
        rl: TopoCurate's RL pick with scores, best first.
        baselines: ``{"outcome": (sft, rl), "pass_rate": (sft, rl)}`` of the two baselines.
        rollouts: the rollouts by ``(task_id, trial)``.
    """

    analyses: list[TaskAnalysis]
    sft: list[tuple[str, int]]
    rl: list[RLTaskScore]
    baselines: dict[str, tuple[list[tuple[str, int]], list[str]]]
    rollouts: dict[tuple[str, int], Rollout] = field(repr=False)

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
) -> CurationResult:
    """Analyse every task of ``rollouts`` and run TopoCurate's selections and the baselines.

    Args:
        rollouts: rollouts of any number of tasks, in any order.
        selection: selection settings.
        signatures: signature settings (text abstraction, read-only tools).
        success_threshold: reward at or above which a trial is a success.
        progress: wraps the per-task loop, e.g. ``tqdm`` (``progress(iterable)`` must yield the
            same items).

    Returns:
        A :class:`CurationResult`. The result depends only on the set of rollouts and the
        settings, not on input order.
    """
    with paused_gc():
        return _curate(rollouts, selection or SelectionConfig(), signatures or SignatureConfig(), success_threshold, progress)


def _curate(rollouts, selection, signatures, success_threshold, progress) -> CurationResult:
    groups = group_by_task(rollouts)
    items: Iterable = groups.items()
    if progress is not None:
        items = progress(items)
    analyses = []
    for _, trials in items:
        graph = build_quotient_graph(trials, signatures, success_threshold)
        task, trajectories = analyze_task(graph)
        analyses.append(TaskAnalysis(graph, task, trajectories))
    baselines = {
        "outcome": outcome_filter(analyses),
        "pass_rate": pass_rate_filter(analyses, selection.pass_rate_low, selection.pass_rate_high),
    }
    return CurationResult(
        analyses=analyses,
        sft=select_sft(analyses, selection),
        rl=select_rl(analyses, selection),
        baselines=baselines,
        rollouts={r.key: r for trials in groups.values() for r in trials},
    )
