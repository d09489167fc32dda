"""``lightning-agents teacher_cache``: pre-generate RSTG's teacher statistics before training.

Reads the same config as ``fit`` (model = an ``RSTGModule``, data = its prompt DataModule), runs the
teacher ``teacher_k`` times on every training prompt, verifies the samples and appends the pass
rate and shortest correct answer of each prompt to the module's ``teacher_cache``. A later ``fit``
with the same settings finds every entry there and never samples the teacher; an interrupted run
keeps what it wrote and resumes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["TeacherCacheCommand"]


class TeacherCacheCommand:
    """Mixin that adds the ``teacher_cache`` subcommand to the trainer."""

    def teacher_cache(
        self, model: Any = None, datamodule: Any = None, batch_size: int = 16, progress: bool = True
    ) -> dict[str, int]:
        """Pre-generate the teacher pass rates and SFT answers of every training prompt.

        Args:
            model: the ``RSTGModule`` of the training config (its teacher, sampling and verifier
                settings define the cache keys).
            datamodule: the training config's DataModule; its training batches are the prompts.
            batch_size: prompts per teacher ``generate`` call (each sampled ``teacher_k`` times).
            progress: print progress to stderr.

        Returns:
            ``{"records", "computed", "cached"}``: prompts seen, distinct prompts computed now, the rest
            (found in the cache, or repeats of a prompt computed now).
        """
        from lightning_agents.errors import LightningAgentsError
        from lightning_agents.modules.rstg import RSTGModule
        from lightning_agents.modules.rstg_cache import TeacherCache

        if not isinstance(model, RSTGModule):
            raise LightningAgentsError(
                f"teacher_cache needs model: RSTGModule in the config, got {type(model).__name__}"
            )
        if datamodule is None:
            raise LightningAgentsError("teacher_cache needs the training config's data: section")
        if model.hparams.teacher_cache is None:
            model._cache = TeacherCache(Path(self.default_root_dir) / "rstg_teacher_cache.jsonl")
        datamodule.setup("fit")
        records = [rec for batch in datamodule.train_dataloader() for rec in batch]

        def report(done: int, total: int) -> None:
            if progress:
                print(f"teacher_cache: {done}/{total} prompts", file=sys.stderr, flush=True)

        result = model.precompute_teacher(records, batch_size=batch_size, progress=report)
        print(
            f"teacher_cache: {result['computed']} prompts computed, {result['cached']} cached or repeated "
            f"in {model.teacher_cache.path}"
        )
        return result
