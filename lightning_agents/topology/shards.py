"""Sharding curation by task: a stable hash of the task id decides each task's shard.

Curation is per task (every metric and the SFT pick need only that task's trials), so shards of
tasks are independent: any launcher (a SLURM array, Ray, Spark, a shell loop) curates each shard
on its own machine, and :func:`merge_shards` combines the per-shard results into the global
selections (the RL ranking and the size-matched baselines span all tasks). The hash is blake2b of
the task id, the same on every machine and Python process (``hash()`` is salted per process).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_agents.errors import LightningAgentsError

__all__ = [
    "CURATION_VERSION",
    "FILE_KINDS",
    "SHARD_KEYS",
    "ShardError",
    "check_shard",
    "check_shard_inputs",
    "check_shard_payloads",
    "check_shard_versions",
    "curation_inputs",
    "file_sha256",
    "func_docs",
    "inputs_key",
    "shard_of",
]

# Bump when curation changes what it selects or what its payloads hold. Shard payloads carry it
# (a merge refuses shards of two versions) and TopoCurateDataModule's cache key is made with it
# (its CACHE_VERSION), so results of older code are never combined with or taken for newer ones.
# 19: tau2 simulations paired with a task their reward_info did not check are refused, so a cache
# of such a pairing (older code curated it with a warning) is not served.
# 20: a record that fails to parse and names no task is counted (skipped or not run) by shard 0
# alone, where every shard counted it; a merge of shards of 19 and 20 would count it again.
CURATION_VERSION = 20

#: Fields every shard payload has (``shard_payload``): a file without them is no shard file.
SHARD_KEYS = ("num_shards", "shard_index", "selection", "tasks", "trajectories", "sft", "rl_records")


class ShardError(LightningAgentsError, ValueError):
    """Bad shard settings, or shard results that do not fit together."""


def shard_of(task_id: str, num_shards: int) -> int:
    """The shard (0-based) of ``task_id`` among ``num_shards``."""
    if num_shards <= 1:
        return 0
    digest = hashlib.blake2b(str(task_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_shards


def check_shard(num_shards: int, shard_index: int) -> None:
    """Raise :class:`ShardError` unless ``0 <= shard_index < num_shards``."""
    if num_shards < 1:
        raise ShardError(f"num_shards must be at least 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise ShardError(f"shard_index must be in [0, {num_shards}), got {shard_index}")


def check_shard_versions(payloads: Sequence[Mapping[str, Any]], sources: Sequence[str] = ()) -> None:
    """Raise :class:`ShardError` unless every shard payload was written by this curation code.

    Shards written by two code versions select by different rules (and a later code's per-task
    picks next to an earlier one's RL ranking fits neither), so a merge of them is no run at all.
    ``sources`` names the payloads (their files) in the message; without them, ``shard <index>``.
    """
    wrong = [(name, p.get("curation_version")) for name, p in zip(_names(payloads, sources), payloads)]
    wrong = [(name, version) for name, version in wrong if version != CURATION_VERSION]
    if not wrong:
        return
    listed = ", ".join(
        f"{name} (curation version {'none: written before shards carried one' if v is None else v})"
        for name, v in wrong
    )
    advice = (
        "curate every shard again with this code (the same curate --num_shards N --shard_index i commands) and merge "
        "the new files"
    )
    newer = sorted({v for _, v in wrong if isinstance(v, int) and v > CURATION_VERSION})
    if len(newer) == 1 and len(wrong) == len(payloads):
        # Every shard is of one newer version: the code that wrote them merges them as they are.
        advice = f"merge them with the code that wrote them (curation version {newer[0]}, newer than this), or {advice}"
    elif len(newer) == 1:
        advice += f", or curate the others again with the newer code that wrote some (curation version {newer[0]}) and merge with it"
    raise ShardError(
        f"cannot merge shards: {len(wrong)} of {len(payloads)} shard(s) were written by other curation code than this one "
        f"(curation version {CURATION_VERSION}): {listed}. Shards of different code versions select by different "
        f"rules and cannot be merged; {advice}"
    )


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inputs_key(files: Sequence[str | Path], settings: Mapping[str, Any], hashes: Sequence[str] | None = None) -> str:
    """The fingerprint of what a curation read: the files' contents (not their names, so a moved
    file, or the same file mounted elsewhere on another node, gives the same key), the settings and
    :data:`CURATION_VERSION`. TopoCurateDataModule's cache key and each shard payload's
    ``inputs_key`` are this. ``hashes``: the files' :func:`file_sha256`, where the caller has them."""
    hashes = [file_sha256(p) for p in files] if hashes is None else list(hashes)
    payload = {"version": CURATION_VERSION, "files": hashes, "settings": dict(settings)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


#: The kinds of input file a shard records the SHA-256 of (``inputs["sha256"]``), as a refusal names them.
FILE_KINDS = {"rollouts": "rollout", "ground_truth": "ground-truth", "tools": "tools"}
# Why the order of a kind's files changes the curation (where it does; see check_shard_inputs).
_ORDER_MATTERS = {
    "rollouts": "a task's trials are numbered in file order",
    "ground_truth": "two of them give one field of a task with other values, and the later file's is used",
}


def curation_inputs(
    rollouts: Sequence[str | Path],
    ground_truth: Sequence[str | Path] = (),
    tools: str | Path | None = None,
    format: str = "auto",
    skip_invalid: bool = False,
    verifier: str | None = None,
    bfcl_verifier: str = "call_match",
) -> tuple[list[str], dict[str, Any]]:
    """``(files, settings)`` that decide what curation reads, for :func:`inputs_key`: the rollout,
    ground-truth and tools files (how many of each, since their order alone does not tell) and the
    read and verifier settings. The selection settings are not among them (a merge compares them
    on their own).

    BFCL question files take their tools, and the verifier its parameter order and defaults, from
    the ``multi_turn_func_doc/`` folder beside them: its files' SHA-256 are ``settings["func_docs"]``
    (:func:`func_docs`; absent where no question file has that folder, so other curations keep
    their keys), so editing a func doc makes another key instead of reusing a cached curation.
    ``bfcl_verifier="execution"`` scores with the installed bfcl-eval's own docs and API classes,
    not that folder: its version and their hash are ``settings["bfcl_eval"]``
    (:func:`~lightning_agents.tasks.bfcl_execution.bfcl_eval_identity`), so upgrading it does too.
    """
    files = [str(p) for p in (*rollouts, *ground_truth, *([tools] if tools else []))]
    settings = {
        "format": format,
        "skip_invalid": skip_invalid,
        "verifier": verifier,
        "bfcl_verifier": bfcl_verifier,
        "files": [len(rollouts), len(ground_truth)],
    }
    docs = func_docs(ground_truth)
    if docs:
        settings["func_docs"] = docs
    if bfcl_verifier == "execution":
        from lightning_agents.tasks.bfcl_execution import bfcl_eval_identity

        settings["bfcl_eval"] = bfcl_eval_identity()
    return files, settings


def func_docs(ground_truth: Sequence[str | Path]) -> list[list[list[str]]]:
    """The BFCL func docs the ground-truth files are read with: for each ``multi_turn_func_doc/``
    folder beside a BFCL question file among them (each folder once, in the files' order),
    ``[name, SHA-256]`` of each ``*.json`` file in it, by name. Contents and names within the
    folder, not where it is, as for the inputs. Every doc is taken, not only those of classes a
    question names: a doc the questions never name changes nothing read, but is cheap to hash and
    never wrongly left out. Other files there (``.DS_Store``, a README) are never read, and a
    folder beside only other files (a tau2 ``tasks.json``, possible answers) is not read either."""
    out: list[list[list[str]]] = []
    seen: set[Path] = set()
    for path in ground_truth:
        folder = (Path(path).parent / "multi_turn_func_doc").resolve()
        if folder in seen or not folder.is_dir() or not _is_question_file(Path(path)):
            continue
        seen.add(folder)
        out.append([[doc.name, file_sha256(doc)] for doc in sorted(folder.glob("*.json")) if doc.is_file()])
    return out


def _is_question_file(path: Path) -> bool:
    """Whether ``path`` is a BFCL question file: JSON Lines (not a JSON list, as tau2's
    ``tasks.json`` is) with ``involved_classes``, which the ground-truth reader takes the func docs
    beside it for."""
    with path.open("rb") as handle:
        head = handle.read(1 << 16).lstrip()
        if head.startswith(b"["):
            return False
        handle.seek(0)
        return any(b'"involved_classes"' in line for line in handle)


def _names(payloads: Sequence[Any], sources: Sequence[str]) -> list[str]:
    return list(sources) + [
        f"shard {p.get('shard_index') if isinstance(p, Mapping) else '?'}" for p in payloads[len(sources) :]
    ]


def check_shard_payloads(payloads: Sequence[Any], sources: Sequence[str] = ()) -> None:
    """Every check of shard payloads before they are merged, in order: each is a shard payload at
    all, of this code's version (:func:`check_shard_versions`), from the same inputs
    (:func:`check_shard_inputs`).

    Raises:
        ShardError: naming each file (``sources``) or shard that fails.
    """
    for name, payload in zip(_names(payloads, sources), payloads):
        if not isinstance(payload, Mapping) or not all(key in payload for key in SHARD_KEYS):
            what = (
                f"an object with fields {sorted(payload)[:8]}"
                if isinstance(payload, Mapping)
                else f"a JSON {type(payload).__name__}"
            )
            raise ShardError(
                f"{name} is not a shard file: it holds {what}, where a shard file (written by curate --num_shards N "
                f"--shard_index i into OUTPUT/shards/) has {', '.join(SHARD_KEYS)}; rollout files are curated with "
                "--rollouts, not --merge"
            )
    check_shard_versions(payloads, sources)
    check_shard_inputs(payloads, sources)


def check_shard_inputs(payloads: Sequence[Mapping[str, Any]], sources: Sequence[str] = ()) -> None:
    """Raise :class:`ShardError` unless every shard payload was curated from the same inputs.

    Shards are the tasks of one run split by task: shards of other rollout files (or of the same
    files read with another verifier or ground truth) merged into a result no single run gives,
    with trials renumbered and pass rates of other data. Each payload's ``inputs_key``
    (:func:`inputs_key`) is compared; ``inputs`` (the files, their SHA-256 per kind in
    ``inputs["sha256"]``, and the settings it recorded) says what differs: the bytes of which kind
    of file (rollouts, ground truth, tools), the same bytes in another order (where the order
    changes the curation), or a setting. File names are not compared: the same bytes elsewhere
    are the same input.
    """
    groups: dict[Any, list[str]] = {}
    inputs: dict[Any, Any] = {}
    for name, payload in zip(_names(payloads, sources), payloads):
        groups.setdefault(payload.get("inputs_key"), []).append(name)
        inputs.setdefault(payload.get("inputs_key"), payload.get("inputs") or {})
    if len(groups) <= 1:
        return
    records = list(inputs.values())
    why = []
    for kind, label in FILE_KINDS.items():
        seen = [_as_list((r.get("sha256") or {}).get(kind)) for r in records]
        if all(s == seen[0] for s in seen):
            continue
        if all(sorted(s) == sorted(seen[0]) for s in seen):
            why.append(f"the same {label} files in another order ({_ORDER_MATTERS.get(kind, 'the order is read')})")
        else:
            why.append(f"the {label} files' bytes differ")
    settings = sorted({k for v in records for k in v if k not in FILE_KINDS and k != "sha256"})
    differ = [k for k in settings if len({json.dumps(v.get(k), sort_keys=True) for v in records}) > 1]
    why += [f"{k} differs" for k in differ]
    shown = [*(k for k in FILE_KINDS if any(f"{FILE_KINDS[k]} files" in w for w in why)), *differ]
    listed = "; ".join(
        f"{', '.join(names)} (" + ", ".join(f"{k} {inputs[key].get(k)!r}" for k in (shown or ["rollouts"])) + ")"
        for key, names in groups.items()
    )
    raise ShardError(
        f"cannot merge shards curated from different inputs ({'; '.join(why) or 'their inputs differ'}): {listed}. "
        "The shards of one run read the same rollout, ground-truth and tools files with the same settings; curate "
        "every shard from the same ones and merge those"
    )


def _as_list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, list) else [value]
