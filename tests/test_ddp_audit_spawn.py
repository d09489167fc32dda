"""``ddp_spawn`` hands the trained weights back to the main process's module.

Lightning's spawn launcher trains in worker processes, then loads the weights into the module of
the main process with ``load_state_dict(..., strict=False)``. SFTModule and RSTGModule build their
model in ``configure_model``, which only the workers ran: every ``model.*`` key was dropped without
a word and, after ``trainer.fit``, the main process held the untrained model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from hang_guard import run_or_fail


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items() if k.startswith("model.")}


def _moved(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v + 0.5 if v.is_floating_point() else v for k, v in state.items()}


def test_sft_module_loads_model_weights_before_configure_model():
    from lightning_agents import SFTModule

    source = SFTModule()
    source.configure_model()
    trained = _moved(_weights(source))
    assert trained
    fresh = SFTModule()  # as in the main process of ddp_spawn: configure_model never ran
    fresh.load_state_dict(trained, strict=False)
    loaded = _weights(fresh)
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)


def test_rstg_module_loads_student_weights_before_configure_model():
    from lightning_agents.modules.rstg import RSTGModule

    source = RSTGModule(guidance=False)
    source.configure_model()
    trained = _moved(_weights(source))
    assert trained
    fresh = RSTGModule(guidance=False)
    fresh.load_state_dict(trained, strict=False)
    assert fresh.model is not None
    loaded = _weights(fresh)
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)


class _WorkerWeights(L.Callback):
    """In the rank-0 worker at the end of fit: the sum of the weights it trained (a module-level
    class, so that the spawn launcher can pickle it)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_end(self, trainer, pl_module):
        if trainer.global_rank == 0:
            total = float(sum(p.double().sum() for p in pl_module.model.parameters()))
            (self.out / "worker.json").write_text(json.dumps(total))


def _spawn_fit(out: Path) -> None:
    from lightning_agents import ChatDataModule, SFTModule

    torch.set_num_threads(1)
    L.seed_everything(0)
    module = SFTModule(lr=1e-2)

    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[_WorkerWeights(out)],
    )
    trainer.fit(module, ChatDataModule(embedded_size=8, batch_size=2, max_length=96, val=None))
    main = float(sum(p.double().sum() for p in module.model.parameters()))
    initial = float(sum(p.double().sum() for p in SFTModule().model.parameters()))
    (out / "main.json").write_text(json.dumps({"main": main, "initial": initial}))


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_spawn_leaves_the_trained_weights_in_the_main_process(tmp_path):
    run_or_fail([sys.executable, __file__, str(tmp_path)], "ddp_spawn fit", timeout=300)
    worker = json.loads((tmp_path / "worker.json").read_text())
    result = json.loads((tmp_path / "main.json").read_text())
    assert worker != result["initial"]  # training moved the weights
    assert result["main"] == pytest.approx(worker, abs=1e-9)


if __name__ == "__main__":
    _spawn_fit(Path(sys.argv[1]))
