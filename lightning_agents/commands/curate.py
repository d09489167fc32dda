"""``lightning-agents curate``: TopoCurate on rollout files, with a report.

Writes ``OUTPUT/sft.jsonl`` (selected trajectories as OpenAI-format conversations),
``OUTPUT/rl_tasks.jsonl`` (selected tasks as RL prompt records) and ``OUTPUT/report/`` (per-task
and per-trajectory CSV tables, a summary against the outcome and pass-rate baselines, and PNG
drawings of quotient graphs). Every file is written to a temporary name and moved into place.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

__all__ = ["CurateCommand"]

# Below this many tasks curation takes well under a second and a progress bar is noise.
_PROGRESS_MIN_TASKS = 200


class CurateCommand:
    """Mixin that adds the ``curate`` subcommand to the trainer."""

    def curate(
        self,
        model: Any = None,
        datamodule: Any = None,
        rollouts: list[str] | None = None,
        output: str = "curated",
        format: Literal["auto", "openai", "tau2", "bfcl"] = "auto",
        skip_invalid: bool = False,
        success_threshold: float = 1.0,
        sft_per_task: int = 2,
        sft_min_distance: float = 0.0,
        recovery_weight: float = 1.0,
        efficiency_weight: float = 1.0,
        rl_alpha: float = 1.0,
        rl_beta: float = 1.0,
        rl_top_n: int | None = None,
        rl_min_score: float = 0.0,
        pass_rate_low: float = 0.25,
        pass_rate_high: float = 0.75,
        read_only_tools: list[str] | None = None,
        draw_tasks: int | list[str] = 3,
        workers: int = 0,
        progress: bool = True,
    ) -> dict[str, str]:
        """Curate multi-trial rollouts with TopoCurate and write SFT data, RL tasks and a report.

        Args:
            model: unused (the command needs no model).
            datamodule: unused.
            rollouts: rollout files: tau-bench/OpenAI JSON or JSONL, tau2-bench results, BFCL
                multi-turn result files. Several files may hold trials of the same tasks.
            output: output folder; gets ``sft.jsonl``, ``rl_tasks.jsonl`` and ``report/``.
            format: rollout format, ``auto`` to detect it per file.
            skip_invalid: skip unreadable records (reported with a count) instead of stopping.
            success_threshold: reward at or above which a trial counts as a success.
            sft_per_task: most trajectories kept per task for SFT.
            sft_min_distance: minimum Jaccard distance between the paths of two picks of a task.
            recovery_weight: weight of reflective recovery in the SFT rank.
            efficiency_weight: weight of semantic efficiency in the SFT rank.
            rl_alpha: weight ``a`` of the error branch ratio in the RL score
                ``p(1-p)(1 + a EBR)(1 + b het)``.
            rl_beta: weight ``b`` of strategic heterogeneity in the RL score.
            rl_top_n: keep at most this many RL tasks (default: every task with 0 < p < 1).
            rl_min_score: keep RL tasks scoring at least this.
            pass_rate_low: lower pass-rate bound of the pass-rate filtering baseline.
            pass_rate_high: upper pass-rate bound of the pass-rate filtering baseline.
            read_only_tools: tools that never change the environment (default: guessed from the
                tool name, e.g. ``get_*``, ``search_*``).
            draw_tasks: task ids whose quotient graph to draw, or how many of the top RL tasks.
            workers: processes that build and analyse task graphs in parallel (``0``: in this
                process); the output is the same for any number. Worth it from about 10k
                trajectories: 2 workers curated 10k-100k trajectories 1.2-1.3x faster on 2
                cores (docs/benchmarks.md).
            progress: show a progress bar on long inputs.

        Returns:
            The written paths by name.
        """
        from lightning_agents.datamodules.trajectories import load_rollouts
        from lightning_agents.topology.pipeline import curate_rollouts
        from lightning_agents.topology.report import summary_markdown, write_jsonl, write_report
        from lightning_agents.topology.selection import SelectionConfig
        from lightning_agents.topology.signatures import SignatureConfig

        if not rollouts:
            raise ValueError("curate needs rollout files: --rollouts PATH [PATH ...]")
        selection = SelectionConfig(
            sft_per_task=sft_per_task,
            sft_min_distance=sft_min_distance,
            recovery_weight=recovery_weight,
            efficiency_weight=efficiency_weight,
            rl_alpha=rl_alpha,
            rl_beta=rl_beta,
            rl_top_n=rl_top_n,
            rl_min_score=rl_min_score,
            pass_rate_low=pass_rate_low,
            pass_rate_high=pass_rate_high,
        )
        signatures = SignatureConfig(read_only_tools=frozenset(read_only_tools) if read_only_tools is not None else None)
        records = load_rollouts(list(rollouts), format=format, skip_invalid=skip_invalid)
        if not records:
            raise ValueError(f"no readable rollout in {list(rollouts)} ({records.skipped_count} skipped)")

        def bar(items):
            items = list(items)
            if not progress or len(items) < _PROGRESS_MIN_TASKS:
                return items
            from tqdm.auto import tqdm

            return tqdm(items, desc="curate: tasks", unit="task", file=sys.stderr)

        # The report draws a few graphs and rebuilds just those, so the rest are not kept.
        result = curate_rollouts(records, selection, signatures, success_threshold, progress=bar, keep_graphs=False, workers=workers)
        out = Path(output)
        settings = {
            "rollouts": [str(p) for p in rollouts],
            "format": format,
            "success_threshold": success_threshold,
            "read_only_tools": read_only_tools,
            "skipped_records": records.skipped_count,
            **selection.as_dict(),
        }
        written = {
            "sft": write_jsonl(out / "sft.jsonl", result.sft_conversations()),
            "rl_tasks": write_jsonl(out / "rl_tasks.jsonl", result.rl_records()),
        }
        written.update(write_report(result, out / "report", draw_tasks=draw_tasks, settings=settings))
        summary = json.loads((out / "report" / "summary.json").read_text(encoding="utf-8"))
        print(summary_markdown(summary))
        if records.skipped_count:
            print(f"skipped {records.skipped_count} invalid record(s); see the log for the first ones")
        print(f"wrote {written['sft']} ({len(result.sft)} trajectories), {written['rl_tasks']} ({len(result.rl)} tasks), {out / 'report'}/")
        return {name: str(path) for name, path in written.items()}
