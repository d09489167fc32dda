"""MUZO-Adam: multi-query zeroth-order optimisation with Adam moments, at inference memory.

One step, with perturbation scale ``eps``, ``q`` queries and seeds ``s_1..s_q`` drawn from the
optimizer's own seed stream:

1. For each query ``j``: ``theta += eps z_j``, evaluate ``L+``; ``theta -= 2 eps z_j``, evaluate
   ``L-``; ``theta += eps z_j``. ``z_j`` is regenerated from ``(s_j, tensor index)`` one chunk of
   one tensor at a time, so it never exists in full. All evaluations run under ``torch.no_grad()``.
2. ``g_j = (L+ - L-) / (2 eps)`` (the central, antithetic difference) and
   ``grad_hat = (1/q) sum_j g_j z_j``, formed chunk by chunk: no full-size gradient buffer exists.
3. ``mode="adam"``: bias-corrected Adam on ``grad_hat`` with decoupled weight decay (AdamW);
   ``mode="sgd"``: ``theta -= lr (grad_hat + weight_decay theta)``, which for ``q = 1`` is MeZO-SGD.

Variance reduction: each query is a symmetric (antithetic) pair, which cancels the even-order
terms of the Taylor expansion, so ``g_j z_j`` is unbiased for the gradient up to ``O(eps^2)``; the
``q`` queries use independent directions, so averaging them divides the estimator's variance by
``q`` at the cost of ``2q`` forward passes. Rademacher directions (optional) have a smaller fourth
moment than Gaussians, hence a lower-variance estimate for the same ``q``, and are much cheaper to
draw on a CPU.

Distributed data parallel: give every rank the same seed stream and set a loss reducer
(:meth:`MUZOAdam.set_loss_reducer`) that averages the ``2q`` scalar losses over ranks; every rank
then applies the identical update and no gradient is ever communicated. Nothing here imports
Lightning; :mod:`lightning_agents.strategies.muzo` adapts it to the Trainer.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torch.optim import Optimizer

from lightning_agents.optim.directions import DIRECTIONS, direction_chunks
from lightning_agents.optim.moments import MOMENT_DTYPES, QUANT_BLOCKSIZE, MomentStore, check_int8_support

__all__ = ["MUZOAdam", "NonFiniteLossWarning"]

log = logging.getLogger(__name__)

_MODES = ("adam", "sgd")
_SEED_HIGH = 2**62


class NonFiniteLossWarning(RuntimeWarning):
    """A perturbed evaluation returned a non-finite loss; the step was skipped."""


class MUZOAdam(Optimizer):
    """Zeroth-order optimizer: ``step(closure)`` evaluates the loss ``2 q`` times, never backpropagates.

    Args:
        params: parameters (or parameter groups) to optimise; tensors with ``requires_grad=False``
            are left untouched (neither perturbed nor updated).
        lr: learning rate (per group).
        eps: perturbation scale of the finite differences (MeZO uses 1e-3).
        num_queries: ``q``, the number of independent directions averaged per step (``2q``
            closure evaluations).
        mode: ``"adam"`` (bias-corrected Adam on the estimate, decoupled weight decay) or ``"sgd"``
            (plain ZO-SGD; with ``num_queries=1`` and Gaussian directions this is MeZO-SGD).
        betas: Adam's moment decay rates (per group).
        adam_eps: Adam's denominator epsilon (per group); named so to keep ``eps`` for the
            perturbation scale.
        weight_decay: decoupled weight decay (per group): ``theta *= 1 - lr * weight_decay``.
        moment_dtype: storage of Adam's moments: ``"float32"``, ``"bfloat16"`` or ``"int8"``
            (bitsandbytes blockwise 8-bit; fails at construction where bitsandbytes cannot run).
            Moments are always computed in float32.
        direction: distribution of ``z``: ``"gaussian"`` (N(0, I), as in MeZO) or ``"rademacher"``
            (uniform +-1 entries; also unbiased, lower variance, ~7x cheaper to draw on a CPU).
        seed: seed of the optimizer's seed stream; ``None`` draws it from torch's global RNG, so
            ``seed_everything`` makes runs reproducible.
        chunk_size: elements of a tensor perturbed or updated at once (a multiple of 4096); bounds
            the transient memory to a few buffers of this size. ``z`` depends on it, so keep it
            fixed across a run and its resumptions.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-5,
        eps: float = 1e-3,
        num_queries: int = 4,
        mode: Literal["adam", "sgd"] = "adam",
        betas: tuple[float, float] = (0.9, 0.999),
        adam_eps: float = 1e-8,
        weight_decay: float = 0.0,
        moment_dtype: Literal["float32", "bfloat16", "int8"] = "float32",
        direction: Literal["gaussian", "rademacher"] = "gaussian",
        seed: int | None = None,
        chunk_size: int = 1 << 20,
    ) -> None:
        if not isinstance(num_queries, int) or isinstance(num_queries, bool) or num_queries < 1:
            raise ValueError(f"MUZOAdam: num_queries must be an integer >= 1, got {num_queries!r}")
        if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
            raise ValueError(f"MUZOAdam: the perturbation scale eps must be a finite number > 0, got {eps!r}")
        if not lr >= 0:
            raise ValueError(f"MUZOAdam: lr must be >= 0, got {lr!r}")
        if mode not in _MODES:
            raise ValueError(f"MUZOAdam: mode must be one of {_MODES}, got {mode!r}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"MUZOAdam: betas must lie in [0, 1), got {betas!r}")
        if not adam_eps > 0:
            raise ValueError(f"MUZOAdam: adam_eps must be > 0, got {adam_eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"MUZOAdam: weight_decay must be >= 0, got {weight_decay!r}")
        if moment_dtype not in MOMENT_DTYPES:
            raise ValueError(f"MUZOAdam: moment_dtype must be one of {MOMENT_DTYPES}, got {moment_dtype!r}")
        if direction not in DIRECTIONS:
            raise ValueError(f"MUZOAdam: direction must be one of {DIRECTIONS}, got {direction!r}")
        if not (isinstance(chunk_size, int) and chunk_size > 0 and chunk_size % QUANT_BLOCKSIZE == 0):
            raise ValueError(f"MUZOAdam: chunk_size must be a positive multiple of {QUANT_BLOCKSIZE}, got {chunk_size!r}")

        defaults = dict(lr=lr, betas=tuple(betas), adam_eps=adam_eps, weight_decay=weight_decay)
        try:
            super().__init__(params, defaults)
        except ValueError as exc:
            if "empty parameter list" in str(exc):
                raise ValueError("MUZOAdam: got no parameters to optimise (an empty parameter list)") from exc
            raise
        trainable = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if not trainable:
            raise ValueError(
                "MUZOAdam: the model has no trainable parameters (every tensor has requires_grad=False); "
                "unfreeze the parameters to fine-tune or pass only those"
            )
        if mode == "adam" and moment_dtype == "int8":
            for device in {p.device for p in trainable}:
                check_int8_support(device)

        self.eps = float(eps)
        self.num_queries = num_queries
        self.mode = mode
        self.moment_dtype = moment_dtype
        self.direction = direction
        self.chunk_size = chunk_size
        self.seed = int(torch.randint(0, _SEED_HIGH, (1,)).item()) if seed is None else int(seed)
        self._seed_stream = torch.Generator()
        self._seed_stream.manual_seed(self.seed)
        self._moments = (MomentStore(moment_dtype, signed=True), MomentStore(moment_dtype, signed=False))
        self._loss_reducer: Callable[[torch.Tensor], torch.Tensor] | None = None
        # Counters live outside `param_groups` so a group override cannot desynchronise them.
        self.num_updates = 0
        self.num_skipped = 0
        self.last_losses: torch.Tensor | None = None
        self.last_projected_grads: torch.Tensor | None = None
        self.last_seeds: list[int] = []

    # ------------------------------------------------------------------ public helpers
    @property
    def evaluations_per_step(self) -> int:
        """Closure evaluations one ``step`` makes (``2 q``)."""
        return 2 * self.num_queries

    def set_loss_reducer(self, reducer: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """Install the cross-process reduction of the ``2q`` losses (e.g. an all-reduce mean).

        Args:
            reducer: maps the float64 tensor of local losses ``[L+_1, L-_1, ..., L+_q, L-_q]`` to the
                global ones; ``None`` for single-process training.
        """
        self._loss_reducer = reducer

    def get_seed_state(self) -> torch.Tensor:
        """State of the seed stream (a ByteTensor), e.g. to broadcast it to other ranks."""
        return self._seed_stream.get_state()

    def set_seed_state(self, state: torch.Tensor) -> None:
        """Restore the seed stream from :meth:`get_seed_state`.

        Args:
            state: the ByteTensor from ``get_seed_state``.
        """
        self._seed_stream.set_state(state.cpu())

    def moment_nbytes(self) -> int:
        """Bytes held by Adam's moments over all parameters (0 before the first step and in sgd mode)."""
        return sum(
            store.nbytes(self.state[p], name)
            for p in self._trainable()
            for store, name in zip(self._moments, ("exp_avg", "exp_avg_sq"))
        )

    # ------------------------------------------------------------------ the step
    def _trainable(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def _indexed(self) -> list[tuple[dict, int, torch.Tensor]]:
        # A tensor's index is its position in the optimizer's parameter order, frozen ones included,
        # so freezing a tensor later does not change the directions of the others.
        out, index = [], 0
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    out.append((group, index, p))
                index += 1
        return out

    def _perturb(self, seed: int, scale: float) -> None:
        for _, index, p in self._indexed():
            flat = p.data.view(-1)
            for start, end, z in direction_chunks(p.numel(), seed, index, p.device, self.chunk_size, self.direction):
                # add_ computes in float32 (z's dtype) and rounds once into the parameter's dtype.
                flat[start:end].add_(z, alpha=scale)

    def _next_seeds(self) -> list[int]:
        return torch.randint(0, _SEED_HIGH, (self.num_queries,), generator=self._seed_stream).tolist()

    @staticmethod
    def _as_loss(value: Any) -> torch.Tensor:
        if value is None:
            raise RuntimeError(
                "MUZOAdam: the closure returned None; it must return the loss (training_step must return a loss)"
            )
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise RuntimeError(f"MUZOAdam: the closure must return a scalar loss, got shape {tuple(value.shape)}")
            return value.detach().reshape(())
        return torch.tensor(float(value))

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> torch.Tensor:  # type: ignore[override]
        """Estimate the gradient from ``2q`` evaluations of ``closure`` and update the parameters.

        Args:
            closure: re-evaluates the model on the current batch and returns the scalar loss. It is
                called under ``torch.no_grad()`` with the parameters perturbed in place.

        Returns:
            The mean of the ``2q`` (reduced) losses, an ``O(eps^2)`` estimate of the loss at the
            unperturbed parameters; non-finite when the step was skipped.
        """
        if closure is None:
            raise RuntimeError("MUZOAdam.step needs a closure that returns the loss: it evaluates the model 2q times")
        for p in self._trainable():
            if not p.is_contiguous():
                raise RuntimeError("MUZOAdam perturbs parameters through flat views; got a non-contiguous parameter")
        seeds = self._next_seeds()
        self.last_seeds = seeds
        losses: list[torch.Tensor] = []
        offset = 0.0  # the current perturbation is offset * z_seed; undone if the closure raises
        try:
            for j, seed in enumerate(seeds):
                self._perturb(seed, self.eps)
                offset = self.eps
                losses.append(self._as_loss(closure()))
                self._perturb(seed, -2.0 * self.eps)
                offset = -self.eps
                losses.append(self._as_loss(closure()))
                if j < len(seeds) - 1:
                    self._perturb(seed, self.eps)
                    offset = 0.0
                # The last query's restore is fused into the update pass, which regenerates z_q anyway.
            local = torch.stack([loss.to(device=losses[0].device, dtype=torch.float64) for loss in losses])
            reduced = self._loss_reducer(local.clone()) if self._loss_reducer is not None else local
        except BaseException:
            # A failing closure or collective must not leave the weights perturbed.
            if offset:
                self._perturb(seed, -offset)
            raise
        self.last_losses = reduced.detach().cpu()
        if not bool(torch.isfinite(reduced).all()):
            # Every rank sees the same reduced losses, so every rank skips together.
            self._perturb(seeds[-1], self.eps)
            self.num_skipped += 1
            self.last_projected_grads = None
            message = (
                f"MUZOAdam: non-finite loss in a perturbed evaluation (losses {self.last_losses.tolist()}); "
                "parameters restored, update skipped"
            )
            log.warning(message)
            warnings.warn(message, NonFiniteLossWarning, stacklevel=2)
            return reduced.mean()
        pairs = self.last_losses.view(-1, 2)
        projected = (pairs[:, 0] - pairs[:, 1]) / (2.0 * self.eps)
        self.last_projected_grads = projected
        self._update(seeds, (projected / self.num_queries).tolist())
        return reduced.mean()

    def _update(self, seeds: list[int], weights: list[float]) -> None:
        self.num_updates += 1
        t = self.num_updates
        last = len(seeds) - 1
        for group, index, p in self._indexed():
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            state = self.state[p]
            if self.mode == "adam":
                for store, name in zip(self._moments, ("exp_avg", "exp_avg_sq")):
                    store.init(state, name, p.numel(), p.device)
            flat = p.data.view(-1)
            work_dtype = torch.float64 if p.dtype == torch.float64 else torch.float32
            streams = [
                direction_chunks(p.numel(), seed, index, p.device, self.chunk_size, self.direction) for seed in seeds
            ]
            for chunks in zip(*streams):
                start, end = chunks[0][0], chunks[0][1]
                target = flat[start:end]
                grad = torch.zeros(end - start, dtype=work_dtype, device=p.device)
                for j, (_, _, z) in enumerate(chunks):
                    grad.add_(z, alpha=weights[j])
                    if j == last:
                        target.add_(z, alpha=self.eps)
                # Half-precision weights are updated in float32 and rounded once; float32/float64 in place.
                theta = target if target.dtype in (torch.float32, torch.float64) else target.float()
                if wd:
                    theta.mul_(1.0 - lr * wd)
                if self.mode == "sgd":
                    theta.add_(grad, alpha=-lr)
                else:
                    m = self._moments[0].read(state, "exp_avg", start, end)
                    v = self._moments[1].read(state, "exp_avg_sq", start, end)
                    m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                    self._moments[0].write(state, "exp_avg", start, end, m)
                    self._moments[1].write(state, "exp_avg_sq", start, end, v)
                    bias1 = 1.0 - beta1**t
                    bias2 = 1.0 - beta2**t
                    denom = v.div(bias2).sqrt_().add_(group["adam_eps"])
                    theta.addcdiv_(m, denom, value=-lr / bias1)
                if theta is not target:
                    target.copy_(theta)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """The torch optimizer state (moments per parameter, groups) plus the seed stream and counters."""
        out = super().state_dict()
        out["muzo"] = {
            "seed": self.seed,
            "seed_stream": self._seed_stream.get_state(),
            "num_updates": self.num_updates,
            "num_skipped": self.num_skipped,
            "num_queries": self.num_queries,
            "mode": self.mode,
            "moment_dtype": self.moment_dtype,
            "direction": self.direction,
            "chunk_size": self.chunk_size,
        }
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore moments, groups, seed stream and counters from :meth:`state_dict`.

        Args:
            state_dict: a dict returned by ``state_dict()`` of a ``MUZOAdam`` over the same parameters.
        """
        state_dict = dict(state_dict)
        muzo = state_dict.pop("muzo", None)
        if muzo is None:
            raise ValueError("MUZOAdam.load_state_dict: this is not a MUZOAdam state dict (no 'muzo' entry)")
        for key in ("direction", "chunk_size", "moment_dtype"):
            if muzo[key] != getattr(self, key):
                raise ValueError(
                    f"MUZOAdam.load_state_dict: checkpoint has {key}={muzo[key]!r} but this optimizer has "
                    f"{getattr(self, key)!r}; resuming would change the directions or the moment format"
                )
        saved_state = state_dict.get("state", {})
        # torch's loader casts every state tensor to the parameter's dtype, which would turn uint8 or
        # bfloat16 moments into float32; load the groups through it and the moments ourselves.
        super().load_state_dict({**state_dict, "state": {}})
        params = [p for group in self.param_groups for p in group["params"]]
        for key, value in saved_state.items():
            param = params[int(key)]
            self.state[param] = {
                name: tensor.to(param.device).clone() if isinstance(tensor, torch.Tensor) else tensor
                for name, tensor in value.items()
            }
        self.seed = int(muzo["seed"])
        self._seed_stream.set_state(muzo["seed_stream"].cpu())
        self.num_updates = int(muzo["num_updates"])
        self.num_skipped = int(muzo["num_skipped"])
