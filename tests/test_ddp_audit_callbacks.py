"""HeldOutAccuracy and ExportHF on two CPU processes (DDP, gloo) with a logger: the fit finishes.

``trainer.log_dir`` is a broadcast from rank 0. HeldOutAccuracy read it inside its rank-0-only
record at the end of fit, so rank 0 waited in that broadcast while rank 1 waited in the barrier
after it: every multi-process fit with the callback hung at its end (or died at the collective
timeout). The script part of this test (``__main__``) sits in this file so that the test is one file.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import lightning as L
import pytest
import torch
from hang_guard import run_or_fail

# Collectives give up after this long instead of Lightning's 30 minutes (a hang fails fast).
COLLECTIVE_TIMEOUT_S = 60


def _fit(out: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.strategies import DDPStrategy

    from lightning_agents import ChatDataModule, SFTModule
    from lightning_agents.callbacks import ExportHF, HeldOutAccuracy

    torch.set_num_threads(1)
    L.seed_everything(0)
    accuracy = HeldOutAccuracy(size=2, max_new_tokens=4, batch_size=2)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S)),
        max_steps=1,
        logger=CSVLogger(out, name="logs"),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[accuracy, ExportHF(output="export")],
        default_root_dir=str(out),
    )
    module = SFTModule(lr=1e-3)
    trainer.fit(module, ChatDataModule(embedded_size=8, batch_size=2, max_length=96, val=None))
    weights = float(sum(p.detach().double().sum() for p in module.parameters()))
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps({"weights": weights}))


@pytest.mark.slow
@pytest.mark.distributed
def test_heldout_accuracy_and_export_finish_a_two_process_fit_with_a_logger(tmp_path):
    run_or_fail([sys.executable, __file__, str(tmp_path)], "2-process fit with HeldOutAccuracy", timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # DDP kept the ranks' weights identical
    # Rank 0 wrote the report and the export, once, where the logger and default_root_dir put them.
    reports = list(tmp_path.rglob("heldout_accuracy.json"))
    assert [p.relative_to(tmp_path).as_posix() for p in reports] == ["logs/version_0/heldout_accuracy.json"]
    assert [h["when"] for h in json.loads(reports[0].read_text())] == ["before", "after"]
    assert (tmp_path / "export" / "config.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


if __name__ == "__main__":
    _fit(Path(sys.argv[1]))
