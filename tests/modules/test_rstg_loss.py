"""RSTG / GRPO tensor math against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_agents.modules import rstg_loss as F


def test_group_advantages_hand_computed():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    adv = F.group_advantages(r, 4, "group", eps=1e-4)
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]) / torch.tensor([std + 1e-4] * 4 + [1.0] * 4)
    torch.testing.assert_close(adv, expected)
    assert torch.all(adv[4:] == 0)  # zero-variance group: exactly zero
    none = F.group_advantages(r, 4, "none")
    torch.testing.assert_close(none, torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))
    batch = F.group_advantages(r, 4, "batch")
    torch.testing.assert_close(batch, none / (r.std() + 1e-4))
    with pytest.raises(ValueError):
        F.group_advantages(r, 3)
    with pytest.raises(ValueError):
        F.group_advantages(r, 4, "nope")


def test_group_stats():
    r = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5])
    s = F.group_stats(r, 2)
    assert s.positive.tolist() == [True, False, False, False]
    assert s.negative.tolist() == [False, True, False, True]  # 0.5 < threshold 1.0: all failed
    assert s.rows(s.negative, 2).tolist() == [False, False, True, True, False, False, True, True]


def _batch():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.1, -4.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.5, -0.5], [-0.6, -0.1, -4.0]])
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    return logp, old, adv, mask


def test_clipped_surrogate_hand_computed():
    logp, old, adv, _ = _batch()
    loss, low, high = F.clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.28)
    rho = torch.exp(logp.detach() - old)
    # Row 0 (A=1): -min(rho, clip(rho)) ; row 1 (A=-2): -min(-2 rho, -2 clip(rho)) = 2 max(rho, clip(rho)).
    expected0 = -torch.minimum(rho[0], rho[0].clamp(0.8, 1.28))
    expected1 = 2 * torch.maximum(rho[1], rho[1].clamp(0.8, 1.28))
    torch.testing.assert_close(loss.detach(), torch.stack([expected0, expected1]))
    # rho[0,1] = e^-0.5 = 0.61 < 0.8 with A>0: not clipped (min picks rho); rho[1,0] = e^0.3 = 1.35 > 1.28, A<0: not clipped.
    assert not low.any() and not high.any()
    loss2, low2, high2 = F.clipped_surrogate(logp, old, -adv, eps_low=0.2, eps_high=0.28)
    assert low2[0, 1] and high2[1, 0] and int(low2.sum() + high2.sum()) == 2


def test_aggregation_modes_hand_computed():
    per_tok = torch.tensor([[1.0, 3.0, 100.0], [2.0, 4.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # sequence_mean: mean(2, 4) = 3 ; token_mean: (1+3+2+4+6)/5 = 3.2 ; constant: 16 / (2*4).
    assert float(F.aggregate(per_tok, mask, "sequence_mean")) == pytest.approx(3.0)
    assert float(F.aggregate(per_tok, mask, "token_mean")) == pytest.approx(3.2)
    assert float(F.aggregate(per_tok, mask, "constant", max_length=4)) == pytest.approx(2.0)
    # Micro-batches with the full batch's normalisers sum to the full-batch loss in every mode.
    for mode in F.AGGREGATIONS:
        full = F.aggregate(per_tok, mask, mode, max_length=4)
        parts = sum(
            F.aggregate(per_tok[i : i + 1], mask[i : i + 1], mode, num_sequences=2, num_tokens=5.0, max_length=4)
            for i in range(2)
        )
        assert float(parts) == pytest.approx(float(full))
    with pytest.raises(ValueError):
        F.aggregate(per_tok, mask, "mean")


def test_grpo_gradient_matches_hand_derivation():
    logp, old, adv, mask = _batch()
    loss, _, _ = F.clipped_surrogate(logp, old, adv, 0.2, 0.2)
    F.aggregate(loss, mask, "token_mean").backward()
    rho = torch.exp(logp.detach() - old)
    unclipped = torch.where(adv[:, None] > 0, rho <= 1.2, rho >= 0.8).float()
    expected = -adv[:, None] * rho * unclipped * mask / mask.sum()
    torch.testing.assert_close(logp.grad, expected)


def test_zero_variance_group_gives_no_gradient():
    r = torch.tensor([0.0, 0.0, 1.0, 1.0])
    adv = F.group_advantages(r, 2)
    logp = torch.randn(4, 3, requires_grad=True)
    loss, _, _ = F.clipped_surrogate(logp, logp.detach(), adv)
    F.aggregate(loss, torch.ones(4, 3)).backward()
    assert torch.all(logp.grad == 0)


def test_opd_and_soft_or_scores():
    t = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.0, 0.0]])
    s = torch.tensor([[-2.0, -2.0, -1.0], [-1.5, -1.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    a = F.opd_advantages(t, s, mask)
    torch.testing.assert_close(a, torch.tensor([[1.0, 0.0, -2.0], [1.0, 0.0, 0.0]]))
    entropy = torch.tensor([[0.0, 1.0, 2.0], [4.0, 3.0, 100.0]])
    scores = F.soft_or_scores(entropy, a, mask, group_size=2)
    h = torch.tensor([[0.0, 0.25, 0.5], [1.0, 0.75, 0.0]])
    d = torch.tensor([[0.5, 0.0, 1.0], [0.5, 0.0, 0.0]])
    torch.testing.assert_close(scores, (h + d - h * d) * mask, atol=1e-6, rtol=1e-6)


def test_select_top_fraction_exact():
    torch.manual_seed(0)
    scores = torch.rand(8, 10)
    mask = torch.ones(8, 10)
    mask[1, 7:] = 0
    groups = torch.tensor([True, False, True, True])
    sel = F.select_top_fraction(scores, mask, 2, 0.2, groups=groups)
    for gi in range(4):
        rows = slice(2 * gi, 2 * gi + 2)
        if not groups[gi]:
            assert not sel[rows].any()
            continue
        m = mask[rows].bool()
        n = int(m.sum())
        k = math.ceil(0.2 * n)
        assert int(sel[rows].sum()) == k
        assert not (sel[rows] & ~m).any()
        chosen = scores[rows][sel[rows]]
        rest = scores[rows][m & ~sel[rows]]
        assert chosen.min() > rest.max()
    with pytest.raises(ValueError):
        F.select_top_fraction(scores, mask, 2, 0.0)


def test_kl_and_beta():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.0, -1.0])
    kl = F.kl_to_reference(logp, ref)
    torch.testing.assert_close(kl, torch.tensor([0.0, math.e - 2.0]))
    assert F.beta_schedule(0) == pytest.approx(5e-3)
    assert F.beta_schedule(10) == pytest.approx(5e-3 - 5e-4)
    assert F.beta_schedule(10_000) == pytest.approx(1e-3)
