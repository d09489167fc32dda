"""``HFlowCallback``: evolve workflows between training epochs, with the trained model in the pool."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.utilities import rank_zero_only

from lightning_agents.atomic import atomic_write_text
from lightning_agents.hflow.backbones import (
    BackbonePool,
    BackboneSpec,
    LocalHFBackbone,
    build_backbone,
)
from lightning_agents.hflow.config import SearchConfig
from lightning_agents.hflow.factory import build_search, require_sandbox
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.preferences import FileRater
from lightning_agents.hflow.run_folder import RunFolder, ranked_workflows
from lightning_agents.hflow.search import HFlowSearch
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
    workflow as YAML text and as a picture. In ``output`` (by default ``hflow/`` in the trainer's
    log folder, so a fit without a logger still leaves them) every answer, trace and paid call is
    streamed while the search runs, and ``best_workflows.yaml`` and ``history.jsonl`` are rewritten
    after each run. ``state_dict``/``load_state_dict`` carry the population, cache, preferences,
    memory and ledger through checkpoints. Runs on global rank 0 only.

    Args:
        task: ``embedded:arithmetic/val``, ``embedded:agent_world/val``, ``gsm8k``, ``math``, ``humaneval`` or a class
            path of a :class:`~lightning_agents.tasks.Task` (a user's own); a task with tools is
            searched with ``agent`` / ``verify`` workflows.
        task_path: data file for ``gsm8k`` / ``math`` / ``humaneval``.
        task_size: problems drawn from the task.
        backbones: other pool members (their prices are required).
        trained_backbone: pool name of the model being trained.
        trained_input_price: its cost per million prompt tokens (required: never free by default).
        trained_output_price: its cost per million completion tokens.
        every_n_epochs: run the search after every n-th training epoch.
        generations: generations per run.
        search: the search settings (``search:`` in YAML, the same
            :class:`~lightning_agents.hflow.SearchConfig` ``evolve`` takes).
        preferences_file: the file-mode questions/answers JSONL (``search.rater: file``).
        memory_file: experience memory JSON, loaded at start and saved after every run.
        output: folder for ``preferences.jsonl`` (every answer), ``traces.jsonl``, ``calls.jsonl``,
            ``best_workflows.yaml`` and ``history.jsonl`` (None: ``hflow`` in the trainer's
            ``log_dir``, or in ``default_root_dir`` without a logger). A fit that resumes no
            checkpoint starts a new call log there and reuses the traces a previous fit left
            there except the trained model's (computed with other weights).
        top_k: workflows listed in ``best_workflows.yaml`` (the chosen one first).
    """

    def __init__(
        self,
        task: str = "embedded:arithmetic/val",
        task_path: str | None = None,
        task_size: int = 48,
        backbones: list[BackboneSpec] | None = None,
        trained_backbone: str = "trained",
        trained_input_price: float | None = None,
        trained_output_price: float | None = None,
        every_n_epochs: int = 1,
        generations: int = 1,
        search: SearchConfig | None = None,
        preferences_file: str | None = None,
        memory_file: str | None = None,
        output: str | None = None,
        top_k: int = 5,
    ) -> None:
        super().__init__()
        if every_n_epochs < 1 or generations < 1:
            raise ValueError("every_n_epochs and generations must be >= 1")
        if trained_input_price is None or trained_output_price is None:
            raise ValueError(
                "HFlowCallback needs trained_input_price and trained_output_price: the trained model's "
                "calls are priced like every other backbone's"
            )
        self.config = search or SearchConfig(
            population_size=6, offspring=6, max_nodes=4, questions_per_generation=2, workers=1
        )
        if self.config.rater == "file" and not preferences_file:
            raise ValueError("search.rater: file needs preferences_file")
        if self.config.rater == "interactive":
            raise ValueError("search.rater: interactive would stop training at a prompt; use file or simulated")
        self.task_name, self.task_path, self.task_size = task, task_path, task_size
        self.backbone_specs = list(backbones or [])
        self.trained_backbone = trained_backbone
        self.trained_prices = (trained_input_price, trained_output_price)
        self.every_n_epochs, self.generations = every_n_epochs, generations
        self.preferences_file, self.memory_file, self.output = preferences_file, memory_file, output
        self.top_k = top_k
        self._folder: RunFolder | None = None  # output, resolved at setup (the log folder needs the trainer)
        self.search: HFlowSearch | None = None
        self._task: Any = None
        self.runs = 0
        self._pending_state: dict[str, Any] | None = None

    def _build(self, pl_module: L.LightningModule) -> HFlowSearch:
        for attr in ("model", "tokenizer"):
            if getattr(pl_module, attr, None) is None:
                raise AttributeError(
                    f"HFlowCallback needs pl_module.{attr} (a transformers causal LM and its tokenizer)"
                )
        pool = BackbonePool([build_backbone(s) for s in self.backbone_specs])
        pool.add(
            LocalHFBackbone(
                self.trained_backbone,
                input_price=self.trained_prices[0],
                output_price=self.trained_prices[1],
                model_object=pl_module.model,
                tokenizer=pl_module.tokenizer,
            )
        )
        task = self._task if self._task is not None else build_task(self.task_name, self.task_path, n=self.task_size)
        if self._folder is None:  # a search built outside fit (setup resolves the default)
            self._folder = RunFolder(Path(self.output or "hflow"))
        folder = self._folder
        if self._pending_state is None:
            folder.calls.unlink(missing_ok=True)  # a fit that resumes nothing: the calls are this run's
        search = build_search(
            self.config,
            task,
            pool,
            output=folder.root,
            preferences_file=self.preferences_file,
            memory=ExperienceMemory(self.memory_file),
        )
        if self._pending_state is not None:
            search.load_state_dict(self._pending_state)
            self._pending_state = None
        else:
            # traces a previous fit left stay a cache for the other backbones, but the trained
            # model's were computed with weights it no longer has
            search.evaluator.invalidate_backbone(self.trained_backbone)
        return search

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and self._folder is None:
            # on every rank: trainer.log_dir broadcasts rank 0's folder
            root = (
                self.output if self.output is not None else Path(trainer.log_dir or trainer.default_root_dir) / "hflow"
            )
            self._folder = RunFolder(Path(root))
        if stage == "fit" and self._task is None:
            self._task = build_task(self.task_name, self.task_path, n=self.task_size)
            # the first generation runs after an epoch of training: a missing sandbox must stop the
            # fit now, not after that epoch and the calls paid before the first program ran
            require_sandbox(self._task)

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
        ranked = ranked_workflows(search, self.top_k)
        atomic_write_text(self._folder.best_workflows, yaml.safe_dump(ranked, sort_keys=False, allow_unicode=True))
        atomic_write_text(self._folder.history, "".join(json.dumps(r) + "\n" for r in search.history))
        metrics = {
            "hflow/best_fitness": row["best_fitness"],
            "hflow/best_accuracy": row["best_accuracy"],
            "hflow/best_cost": row["best_cost"],
            "hflow/total_cost": row["total_cost"],
            "hflow/diversity": row["diversity"],
            "hflow/problem_runs": float(row["problem_runs"]),
        }
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
            experiment = getattr(logger, "experiment", None)
            if experiment is not None and hasattr(experiment, "add_text") and hasattr(experiment, "add_image"):
                experiment.add_text(
                    "hflow/best_workflow", "```yaml\n" + best.workflow.to_yaml() + "```", trainer.global_step
                )
                experiment.add_image(
                    "hflow/best_workflow",
                    _png_to_array(best.workflow.render_png()),
                    trainer.global_step,
                    dataformats="HWC",
                )
        log.info(
            "HFlow after epoch %d: best fitness %.3f (%s)",
            trainer.current_epoch,
            row["best_fitness"],
            row["best_workflow"],
        )

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
