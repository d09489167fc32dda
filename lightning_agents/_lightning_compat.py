"""Every private Lightning API this package relies on, fenced in one module.

Lightning keeps these names underscored because they may change in any minor release; each one is
wrapped here so that a Lightning upgrade breaks in one place, and `tests/strategies/test_compat.py`
checks that they exist and behave on the installed version. ``pyproject.toml`` bounds ``lightning``
to :data:`TESTED_LIGHTNING` (keep the two in sync when a new release has been tested).

Lightning is imported inside the functions, so importing this module stays torch-free.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "TESTED_LIGHTNING",
    "broadcast_module_states",
    "call_callback_hooks",
    "call_lightning_module_hook",
    "default_process_group_timeout",
    "distributed_sampler_kwargs",
    "logger_step",
    "unwrap_optimizer",
]

# The versions of `lightning` the private calls below were tested on: the pyproject bound.
TESTED_LIGHTNING = ">=2.5,<2.7"


def broadcast_module_states(module: Any) -> None:
    """Broadcast rank 0's parameters and buffers to every rank (DDP's start-up synchronisation).

    Args:
        module: the ``torch.nn.Module`` to synchronise in place.
    """
    from lightning.pytorch.overrides.distributed import _sync_module_states

    _sync_module_states(module)


def call_callback_hooks(trainer: Any, hook_name: str, *args: Any) -> None:
    """Run ``hook_name`` on every callback the way the Trainer does (profiling, ordering).

    Args:
        trainer: the running ``Trainer``.
        hook_name: e.g. ``"on_before_optimizer_step"``.
        *args: the hook's arguments after ``trainer`` and ``pl_module``.
    """
    from lightning.pytorch.trainer import call

    call._call_callback_hooks(trainer, hook_name, *args)


def call_lightning_module_hook(trainer: Any, hook_name: str, *args: Any) -> Any:
    """Run ``hook_name`` on the LightningModule the way the Trainer does.

    Args:
        trainer: the running ``Trainer``.
        hook_name: e.g. ``"on_before_optimizer_step"``.
        *args: the hook's arguments.
    """
    from lightning.pytorch.trainer import call

    return call._call_lightning_module_hook(trainer, hook_name, *args)


def unwrap_optimizer(optimizer: Any) -> Any:
    """The user's optimizer inside Lightning's ``LightningOptimizer`` wrapper (or ``optimizer`` itself).

    Args:
        optimizer: an optimizer as found in ``strategy.optimizers``.
    """
    from lightning.pytorch.core.optimizer import LightningOptimizer

    return optimizer._optimizer if isinstance(optimizer, LightningOptimizer) else optimizer


# Lightning's automatic-optimization Closure calls its `_zero_grad_fn` (on_before_zero_grad, then
# optimizer_zero_grad) on every call; tests/strategies/test_compat.py checks the field still exists.
_ZERO_GRAD_FIELD = "_zero_grad_fn"


def take_zero_grad(closure: Any) -> Any:
    """Detach the zero-grad function from Lightning's closure (returned; ``None`` when it has none),
    so that a caller evaluating the closure many times runs the zero-grad hooks once itself.

    Args:
        closure: the closure Lightning passes to ``optimizer_step`` (a module's own ``optimizer_step``
            may pass a plain function, which keeps calling its hooks).
    """
    zero_grad = getattr(closure, _ZERO_GRAD_FIELD, None)
    if zero_grad is not None:
        setattr(closure, _ZERO_GRAD_FIELD, None)
    return zero_grad


def put_back_zero_grad(closure: Any, zero_grad: Any) -> None:
    """Undo :func:`take_zero_grad`.

    Args:
        closure: the closure it was taken from.
        zero_grad: what :func:`take_zero_grad` returned.
    """
    if zero_grad is not None:
        setattr(closure, _ZERO_GRAD_FIELD, zero_grad)


def default_process_group_timeout() -> Any:
    """Lightning's default timeout of collective operations (a ``datetime.timedelta``)."""
    from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout

    return default_pg_timeout


def distributed_sampler_kwargs(trainer: Any) -> dict[str, int] | None:
    """``num_replicas`` and ``rank`` for a sampler that splits each epoch the way Lightning's own
    distributed sampler would, or ``None`` where Lightning would not split (no trainer, one
    process, or ``use_distributed_sampler=False``).

    Args:
        trainer: the ``Trainer`` a loader is built for, or ``None``.
    """
    if trainer is None:
        return None
    connector = trainer._accelerator_connector
    if not (connector.use_distributed_sampler and connector.is_distributed):
        return None
    kwargs = trainer.distributed_sampler_kwargs
    return {"num_replicas": int(kwargs["num_replicas"]), "rank": int(kwargs["rank"])} if kwargs else None


def logger_step(trainer: Any) -> int:
    """The step Lightning's own rows of the current batch go to its loggers at (validation,
    ``self.log``, ``LearningRateMonitor``): the count of batches that stepped, which under manual
    optimization is every batch.

    Args:
        trainer: the running ``Trainer``.
    """
    return int(trainer.fit_loop.epoch_loop._batches_that_stepped)
