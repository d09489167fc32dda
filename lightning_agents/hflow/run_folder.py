"""The files of a search's output folder, named in one place.

``evolve`` and :class:`~lightning_agents.callbacks.HFlowCallback` keep a search in the same
layout: :func:`~lightning_agents.hflow.factory.build_search` streams the first four files while the
search runs (a restart reads them back), the rest are written when a run ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunFolder", "ranked_workflows"]


@dataclass(frozen=True)
class RunFolder:
    """Paths of the files a search keeps in its output folder.

    Args:
        root: the output folder.
    """

    root: Path

    @property
    def preferences(self) -> Path:
        """Every answered comparison, one per line; reloaded on restart."""
        return self.root / "preferences.jsonl"

    @property
    def questions(self) -> Path:
        """File-mode questions (``search.rater: file``) when no other file is named."""
        return self.root / "questions.jsonl"

    @property
    def traces(self) -> Path:
        """Every trace as it is computed; a restart is served from it."""
        return self.root / "traces.jsonl"

    @property
    def calls(self) -> Path:
        """Every paid model call; a restart's ledger and budget count them."""
        return self.root / "calls.jsonl"

    @property
    def search_state(self) -> Path:
        """The search's state after the last generation (``evolve --resume``)."""
        return self.root / "search_state.json"

    @property
    def best_workflows(self) -> Path:
        """The chosen workflow, then the best others (:func:`ranked_workflows`)."""
        return self.root / "best_workflows.yaml"

    @property
    def best_workflow_png(self) -> Path:
        """A picture of the chosen workflow."""
        return self.root / "best_workflow.png"

    @property
    def ledger(self) -> Path:
        """Cost and tokens by backbone, role, generation and workflow."""
        return self.root / "ledger.json"

    @property
    def memory(self) -> Path:
        """The experience memory after the run."""
        return self.root / "memory.json"

    @property
    def history(self) -> Path:
        """One line per generation."""
        return self.root / "history.jsonl"

    @property
    def summary(self) -> Path:
        """Settings, choice, held-out report and totals."""
        return self.root / "summary.json"

    def resume_files(self) -> tuple[Path, ...]:
        """What a restart reads back; a fresh (not resumed) run deletes them first."""
        return (self.search_state, self.traces, self.preferences, self.calls)

    def files(self) -> tuple[Path, ...]:
        """Every file a search may write here."""
        return (
            self.best_workflows,
            self.best_workflow_png,
            self.ledger,
            self.memory,
            self.history,
            self.summary,
            self.search_state,
            self.traces,
            self.preferences,
            self.questions,
            self.calls,
        )


def ranked_workflows(search: Any, top_k: int) -> list[dict[str, Any]]:
    """The content of ``best_workflows.yaml``: the chosen workflow first, then the best others by
    fitness (:meth:`HFlowSearch.ranked`), each with its scores and the workflow itself."""
    return [
        {
            "rank": r + 1,
            "fitness": i.fitness,
            "accuracy": i.accuracy,
            "cost_per_problem": i.cost,
            "preference_score": round(search.preference_score(i), 4),
            "hash": i.hash,
            "workflow": i.workflow.to_dict(),
        }
        for r, i in enumerate(search.ranked(top_k))
    ]
