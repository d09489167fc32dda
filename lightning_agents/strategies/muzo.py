"""Lightning strategies that train with :class:`~lightning_agents.optim.MUZOAdam`: forward passes only.

Lightning's automatic optimization builds a closure (``training_step`` + ``backward``) and hands it
to ``optimizer.step``; MUZOAdam calls it ``2q`` times per step with the parameters perturbed. The
strategies adapt that loop:

- ``training_step`` runs under ``torch.no_grad()``: Lightning's closure is decorated with
  ``torch.enable_grad()``, so the optimizer's own ``no_grad`` does not reach the model, and without
  this every evaluation would record an autograd graph (activation memory of backprop).
- ``backward`` is a no-op and ``on_before_backward`` / ``on_after_backward`` are not called: there
  is no graph to differentiate.
- The whole optimizer step runs with the model in ``eval()`` mode (dropout off, so ``L+`` and ``L-``
  see the same network and their difference is not swamped by dropout noise); each submodule's
  ``training`` flag is restored afterwards.
- Logging happens once per step. While ``training_step`` runs inside the ``2q`` evaluations the
  strategy intercepts the module's ``self.log`` calls and forwards each metric once, during the last
  evaluation, with the mean of its ``2q`` values (for the loss that is the mean of
  ``L(theta + eps z_j)`` and ``L(theta - eps z_j)``, which equals ``L(theta) + O(eps^2)``: the loss
  at the unperturbed weights, free of charge). Non-numeric values (torchmetrics objects) are
  forwarded as logged in the last evaluation. The step's output passed to ``on_train_batch_end``
  is the last evaluation's.
- ``on_before_optimizer_step`` runs once per step, after the evaluations and before the update,
  with the weights restored to their unperturbed values (only when a callback or the module
  overrides it: restoring before the hook costs one extra direction pass). ``on_before_zero_grad``
  and ``optimizer_zero_grad``, which Lightning's closure calls on every call, run once per step,
  before the evaluations, on the unperturbed weights.
- ``training_step`` returning ``None`` (Lightning's "skip this batch") skips the step: the weights
  are restored and nothing is updated, as for a non-finite loss.
- Settings that cannot be honoured are refused at ``fit`` start: gradient clipping (including a
  module's ``configure_gradient_clipping`` override), gradient accumulation, manual optimization,
  and any optimizer other than a single ``MUZOAdam``.
  ``16-mixed`` and ``bf16-mixed`` work (float32 weights, 16-bit forward; the GradScaler of
  ``16-mixed`` is never used since nothing is backpropagated).

:class:`MUZODDPStrategy` uses DDP's process group but does not wrap the model in
``DistributedDataParallel`` (there are no gradients to synchronise): it broadcasts rank 0's weights
and seed stream once. With ``parallel="data"`` every rank evaluates all queries on its own shard of
the data and the ``2q`` losses are averaged over ranks; with ``parallel="queries"`` every rank
reads the same batch, evaluates its share of the queries, and the loss vectors are summed. Either
way only ``2q`` scalars cross the network per step and every rank applies the identical update.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.pytorch.accelerators import Accelerator
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core import LightningModule
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, StrategyRegistry
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import Tensor

from lightning_agents import _lightning_compat as compat
from lightning_agents.errors import LightningAgentsError
from lightning_agents.optim.muzo_adam import MUZOAdam
from lightning_agents.strategies import STRATEGIES

__all__ = ["MUZODDPStrategy", "MUZOSettingError", "MUZOStrategy", "SkippedBatchWarning"]


class MUZOSettingError(LightningAgentsError, MisconfigurationException):
    """A Trainer or module setting that zeroth-order training cannot honour.

    A ``MisconfigurationException`` as Lightning's own refusals are, and a package error, so the
    command line prints it as one line (with the setting's file:line) instead of a traceback.
    """


class SkippedBatchWarning(RuntimeWarning):
    """``training_step`` returned ``None`` in a perturbed evaluation, so the strategy skipped the step."""


class _LogAverager:
    """Collects ``LightningModule.log`` calls over the evaluations of one step and replays them once."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[list[Any], tuple, dict]] = {}

    def capture(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        values, _, _ = self.calls.get(name, ([], (), {}))
        values.append(value)
        self.calls[name] = (values, args, kwargs)

    @staticmethod
    def _mean(values: list[Any]) -> Any:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return sum(float(v) for v in values) / len(values)
        if all(isinstance(v, Tensor) and v.numel() == 1 and v.is_floating_point() for v in values):
            return torch.stack([v.detach().reshape(()).float() for v in values]).mean()
        return values[-1]

    def replay(self, log_fn: Callable[..., None]) -> None:
        calls, self.calls = self.calls, {}
        for name, (values, args, kwargs) in calls.items():
            log_fn(name, self._mean(values), *args, **kwargs)


class _MUZOMixin:
    """The zeroth-order training loop behaviour shared by the single-device and the DDP strategy."""

    def _muzo_init(self) -> None:
        self._log_averager = _LogAverager()
        self._evaluations_left = 0

    # -------------------------------------------------------------- validation of the setup
    def _check_trainer(self, trainer) -> None:
        name = type(self).__name__
        if trainer.gradient_clip_val not in (None, 0, 0.0):
            raise MUZOSettingError(
                f"trainer.gradient_clip_val: {name} cannot clip gradients "
                f"(Trainer(gradient_clip_val={trainer.gradient_clip_val})): zeroth-order training never forms a "
                "gradient. Remove gradient_clip_val; lower the optimizer's lr instead."
            )
        if trainer.accumulate_grad_batches != 1:
            raise MUZOSettingError(
                f"trainer.accumulate_grad_batches: {name} does not support "
                f"accumulate_grad_batches={trainer.accumulate_grad_batches}: there are no gradients to accumulate. "
                "Use a larger batch, or more queries (num_queries) to reduce variance."
            )
        module = trainer.lightning_module
        if type(module).configure_gradient_clipping is not LightningModule.configure_gradient_clipping:
            # a warning, not a refusal: Lightning's documented override clips only under a condition
            # and with gradient_clip_val unset does nothing, which MUZO cannot tell from a real need
            warnings.warn(
                f"{type(module).__name__}.configure_gradient_clipping: {name} never calls it (Lightning calls it "
                "after backward, and zeroth-order training forms no gradient), so whatever it clips is not "
                "clipped; lower the optimizer's lr instead.",
                UserWarning,
                stacklevel=2,
            )
        if not module.automatic_optimization:
            raise MUZOSettingError(
                f"{name} needs automatic optimization: the optimizer calls training_step through Lightning's closure. "
                "Set `self.automatic_optimization = True` (the default) and return the loss from training_step."
            )

    def _muzo_optimizer(self) -> MUZOAdam:
        optimizers = [compat.unwrap_optimizer(o) for o in self.optimizers]
        if len(optimizers) != 1 or not isinstance(optimizers[0], MUZOAdam):
            found = ", ".join(type(o).__name__ for o in optimizers) or "none"
            raise MUZOSettingError(
                f"{type(self).__name__} trains with exactly one lightning_agents.optim.MUZOAdam returned by "
                f"configure_optimizers (found: {found}). In a config: `optimizer: {{class_path: "
                "lightning_agents.optim.MUZOAdam, init_args: {...}}`."
            )
        return optimizers[0]

    # -------------------------------------------------------------- the loop hooks
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        module = self.lightning_module
        if self._evaluations_left <= 0:
            trainer = module._trainer
            if trainer is not None and trainer.accumulate_grad_batches != 1:
                # Set after setup (GradientAccumulationScheduler): Lightning now runs batches
                # outside any optimizer step, whose losses would be computed and thrown away.
                raise MUZOSettingError(
                    f"{type(self).__name__} does not support accumulate_grad_batches={trainer.accumulate_grad_batches} "
                    "(set by a GradientAccumulationScheduler callback?): there are no gradients to accumulate. Use a "
                    "larger batch, or more queries (num_queries) to reduce variance."
                )
            # Not inside MUZOAdam.step (e.g. a user calling training_step directly): no interception.
            with torch.no_grad():
                return super().training_step(*args, **kwargs)
        self._evaluations_left -= 1
        final = self._evaluations_left == 0
        # An instance attribute shadows the bound method for this call only; `log_dict` goes through
        # `self.log` too, so both are covered.
        module.log = self._log_averager.capture
        try:
            with torch.no_grad():
                output = super().training_step(*args, **kwargs)
        finally:
            del module.log
        if final:
            self._log_averager.replay(module.log)
        return output

    def backward(self, closure_loss: Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> Tensor:
        """No backward pass: MUZOAdam estimates the gradient from losses alone.

        Args:
            closure_loss: the loss of one evaluation (returned unchanged).
            optimizer: unused.
            *args: unused.
            **kwargs: unused.
        """
        return closure_loss

    def optimizer_step(self, optimizer: Any, closure: Callable[[], Any], model: Any = None, **kwargs: Any) -> Any:
        """Run one MUZOAdam step: ``2q`` evaluations of ``closure`` in eval mode, one update.

        Args:
            optimizer: the (unwrapped) ``MUZOAdam``.
            closure: Lightning's training-step closure.
            model: the LightningModule (defaults to ``self.lightning_module``).
            **kwargs: forwarded to ``optimizer.step``.
        """
        model = model or self.lightning_module
        if not isinstance(optimizer, MUZOAdam):
            raise MUZOSettingError(f"{type(self).__name__} steps a MUZOAdam, got {type(optimizer).__name__}")
        trainer = model.trainer

        def before_update() -> None:
            # Once per step, between the evaluations and the update, as for a gradient optimizer,
            # with the weights unperturbed (MUZOAdam restores them before calling this).
            compat.call_callback_hooks(trainer, "on_before_optimizer_step", optimizer)
            compat.call_lightning_module_hook(trainer, "on_before_optimizer_step", optimizer)

        def evaluate() -> Any:
            loss = closure()
            if loss is None:
                # Lightning's "skip this batch" (single process: Lightning itself refuses it under DDP).
                # A NaN makes MUZOAdam restore the weights and skip the update.
                _warn_skipped_batch(trainer)
                return torch.tensor(float("nan"))
            return loss

        self._evaluations_left = optimizer.evaluations_per_step
        self._log_averager.calls.clear()
        zero_grad = compat.take_zero_grad(closure)
        try:
            if zero_grad is not None:
                # Once per step with the weights unperturbed, as under a gradient optimizer; inside the
                # closure on_before_zero_grad (an EMA's usual hook) would see 2q perturbed weights.
                zero_grad()
            with _eval_mode(model):
                hook = before_update if _overrides_before_optimizer_step(trainer) else None
                return optimizer.step(closure=evaluate, before_update=hook, **kwargs)
        finally:
            compat.put_back_zero_grad(closure, zero_grad)
            self._evaluations_left = 0
            self._log_averager.calls.clear()


def _warn_skipped_batch(trainer) -> None:
    warnings.warn(
        f"training_step returned None at global step {trainer.global_step} (Lightning's 'skip this batch'): MUZOAdam "
        "restores the weights and skips this step's update. None in any one of the 2q perturbed evaluations skips "
        "the whole step, since its estimate needs every loss.",
        SkippedBatchWarning,
        stacklevel=2,
    )


def _overrides_before_optimizer_step(trainer) -> bool:
    if type(trainer.lightning_module).on_before_optimizer_step is not LightningModule.on_before_optimizer_step:
        return True
    return any(type(cb).on_before_optimizer_step is not Callback.on_before_optimizer_step for cb in trainer.callbacks)


@contextmanager
def _eval_mode(module: torch.nn.Module):
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


class MUZOStrategy(_MUZOMixin, SingleDeviceStrategy):
    """Single-device zeroth-order training with :class:`~lightning_agents.optim.MUZOAdam` (no backward).

    ``Trainer(strategy=MUZOStrategy())`` or ``strategy: muzo`` in a config; the module's
    ``configure_optimizers`` must return one ``MUZOAdam``.

    Args:
        device: the device to train on; ``None`` takes the first device of the Trainer's accelerator
            (``cuda:0`` on a GPU machine, ``cpu`` otherwise).
        accelerator: set by the Trainer from its ``accelerator`` argument.
        checkpoint_io: checkpoint I/O plugin (default: torch.save).
        precision_plugin: set by the Trainer from its ``precision`` argument.
    """

    strategy_name = "muzo"

    def __init__(
        self,
        device: str | torch.device | None = None,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        super().__init__(
            device=device if device is not None else "cpu",
            accelerator=accelerator,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
        )
        self._device_from_accelerator = device is None
        self._muzo_init()

    def setup_environment(self) -> None:
        if self._device_from_accelerator and self.accelerator is not None:
            devices = self.accelerator.get_parallel_devices(self.accelerator.parse_devices(1))
            self._root_device = devices[0]
        super().setup_environment()

    def setup(self, trainer) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self._check_trainer(trainer)
        super().setup(trainer)
        if trainer.state.fn == TrainerFn.FITTING:
            self._muzo_optimizer()

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        """Register ``"muzo"`` in Lightning's strategy registry.

        Args:
            strategy_registry: Lightning's ``StrategyRegistry``.
        """
        name, (_, params, description) = "muzo", STRATEGIES["muzo"]
        strategy_registry.register(name, cls, description=description, override=True, **params)


class MUZODDPStrategy(_MUZOMixin, DDPStrategy):
    """Data-parallel zeroth-order training: identical seeds on every rank, only ``2q`` scalars all-reduced.

    The model is not wrapped in ``DistributedDataParallel``; rank 0's weights and seed stream are
    broadcast at setup, every rank evaluates its shard of the batch, the ``2q`` losses are averaged
    over ranks, and every rank applies the same update. With the same global batch the result equals
    a single-process run (up to the float rounding of the loss average).

    Args:
        accelerator: set by the Trainer from its ``accelerator`` argument.
        parallel_devices: set by the Trainer from ``devices``.
        cluster_environment: set by the Trainer (torchrun, SLURM, ...).
        checkpoint_io: checkpoint I/O plugin.
        precision_plugin: set by the Trainer from its ``precision`` argument.
        process_group_backend: ``"gloo"``, ``"nccl"``...; ``None`` picks the device's default.
        timeout: timeout of collective operations (``None``: Lightning's default).
        start_method: how processes are launched: ``"popen"`` (re-run the script, like ``ddp``),
            ``"spawn"`` or ``"fork"``.
        parallel: ``"data"`` (every rank all ``q`` queries on its own data shard; the losses are
            averaged) or ``"queries"`` (every rank the same batch and ``q / world_size`` of the
            queries, as in DistZO2; the loss vectors are summed). With ``"queries"`` every rank's
            dataloader yields the whole dataset (Lightning's distributed sampler is told there is
            one replica), so a step costs ``2q / world_size`` forward passes per rank. The ranks'
            weights then differ in the last bit (each rank perturbs and restores only its own
            directions); they are re-broadcast from rank 0 every ``resync_every`` steps.
        resync_every: steps between re-broadcasts of rank 0's weights with ``parallel="queries"``
            (0: never).
    """

    strategy_name = "muzo_ddp"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        start_method: Literal["popen", "spawn", "fork"] = "popen",
        parallel: Literal["data", "queries"] = "data",
        resync_every: int = 1000,
    ) -> None:
        if parallel not in ("data", "queries"):
            raise MUZOSettingError(f"MUZODDPStrategy: parallel must be 'data' or 'queries', got {parallel!r}")
        if not (isinstance(resync_every, int) and resync_every >= 0):
            raise MUZOSettingError(f"MUZODDPStrategy: resync_every must be an integer >= 0, got {resync_every!r}")
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend,
            timeout=timeout if timeout is not None else compat.default_process_group_timeout(),
            start_method=start_method,
        )
        self.parallel = parallel
        self.resync_every = resync_every
        self._muzo_init()

    def configure_ddp(self) -> None:
        # No DistributedDataParallel wrapper: nothing is backpropagated, so there is nothing for its
        # gradient hooks to synchronise. Only its initial weight broadcast is needed.
        compat.broadcast_module_states(self.model)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        if self.parallel == "queries":
            # Every rank reads the same batches (the same shuffle seed): the ranks split the queries.
            return dict(num_replicas=1, rank=0)
        return super().distributed_sampler_kwargs

    def optimizer_step(self, optimizer: Any, closure: Callable[[], Any], model: Any = None, **kwargs: Any) -> Any:
        out = super().optimizer_step(optimizer, closure, model, **kwargs)
        if self.parallel == "queries" and self.resync_every and optimizer.num_updates % self.resync_every == 0:
            compat.broadcast_module_states(self.model)
        return out

    def setup(self, trainer) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self._check_trainer(trainer)
        super().setup(trainer)
        if trainer.state.fn == TrainerFn.FITTING:
            optimizer = self._muzo_optimizer()
            optimizer.set_seed_state(self.broadcast(optimizer.get_seed_state(), src=0))
            if self.parallel == "queries":
                optimizer.set_query_shard(self.global_rank, self.world_size)
                optimizer.set_loss_reducer(self._sum_over_ranks)
            else:
                optimizer.set_loss_reducer(self._mean_over_ranks)

    def _mean_over_ranks(self, losses: Tensor) -> Tensor:
        # On the strategy's device: NCCL reduces only CUDA tensors.
        return self.reduce(losses.to(self.root_device), reduce_op="mean")

    def _sum_over_ranks(self, losses: Tensor) -> Tensor:
        # Entries of other ranks' queries are 0 here, so the sum is every query's losses, exactly.
        return self.reduce(losses.to(self.root_device), reduce_op="sum")

    @classmethod
    def register_strategies(cls, strategy_registry) -> None:
        """Register ``"muzo_ddp"``, its ``spawn`` / ``fork`` variants and ``"muzo_queries"`` in Lightning's registry.

        Args:
            strategy_registry: Lightning's ``StrategyRegistry``.
        """
        for name, (class_name, params, description) in STRATEGIES.items():
            if class_name == cls.__name__:
                strategy_registry.register(name, cls, description=description, override=True, **params)


MUZOStrategy.register_strategies(StrategyRegistry)
MUZODDPStrategy.register_strategies(StrategyRegistry)
