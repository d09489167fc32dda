"""RSTG soft-OR token selection: the divergence half must not pick tokens on float noise.

Before: ``|A_opd|`` was min-max normalised within each group whatever its scale, so a teacher equal
to the student (``|A_opd|`` ~1e-5 nats of float noise) had that noise stretched to [0, 1]; on
SmolLM2-135M it put a quarter of the distilled tokens where entropy alone would not have.
"""

from __future__ import annotations

import pytest
import torch

from lightning_agents.modules import rstg_loss as F
from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
from lightning_agents.tasks.arithmetic import arithmetic_conversation, make_arithmetic_split

G = 4


def _records(n):
    return [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in make_arithmetic_split("val", n=n)
    ]


def _guided_rollout(tmp_path, teacher, **kw):
    """Sample 3 prompts x G from the embedded student, all wrong, so every group is guided."""
    torch.manual_seed(0)
    m = RSTGModule(
        model="embedded:student",
        teacher=teacher,
        num_generations=G,
        max_new_tokens=16,
        teacher_k=2,
        micro_batch_size=8,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        **kw,
    )
    m.configure_model()
    records = _records(3)
    for rec in records:
        m.teacher_cache.put(m.teacher_key(rec), 0.5, "The answer is 1.", 2)
    out = m.engine.generate([r["prompt"] for r in records], num_samples=G, sampling=m.sampling)
    rewards = torch.zeros(len(records) * G)
    _, info = m.compute_token_advantages(out, rewards, records)
    return m, out, info


def _entropy_only(entropy, mask, fraction=0.2):
    """The selection the entropy half makes alone (``d = 0``)."""
    scores = F.soft_or_scores(entropy, torch.zeros_like(entropy), mask, G)
    return F.select_top_fraction(scores, mask, G, fraction)


def _assert_an_entropy_top_k(selected, entropy, mask):
    """Every group's selection is a top-k by entropy: no unselected token has a higher entropy
    than a selected one. (The G samples of a prompt share their first token's distribution, so
    exact entropy ties occur; which of those is taken is not the entropy's to say.)"""
    for s in range(0, len(selected), G):
        sel, m, e = selected[s : s + G], mask[s : s + G].bool(), entropy[s : s + G]
        assert not (sel & ~m).any()
        if sel.any() and (m & ~sel).any():
            assert float(e[sel].min()) >= float(e[m & ~sel].max()), f"group {s // G}"


def test_float_noise_divergence_selects_nothing_beyond_entropy():
    torch.manual_seed(0)
    rows, t = 2 * G, 25
    # distinct entropies, 0.01 apart at least, so "the entropy's choice" is unambiguous
    entropy = torch.randperm(rows * t).float().view(rows, t) * 0.01
    mask = torch.ones(rows, t)
    mask[1, 20:] = 0
    a_opd = torch.randn(rows, t) * 1e-5 * mask  # a teacher equal to the student: float32 noise
    scores = F.soft_or_scores(entropy * mask, a_opd, mask, G)
    h = torch.cat([F.minmax_normalize(entropy[s : s + G] * mask[s : s + G], mask[s : s + G]) for s in (0, G)])
    assert (scores - h).abs().max() < 1e-3  # before: the noise alone scored tokens up to 1
    selected = F.select_top_fraction(scores, mask, G, 0.2)
    assert torch.equal(selected, _entropy_only(entropy * mask, mask))
    _assert_an_entropy_top_k(selected, entropy, mask)


def test_teacher_equal_to_student_leaves_the_selection_to_the_entropy(tmp_path):
    m, out, info = _guided_rollout(tmp_path, teacher="embedded:student")
    mask = out.action_mask.float()
    assert info["selected"].any()
    assert float(info["a_opd"].abs().max()) < 1e-4  # nothing but sampler-vs-forward float noise
    expected = _entropy_only(out.entropies * mask, mask, m.hparams.token_fraction)
    assert torch.equal(info["selected"].view(-1, G * mask.shape[1]).sum(1), expected.view(-1, G * mask.shape[1]).sum(1))
    _assert_an_entropy_top_k(info["selected"], out.entropies, mask)


def test_real_divergence_still_selects_the_divergent_tokens():
    t = 10
    mask = torch.ones(2 * G, t)
    gen = torch.Generator().manual_seed(1)
    # Group 0: five high-entropy tokens, the rest low; three zero-entropy tokens diverge by
    # 2-3 nats, the rest by float noise. Top 20% of 40 tokens = 8: the five high-entropy tokens
    # and the three divergent ones, which entropy alone would skip.
    entropy = torch.rand(2 * G, t, generator=gen) * 0.3
    entropy[0, 5:] = torch.tensor([0.9, 0.92, 0.94, 0.96, 0.98])
    a_opd = torch.randn(2 * G, t, generator=gen) * 1e-5
    divergent = [(0, 0), (1, 1), (2, 3)]
    for (r, c), v in zip(divergent, (3.0, -2.5, 2.0)):
        entropy[r, c] = 0.0
        a_opd[r, c] = v
    # Group 1: float noise only (its teacher agrees with the student), distinct entropies.
    entropy[G:] = torch.randperm(G * t, generator=gen).float().view(G, t) * 0.01
    selected = F.select_top_fraction(F.soft_or_scores(entropy, a_opd, mask, G), mask, G, 0.2)
    assert int(selected[:G].sum()) == 8
    assert all(bool(selected[r, c]) for r, c in divergent)
    assert selected[0, 5:].all()
    entropy_only = _entropy_only(entropy, mask)
    assert not any(bool(entropy_only[r, c]) for r, c in divergent)
    # ... while the noise of group 1 picks nothing (before: it replaced 3 of the 8 entropy picks)
    assert torch.equal(selected[G:], entropy_only[G:])
    # A spread >= the floor is normalised exactly as before (plain min-max, F.minmax_normalize's default).
    scores = F.soft_or_scores(entropy, a_opd, mask, G)
    h = F.minmax_normalize(entropy[:G], mask[:G])
    d = F.minmax_normalize(a_opd[:G].abs(), mask[:G])
    torch.testing.assert_close(scores[:G], h + d - h * d, atol=1e-6, rtol=1e-6)


def test_a_divergence_below_the_floor_counts_in_proportion():
    """Pinned: spread 0.05 nats, floor 0.1 -> d = |A_opd| / 0.1 (before: |A_opd| / 0.05)."""
    entropy = torch.tensor([[0.0, 2.0, 1.0], [0.5, 1.5, 0.0]])
    a_opd = torch.tensor([[0.0, 0.01, -0.05], [0.02, 0.0, 0.03]])
    mask = torch.ones(2, 3)
    scores = F.soft_or_scores(entropy, a_opd, mask, group_size=2)
    # h = [[0, 1, .5], [.25, .75, 0]], d = [[0, .1, .5], [.2, 0, .3]]; s = h + d - h d
    expected = torch.tensor([[0.0, 1.0, 0.75], [0.4, 0.75, 0.3]])
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    assert F.DIVERGENCE_FLOOR == 0.1
    # floor 0 is the plain min-max normalisation of before
    plain = F.soft_or_scores(entropy, a_opd, mask, group_size=2, divergence_floor=0.0)
    torch.testing.assert_close(plain, torch.tensor([[0.0, 1.0, 1.0], [0.55, 0.75, 0.6]]), atol=1e-5, rtol=1e-5)


def test_a_different_teacher_keeps_the_plain_min_max_selection(tmp_path):
    """The embedded teacher differs from the student by nats: the floor changes nothing there."""
    _, out, info = _guided_rollout(tmp_path, teacher="embedded:teacher")
    mask = out.action_mask.float()
    a = info["a_opd"].abs()
    for s in range(0, len(a), G):
        spread = a[s : s + G][mask[s : s + G].bool()]
        assert float(spread.max() - spread.min()) > F.DIVERGENCE_FLOOR
    plain = F.select_top_fraction(F.soft_or_scores(out.entropies * mask, info["a_opd"], mask, G, 0.0), mask, G, 0.2)
    assert torch.equal(info["selected"], plain)


def test_divergence_floor_must_not_be_negative(tmp_path):
    with pytest.raises(RSTGSettingError, match="divergence_floor must be >= 0"):
        RSTGModule(divergence_floor=-0.1, teacher_cache=str(tmp_path / "c.jsonl"))
    with pytest.raises(ValueError, match="divergence_floor"):
        F.soft_or_scores(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), 2, divergence_floor=-1.0)
