"""``PromptDataModule``: prompts with verifiable references for RL (RSTG / GRPO).

Every record is normalised to ``{"id", "prompt": [OpenAI messages], "reference": str,
"verifier": class path or None}`` (extra keys are kept). Accepted inputs:

- the record format itself (what ``lightning-agents curate`` writes as ``rl_tasks.jsonl``);
- GSM8K records ``{question, answer}`` (``#### N`` gold) -> :class:`~lightning_agents.rewards.GSM8KVerifier`;
- MATH records ``{problem, solution}`` -> :class:`~lightning_agents.rewards.BoxedMathVerifier`;
- HumanEval records ``{task_id, prompt, test, entry_point}`` -> :class:`~lightning_agents.rewards.CodeVerifier`
  with ``test + check(entry_point)`` as the reference (the original stub is kept as ``prompt_text``);
- ``embedded:arithmetic/<split>`` (the embedded task; ``direct`` or ``program`` style).

Sources are JSONL (optionally gzipped) paths or ``datasets`` names / saved-to-disk folders.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable

import lightning as L
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_agents.datamodules.chat import DataFormatError

__all__ = ["PromptDataModule", "normalize_prompt_record", "read_prompt_records"]

EMBEDDED_PREFIX = "embedded:arithmetic/"
GSM8K_VERIFIER = "lightning_agents.rewards.GSM8KVerifier"
MATH_VERIFIER = "lightning_agents.rewards.BoxedMathVerifier"
CODE_VERIFIER = "lightning_agents.rewards.CodeVerifier"
ARITHMETIC_VERIFIER = "lightning_agents.rewards.ArithmeticVerifier"
PROGRAM_VERIFIER = "lightning_agents.rewards.ProgramOutputVerifier"

GSM8K_INSTRUCTION = "Solve the problem step by step. End with a line '#### N' where N is the final number."
MATH_INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."
CODE_INSTRUCTION = ("Complete the following Python function. Answer with the full program (the function with "
                    "its imports) in one ```python code block.")


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
    elif "test" in rec and "entry_point" in rec and isinstance(rec.get("prompt"), str):
        rec.update(
            id=str(rec.get("task_id", rec.get("id", where))),
            prompt=_user(f"{CODE_INSTRUCTION}\n\n```python\n{rec['prompt']}```"),
            prompt_text=rec["prompt"],
            reference=f"{rec['test']}\n\ncheck({rec['entry_point']})\n",
            verifier=rec.get("verifier") or CODE_VERIFIER,
        )
    elif "question" in rec and "answer" in rec:
        rec.update(prompt=_user(f"{rec['question']}\n\n{GSM8K_INSTRUCTION}"), reference=str(rec["answer"]),
                   verifier=rec.get("verifier") or GSM8K_VERIFIER)
    elif "problem" in rec and ("solution" in rec or "answer" in rec):
        rec.update(prompt=_user(f"{rec['problem']}\n\n{MATH_INSTRUCTION}"),
                   reference=str(rec.get("answer") or rec["solution"]), verifier=rec.get("verifier") or MATH_VERIFIER)
    else:
        raise DataFormatError(
            f"{where}: unknown prompt record with keys {sorted(rec)}; expected {{prompt, reference}}, "
            "{question, answer} (GSM8K), {problem, solution} (MATH) or {prompt, test, entry_point} (HumanEval)"
        )
    rec["id"] = str(rec.get("id", where))
    rec.setdefault("verifier", None)
    return rec


def _iter_jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                where = f"{path}:{lineno}"
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataFormatError(f"{where}: invalid JSON ({exc.msg})") from None


def _embedded(source: str, size: int | None, style: str) -> list[dict[str, Any]]:
    from lightning_agents.rewards.arithmetic import arithmetic_conversation, make_arithmetic_split

    if style not in ("direct", "program"):
        raise ValueError(f"embedded prompt style must be 'direct' or 'program', got {style!r}")
    split = source[len(EMBEDDED_PREFIX):]
    records = []
    for rec in make_arithmetic_split(split, n=size):
        messages = arithmetic_conversation(rec, style)["messages"]
        records.append({
            "id": rec["id"],
            "prompt": [m for m in messages if m["role"] != "assistant"],
            "reference": rec["answer"],
            "verifier": ARITHMETIC_VERIFIER if style == "direct" else PROGRAM_VERIFIER,
        })
    return records


def read_prompt_records(source: str, split: str = "train", size: int | None = None,
                        embedded_style: str = "direct") -> list[dict[str, Any]]:
    """Read and normalise the prompt records of one source.

    Args:
        source: JSONL path (``.jsonl`` / ``.jsonl.gz``), ``embedded:arithmetic/<split>``, or a
            ``datasets`` name or saved folder.
        split: dataset split for ``datasets`` sources.
        size: keep at most this many records (the first ones).
        embedded_style: ``direct`` or ``program`` for the embedded task.
    """
    if source.startswith(EMBEDDED_PREFIX):
        return _embedded(source, size, embedded_style)
    path = Path(source)
    if path.is_file():
        rows: Iterable[tuple[str, Any]] = _iter_jsonl(path)
    else:
        import datasets

        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            ds = ds[split] if isinstance(ds, datasets.DatasetDict) else ds
        else:
            ds = datasets.load_dataset(source, split=split)
        rows = ((f"{source}[{split}][{i}]", row) for i, row in enumerate(ds))
    out = []
    for where, raw in rows:
        out.append(normalize_prompt_record(raw, where))
        if size is not None and len(out) >= size:
            break
    if not out:
        raise DataFormatError(f"{source}: no prompt records")
    return out


def _collate(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Prompts stay records: the RL module renders, samples and scores them itself.
    return records


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
        force_verifier: verifier class path forced on every record (``None`` keeps each record's own).
        embedded_style: ``direct`` or ``program`` prompts for the embedded task.
        split: split name for ``datasets`` sources.
        shuffle: shuffle training prompts each epoch.
        seed: shuffling seed.
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
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.save_hyperparameters()
        self.records: dict[str, list[dict[str, Any]]] = {}

    def _load(self, which: str) -> list[dict[str, Any]]:
        hp = self.hparams
        source = getattr(hp, which)
        size = getattr(hp, f"{which}_size")
        split = hp.split if which == "train" else ("test" if which == "test" else "validation")
        records = read_prompt_records(source, split=split if not Path(str(source)).exists() else "train",
                                      size=size, embedded_style=hp.embedded_style)
        for rec in records:
            if hp.system_prompt and rec["prompt"][0].get("role") != "system":
                rec["prompt"] = [{"role": "system", "content": hp.system_prompt}] + rec["prompt"]
            if hp.force_verifier:
                rec["verifier"] = hp.force_verifier
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
        # The sampler's own seeded generator gives a new order every epoch, and the stateful loader
        # lets Lightning checkpoint that generator and the position in the epoch (exact resume).
        generator = torch.Generator().manual_seed(self.hparams.seed)
        return StatefulDataLoader(records, batch_size=batch_size, shuffle=True, generator=generator, collate_fn=_collate)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.hparams.batch_size, self.hparams.shuffle)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("val", self.hparams.eval_batch_size, False) if "val" in self.records else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.hparams.eval_batch_size, False)
