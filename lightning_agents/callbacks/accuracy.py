"""``HeldOutAccuracy``: generation accuracy on verifiable held-out problems before and after fit."""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from lightning_agents.atomic import atomic_write_text
from lightning_agents.json_text import JSONTextError, loads_json
from lightning_agents.rollout.evaluate import evaluate_accuracy
from lightning_agents.rollout.hf_engine import HFGenerationEngine
from lightning_agents.tasks.raw_code import scores_code_raw  # re-exported: defined here until session 43

log = logging.getLogger(__name__)

__all__ = ["HeldOutAccuracy", "import_object", "scores_code_raw"]


def import_object(path: str) -> Any:
    """Import ``package.module.Name`` and return the object; errors name the path."""
    module_name, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from None


class HeldOutAccuracy(L.Callback):
    """Greedy-decode held-out problems at the start and the end of ``fit`` and report accuracy.

    The module must expose ``model`` (a transformers causal LM) and ``tokenizer``, as
    :class:`~lightning_agents.SFTModule` and :class:`~lightning_agents.RSTGModule` do. Results go to
    the logger (``heldout/accuracy``), to stdout, and to ``heldout_accuracy.json`` in the log dir.

    A problem of ``path`` whose record names a ``verifier`` (a class path or ``{class_path,
    init_args}``, as RL prompt records do) is scored with it, as RSTG scores the record; the others
    with ``verifier``. A HumanEval record's verifier carries the problem's entry point, stub and
    ``module_name`` (:meth:`~lightning_agents.tasks.HumanEvalTask.verifier_spec_for`), so a
    body-only answer is scored as evaluation scores it. Before session 42 every problem got
    ``verifier`` built with its defaults: a held-out HumanEval file scored the raw completion as
    ``__main__``, a right body 0.

    Every distinct verifier the records name is built before anything is generated, and one that
    cannot be built (a mistyped class path, ``init_args`` the verifier refuses: a config error,
    the same for every record naming it) raises a ``ValueError`` naming the first record naming it
    (id and ``file:line``) and the spec. A record whose verifier raises when scoring (a sandbox that
    does not start) counts wrong, and one warning per evaluation names how many did, the first
    one's id, ``file:line``, verifier and exception; their number is the ``verifier_errors``
    metric (logged as ``heldout/verifier_errors``). When it raised on every record, none was
    scored, and the evaluation raises a ``RuntimeError`` with the first exception. Before session
    43 any such record stopped the evaluation, and with it the fit; b1726c4 counted a verifier that
    could not be built wrong too, so a mistyped class path read as accuracy 0.

    A HumanEval record saved before commit 32ca778 (its ``CodeVerifier`` names no
    ``entry_point``: :func:`scores_code_raw`) still scores the raw completion; the first one in
    ``path`` is warned about once, naming the file and how to write it again.

    Args:
        split: split of the embedded arithmetic task (``val`` or ``test``), used when ``path`` is None.
        path: JSONL of ``{"prompt": str | messages, "reference": str}`` problems instead of the embedded
            task, each optionally with its ``verifier`` (what ``curate`` and ``generate`` write, and
            ``HumanEvalTask.prompt_record``).
        size: evaluate only the first ``size`` problems (``None``: all).
        verifier: class path of the verifier of problems that name none (all of the embedded
            task's), called as ``verifier(completion, reference)``.
        max_new_tokens: completion length limit.
        batch_size: prompts per generate call.
        every_n_epochs: also evaluate at the end of every n-th training epoch (0: only before and after).
    """

    def __init__(
        self,
        split: str = "test",
        path: str | None = None,
        size: int | None = None,
        verifier: str = "lightning_agents.rewards.ArithmeticVerifier",
        max_new_tokens: int = 32,
        batch_size: int = 64,
        every_n_epochs: int = 0,
    ) -> None:
        super().__init__()
        self.split = split
        self.path = path
        self.size = size
        self.verifier = import_object(verifier)()
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.every_n_epochs = every_n_epochs
        self.history: list[dict[str, float]] = []
        self._record_verifiers: dict[str, Any] = {}
        self._warned_raw_code = False

    def problems(self) -> tuple[list, list[str]]:
        """The prompts and references evaluated."""
        prompts, references, _, _ = self._read()
        return prompts, references

    def _verifier_for(self, spec: str | dict[str, Any] | None) -> Any:
        if not spec:
            return self.verifier
        # one verifier per distinct spec (HumanEval's differ by problem), built as RSTG builds a record's
        key = json.dumps(spec, sort_keys=True)
        if key not in self._record_verifiers:
            from lightning_agents.rewards.registry import resolve_verifier

            self._record_verifiers[key] = resolve_verifier(spec)
        return self._record_verifiers[key]

    def _read(self) -> tuple[list, list[str], list[Any], list[str]]:
        """Prompts, references, the verifier spec each record names (``None``: none) and where each
        record is (its id and ``file:line``, for messages)."""
        if self.path is None:
            from lightning_agents.tasks.arithmetic import make_arithmetic_split

            records = make_arithmetic_split(self.split)
            prompts = [[{"role": "user", "content": r["question"]}] for r in records]
            references = [r["answer"] for r in records]
            specs: list[Any] = [None] * len(records)
            wheres = [f"{r.get('id', i)} (embedded {self.split} split)" for i, r in enumerate(records)]
        else:
            prompts, references, specs, wheres = [], [], [], []
            with open(self.path, encoding="utf-8") as handle:
                for lineno, line in enumerate(handle, 1):
                    if line.strip():
                        try:
                            item = loads_json(line)
                        except JSONTextError as exc:
                            raise ValueError(f"{self.path}:{lineno}: invalid JSON ({exc})") from None
                        if not isinstance(item, dict) or "prompt" not in item or "reference" not in item:
                            raise ValueError(f"{self.path}:{lineno}: needs 'prompt' and 'reference'")
                        prompts.append(item["prompt"])
                        references.append(str(item["reference"]))
                        specs.append(item.get("verifier"))
                        ident = item.get("id", item.get("task_id", "(no id)"))
                        wheres.append(f"{ident} ({self.path}:{lineno})")
                        if not self._warned_raw_code and scores_code_raw(item):
                            self._warned_raw_code = True
                            log.warning(
                                "%s:%d: record %s is a HumanEval-style code record whose CodeVerifier names "
                                "no entry_point (saved before commit 32ca778, or curated from rollouts written "
                                "before session 42): it and any like it score the raw completion, a right "
                                "body-only answer 0. Write the file again from its source (the HumanEval "
                                "file through HumanEvalTask.prompt_record, or a new rollout + curate run)",
                                self.path,
                                lineno,
                                ident,
                            )
        if self.size is not None:
            prompts, references, specs = prompts[: self.size], references[: self.size], specs[: self.size]
            wheres = wheres[: self.size]
        return prompts, references, specs, wheres

    def evaluate(self, pl_module: L.LightningModule) -> dict[str, float]:
        """Accuracy of the module's current weights: :func:`~lightning_agents.rollout.evaluate.evaluate_accuracy`'s
        ``{"accuracy", "truncated", "n"}`` plus ``verifier_errors``, the records whose verifier raised
        (each counted wrong).

        Raises:
            ValueError: a record's verifier cannot be built (a mistyped class path, ``init_args`` the
                verifier refuses), before anything is generated; the message names the first record
                naming it (id and ``file:line``) and the spec.
            RuntimeError: the verifier raised on every record (none was scored); chained to the
                first exception.
        """
        prompts, references, specs, wheres = self._read()
        # Every distinct spec is built before generating: a spec that cannot be built is a config
        # error that holds for every record naming it, so it stops the evaluation here, naming the
        # record, rather than reading as accuracy 0 with one warning (as b1726c4 had it).
        verifiers = [self._built(spec, where) for spec, where in zip(specs, wheres)]
        failures: list[tuple[int, BaseException]] = []
        engine = HFGenerationEngine(pl_module.model, pl_module.tokenizer)
        # evaluate_accuracy hands each reference to the verifier as given: the problem's index
        # travels in its place, so each completion meets its own problem's verifier and reference.
        keys = [str(i) for i in range(len(prompts))]

        def score(completion: str, key: str) -> float:
            i = int(key)
            # A verifier raising on one record (a sandbox that did not start) costs that record,
            # not the evaluation: before session 43 it stopped the fit at its start or its end.
            try:
                return verifiers[i](completion, references[i])
            except Exception as exc:
                failures.append((i, exc))
                return 0.0

        metrics = evaluate_accuracy(engine, prompts, keys, score, self.batch_size, self.max_new_tokens)
        metrics["verifier_errors"] = float(len(failures))
        if failures:
            i, exc = failures[0]
            named = self._spec_text(specs[i])
            if len(failures) == len(prompts):
                # no record was scored: an accuracy of 0 would read as the model's, not the verifier's
                raise RuntimeError(
                    f"held-out accuracy: the verifier raised on all {len(prompts)} records, so none was "
                    f"scored; the first: record {wheres[i]}, verifier {named}: {type(exc).__name__}: {exc}"
                ) from exc
            log.warning(
                "held-out accuracy: the verifier raised on %d of %d records, each counted wrong; the "
                "first: record %s, verifier %s: %s: %s",
                len(failures),
                len(prompts),
                wheres[i],
                named,
                type(exc).__name__,
                exc,
            )
        return metrics

    def _built(self, spec: Any, where: str) -> Any:
        """The verifier of a record naming ``spec``; a ValueError naming the record if it cannot be built."""
        try:
            return self._verifier_for(spec)
        except Exception as exc:
            raise ValueError(
                f"held-out accuracy: record {where} names verifier {self._spec_text(spec)}, which cannot "
                f"be built ({type(exc).__name__}: {exc}); correct that record's `verifier` in "
                f"HeldOutAccuracy's path, or leave it out to score the record with the callback's "
                f"`verifier` argument"
            ) from exc

    def _spec_text(self, spec: Any) -> str:
        if not spec:
            return f"{type(self.verifier).__module__}.{type(self.verifier).__qualname__}"
        return json.dumps(spec, sort_keys=True) if isinstance(spec, dict) else str(spec)

    @rank_zero_only
    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule, when: str, log_dir: str | None = None) -> None:
        metrics = self.evaluate(pl_module)
        entry = {"when": when, "step": trainer.global_step, **metrics}
        self.history.append(entry)
        errors = int(metrics["verifier_errors"])
        print(
            f"held-out accuracy ({when}, step {trainer.global_step}): {metrics['accuracy']:.3f} on {int(metrics['n'])} problems"
            + (f" ({errors} counted wrong: their verifier raised)" if errors else "")
        )
        for logger in trainer.loggers:
            logger.log_metrics(
                {"heldout/accuracy": metrics["accuracy"], "heldout/verifier_errors": metrics["verifier_errors"]},
                step=trainer.global_step,
            )
        if when == "after":
            before = next((h for h in self.history if h["when"] == "before"), None)
            if before is not None:
                print(f"held-out accuracy: before {before['accuracy']:.3f} -> after {metrics['accuracy']:.3f}")
            if log_dir:
                atomic_write_text(Path(log_dir) / "heldout_accuracy.json", json.dumps(self.history, indent=2))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A resumed fit continues the history restored from its checkpoint (Lightning loads callback
        # state before on_fit_start): its "before" is the original run's, not the resume point's.
        if trainer.ckpt_path is not None and any(h["when"] == "before" for h in self.history):
            return
        # A fresh fit starts a fresh history, even when this callback object served an earlier fit.
        self.history = []
        self._record(trainer, pl_module, "before")
        trainer.strategy.barrier("heldout_accuracy_before")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.every_n_epochs and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self._record(trainer, pl_module, f"epoch {trainer.current_epoch}")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # `trainer.log_dir` is a broadcast from rank 0, a collective every rank must join: read
        # here by all, not inside the rank-0-only record (where rank 0 waited in the broadcast
        # and the others in the barrier below, forever).
        self._record(trainer, pl_module, "after", trainer.log_dir)
        trainer.strategy.barrier("heldout_accuracy_after")

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict.get("history", []))
