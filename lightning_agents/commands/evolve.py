"""``lightning-agents evolve``: the HFlow workflow search on its own, without training.

Writes under ``output``: ``best_workflows.yaml`` (the top workflows with their scores),
``best_workflow.png``, ``ledger.json`` (every call's tokens and cost by workflow, generation,
backbone and role), ``memory.json`` (the experience memory), ``history.jsonl`` (one line per
generation), ``preferences.jsonl`` (every answered comparison) and ``summary.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from lightning_agents.hflow.backbones import BackbonePool, BackboneSpec, ConfigError

log = logging.getLogger(__name__)

__all__ = ["EvolveCommand"]


def _write(path: Path, text: str) -> None:
    # Temporary name then rename: an interrupted run never leaves half a file behind.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


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
        eval_problems: int | None = 16,
        generations: int = 5,
        population_size: int = 8,
        offspring: int = 8,
        max_nodes: int = 5,
        lambda_cost: float = 0.0,
        objective: Literal["scalar", "pareto"] = "scalar",
        preference_weight: float = 0.1,
        questions_per_generation: int = 4,
        preferences: Literal["none", "simulated", "file", "interactive"] = "simulated",
        preferences_file: str | None = None,
        rater_noise: float = 0.0,
        memory_file: str | None = None,
        use_memory: bool = True,
        optimizer_backbone: str | None = None,
        crossover_rate: float = 0.25,
        workers: int = 2,
        seed: int = 0,
        top_k: int = 3,
        output: str = "hflow_out",
        progress: bool = True,
    ) -> dict[str, str]:
        """Evolve workflows with HFlow and write the best ones, the cost ledger and the memory.

        Args:
            model: unused (the pool comes from ``backbones``).
            datamodule: unused.
            backbones: the priced model pool: each ``{name, model, kind: hf|openai, input_price,
                output_price, ...}`` (prices per million tokens; required).
            task: ``embedded:arithmetic[/split]``, ``gsm8k``, ``humaneval`` or a class path of a :class:`~lightning_agents.tasks.Task` (a user's own).
            task_path: data file for ``gsm8k`` (JSONL) / ``humaneval`` (JSONL or .gz).
            task_size: problems drawn from the task (None: all).
            eval_problems: problems each workflow's fitness is measured on; the rest of the drawn
                problems are what preference questions are asked on.
            generations: generations to run.
            population_size: individuals kept each generation.
            offspring: new candidates per generation.
            max_nodes: most nodes per workflow.
            lambda_cost: fitness = accuracy - lambda_cost * mean cost per problem.
            objective: ``scalar`` (that fitness) or ``pareto`` (accuracy/cost non-domination).
            preference_weight: weight of the Bradley-Terry preference score in selection.
            questions_per_generation: cap on pairwise questions per generation.
            preferences: ``none``; ``simulated`` (a rater that checks answers, then prefers the
                cheaper); ``file`` (questions go to ``preferences_file`` for a person to answer
                between runs; answered lines are used on the next run); ``interactive`` (asked in
                the terminal).
            preferences_file: the file-mode JSONL (default ``OUTPUT/questions.jsonl``).
            rater_noise: flip probability of the simulated rater.
            memory_file: experience memory JSON to start from and update (default: only
                ``OUTPUT/memory.json`` is written).
            use_memory: seed and bias the search with the memory's domain priors.
            optimizer_backbone: pool name of the model that rewrites prompts (None: template edits).
            crossover_rate: share of offspring made by sub-graph crossover.
            workers: workflows evaluated in parallel.
            seed: search seed (the run is reproducible for a given seed).
            top_k: best workflows written to ``best_workflows.yaml``.
            output: output folder.
            progress: show a progress bar.

        Returns:
            The written paths by name.
        """
        import yaml

        from lightning_agents.hflow.evolution import HFlowSearch, SearchConfig
        from lightning_agents.hflow.memory import ExperienceMemory
        from lightning_agents.hflow.operators import WorkflowExecutor
        from lightning_agents.hflow.preferences import FileRater, InteractiveRater, PreferenceStore, SimulatedRater
        from lightning_agents.tasks import build_task

        if not backbones:
            raise ConfigError("evolve needs a `backbones:` list (name, model, kind, input_price, output_price)")
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        pool = BackbonePool.from_specs(backbones)
        the_task = build_task(task, task_path, n=task_size)
        n_eval = eval_problems or len(the_task.problems)
        val, rest = the_task.split(n_eval, seed=seed)
        rater = None
        if preferences == "simulated":
            rater = SimulatedRater(noise=rater_noise, seed=seed)
        elif preferences == "file":
            rater = FileRater(preferences_file or str(out / "questions.jsonl"))
        elif preferences == "interactive":
            rater = InteractiveRater()
        memory = ExperienceMemory(memory_file)
        config = SearchConfig(population_size=population_size, offspring=offspring, max_nodes=max_nodes,
                              lambda_cost=lambda_cost, objective=objective,
                              preference_weight=preference_weight if rater else 0.0,
                              questions_per_generation=questions_per_generation, crossover_rate=crossover_rate,
                              eval_problems=n_eval, workers=workers, seed=seed, use_memory_seeds=use_memory)
        prefs_path = out / "preferences.jsonl"
        prefs_path.unlink(missing_ok=True)
        search = HFlowSearch(WorkflowExecutor(the_task, pool), config, problems=val, rater=rater,
                             rater_problems=rest or val, memory=memory, preferences=PreferenceStore(str(prefs_path)),
                             optimizer_backbone=optimizer_backbone)

        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=generations, desc="evolve", unit="gen")

        def tick(row: dict[str, Any]) -> None:
            if bar is not None:
                bar.update(1)
                bar.set_postfix(best=f"{row['best_fitness']:.3f}", cost=f"{row['total_cost']:.4g}")

        try:
            search.run(generations, progress=tick)
        finally:
            if bar is not None:
                bar.close()
        memory.consolidate(the_task.name)

        ranked = sorted(search.seen.values(), key=lambda i: (-i.fitness, i.cost))[:top_k]
        written: dict[str, str] = {}
        best_doc = [{"rank": r + 1, "fitness": i.fitness, "accuracy": i.accuracy, "cost_per_problem": i.cost,
                     "hash": i.hash, "workflow": i.workflow.to_dict()} for r, i in enumerate(ranked)]
        paths = {
            "best_workflows": out / "best_workflows.yaml",
            "best_workflow_png": out / "best_workflow.png",
            "ledger": out / "ledger.json",
            "memory": out / "memory.json",
            "history": out / "history.jsonl",
            "summary": out / "summary.json",
        }
        _write(paths["best_workflows"], yaml.safe_dump(best_doc, sort_keys=False, allow_unicode=True))
        ranked[0].workflow.render_png(paths["best_workflow_png"], title=f"best: fitness {ranked[0].fitness:.3f}")
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
        _write(paths["history"], "".join(json.dumps(r) + "\n" for r in search.history))
        summary = {
            "task": the_task.name, "backbones": pool.describe(), "settings": {**config.__dict__},
            "generations": search.generation, "problem_runs": search.evaluator.problem_runs,
            "best": best_doc[0], "total_cost": ledger.total_cost(), "preferences": len(search.preferences),
        }
        _write(paths["summary"], json.dumps(summary, indent=1))
        if prefs_path.exists():
            paths["preferences"] = prefs_path
        written.update({k: str(v) for k, v in paths.items()})
        print(f"HFlow best workflow (fitness {ranked[0].fitness:.3f}, accuracy {ranked[0].accuracy:.3f}, "
              f"cost/problem {ranked[0].cost:.3g}): {ranked[0].workflow.describe()}")
        print(f"total cost {ledger.total_cost():.6g} over {search.evaluator.problem_runs} problem runs; results in {out}")
        return written
