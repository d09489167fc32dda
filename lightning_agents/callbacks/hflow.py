"""``HFlowCallback``: evolve workflows between training epochs, with the trained model in the pool."""

from __future__ import annotations

import io
import logging
from typing import Any, Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from lightning_agents.hflow.backbones import BackbonePool, BackboneSpec, LocalHFBackbone, build_backbone
from lightning_agents.hflow.evolution import HFlowSearch, SearchConfig
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.operators import WorkflowExecutor
from lightning_agents.hflow.preferences import FileRater, PreferenceStore, SimulatedRater
from lightning_agents.tasks import build_task

log = logging.getLogger(__name__)

__all__ = ["HFlowCallback"]


class HFlowCallback(L.Callback):
    """Every ``every_n_epochs`` epochs, run ``generations`` HFlow generations on a validation task.

    The module's own model (``pl_module.model`` with ``pl_module.tokenizer``, as in
    :class:`~lightning_agents.SFTModule`) joins the backbone pool as ``trained_backbone``: the very
    same object, no copy, generating in eval mode under ``torch.no_grad`` and put back in train
    mode afterwards. Since its weights change between runs, cached results of workflows that use it
    are dropped and its population members re-scored before each run. Logged: ``hflow/best_fitness``,
    ``hflow/best_accuracy``, ``hflow/total_cost``, ``hflow/diversity``, and on TensorBoard the best
    workflow as YAML text and as a picture. ``state_dict``/``load_state_dict`` carry the
    population, cache, preferences, memory and ledger through checkpoints. Runs on global rank 0 only.

    Args:
        task: ``embedded:arithmetic/val``, ``gsm8k``, ``humaneval`` or a class path of a :class:`~lightning_agents.tasks.Task` (a user's own).
        task_path: data file for ``gsm8k`` / ``humaneval``.
        task_size: problems drawn from the task.
        eval_problems: problems each workflow's fitness is measured on.
        backbones: other pool members (their prices are required).
        trained_backbone: pool name of the model being trained.
        trained_input_price: its cost per million prompt tokens (required: never free by default).
        trained_output_price: its cost per million completion tokens.
        every_n_epochs: run the search after every n-th training epoch.
        generations: generations per run.
        population_size: individuals kept.
        offspring: new candidates per generation.
        max_nodes: most nodes per workflow.
        lambda_cost: fitness = accuracy - lambda_cost * mean cost per problem.
        preference_weight: weight of the Bradley-Terry preference score in selection.
        questions_per_generation: cap on pairwise questions per generation.
        rater: ``none``, ``simulated`` (checks answers; for unattended runs) or ``file`` (questions
            written to ``preferences_file`` for a person to answer between runs).
        preferences_file: the file-mode questions/answers JSONL.
        memory_file: experience memory JSON, loaded at start and saved after every run.
        seed: search seed.
        workers: parallel workflow evaluations.
    """

    def __init__(
        self,
        task: str = "embedded:arithmetic/val",
        task_path: str | None = None,
        task_size: int = 48,
        eval_problems: int = 16,
        backbones: list[BackboneSpec] | None = None,
        trained_backbone: str = "trained",
        trained_input_price: float | None = None,
        trained_output_price: float | None = None,
        every_n_epochs: int = 1,
        generations: int = 1,
        population_size: int = 6,
        offspring: int = 6,
        max_nodes: int = 4,
        lambda_cost: float = 0.0,
        preference_weight: float = 0.1,
        questions_per_generation: int = 2,
        rater: Literal["none", "simulated", "file"] = "simulated",
        preferences_file: str | None = None,
        memory_file: str | None = None,
        seed: int = 0,
        workers: int = 1,
    ) -> None:
        super().__init__()
        if every_n_epochs < 1 or generations < 1:
            raise ValueError("every_n_epochs and generations must be >= 1")
        if trained_input_price is None or trained_output_price is None:
            raise ValueError("HFlowCallback needs trained_input_price and trained_output_price: the trained model's "
                             "calls are priced like every other backbone's")
        if rater == "file" and not preferences_file:
            raise ValueError("rater: file needs preferences_file")
        self.task_name, self.task_path, self.task_size = task, task_path, task_size
        self.backbone_specs = list(backbones or [])
        self.trained_backbone = trained_backbone
        self.trained_prices = (trained_input_price, trained_output_price)
        self.every_n_epochs, self.generations = every_n_epochs, generations
        self.config = SearchConfig(population_size=population_size, offspring=offspring, max_nodes=max_nodes,
                                   lambda_cost=lambda_cost, preference_weight=preference_weight,
                                   questions_per_generation=questions_per_generation, eval_problems=eval_problems,
                                   seed=seed, workers=workers)
        self.rater_kind, self.preferences_file, self.memory_file = rater, preferences_file, memory_file
        self.search: HFlowSearch | None = None
        self.runs = 0
        self._pending_state: dict[str, Any] | None = None

    def _build(self, pl_module: L.LightningModule) -> HFlowSearch:
        for attr in ("model", "tokenizer"):
            if getattr(pl_module, attr, None) is None:
                raise AttributeError(f"HFlowCallback needs pl_module.{attr} (a transformers causal LM and its tokenizer)")
        pool = BackbonePool([build_backbone(s) for s in self.backbone_specs])
        pool.add(LocalHFBackbone(self.trained_backbone, input_price=self.trained_prices[0],
                                 output_price=self.trained_prices[1], model_object=pl_module.model,
                                 tokenizer=pl_module.tokenizer))
        task = build_task(self.task_name, self.task_path, n=self.task_size)
        val, rest = task.split(self.config.eval_problems or len(task.problems), seed=self.config.seed)
        rater = None
        if self.rater_kind == "simulated":
            rater = SimulatedRater(seed=self.config.seed)
        elif self.rater_kind == "file":
            rater = FileRater(self.preferences_file)
        search = HFlowSearch(WorkflowExecutor(task, pool), self.config, problems=val, rater=rater,
                             rater_problems=rest or val, memory=ExperienceMemory(self.memory_file),
                             preferences=PreferenceStore())
        if self._pending_state is not None:
            search.load_state_dict(self._pending_state)
            self._pending_state = None
        return search

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        self._run(trainer, pl_module)

    @rank_zero_only
    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.search is None:
            self.search = self._build(pl_module)
        search = self.search
        if search.population:
            search.refresh(self.trained_backbone)
        if isinstance(search.rater, FileRater):
            search.rater.reload()
        search.run(self.generations)
        self.runs += 1
        if self.memory_file:
            search.memory.save(self.memory_file)
        row = search.history[-1]
        best = search.best()
        metrics = {"hflow/best_fitness": row["best_fitness"], "hflow/best_accuracy": row["best_accuracy"],
                   "hflow/best_cost": row["best_cost"], "hflow/total_cost": row["total_cost"],
                   "hflow/diversity": row["diversity"], "hflow/problem_runs": float(row["problem_runs"])}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
            experiment = getattr(logger, "experiment", None)
            if experiment is not None and hasattr(experiment, "add_text") and hasattr(experiment, "add_image"):
                experiment.add_text("hflow/best_workflow", "```yaml\n" + best.workflow.to_yaml() + "```",
                                    trainer.global_step)
                experiment.add_image("hflow/best_workflow", _png_to_array(best.workflow.render_png()),
                                     trainer.global_step, dataformats="HWC")
        log.info("HFlow after epoch %d: best fitness %.3f (%s)", trainer.current_epoch, row["best_fitness"],
                 row["best_workflow"])

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.search is not None:
            self.search.memory.consolidate(self.search.task.name)
            if self.memory_file:
                self.search.memory.save(self.memory_file)

    def state_dict(self) -> dict[str, Any]:
        state = self.search.state_dict() if self.search is not None else self._pending_state
        return {"runs": self.runs, "search": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.runs = int(state_dict.get("runs", 0))
        # The pool needs the module's model, which exists only once fit runs: restore lazily.
        self._pending_state = state_dict.get("search")
        self.search = None


def _png_to_array(png: bytes):
    import matplotlib.image as mpimg

    image = mpimg.imread(io.BytesIO(png), format="png")
    return image[..., :3]
