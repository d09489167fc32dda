"""``ChatDataModule``: chat / tool-call conversations from JSONL, ``datasets`` or the embedded task."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_agents.content_parts import CONTENT_FORMATS
from lightning_agents.datamodules.conversations import (
    IGNORE_INDEX,
    NOTE_CALL_IDS_NAMED,
    NOTE_CALL_IDS_REWRITTEN,
    NOTE_CALL_IDS_UNIQUE,
    NOTE_LEADING_ASSISTANT_DROPPED,
    NOTE_PROMPT_UNLIKE_TURN,
    NOTE_REASONING_CONTEXT,
    NOTE_SYSTEM_INTO_FIRST_USER,
    ChatTemplateError,
    ConversationError,
    normalize_conversation,
    renders_tool_use,
    template_layout,
    tokenize_many,
)
from lightning_agents.datamodules.reasoning_turns import split_reasoning_turns as _split_reasoning_turns
from lightning_agents.datamodules.shuffling import shuffled_loader
from lightning_agents.datamodules.sources import cache_home, open_text, require_local_file
from lightning_agents.errors import LightningAgentsError
from lightning_agents.json_text import JSONTextError, loads_json
from lightning_agents.resume import loadable_hparams
from lightning_agents.rollout.seeding import run_seed
from lightning_agents.template_clock import TEMPLATE_TIME_ENV, set_template_instant, template_instant

log = logging.getLogger(__name__)

__all__ = ["ChatDataModule", "DataFormatError", "collate_padded", "read_conversations"]

EMBEDDED_SOURCE = "embedded:arithmetic/"


class DataFormatError(LightningAgentsError, ValueError):
    """A line or record of an input file that cannot be used; the message starts with ``file:line:``."""


def _read_jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    """Yield ``(location, parsed object)``; a line that is not JSON yields a DataFormatError."""
    with open_text(path) as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, loads_json(line)
            except JSONTextError as exc:
                yield where, DataFormatError(f"{where}: invalid JSON ({exc})")


def _read_json(path: Path) -> Iterable[tuple[str, Any]]:
    try:
        with open_text(path) as handle:
            data = loads_json(handle.read())
    except JSONTextError as exc:
        raise DataFormatError(f"{path}:{exc.lineno or 1}: invalid JSON ({exc})") from None
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


_TABLE_FORMATS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}


def _read_table(path: Path) -> Iterable[tuple[str, Any]]:
    """Rows of a local Parquet, Arrow or CSV file (``datasets``), located as ``file[row]``.

    Columns hold the same fields as a JSONL record; nested columns (``messages`` as a list of
    structs) and JSON-text columns (``tools`` as a string, as glaive and Hermes ship it) both work.
    """
    import datasets

    kind = _TABLE_FORMATS[path.suffix.lower()]
    try:
        ds = datasets.load_dataset(kind, data_files=str(path), split="train")
    except Exception as exc:  # noqa: BLE001 - pyarrow and datasets raise many types; the file is named
        raise DataFormatError(f"{path}:1: cannot read as {kind} ({type(exc).__name__}: {exc})") from None
    for index, item in enumerate(ds):
        yield f"{path}[{index}]", item


def _read_embedded(source: str, size: int | None, styles: Sequence[str]) -> Iterable[tuple[str, Any]]:
    from lightning_agents.tasks.arithmetic import arithmetic_conversation, make_arithmetic_split

    split = source[len(EMBEDDED_SOURCE) :]
    for index, record in enumerate(make_arithmetic_split(split, n=size)):
        yield f"{source}[{index}]", arithmetic_conversation(record, styles[index % len(styles)])


# A record's location, `path:12`, `path[3]` or `name[train][3]` (its file or dataset part in group
# 2), then ": " (after ` (up to message 3)` for a row of split_reasoning_turns).
_RECORD_FILE = re.compile(r"((.+?)(?::\d+|(?:\[[^\]]*\])+))(?: \(up to message \d+\))?(?=: )")
# what split_reasoning_turns adds to the location of a record's row that ends early
_ROW_SUFFIX = re.compile(r" \(up to message \d+\)\Z")


def _per_file(errors: Sequence[str]) -> dict[str, list]:
    """``"where: reason"`` errors grouped by the file their location names: file -> [how many, the
    first, the records they name (see :func:`_record_of`)]."""
    groups: dict[str, list] = {}
    for error in errors:
        match = _RECORD_FILE.match(error)
        entry = groups.setdefault(match.group(2) if match else error.partition(": ")[0], [0, error, {}])
        entry[0] += 1
        entry[2][_record_of(error)] = None  # an ordered set: the first record is named first
    return groups


def _record_of(error: str) -> str:
    """The record a ``"where: ..."`` string names (``path:12``, ``conversation 3``), without the
    `` (up to message N)`` of a ``split_reasoning_turns`` row: the rows of one conversation count once."""
    match = _RECORD_FILE.match(error)
    return match.group(1) if match else _ROW_SUFFIX.sub("", error.partition(": ")[0])


def _conversations_in(items: Sequence[str]) -> int:
    """How many conversations ``"where: ..."`` strings (errors, notes) name, each row's counted once."""
    return len({_record_of(item) for item in items})


def _skipped_counts(rows: int, records: dict[str, None], outcome: dict[str, tuple[int, int, int]]) -> tuple[str, str]:
    """``(what, detail)`` for one file's warning of refused rows: ``"3 conversation(s)"``, or with the
    rows of ``split_reasoning_turns`` (more rows than conversations, or rows of a conversation kept)
    how many rows of how many conversations, and in ``detail`` how many of those are skipped whole
    and how many trained in part. Each row is labelled on its own (a context turn the template cannot
    label fails the rows after it, not those before), so the rows it labels are kept."""
    partly = [r for r in records if r in outcome and outcome[r][1] + outcome[r][2] < outcome[r][0]]
    if rows == len(records) and not partly:
        return f"{rows} conversation(s)", ""
    detail = f" (rows of data.split_reasoning_turns; {len(records) - len(partly)} conversation(s) skipped whole"
    if partly:
        detail += f", {len(partly)} trained in part: their other rows are labelled and kept, first {partly[0]}"
    return f"{rows} row(s) of {len(records)} conversation(s)", detail + ")"


def _dropped_message(rows: int, counts: Sequence[tuple[int, int, int]], max_length: int) -> str:
    """The warning for rows that truncation left without an assistant token: ``dropped 3
    conversation(s) ...``, or with the rows of ``split_reasoning_turns`` how many rows of how many
    conversations, and how many of those conversations lost every row."""
    hit = [c for c in counts if c[2]]
    what = f"dropped {rows} conversation(s) with no assistant token within max_length={max_length}"
    if rows == len(hit) and all(n == 1 for n, _, _ in hit):
        return what
    whole = sum(1 for n, refused, lost in hit if refused + lost == n)
    return (
        f"dropped {rows} row(s) of {len(hit)} conversation(s) with no assistant token within max_length="
        f"{max_length} (rows of data.split_reasoning_turns; {whole} of those conversations lost every row, "
        "the others keep their other rows)"
    )


def read_conversations(
    source: str,
    skip_invalid: bool = False,
    dataset_split: str = "train",
    embedded_size: int | None = None,
    embedded_styles: Sequence[str] = ("direct",),
    parse_text_tool_calls: bool = True,
) -> tuple[list[dict], list[str]]:
    """Read and validate conversations from one source.

    Args:
        source: a ``.jsonl``/``.json`` (optionally ``.gz``) or ``.parquet``/``.arrow``/``.csv`` file, a
            ``datasets`` name or saved folder, or ``embedded:arithmetic/{train,val,test}``. Records are
            OpenAI-format (``messages``, per-message ``weight``, text content parts) or ShareGPT
            (``conversations`` of ``from``/``value``); see :func:`normalize_conversation`.
        skip_invalid: skip bad records and return their errors instead of raising on the first.
        dataset_split: split to read from a ``datasets`` source.
        embedded_size: number of embedded problems (default: the split's size).
        embedded_styles: conversation styles of embedded problems, used in turn.
        parse_text_tool_calls: turn tool calls that ShareGPT assistant turns write as text (Hermes
            ``<tool_call>``, ToolACE ``[f(x=1)]``) into tool calls (see :func:`normalize_conversation`);
            the turns whose calls do not parse stay text and are counted in one warning.

    Returns:
        ``(conversations, errors)``: each conversation ``{"messages", "tools"}``, and one
        ``"file:line: reason"`` string per skipped record.

    Raises:
        DataFormatError: on the first bad record unless ``skip_invalid``.
    """
    # Rows of Parquet/Arrow tables (and `datasets`, which stores any source as Arrow) have struct
    # columns, whose nulls stand for keys a row does not have (see normalize_conversation).
    struct_columns = False
    if source.startswith(EMBEDDED_SOURCE):
        records = _read_embedded(source, embedded_size, embedded_styles)
    else:
        path = Path(source)
        name = path.name.lower().removesuffix(".gz")
        if name.endswith((".jsonl", ".json")):
            if not path.is_file():
                raise FileNotFoundError(f"conversation file {path} does not exist")
            records = _read_jsonl(path) if name.endswith(".jsonl") else _read_json(path)
        elif path.suffix.lower() in _TABLE_FORMATS:
            if not path.is_file():
                raise FileNotFoundError(f"conversation file {path} does not exist")
            records = _read_table(path)
            struct_columns = _TABLE_FORMATS[path.suffix.lower()] != "csv"
        else:
            require_local_file(source, "conversation file")
            records = _read_dataset(source, dataset_split)
            struct_columns = True
    conversations, errors = [], []
    kept_turns, kept_first = 0, None
    for where, item in records:
        kept: list[tuple[int, str]] = []
        plain: list[tuple[list[dict], list[dict] | None]] = []
        try:
            if isinstance(item, DataFormatError):
                raise item
            messages, tools = normalize_conversation(
                item, parse_text_tool_calls, kept, plain, struct_columns=struct_columns
            )
        except (ConversationError, DataFormatError) as exc:
            message = str(exc) if isinstance(exc, DataFormatError) else f"{where}: {exc}"
            if not skip_invalid:
                raise DataFormatError(message) from None
            errors.append(message)
            continue
        if kept:
            kept_turns += len(kept)
            kept_first = kept_first or f"{where}: {kept[0][1]}"
        conversation = {"messages": messages, "tools": tools, "where": where}
        if plain:
            # A template can render one call but not this turn's (Llama 3.1 refuses parallel calls
            # and drops text beside a call): tokenizing falls back to the conversation as written.
            conversation["as_written"] = {"messages": plain[0][0], "tools": plain[0][1]}
        conversations.append(conversation)
    if kept_turns:
        log.warning(
            "%s: %d assistant turn(s) with tool calls written as text stay text (trained as written) because "
            "something in their conversation does not parse; first at %s",
            source,
            kept_turns,
            kept_first,
        )
    return conversations, errors


def collate_padded(
    rows: list[dict[str, list[int]]], pad_id: int, pad_to_multiple_of: int = 8
) -> dict[str, torch.Tensor]:
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


def _cut_inside_a_turn(rows, tokenizer, max_length: int | None) -> int:
    """How many rows truncation ended inside a labelled assistant turn (before the token that ends it:
    gpt-oss ends turns with ``<|end|>``, ``<|call|>`` or ``<|return|>``)."""
    if max_length is None or not len(rows):
        return 0
    eot_ids = {
        i for end in template_layout(tokenizer).end_tokens for i in tokenizer.encode(end, add_special_tokens=False)[-1:]
    }
    if hasattr(rows, "data"):  # a datasets.Dataset: find the full-length rows in Arrow, read only those
        import pyarrow.compute as pc

        lengths = pc.list_value_length(rows.data.table.column("labels")).to_numpy(zero_copy_only=False)
        candidates = [rows[int(i)] for i in np.flatnonzero(lengths >= max_length)]
    else:
        candidates = [row for row in rows if len(row["labels"]) >= max_length]
    return sum(1 for row in candidates if row["labels"][-1] != IGNORE_INDEX and row["input_ids"][-1] not in eot_ids)


# Bump when tokenization or labelling changes, so cached rows of older code are not reused.
_TOKENIZED_FORMAT = "assistant-spans-v22"


def _tokenizer_fingerprint(tokenizer) -> str:
    """What tokenization depends on: the vocabulary, added tokens, chat template, special tokens
    and the content-format override (``chat_template_content_format`` changes how text parts join)."""
    h = hashlib.sha256()
    h.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode())
    h.update(json.dumps(tokenizer.chat_template, ensure_ascii=False, sort_keys=True).encode())
    h.update(json.dumps(sorted((k, str(v)) for k, v in tokenizer.special_tokens_map.items())).encode())
    h.update(type(tokenizer).__name__.encode())
    h.update(str(getattr(tokenizer, "chat_template_content_format", None) or "auto").encode())
    return h.hexdigest()


def _tokenize_batch(
    batch: dict[str, list],
    tokenizer,
    max_length: int,
    skip_invalid: bool,
    one_thread: bool = False,
    unrendered_system_prompt: str = "refuse",
    stripped_reasoning: str = "context",
    template_name: str = "the chat template",
    leading_assistant: str = "refuse",
    template_time: str | None = None,
) -> dict[str, list]:
    """``datasets.map`` function: JSON conversations in, rows (or recorded errors) out; ``notes`` holds
    what :func:`tokenize_many` changed or left unlabelled per row (JSON list, ``""`` for none).

    ``one_thread``: in a worker of a parallel map, the tokenizer's own thread pool would only compete
    with the other workers for the cores (its idle threads spin: about a fifth more CPU time), so
    the worker process tokenizes on one thread.
    """
    if one_thread:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if template_time is not None:
        # a worker process renders at its parent's instant: one data set shows one time (template_clock)
        set_template_instant(template_time)
    out: dict[str, list] = {"input_ids": [], "labels": [], "error": [], "as_written": [], "notes": []}
    conversations = [json.loads(text) for text in batch["conversation"]]
    options = {
        "unrendered_system_prompt": unrendered_system_prompt,
        "stripped_reasoning": stripped_reasoning,
        "leading_assistant": leading_assistant,
    }
    notes: list[list[str]] = []
    rows = tokenize_many(
        tokenizer,
        [(c["messages"], c.get("tools")) for c in conversations],
        max_length,
        from_json=True,
        notes=notes,
        **options,
    )
    retry = [i for i, row in enumerate(rows) if isinstance(row, ConversationError) and "as_written" in conversations[i]]
    fallbacks = [""] * len(rows)
    if retry:
        plain = [(conversations[i]["as_written"]["messages"], conversations[i]["as_written"]["tools"]) for i in retry]
        retried: list[list[str]] = []
        for i, row, noted in zip(
            retry, tokenize_many(tokenizer, plain, max_length, from_json=True, notes=retried, **options), retried
        ):
            if not isinstance(row, ConversationError):
                fallbacks[i] = f"{batch['where'][i]}: {rows[i]}"
                rows[i], notes[i] = row, noted
    empty = np.zeros(0, dtype=np.int64)
    out["as_written"] = fallbacks
    out["notes"] = [
        json.dumps(n) if n and not isinstance(row, ConversationError) else "" for n, row in zip(notes, rows)
    ]
    for where, row in zip(batch["where"], rows):
        if isinstance(row, ConversationError):
            if not skip_invalid:
                raise DataFormatError(f"{where}: {row} [{template_name}]") from None
            out["input_ids"].append(empty)
            out["labels"].append(empty)
            out["error"].append(f"{where}: {row}")
            continue
        out["input_ids"].append(row["input_ids"] if row else empty)
        out["labels"].append(row["labels"] if row else empty)
        out["error"].append("" if row else "dropped")
    return out


def _template_description(tokenizer, chat_template: str | None = None) -> str:
    """How messages name the chat template in use: the ``chat_template`` setting's file, else the tokenizer's."""
    if chat_template is not None:
        if "\n" not in chat_template and "{" not in chat_template:
            return f"the chat template {chat_template} (data.chat_template)"
        return "the chat template given as text in data.chat_template"
    return f"the chat template of tokenizer {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__!r}"


def _warn_notes(notes: list[str], template: str, split_reasoning_turns: bool = False) -> None:
    """One counted warning per kind of note (``"where: note"`` strings) that :func:`tokenize_many` made;
    ``split_reasoning_turns``: whether the rows were split (the context-only warning then names no fix)."""
    moved = [n for n in notes if n.endswith(NOTE_SYSTEM_INTO_FIRST_USER)]
    if moved:
        log.warning(
            "%d conversation(s) have a system prompt that %s does not render; as "
            "unrendered_system_prompt=into_first_user asks, it is prefixed to their first user message; first: %s",
            _conversations_in(moved),
            template,
            moved[0].rsplit(": ", 1)[0],
        )
    for note, what in (
        (
            NOTE_LEADING_ASSISTANT_DROPPED,
            "open with assistant message(s) before any user message, which %s refuses; "
            "as leading_assistant=drop asks, they are left out",
        ),
        (
            NOTE_CALL_IDS_REWRITTEN,
            "have tool-call ids that %s refuses; they are rewritten as nine alphanumeric "
            "characters (nine hex digits of a hash of each id, so calls and results still pair up)",
        ),
        (
            NOTE_CALL_IDS_NAMED,
            "have tool-call ids that %s writes where the function name goes (Kimi-K2-Thinking's); they are "
            "rewritten as Moonshot's functions.NAME:INDEX, which the model writes and parsers read the name from "
            "(INDEX counts the conversation's calls; each tool result's tool_call_id follows its call)",
        ),
        (
            NOTE_CALL_IDS_UNIQUE,
            "have tool-call ids that repeat or are missing, and %s pairs each tool result with the first call "
            "that has its id (Command R7B numbers the calls); every call gets an id of its own, call_INDEX, and "
            "each tool result its call's, as an engine's ids are",
        ),
    ):
        changed = [n for n in notes if n.endswith(note)]
        if changed:
            log.warning(
                "%d conversation(s) " + what + "; first: %s",
                _conversations_in(changed),
                template,
                changed[0].rsplit(": ", 1)[0],
            )
    _warn_unprompted([n for n in notes if NOTE_PROMPT_UNLIKE_TURN in n], template)
    context = [n for n in notes if n.endswith(NOTE_REASONING_CONTEXT)]
    if context:
        rows = _conversations_in(context)
        log.warning(
            "%d assistant turn(s) in %d conversation(s) are context only (not trained): %s drops the reasoning of "
            "turns before the last user message, and training them without it would teach the model to answer or "
            "call tools without thinking%s; first: %s",
            len(context),
            rows,
            template,
            "" if split_reasoning_turns else " (data.split_reasoning_turns: true trains each in a row of its own)",
            context[0].split(": context only", 1)[0],
        )


def _warn_unprompted(unprompted: list[str], template: str) -> None:
    """One warning for the conversations with trained turns rendered without the generation prompt
    before them: counted from the data, since whether a turn holds it depends on them (a thinking
    template's prompt opens a think block that turns with reasoning have and turns without lack). The
    first such turn's note says what was rendered there instead and how it differs from the prompt."""
    if unprompted:
        where, what = unprompted[0].split(NOTE_PROMPT_UNLIKE_TURN, 1)
        log.warning(
            "%d conversation(s) have assistant turns that %s renders after a header that is not the prompt an "
            "engine generates from, so the trained model is fed a header at inference that it never saw before "
            "these turns; first: %s, rendered after%s",
            _conversations_in(unprompted),
            template,
            where.rstrip(": "),
            what,
        )


def _warn_as_written(fallbacks: list[str]) -> None:
    if fallbacks:
        log.warning(
            "%d conversation(s) whose tool calls were written as text are trained as written: as structured tool "
            "calls they cannot be labelled with this chat template; first, with the reason: %s",
            _conversations_in(fallbacks),
            fallbacks[0][:300],
        )


def tokenize_to_dataset(
    conversations: list[dict],
    tokenizer,
    max_length: int | None,
    num_proc: int | None = None,
    skip_invalid: bool = False,
    cache_dir: str | Path | None = None,
    unrendered_system_prompt: Literal["refuse", "into_first_user"] = "refuse",
    template_name: str | None = None,
    leading_assistant: Literal["refuse", "drop"] = "refuse",
    split_reasoning_turns: bool = False,
    row_counts: list | None = None,
):
    """Tokenize conversations into a ``datasets.Dataset`` of ``input_ids``/``labels``, cached on disk.

    The cache key covers the conversations, the tokenizer (vocabulary, chat template, special
    tokens), ``max_length``, ``unrendered_system_prompt`` and the labelling code's version, so every
    later run and every rank loads the same rows instead of tokenizing again. The cache folder is
    written under a temporary name and renamed into place, so a reader never sees a partial one.

    Earlier assistant turns whose reasoning the chat template drops (Qwen3, QwQ) are context only,
    counted in one warning; a system prompt the template does not render follows
    ``unrendered_system_prompt`` (see :class:`ChatDataModule`).

    Args:
        unrendered_system_prompt: ``refuse`` or ``into_first_user`` (see :class:`ChatDataModule`).
        template_name: how warnings name the chat template (default: the tokenizer's).
        leading_assistant: ``refuse`` or ``drop`` (see :class:`ChatDataModule`).
        split_reasoning_turns: tokenize each conversation as the rows of
            :func:`~lightning_agents.datamodules.reasoning_turns.split_reasoning_turns` (see
            :class:`ChatDataModule`); errors, drops and rows count those rows, and a row's location
            is its conversation's (``conversation 3`` where it has none: its index here) with
            `` (up to message N)``.
        row_counts: a list that receives, per conversation, ``(rows, refused, dropped)``: how many
            rows it was tokenized as, and how many of them were refused (with ``skip_invalid``) or
            dropped with no assistant token, so that callers count conversations lost whole or in part.

    Returns:
        ``(dataset, errors, dropped)``: rows with at least one assistant token, the ``where: reason``
        of each conversation whose assistant turns could not be located (with ``skip_invalid``), and
        the number dropped because truncation left no assistant token.
    """
    import datasets

    layout = template_layout(tokenizer)
    template_name = template_name or _template_description(tokenizer)
    if layout.end_of_turn is None and not layout.generation_markers:
        # Fail here, once, naming the template and the setting that swaps it, rather than in every
        # worker of datasets.map with neither (vLLM's Granite-20b-fc template renders no assistant turn).
        raise ChatTemplateError(
            f"cannot find assistant turns in {template_name}: {layout.end_of_turn_problem}; give "
            "data.chat_template a template file that renders user and assistant messages"
        )
    # named by their index here, before splitting: the rows of one conversation share its name
    conversations = [c if "where" in c else {**c, "where": f"conversation {i}"} for i, c in enumerate(conversations)]
    origin = list(range(len(conversations)))  # each row's conversation
    if split_reasoning_turns:
        parts = [_split_reasoning_turns(c) for c in conversations]
        origin = [i for i, rows in enumerate(parts) for _ in rows]
        conversations = [row for rows in parts for row in rows]
    payload = [
        json.dumps(
            {
                "messages": c["messages"],
                "tools": c.get("tools"),
                **({"as_written": c["as_written"]} if "as_written" in c else {}),
            },
            ensure_ascii=False,
        )
        for c in conversations
    ]
    wheres = [c["where"] for c in conversations]
    target = None
    if cache_dir is not None:
        h = hashlib.sha256()
        for part in (
            _TOKENIZED_FORMAT,
            _tokenizer_fingerprint(tokenizer),
            str(max_length),
            str(skip_invalid),
            unrendered_system_prompt,
            leading_assistant,
            # the payload differs already wherever a turn is split off; the setting is named too, so
            # one setting's entry never serves the other
            *(["split_reasoning_turns"] if split_reasoning_turns else []),
            # an instant the user fixed for templates that print the time; unset, rows keep the time
            # they were first tokenized at
            # (the instant the rows are rendered at, which a process that rendered before the
            # variable was set does not take from it)
            *([template_instant().isoformat()] if os.environ.get(TEMPLATE_TIME_ENV) else []),
        ):
            h.update(part.encode() + b"\0")
        for text in payload:
            h.update(text.encode() + b"\n")
        target = Path(cache_dir) / h.hexdigest()[:32]
        if (target / "done.json").is_file():
            done = json.loads((target / "done.json").read_text())
            _warn_as_written(done.get("as_written", []))
            _warn_notes(done.get("notes", []), template_name, split_reasoning_turns)
            if row_counts is not None:
                row_counts += [tuple(c) for c in done["row_counts"]]
            return datasets.load_from_disk(str(target / "rows")), done["errors"], done["dropped"]
    if num_proc is None:
        # A worker costs about a second to start; parallelism pays off only for larger sets.
        num_proc = min(8, os.cpu_count() or 1) if len(payload) >= 2000 else 1
    source = datasets.Dataset.from_dict({"where": wheres, "conversation": payload})
    mapped = source.map(
        _tokenize_batch,
        batched=True,
        batch_size=64,
        num_proc=num_proc if num_proc > 1 else None,
        remove_columns=["where", "conversation"],
        fn_kwargs={
            "tokenizer": tokenizer,
            "max_length": max_length,
            "skip_invalid": skip_invalid,
            "one_thread": num_proc > 1,
            "unrendered_system_prompt": unrendered_system_prompt,
            "stripped_reasoning": "context",
            "template_name": template_name,
            "leading_assistant": leading_assistant,
            "template_time": template_instant().isoformat(),
        },
        desc="tokenizing conversations" if len(payload) >= 2000 else None,
        keep_in_memory=True,
        load_from_cache_file=False,
    )
    flags = mapped["error"]
    errors = [e for e in flags if e and e != "dropped"]
    dropped = sum(1 for e in flags if e == "dropped")
    counts = [[0, 0, 0] for _ in range(origin[-1] + 1 if origin else 0)]
    for i, flag in zip(origin, flags):
        counts[i][0] += 1
        counts[i][1 if flag != "dropped" else 2] += bool(flag)
    if row_counts is not None:
        row_counts += [tuple(c) for c in counts]
    as_written = [w for w in mapped["as_written"] if w]
    _warn_as_written(as_written)
    notes = [f"{where}: {note}" for where, noted in zip(wheres, mapped["notes"]) if noted for note in json.loads(noted)]
    _warn_notes(notes, template_name, split_reasoning_turns)
    rows = mapped.filter(lambda e: e == "", input_columns="error", keep_in_memory=True)
    rows = rows.remove_columns(["error", "as_written", "notes"])
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            rows.save_to_disk(str(tmp / "rows"))
            (tmp / "done.json").write_text(
                json.dumps(
                    {
                        "errors": errors,
                        "dropped": dropped,
                        "as_written": as_written,
                        "notes": notes,
                        "row_counts": counts,
                    }
                )
            )
            try:
                os.replace(tmp, target)
            except OSError:  # another rank or run finished the same entry first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return datasets.load_from_disk(str(target / "rows")), errors, dropped
    return rows, errors, dropped


class ChatDataModule(L.LightningDataModule):
    """Conversations for supervised fine-tuning, tokenized in ``setup`` with assistant-only labels.

    Args:
        train: training source(s): JSONL/JSON/Parquet/Arrow/CSV files, ``datasets`` names or saved
            folders, or ``embedded:arithmetic/train``; OpenAI-format or ShareGPT records.
        val: validation source(s), same forms; ``None`` for no validation.
        test: test source(s), same forms.
        tokenizer: tokenizer to use (path, ``.gguf`` file, hub id or ``embedded:student``). ``None``
            (the default) follows the model: the Trainer's LightningModule ``tokenizer``, or in the
            command line the model setting; outside a Trainer, ``embedded:student``. One that is set
            must have the model's vocabulary (checked when the Trainer attaches the data).
        chat_template: a Jinja chat template file (or template text) that replaces the tokenizer's
            own, e.g. to render tool calls with a model whose template has none.
        max_length: longest tokenized conversation (longer ones are truncated from the right;
            conversations left without assistant tokens are dropped and counted).
        batch_size: conversations (or packed rows) per batch.
        pack: concatenate conversations into rows of ``max_length`` tokens; attention stays within
            each conversation through restarted ``position_ids``.
        skip_invalid: skip bad records instead of stopping at the first one, logging one warning
            per file and split with their count and the first's ``file:line: reason`` (all of them
            are kept in ``skipped``).
        num_workers: DataLoader worker processes.
        shuffle: shuffle the training set every epoch.
        seed: shuffle seed; epoch ``e`` is ordered by ``seed + e`` alone, so a resumed run (from any
            checkpoint, the end of an epoch included) sees the batches an uninterrupted run would.
            ``None``: the run's seed (``seed_everything``), else 0.
        dataset_split: split read from ``datasets`` sources.
        embedded_size: problems per embedded split (default: the split's standard size).
        embedded_styles: styles of embedded conversations, used in turn: ``direct``, ``tool``, ``program``.
        num_proc: tokenizer processes (``datasets.map``); ``None``: one per CPU (up to 8) for 2,000
            conversations or more, else one.
        cache_dir: folder where tokenized rows are cached across runs and ranks (keyed by data,
            tokenizer, template and ``max_length``); ``"default"`` is
            ``$XDG_CACHE_HOME/lightning_agents/tokenized`` (``~/.cache/...`` when unset); ``None``
            disables the cache.
        parse_text_tool_calls: turn tool calls that ShareGPT assistant turns write as text (Hermes
            ``<tool_call>`` blocks, ToolACE ``[f(x=1)]``) into tool calls, with their tool results and
            the tool list of the system prompt, so the chat template renders them in its own syntax;
            a conversation where any of it does not parse, or that the template cannot render with
            tool calls (Llama 3.1: one call per turn), is trained as written and counted in a
            warning. Only with a chat template that renders a tool list and tool calls
            (:func:`~lightning_agents.datamodules.conversations.renders_tool_use`; plain ChatML,
            DeepSeek-V3's and Phi-3.5's do not): elsewhere the text is all the model could be shown.
            ``False``: train such calls as the text the dataset has.
        unrendered_system_prompt: what to do with a conversation whose system prompt the chat template
            does not render at all (Mistral v0.3 and Mistral Nemo templates show it only inside a final
            user turn, which a conversation ending with the assistant's reply does not have, so the
            model would be trained without its instructions): ``refuse`` (the default) makes it an
            error naming the record and this setting (with ``skip_invalid``, skipped and counted);
            ``into_first_user`` prefixes the prompt to the first user message, a blank line between
            (where such a model sees it when served a one-turn prompt), counted in one warning.
            Templates that render the system prompt are not affected. Earlier assistant turns whose
            reasoning the template drops (Qwen3, QwQ: before the last user message) are always
            context only, counted in one warning: trained without it, they would teach the model
            to answer or call tools without thinking.
        leading_assistant: what to do with a conversation that opens with assistant messages before
            any user message (tau2 runs open with the agent's greeting) when the chat template refuses
            it for them (Mistral's templates want a user message first): ``refuse`` (the default)
            makes it an error naming the record and this setting (with ``skip_invalid``, skipped and
            counted); ``drop`` leaves those opening messages out, counted in one warning. Templates
            that render them are not affected. Tool-call ids a template refuses (Mistral: nine
            alphanumeric characters) are always rewritten, the same id the same way, counted in one
            warning.
        content_format: how a message's text parts (``content`` given as a list) reach the chat
            template, as vLLM's ``--chat-template-content-format``: ``auto`` (the default) detects
            it from the template (a template that loops over a message's parts gets them as the
            list and joins them itself; any other gets them joined with a newline), or follows the
            tokenizer's own ``chat_template_content_format`` where it has one; ``string`` or
            ``openai`` say it, for a model served with that option, so SFT rows read the parts as
            the served model does. Part of the tokenized-row cache key.
        split_reasoning_turns: train every assistant turn with reasoning (``reasoning_content``,
            ``thinking``, ``reasoning`` or a ``<think>`` block) that is not its conversation's last
            message in a row of its own, the conversation up to that turn with the earlier
            assistant turns as context (``weight: 0``); in the whole conversation those turns are
            context. For chat templates that drop such a turn's reasoning where more follows
            (gpt-oss drops a tool call's analysis once a final answer follows; Qwen3 and QwQ drop
            it before the last user message), which an engine fed back to the model while the turn
            was the last: otherwise those turns are context only (Qwen3) or the conversation is
            refused (gpt-oss). Turns with ``weight: 0`` get no row. Costs a prefix of the
            conversation per split turn. Each row is labelled on its own: with ``skip_invalid`` a
            conversation keeps the rows the template labels when others are refused (trained in
            part; the warning counts such conversations apart from those skipped whole). ``False``
            (the default): one row per conversation. Part of the tokenized-row cache key.
    """

    def __init__(
        self,
        train: str | list[str] | None = "embedded:arithmetic/train",
        val: str | list[str] | None = "embedded:arithmetic/val",
        test: str | list[str] | None = None,
        tokenizer: str | None = None,
        max_length: int = 512,
        batch_size: int = 16,
        pack: bool = False,
        skip_invalid: bool = False,
        num_workers: int = 0,
        shuffle: bool = True,
        seed: int | None = None,
        dataset_split: str = "train",
        embedded_size: int | None = None,
        embedded_styles: list[Literal["direct", "tool", "program"]] = ["direct"],  # noqa: B006 - jsonargparse shows the default
        chat_template: str | None = None,
        num_proc: int | None = None,
        cache_dir: str | None = "default",
        parse_text_tool_calls: bool = True,
        unrendered_system_prompt: Literal["refuse", "into_first_user"] = "refuse",
        leading_assistant: Literal["refuse", "drop"] = "refuse",
        content_format: Literal["auto", "string", "openai"] = "auto",
        split_reasoning_turns: bool = False,
    ) -> None:
        super().__init__()
        # checked here, before any model loads: max_length -1 trained on rows cut one token short
        for name, value in (("max_length", max_length), ("batch_size", batch_size)):
            if value < 1:
                raise ValueError(f"data.{name} must be >= 1, got {value}")
        if num_workers < 0:
            raise ValueError(f"data.num_workers must be >= 0, got {num_workers}")
        if unrendered_system_prompt not in ("refuse", "into_first_user"):
            raise ValueError(
                f"data.unrendered_system_prompt must be 'refuse' or 'into_first_user', got {unrendered_system_prompt!r}"
            )
        if leading_assistant not in ("refuse", "drop"):
            raise ValueError(f"data.leading_assistant must be 'refuse' or 'drop', got {leading_assistant!r}")
        if content_format not in CONTENT_FORMATS:
            raise ValueError(
                f"data.content_format must be one of {', '.join(map(repr, CONTENT_FORMATS))}, got {content_format!r}"
            )
        if not isinstance(split_reasoning_turns, bool):
            # a string "false" would be true; jsonargparse checks the command line, Python callers are not
            raise ValueError(f"data.split_reasoning_turns must be true or false, got {split_reasoning_turns!r}")
        self.save_hyperparameters()
        loadable_hparams(self)  # a Path argument made every checkpoint unloadable
        self.sources = {"fit": train, "validate": val, "test": test}
        self.tokenizer_name = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.pack = pack
        self.skip_invalid = skip_invalid
        self.num_workers = num_workers
        self.shuffle = shuffle
        self.seed = seed
        self.dataset_split = dataset_split
        self.embedded_size = embedded_size
        self.embedded_styles = list(embedded_styles)
        self.chat_template = chat_template
        self.num_proc = num_proc
        self.cache_dir = str(cache_home("tokenized")) if cache_dir == "default" else cache_dir
        self.parse_text_tool_calls = parse_text_tool_calls
        self.unrendered_system_prompt = unrendered_system_prompt
        self.leading_assistant = leading_assistant
        self.content_format = content_format
        self.split_reasoning_turns = split_reasoning_turns
        self._tokenizer = None
        self.datasets: dict[str, list[dict[str, list[int]]]] = {}
        self.skipped: dict[str, list[str]] = {}
        # conversations read and dropped by truncation per split, for the error when none is left
        self.dropped: dict[str, tuple[int, int]] = {}

    def _model_tokenizer(self):
        trainer = self._attached_trainer()
        module = getattr(trainer, "lightning_module", None) if trainer is not None else None
        return getattr(module, "tokenizer", None)

    @property
    def tokenizer(self):
        """The tokenizer: the named one, else the model's (see ``tokenizer``), loaded on first use."""
        if self._tokenizer is None:
            from lightning_agents.models import check_same_vocab, load_tokenizer

            model_tokenizer = self._model_tokenizer()
            if self.tokenizer_name is None and model_tokenizer is not None:
                tokenizer = model_tokenizer
            else:
                tokenizer = load_tokenizer(self.tokenizer_name or "embedded:student")
                if model_tokenizer is not None:
                    check_same_vocab(model_tokenizer, tokenizer, "model", "data.tokenizer")
            if self.chat_template is not None or self.content_format != "auto":
                import copy

                # a copy: the model's own tokenizer (rollouts, export) keeps its template and format
                tokenizer = copy.copy(tokenizer)
            if self.chat_template is not None:
                from lightning_agents.models import read_chat_template

                tokenizer.chat_template = read_chat_template(self.chat_template)
            if self.content_format != "auto":
                # the attribute the text-part join (content_parts.prompt_parts_join) and the
                # tokenized-row cache key (_tokenizer_fingerprint) both read
                tokenizer.chat_template_content_format = self.content_format
            self._tokenizer = tokenizer
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
        # calls become structured only where the template can show them (and the tool list) to the
        # model: under plain ChatML they would fail to render, and the tool list would vanish
        parse_calls = self.parse_text_tool_calls and renders_tool_use(self.tokenizer)
        for source in [sources] if isinstance(sources, str) else sources:
            found, bad = read_conversations(
                source,
                skip_invalid=self.skip_invalid,
                dataset_split=self.dataset_split,
                embedded_size=self.embedded_size,
                embedded_styles=self.embedded_styles,
                parse_text_tool_calls=parse_calls,
            )
            conversations += found
            errors += bad
            if bad:
                # One line per file: twenty lines of the first file's reason hid the other files'.
                log.warning("%s: skipped %d invalid record(s) for %s; first: %s", source, len(bad), stage, bad[0])
        self.skipped[stage] = errors
        return conversations

    def tokenize(self, conversations: list[dict], stage: str | None = None):
        """Tokenize conversations with assistant-only labels (in parallel, cached), packing them when asked;
        with ``split_reasoning_turns``, as the rows it makes of each.

        Conversations whose assistant turns the chat template does not render verbatim are an error
        naming the record, or with ``skip_invalid`` are skipped and counted with the invalid records.
        With ``split_reasoning_turns`` each row is labelled on its own: a conversation whose other rows
        the template labels is partly trained (its refused rows skipped), and the warnings say how
        many conversations were skipped whole and how many in part.
        """
        if not conversations:
            return []
        counts: list[tuple[int, int, int]] = []
        rows, errors, dropped = tokenize_to_dataset(
            conversations,
            self.tokenizer,
            self.max_length,
            num_proc=self.num_proc,
            skip_invalid=self.skip_invalid,
            cache_dir=self.cache_dir,
            unrendered_system_prompt=self.unrendered_system_prompt,
            template_name=_template_description(self.tokenizer, self.chat_template),
            leading_assistant=self.leading_assistant,
            split_reasoning_turns=self.split_reasoning_turns,
            row_counts=counts,
        )
        # each conversation's (rows, refused, dropped), by the name its rows' errors give it
        outcome = {c.get("where", f"conversation {i}"): n for i, (c, n) in enumerate(zip(conversations, counts))}
        if errors:
            stage = stage or getattr(self, "_tokenizing", None)
            template = _template_description(self.tokenizer, self.chat_template)
            for where, (count, first, records) in _per_file(errors).items():
                what, detail = _skipped_counts(count, records, outcome)
                log.warning(
                    "%s: skipped %s that %s cannot label%s%s; first: %s",
                    where,
                    what,
                    template,
                    f" (for {stage})" if stage else "",
                    detail,
                    first,
                )
            if stage is not None:
                self.skipped[stage] = self.skipped.get(stage, []) + errors
        if dropped:
            log.warning("%s", _dropped_message(dropped, counts, self.max_length))
        cut = _cut_inside_a_turn(rows, self.tokenizer, self.max_length)
        if cut:
            log.warning(
                "%d of %d %s end at max_length=%d inside an assistant turn: that turn is trained without "
                "its end (a tool call cut in half); raise max_length%s",
                cut,
                len(rows),
                # the rows carry no location to count their conversations by
                "row(s) of data.split_reasoning_turns" if self.split_reasoning_turns else "conversation(s)",
                self.max_length,
                "" if type(self) is ChatDataModule else " or let long_conversations split them",
            )
        split = stage or getattr(self, "_tokenizing", None)
        if split is not None:
            # conversations, not the rows split_reasoning_turns makes of them
            self.dropped[split] = (len(conversations), sum(1 for _, _, lost in counts if lost))
        if self.pack:
            return pack_rows(rows.to_list(), self.max_length)
        return rows

    def prepare_data(self) -> None:
        """Tokenize every split once on the first rank of each machine, filling the cache the ranks load."""
        if self.cache_dir is None:
            return
        for split in ("fit", "validate", "test"):
            if self.sources.get(split) is not None:
                self.tokenize(self.load_conversations(split))
        self.skipped = {}

    def setup(self, stage: str) -> None:
        """Read and tokenize the splits the stage needs (from the cache when ``prepare_data`` filled it)."""
        wanted = {"fit": ["fit", "validate"], "validate": ["validate"], "test": ["test"], "predict": []}[stage]
        for split in wanted:
            if split not in self.datasets:
                # Subclasses override tokenize(conversations); the split is passed on the side.
                self._tokenizing = split
                try:
                    self.datasets[split] = self.tokenize(self.load_conversations(split))
                finally:
                    self._tokenizing = None

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        rows = self.datasets.get(split) or []
        if not rows:
            setting, source, why = self._no_rows_reasons(split)
            if source is None:
                raise ValueError(f"no {split} data: set the `{setting}` source")
            raise ValueError(
                f"`{setting}` source {source!r} gave no trainable rows: "
                + ("; ".join(why) if why else "it holds no conversations")
            )
        return self._rows_loader(rows, partial(collate_padded, pad_id=self.tokenizer.pad_token_id), shuffle)

    def _no_rows_reasons(self, split: str) -> tuple[str, Any, list[str]]:
        """``(setting, source, reasons)`` for a split that gave no trainable rows; subclasses whose
        data does not come from the ``train``/``val``/``test`` settings name their own."""
        read, dropped = self.dropped.get(split, (0, 0))
        skipped = _conversations_in(self.skipped.get(split, []))
        why = []
        if dropped:
            why.append(
                f"{dropped} of {read} conversation(s) kept no assistant token after truncation to "
                f"max_length={self.max_length} (raise `max_length`)"
            )
        if skipped:
            why.append(f"{skipped} record(s) were skipped as invalid (see the warnings above)")
        return {"fit": "train", "validate": "val"}.get(split, split), self.sources.get(split), why

    def _rows_loader(self, rows: list, collate: Any, shuffle: bool) -> DataLoader:
        """A stateful loader of ``rows`` (Lightning stores its position in mid-epoch checkpoints),
        shuffled per (seed, epoch) when ``shuffle``."""
        if shuffle:
            return shuffled_loader(
                rows,
                batch_size=self.batch_size,
                seed=self.seed,
                collate_fn=collate,
                num_workers=self.num_workers,
                trainer=self._attached_trainer(),
            )
        return StatefulDataLoader(rows, batch_size=self.batch_size, num_workers=self.num_workers, collate_fn=collate)

    def _attached_trainer(self) -> Any:
        """The Trainer this datamodule is attached to, or ``None`` (used outside a Trainer)."""
        return getattr(self, "_trainer", None) or getattr(self, "trainer", None)

    def train_dataloader(self) -> DataLoader:
        return self._loader("fit", self.shuffle)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("validate", False) if self.datasets.get("validate") else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

    def state_dict(self) -> dict[str, Any]:
        """Counts of what was read and skipped (for the record), the shuffle seed in use and the chat
        template set with ``chat_template`` (its text)."""
        return {
            "rows": {k: len(v) for k, v in self.datasets.items()},
            # records, not the rows split_reasoning_turns makes of them
            "skipped": {k: _conversations_in(v) for k, v in self.skipped.items()},
            "shuffle_seed": run_seed(self.seed),
            # the template text trained with, for `export` (the file may be gone by then)
            "chat_template": self.tokenizer.chat_template if self.chat_template is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Shuffle with the checkpointed run's seed: a resume from the end of an epoch (where
        Lightning restores no loader state) must order the next epoch as the run it continues."""
        if state_dict.get("shuffle_seed") is not None:
            self.seed = int(state_dict["shuffle_seed"])
