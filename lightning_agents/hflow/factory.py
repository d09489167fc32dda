"""One way to build an HFlow search from settings: used by ``evolve``, ``HFlowCallback`` and the benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_agents.hflow.backbones import BackbonePool, ConfigError
from lightning_agents.hflow.config import SearchConfig
from lightning_agents.hflow.genome import has_tools
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.operators import WorkflowExecutor
from lightning_agents.hflow.preferences import (
    FileRater,
    InteractiveRater,
    PreferenceStore,
    Rater,
    SimulatedRater,
)
from lightning_agents.hflow.run_folder import RunFolder
from lightning_agents.hflow.search import HFlowSearch

__all__ = ["build_rater", "build_search", "require_sandbox", "split_problems"]


def split_problems(problems: list[dict[str, Any]], search: SearchConfig) -> tuple[list, list, list]:
    """``(search problems, rater problems, held-out problems)``: disjoint, after a seeded shuffle.

    Held-out problems are taken first, so the search and rater sets never see them.
    """
    import random

    order = list(problems)
    if search.heldout_problems >= len(order):
        # cutting it to fit left the search a single problem, silently
        raise ConfigError(
            f"search.heldout_problems={search.heldout_problems} leaves no problems to search: the task has "
            f"{len(order)} (task_size); lower it or draw more problems"
        )
    random.Random(search.seed).shuffle(order)
    n_held = max(0, search.heldout_problems)
    heldout, rest = order[:n_held], order[n_held:]
    n_eval = search.eval_problems or len(rest)
    val, raters = rest[:n_eval], rest[n_eval:]
    return val, raters or val, heldout


def build_rater(search: SearchConfig, questions_file: str | Path | None = None) -> Rater | None:
    """The rater ``search.rater`` names (``file`` needs ``questions_file``)."""
    if search.rater == "none":
        return None
    if search.rater == "simulated":
        return SimulatedRater(noise=search.rater_noise, seed=search.seed)
    if search.rater == "file":
        if not questions_file:
            raise ConfigError("search.rater: file needs a questions file (preferences_file)")
        return FileRater(str(questions_file))
    if search.rater == "interactive":
        return InteractiveRater()
    raise ConfigError(f"search.rater: unknown rater {search.rater!r}; expected none, simulated, file or interactive")


def require_sandbox(task: Any) -> None:
    """Raise :class:`~lightning_agents.rewards.isolation.IsolationUnavailable` when ``task``'s
    workflows may run code and the sandbox cannot be set up here.

    Any workflow of a task without tools may gain a ``programmer`` or ``test`` step, which runs the
    model's Python in the sandbox; without one, the first such step stopped the search after calls
    were paid for ($0.011 in the evolve quickstart). Agent tasks (with tools) run no code.
    """
    if not has_tools(task):
        from lightning_agents.rewards import isolation

        isolation.check_isolation("bwrap")


def build_search(
    search: SearchConfig,
    task: Any,
    pool: BackbonePool,
    *,
    output: str | Path | None = None,
    preferences_file: str | Path | None = None,
    memory: ExperienceMemory | None = None,
    rater: Rater | None = None,
) -> HFlowSearch:
    """The search for ``task`` with ``pool`` under settings ``search``.

    With ``output``, answers are kept in ``OUTPUT/preferences.jsonl`` (loaded again on restart),
    file-mode questions go to ``preferences_file`` (default ``OUTPUT/questions.jsonl``), every
    trace is streamed to ``OUTPUT/traces.jsonl`` (a restart is served from it) and every model
    call to ``OUTPUT/calls.jsonl`` (a restart's ledger and budget count them).

    Args:
        search: the search settings.
        task: the task (problems, scoring).
        pool: the backbone pool.
        output: run folder (None: nothing on disk).
        preferences_file: the file-mode questions/answers JSONL.
        memory: experience memory (None: a fresh in-memory one).
        rater: overrides the rater ``search.rater`` would build (tests, benchmarks).
    """
    files = RunFolder(Path(output)) if output is not None else None
    if files is not None:
        files.root.mkdir(parents=True, exist_ok=True)
    if preferences_file is None and files is not None:
        preferences_file = files.questions
    if rater is None:
        rater = build_rater(search, preferences_file)
    val, raters, heldout = split_problems(task.problems, search)
    if files is not None:
        pool.ledger.log_calls(files.calls)
    executor = WorkflowExecutor(task, pool, max_tokens=search.max_tokens)
    return HFlowSearch(
        executor,
        search,
        problems=val,
        rater=rater,
        rater_problems=raters,
        memory=memory if memory is not None else ExperienceMemory(),
        preferences=PreferenceStore(str(files.preferences) if files is not None else None),
        heldout=heldout,
        trace_log=str(files.traces) if files is not None else None,
    )
