"""``lightning-agents curate``: TopoCurate on rollout files, with a report.

Writes ``OUTPUT/sft.jsonl`` (selected trajectories as OpenAI-format conversations with their
tools and policy), ``OUTPUT/rl_tasks.jsonl`` (selected tasks as complete RL records with a
verifier) and ``OUTPUT/report/`` (per-task and per-trajectory CSV tables, a summary against
size-matched baselines, and PNG drawings of quotient graphs). Every file is written to a temporary
name and moved into place.

Scale out by task shards: ``--num_shards N --shard_index i`` writes only
``OUTPUT/shards/shard-i-of-N.json``; ``--merge OUTPUT/shards/*.json`` then makes the global
selections and writes the outputs, equal to one run over all files. ``--engine ray`` runs every
shard as a Ray task (a local cluster, or ``--ray_address``) and merges them in one command.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Literal

from lightning_agents.topology.selection import SelectionConfig

log = logging.getLogger(__name__)

__all__ = ["CurateCommand"]

# Below this many tasks curation takes well under a second and a progress bar is noise.
_PROGRESS_MIN_TASKS = 200


def shard_file(output: str | Path, num_shards: int, shard_index: int) -> Path:
    """Where shard ``shard_index`` of ``num_shards`` writes its payload under ``output``."""
    width = len(str(num_shards - 1))
    return Path(output) / "shards" / f"shard-{shard_index:0{width}d}-of-{num_shards}.json"


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
        ground_truth: list[str] | None = None,
        tools: str | None = None,
        verifier: str | None = None,
        bfcl_verifier: Literal["call_match", "execution"] = "call_match",
        selection: SelectionConfig = SelectionConfig(),  # noqa: B008 - an argument group, as litgpt's TrainArgs
        draw_tasks: int | list[str] | str = 3,
        workers: int = 0,
        num_shards: int = 1,
        shard_index: int | None = None,
        merge: list[str] | None = None,
        engine: Literal["local", "ray"] = "local",
        ray_address: str | None = None,
        progress: bool = True,
    ) -> dict[str, str]:
        """Curate multi-trial rollouts with TopoCurate and write SFT data, RL tasks and a report.

        Args:
            model: unused (the command needs no model).
            datamodule: unused.
            rollouts: rollout files: tau-bench/OpenAI JSON or JSONL, tau2-bench results, BFCL
                multi-turn result files. Several files may hold trials of the same tasks, in any
                order: the first file with a task keeps its trial numbers, later files' trials of it
                are numbered after the highest so far. Files of several domains name each task
                ``<domain>/<id>``: tau2's name their domain, a tau-bench file's is read from its
                records (its policy and tools; record by record in a file of two runs), so an
                airline and a retail run pooled give ``airline/13`` and ``retail/13``. A file that
                tells no domain (a run whose trials all raised) joins the one domain of the others,
                or keeps bare ids beside several (a warning names it). Two tasks that would take one
                name stop the run. Call arguments logged as ``str(dict)`` (Python literals) are read
                as JSON where the text is exactly what ``str(dict)`` writes (the count is logged).
            output: output folder; gets ``sft.jsonl``, ``rl_tasks.jsonl`` and ``report/`` (a second run
                into the same folder replaces them).
            format: rollout format, ``auto`` to detect it per file.
            skip_invalid: skip unreadable records (reported with a count) instead of stopping.
            ground_truth: files of each task's ground truth by id: BFCL possible-answer (and
                question) files, which score BFCL result files, or tau2-bench ``tasks.json``
                files, which give tasks to tau2 results files that carry none.
            tools: JSON file of the OpenAI tool schemas the agent was offered, for files that do
                not record them (tau-bench's); SFT and RL records carry them.
            verifier: class path of the verifier for RL records of tasks whose file names none
                (tau-bench, tau2 and BFCL name theirs); a task RL selects without one is an error.
            bfcl_verifier: what scores BFCL trials from the possible answers and is named in their
                RL records: ``call_match`` (the calls alone) or ``execution`` (the calls run in
                BFCL's own API classes, BFCL's verdicts; needs ``pip install --no-deps bfcl-eval``
                and the question files in ``ground_truth``).
            selection: every setting that changes the selection (``--selection.sft_per_task``,
                ``--selection.rl_top_n``, ...; see ``SelectionConfig``).
            draw_tasks: which tasks' quotient graphs to draw: a number (``--draw_tasks 3``: that
                many of the top RL tasks, ``0``: none) or task ids (``--draw_tasks+ ID``, once per
                id, or ``--draw_tasks '[ID, ...]'``; a single id that is not a number also works as
                ``--draw_tasks ID``). A numeric task id (tau-bench's ``7``) must be given as
                ``--draw_tasks+ 7``, since ``--draw_tasks 7`` is a count. Unknown ids stop the run
                before anything is written.
            workers: processes that build and analyse task graphs in parallel (``0``: in this
                process); the output is the same for any number. Worth it from about 10k
                trajectories: 2 workers curated 10k-100k trajectories 1.2-1.3x faster on 2
                cores (docs/benchmarks.md).
            num_shards: split the tasks into this many shards by a stable hash of the task id.
            shard_index: curate only this shard and write its payload to
                ``OUTPUT/shards/``; merge all payloads with ``--merge``.
            merge: shard payload files to merge into the global selections and outputs (instead
                of reading rollouts).
            engine: ``local`` (this process) or ``ray`` (each of ``num_shards`` shards a Ray task,
                then merged; needs ``pip install 'lightning-agents[distributed]'``).
            ray_address: address of an existing Ray cluster (default: start a local one).
            progress: show a progress bar on long inputs.

        Returns:
            The written paths by name.
        """
        from lightning_agents.atomic import atomic_write_text
        from lightning_agents.commands.outputs import check_output_folder
        from lightning_agents.topology.data_checks import curation_warnings
        from lightning_agents.topology.pipeline import CurationError
        from lightning_agents.topology.report import check_draw_tasks, summary_markdown, write_jsonl, write_report
        from lightning_agents.topology.reward_check import reward_check, reward_check_line
        from lightning_agents.topology.runs import curate_files, curate_shard, curate_with_ray, merge_payloads
        from lightning_agents.topology.shards import ShardError, check_shard, check_shard_payloads

        if not rollouts and not merge:
            raise CurationError("curate needs rollout files: --rollouts PATH [PATH ...] (or --merge SHARD_FILES)")
        if num_shards < 1 or workers < 0:
            raise CurationError(f"curate needs --num_shards >= 1 and --workers >= 0, got {num_shards} and {workers}")
        if isinstance(selection, dict):
            selection = SelectionConfig(**selection)
        inputs = {
            "format": format,
            "skip_invalid": skip_invalid,
            "ground_truth": ground_truth or [],
            "tools": tools,
            "bfcl_verifier": bfcl_verifier,
        }
        out = Path(output)
        check_output_folder("output", out)  # before the rollouts are read and curated
        if shard_index is not None:
            check_shard(num_shards, shard_index)
            payload = curate_shard(rollouts or [], selection, num_shards, shard_index, inputs, verifier, workers)
            path = atomic_write_text(shard_file(out, num_shards, shard_index), json.dumps(payload, ensure_ascii=False))
            print(
                f"wrote {path} ({len(payload['tasks'])} tasks, {payload['rollouts']} rollouts of shard {shard_index} of {num_shards})"
            )
            return {"shard": str(path)}

        result, skipped, not_run, check = None, 0, 0, None
        if merge:
            payloads = []
            for name in merge:
                try:
                    payloads.append(json.loads(Path(name).read_text(encoding="utf-8")))
                except FileNotFoundError:
                    raise FileNotFoundError(f"shard file {name} does not exist") from None
                except json.JSONDecodeError as exc:
                    if _json_lines(name):
                        # A rollout file in JSON Lines (a BFCL result file): "Extra data" told nothing.
                        raise ShardError(
                            f"{name} is not a shard file: it holds JSON Lines (one record per line, as a BFCL result "
                            f"file does), where a shard file (written by curate --num_shards N --shard_index i into "
                            "OUTPUT/shards/) is one JSON object; rollout files are curated with --rollouts, not --merge"
                        ) from None
                    raise CurationError(f"{name}:{exc.lineno}: shard file is not valid JSON ({exc.msg})") from None
            # Before the settings are compared: another code version may record other settings,
            # and a file that is no shard payload has none.
            check_shard_payloads(payloads, merge)
            selection = _shard_selection(payloads, selection)
            result = merge_payloads(payloads, merge, shard_files=merge)
            skipped, not_run, check = _shard_counts(payloads)
        elif engine == "ray":
            result, payloads = curate_with_ray(rollouts, selection, num_shards, inputs, verifier, address=ray_address)
            skipped, not_run, check = _shard_counts(payloads)
        else:

            def bar(items):
                items = list(items)
                if not progress or len(items) < _PROGRESS_MIN_TASKS:
                    return items
                from tqdm.auto import tqdm

                return tqdm(items, desc="curate: tasks", unit="task", file=sys.stderr)

            # The report draws a few graphs and rebuilds just those, so the rest are not kept.
            result, records = curate_files(rollouts, selection, inputs, verifier, workers, progress=bar)
            skipped = records.skipped_count
            not_run = len(records.not_run)
            check = reward_check(records, selection.success_threshold)
        settings = {
            "rollouts": [str(p) for p in rollouts or []],
            "merged_shards": [str(p) for p in merge or []],
            "engine": engine,
            "num_shards": num_shards,
            "format": format,
            "ground_truth": ground_truth,
            "tools": tools,
            "verifier": verifier,
            "bfcl_verifier": bfcl_verifier,
            "skipped_records": skipped,
            "not_run_trials": not_run,
            "selection": selection.as_dict(),
        }
        draw = [draw_tasks] if isinstance(draw_tasks, str) else draw_tasks
        check_draw_tasks(result, draw)  # ids asked for are checked on a merged result too
        # Graphs are rebuilt from rollouts, which a merged result does not hold.
        if not result.rollouts:
            if draw and not isinstance(draw, int):
                log.warning("--draw_tasks: a result merged from shards holds no rollouts, so no graphs are drawn")
            draw = 0
        # Both built before anything is written: a task RL cannot score stops the run with no
        # sft.jsonl left behind from it.
        sft, rl = result.sft_conversations(), result.rl_records()
        written = {"sft": write_jsonl(out / "sft.jsonl", sft), "rl_tasks": write_jsonl(out / "rl_tasks.jsonl", rl)}
        written.update(write_report(result, out / "report", draw_tasks=draw, settings=settings, reward_check=check))
        summary = json.loads((out / "report" / "summary.json").read_text(encoding="utf-8"))
        print(summary_markdown(summary))
        if skipped:
            print(f"skipped {skipped} invalid record(s); see the log (one warning per file, with its first)")
        if not_run:
            print(
                f"left out {not_run} trial(s) the runs recorded as their own errors instead of trajectories; see the log"
            )
        for warning in curation_warnings(sft, rl, result.analyses):
            log.warning("%s", warning)
        line, warn = reward_check_line(check or {})
        if warn:
            log.warning("%s", line)
        elif line:
            print(line)
        print(
            f"wrote {written['sft']} ({len(result.sft)} trajectories), {written['rl_tasks']} ({len(result.rl)} tasks), {out / 'report'}/"
        )
        return {name: str(path) for name, path in written.items()}


def _shard_counts(payloads: list[dict[str, Any]]) -> tuple[int, int, dict[str, Any]]:
    """``(skipped records, trials never played, merged reward check)`` over shard payloads."""
    from lightning_agents.topology.reward_check import merge_reward_checks

    skipped = sum(len(p.get("skipped", [])) for p in payloads)
    not_run = sum(len(p.get("not_run", [])) for p in payloads)
    return skipped, not_run, merge_reward_checks([p.get("reward_check") for p in payloads])


def _shard_selection(payloads: list[dict[str, Any]], given: SelectionConfig) -> SelectionConfig:
    """The selection settings the shards were curated with; ``--selection.*`` given with
    ``--merge`` must be those (per-task picks were made in the shards, so a merge cannot change
    them): other values were silently ignored and the summary recorded them as if used."""
    from lightning_agents.topology.pipeline import CurationError

    made = payloads[0].get("selection") if payloads else None
    if not isinstance(made, dict):
        return given
    used = SelectionConfig(**made)
    if given != SelectionConfig() and given != used:
        changed = sorted(k for k, v in given.as_dict().items() if used.as_dict().get(k) != v)
        raise CurationError(
            f"--merge: the shards were curated with other selection settings ({', '.join(changed)}); pass "
            "--selection.* to every shard command instead (a merge keeps the shards' settings)"
        )
    return used


def _json_lines(path: str) -> bool:
    """Whether ``path`` holds JSON Lines: its first two non-empty lines are JSON values each."""
    lines = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                lines.append(line)
                if len(lines) == 2:
                    break
    try:
        for line in lines:
            json.loads(line)
    except json.JSONDecodeError:
        return False
    return len(lines) == 2
