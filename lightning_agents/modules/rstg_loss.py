"""The RSTG objective as pure tensor functions (no Lightning): GRPO advantages and clipped surrogate,
zero-variance group detection, on-policy distillation advantages, soft-OR token selection, loss
aggregation, reference KL and the beta schedule.

Shapes: ``B = N * G`` rows (the G samples of a prompt are contiguous), ``T`` completion tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "AGGREGATIONS",
    "DIVERGENCE_FLOOR",
    "GroupStats",
    "aggregate",
    "beta_schedule",
    "clipped_surrogate",
    "group_advantages",
    "group_stats",
    "kl_to_reference",
    "minmax_normalize",
    "opd_advantages",
    "select_top_fraction",
    "soft_or_scores",
    "truncated_importance_weights",
]

AGGREGATIONS = ("sequence_mean", "token_mean", "constant")

# Smallest spread (nats) of |A_opd| within a group that the soft-OR stretches to the full [0, 1].
# Min-max normalisation alone is scale-free: a teacher equal to the student (same checkpoint, other
# batch layout) differs by ~1e-5 nats of float32 noise, and that noise was stretched to [0, 1] and
# picked a quarter of the distilled tokens as if they were the most divergent. 0.1 nats (a 10%
# probability ratio) is far above float32 noise and far below the several nats by which a
# different teacher model differs, whose selection is unchanged. A bfloat16 teacher pass of the
# student's own weights differs by up to ~0.5 nats (SmolLM2-135M), so a bf16 teacher that is close
# to the student needs a floor of ~0.5-1 to keep that noise from picking tokens.
DIVERGENCE_FLOOR = 0.1


def _groups(x: torch.Tensor, group_size: int) -> torch.Tensor:
    if group_size < 1 or x.shape[0] % group_size:
        raise ValueError(f"{x.shape[0]} rows do not split into groups of {group_size}")
    return x.view(-1, group_size, *x.shape[1:])


def _valid(g: torch.Tensor) -> torch.Tensor:
    # NaN is "could not verify": such samples carry no reward and take no part in group statistics.
    return ~torch.isnan(g)


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """GRPO advantages ``(r_i - mean_group(r)) / (std + eps)``.

    NaN rewards ("could not verify") are left out of the group mean and std and get advantage 0;
    a group with fewer than two verified samples gets advantage 0 throughout.

    Args:
        rewards: ``[B]`` rewards (NaN where the verifier could not decide).
        group_size: G, samples per prompt.
        scale: ``"group"`` (std within each group, GRPO), ``"batch"`` (std over the whole batch)
            or ``"none"`` (mean-centred only, as in Dr. GRPO).
        eps: added to the std so zero-variance groups give exactly zero advantage.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    g = _groups(rewards.float(), group_size)
    valid = _valid(g)
    n = valid.sum(dim=1, keepdim=True).float()
    filled = torch.where(valid, g, torch.zeros_like(g))
    mean = filled.sum(dim=1, keepdim=True) / n.clamp(min=1.0)
    centred = torch.where(valid, g - mean, torch.zeros_like(g))
    if scale == "group":
        std = ((centred**2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1.0)).sqrt()
        adv = centred / (std + eps)
    elif scale == "batch":
        flat = rewards.float()[_valid(rewards.float())]
        adv = centred / ((flat.std(unbiased=True) if flat.numel() > 1 else torch.tensor(0.0)) + eps)
    else:
        adv = centred
    adv = torch.where(n >= 2, adv, torch.zeros_like(adv))
    return adv.reshape(-1)


@dataclass
class GroupStats:
    """Per-group outcome classes (NaN rewards left out).

    Attributes:
        positive: ``[N]`` zero-variance groups where every verified sample succeeded.
        negative: ``[N]`` zero-variance groups where every verified sample failed (where guidance
            applies); a group needs at least two verified samples to be either.
        mean_reward: ``[N]`` mean verified reward per group (NaN when none was verified).
        unverified: ``[N]`` number of samples per group the verifier could not decide.
    """

    positive: torch.Tensor
    negative: torch.Tensor
    mean_reward: torch.Tensor
    unverified: torch.Tensor | None = None

    def rows(self, mask: torch.Tensor, group_size: int) -> torch.Tensor:
        """Expand a per-group mask to ``[N * G]`` rows."""
        return mask.repeat_interleave(group_size)


def group_stats(rewards: torch.Tensor, group_size: int, success_threshold: float = 1.0) -> GroupStats:
    """Classify groups: zero variance (all verified rewards equal) and all successes or all failures.

    Args:
        rewards: ``[B]`` rewards (NaN where the verifier could not decide).
        group_size: G.
        success_threshold: a reward at or above it is a success.
    """
    g = _groups(rewards.float(), group_size)
    valid = _valid(g)
    n = valid.sum(dim=1)
    enough = n >= 2
    success = (g >= success_threshold) & valid
    failure = (g < success_threshold) & valid
    first = torch.where(valid, g, torch.full_like(g, math.inf)).min(dim=1, keepdim=True).values
    zero_var = enough & ((g == first) | ~valid).all(dim=1)
    mean = torch.where(valid, g, torch.zeros_like(g)).sum(dim=1) / n.clamp(min=1)
    mean = torch.where(n > 0, mean, torch.full_like(mean, math.nan))
    return GroupStats(zero_var & (success.sum(1) == n), zero_var & (failure.sum(1) == n), mean, (~valid).sum(dim=1))


def opd_advantages(teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token on-policy distillation advantage ``stopgrad(log pi_T(y_t) - log pi_S(y_t))`` (0 where masked)."""
    return ((teacher_logprobs - student_logprobs) * mask).detach()


def minmax_normalize(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, floor: float = 0.0) -> torch.Tensor:
    """Min-max normalise ``x`` to [0, 1] over the masked entries (0 outside; 0 when all equal).

    Args:
        x: values to normalise.
        mask: 1 on the entries that count (their min and max set the scale).
        eps: added to the divisor so that equal values give 0.
        floor: smallest divisor, in the units of ``x``: a spread ``max - min`` below it is divided
            by ``floor`` and so maps to ``[0, spread / floor]`` instead of the full [0, 1]
            (0 keeps plain min-max normalisation).
    """
    m = mask.bool()
    if not m.any():
        return torch.zeros_like(x)
    lo, hi = x[m].min(), x[m].max()
    return torch.where(m, (x - lo) / ((hi - lo).clamp(min=floor) + eps), torch.zeros_like(x)).clamp(0, 1)


def _group_rows(rows: int, group_size: int, row_group: torch.Tensor | None) -> list[slice | torch.Tensor]:
    """The rows of each group: blocks of ``group_size`` contiguous rows, or, with ``row_group`` (``[B]``
    the group of each row: an episode laid out in several rows, one per user turn), the rows it names."""
    if row_group is None:
        return [slice(start, start + group_size) for start in range(0, rows, group_size)]
    if row_group.shape[0] != rows:
        raise ValueError(f"row_group names {row_group.shape[0]} rows, the tensors have {rows}")
    groups = int(row_group.max()) + 1 if rows else 0
    return [(row_group == gi).nonzero().flatten() for gi in range(groups)]


def soft_or_scores(
    entropy: torch.Tensor,
    a_opd: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    divergence_floor: float = DIVERGENCE_FLOOR,
    row_group: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token score ``s = h + d - h * d`` with ``h`` the student entropy and ``d = |A_opd|``, each
    min-max normalised within its group; ``[B, T]``, 0 where masked.

    Args:
        entropy: ``[B, T]`` student entropy of each sampled token's distribution.
        a_opd: ``[B, T]`` on-policy distillation advantages ``log pi_T - log pi_S`` (nats).
        mask: ``[B, T]`` 1 on the tokens that can be selected.
        group_size: G, rows per group (the normalisation runs over each group's tokens).
        divergence_floor: smallest spread of ``|A_opd|`` in a group (nats) that ``d`` stretches to
            [0, 1]; a group whose spread is below it gets ``d <= spread / divergence_floor``, so a
            teacher that (nearly) equals the student leaves the selection to the entropy. 0 is
            plain min-max normalisation.
        row_group: ``[B]`` the group of each row where a group's rows are not ``group_size``
            contiguous ones (an episode in one row per user turn); ``None``: contiguous blocks.
    """
    if divergence_floor < 0:
        raise ValueError(f"divergence_floor must be >= 0, got {divergence_floor}")
    out = torch.zeros_like(entropy, dtype=torch.float32)
    for rows in _group_rows(entropy.shape[0], group_size, row_group):
        h = minmax_normalize(entropy[rows].float(), mask[rows])
        d = minmax_normalize(a_opd[rows].abs().float(), mask[rows], floor=divergence_floor)
        out[rows] = (h + d - h * d) * mask[rows]
    return out


def select_top_fraction(
    scores: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    fraction: float,
    groups: torch.Tensor | None = None,
    row_group: torch.Tensor | None = None,
) -> torch.Tensor:
    """Boolean ``[B, T]`` selection of the top ``ceil(fraction * n)`` tokens by score in each group
    (``n`` its real tokens), restricted to the groups flagged in ``groups`` (``[N]``; all if None).
    ``row_group``: ``[B]`` the group of each row, as in :func:`soft_or_scores`."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"token fraction must be in (0, 1], got {fraction}")
    selected = torch.zeros_like(mask, dtype=torch.bool)
    blocks = _group_rows(scores.shape[0], group_size, row_group)
    if row_group is None:
        blocks = blocks[: scores.shape[0] // group_size]  # a partial last block was never a group
    for gi, rows in enumerate(blocks):
        if groups is not None and not bool(groups[gi]):
            continue
        m = mask[rows].bool().reshape(-1)
        n = int(m.sum())
        if n == 0:
            continue
        k = min(n, max(1, math.ceil(fraction * n - 1e-9)))
        flat = torch.where(m, scores[rows].reshape(-1).float(), torch.full_like(m, -math.inf, dtype=torch.float32))
        top = torch.topk(flat, k).indices
        chosen = torch.zeros_like(m)
        chosen[top] = True
        selected[rows] = chosen.view(-1, mask.shape[1])
    return selected


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
):
    """Per-token PPO/GRPO clipped surrogate loss ``-min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)``.

    Args:
        logprobs: ``[B, T]`` current-policy log-probs of the sampled tokens (with grad).
        old_logprobs: ``[B, T]`` sampling-policy log-probs.
        advantages: ``[B]`` (broadcast over tokens) or ``[B, T]`` per-token advantages.
        eps_low: lower clip range.
        eps_high: upper clip range (DAPO's clip-higher uses a larger value).

    Returns:
        ``(loss [B, T], clipped_low [B, T] bool, clipped_high [B, T] bool)``: the clip flags mark
        tokens whose gradient the clip removed.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    advantages = advantages.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = -torch.min(ratio * advantages, clipped * advantages)
    clip_low = (ratio < 1.0 - eps_low) & (advantages < 0)
    clip_high = (ratio > 1.0 + eps_high) & (advantages > 0)
    return loss, clip_low.detach(), clip_high.detach()


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "sequence_mean",
    num_sequences: int | None = None,
    num_tokens: float | None = None,
    max_length: int | None = None,
    sequence_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    The normalisers default to this tensor's own rows; pass the full batch's values when a batch is
    processed in micro-batches so that the sum of micro-batch losses equals the full-batch loss.

    Args:
        per_token: ``[b, T]`` loss per token.
        mask: ``[b, T]`` 1 on real completion tokens.
        mode: ``"sequence_mean"`` (mean over each sequence's tokens, then over sequences: GRPO),
            ``"token_mean"`` (sum over all tokens of the batch divided by their number: DAPO) or
            ``"constant"`` (sum divided by sequences times the maximum length: Dr. GRPO).
        num_sequences: sequences in the full batch.
        num_tokens: real tokens in the full batch (``token_mean``).
        max_length: completion length limit (``constant``); defaults to ``T``.
        sequence_tokens: ``[b]`` the tokens of the sequence each row belongs to (``sequence_mean``):
            an episode laid out in one row per user turn is one sequence, so its rows share the
            divisor (its real tokens over all its rows) and ``num_sequences`` counts episodes; the
            loss is then the one stream's of the same tokens. ``None``: each row is a sequence.
    """
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    num_sequences = num_sequences if num_sequences is not None else per_token.shape[0]
    if mode == "sequence_mean":
        divisor = mask.sum(dim=1) if sequence_tokens is None else sequence_tokens.to(mask)
        per_seq = masked.sum(dim=1) / divisor.clamp(min=1.0)
        return per_seq.sum() / max(num_sequences, 1)
    if mode == "token_mean":
        total = num_tokens if num_tokens is not None else float(mask.sum())
        return masked.sum() / max(total, 1.0)
    if mode == "constant":
        length = max_length if max_length is not None else per_token.shape[1]
        return masked.sum() / max(num_sequences * length, 1)
    raise ValueError(f"loss aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def truncated_importance_weights(
    trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float = 2.0
) -> torch.Tensor:
    """Per-token truncated importance weights ``min(exp(log pi_train - log pi_sample), cap)``.

    The sampler (vLLM, another precision or kernel) and the trainer assign slightly different
    probabilities to the same tokens; weighting each token's loss by this ratio, truncated from
    above as TRL and verl do, corrects the gradient for that gap without letting a rare token with
    a tiny sampler probability dominate it. No gradient flows through the weights.
    """
    if cap <= 0:
        raise ValueError(f"importance sampling cap must be > 0, got {cap}")
    return torch.exp(trainer_logprobs.detach() - sampler_logprobs.detach()).clamp(max=cap)


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    diff = ref_logprobs.detach() - logprobs
    return torch.exp(diff) - diff - 1.0


def beta_schedule(step: int, start: float = 5e-3, slope: float = -5e-5, floor: float = 1e-3) -> float:
    """Linearly annealed guidance weight ``max(floor, start + slope * step)``."""
    return max(floor, start + slope * step)
