"""Curation runs on rollout files: in one process, one shard of many, or all shards on a Ray cluster.

:func:`curate_files` is what the ``curate`` command, ``TopoCurateDataModule`` and every shard
call, so all of them select the same data for the same files and settings. A shard reads only the
records of its tasks (a stable hash of the task id, :mod:`~lightning_agents.topology.shards`) and
returns a JSON-ready payload; :func:`~lightning_agents.topology.pipeline.merge_shards` makes the
global selections from all payloads, equal to the single-process run. Any launcher can run the
shards (a SLURM array calling ``lightning-agents curate --num_shards N --shard_index $i``, then
``--merge``); :func:`curate_with_ray` is the one built in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lightning_agents.topology.pipeline import (
    CurationError,
    CurationResult,
    curate_rollouts,
    merge_shards,
    require_scored,
    shard_payload,
)
from lightning_agents.topology.reward_check import reward_check
from lightning_agents.topology.selection import SelectionConfig
from lightning_agents.topology.shards import curation_inputs, file_sha256, inputs_key

log = logging.getLogger(__name__)

__all__ = ["curate_files", "curate_shard", "curate_with_ray", "merge_payloads"]


def ground_truth_order_matters(paths: Sequence[str]) -> bool:
    """:func:`lightning_agents.datamodules.bfcl_rollouts.ground_truth_order_matters` (imported late, as the readers are)."""
    from lightning_agents.datamodules.bfcl_rollouts import ground_truth_order_matters as matters

    return matters(paths)


def _read(paths: Sequence[str], inputs: dict[str, Any], num_shards: int = 1, shard_index: int = 0):
    from lightning_agents.datamodules.trajectories import load_rollouts

    return load_rollouts(
        list(paths),
        format=inputs.get("format", "auto"),
        skip_invalid=inputs.get("skip_invalid", False),
        ground_truth=inputs.get("ground_truth") or (),
        tools=inputs.get("tools"),
        bfcl_verifier=inputs.get("bfcl_verifier", "call_match"),
        num_shards=num_shards,
        shard_index=shard_index,
    )


def curate_files(
    paths: Sequence[str],
    selection: SelectionConfig,
    inputs: dict[str, Any] | None = None,
    verifier: str | None = None,
    workers: int = 0,
    progress: Callable[[Iterable], Iterable] | None = None,
    keep_graphs: bool = False,
):
    """Read and curate rollout files in this process; returns ``(result, rollouts read)``.

    Raises:
        CurationError: no readable rollout, or none is scored (BFCL without possible answers).
    """
    inputs = inputs or {}
    rollouts = _read(paths, inputs)
    if not rollouts:
        raise CurationError(
            f"no readable rollout in {list(paths)} ({rollouts.skipped_count} skipped, "
            f"{len(rollouts.not_run)} recorded as the run's own errors)"
        )
    require_scored(rollouts, paths)
    result = curate_rollouts(
        rollouts, selection, progress=progress, keep_graphs=keep_graphs, workers=workers, verifier=verifier
    )
    return result, rollouts


def curate_shard(
    paths: Sequence[str],
    selection: SelectionConfig | dict,
    num_shards: int,
    shard_index: int,
    inputs: dict[str, Any] | None = None,
    verifier: str | None = None,
    workers: int = 0,
) -> dict[str, Any]:
    """Curate the tasks of one shard of the files; returns its :func:`shard_payload` (with read
    counts, and ``inputs_key``/``inputs``: the fingerprint and names of the files and settings it
    read, which a merge compares)."""
    if isinstance(selection, dict):
        selection = SelectionConfig(**selection)
    rollouts = _read(paths, inputs or {}, num_shards, shard_index)
    if rollouts:
        result = curate_rollouts(rollouts, selection, keep_graphs=False, workers=workers, verifier=verifier)
    else:
        result = CurationResult([], [], [], {"sft": {}, "rl": {}}, {}, success_threshold=selection.success_threshold)
    payload = shard_payload(result, num_shards, shard_index, selection)
    payload["rollouts"] = len(rollouts)
    payload["scored"] = sum(1 for r in rollouts if r.reward is not None)
    payload["skipped"] = list(rollouts.skipped)
    payload["not_run"] = list(rollouts.not_run)
    payload["reward_check"] = reward_check(rollouts, selection.success_threshold)
    # What this shard read, so that a merge refuses shards of other files or settings.
    inputs = inputs or {}
    ground_truth = [str(p) for p in inputs.get("ground_truth") or ()]
    read = {
        "format": inputs.get("format", "auto"),
        "skip_invalid": inputs.get("skip_invalid", False),
        "verifier": verifier,
        "bfcl_verifier": inputs.get("bfcl_verifier", "call_match"),
    }
    tools = inputs.get("tools")
    sha256 = {
        "rollouts": [file_sha256(p) for p in paths],
        "ground_truth": [file_sha256(p) for p in ground_truth],
        "tools": file_sha256(tools) if tools else None,
    }
    key_ground_truth = list(zip(sha256["ground_truth"], ground_truth))
    if not ground_truth_order_matters(ground_truth):
        # Read in any order, the ground truth is the same: shards given it in another order are
        # of one run (BFCL's answer and question files). Rollout files' order numbers trials.
        key_ground_truth.sort()
    files, settings = curation_inputs(paths, [p for _, p in key_ground_truth], tools, **read)
    hashes = [*sha256["rollouts"], *(h for h, _ in key_ground_truth), *([sha256["tools"]] if tools else [])]
    payload["inputs_key"] = inputs_key(files, settings, hashes)
    payload["inputs"] = {"rollouts": [str(p) for p in paths], "ground_truth": ground_truth, "tools": tools, **read}
    payload["inputs"]["sha256"] = sha256
    for name in ("func_docs", "bfcl_eval"):
        if name in settings:
            # In the key already; here too, so that a merge refusal names it as what differs.
            payload["inputs"][name] = settings[name]
    return payload


def merge_payloads(
    payloads: Sequence[dict[str, Any]], sources: Sequence[str] = (), shard_files: Sequence[str] = ()
) -> CurationResult:
    """:func:`merge_shards` plus the checks a single run makes (something read, something scored).

    ``sources`` are the files named when nothing was read or scored (the shard files, or the
    rollout files the shards read); ``shard_files``, where the payloads were read from files, name
    each payload in a refusal of shards written by other curation code.
    """
    read = sum(p.get("rollouts", 0) for p in payloads)
    if read == 0:
        raise CurationError(
            f"no readable rollout in {list(sources)} ({sum(len(p.get('skipped', [])) for p in payloads)} skipped, "
            f"{sum(len(p.get('not_run', [])) for p in payloads)} recorded as the runs' own errors)"
        )
    if sum(p.get("scored", 0) for p in payloads) == 0:
        raise CurationError(
            f"none of the {read} rollouts in {list(sources)} has a reward, so nothing can be selected; BFCL result files carry "
            "no score: pass their possible-answer file as ground_truth"
        )
    return merge_shards(payloads, sources=shard_files)


def curate_with_ray(
    paths: Sequence[str],
    selection: SelectionConfig,
    num_shards: int,
    inputs: dict[str, Any] | None = None,
    verifier: str | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
) -> tuple[CurationResult, list[dict[str, Any]]]:
    """Curate every shard as a Ray task and merge them: the built-in path past one machine.

    Each task reads the files itself (so the files must be where every node sees them, e.g. a
    shared file system or object store mount) and returns only its payload. With no ``address``
    a local Ray cluster is started for the call (and shut down after); with one, the tasks run on
    that cluster. Ray is an optional dependency: ``pip install 'lightning-agents[distributed]'``.

    Returns:
        ``(merged result, shard payloads)``.
    """
    try:
        import ray
    except ImportError:
        raise CurationError("engine 'ray' needs Ray: pip install 'lightning-agents[distributed]' (or 'ray')") from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address is not None:
            kwargs["address"] = address
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        ray.init(**kwargs)
    try:
        remote = ray.remote(curate_shard)
        refs = [
            remote.remote([str(p) for p in paths], selection.as_dict(), num_shards, index, dict(inputs or {}), verifier)
            for index in range(num_shards)
        ]
        payloads = ray.get(refs)
    finally:
        if started:
            ray.shutdown()
    return merge_payloads(payloads, paths), payloads
