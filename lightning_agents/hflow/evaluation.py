"""Scoring workflows on problems: the trace cache, the budget counter and the stream to disk.

Budget unit: a *problem run* (one workflow executed on one problem and not served from the cache).
Every search method (HFlow and the baselines in :mod:`lightning_agents.hflow.baselines`) spends
this unit through an :class:`Evaluator`, so "equal evaluation budgets" is exact. Optimizer calls
are counted in the same unit (one each) by the search that makes them.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_agents.atomic import read_appended
from lightning_agents.hflow.genome import Workflow
from lightning_agents.hflow.operators import WorkflowExecutor

__all__ = ["EvalResult", "Evaluator", "Individual", "trace_failed"]

log = logging.getLogger(__name__)


@dataclass
class EvalResult:
    """A workflow's score on a problem set.

    Args:
        accuracy: mean task score.
        cost: mean cost per problem.
        fitness: ``accuracy - lambda_cost * cost``.
        new_runs: problem runs that were not cached (the budget spent).
        errors: model calls that failed for good (each cost its problem, not the run).
    """

    accuracy: float
    cost: float
    fitness: float
    new_runs: int
    errors: int = 0


@dataclass
class Individual:
    """A scored workflow: its scores on the search problems and where it came from."""

    workflow: Workflow
    accuracy: float = 0.0
    cost: float = 0.0
    fitness: float = -math.inf
    edit: str = "seed"
    parent: str = ""
    generation: int = 0

    @property
    def hash(self) -> str:
        """The workflow's canonical content hash."""
        return self.workflow.hash()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (checkpoints, reports)."""
        return {
            "workflow": self.workflow.to_dict(),
            "accuracy": self.accuracy,
            "cost": self.cost,
            "fitness": self.fitness,
            "edit": self.edit,
            "parent": self.parent,
            "generation": self.generation,
            "hash": self.hash,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Individual:
        """Inverse of :meth:`to_dict`."""
        return cls(
            Workflow.from_dict(d["workflow"]),
            d["accuracy"],
            d["cost"],
            d["fitness"],
            d["edit"],
            d["parent"],
            d["generation"],
        )


def _trace_row(line: str) -> tuple[tuple[str, str], dict[str, Any]]:
    row = json.loads(line)
    if not isinstance(row["trace"], dict):
        raise TypeError("'trace' is not an object")
    return (str(row["workflow"]), str(row["problem"])), row["trace"]


def trace_failed(trace: dict[str, Any]) -> bool:
    """Whether a model call of this trace failed for good (a rate limit that outlasted the retries,
    an endpoint down, a request the server refused): its score says nothing about the workflow."""
    return bool(trace.get("errors", 0))


class Evaluator:
    """Scores workflows on problems, caching each ``(workflow hash, problem id)`` trace.

    With ``trace_log``, every new trace is appended to that JSONL as soon as its workflow has run
    and the file is read back on construction: a crashed or interrupted search loses no paid call,
    and a restarted one is served from it (a torn last line is skipped).

    A trace in which a model call failed for good (see :func:`trace_failed`) is cached in memory only, so
    the workflow's fitness stays the same within the run; it is neither logged nor read back, so a
    resumed run runs that problem again (a rate-limit storm or a misconfigured endpoint must not
    become permanent zeros).

    Args:
        executor: runs workflows.
        lambda_cost: cost weight of the fitness.
        trace_log: JSONL the traces are streamed to and resumed from (None: memory only).
    """

    def __init__(
        self, executor: WorkflowExecutor, lambda_cost: float = 0.0, trace_log: str | Path | None = None
    ) -> None:
        self.executor = executor
        self.lambda_cost = lambda_cost
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.problem_runs = 0
        self.trace_log = Path(trace_log) if trace_log else None
        # (workflow, problem) of every trace read back from the log: paid for by an earlier process
        self.logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        if self.trace_log is not None and self.trace_log.is_file():
            self._read_log(self.trace_log)

    def _read_log(self, path: Path) -> None:
        # a trace cut short or a foreign line is skipped: its problem runs again
        for lineno, row in read_appended(path, _trace_row, "trace"):
            if isinstance(row, Exception):
                log.warning("%s:%d: skipped a line that is not a trace (%s); its problem runs again", path, lineno, row)
                continue
            key, trace = row
            if trace_failed(trace):  # written by an older version: run it again
                continue
            self.cache[key] = trace
            self.logged.add(key)

    def traces(self, workflow: Workflow, problems: list[dict[str, Any]], generation: int = 0) -> tuple[list[dict], int]:
        """Plain-data traces of ``workflow`` on ``problems`` (cached ones reused) and the new runs."""
        h = workflow.hash()
        todo = [p for p in problems if (h, p["id"]) not in self.cache]
        if todo:
            new = [t.to_dict() for t in self.executor.run(workflow, todo, generation=generation)]
            with self._lock:
                for t in new:
                    self.cache[(h, t["problem_id"])] = t
                kept = [t for t in new if not trace_failed(t)]
                if self.trace_log is not None and kept:
                    self.trace_log.parent.mkdir(parents=True, exist_ok=True)
                    with self.trace_log.open("a") as f:
                        f.write(
                            "".join(
                                json.dumps({"workflow": h, "problem": t["problem_id"], "trace": t}) + "\n" for t in kept
                            )
                        )
                self.problem_runs += len(todo)
        return [self.cache[(h, p["id"])] for p in problems], len(todo)

    def evaluate(self, workflow: Workflow, problems: list[dict[str, Any]], generation: int = 0) -> EvalResult:
        """Accuracy, mean cost and fitness of ``workflow`` on ``problems``."""
        traces, new = self.traces(workflow, problems, generation)
        acc = sum(t["score"] for t in traces) / len(traces)
        cost = sum(t["cost"] for t in traces) / len(traces)
        return EvalResult(acc, cost, acc - self.lambda_cost * cost, new, sum(t.get("errors", 0) for t in traces))

    def invalidate_backbone(self, backbone: str, workflows: dict[str, Workflow] | None = None) -> int:
        """Drop cached traces of workflows that use ``backbone`` (e.g. the model changed by training):
        those of ``workflows`` that name it, and every trace one of whose steps ran on it (traces
        read back from a log belong to workflows this search may not know). Returns how many."""
        stale = {h for h, wf in (workflows or {}).items() if backbone in wf.backbones()}
        keys = [
            k
            for k, t in self.cache.items()
            if k[0] in stale or any(s.get("backbone") == backbone for s in t.get("steps", ()))
        ]
        for k in keys:
            del self.cache[k]
        return len(keys)
