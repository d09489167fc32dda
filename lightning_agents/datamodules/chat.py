"""``ChatDataModule``: chat / tool-call conversations from JSONL, ``datasets`` or the embedded task."""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_agents.errors import LightningAgentsError
from lightning_agents.datamodules.conversations import (
    IGNORE_INDEX,
    ConversationError,
    normalize_conversation,
    tokenize_conversation,
)

log = logging.getLogger(__name__)

__all__ = ["ChatDataModule", "DataFormatError", "collate_padded", "read_conversations"]

EMBEDDED_SOURCE = "embedded:arithmetic/"


class DataFormatError(LightningAgentsError, ValueError):
    """A line or record of an input file that cannot be used; the message starts with ``file:line:``."""


def _read_jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    """Yield ``(location, parsed object)``; a line that is not JSON yields a DataFormatError."""
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, DataFormatError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})")


def _read_json(path: Path) -> Iterable[tuple[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise DataFormatError(f"{path}:1: expected a JSON list of conversations, got {type(data).__name__}")
    for index, item in enumerate(data):
        yield f"{path}[{index}]", item


def _read_dataset(source: str, split: str) -> Iterable[tuple[str, Any]]:
    import datasets

    if Path(source).is_dir() and (Path(source) / "dataset_info.json").exists():
        ds = datasets.load_from_disk(source)
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[split]
    else:
        ds = datasets.load_dataset(source, split=split)
    for index, item in enumerate(ds):
        yield f"{source}[{split}][{index}]", item


def _read_embedded(source: str, size: int | None, styles: Sequence[str]) -> Iterable[tuple[str, Any]]:
    from lightning_agents.rewards.arithmetic import arithmetic_conversation, make_arithmetic_split

    split = source[len(EMBEDDED_SOURCE) :]
    for index, record in enumerate(make_arithmetic_split(split, n=size)):
        yield f"{source}[{index}]", arithmetic_conversation(record, styles[index % len(styles)])


def read_conversations(
    source: str,
    skip_invalid: bool = False,
    dataset_split: str = "train",
    embedded_size: int | None = None,
    embedded_styles: Sequence[str] = ("direct",),
) -> tuple[list[dict], list[str]]:
    """Read and validate conversations from one source.

    Args:
        source: a ``.jsonl``/``.json`` file, a ``datasets`` name or saved folder, or
            ``embedded:arithmetic/{train,val,test}``.
        skip_invalid: skip bad records and return their errors instead of raising on the first.
        dataset_split: split to read from a ``datasets`` source.
        embedded_size: number of embedded problems (default: the split's size).
        embedded_styles: conversation styles of embedded problems, used in turn.

    Returns:
        ``(conversations, errors)``: each conversation ``{"messages", "tools"}``, and one
        ``"file:line: reason"`` string per skipped record.

    Raises:
        DataFormatError: on the first bad record unless ``skip_invalid``.
    """
    if source.startswith(EMBEDDED_SOURCE):
        records = _read_embedded(source, embedded_size, embedded_styles)
    else:
        path = Path(source)
        if path.suffix == ".jsonl":
            if not path.is_file():
                raise FileNotFoundError(f"conversation file {path} does not exist")
            records = _read_jsonl(path)
        elif path.suffix == ".json":
            if not path.is_file():
                raise FileNotFoundError(f"conversation file {path} does not exist")
            records = _read_json(path)
        else:
            records = _read_dataset(source, dataset_split)
    conversations, errors = [], []
    for where, item in records:
        try:
            if isinstance(item, DataFormatError):
                raise item
            messages, tools = normalize_conversation(item)
        except (ConversationError, DataFormatError) as exc:
            message = str(exc) if isinstance(exc, DataFormatError) else f"{where}: {exc}"
            if not skip_invalid:
                raise DataFormatError(message) from None
            errors.append(message)
            continue
        conversations.append({"messages": messages, "tools": tools})
    return conversations, errors


def collate_padded(rows: list[dict[str, list[int]]], pad_id: int, pad_to_multiple_of: int = 8) -> dict[str, torch.Tensor]:
    """Right-pad a list of tokenized rows into ``input_ids``, ``attention_mask`` and ``labels``.

    Packed rows (with ``position_ids``) keep them so attention does not cross conversations.
    """
    width = max(len(r["input_ids"]) for r in rows)
    width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    batch = {
        "input_ids": torch.full((len(rows), width), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
        "labels": torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long),
    }
    packed = "position_ids" in rows[0]
    if packed:
        batch["position_ids"] = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        batch["input_ids"][i, :n] = torch.tensor(row["input_ids"])
        batch["attention_mask"][i, :n] = 1
        batch["labels"][i, :n] = torch.tensor(row["labels"])
        if packed:
            batch["position_ids"][i, :n] = torch.tensor(row["position_ids"])
            # Padding continues the last sequence's positions so it forms no sequence of its own.
            batch["position_ids"][i, n:] = torch.arange(1, width - n + 1) + row["position_ids"][-1]
    if packed:
        # transformers builds a block-diagonal causal mask from position_ids only when no 2D
        # attention mask is given; padding is excluded from the loss by its labels.
        del batch["attention_mask"]
    return batch


def pack_rows(rows: list[dict[str, list[int]]], max_length: int) -> list[dict[str, list[int]]]:
    """Concatenate tokenized conversations into rows of at most ``max_length`` tokens (first fit)."""
    packed: list[dict[str, list[int]]] = []
    for row in sorted(rows, key=lambda r: -len(r["input_ids"])):
        n = len(row["input_ids"])
        for target in packed:
            if len(target["input_ids"]) + n <= max_length:
                break
        else:
            target = {"input_ids": [], "labels": [], "position_ids": []}
            packed.append(target)
        target["input_ids"] += row["input_ids"]
        target["labels"] += row["labels"]
        target["position_ids"] += list(range(n))
    return packed


class ChatDataModule(L.LightningDataModule):
    """Conversations for supervised fine-tuning, tokenized in ``setup`` with assistant-only labels.

    Args:
        train: training source(s): JSONL/JSON files, ``datasets`` names or saved folders, or
            ``embedded:arithmetic/train``.
        val: validation source(s), same forms; ``None`` for no validation.
        test: test source(s), same forms.
        tokenizer: tokenizer to use (path, hub id or ``embedded:student``); it must match the model.
        max_length: longest tokenized conversation (longer ones are truncated from the right;
            conversations left without assistant tokens are dropped and counted).
        batch_size: conversations (or packed rows) per batch.
        pack: concatenate conversations into rows of ``max_length`` tokens; attention stays within
            each conversation through restarted ``position_ids``.
        skip_invalid: skip bad records, logging each as ``file:line: reason`` and a count, instead
            of stopping at the first one.
        num_workers: DataLoader worker processes.
        shuffle: shuffle the training set every epoch.
        dataset_split: split read from ``datasets`` sources.
        embedded_size: problems per embedded split (default: the split's standard size).
        embedded_styles: styles of embedded conversations, used in turn: ``direct``, ``tool``, ``program``.
    """

    def __init__(
        self,
        train: str | list[str] | None = "embedded:arithmetic/train",
        val: str | list[str] | None = "embedded:arithmetic/val",
        test: str | list[str] | None = None,
        tokenizer: str = "embedded:student",
        max_length: int = 512,
        batch_size: int = 16,
        pack: bool = False,
        skip_invalid: bool = False,
        num_workers: int = 0,
        shuffle: bool = True,
        dataset_split: str = "train",
        embedded_size: int | None = None,
        embedded_styles: list[str] = ["direct"],  # noqa: B006 - jsonargparse shows the default
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.sources = {"fit": train, "validate": val, "test": test}
        self.tokenizer_name = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.pack = pack
        self.skip_invalid = skip_invalid
        self.num_workers = num_workers
        self.shuffle = shuffle
        self.dataset_split = dataset_split
        self.embedded_size = embedded_size
        self.embedded_styles = list(embedded_styles)
        self._tokenizer = None
        self.datasets: dict[str, list[dict[str, list[int]]]] = {}
        self.skipped: dict[str, list[str]] = {}

    @property
    def tokenizer(self):
        """The tokenizer, loaded on first use."""
        if self._tokenizer is None:
            from lightning_agents.models import load_tokenizer

            self._tokenizer = load_tokenizer(self.tokenizer_name)
        return self._tokenizer

    def load_conversations(self, stage: str) -> list[dict]:
        """Conversations for ``stage`` (``fit``, ``validate``, ``test``); subclasses override this.

        Returns:
            A list of ``{"messages": [...], "tools": [...] | None}``.
        """
        sources = self.sources.get(stage)
        if sources is None:
            return []
        conversations, errors = [], []
        for source in [sources] if isinstance(sources, str) else sources:
            found, bad = read_conversations(
                source,
                skip_invalid=self.skip_invalid,
                dataset_split=self.dataset_split,
                embedded_size=self.embedded_size,
                embedded_styles=self.embedded_styles,
            )
            conversations += found
            errors += bad
        if errors:
            for error in errors[:20]:
                log.warning("skipped %s", error)
            log.warning("skipped %d invalid record(s) for %s (first 20 shown)", len(errors), stage)
        self.skipped[stage] = errors
        return conversations

    def tokenize(self, conversations: list[dict]) -> list[dict[str, list[int]]]:
        """Tokenize conversations with assistant-only labels, packing them when asked."""
        rows, dropped = [], 0
        for conv in conversations:
            row = tokenize_conversation(self.tokenizer, conv["messages"], conv.get("tools"), self.max_length)
            if row is None:
                dropped += 1
            else:
                rows.append(row)
        if dropped:
            log.warning("dropped %d conversation(s) with no assistant token within max_length=%d", dropped, self.max_length)
        return pack_rows(rows, self.max_length) if self.pack else rows

    def setup(self, stage: str) -> None:
        """Read and tokenize the splits the stage needs."""
        wanted = {"fit": ["fit", "validate"], "validate": ["validate"], "test": ["test"], "predict": []}[stage]
        for split in wanted:
            if split not in self.datasets:
                self.datasets[split] = self.tokenize(self.load_conversations(split))

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        rows = self.datasets.get(split) or []
        if not rows:
            raise ValueError(f"no {split} data: set the `{ {'fit': 'train', 'validate': 'val'}.get(split, split)}` source")
        pad = self.tokenizer.pad_token_id
        # Stateful: Lightning stores its shuffle order and position in mid-epoch checkpoints, so a
        # resumed run sees the batches the straight run would have seen.
        return StatefulDataLoader(
            rows,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=partial(collate_padded, pad_id=pad),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("fit", self.shuffle)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("validate", False) if self.datasets.get("validate") else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

    def state_dict(self) -> dict[str, Any]:
        """Counts of what was read and skipped, stored in checkpoints for the record."""
        return {"rows": {k: len(v) for k, v in self.datasets.items()}, "skipped": {k: len(v) for k, v in self.skipped.items()}}
