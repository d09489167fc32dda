"""A preference model over workflow *features*, so that answers about two workflows also say
something about their offspring, and the choice of which pair to ask next.

Model: a Bradley-Terry / logistic model on feature differences with a per-workflow offset and a
known flip rate ``eps`` for the rater (answers are evidence, not ground truth)::

    P(rater prefers a over b) = eps + (1 - 2 eps) * sigmoid(w . (phi(a) - phi(b)) + u_a - u_b)

``phi`` counts operators, backbones, operator@backbone pairs, prompts, non-default params and the
output operator; ``w`` has a Gaussian prior (L2) and the per-workflow offsets ``u`` a tighter one,
so a child that shares its parent's features inherits its parent's score, and a workflow compared
often can still depart from what its features predict. The MAP fit is a few
Fisher-scoring steps (with a line search) of a convex-enough problem with a few dozen parameters, written with numpy.

With ``covariates`` (:meth:`PreferenceModel.fit`), each answer is first explained by what the
search's own objectives already see, with a weight of its own per covariate (the search passes the
two traces' score difference and cost ratio, ``SearchConfig.preference_residual``)::

    z = beta . (c(a) - c(b)) + w . (phi(a) - phi(b)) + u_a - u_b

so ``w`` and ``u`` (all that :meth:`PreferenceModel.score` and :meth:`PreferenceModel.feature_weight`
report) are the rater's *residual* taste: a rater who prefers the cheaper of two answers is
explained by ``beta``, not by a weight on ``backbone:cheap`` that would pull the search toward cheap
backbones a second time, on top of the fitness's own cost term.

Certainty (``SearchConfig.preference_certainty``): the same Laplace approximation gives each
feature weight and each workflow score a variance ``v``, and
:meth:`PreferenceModel.certain_feature_weight` / :meth:`PreferenceModel.certain_score` shrink the
point estimate ``m`` toward 0 by how sure the model is of it::

    m * m^2 / (m^2 + k v)

so a taste seen consistently across many answers keeps (almost) its weight, and one resting on a
few noisy answers, whose mean is not large against its spread, counts for little. ``v`` comes from
the precision ``H0`` the answers and the prior give at even odds (``z = 0``, a rater with no
taste): at the fit, a taste the answers agree on saturates the sigmoid, carries little Fisher
information, and would look as unsure as a noisy one. A score's ``v`` is its variance under
``H0``; a feature weight's is its conditional one, ``1 / H0_ii`` (that feature's precision with the
others held): features that always come together (``op:cot`` and ``output:cot`` in a one-node
workflow, an operator and its ``op@backbone`` pair) share a taste the answers cannot split between
them, and their marginal variances stay near the prior's however many answers agree, while a score
sums them and the split cancels.

Pair choice: the posterior variance of ``w . (phi(a) - phi(b))`` under a Laplace approximation,
discounted by how sure the model already is about the pair (the "most uncertain duel" rule of
dueling-bandit prompt optimisation).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from lightning_agents.hflow.genome import Workflow, canonical_params
from lightning_agents.hflow.preferences import Comparison

__all__ = ["PreferenceModel", "workflow_features"]


def workflow_features(wf: Workflow) -> Counter:
    """Counts of the features the preference model scores (see the module docstring)."""
    f: Counter = Counter()
    for n in wf.nodes:
        f[f"op:{n.op}"] += 1
        if n.backbone:
            f[f"backbone:{n.backbone}"] += 1
            f[f"op@backbone:{n.op}@{n.backbone}"] += 1
        if n.prompt:
            f[f"prompt:{n.op}:{hashlib.sha1(n.prompt.encode()).hexdigest()[:8]}"] += 1
        for k, v in canonical_params(n.op, n.params, len(wf.predecessors(n.id))).items():
            f[f"param:{n.op}.{k}={v}"] += 1
    f[f"output:{wf.node(wf.output).op}"] += 1
    return f


class PreferenceModel:
    """Noisy Bradley-Terry over workflow features plus per-workflow offsets (MAP fit).

    Args:
        flip_rate: assumed probability that an answer is the wrong way round.
        l2: prior precision of the feature weights.
        offset_l2: prior precision of the per-workflow offsets (larger: trust features more).
        steps: most Fisher-scoring steps per fit.
        covariate_l2: prior precision of the covariate weights ``beta`` (small: the covariates,
            the objectives' own terms, are free to explain what they can before the features do).
    """

    def __init__(
        self,
        flip_rate: float = 0.1,
        l2: float = 1.0,
        offset_l2: float = 4.0,
        steps: int = 50,
        covariate_l2: float = 0.1,
    ) -> None:
        if not 0.0 <= flip_rate < 0.5:
            raise ValueError(f"flip_rate must be in [0, 0.5), got {flip_rate}")
        self.flip_rate = flip_rate
        self.l2 = l2
        self.offset_l2 = offset_l2
        self.steps = steps
        self.covariate_l2 = covariate_l2
        self.vocab: dict[str, int] = {}
        self.w = np.zeros(0)
        # weights of the covariates of the last fit (empty when it had none)
        self.beta = np.zeros(0)
        self.offsets: dict[str, float] = {}
        self.cov = np.zeros((0, 0))
        # the joint covariance of [w, u] under H0 (features, then the compared workflows'
        # offsets at _offset_index), for the variance of a whole score (certain_score)
        self._score_cov = np.zeros((0, 0))
        self._offset_index: dict[str, int] = {}
        # H0's diagonal over the features (feature_variance)
        self._feature_precision = np.zeros(0)
        self.n_comparisons = 0

    def _vector(self, wf: Workflow) -> np.ndarray:
        x = np.zeros(len(self.vocab))
        for k, v in workflow_features(wf).items():
            if k in self.vocab:
                x[self.vocab[k]] = v
        return x

    def fit(
        self,
        comparisons: Iterable[Comparison],
        workflows: dict[str, Workflow],
        covariates: Callable[[Comparison], Sequence[float]] | None = None,
    ) -> PreferenceModel:
        """Fit to the answered comparisons whose two workflows are known (``hash -> workflow``).

        Args:
            comparisons: the answers.
            workflows: ``hash -> workflow`` of the compared workflows (others are left out).
            covariates: ``comparison -> (c(a) - c(b))``, the same length for every answer: what
                explains an answer before the workflow features do, each with a fitted weight
                (:attr:`beta`). None: no covariates (the plain model).
        """
        rows = [c for c in comparisons if c.a in workflows and c.b in workflows and c.a != c.b]
        self.n_comparisons = len(rows)
        hashes = sorted({c.a for c in rows} | {c.b for c in rows})
        self.vocab = {}
        for h in hashes:
            for k in workflow_features(workflows[h]):
                self.vocab.setdefault(k, len(self.vocab))
        d, m = len(self.vocab), len(hashes)
        self.beta = np.zeros(0)
        if not rows:
            self.w, self.offsets, self.cov = np.zeros(d), {}, np.eye(d) / self.l2
            self._score_cov, self._offset_index = self.cov, {}
            self._feature_precision = np.full(d, self.l2)
            return self
        index = {h: i for i, h in enumerate(hashes)}
        feats = {h: self._vector(workflows[h]) for h in hashes}
        cov_rows = (
            np.array([list(covariates(c)) for c in rows], dtype=float) if covariates else np.zeros((len(rows), 0))
        )
        k = cov_rows.shape[1]
        # Design over [w, u, beta]: x = phi(a) - phi(b), +1/-1 on the two offsets, the covariates.
        X = np.zeros((len(rows), d + m + k))
        y = np.zeros(len(rows))
        for r, c in enumerate(rows):
            X[r, :d] = feats[c.a] - feats[c.b]
            X[r, d + index[c.a]] += 1.0
            X[r, d + index[c.b]] -= 1.0
            y[r] = {"a": 1.0, "b": 0.0, "tie": 0.5}[c.winner]
        X[:, d + m :] = cov_rows
        prec = np.concatenate([np.full(d, self.l2), np.full(m, self.offset_l2), np.full(k, self.covariate_l2)])
        eps = self.flip_rate

        def terms(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
            s = 1.0 / (1.0 + np.exp(-np.clip(X @ theta, -50, 50)))
            p = np.clip(eps + (1 - 2 * eps) * s, 1e-12, 1 - 1e-12)
            loss = -float(np.sum(y * np.log(p) + (1 - y) * np.log(1 - p))) + 0.5 * float(prec @ theta**2)
            # d/dz of y log p + (1-y) log(1-p), and the Fisher information per answer
            g_z = (y / p - (1 - y) / (1 - p)) * (1 - 2 * eps) * s * (1 - s)
            fisher = ((1 - 2 * eps) * s * (1 - s)) ** 2 / (p * (1 - p))
            return loss, X.T @ g_z - prec * theta, fisher

        # Fisher scoring with a backtracking line search: a plain gradient step with the prior's
        # precision in it diverges when there are few answers (the step overshoots the L2 pull).
        theta = np.zeros(d + m + k)
        loss, grad, fisher = terms(theta)
        for _ in range(self.steps):
            H = (X * fisher[:, None]).T @ X + np.diag(prec)
            step = np.linalg.solve(H, grad)
            t = 1.0
            while t > 1e-4:
                new_loss, new_grad, new_fisher = terms(theta + t * step)
                if new_loss <= loss + 1e-12:
                    break
                t *= 0.5
            else:
                break
            theta = theta + t * step
            done = loss - new_loss < 1e-9
            loss, grad, fisher = new_loss, new_grad, new_fisher
            if done:
                break
        H = (X * fisher[:, None]).T @ X + np.diag(prec)
        cov = np.linalg.inv(H)
        self.w = theta[:d]
        self.offsets = {h: float(theta[d + index[h]]) for h in hashes}
        self.beta = theta[d + m :]
        # the features' marginal covariance: the uncertainty of the covariates' weights included
        self.cov = cov[:d, :d]
        self._offset_index = {h: d + index[h] for h in hashes}
        # certainty (module docstring): the Fisher information at z = 0, (1 - 2 eps)^2 / 4 an
        # answer, not at the fit, where a taste the answers agree on would carry almost none
        H0 = (1 - 2 * eps) ** 2 / 4 * (X.T @ X) + np.diag(prec)
        self._feature_precision = np.diag(H0)[:d].copy()
        self._score_cov = np.linalg.inv(H0)[: d + m, : d + m]
        return self

    def score(self, wf: Workflow) -> float:
        """Predicted preference strength (log-odds scale; 0 for a workflow like nothing compared);
        fitted with covariates, the residual strength: what the covariates leave unexplained."""
        if not len(self.vocab):
            return 0.0
        return float(self.w @ self._vector(wf)) + self.offsets.get(wf.hash(), 0.0)

    def feature_weight(self, feature: str) -> float:
        """The fitted weight (log-odds) of one feature (``op:cot``, ``backbone:mid``); 0 for a
        feature no answered comparison involved."""
        i = self.vocab.get(feature)
        return 0.0 if i is None else float(self.w[i])

    def feature_variance(self, feature: str) -> float:
        """Conditional variance of one feature's weight, ``1 / H0_ii``: how sure the answers that
        involved this feature make its weight, the other features held (see the module docstring
        for ``H0`` and why not the marginal variance); the prior's ``1 / l2`` for a feature no
        answered comparison involved."""
        i = self.vocab.get(feature)
        return 1.0 / self.l2 if i is None else 1.0 / float(self._feature_precision[i])

    def score_variance(self, wf: Workflow) -> float:
        """Variance of :meth:`score` under ``H0`` (module docstring): of ``w . phi(wf)`` plus the
        workflow's own offset when it was compared (an uncompared workflow's score has no offset
        term); 0 for a model fitted to nothing."""
        if not len(self.vocab):
            return 0.0
        x = np.zeros(len(self._score_cov))
        x[: len(self.vocab)] = self._vector(wf)
        j = self._offset_index.get(wf.hash())
        if j is not None:
            x[j] = 1.0
        return max(0.0, float(x @ self._score_cov @ x))

    def certain_feature_weight(self, feature: str, k: float) -> float:
        """:meth:`feature_weight` shrunk toward 0 by its variance ``v`` (:meth:`feature_variance`):
        ``m * m^2 / (m^2 + k v)`` (``k`` <= 0: the weight itself)."""
        weight = self.feature_weight(feature)
        return weight if k <= 0 else _shrink(weight, self.feature_variance(feature), k)

    def certain_score(self, wf: Workflow, k: float) -> float:
        """:meth:`score` shrunk toward 0 by its variance ``v`` (:meth:`score_variance`):
        ``m * m^2 / (m^2 + k v)`` (``k`` <= 0: the score itself)."""
        score = self.score(wf)
        return score if k <= 0 else _shrink(score, self.score_variance(wf), k)

    def prob(self, a: Workflow, b: Workflow) -> float:
        """Model probability that a person prefers ``a`` over ``b`` (before rater noise)."""
        z = max(-50.0, min(50.0, self.score(a) - self.score(b)))
        return 1.0 / (1.0 + math.exp(-z))

    def informativeness(self, a: Workflow, b: Workflow) -> float:
        """How much an answer about ``(a, b)`` would teach: posterior std of the score difference,
        scaled by ``p (1 - p)`` of the current prediction (sure pairs teach little)."""
        fa, fb = workflow_features(a), workflow_features(b)
        # features no answer has touched yet keep their prior variance: pairs that differ in
        # them are the ones that can reveal a taste nobody has been asked about
        unseen = sum((fa.get(k, 0) - fb.get(k, 0)) ** 2 for k in set(fa) | set(fb) if k not in self.vocab) / self.l2
        dx = self._vector(a) - self._vector(b) if len(self.vocab) else np.zeros(0)
        var = (float(dx @ self.cov @ dx) if len(self.vocab) else 0.0) + unseen + 2.0 / self.offset_l2
        p = self.prob(a, b)
        return math.sqrt(var) * 4 * p * (1 - p)


def _shrink(mean: float, var: float, k: float) -> float:
    """``mean * mean^2 / (mean^2 + k var)``: a posterior mean discounted by its signal-to-noise
    ratio (``k`` <= 0 or no variance: the mean)."""
    if k <= 0 or var <= 0:
        return mean
    m2 = mean * mean
    return mean * m2 / (m2 + k * var) if m2 > 0 else 0.0
