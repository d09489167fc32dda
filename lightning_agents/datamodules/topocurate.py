"""``TopoCurateDataModule``: rollout files in, TopoCurate-selected training data out, at ``setup``.

Curation is a pure function of the input files' bytes and the settings (no randomness, ties
broken by task and trial), so every DDP rank computes the same selection. The result is cached
as JSON under a key made of the files' SHA-256 and the settings, so a second run reads the cache
instead of recomputing; cache files are written atomically, so ranks racing to write it are safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from torch.utils.data import DataLoader

from lightning_agents.datamodules.chat import ChatDataModule
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology.pipeline import CurationResult, curate_rollouts
from lightning_agents.atomic import atomic_write_text
from lightning_agents.topology.selection import SelectionConfig
from lightning_agents.topology.signatures import SignatureConfig

log = logging.getLogger(__name__)

__all__ = ["CACHE_VERSION", "TopoCurateDataModule", "curation_cache_key", "default_cache_dir", "file_sha256"]

# Bump when curation logic changes what it selects, so old caches are not reused.
CACHE_VERSION = 1


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/lightning_agents/topocurate`` (``~/.cache/...`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lightning_agents" / "topocurate"


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def curation_cache_key(paths: list[str], settings: dict[str, Any]) -> str:
    """The cache key: file contents (not names, so a moved file still hits) plus settings."""
    payload = {"version": CACHE_VERSION, "files": [file_sha256(p) for p in paths], "settings": settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


class TopoCurateDataModule(ChatDataModule):
    """Curates multi-trial rollouts with TopoCurate in ``setup`` and serves the selection.

    In ``sft`` mode the training set is the selected successful trajectories, tokenized by
    :class:`~lightning_agents.datamodules.chat.ChatDataModule` with assistant-only labels, for
    ``SFTModule``. In ``rl`` mode it is the selected tasks as prompt records (``id``, ``prompt``,
    ``reference``, ``verifier``, scores) for an RL module; :meth:`rl_records` returns them too.

    Args:
        rollouts: rollout file(s) (tau-bench/OpenAI, tau2-bench or BFCL; see
            :func:`~lightning_agents.datamodules.trajectories.load_rollouts`).
        mode: ``sft`` (trajectories for SFT) or ``rl`` (tasks for RL).
        format: rollout format, ``auto`` to detect it per file.
        skip_invalid: skip unreadable rollout records (and invalid SFT conversations) instead of
            stopping at the first; counts are logged and kept in ``state_dict``.
        success_threshold: reward at or above which a trial is a success.
        sft_per_task: most trajectories selected per task for SFT.
        sft_min_distance: minimum path distance (Jaccard, 0-1) between two picks of one task.
        recovery_weight: weight of reflective recovery in the SFT rank.
        efficiency_weight: weight of semantic efficiency in the SFT rank.
        rl_alpha: weight of the error branch ratio in the RL score.
        rl_beta: weight of strategic heterogeneity in the RL score.
        rl_top_n: keep at most this many RL tasks (``None``: all that qualify).
        rl_min_score: keep RL tasks scoring at least this.
        read_only_tools: tools that never change the environment (default: guessed from names).
        curate_workers: processes that build and analyse task graphs in parallel at ``setup``
            (``0``: in this process); the selection is the same for any number.
        cache_dir: folder of the curation cache; ``None`` disables caching; ``"default"`` is
            ``~/.cache/lightning_agents/topocurate``.
        val: validation source(s) for SFT (see ``ChatDataModule``), e.g.
            ``embedded:arithmetic/val``; ``None`` for none.
        tokenizer: tokenizer of the model being trained.
        max_length: longest tokenized conversation.
        batch_size: conversations (sft) or prompts (rl) per batch.
        pack: pack SFT conversations into ``max_length`` rows.
        num_workers: DataLoader workers.
        shuffle: shuffle the training set each epoch.
        embedded_size: problems per embedded validation split.
        embedded_styles: styles of embedded validation conversations.
    """

    def __init__(
        self,
        rollouts: str | list[str],
        mode: Literal["sft", "rl"] = "sft",
        format: Literal["auto", "openai", "tau2", "bfcl"] = "auto",
        skip_invalid: bool = False,
        success_threshold: float = 1.0,
        sft_per_task: int = 2,
        sft_min_distance: float = 0.0,
        recovery_weight: float = 1.0,
        efficiency_weight: float = 1.0,
        rl_alpha: float = 1.0,
        rl_beta: float = 1.0,
        rl_top_n: int | None = None,
        rl_min_score: float = 0.0,
        read_only_tools: list[str] | None = None,
        curate_workers: int = 0,
        cache_dir: str | None = "default",
        val: str | list[str] | None = None,
        tokenizer: str = "embedded:student",
        max_length: int = 512,
        batch_size: int = 16,
        pack: bool = False,
        num_workers: int = 0,
        shuffle: bool = True,
        embedded_size: int | None = None,
        embedded_styles: list[str] = ["tool"],  # noqa: B006 - jsonargparse shows the default
    ) -> None:
        super().__init__(
            train=None,
            val=val,
            test=None,
            tokenizer=tokenizer,
            max_length=max_length,
            batch_size=batch_size,
            pack=pack,
            skip_invalid=skip_invalid,
            num_workers=num_workers,
            shuffle=shuffle,
            embedded_size=embedded_size,
            embedded_styles=embedded_styles,
        )
        if mode not in ("sft", "rl"):
            raise ValueError(f"mode must be 'sft' or 'rl', got {mode!r}")
        self.rollout_paths = _as_list(rollouts)
        if not self.rollout_paths:
            raise ValueError("TopoCurateDataModule needs at least one rollout file (`rollouts`)")
        self.mode = mode
        self.format = format
        self.success_threshold = success_threshold
        self.selection_config = SelectionConfig(
            sft_per_task=sft_per_task,
            sft_min_distance=sft_min_distance,
            recovery_weight=recovery_weight,
            efficiency_weight=efficiency_weight,
            rl_alpha=rl_alpha,
            rl_beta=rl_beta,
            rl_top_n=rl_top_n,
            rl_min_score=rl_min_score,
        )
        self.read_only_tools = sorted(read_only_tools) if read_only_tools is not None else None
        if curate_workers < 0:
            raise ValueError(f"curate_workers must be 0 (in this process) or more, got {curate_workers}")
        self.curate_workers = curate_workers
        self.cache_dir = None if cache_dir is None else default_cache_dir() if cache_dir == "default" else Path(cache_dir)
        self.curated: dict[str, Any] | None = None
        self.cache_hit = False
        self._restored_selection: dict[str, Any] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting that changes what is selected (part of the cache key)."""
        return {
            "format": self.format,
            "skip_invalid": self.skip_invalid,
            "success_threshold": self.success_threshold,
            "selection": asdict(self.selection_config),
            "read_only_tools": self.read_only_tools,
        }

    def _compute(self) -> dict[str, Any]:
        rollouts = load_rollouts(self.rollout_paths, format=self.format, skip_invalid=self.skip_invalid)
        signatures = SignatureConfig(read_only_tools=frozenset(self.read_only_tools) if self.read_only_tools is not None else None)
        # Only the selections are kept, so the graphs go as soon as each task is analysed.
        result: CurationResult = curate_rollouts(
            rollouts, self.selection_config, signatures, self.success_threshold, keep_graphs=False, workers=self.curate_workers
        )
        return {
            "version": CACHE_VERSION,
            "settings": self.settings,
            "inputs": self.rollout_paths,
            "rollouts": len(rollouts),
            "skipped_rollouts": rollouts.skipped,
            "selection": {"sft": [list(k) for k in result.sft], "rl": [s.task_id for s in result.rl]},
            "sft": result.sft_conversations(),
            "rl": result.rl_records(),
        }

    def curate(self) -> dict[str, Any]:
        """Run (or read from the cache) the curation; returns the cached payload."""
        if self.curated is not None:
            return self.curated
        key = curation_cache_key(self.rollout_paths, self.settings)
        path = self.cache_dir / f"{key}.json" if self.cache_dir is not None else None
        if path is not None and path.is_file():
            try:
                self.curated = json.loads(path.read_text(encoding="utf-8"))
                self.cache_hit = True
            except json.JSONDecodeError:
                log.warning("ignoring unreadable curation cache %s", path)
        if self.curated is None:
            self.curated = self._compute()
            self.cache_hit = False
            if path is not None:
                atomic_write_text(path, json.dumps(self.curated, ensure_ascii=False))
        self.curated["cache_key"] = key
        if self._restored_selection is not None and self._restored_selection != self.curated["selection"]:
            log.warning("the curated selection differs from the one recorded in the checkpoint (inputs or settings changed)")
        n_sft, n_rl = len(self.curated["selection"]["sft"]), len(self.curated["selection"]["rl"])
        log.info("TopoCurate: %d rollouts -> %d SFT trajectories, %d RL tasks%s", self.curated["rollouts"], n_sft, n_rl, " (cached)" if self.cache_hit else "")
        return self.curated

    def load_conversations(self, stage: str) -> list[dict]:
        """The curated SFT conversations for ``fit``; other stages read ``val``/``test`` as ChatDataModule does."""
        if stage != "fit":
            return super().load_conversations(stage)
        conversations = [{"messages": c["messages"], "tools": c.get("tools")} for c in self.curate()["sft"]]
        if not conversations:
            raise ValueError(
                f"TopoCurate selected no successful trajectory from {self.rollout_paths}: check the rewards "
                f"(success_threshold={self.success_threshold}) or use mode='rl'"
            )
        return conversations

    def tokenize(self, conversations: list[dict]) -> list[dict[str, list[int]]]:
        """Check each conversation (OpenAI format) before tokenizing, then tokenize as ChatDataModule does."""
        from lightning_agents.datamodules.conversations import ConversationError, normalize_conversation

        checked, errors = [], []
        for index, conv in enumerate(conversations):
            try:
                messages, tools = normalize_conversation(conv)
            except ConversationError as exc:
                if not self.skip_invalid:
                    raise ValueError(f"curated conversation {index}: {exc}") from None
                errors.append(f"curated conversation {index}: {exc}")
                continue
            checked.append({"messages": messages, "tools": tools})
        if errors:
            log.warning("skipped %d curated conversation(s) that cannot be trained on: %s", len(errors), errors[:5])
        return super().tokenize(checked)

    def rl_records(self) -> list[dict[str, Any]]:
        """The selected RL tasks as prompt records, best first."""
        return self.curate()["rl"]

    def setup(self, stage: str) -> None:
        """Curate (or read the cache), then tokenize (sft) or keep the prompt records (rl)."""
        if self.mode == "rl":
            if stage == "fit" and "fit" not in self.datasets:
                records = self.rl_records()
                if not records:
                    raise ValueError(
                        f"TopoCurate selected no RL task from {self.rollout_paths}: every task has pass rate 0 or 1 "
                        "(or falls below rl_min_score); RL needs tasks the policy sometimes solves"
                    )
                self.datasets["fit"] = records
            return
        super().setup(stage)

    def train_dataloader(self) -> DataLoader:
        """SFT batches (sft) or lists of prompt records (rl)."""
        if self.mode == "rl":
            return DataLoader(self.datasets.get("fit") or [], batch_size=self.batch_size, shuffle=self.shuffle, collate_fn=list, num_workers=self.num_workers)
        return super().train_dataloader()

    def state_dict(self) -> dict[str, Any]:
        """What was selected (task/trial pairs and RL task ids), the cache key and counts."""
        state = super().state_dict()
        if self.curated is not None:
            state.update(
                {
                    "topocurate_selection": self.curated["selection"],
                    "topocurate_cache_key": self.curated.get("cache_key"),
                    "topocurate_rollouts": self.curated["rollouts"],
                    "topocurate_skipped_rollouts": len(self.curated["skipped_rollouts"]),
                }
            )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Remember the checkpoint's selection so a changed curation is reported at the next ``setup``."""
        self._restored_selection = state_dict.get("topocurate_selection")
