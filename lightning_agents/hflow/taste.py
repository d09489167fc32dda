"""Whether a rater's answers show a taste for a workflow feature, without a modelled flip rate.

An answer goes *against the objectives* when its winner is not the side the fitness's own terms
favour (the higher score, then the lower cost). Random flips do that too, so counting such answers
against a modelled flip rate (the run-35 gate) opens for any rater who errs more than modelled:
run 40b found a tasteless rater with 15% flips, modelled as 10%, opening it in about half the
searches. This test asks instead *where* the answers go against the objectives. For a feature
``f`` and a direction (``wanted``: the taste is having ``f``; not: lacking it), the answers split
into those where the objectives' loser has the taste side of ``f`` and their winner has not
(the group a taste for ``f`` would turn), and the rest. Flips that ignore the workflows' features
go against the objectives equally often in both groups, whatever their rate; a taste for ``f``
does so far more often in the first. One-sided Fisher exact test (hypergeometric tail), with
Tarone's refinement of Bonferroni over the features and directions: a split whose most extreme
outcome could not reach the level is not counted (most splits hold one or two answers and could
never be significant, so plain Bonferroni over every feature would leave no power). Splits that
group the same answers (a feature and its ``op@backbone`` twin) are one test.

Pure logic (no search, no Lightning): :func:`detect_tastes` takes the answers as feature sets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["TasteAnswer", "Taste", "hypergeometric_tail", "detect_tastes", "carries_taste"]


@dataclass(frozen=True)
class TasteAnswer:
    """One decided answer read by the objectives.

    Args:
        winner: the features present in the workflow the objectives favour.
        loser: the features present in the other workflow.
        against: whether the rater picked ``loser`` (against the objectives).
    """

    winner: frozenset[str]
    loser: frozenset[str]
    against: bool


@dataclass(frozen=True)
class Taste:
    """A detected taste: the rater prefers workflows having ``feature`` (``wanted``) or lacking it.

    ``turned``/``group`` are the answers against the objectives / all answers in the group a taste
    for it would turn; ``p_value`` is the one-sided Fisher p-value of that split."""

    feature: str
    wanted: bool
    p_value: float
    turned: int
    group: int


def hypergeometric_tail(k: int, total: int, against: int, group: int) -> float:
    """``P(X >= k)`` for ``X`` the answers against the objectives in a group of ``group`` drawn
    without replacement from ``total`` answers, ``against`` of them against: the one-sided Fisher
    exact p-value of ``k`` or more against in the group (exact integer sums, then one division)."""
    if not 0 <= against <= total or not 0 <= group <= total:
        raise ValueError(f"need 0 <= against, group <= total, got {against}, {group}, {total}")
    top = min(group, against)
    low = max(k, 0, group - (total - against))
    if low > top:
        return 0.0
    hits = sum(math.comb(against, x) * math.comb(total - against, group - x) for x in range(low, top + 1))
    return hits / math.comb(total, group)


def _splits(answers: Sequence[TasteAnswer]) -> dict[frozenset[int], list[tuple[str, bool]]]:
    """Each group a taste would turn (the answers' indices) -> the (feature, wanted) naming it."""
    features = sorted(set().union(*(a.winner | a.loser for a in answers))) if answers else []
    out: dict[frozenset[int], list[tuple[str, bool]]] = {}
    for f in features:
        for wanted in (True, False):
            group = frozenset(
                i for i, a in enumerate(answers) if (f in a.loser) == wanted and (f in a.winner) != wanted
            )
            if group:
                out.setdefault(group, []).append((f, wanted))
    return out


def _tarone_level(min_ps: list[float], alpha: float) -> float:
    """Tarone's per-test level: the smallest ``m`` with at most ``m`` tests whose smallest
    attainable p-value is ``<= alpha / m`` gives ``alpha / m`` (family-wise error ``<= alpha``:
    only those tests can reject, each with probability ``<= alpha / m`` under no taste)."""
    for m in range(1, len(min_ps) + 1):
        if sum(p <= alpha / m for p in min_ps) <= m:
            return alpha / m
    return alpha / max(len(min_ps), 1)


def detect_tastes(answers: Sequence[TasteAnswer], alpha: float) -> list[Taste]:
    """The tastes the answers show at family-wise level ``alpha`` (most significant first; empty
    when none, or when ``alpha`` is 0). Under answers whose departures from the objectives ignore
    the workflows' features (random flips at any rate) this is non-empty with probability at most
    about ``alpha``."""
    if not 0 <= alpha < 1:
        raise ValueError(f"alpha must be in [0, 1), got {alpha!r}")
    if alpha == 0 or not answers:
        return []
    total, against = len(answers), sum(a.against for a in answers)
    tests = []
    for group, names in _splits(answers).items():
        turned = sum(answers[i].against for i in group)
        p = hypergeometric_tail(turned, total, against, len(group))
        best = hypergeometric_tail(min(len(group), against), total, against, len(group))
        tests.append((p, best, turned, len(group), names))
    level = _tarone_level([t[1] for t in tests], alpha)
    found = [
        Taste(f, wanted, p, turned, n)
        for p, best, turned, n, names in tests
        if best <= level and p <= level
        for f, wanted in names
    ]
    return sorted(found, key=lambda t: (t.p_value, t.feature, not t.wanted))


def carries_taste(features: Iterable[str], tastes: Sequence[Taste]) -> bool:
    """Whether a workflow with these present ``features`` has the taste side of any of ``tastes``."""
    present = set(features)
    return any((t.feature in present) == t.wanted for t in tastes)
