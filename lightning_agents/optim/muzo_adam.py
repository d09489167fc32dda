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
   Like MeZO, biases and normalisation weights (tensors with fewer than 2 dimensions) are not decayed.

Precision. Perturbing a 16-bit weight in place rounds it three times per query, and the roundings
do not cancel: the weights random-walk even at ``lr = 0``, and an update smaller than half a
bfloat16 ulp (0.2% of the weight) is rounded away. So trainable float16/bfloat16 tensors get a
float32 master copy (``master_weights=True``): every perturbation is written as
``round16(master + offset * z)`` and the restore as ``round16(master)``, which is exact, and the
update accumulates in the master. The cheaper alternative with the same effect is float32 weights
with a 16-bit forward (Lightning's ``bf16-mixed`` / ``16-mixed``), which needs no copy. The loss
itself must be float32: a 16-bit loss rounds ``L+`` and ``L-`` before their difference, which then
often comes out exactly 0 (:class:`LowPrecisionLossWarning`, issued once); a step where no
perturbation changed the loss at all issues :class:`FlatLossWarning` once.

Variance reduction: each query is a symmetric (antithetic) pair, which cancels the even-order
terms of the Taylor expansion, so ``g_j z_j`` is unbiased for the gradient up to ``O(eps^2)``; the
``q`` queries use independent directions, so averaging them divides the estimator's variance by
``q`` at the cost of ``2q`` forward passes. Rademacher directions (optional) have a smaller fourth
moment than Gaussians, hence a lower-variance estimate for the same ``q``, and are much cheaper to
draw on a CPU.

Several processes: data parallel (every rank the same seeds, its own data; a loss reducer averages
the ``2q`` losses over ranks, see :meth:`MUZOAdam.set_loss_reducer`) or query parallel (every rank
the same batch and evaluates its share of the ``q`` queries; :meth:`MUZOAdam.set_query_shard`).
Either way every rank applies the identical update and no gradient is ever communicated. Nothing
here imports Lightning; :mod:`lightning_agents.strategies.muzo` adapts it to the Trainer.
"""

from __future__ import annotations

import logging
import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import torch
from torch.optim import Optimizer

from lightning_agents.errors import LightningAgentsError
from lightning_agents.optim.directions import DIRECTIONS, DirectionStream, mix_seed
from lightning_agents.optim.moments import MOMENT_DTYPES, QUANT_BLOCKSIZE, MomentStore, check_int8_support

__all__ = [
    "FlatLossWarning",
    "LowPrecisionLossWarning",
    "MUZOAdam",
    "MUZOConfigError",
    "NonFiniteLossWarning",
    "default_chunk_size",
    "default_update_path",
]

log = logging.getLogger(__name__)

_MODES = ("adam", "sgd")
_UPDATE_PATHS = ("auto", "chunked", "fused")
_DECAY_EXEMPT = ("biases_and_norms", "none")
_SEED_HIGH = 2**62
_HALF = (torch.float16, torch.bfloat16)
# Significant bits of a 16-bit loss (mantissa + implicit bit), for the warning's arithmetic.
_SIGNIFICANT_BITS = {torch.float16: 11, torch.bfloat16: 8}
# Salt of the stochastic-rounding generator, so its stream is not the direction stream of the same seed.
_ROUNDING_SALT = 0x5EED_B16


class MUZOConfigError(LightningAgentsError, ValueError):
    """A MUZOAdam setting that cannot work (bad value, or a precision that cannot learn)."""


class NonFiniteLossWarning(RuntimeWarning):
    """A perturbed evaluation returned a non-finite loss; the step was skipped."""


class LowPrecisionLossWarning(RuntimeWarning):
    """The closure returned a float16/bfloat16 loss, whose rounding swamps ``L+ - L-``."""


class FlatLossWarning(RuntimeWarning):
    """No perturbation of a step changed the loss: the estimate was exactly 0."""


def default_chunk_size(device: torch.device | str) -> int:
    """Elements perturbed or updated at once on ``device``.

    On a CPU a chunk's working set (direction, gradient, moments: about six float32 buffers) should
    stay in the L2 cache: at 2^16 the update overhead measured 10.9% of the forward time against
    15.1% at 2^20 (issue 18). On an accelerator every chunk costs a dozen kernel launches, so chunks are large
    (2^24: about 500 chunks per query for an 8B model instead of 8000 at 2^20).

    Args:
        device: the parameters' device.
    """
    return 1 << 16 if torch.device(device).type == "cpu" else 1 << 24


def default_update_path(device: torch.device | str) -> str:
    """``"chunked"`` on a CPU, ``"fused"`` on an accelerator (what ``update_path="auto"`` picks).

    On a CPU, a Python loop over cache-sized chunks is cheap next to the arithmetic and keeps the
    working set in L2. On an accelerator each chunk costs about a dozen kernel launches per pass, so
    the fused path works on whole tensors: its launches per step grow with the number of tensors,
    not with the number of chunks.

    Args:
        device: the parameters' device.
    """
    return "chunked" if torch.device(device).type == "cpu" else "fused"


class MUZOAdam(Optimizer):
    """Zeroth-order optimizer: ``step(closure)`` evaluates the loss ``2 q`` times, never backpropagates.

    Args:
        params: parameters (or parameter groups) to optimise; tensors with ``requires_grad=False``
            are left untouched (neither perturbed nor updated), so adapters (LoRA) train alone when
            the base weights are frozen.
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
        weight_decay_exempt: which tensors are not decayed (per group): ``"biases_and_norms"``
            (MeZO's rule: biases and LayerNorm/RMSNorm weights, recognised as tensors with fewer
            than 2 dimensions) or ``"none"`` (every tensor decays).
        moment_dtype: storage of Adam's moments: ``"float32"``, ``"bfloat16"`` (stochastic
            rounding) or ``"int8"`` (bitsandbytes' 8-bit optimizer layout: 256-entry blocks,
            tensors under 4096 entries in float32; fails at construction where bitsandbytes cannot
            run). Moments are always computed in float32.
        direction: distribution of ``z``: ``"gaussian"`` (N(0, I), as in MeZO) or ``"rademacher"``
            (uniform +-1 entries; also unbiased, lower variance, ~7x cheaper to draw on a CPU).
        master_weights: keep a float32 master copy of every trainable float16/bfloat16 tensor
            (4 bytes per such parameter) so perturbations and small updates are not rounded away.
            ``False`` refuses 16-bit trainable tensors: perturbing them in place makes the weights
            random-walk (train float32 weights with ``precision: bf16-mixed`` instead).
        seed: seed of the optimizer's seed stream; ``None`` draws it from torch's global RNG, so
            ``seed_everything`` makes runs reproducible.
        chunk_size: elements of a tensor perturbed or updated at once (a multiple of 256); bounds
            the transient memory to a few buffers of this size. ``None``: 2^16 on a CPU (cache
            sized), 2^24 on an accelerator (few kernel launches). ``z`` depends on it, so it is
            saved in the checkpoint and a resumed run keeps it.
        update_path: how perturbations and updates walk a tensor: ``"chunked"`` (a Python loop over
            ``chunk_size`` pieces, transient memory a few chunks), ``"fused"`` (whole-tensor operations,
            one random draw per tensor and direction, so kernel launches per step grow with the
            number of tensors instead of chunks; transient memory a few buffers of the largest
            trainable tensor) or ``"auto"`` (chunked on a CPU, fused on an accelerator). On a CPU
            both draw the same directions (torch's CPU generators continue a stream identically in
            pieces), so the updates agree; on CUDA a whole-tensor draw is a different stream from
            chunked draws, so the path is saved in the checkpoint and a resumed run keeps it.
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
        weight_decay_exempt: Literal["biases_and_norms", "none"] = "biases_and_norms",
        moment_dtype: Literal["float32", "bfloat16", "int8"] = "float32",
        direction: Literal["gaussian", "rademacher"] = "gaussian",
        master_weights: bool = True,
        seed: int | None = None,
        chunk_size: int | None = None,
        update_path: Literal["auto", "chunked", "fused"] = "auto",
    ) -> None:
        def bad(message: str) -> MUZOConfigError:
            return MUZOConfigError(f"MUZOAdam: {message}")

        if not isinstance(num_queries, int) or isinstance(num_queries, bool) or num_queries < 1:
            raise bad(f"num_queries must be an integer >= 1, got {num_queries!r}")
        if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
            raise bad(f"the perturbation scale eps must be a finite number > 0, got {eps!r}")
        if not lr >= 0:
            raise bad(f"lr must be >= 0, got {lr!r}")
        if mode not in _MODES:
            raise bad(f"mode must be one of {_MODES}, got {mode!r}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise bad(f"betas must lie in [0, 1), got {betas!r}")
        if not adam_eps > 0:
            raise bad(f"adam_eps must be > 0, got {adam_eps!r}")
        if not weight_decay >= 0:
            raise bad(f"weight_decay must be >= 0, got {weight_decay!r}")
        if weight_decay_exempt not in _DECAY_EXEMPT:
            raise bad(f"weight_decay_exempt must be one of {_DECAY_EXEMPT}, got {weight_decay_exempt!r}")
        if moment_dtype not in MOMENT_DTYPES:
            raise bad(f"moment_dtype must be one of {MOMENT_DTYPES}, got {moment_dtype!r}")
        if direction not in DIRECTIONS:
            raise bad(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if chunk_size is not None and not (
            isinstance(chunk_size, int) and chunk_size > 0 and chunk_size % QUANT_BLOCKSIZE == 0
        ):
            raise bad(f"chunk_size must be a positive multiple of {QUANT_BLOCKSIZE} (or null), got {chunk_size!r}")
        if update_path not in _UPDATE_PATHS:
            raise bad(f"update_path must be one of {_UPDATE_PATHS}, got {update_path!r}")

        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            adam_eps=adam_eps,
            weight_decay=weight_decay,
            weight_decay_exempt=weight_decay_exempt,
        )
        try:
            super().__init__(params, defaults)
        except ValueError as exc:
            if "empty parameter list" in str(exc):
                raise bad("got no parameters to optimise (an empty parameter list)") from exc
            raise
        trainable = self._trainable()
        if not trainable:
            raise bad(
                "the model has no trainable parameters (every tensor has requires_grad=False); "
                "unfreeze the parameters to fine-tune or pass only those"
            )
        self.master_weights = bool(master_weights)
        self._check_dtypes(trainable)
        self._check_contiguous()
        self._check_distinct()
        if mode == "adam" and moment_dtype == "int8":
            for device in {p.device for p in trainable}:
                check_int8_support(device)

        self.eps = float(eps)
        self.num_queries = num_queries
        self.mode = mode
        self.moment_dtype = moment_dtype
        self.direction = direction
        self._chunk_size_explicit = chunk_size is not None
        self.chunk_size = chunk_size if chunk_size is not None else default_chunk_size(trainable[0].device)
        self._update_path_explicit = update_path != "auto"
        self.update_path = update_path if update_path != "auto" else default_update_path(trainable[0].device)
        self.seed = int(torch.randint(0, _SEED_HIGH, (1,)).item()) if seed is None else int(seed)
        self._seed_stream = torch.Generator()
        self._seed_stream.manual_seed(self.seed)
        self._moments = (MomentStore(moment_dtype, signed=True), MomentStore(moment_dtype, signed=False))
        self._loss_reducer: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._shard = (0, 1)
        # Chunk-sized work buffers, reused across chunks and steps (see _buffer).
        self._buffers: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}
        # Counters live outside `param_groups` so a group override cannot desynchronise them.
        self.num_updates = 0
        self.num_skipped = 0
        self.last_losses: torch.Tensor | None = None
        self.last_projected_grads: torch.Tensor | None = None
        self.last_seeds: list[int] = []
        self._closure_checked = False
        # Each of these warnings is issued once per optimizer: the cause does not change between steps.
        self._warned: set[type[Warning]] = set()

    # ------------------------------------------------------------------ public helpers
    @property
    def evaluations_per_step(self) -> int:
        """Closure evaluations one ``step`` makes in this process (``2 q``, or this rank's share of them)."""
        return 2 * len(self._local_queries())

    def set_loss_reducer(self, reducer: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """Install the cross-process reduction of the ``2q`` losses.

        Args:
            reducer: maps the float64 tensor of local losses ``[L+_1, L-_1, ..., L+_q, L-_q]`` to the
                global ones (an all-reduce mean for data parallelism, an all-reduce sum for query
                parallelism, where the entries of other ranks' queries are 0 locally); ``None`` for
                single-process training.
        """
        self._loss_reducer = reducer

    def set_query_shard(self, rank: int, world_size: int) -> None:
        """Evaluate only queries ``rank, rank + world_size, ...`` here (query parallelism).

        Every rank must see the same batch and seed stream; the reducer set by
        :meth:`set_loss_reducer` must then *sum* the loss vectors, in which this rank fills only its
        own queries' entries. The update still uses all ``q`` queries.

        Args:
            rank: this process's rank.
            world_size: number of processes sharing the queries.
        """
        if not (isinstance(world_size, int) and world_size >= 1 and 0 <= rank < world_size):
            raise MUZOConfigError(f"MUZOAdam.set_query_shard: need 0 <= rank < world_size, got {rank}, {world_size}")
        if self.num_queries < world_size:
            # A rank without a query would never evaluate the loss: Lightning's closure check
            # fails there, and the other ranks die waiting for it in the reduction.
            raise MUZOConfigError(
                f"query parallelism needs num_queries >= the number of processes: num_queries={self.num_queries} "
                f"across {world_size} processes leaves {world_size - self.num_queries} without a direction; raise "
                "num_queries or use parallel='data'"
            )
        self._shard = (int(rank), int(world_size))

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

    def master_nbytes(self) -> int:
        """Bytes held by float32 master copies of 16-bit trainable tensors (0 before the first step)."""
        return sum(self.state[p]["master"].numel() * 4 for p in self._trainable() if "master" in self.state[p])

    # ------------------------------------------------------------------ the step
    def _trainable(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def _check_dtypes(self, trainable: list[torch.Tensor]) -> None:
        for p in trainable:
            if not p.is_floating_point():
                raise MUZOConfigError(f"MUZOAdam: trainable parameters must be floating point, got {p.dtype}")
            if p.dtype in _HALF and not self.master_weights:
                raise MUZOConfigError(
                    f"MUZOAdam: a trainable {p.dtype} parameter with master_weights=False. Perturbing 16-bit "
                    "weights in place rounds them three times per query and the roundings do not cancel, so "
                    "the weights random-walk even at lr 0 (embedded student, bf16, q 4, 300 steps: held-out "
                    "loss 0.093 -> 0.132), and updates below half an ulp vanish. Use precision 'bf16-mixed' "
                    "(float32 weights, bf16 forward) or master_weights=True."
                )

    def _check_contiguous(self) -> None:
        for group_index, group in enumerate(self.param_groups):
            for position, p in enumerate(group["params"]):
                if p.requires_grad and not p.is_contiguous():
                    raise MUZOConfigError(
                        f"MUZOAdam perturbs parameters through flat views; parameter {position} of group "
                        f"{group_index} (shape {tuple(p.shape)}, stride {p.stride()}) is not contiguous (a transposed "
                        "or sliced tensor wrapped as a Parameter?). Make it contiguous first: "
                        "`module.weight = nn.Parameter(module.weight.detach().contiguous())`"
                    )

    def _check_distinct(self) -> None:
        """Refuse trainable tensors that share memory (one tensor listed twice, or two views of one storage).

        Each listed tensor gets its own direction, moments and update, so a tensor listed twice (a tied
        weight reached through both modules that hold it) would be perturbed by ``eps (z_a + z_b)``
        instead of ``eps z`` and updated twice per step from one shared moment state. torch only warns
        about duplicates in a group.
        """
        spans = []
        for group_index, group in enumerate(self.param_groups):
            for position, p in enumerate(group["params"]):
                if p.requires_grad and p.numel() and p.device.type != "meta":
                    start = p.untyped_storage().data_ptr() + p.storage_offset() * p.element_size()
                    spans.append((str(p.device), start, start + p.numel() * p.element_size(), group_index, position, p))
        spans.sort(key=lambda span: span[:2])
        for before, after in zip(spans, spans[1:]):
            if before[0] == after[0] and after[1] < before[2]:
                same = before[5] is after[5]
                raise MUZOConfigError(
                    f"MUZOAdam: parameter {before[4]} of group {before[3]} and parameter {after[4]} of group "
                    f"{after[3]} (shape {tuple(after[5].shape)}) "
                    + ("are the same tensor" if same else "share memory")
                    + ": it would be perturbed and updated once per listing, with different directions. Tied "
                    "weights (e.g. lm_head and embed_tokens of SmolLM2 or Llama) are one tensor: pass "
                    "`model.parameters()` or `named_parameters()`, which list each tensor once, instead of "
                    "concatenating the parameters of the modules that share it"
                )

    def _warn_once(self, category: type[Warning], message: str) -> None:
        if category in self._warned:
            return
        self._warned.add(category)
        log.warning(message)
        warnings.warn(message, category, stacklevel=3)

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

    def _span(self, p: torch.Tensor) -> int:
        """Elements of ``p`` handled per pass of the loops: one chunk, or the whole tensor when fused."""
        return max(p.numel(), 1) if self.update_path == "fused" else self.chunk_size

    def _buffer(self, role: str, device: torch.device, dtype: torch.dtype, size: int) -> torch.Tensor:
        key = (role, device, dtype)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < size:
            # Chunked: one chunk. Fused: grows to the largest trainable tensor on the first step.
            buffer = torch.empty(size, dtype=dtype, device=device)
            self._buffers[key] = buffer
        return buffer

    def _master(self, p: torch.Tensor) -> torch.Tensor | None:
        if p.dtype not in _HALF:
            return None
        if not self.master_weights:
            self._check_dtypes([p])
        state = self.state[p]
        if "master" not in state:
            state["master"] = p.detach().reshape(-1).float().clone()
        return state["master"]

    def reload_masters(self) -> int:
        """Set every float32 master copy to its 16-bit weight as it is now; returns how many.

        Call it after loading weights into the model between steps: :meth:`step` adopts only the
        entries whose 16-bit value changed, so an entry the load put back to a value it already
        held keeps its master's offset below 16-bit precision (after ``load_state_dict(start)``, 871
        of 4,680 masters still differed from ``start``, by up to 3.6e-4).
        """
        count = 0
        for p, master in self._existing_masters():
            master.copy_(p.data.reshape(-1).float())
            count += 1
        return count

    def _existing_masters(self):
        """``(parameter, master)`` for every 16-bit trainable tensor whose master exists already."""
        for _, _, p in self._indexed():
            master = self.state[p].get("master") if p.dtype in _HALF else None
            if master is not None:
                yield p, master

    def _sync_masters(self) -> None:
        """Adopt 16-bit weights written from outside since the last step into their float32 masters.

        Perturbations restore from the master, so without this a weight changed between steps
        (``model.load_state_dict``, a callback projecting or clamping weights) would be silently
        replaced by the stale master at the next step. Entries still equal to their rounded master
        keep the master's extra precision.
        """
        for p, master in self._existing_masters():
            flat = p.data.view(-1)
            span = self._span(p)
            for start in range(0, p.numel(), span):
                end = min(start + span, p.numel())
                weights, kept = flat[start:end], master[start:end]
                changed = weights != kept.to(p.dtype)
                if bool(changed.any()):
                    kept[changed] = weights[changed].float()

    def _move(self, seed: int, old: float, new: float) -> None:
        """Move the trainable weights from ``theta + old z_seed`` to ``theta + new z_seed``."""
        for _, index, p in self._indexed():
            flat = p.data.view(-1)
            master = self._master(p)
            if master is not None and new == 0.0:
                flat.copy_(master)  # exact restore: no direction needed
                continue
            stream = DirectionStream(seed, index, p.device, self.direction)
            span = self._span(p)
            zbuf = self._buffer("z", p.device, torch.float32, span)
            for start in range(0, p.numel(), span):
                end = min(start + span, p.numel())
                z = stream.next(end - start, zbuf)
                if master is not None:
                    # One rounding from the master: perturbations never accumulate in 16 bits.
                    flat[start:end].copy_(z.mul_(new).add_(master[start:end]))
                else:
                    # add_ computes in float32 (or float64) and rounds once into the parameter's dtype.
                    flat[start:end].add_(z, alpha=new - old)
        # An autocast region open around step() keeps its 16-bit copies of the weights until it
        # exits: without this, every evaluation after the first used the unperturbed copies.
        torch.clear_autocast_cache()

    def _next_seeds(self) -> list[int]:
        return torch.randint(0, _SEED_HIGH, (self.num_queries,), generator=self._seed_stream).tolist()

    def _local_queries(self) -> list[int]:
        rank, world = self._shard
        return list(range(rank, self.num_queries, world))

    def _as_loss(self, value: Any) -> torch.Tensor:
        if value is None:
            raise RuntimeError(
                "MUZOAdam: the closure returned None; it must return the loss (training_step must return a loss)"
            )
        if isinstance(value, Mapping) and "loss" in value:
            # A transformers ModelOutput, or a dict as Lightning's training_step may return.
            return self._as_loss(value["loss"])
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise RuntimeError(f"MUZOAdam: the closure must return a scalar loss, got shape {tuple(value.shape)}")
            if value.is_complex():
                raise RuntimeError(f"MUZOAdam: the closure must return a real loss, got a {value.dtype} tensor")
            if value.dtype in _HALF:
                self._warn_low_precision(value.dtype)
            return value.detach().reshape(()).to(torch.float64)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return torch.tensor(float(value), dtype=torch.float64)
        if getattr(value, "size", None) == 1 and hasattr(value, "item"):
            # a one-element numpy array (`loss.numpy()`), which trained before the type check
            item = value.item()
            if isinstance(item, numbers.Real) and not isinstance(item, bool):
                return torch.tensor(float(item), dtype=torch.float64)
        raise RuntimeError(
            f"MUZOAdam: the closure returned a {type(value).__name__}; it must return the scalar loss (a tensor or "
            "a number, or a mapping with a 'loss' entry such as a transformers ModelOutput), e.g. "
            "`lambda: model(**batch).loss`"
        )

    def _warn_low_precision(self, dtype: torch.dtype) -> None:
        # Casting to float64 here is too late: L+ and L- were already rounded to 16 bits, and their
        # difference (about 2 eps |g.z|) is often below one rounding step of the loss.
        bits = _SIGNIFICANT_BITS[dtype]
        self._warn_once(
            LowPrecisionLossWarning,
            f"MUZOAdam: the closure returned a {dtype} loss. L+ and L- are rounded to {bits} significant bits "
            f"(steps of up to {2.0 ** (1 - bits):.1e} x the loss) before their difference, which at eps={self.eps:g} is "
            "often smaller, so many projected gradients come out exactly 0 and training stalls (docs/muzo.md, "
            "'Bad input'). Compute the loss "
            "in float32: cast the model's output first, e.g. `F.mse_loss(out.float(), y.float())` (transformers' "
            "causal-LM loss already does).",
        )

    def _warn_if_flat(self, projected: torch.Tensor, reduced: torch.Tensor) -> None:
        if bool(projected.any()):
            return
        self._warn_once(
            FlatLossWarning,
            f"MUZOAdam: the loss did not change under any of the {self.num_queries} perturbations of update "
            f"{self.num_updates + 1} (L+ == L- exactly for every query; mean loss {float(reduced.mean()):.6g}), so "
            "the gradient estimate is 0 and the update moves nothing but weight decay. Either the loss does not "
            "depend on the parameters MUZOAdam trains (check what configure_optimizers passes it and their "
            "requires_grad), or it is "
            f"rounded more coarsely than eps={self.eps:g} changes it (a 16-bit loss, or a piecewise-constant "
            "one such as an accuracy).",
        )

    def _checked(self, closure: Callable[[], Any]) -> Any:
        """``closure()``, refusing one that runs backward (Lightning's, without ``strategy: muzo``):
        the step would still be zeroth-order, but at backprop's memory and compute, 2q times."""
        self._closure_checked = True
        params = list(self._trainable())
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            loss = closure()
            if any(p.grad is not None for p in params):
                raise MUZOConfigError(
                    "MUZOAdam: its closure ran backward (gradients appeared), so each of its 2q "
                    "evaluations paid backprop's memory and compute; under Lightning set "
                    "`trainer.strategy: muzo` (MUZOStrategy), which evaluates the closure without backward"
                )
        finally:
            for p, g in zip(params, saved):
                p.grad = g
        return loss

    @torch.no_grad()
    def step(  # type: ignore[override]
        self, closure: Callable[[], Any] | None = None, before_update: Callable[[], None] | None = None
    ) -> torch.Tensor:
        """Estimate the gradient from ``2q`` evaluations of ``closure`` and update the parameters.

        Args:
            closure: re-evaluates the model on the current batch and returns the scalar loss. It is
                called under ``torch.no_grad()`` with the parameters perturbed in place.
            before_update: called once after the evaluations, with the parameters restored to their
                unperturbed values, before the update (e.g. Lightning's ``on_before_optimizer_step``).
                Restoring before it costs one extra direction pass, so pass it only when needed. Weights
                it writes are kept: the update starts from them (16-bit weights' masters adopt them).

        Returns:
            The mean of the ``2q`` (reduced) losses, an ``O(eps^2)`` estimate of the loss at the
            unperturbed parameters; non-finite when the step was skipped.
        """
        if closure is None:
            raise RuntimeError("MUZOAdam.step needs a closure that returns the loss: it evaluates the model 2q times")
        self._check_contiguous()
        self._check_distinct()
        self._sync_masters()
        seeds = self._next_seeds()
        self.last_seeds = seeds
        local = self._local_queries()
        losses = torch.zeros(2 * self.num_queries, dtype=torch.float64)
        offset, seed = 0.0, None  # the current perturbation is offset * z_seed; undone if anything raises
        pending: int | None = None  # query whose restore from -eps is still due
        try:
            for position, j in enumerate(local):
                seed = seeds[j]
                self._move(seed, 0.0, self.eps)
                offset = self.eps
                loss = closure() if self._closure_checked else self._checked(closure)
                losses[2 * j] = self._as_loss(loss).cpu()
                self._move(seed, self.eps, -self.eps)
                offset = -self.eps
                losses[2 * j + 1] = self._as_loss(closure()).cpu()
                if position < len(local) - 1 or before_update is not None:
                    self._move(seed, -self.eps, 0.0)
                    offset = 0.0
                else:
                    # The last restore is fused into the update pass, which regenerates z_j anyway.
                    pending = j
            reduced = self._loss_reducer(losses.clone()) if self._loss_reducer is not None else losses
            reduced = reduced.detach().to("cpu", torch.float64)
        except BaseException:
            # A failing closure or collective must not leave the weights perturbed.
            if offset:
                self._move(seed, offset, 0.0)
            raise
        self.last_losses = reduced
        if not bool(torch.isfinite(reduced).all()):
            # Every rank sees the same reduced losses, so every rank skips together.
            if pending is not None:
                self._move(seeds[pending], -self.eps, 0.0)
            self.num_skipped += 1
            self.last_projected_grads = None
            message = (
                f"MUZOAdam: non-finite loss in a perturbed evaluation (losses {reduced.tolist()}); "
                "parameters restored, update skipped"
            )
            log.warning(message)
            warnings.warn(message, NonFiniteLossWarning, stacklevel=2)
            return reduced.mean()
        if before_update is not None:
            before_update()
            # The hook sees the restored weights and may write them (a callback clamping or loading
            # weights); the update starts from the float32 masters, which would silently undo that.
            self._sync_masters()
        pairs = reduced.view(-1, 2)
        projected = (pairs[:, 0] - pairs[:, 1]) / (2.0 * self.eps)
        self.last_projected_grads = projected
        self._warn_if_flat(projected, reduced)
        self._update(seeds, (projected / self.num_queries).tolist(), pending)
        return reduced.mean()

    def _update(self, seeds: list[int], weights: list[float], pending: int | None) -> None:
        self.num_updates += 1
        t = self.num_updates
        adam = self.mode == "adam"
        for group, index, p in self._indexed():
            lr, wd = group["lr"], group["weight_decay"]
            if group.get("weight_decay_exempt", "biases_and_norms") == "biases_and_norms" and p.dim() < 2:
                wd = 0.0
            beta1, beta2 = group["betas"]
            state = self.state[p]
            master = self._master(p)
            if adam:
                for store, name in zip(self._moments, ("exp_avg", "exp_avg_sq")):
                    store.init(state, name, p.numel(), p.device)
                # Stochastic rounding of 16-bit moments draws from a stream fixed by this step's
                # seeds, so a resumed run rounds exactly as an uninterrupted one.
                rounding = None
                if self._moments[0].needs_random:
                    rounding = torch.Generator(device=p.device)
                    rounding.manual_seed(mix_seed(seeds[0] ^ _ROUNDING_SALT, index))
            flat = p.data.view(-1)
            work_dtype = torch.float64 if p.dtype == torch.float64 else torch.float32
            streams = [DirectionStream(seed, index, p.device, self.direction) for seed in seeds]
            span = self._span(p)
            zbuf = self._buffer("z", p.device, torch.float32, span)
            gbuf = self._buffer("grad", p.device, work_dtype, span)
            for start in range(0, p.numel(), span):
                end = min(start + span, p.numel())
                target = flat[start:end]
                grad = gbuf[: end - start].zero_()
                for j, stream in enumerate(streams):
                    z = stream.next(end - start, zbuf)
                    grad.add_(z, alpha=weights[j])
                    if j == pending and master is None:
                        target.add_(z, alpha=self.eps)
                # 16-bit weights are updated in their float32 master and rounded once; others in place.
                theta = master[start:end] if master is not None else target
                if wd:
                    theta.mul_(1.0 - lr * wd)
                if not adam:
                    theta.add_(grad, alpha=-lr)
                else:
                    m = self._moments[0].read(
                        state, "exp_avg", start, end, self._buffer("m", p.device, torch.float32, span)
                    )
                    v = self._moments[1].read(
                        state, "exp_avg_sq", start, end, self._buffer("v", p.device, torch.float32, span)
                    )
                    m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                    self._moments[0].write(state, "exp_avg", start, end, m, rounding)
                    self._moments[1].write(state, "exp_avg_sq", start, end, v, rounding)
                    bias1 = 1.0 - beta1**t
                    bias2 = 1.0 - beta2**t
                    # The denominator reuses the gradient buffer (float32 or float64), no allocation.
                    denom = torch.div(v, bias2, out=grad).sqrt_().add_(group["adam_eps"])
                    theta.addcdiv_(m, denom, value=-lr / bias1)
                if master is not None:
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
            "update_path": self.update_path,
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
            raise MUZOConfigError("MUZOAdam.load_state_dict: this is not a MUZOAdam state dict (no 'muzo' entry)")
        if not self._chunk_size_explicit:
            # The default depends on the device; a run resumed elsewhere keeps the checkpoint's
            # chunk size, since z depends on it.
            self.chunk_size = int(muzo["chunk_size"])
            self._buffers.clear()
        muzo = {"update_path": "chunked", **muzo}  # checkpoints from before the fused path were chunked
        if not self._update_path_explicit:
            self.update_path = muzo["update_path"]  # on CUDA z depends on it, as on the chunk size
        for key in ("direction", "chunk_size", "moment_dtype", "update_path"):
            if muzo[key] != getattr(self, key):
                raise MUZOConfigError(
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
