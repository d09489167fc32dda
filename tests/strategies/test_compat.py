"""The private Lightning calls fenced in lightning_agents._lightning_compat, on the installed Lightning."""

from __future__ import annotations

import re
from pathlib import Path

import lightning
import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from lightning_agents import _lightning_compat as compat


def test_pyproject_bounds_lightning_to_the_tested_versions():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    (declared,) = re.findall(r'"lightning([<>=!~][^"]*)"', pyproject)
    assert SpecifierSet(declared) == SpecifierSet(compat.TESTED_LIGHTNING)
    assert "<" in compat.TESTED_LIGHTNING, "an upper bound: private calls may change in any minor release"
    assert Version(lightning.__version__) in SpecifierSet(compat.TESTED_LIGHTNING)


def test_private_calls_resolve_on_this_lightning():
    from lightning.pytorch.core.optimizer import LightningOptimizer

    sgd = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    assert compat.unwrap_optimizer(LightningOptimizer(sgd)) is sgd
    assert compat.unwrap_optimizer(sgd) is sgd
    assert compat.default_process_group_timeout().total_seconds() > 0
    # The broadcast and the hook callers run in the MUZO strategy tests (the two-process DDP tests
    # and on_before_optimizer_step); here only that the private names still exist.
    from lightning.pytorch.overrides.distributed import _sync_module_states
    from lightning.pytorch.trainer import call

    assert callable(_sync_module_states)
    assert callable(call._call_callback_hooks) and callable(call._call_lightning_module_hook)


def test_logger_step_is_the_step_of_lightnings_own_rows(tmp_path):
    # RSTG logs its rows at this step so that they interleave with validation and LR-monitor rows.
    from lightning.pytorch.demos.boring_classes import BoringModel

    class Rows(BoringModel):
        def __init__(self):
            super().__init__()
            self.pairs = []

        def training_step(self, batch, batch_idx):
            self.pairs.append((batch_idx, compat.logger_step(self.trainer)))
            return super().training_step(batch, batch_idx)

    model = Rows()
    trainer = lightning.Trainer(
        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path
    )
    trainer.fit(model)
    # the k-th batch's rows at step k - 1
    assert model.pairs == [(0, 0), (1, 1), (2, 2)]


def test_the_closure_field_muzo_takes_its_zero_grad_from_exists():
    # MUZOStrategy detaches Lightning's zero-grad function from the closure so on_before_zero_grad
    # runs once per step instead of in each of the 2q perturbed evaluations.
    from lightning.pytorch.loops.optimization.automatic import Closure

    from lightning_agents._lightning_compat import put_back_zero_grad, take_zero_grad

    def zero_grad() -> None:
        pass

    closure = Closure(step_fn=lambda: None, zero_grad_fn=zero_grad)
    assert take_zero_grad(closure) is zero_grad and take_zero_grad(closure) is None
    put_back_zero_grad(closure, zero_grad)
    assert take_zero_grad(closure) is zero_grad
