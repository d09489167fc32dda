"""``PromptDataModule``: prompts with verifiable references for RL (RSTG / GRPO).

Every record is normalised to ``{"id", "prompt": [OpenAI messages], "reference": str,
"verifier": class path or None}`` (extra keys are kept). Prompts come from a task
(``task: {class_path, init_args}``, any :class:`~lightning_agents.tasks.Task`, a user's own
included) or from sources in these formats, each prompted and verified by its task in
:mod:`lightning_agents.tasks`:

- the record format itself (what ``lightning-agents curate`` writes as ``rl_tasks.jsonl``);
- GSM8K records ``{question, answer}`` (``#### N`` gold) -> :class:`~lightning_agents.tasks.GSM8KTask`;
- MATH records ``{problem, solution}`` or ``{problem, answer}`` -> :class:`~lightning_agents.tasks.BoxedMathTask`
  (a record with ``problem`` is one of these, ``question`` or not, unless its answer has ``#### N``);
- HumanEval records ``{task_id, prompt, test, entry_point}`` -> :class:`~lightning_agents.tasks.HumanEvalTask`
  (the original stub is kept as ``prompt_text``);
- ``embedded:arithmetic/<split>`` (the embedded task; ``direct`` or ``program`` style).

Sources are JSONL (optionally gzipped) paths or ``datasets`` names / saved-to-disk folders.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

from lightning_agents.datamodules.chat import DataFormatError
from lightning_agents.datamodules.shuffling import shuffled_loader
from lightning_agents.datamodules.sources import require_local_file
from lightning_agents.json_text import JSONTextError, loads_json
from lightning_agents.resume import loadable_hparams
from lightning_agents.tasks import ArithmeticTask, BoxedMathTask, GSM8KTask, HumanEvalTask, Task, load_task
from lightning_agents.tasks._files import TaskDataError, iter_jsonl
from lightning_agents.tasks.code import humaneval_problem
from lightning_agents.tasks.evalplus import is_release_row
from lightning_agents.tasks.gsm8k import gsm8k_problem
from lightning_agents.tasks.math import NoBoxedAnswerError, boxed_math_problem, warn_skipped
from lightning_agents.tasks.raw_code import scores_code_raw

__all__ = ["PromptDataModule", "iter_jsonl_records", "normalize_prompt_record", "read_prompt_records"]

EMBEDDED_PREFIX = "embedded:arithmetic/"

# One task object per format prompts and names the verifier of the records in that format; they
# never read a file themselves here (the path is a placeholder).
_FORMATS = {
    "humaneval": (HumanEvalTask(path="-"), humaneval_problem),
    "gsm8k": (GSM8KTask(path="-"), gsm8k_problem),
    "math": (BoxedMathTask(path="-"), boxed_math_problem),
}


class _NoAnswerRecord(DataFormatError):
    """A math record without an answer (a proof): skipped by :func:`read_prompt_records`."""


def _user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def normalize_prompt_record(raw: dict[str, Any], where: str = "record") -> dict[str, Any]:
    """Map one raw record (any accepted format) to the RL prompt-record format.

    Args:
        raw: the parsed record.
        where: location used in error messages (``file:line``).

    Raises:
        DataFormatError: the record matches none of the accepted formats.
    """
    if not isinstance(raw, dict):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    rec = dict(raw)
    if "reference" in rec and "prompt" in rec:
        prompt = rec["prompt"]
        if isinstance(prompt, str):
            prompt = _user(prompt)
        if not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise DataFormatError(f"{where}: 'prompt' must be a string or a list of messages with 'role'")
        rec.update(prompt=prompt, reference=str(rec["reference"]))
        rec["id"] = str(rec.get("id", where))
        rec.setdefault("verifier", None)
        _check_reference(rec, where)
        return rec
    if is_release_row(rec) and "entry_point" in rec:
        return _release_prompt_record(rec, where)
    if "test" in rec and "entry_point" in rec and isinstance(rec.get("prompt"), str):
        kind = "humaneval"
    elif "question" in rec and "answer" in rec and ("problem" not in rec or "####" in str(rec["answer"])):
        kind = "gsm8k"
    elif "problem" in rec and ("solution" in rec or "answer" in rec):
        # math-evaluation-harness's AIME 2024 / AMC 2023 copies carry `question` as well as
        # `problem`: read as GSM8K, they were refused for lacking `#### N`
        kind = "math"
    else:
        raise DataFormatError(
            f"{where}: unknown prompt record with keys {sorted(rec)}; expected {{prompt, reference}}, "
            "{question, answer} (GSM8K), {problem, solution} (MATH) or {prompt, test, entry_point} (HumanEval)"
        )
    task, to_problem = _FORMATS[kind]
    try:
        problem = to_problem(rec, where)
    except NoBoxedAnswerError as exc:
        raise _NoAnswerRecord(str(exc)) from None
    except TaskDataError as exc:
        raise DataFormatError(str(exc)) from None
    if "id" not in rec and "task_id" not in rec and "unique_id" not in rec:
        problem["id"] = where
    out = task.prompt_record(problem)
    if rec.get("verifier"):
        out["verifier"] = rec["verifier"]
    return out


# What a release row's prompt record leaves out: the inputs (MBPP+'s reach 11 MB for one row), the
# canonical solution (the answer, in every batch and saved record), and HumanEval's base `test`,
# which is not the row's test (its plus inputs are graded on the canonical solution's outputs)
# and must not be taken for one.
_RELEASE_ONLY = ("base_input", "plus_input", "canonical_solution", "test", "assertion")


def _release_prompt_record(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """The prompt record of an evalplus release row (``HumanEvalPlus.jsonl``, ``MbppPlus.jsonl``):
    the prompt the HumanEval task asks (instruction, stub, the function's name where the stub does
    not say it), with ``reference`` and ``verifier`` None. Reading it runs nothing; its test program
    needs the canonical solution's outputs (:class:`~lightning_agents.tasks.HumanEvalTask` computes
    them), so :class:`PromptDataModule` refuses it for training."""
    missing = [k for k in ("prompt", "entry_point") if not isinstance(rec.get(k), str)]
    if missing:
        raise DataFormatError(f"{where}: an evalplus release record needs string fields {missing}")
    task = _FORMATS["humaneval"][0]
    problem = {
        **rec,
        "id": str(rec.get("task_id", rec.get("id", where))),
        "question": rec["prompt"],
        "prompt_text": rec["prompt"],
        "reference": "",
    }
    out = {k: v for k, v in task.prompt_record(problem).items() if k not in _RELEASE_ONLY}
    out.update(reference=None, verifier=None)
    return out


def _check_reference(rec: dict[str, Any], where: str) -> None:
    """A reference its verifier can never score (a BFCL record whose environment was removed or
    edited) stops the load at its line: in training it would only turn every reward into NaN."""
    checker = _reference_checker(rec["verifier"]) if isinstance(rec.get("verifier"), str) else None
    if checker is None:
        return
    try:
        checker(loads_json(rec["reference"]))
    except (JSONTextError, ValueError, TypeError, AttributeError) as exc:
        raise DataFormatError(f"{where}: its reference cannot be scored by {rec['verifier']}: {exc}") from None


@functools.cache
def _reference_checker(spec: str) -> Any:
    """The ``check_reference`` of the verifier ``spec`` names, when it has one (checking a
    reference without scoring); a verifier that cannot be built here is left to the trainer."""
    from lightning_agents.rewards.registry import resolve_verifier

    try:
        verifier = resolve_verifier(spec)
    except Exception:  # noqa: BLE001 - the RL module reports a verifier it cannot build, with its own context
        return None
    return getattr(verifier, "check_reference", None)


def iter_jsonl_records(path: Path) -> Iterable[tuple[str, Any]]:
    """``(file:line, record)`` of a JSON Lines file (``.gz`` too), read by the task layer's reader
    (:func:`~lightning_agents.tasks._files.iter_jsonl`) with its errors as :class:`DataFormatError`:
    a Parquet file, a JSON array or bytes that are not UTF-8 are named with file:line (the prompt
    readers' own loops raised a bare UnicodeDecodeError on Parquet)."""
    try:
        yield from iter_jsonl(path)
    except TaskDataError as exc:
        raise DataFormatError(str(exc)) from None


def _embedded(source: str, size: int | None, style: str) -> list[dict[str, Any]]:
    if style not in ("direct", "program"):
        raise ValueError(f"embedded prompt style must be 'direct' or 'program', got {style!r}")
    task = ArithmeticTask(split=source[len(EMBEDDED_PREFIX) :], style=style)
    return [task.prompt_record(p) for p in task.get_problems(n=size)]


def read_prompt_records(
    source: str, split: str = "train", size: int | None = None, embedded_style: str = "direct"
) -> list[dict[str, Any]]:
    """Read and normalise the prompt records of one source.

    Args:
        source: JSONL path (``.jsonl`` / ``.jsonl.gz``), ``embedded:arithmetic/<split>``, or a
            ``datasets`` name or saved folder.
        split: dataset split for ``datasets`` sources.
        size: keep at most this many records (the first ones).
        embedded_style: ``direct`` or ``program`` for the embedded task.
    """
    return _read_prompt_records(source, split, size, embedded_style)[0]


def _read_prompt_records(
    source: str, split: str, size: int | None, embedded_style: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`read_prompt_records`, with each record's location (``file:line``) beside it."""
    if source.startswith(EMBEDDED_PREFIX):
        records = _embedded(source, size, embedded_style)
        return records, [f"{source}[{i}]" for i in range(len(records))]
    path = Path(source)
    if path.is_file():
        rows: Iterable[tuple[str, Any]] = iter_jsonl_records(path)
    else:
        import datasets

        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            ds = ds[split] if isinstance(ds, datasets.DatasetDict) else ds
        else:
            require_local_file(source, "prompt file")
            ds = datasets.load_dataset(source, split=split)
        rows = ((f"{source}[{split}][{i}]", row) for i, row in enumerate(ds))
    out, wheres, skipped, first = [], [], 0, ""
    for where, raw in rows:
        try:
            out.append(normalize_prompt_record(raw, where))
            wheres.append(where)
        except _NoAnswerRecord as exc:
            # NuminaMath-CoT mixes proofs (no \boxed{}) into its answers: one used to refuse the file
            skipped, first = skipped + 1, first or str(exc)
            continue
        if size is not None and len(out) >= size:
            break
    if not out:
        detail = f" ({skipped} math rows without an answer; first: {first})" if skipped else ""
        raise DataFormatError(f"{source}: no prompt records{detail}")
    warn_skipped(source, skipped, first)
    return out, wheres


def _collate(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Prompts stay records: the RL module renders, samples and scores them itself.
    return records


def _forced_verifier(forced: str, own: Any, source: str) -> Any:
    """``data.force_verifier`` for one record: the record's own spec where it names the forced
    class (a code record's ``{class_path, init_args}`` holds its problem's entry point, stub and
    time limit; forcing ``CodeVerifier`` itself dropped them, so a right body scored 0 in RL), else
    the forced class path, with a warning where that drops the record's own arguments."""
    from lightning_agents.rewards.registry import verifier_target

    own_path = own.get("class_path") if isinstance(own, dict) else own
    if isinstance(own_path, str):
        try:
            if own_path == forced or verifier_target(own_path) is verifier_target(forced):
                return own
        except ValueError:
            pass
    if isinstance(own, dict) and own.get("init_args"):
        _warn_dropped_arguments(source, own_path, forced)
    return forced


@functools.lru_cache(maxsize=64)
def _warn_dropped_arguments(source: str, own: Any, forced: str) -> None:
    logging.getLogger(__name__).warning(
        "%s: data.force_verifier=%s replaces the records' own %s with its per-record arguments "
        "(a code record's entry point, stub and time limit); force the records' own class to keep them",
        source,
        forced,
        own,
    )


def _warn_raw_code(source: str, records: list[dict[str, Any]], wheres: list[str]) -> None:
    """One warning per source for its code records that score the whole completion as the program
    (:func:`~lightning_agents.tasks.raw_code.scores_code_raw`: saved before commit 32ca778), with
    their count and the first one's location: RL scored a right body-only answer 0 on them, and
    only ``HeldOutAccuracy`` said so, about its own file."""
    raw = [i for i, rec in enumerate(records) if scores_code_raw(rec)]
    if raw:
        first = records[raw[0]]
        logging.getLogger(__name__).warning(
            "%s: %d of %d record(s) are HumanEval-style code records whose CodeVerifier names no entry_point "
            "(saved before commit 32ca778, or curated from rollouts written before session 42): their reward "
            "scores the raw completion, a right body-only answer 0. Write the file again from its source (the "
            "HumanEval file through HumanEvalTask.prompt_record, or a new rollout + curate run); first: %s "
            "(record %s, verifier %s)",
            source,
            len(raw),
            len(records),
            wheres[raw[0]],
            first.get("id"),
            first.get("verifier"),
        )


class PromptDataModule(L.LightningDataModule):
    """Batches of prompt records for on-policy RL.

    Args:
        train: training prompt source (see :func:`read_prompt_records`).
        val: validation source (greedy accuracy), or ``None``.
        test: test source, or ``None``.
        train_size: limit on training prompts (``None``: all).
        val_size: limit on validation prompts.
        test_size: limit on test prompts.
        batch_size: prompts per optimisation step (each is sampled ``num_generations`` times).
        eval_batch_size: prompts per validation/test batch.
        system_prompt: system message prepended to prompts that have none.
        force_verifier: verifier class path forced on every record (``None`` keeps each record's own);
            a record whose own verifier is that class keeps its own arguments (a code record's
            entry point, stub and time limit), and dropping another's arguments is warned.
        embedded_style: ``direct`` or ``program`` prompts for the embedded task.
        split: split name for ``datasets`` sources.
        shuffle: shuffle training prompts each epoch.
        seed: shuffle seed (and the seed that picks ``train_size`` prompts from a task); epoch ``e``
            is ordered by ``seed + e`` alone, so any checkpoint resumes to the same batches.
        task: draw the prompts from this task instead (``{class_path, init_args}`` in YAML; any
            :class:`~lightning_agents.tasks.Task`, a user's own included); ``train``, ``val`` and
            ``test`` then name its splits (``train``; a trailing ``/train`` reads the same), and each
            record names the task's verifier.
    """

    def __init__(
        self,
        train: str = "embedded:arithmetic/train",
        val: str | None = "embedded:arithmetic/val",
        test: str | None = None,
        train_size: int | None = None,
        val_size: int | None = 64,
        test_size: int | None = None,
        batch_size: int = 8,
        eval_batch_size: int = 64,
        system_prompt: str | None = None,
        force_verifier: str | None = None,
        embedded_style: str = "direct",
        split: str = "train",
        shuffle: bool = True,
        seed: int = 0,
        task: Task | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            if value < 1:
                raise ValueError(f"data.{name} must be >= 1, got {value}")
        for name, value in (("train_size", train_size), ("val_size", val_size), ("test_size", test_size)):
            if value is not None and value < 1:
                raise ValueError(f"data.{name} must be >= 1 or null (all), got {value}")
        self.save_hyperparameters(ignore=["task"])
        loadable_hparams(self)  # a Path argument made every checkpoint unloadable
        self.task = load_task(task) if isinstance(task, (str, dict)) else task
        self.records: dict[str, list[dict[str, Any]]] = {}

    def _load(self, which: str) -> list[dict[str, Any]]:
        hp = self.hparams
        source = getattr(hp, which)
        size = getattr(hp, f"{which}_size")
        if self.task is not None:
            task_split = str(source).rpartition("/")[2]
            records = [self.task.prompt_record(p) for p in self.task.get_problems(task_split, n=size, seed=hp.seed)]
            wheres = [f"{type(self.task).__name__} {task_split}[{i}]" for i in range(len(records))]
        else:
            split = hp.split if which == "train" else ("test" if which == "test" else "validation")
            records, wheres = _read_prompt_records(
                source,
                split if not Path(str(source)).exists() else "train",
                size,
                hp.embedded_style,
            )
        unscored = next((rec for rec in records if rec.get("reference") is None), None)
        if unscored is not None:
            raise DataFormatError(
                f"{source}: record {unscored['id']} is an evalplus release row: its prompt is read, but its "
                "test program needs the canonical solution's outputs; train on such a file with "
                "data.task: {class_path: lightning_agents.tasks.HumanEvalTask, init_args: {path: ...}}"
            )
        for rec in records:
            if hp.system_prompt and rec["prompt"][0].get("role") != "system":
                rec["prompt"] = [{"role": "system", "content": hp.system_prompt}] + rec["prompt"]
            if hp.force_verifier:
                rec["verifier"] = _forced_verifier(hp.force_verifier, rec.get("verifier"), source)
        _warn_raw_code(source, records, wheres)
        return records

    def setup(self, stage: str | None = None) -> None:
        """Read the sources needed for ``stage``."""
        wanted = {"fit": ["train", "val"], "validate": ["val"], "test": ["test"]}.get(stage or "fit", ["train", "val"])
        for which in wanted:
            if getattr(self.hparams, which) and which not in self.records:
                self.records[which] = self._load(which)

    def _loader(self, which: str, batch_size: int, shuffle: bool) -> DataLoader:
        if which not in self.records:
            raise RuntimeError(f"no {which} prompts: set `{which}` in the data config")
        records = list(self.records[which])
        if not shuffle:
            return DataLoader(records, batch_size=batch_size, shuffle=False, collate_fn=_collate)
        return shuffled_loader(
            records, batch_size=batch_size, seed=self.hparams.seed, collate_fn=_collate, trainer=self.trainer
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.hparams.batch_size, self.hparams.shuffle)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("val", self.hparams.eval_batch_size, False) if "val" in self.records else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.hparams.eval_batch_size, False)
