"""``lightning-agents evolve``: the HFlow workflow search on its own, without training.

Writes under ``output``: ``best_workflows.yaml`` (the chosen workflow first, then the best by
fitness), ``best_workflow.png``, ``ledger.json`` (every call's tokens and cost by workflow,
generation, backbone and role), ``memory.json`` (the experience memory), ``history.jsonl`` (one
line per generation), ``preferences.jsonl`` (every answered comparison, reused on restart),
``traces.jsonl`` (every trace as it is computed), ``search_state.json`` (to resume) and
``summary.json`` (with how preferences changed the choice and the held-out scores).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lightning_agents.atomic import atomic_write_text
from lightning_agents.hflow.backbones import BackbonePool, BackboneSpec, ConfigError
from lightning_agents.hflow.config import SearchConfig
from lightning_agents.hflow.run_folder import RunFolder, ranked_workflows
from lightning_agents.json_text import JSONTextError, loads_json

log = logging.getLogger(__name__)

__all__ = ["EvolveCommand"]


def _write(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def _kept(files: RunFolder, hflow: Any) -> str:
    """What an interrupted run leaves for the next one (shown when it stops)."""
    answers = len(hflow.preferences)
    return (
        f"{answers} answer{'s' if answers != 1 else ''} kept in {files.preferences}, paid calls in "
        f"{files.traces}; run the same command again to resume (the generation in flight is replayed "
        "from the logged calls, and questions answered are not asked again)"
    )


def _check_outputs(output: str, memory_file: str | None, preferences_file: str | None) -> None:
    """Refuse, in one line naming the setting, any path evolve would fail to write.

    An unwritable ``--memory_file`` (a path under a file) was found after the whole search, its
    calls paid, as a FileExistsError, and summary.json and the held-out report were never written.
    """
    from lightning_agents.commands.outputs import OutputPathError, check_output_file, check_output_folder

    check_output_folder("output", output)
    for path in RunFolder(Path(output)).files():
        if path.expanduser().is_dir():
            raise OutputPathError(
                f"output: {path} is a folder where evolve writes its {path.name}; move it away "
                "or name another output folder"
            )
    if memory_file:
        check_output_file("memory_file", memory_file)
    if preferences_file:
        check_output_file("preferences_file", preferences_file)


class EvolveCommand:
    """Mixin that adds the ``evolve`` subcommand to the trainer."""

    def evolve(
        self,
        model: Any = None,
        datamodule: Any = None,
        backbones: list[BackboneSpec] | None = None,
        task: str = "embedded:arithmetic/val",
        task_path: str | None = None,
        task_size: int | None = 64,
        search: SearchConfig = SearchConfig(),  # noqa: B008 - read only, as litgpt's `train: TrainArgs`
        generations: int = 5,
        preferences_file: str | None = None,
        memory_file: str | None = None,
        top_k: int = 3,
        output: str = "hflow_out",
        resume: bool = True,
        progress: bool = True,
    ) -> dict[str, str]:
        """Evolve workflows with HFlow and write the chosen ones, the cost ledger and the memory.

        Args:
            model: unused (the pool comes from ``backbones``).
            datamodule: unused.
            backbones: the priced model pool: each ``{name, model, kind: hf|openai, input_price,
                output_price, ...}`` (prices per million tokens; required).
            task: ``embedded:arithmetic[/split]``, ``embedded:agent_world[/split]``, ``gsm8k``, ``math``,
                ``humaneval`` or a class path of a :class:`~lightning_agents.tasks.Task` (a user's own). A task with
                tools is searched with ``agent`` / ``verify`` workflows (episodes in its world).
            task_path: data file for ``gsm8k``, ``math`` (JSONL) / ``humaneval`` (JSONL or .gz).
            task_size: problems drawn from the task (None: all); split into search, rater and
                held-out problems by ``search``.
            search: the search settings (``search:`` in YAML; see
                :class:`~lightning_agents.hflow.SearchConfig`).
            generations: generations to run in total (a resumed run continues up to this number).
            preferences_file: the file-mode questions JSONL (default ``OUTPUT/questions.jsonl``).
                Answers of every rater are kept in ``OUTPUT/preferences.jsonl`` and reused on restart.
            memory_file: experience memory JSON to start from and update (default: only
                ``OUTPUT/memory.json`` is written).
            top_k: workflows written to ``best_workflows.yaml`` (the chosen one first).
            output: output folder.
            resume: continue from ``OUTPUT/search_state.json`` and ``OUTPUT/traces.jsonl`` when they exist.
            progress: show a progress bar.

        Returns:
            The written paths by name.
        """
        import yaml

        from lightning_agents.hflow.factory import build_search, require_sandbox
        from lightning_agents.hflow.memory import ExperienceMemory
        from lightning_agents.tasks import build_task

        if not backbones:
            raise ConfigError("evolve needs a `backbones:` list (name, model, kind, input_price, output_price)")
        _check_outputs(output, memory_file, preferences_file)  # before a model loads or a call is paid
        search = search or SearchConfig()
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        files = RunFolder(out)
        state_path = files.search_state
        if not resume:
            for path in files.resume_files():
                path.unlink(missing_ok=True)
        pool = BackbonePool.from_specs(backbones)
        the_task = build_task(task, task_path, n=task_size)
        require_sandbox(the_task)  # before anything is paid
        memory = ExperienceMemory(memory_file)
        hflow = build_search(search, the_task, pool, output=out, preferences_file=preferences_file, memory=memory)
        if resume and state_path.is_file():
            try:
                state = loads_json(state_path.read_text())
            except JSONTextError as exc:
                raise ConfigError(
                    f"{state_path}: not a search state ({exc}); delete it to start afresh (the traces and "
                    "answers next to it are reused) or pass --resume false"
                ) from None
            hflow.load_state_dict(state)
            print(
                f"evolve: resumed {state_path} at generation {hflow.generation} "
                f"({hflow.evaluator.problem_runs} problem runs, ${hflow.pool.ledger.total_cost():.6g} so far)",
                file=sys.stderr,
            )
        elif resume and (hflow.evaluator.logged or hflow.pool.ledger.call_log.is_file()):
            # a crash before the first save: its paid traces are reused, so they are counted too
            runs = hflow.book_logged_work(None)
            print(
                f"evolve: no {state_path.name} in {out}: starting at generation 0, reusing {runs} paid problem "
                f"runs from traces.jsonl (${hflow.pool.ledger.total_cost():.6g} so far)",
                file=sys.stderr,
            )

        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=generations, initial=min(hflow.generation, generations), desc="evolve", unit="gen")

        def checkpoint(row: dict[str, Any] | None = None) -> None:
            # after every generation: a crash loses at most the generation in flight, whose paid
            # calls are in traces.jsonl already
            _write(state_path, json.dumps(hflow.state_dict()))
            if bar is not None and row is not None:
                bar.update(1)
                bar.set_postfix(best=f"{row['best_fitness']:.3f}", cost=f"{row['total_cost']:.4g}")

        try:
            if not hflow.population:
                hflow.initialize()
                checkpoint()
            hflow.run(max(generations - hflow.generation, 0), progress=checkpoint)
        except KeyboardInterrupt:
            # Ctrl-C (mid-question, say) is a way to stop, not a crash: the last line a person
            # reads says what is kept and how to go on, not a frame deep in the search loop. Still
            # a KeyboardInterrupt, so code that runs evolve (and its tests) can tell a stop.
            raise KeyboardInterrupt(f"evolve: interrupted; {_kept(files, hflow)}") from None
        finally:
            if bar is not None:
                bar.close()
        memory.consolidate(the_task.name)

        try:
            chosen, choice = hflow.finish()  # the final round may ask a person questions
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"evolve: interrupted; {_kept(files, hflow)}") from None
        written: dict[str, str] = {}
        best_doc = ranked_workflows(hflow, top_k)
        heldout = hflow.heldout_report()
        paths = {
            "best_workflows": files.best_workflows,
            "best_workflow_png": files.best_workflow_png,
            "ledger": files.ledger,
            "memory": files.memory,
            "history": files.history,
            "summary": files.summary,
            "search_state": state_path,
            "traces": files.traces,
        }
        _write(paths["best_workflows"], yaml.safe_dump(best_doc, sort_keys=False, allow_unicode=True))
        chosen.workflow.render_png(paths["best_workflow_png"], title=f"chosen: fitness {chosen.fitness:.3f}")
        ledger = pool.ledger
        ledger_doc = {
            "total": ledger.summary().get("total", {}),
            "by_backbone": ledger.summary("backbone"),
            "by_role": ledger.summary("role"),
            "by_generation": {str(k): v for k, v in ledger.summary("generation").items()},
            "by_workflow": ledger.summary("workflow"),
            **ledger.state_dict(),
        }
        _write(paths["ledger"], json.dumps(ledger_doc, indent=1))
        _write(paths["memory"], json.dumps(memory.state_dict(), indent=1))
        if memory_file:
            memory.save(memory_file)
            written["memory_file"] = memory_file
        _write(paths["history"], "".join(json.dumps(r) + "\n" for r in hflow.history))
        summary = {
            "task": the_task.name,
            "backbones": pool.describe(),
            "search": asdict(search),
            "generations": hflow.generation,
            "problem_runs": hflow.evaluator.problem_runs,
            "spent": hflow.spent,
            "best": best_doc[0],
            "choice": choice,
            "heldout": heldout,
            "total_cost": ledger.total_cost(),
            "preferences": len(hflow.preferences),
            "questions_asked": hflow.questions_asked,
            "failed_calls": sum(t.get("errors", 0) for t in hflow.evaluator.cache.values()),
        }
        _write(paths["summary"], json.dumps(summary, indent=1))
        if files.preferences.exists():
            paths["preferences"] = files.preferences
        written.update({k: str(v) for k, v in paths.items() if Path(v).exists()})
        how = (
            "preferences changed the choice from the best-fitness workflow "
            f"{choice['by_fitness']} (giving up {choice['fitness_given_up']:.3f} fitness)"
            if choice["changed_by_preferences"]
            else "preferences did not change the choice"
        )
        print(
            f"HFlow chosen workflow (fitness {chosen.fitness:.3f}, accuracy {chosen.accuracy:.3f}, "
            f"cost/problem {chosen.cost:.3g}; {how}): {chosen.workflow.describe()}"
        )
        for row in heldout:
            print(
                f"  held-out {row['label']}: accuracy {row['accuracy']:.3f}, cost/problem {row['cost_per_problem']:.3g}"
            )
        print(
            f"total cost {ledger.total_cost():.6g} over {hflow.evaluator.problem_runs} problem runs; results in {out}"
        )
        return written
