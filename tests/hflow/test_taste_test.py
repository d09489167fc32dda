"""Run 41's taste test (:mod:`lightning_agents.hflow.taste`); the reach it opens: test_taste_reach.py.

Run 40b found the earlier gate (answers against the objectives above a modelled flip rate) opened by a
rater with no taste whose flips outnumber the modelled rate, widening every workflow's reach. The test
asks where the answers go against the objectives, not how often: flips that ignore the workflows'
features cannot pass it at any rate, and the wider reach goes only to the workflows carrying the taste.
"""

from __future__ import annotations

import random

import pytest

from lightning_agents.hflow import SearchConfig
from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.taste import TasteAnswer, carries_taste, detect_tastes, hypergeometric_tail

# --- the statistic -------------------------------------------------------------------------------


def test_the_tail_is_the_hand_computed_hypergeometric_sum():
    # 10 answers, 3 against, a group of 4: P(X >= 2) = (C(3,2) C(7,2) + C(3,3) C(7,1)) / C(10,4) = 70 / 210
    assert hypergeometric_tail(2, 10, 3, 4) == pytest.approx(1 / 3, abs=1e-15)
    assert hypergeometric_tail(3, 10, 3, 4) == pytest.approx(7 / 210, abs=1e-15)
    assert hypergeometric_tail(0, 10, 3, 4) == pytest.approx(1.0, abs=1e-15)
    assert hypergeometric_tail(4, 10, 3, 4) == 0.0  # more than are against: impossible
    # a group holding every answer: all of the against are in it, p = 1
    assert hypergeometric_tail(3, 10, 3, 10) == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(ValueError, match="against"):
        hypergeometric_tail(1, 5, 6, 2)


def _answer(winner: set[str], loser: set[str], against: bool) -> TasteAnswer:
    return TasteAnswer(frozenset(winner), frozenset(loser), against)


def test_a_taste_for_a_feature_is_found_with_its_exact_p_value():
    """4 answers whose objectives' loser shows a cot step and whose winner does not, all 4 against
    the objectives; 8 the other way round, none against. The cot split: p = 1 / C(12, 4) = 1 / 495;
    ``generate`` lacking is the same split (one test). The other split (8 answers, none against)
    can at best reach C(8,4) / C(12,4) = 70 / 495 > 0.05, so Tarone counts one test: level 0.05."""
    answers = [_answer({"op:generate"}, {"op:cot"}, True)] * 4 + [_answer({"op:cot"}, {"op:generate"}, False)] * 8
    tastes = detect_tastes(answers, 0.05)
    assert [(t.feature, t.wanted) for t in tastes] == [("op:cot", True), ("op:generate", False)]
    assert all(t.p_value == pytest.approx(1 / 495, abs=1e-15) and (t.turned, t.group) == (4, 4) for t in tastes)
    assert carries_taste({"op:cot", "op:refine"}, tastes)
    assert carries_taste({"op:programmer"}, tastes)  # lacks generate: the other side of the same split
    assert not carries_taste({"op:generate"}, tastes)
    assert detect_tastes(answers, 0.0) == []  # alpha 0: off
    assert detect_tastes(answers, 1 / 495 * 0.99) == []  # just below its p-value: not found


def test_a_split_the_flips_explain_is_no_taste():
    """As many answers against the objectives in the cot group (1 of 4) as elsewhere (2 of 8)."""
    answers = (
        [_answer({"op:generate"}, {"op:cot"}, True)]
        + [_answer({"op:generate"}, {"op:cot"}, False)] * 3
        + [_answer({"op:cot"}, {"op:generate"}, k < 2) for k in range(8)]
    )
    assert detect_tastes(answers, 0.05) == []


OPS = ("cot", "generate", "programmer", "refine", "test", "vote", "format")
BACKBONES = ("cheap", "mid", "big")


def _features(rng: random.Random) -> frozenset[str]:
    """A random small workflow's features, as :func:`workflow_features` names them."""
    out = set()
    for _ in range(rng.randint(1, 3)):
        op, b = rng.choice(OPS), rng.choice(BACKBONES)
        out |= {f"op:{op}", f"backbone:{b}", f"op@backbone:{op}@{b}"}
    out.add(f"output:{op}")
    return frozenset(out)


def _simulated(rng: random.Random, n: int, flips: float, likes_cot: bool) -> list[TasteAnswer]:
    """``n`` answers on random pairs: against the objectives by a flip of rate ``flips`` that
    ignores the features, or (``likes_cot``) for the side showing a cot step when one does."""
    out = []
    for _ in range(n):
        winner, loser = _features(rng), _features(rng)
        against = rng.random() < flips
        if likes_cot and ("op:cot" in winner) != ("op:cot" in loser):
            against = ("op:cot" in loser) != (rng.random() < flips)
        out.append(TasteAnswer(winner, loser, against))
    return out


def _flip_count_gate(answers: list[TasteAnswer], modelled: float) -> bool:
    """The run-35 gate at z 0 (run 40's lever): more answers against than the modelled flips explain."""
    return sum(a.against for a in answers) > len(answers) * modelled


@pytest.mark.parametrize("flips", [0.10, 0.15, 0.25])
def test_feature_blind_flips_open_it_at_most_about_alpha_whatever_their_rate(flips):
    """200 seeded answer sets of 40 answers, flips that ignore the features; the modelled flip
    rate (0.1) is wrong for 0.15 and 0.25, where the flip-count gate opens in most sets. The
    test needs no flip rate: at alpha 0.05 it may open in about 10 of 200 (14: about alpha plus
    1.3 standard deviations of a binomial count)."""
    rng = random.Random(41 + int(100 * flips))
    sets = [_simulated(rng, 40, flips, likes_cot=False) for _ in range(200)]
    opened = sum(bool(detect_tastes(s, 0.05)) for s in sets)
    assert opened <= 14, opened
    if flips > 0.1:
        assert sum(_flip_count_gate(s, 0.1) for s in sets) > 100  # the old gate opens in most, for contrast


def test_a_consistent_taste_opens_it():
    """The benchmark's rater: the side showing a cot step wins, else the objectives, 15% flipped."""
    rng = random.Random(7)
    found = [detect_tastes(_simulated(rng, 60, 0.15, likes_cot=True), 0.05) for _ in range(50)]
    assert sum(any((t.feature, t.wanted) == ("op:cot", True) for t in ts) for ts in found) >= 40
    # and what it finds is the cot step (or a twin of it), not an unrelated feature
    named = {t.feature for ts in found for t in ts if t.wanted}
    assert named and all("cot" in f for f in named), named


def test_alpha_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="alpha"):
        detect_tastes([], 1.0)
    with pytest.raises(ConfigError, match=r"search\.preference_taste_alpha"):
        SearchConfig(preference_taste_alpha=1.0)
    with pytest.raises(ConfigError, match=r"search\.preference_taste_alpha"):
        SearchConfig(preference_taste_alpha=-0.1)


def test_the_removed_z_setting_names_its_replacement():
    """A saved config naming ``preference_taste_z`` (run 40's gate) fails, naming what replaced it."""
    with pytest.raises(ConfigError, match=r"search\.preference_taste_z.*search\.preference_taste_alpha"):
        SearchConfig(preference_taste_z=0.0)
