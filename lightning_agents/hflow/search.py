"""The HFlow search loop: population, variation, fitness, preference-steered selection, memory.

Reproducibility: every random choice comes from one seeded ``random.Random``; evaluations of a
generation run in a thread pool, but results are collected in submission order and sampled model
calls are seeded from their content (see :func:`~lightning_agents.hflow.backbones.request_seed`),
so a seed gives the same search whatever the thread timing.
"""

from __future__ import annotations

import json
import logging
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Container, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.config import SearchConfig
from lightning_agents.hflow.evaluation import EvalResult, Evaluator, Individual, trace_failed
from lightning_agents.hflow.genome import Workflow, has_tools, operators_for
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.mutation import EDIT_KINDS, Mutator, default_seeds
from lightning_agents.hflow.operators import WorkflowExecutor
from lightning_agents.hflow.preference_model import PreferenceModel, workflow_features
from lightning_agents.hflow.preferences import Comparison, FileRater, PreferenceStore, Rater
from lightning_agents.hflow.racing import race
from lightning_agents.hflow.reflection import AGENT_STRUCTURE_EDITS, ReflectiveOptimizer
from lightning_agents.hflow.selection import choose_workflow, pareto_front
from lightning_agents.hflow.taste import Taste, TasteAnswer, carries_taste, detect_tastes

log = logging.getLogger(__name__)

__all__ = ["HFlowSearch"]

# A question runs its two workflows on up to this many rater problems, until their answers differ.
_QUESTION_PROBLEMS = 4
# The most problem runs one question costs.
_QUESTION_RUNS = 2 * _QUESTION_PROBLEMS
# Edit kinds that change a workflow's graph, operators or backbones (ranked_structural_share).
_STRUCTURAL = ("add", "remove", "replace", "backbone")
# Feature kinds a built pair may be about (SearchConfig.preference_built_pairs), coarse first.
_TASTE_KINDS = ("op", "output", "backbone", "param", "op@backbone")
# preference_reach_small's shapes by (backbones, nodes, code task, agent task): listed once a process
_SMALL: dict[tuple, list[tuple[Workflow, str, Counter]]] = {}


def _structural_neighbours(mutator: Mutator, workflow: Workflow) -> Iterator[tuple[Workflow, str]]:
    """``(child, edit)`` for ``workflow``'s structural single edits (:data:`_STRUCTURAL`), in
    :meth:`Mutator.neighbours`' fixed order (it draws nothing)."""
    for child, edit in mutator.neighbours(workflow):
        if edit.split(":")[0] in _STRUCTURAL:
            yield child, edit


def _as_op(feature: str) -> str:
    """The operator feature a won ``op@backbone:X@b`` or ``output:X`` names (``op:X``; other
    features unchanged): the answer preferred a step by X, which the reach can place anywhere
    (``preference_reach_as_op``; run 32 made no reach child in 9 of 15 searches it missed,
    their built pairs having won only such features)."""
    kind, _, value = feature.partition(":")
    if kind == "op@backbone":
        return "op:" + value.rsplit("@", 1)[0]
    if kind == "output":
        return "op:" + value
    return feature


def _objectives_explain(score_gain: float, cost_gain: float) -> bool:
    """Whether the fitness's own terms explain an answer whose winner scored ``score_gain`` more
    than the loser and cost ``cost_gain`` more (any measure with the sign of the difference): it
    scored higher, or the same and cost less (run 35)."""
    return score_gain > 0 or (score_gain == 0 and cost_gain < 0)


def _for_the_objectives(winner: dict, loser: dict) -> bool:
    """:func:`_objectives_explain` for two traces on one problem. Run 34 found a rater with no
    taste beyond right-then-cheaper (the main benchmark's) winning built pairs for exactly that:
    its liked edits, made children and reached for, spent GSM8K's children and dollars on what
    the fitness already ranks (held-out fitness -2.9 points against the old defaults, fewer seeds
    at the optimum)."""
    score_gain = float(winner["score"]) - float(loser["score"])
    return _objectives_explain(score_gain, float(winner["cost"]) - float(loser["cost"]))


def _explained(winner: str, ta: dict, tb: dict) -> bool:
    """Whether the fitness explains the answer ``winner`` (``a``, ``b``, ``tie``) to traces ``ta``
    and ``tb``: :func:`_for_the_objectives` for a decided answer; a tie at the same score (the
    fitness then ranks by cost alone, which a tie does not contradict: no taste shows)."""
    if winner == "a":
        return _for_the_objectives(ta, tb)
    if winner == "b":
        return _for_the_objectives(tb, ta)
    return float(ta["score"]) == float(tb["score"])


def _present(workflow: Workflow) -> frozenset[str]:
    """The features ``workflow`` has (:func:`workflow_features` with a count above 0)."""
    return frozenset(f for f, n in workflow_features(workflow).items() if n > 0)


def _brought_in(base: Counter, feats: Counter) -> set[str]:
    """The features a built pair may be about (:data:`_TASTE_KINDS`) that ``feats`` counts more
    of than ``base``: what an edit from ``base`` to ``feats`` brings in."""
    return {k for k, v in feats.items() if v > base.get(k, 0) and k.split(":")[0] in _TASTE_KINDS}


def _least_pinned(model: PreferenceModel, features: list[str]) -> str:
    """The feature of ``features`` whose weight has the largest posterior variance, coarse kinds
    first on equal variances (:data:`_TASTE_KINDS`' order), then ``features``' order."""
    return min(features, key=lambda k: (-round(model.feature_variance(k), 9), _TASTE_KINDS.index(k.split(":")[0])))


def _waiting_record(
    feature: str, edit: str, parent: str, problem_id: str, tp: dict, tc: dict, asked: tuple[tuple[str, dict], ...]
) -> dict[str, Any]:
    """The record of a built question waiting for a person (:attr:`HFlowSearch._built_waiting`):
    best ``parent``'s edit ``edit`` bringing in ``feature``, asked on ``problem_id`` with the best's
    trace ``tp`` and the edit's ``tc``, shown as ``asked`` (``(hash, trace)`` for sides a, b)."""
    (a, ta), (b, tb) = asked
    return {
        "feature": feature,
        "edit": edit,
        "parent": parent,
        "problem": problem_id,
        "explained": _for_the_objectives(tc, tp),
        # the winners (a side's hash, or "tie") the fitness explains on the traces the
        # person saw: the callback's refresh may drop them from the cache before the answer
        "explains": [w for w, x in ((a, "a"), (b, "b"), ("tie", "tie")) if _explained(x, ta, tb)],
    }


def _feature_rows(dicts: list[dict[str, int]], index: dict[str, int], intercept: bool = False) -> np.ndarray:
    """Feature counts laid out as rows by ``index`` (feature -> column); a feature not in
    ``index`` is left out (it carries no evidence), and ``intercept`` adds a last column of ones."""
    m = np.zeros((len(dicts), len(index) + intercept))
    if intercept:
        m[:, -1] = 1.0
    for i, d in enumerate(dicts):
        for k, v in d.items():
            j = index.get(k)
            if j is not None:
                m[i, j] = v
    return m


def _nearest_residual(tastes: list[dict[str, int]], rows: list[dict[str, int]], residual: np.ndarray) -> np.ndarray:
    """For each of ``tastes``, the mean ``residual`` of the evaluated workflows (``rows``)
    nearest to it in L1 distance over their feature counts (``preference_reach_anchor``).

    A ridge fit on a search's 25-27 evaluated workflows cannot weigh a feature none of them has,
    so run 32 found it ranking unseen shapes by what they share with the fit ones; adding the
    nearest evaluated workflow's residual anchors each prediction on a real evaluation."""
    index = {k: j for j, k in enumerate(sorted(set().union(*rows, *tastes)))}
    seen = _feature_rows(rows, index)
    out = np.zeros(len(tastes))
    cands = _feature_rows(tastes, index)
    for start in range(0, len(tastes), 512):  # bounded memory: 512 x evaluated x features at once
        d = np.abs(cands[start : start + 512, None, :] - seen[None, :, :]).sum(axis=2)
        nearest = d == d.min(axis=1, keepdims=True)
        out[start : start + 512] = (nearest * residual).sum(axis=1) / nearest.sum(axis=1)
    return out


class HFlowSearch:
    """Evolutionary workflow search with preference-steered selection and experience memory.

    Args:
        executor: runs workflows (task + backbone pool).
        config: search settings.
        problems: search problems fitness is measured on (default: a seeded sample of the task).
        rater: answers pairwise questions (None: no preferences).
        rater_problems: problems the rater's comparisons use (default: the search problems);
            a disjoint set shows the rater answers the fitness sample never saw.
        memory: experience memory (None: a fresh in-memory one).
        preferences: comparison store (None: a fresh in-memory one; pass a file-backed store to
            keep every answer).
        seeds: extra workflows for the first population.
        heldout: problems never used by the search, for :meth:`heldout_report`.
        trace_log: JSONL the evaluator streams every trace to and resumes from.
        validation: problems that confirm leaders (``SearchConfig.confirm_top``); default: the
            rater problems that are not search problems.
    """

    def __init__(
        self,
        executor: WorkflowExecutor,
        config: SearchConfig | None = None,
        problems: list[dict[str, Any]] | None = None,
        rater: Rater | None = None,
        rater_problems: list[dict[str, Any]] | None = None,
        memory: ExperienceMemory | None = None,
        preferences: PreferenceStore | None = None,
        seeds: list[Workflow] | None = None,
        heldout: list[dict[str, Any]] | None = None,
        trace_log: str | None = None,
        validation: list[dict[str, Any]] | None = None,
    ) -> None:
        self.config = config or SearchConfig()
        self.executor = executor
        self.task = executor.task
        self.pool = executor.pool
        self.evaluator = Evaluator(executor, self.config.lambda_cost, trace_log)
        self.problems = problems or self.task.sample(self.config.eval_problems, seed=self.config.seed)
        self.rater = rater
        self.rater_problems = rater_problems or self.problems
        self.heldout = list(heldout or [])
        search_ids = {p["id"] for p in self.problems}
        if validation is None:
            validation = [p for p in self.rater_problems if p["id"] not in search_ids]
        self.validation = [p for p in validation if p["id"] not in search_ids]
        # hashes of individuals whose fitness is the pooled one over search + validation problems
        self.confirmed: set[str] = set()
        self.memory = memory if memory is not None else ExperienceMemory()
        # `is not None`: an empty store is falsy, and replacing it would drop its file.
        self.preferences = preferences if preferences is not None else PreferenceStore()
        self.preference_model = PreferenceModel(flip_rate=self.config.rater_flip_rate)
        # Tasks with tools get the agent operators (episodes in a world), others the single-turn ones.
        self.agent_task = has_tools(self.task)
        self.operators = list(operators_for(self.task))
        self.optimizer = None
        if self.config.optimizer_backbone is not None:
            self.optimizer = ReflectiveOptimizer(
                self.pool,
                self.config.optimizer_backbone,
                self.task.name,
                max_tokens=self.config.optimizer_max_tokens,
                seed=self.config.seed,
                structure_edits=AGENT_STRUCTURE_EDITS if self.agent_task else None,
            )
        self.extra_seeds = list(seeds or [])
        self.rng = random.Random(self.config.seed)
        # preference_built_pairs draw from their own generator (feature, problem and side order):
        # drawn from self.rng they changed the search's path, and run 37 found that alone sending
        # more HumanEval searches into costlier workflows
        self.built_rng = random.Random(f"built pairs {self.config.seed}")
        self.population: list[Individual] = []
        self.generation = 0
        self.history: list[dict[str, Any]] = []
        self.seen: dict[str, Individual] = {}
        # (budget spent so far, best fitness, its accuracy, its hash) after every evaluation
        self.best_so_far: list[tuple[int, float, float, str]] = []
        self.questions_asked = 0
        self._budget: int | None = None  # run_until's, which the final round stays within
        # preference_polish: each parent polished -> the child evaluated for it (None: no edit gained)
        self.polished: dict[str, str | None] = {}
        self._screened: set[str] = set()
        # preference_built_pairs: unevaluated workflows a built pair ran (hash -> workflow; the
        # preference model must know them to learn from their answers), and the ones the rater
        # preferred this generation, waiting to be children: (workflow, edit, parent hash)
        self.built: dict[str, Workflow] = {}
        self._built_liked: list[tuple[Workflow, str, str]] = []
        # preference_built_pairs in file mode: the built questions waiting for a person (child
        # hash -> feature, edit, parent hash, problem, and whether the edit winning is one the
        # fitness explains), so the answer, read back later, acts as an immediate one does
        self._built_waiting: dict[str, dict[str, Any]] = {}
        # file mode, rebuilding built questions (_built_edit): (workflow hash, other hash) -> (other
        # workflow, edit, taste features it brings in) when the other is such a structural single
        # edit, else None. Asked for every stored built answer twice a generation, and listing
        # neighbours hashes some fifty workflows (~35 ms); a pure function of the two workflows
        # and the search's settings, so never reset.
        self._edit_of: dict[tuple[str, str], tuple[Workflow, str, list[str]] | None] = {}
        # preference_built_reach: features whose built edit the rater preferred to the best
        self.built_won: set[str] = set()
        self._fit_preferences()

    # ------------------------------------------------------------------------ helpers
    @property
    def backbone_names(self) -> list[str]:
        """Backbones workflows may use."""
        return self.pool.names

    @property
    def spent(self) -> int:
        """Budget spent: problem runs plus optimizer calls (one problem run each)."""
        return self.evaluator.problem_runs + (self.optimizer.calls if self.optimizer else 0)

    def _known_workflows(self) -> dict[str, Workflow]:
        known = dict(self.built)
        known.update({h: i.workflow for h, i in self.seen.items()})
        known.update({i.hash: i.workflow for i in self.population})
        return known

    def _fit_preferences(self) -> None:
        covariates = self._answer_covariates if self.config.preference_residual else None
        fitted = [c for c in self.preferences.comparisons if c.fitted]
        self.preference_model.fit(fitted, self._known_workflows(), covariates)

    def _answer_covariates(self, c: Comparison) -> tuple[float, float]:
        """What the search's own objectives see of an answer (``preference_residual``): the two
        traces' score difference and cost contrast (:func:`_cost_contrast`) on the problem asked;
        the workflows' accuracy and mean cost when a trace is not at hand (an answer from an
        earlier run whose traces were not kept), 0 when neither is."""
        ta = self.evaluator.cache.get((c.a, c.problem_id))
        tb = self.evaluator.cache.get((c.b, c.problem_id))
        if ta is not None and tb is not None:
            return float(ta["score"]) - float(tb["score"]), _cost_contrast(ta["cost"], tb["cost"])
        ia, ib = self.seen.get(c.a), self.seen.get(c.b)
        if ia is not None and ib is not None:
            return ia.accuracy - ib.accuracy, _cost_contrast(ia.cost, ib.cost)
        return 0.0, 0.0

    def preference_score(self, ind: Individual) -> float:
        """The preference model's score of an individual (0 without answers)."""
        return self.preference_model.score(ind.workflow)

    def _fresh(self, workflow: Workflow) -> bool:
        """Not evaluated yet, not even partly (a child screened out by racing counts as seen)."""
        h = workflow.hash()
        return h not in self.seen and h not in self._screened

    def _reject(self, parent: Workflow, child: Workflow, edit: str) -> bool:
        # Memory in the loop: do not pay twice for a child already evaluated, nor repeat an edit
        # that already made this parent worse.
        if not self._fresh(child):
            return True
        return self.config.use_memory and edit in self._failed.get(parent.hash(), set())

    def _mutator(self, reject: Callable[[Workflow, Workflow, str], bool] | None = None) -> Mutator:
        """The mutation operator, steered by memory; ``reject`` replaces the default rule (:meth:`_reject`)."""
        domain, task, use = self.task.domain, self.task.name, self.config.use_memory
        return Mutator(
            self.backbone_names,
            self.rng,
            self.config.max_nodes,
            op_weights=self.memory.steering(task, domain, "op_stats", self.operators) if use else None,
            edit_weights=self.memory.steering(task, domain, "edit_stats", EDIT_KINDS) if use else None,
            backbone_weights=self.memory.steering(task, domain, "backbone_stats", self.backbone_names) if use else None,
            optimizer=self._rewrite_prompt if self.optimizer else None,
            code_task=self.task.domain == "code",
            reject=reject or self._reject,
            agent_task=self.agent_task,
            choice_weights=self._steered_choices(self._choice_weights() if use else None),
        )

    def _steered_choices(self, weights: dict[str, float] | None) -> dict[str, float] | None:
        """``weights`` (memory's) times what the preference model likes (``preference_steering``;
        with ``preference_certainty`` the weights shrunk by their posterior variance)."""
        k = self.config.preference_steering
        if k <= 0 or not self.preferences.comparisons or not len(self.preference_model.vocab):
            return weights
        out = dict(weights or {})

        c, model = self.config.preference_certainty, self.preference_model

        def factor(feature: str) -> float:
            return math.exp(max(-2.0, min(2.0, k * model.certain_feature_weight(feature, c))))

        for op in self.operators:
            f = factor(f"op:{op}")
            for kind in ("add", "replace"):
                out[f"{kind}:{op}"] = out.get(f"{kind}:{op}", 1.0) * f
        for b in self.backbone_names:
            out[f"backbone:{b}"] = out.get(f"backbone:{b}", 1.0) * factor(f"backbone:{b}")
        return out

    def _choice_weights(self) -> dict[str, float] | None:
        """Memory's weights of what edits choose (``add:refine``, ``backbone:mid``): which
        operator an add or replace brings in and which backbone a move goes to pays differently
        (``SearchConfig.steer_choices``)."""
        if not self.config.steer_choices:
            return None
        keys = [f"{k}:{op}" for k in ("add", "replace") for op in self.operators]
        keys += [f"backbone:{b}" for b in self.backbone_names]
        return self.memory.steering(self.task.name, self.task.domain, "choice_stats", keys)

    def _failures(self, workflow: Workflow) -> list[tuple[dict, dict]]:
        h = workflow.hash()
        out = []
        for p in self.problems:
            t = self.evaluator.cache.get((h, p["id"]))
            if t is not None and t["score"] < 1.0:
                out.append((p, t))
        return out

    def _rewrite_prompt(self, workflow: Workflow, node) -> str:
        parent = self.seen.get(workflow.hash())
        other = self._second_parent(workflow)
        return self.optimizer.propose_prompt(
            workflow,
            node,
            parent.fitness if parent else float("nan"),
            self._failures(workflow),
            other,
            self._failed.get(workflow.hash(), set()),
            self.generation,
        )

    def _second_parent(self, workflow: Workflow) -> tuple[Workflow, float] | None:
        others = [i for i in self.population if i.hash != workflow.hash()]
        if not others:
            return None
        best = max(others, key=lambda i: i.fitness)
        return best.workflow, best.fitness

    def _evaluate_many(
        self, workflows: list[Workflow], problems: list[dict[str, Any]] | None = None
    ) -> list[EvalResult]:
        problems = self.problems if problems is None else problems
        # Distinct workflows only: two threads running the same workflow would both miss the cache.
        unique: dict[str, Workflow] = {}
        for wf in workflows:
            unique.setdefault(wf.hash(), wf)
        items = list(unique.items())
        if self.config.workers > 1 and len(items) > 1:
            with ThreadPoolExecutor(max_workers=self.config.workers) as ex:
                results = list(ex.map(lambda kv: self.evaluator.evaluate(kv[1], problems, self.generation), items))
        else:
            results = [self.evaluator.evaluate(wf, problems, self.generation) for _, wf in items]
        by_hash = dict(zip(unique, results))
        return [by_hash[wf.hash()] for wf in workflows]

    def _score(self, individuals: list[Individual]) -> list[float]:
        """Selection score: fitness (or Pareto rank) plus the preference weight times the model's
        score (with ``preference_certainty``, the score shrunk by its posterior variance)."""
        w = self.config.preference_weight if self.preferences.comparisons else 0.0
        # 2 sigmoid - 1 of the log-odds score: a bonus in fitness units bounded by the weight, so
        # a confident taste trades at most that much fitness instead of overriding it.
        c, model = self.config.preference_certainty, self.preference_model
        pref = [w * math.tanh(model.certain_score(i.workflow, c) / 2) if w else 0.0 for i in individuals]
        if self.config.objective == "pareto":
            ranks = pareto_front([(i.accuracy, i.cost) for i in individuals])
            return [-r + 0.5 * math.tanh(i.fitness) + p for r, i, p in zip(ranks, individuals, pref)]
        return [i.fitness + p for i, p in zip(individuals, pref)]

    def _record(self, ind: Individual, parent_fitness: float | None, spent: int | None = None) -> None:
        self.seen[ind.hash] = ind
        self.memory.record_evaluation(self.task.name, self.task.domain, ind.workflow, ind.fitness)
        if parent_fitness is not None and ind.edit not in ("seed", "none", "immigrant"):
            delta = ind.fitness - parent_fitness
            self.memory.record_edit(
                self.task.name, self.task.domain, ind.edit, ind.parent, ind.hash, delta, self.generation
            )
            if delta < 0:
                self._failed.setdefault(ind.parent, set()).add(ind.edit)
        self._note_best(spent)

    def _note_best(self, spent: int | None = None) -> None:
        best = self.best_by_fitness()
        self.best_so_far.append((self.spent if spent is None else spent, best.fitness, best.accuracy, best.hash))

    def _returnable(self) -> list[Individual]:
        """Who may be returned: the confirmed individuals once any are (``confirm_top``), else all seen."""
        confirmed = [self.seen[h] for h in self.confirmed if h in self.seen]
        return confirmed or list(self.seen.values())

    def _within_reach(self, pool: list[Individual]) -> list[Individual]:
        """The members of ``pool`` the choice may trade for the rater's taste: fitness within
        their :meth:`_reach_delta` of the best, or (``preference_delta_se``) a gap to the best of
        at most that many standard errors of their paired per-problem difference."""
        best = max(pool, key=lambda i: (i.fitness, -i.cost, i.hash))
        tastes = self._tastes()
        near = [i for i in pool if i.fitness >= best.fitness - self._reach_delta(i.workflow, tastes) - 1e-12]
        z = self.config.preference_delta_se
        if z <= 0:
            return near
        inside = {i.hash for i in near}
        for ind in pool:
            if ind.hash in inside:
                continue
            theirs, mine = self._per_problem_fitness(best, ind), self._per_problem_fitness(ind, best)
            if theirs is None or mine is None or len(mine) < 2:
                continue
            diff = [a - b for a, b in zip(theirs, mine)]
            if best.fitness - ind.fitness <= z * statistics.stdev(diff) / math.sqrt(len(diff)) + 1e-12:
                near.append(ind)
        return near

    def _reach_delta(self, workflow: Workflow | None = None, tastes: list[Taste] | None = None) -> float:
        """The fitness the choice may trade for the rater's taste in ``workflow``:
        ``preference_delta``, plus ``preference_taste_delta`` when ``workflow`` carries a taste the
        answers show (:meth:`_tastes`, passed as ``tastes`` when already at hand). Without a
        workflow: the widest reach any workflow has now (the choice report's ``delta``).

        Only the taste's own workflows get the wider reach: run 40b found a reach widened for
        every workflow, opened by a tasteless rater's flips, costing GSM8K 1.4 points of accuracy."""
        cfg = self.config
        tastes = self._tastes() if tastes is None else tastes
        if tastes and (workflow is None or carries_taste(_present(workflow), tastes)):
            return cfg.preference_delta + cfg.preference_taste_delta
        return cfg.preference_delta

    def _tastes(self) -> list[Taste]:
        """The tastes for workflow features the rater's decided answers show
        (:func:`~lightning_agents.hflow.taste.detect_tastes` at ``preference_taste_alpha``): where
        its answers go against the objectives, not how often, so random flips at any rate open
        it about ``alpha`` of the time and no flip rate is modelled. Empty without a rater, without
        answers, or with ``preference_taste_delta`` 0 (nothing to widen)."""
        cfg = self.config
        if self.rater is None or cfg.preference_taste_delta <= 0 or not self.preferences.comparisons:
            return []
        return detect_tastes(self._taste_answers(), cfg.preference_taste_alpha)

    def _taste_answers(self) -> list[TasteAnswer]:
        """The decided answers as :class:`~lightning_agents.hflow.taste.TasteAnswer`: the side the
        objectives favour read as :meth:`_answers_against_objectives` reads it (the higher score,
        then the lower cost). Answers whose two sides the objectives cannot tell apart (same score,
        no cost contrast, or nothing known of either) and answers about a workflow no longer known
        are left out: there is no side for the rater to go against."""
        known = self._known_workflows()
        out = []
        for c in self.preferences.comparisons:
            if c.winner not in ("a", "b") or c.a not in known or c.b not in known:
                continue
            score, cost = self._answer_covariates(c)
            if _objectives_explain(score, cost):
                favoured = "a"
            elif _objectives_explain(-score, -cost):
                favoured = "b"
            else:
                continue
            fa, fb = _present(known[c.a]), _present(known[c.b])
            winner, loser = (fa, fb) if favoured == "a" else (fb, fa)
            out.append(TasteAnswer(winner, loser, c.winner != favoured))
        return out

    def _per_problem_fitness(self, ind: Individual, other: Individual) -> list[float] | None:
        """``ind``'s fitness on each problem its fitness and ``other``'s share (the search problems,
        plus the validation problems when both are confirmed), from the evaluator's cache; None
        when a trace is missing (dropped by :meth:`refresh`)."""
        problems = self.problems
        if ind.hash in self.confirmed and other.hash in self.confirmed:
            problems = self.problems + self.validation
        cache, lam = self.evaluator.cache, self.config.lambda_cost
        traces = [cache.get((ind.hash, p["id"])) for p in problems]
        if any(t is None for t in traces):
            return None
        return [t["score"] - lam * t["cost"] for t in traces]

    def _to_confirm(self) -> Individual | None:
        """The next individual to confirm, or None: the choice rule (:meth:`choose`) applied to the
        confirmed individuals and the unconfirmed ones within :meth:`_reach_delta` of the best
        confirmed fitness; if the best by fitness there or the chosen one is unconfirmed, it is."""
        top = max((self.seen[h].fitness for h in self.confirmed if h in self.seen), default=-math.inf)
        tastes = self._tastes()
        pool = [
            i
            for i in self.seen.values()
            if i.hash in self.confirmed or i.fitness >= top - self._reach_delta(i.workflow, tastes) - 1e-12
        ]
        if not pool:
            return None
        chosen, report = self._choice(pool)
        for h in (report["by_fitness"], chosen.hash):
            if h not in self.confirmed:
                return self.seen[h]
        return None

    def confirm(self, limit: int | None = None) -> int:
        """Run leaders on the validation problems as well; returns how many were confirmed.

        On the search problems alone the luckiest of many close workflows comes out on top (a
        winner's curse: with 40 problems the standard error of an accuracy is ~0.06, as large as
        the gaps between the best workflows). So the workflow the choice rule would return (the most
        preferred within reach of the best fitness, :meth:`_within_reach`) and the best by fitness it is
        measured against are run on :attr:`validation` too whenever they are not yet, at most
        ``limit`` (default ``confirm_top``) a call; their accuracy, cost and fitness become the
        means over search + validation problems, in the population too. Only confirmed
        individuals are returned once any are.
        """
        k = self.config.confirm_top if limit is None else limit
        if k <= 0 or not self.validation:
            return 0
        done = 0
        while done < k:
            ind = self._to_confirm()
            if ind is None:
                break
            res = self.evaluator.evaluate(ind.workflow, self.problems + self.validation, self.generation)
            ind.accuracy, ind.cost, ind.fitness = res.accuracy, res.cost, res.fitness
            self.confirmed.add(ind.hash)
            done += 1
        if done:
            self._note_best()
        return done

    @property
    def _failed(self) -> dict[str, set[str]]:
        cache = getattr(self, "_failed_cache", None)
        if cache is None:
            cache = {}
            for r in self.memory.data["lineage"]:
                if r["task"] == self.task.name and r["delta"] < 0:
                    cache.setdefault(r["parent"], set()).add(r["edit"])
            self._failed_cache = cache
        return cache

    def _affordable(self, workflow: Workflow, cap: float) -> bool:
        """Whether ``workflow``'s price of one search-set evaluation, measured on the first
        ``starter_probe_problems`` search problems, is at most ``cap`` dollars. The probe is paid
        (its runs count as spent) and its traces cached, so a kept starter reuses them."""
        probe = self.problems[: self.config.starter_probe_problems]
        res = self.evaluator.evaluate(workflow, probe, self.generation)
        return res.cost * len(self.problems) <= cap

    # ---------------------------------------------------------------------- the loop
    def initialize(self, dollars: float | None = None) -> None:
        """Build and evaluate the first population (memory seeds, single-call baselines, random).

        ``dollars``: the search's dollar budget (:meth:`run_until` passes its own); with
        ``starter_dollar_share`` it caps what one random starter's search-set evaluation may cost.
        """
        mutator = self._mutator()
        seeds: list[Workflow] = list(self.extra_seeds)
        if self.config.use_memory:
            seeds += self.memory.seeds(self.task.domain, self.backbone_names, self.config.max_nodes)
        seeds += default_seeds(self.backbone_names, agent=self.agent_task)
        share = self.config.starter_dollar_share
        cap = share * dollars if share > 0 and dollars is not None else None
        attempts = 0
        while len({w.hash() for w in seeds}) < self.config.population_size and attempts < 50:
            wf = mutator.random_workflow()
            attempts += 1
            if cap is not None and wf.hash() not in {w.hash() for w in seeds} and not self._affordable(wf, cap):
                continue
            seeds.append(wf)
        unique: dict[str, Workflow] = {}
        for wf in seeds:
            wf.validate(self.backbone_names, self.config.max_nodes)
            unique.setdefault(wf.hash(), wf)
        workflows = list(unique.values())[: max(self.config.population_size, len(self.extra_seeds))]
        spent = self.spent
        for wf, res in zip(workflows, self._evaluate_many(workflows)):
            ind = Individual(wf, res.accuracy, res.cost, res.fitness, "seed", "", 0)
            spent += res.new_runs
            self.population.append(ind)
            self._record(ind, None, spent)
        self.confirm()
        self._log_generation()

    def refresh(self, backbone: str) -> int:
        """Re-score after ``backbone`` changed (e.g. the model being trained took optimizer steps).

        Cached traces of workflows that use it are dropped and population members that use it are
        evaluated again, so their fitness reflects the current weights. Returns the members re-scored.
        """
        self.evaluator.invalidate_backbone(backbone, self._known_workflows())
        stale = [i for i in self.population if backbone in i.workflow.backbones()]
        for ind, res in zip(stale, self._evaluate_many([i.workflow for i in stale])):
            ind.accuracy, ind.cost, ind.fitness = res.accuracy, res.cost, res.fitness
            self.seen[ind.hash] = ind
        # Individuals evaluated with old weights and no longer in the population are forgotten,
        # so best() never reports a score the current model did not earn.
        fresh = {i.hash for i in stale}
        for h in [h for h, i in self.seen.items() if backbone in i.workflow.backbones() and h not in fresh]:
            del self.seen[h]
        return len(stale)

    def _contenders(self) -> list[Individual]:
        """Who questions are about: every workflow near the best fitness, the population, and the
        best dozen evaluated. Only near-best ones can be returned, but a taste is learned from
        pairs that differ in it: with near-best contenders alone, a feature none of them has
        (a step-by-step step, say) is never asked about, and the search is never steered to it."""
        near = self._within_reach(list(self.seen.values()))
        by_fitness = sorted(self.seen.values(), key=lambda i: (-i.fitness, i.cost, i.hash))
        out: dict[str, Individual] = {}
        for i in sorted(near, key=lambda i: (-i.fitness, i.cost, i.hash))[:24] + self.population + by_fitness[:12]:
            out.setdefault(i.hash, i)
        return list(out.values())

    def ask_preferences(self) -> int:
        """Ask up to ``questions_per_generation`` questions (plus the built pairs'); returns how
        many were answered.

        Pairs are the most informative among the contenders (:meth:`PreferenceModel.informativeness`:
        uncertain about the pair, not already sure of the answer), each asked on a rater problem
        where the two answers differ (a question whose answers agree tells nothing). The model is
        refitted after every answer so the next pair reflects it. With
        ``preference_built_pairs``, the first questions are about pairs the search builds
        (:meth:`_ask_built`), asked on top of the contenders': run 37 found them taking about 7 of
        a HumanEval search's 23 contender slots, which changed its path and cost its main search
        fitness and target (c); run 38 moved them on top.
        """
        if self.rater is None:
            return 0
        self._ingest_file_answers()
        self._settle_built()
        if self.config.questions_per_generation <= 0 or len(self.seen) < 2:
            return 0
        contenders = self._contenders()
        if len(contenders) < 2:
            return 0

        def pairs(tried: set[tuple[str, str]]) -> list[tuple[Individual, Individual]]:
            return [
                (a, b) for x, a in enumerate(contenders) for b in contenders[x + 1 :] if (a.hash, b.hash) not in tried
            ]

        answered = 0
        if self.config.preference_built_pairs > 0:
            answered = self._ask_built(self.config.preference_built_pairs)
        answered += self._ask(pairs, self.config.questions_per_generation)
        self._settle_built()  # an answer _ask released (its line gone from the file) decides now
        if self.config.preference_built_reach > 0:
            reached = self._reach_child()
            if reached is not None:
                self._built_liked.append(reached)
        return answered

    def _most_liked_missing(self, parent: Workflow) -> str | None:
        """Of the features ``parent`` lacks whose built edit the rater preferred to the best
        (:attr:`built_won`), the one the answers like most surely: the largest fitted weight in
        posterior standard deviations (:meth:`PreferenceModel.feature_variance`), above 0 (ties:
        the alphabet); None when there is none.

        Only built pairs count: both sides answer the question right, so the answer is about the
        feature, whereas a weight fitted on the contenders' answers also carries what the
        fitter workflows share (a strong backbone, a format step). With
        ``preference_reach_ops`` only operator features (``op:``) count (run 31 reached for
        ``output:cot``, a final step replaced by a call that answers worse). With
        ``preference_reach_as_op`` a won ``op@backbone:X@b`` or ``output:X`` stands for ``op:X``
        (:func:`_as_op`), at the won feature's sureness."""
        model = self.preference_model
        have = workflow_features(parent)
        best, best_z = None, 0.0
        for won in sorted(self.built_won):
            k = _as_op(won) if self.config.preference_reach_as_op else won
            if have.get(k) or (self.config.preference_reach_ops and not k.startswith("op:")):
                continue
            z = model.feature_weight(won) / math.sqrt(model.feature_variance(won))
            if z > best_z:
                best, best_z = k, z
        return best

    def _reach_child(self) -> tuple[Workflow, str, str] | None:
        """``(workflow, edit, parent hash)`` for ``preference_built_reach``: of the fresh
        workflows up to that many structural edits (add, remove, replace, backbone) from the best
        by fitness that bring in the feature the best lacks that the answers like most surely
        (:meth:`_most_liked_missing`), the one a fitness regression on the evaluated workflows
        predicts fittest (:meth:`_predicted_fitness`; ties: fewer edits, then the neighbours'
        order); None when nothing is liked, the best has it all, or no such workflow is fresh.

        Run 30 found the searches settle on shapes where every single edit bringing in a liked
        step costs more than ``preference_delta``, while the near-optimal workflows with it are
        a different, smaller shape two edits away. The answers already said they like the
        feature, so the pick is not asked about again: it is one of the generation's children
        (its runs paid and counted like any child's), evaluated on every search problem, never
        raced: a different shape's first few problems are too few to judge it by (run 31 found
        every reach child screened out). With ``preference_reach_small`` the candidates also include
        the small shapes (:meth:`small_workflows`, edit ``reach:small``). No run is paid and no
        random draw made to find it."""
        parent = self.best_by_fitness()
        liked = self._most_liked_missing(parent.workflow)
        if liked is None:
            return None
        mutator = self._neighbour_mutator()
        found: dict[str, tuple[Workflow, list[str]]] = {parent.hash: (parent.workflow, [])}
        frontier = [(parent.workflow, [])]
        for _ in range(self.config.preference_built_reach):
            nxt = []
            for wf, path in frontier:
                for child, edit in _structural_neighbours(mutator, wf):
                    if child.hash() not in found:
                        found[child.hash()] = (child, path + [edit])
                        nxt.append((child, path + [edit]))
            frontier = nxt
        # (workflow, its hash, its features, edits from the best)
        options = [(wf, h, workflow_features(wf), path) for h, (wf, path) in found.items() if path]
        known = set(found)
        for wf, h, feats in self.small_workflows():  # preference_reach_small: the small shapes too
            if h not in known:
                options.append((wf, h, feats, ["small"]))
        queued = {wf.hash() for wf, _, _ in self._built_liked}
        options = [
            o
            for o in options
            if o[2].get(liked)
            and o[1] not in queued  # a built edit already on its way to be a child
            and o[1] not in self.seen
            and o[1] not in self._screened
            and not (len(o[3]) == 1 and o[3][0] != "small" and self._reject(parent.workflow, o[0], o[3][0]))
        ]
        if not options:
            return None
        predicted = self._predicted_fitness([o[2] for o in options])
        pick = max(range(len(options)), key=lambda j: (round(predicted[j], 9), -len(options[j][3]), -j))
        wf, _, _, path = options[pick]
        log.info(
            "reach child of best %s for %s: %s %s (predicted fitness %.3f)",
            parent.hash,
            liked,
            "+".join(path),
            wf.describe(),
            predicted[pick],
        )
        return wf.copy(), "reach:" + "+".join(path), parent.hash

    def small_workflows(self) -> list[tuple[Workflow, str, Counter]]:
        """``(workflow, hash, features)`` for every workflow of at most ``preference_reach_small``
        nodes (and ``max_nodes``) that structural edits (:meth:`Mutator.neighbours`: add, remove,
        replace, backbone) build from the single calls (:func:`default_seeds`), editing only the
        workflows below that many nodes (or of one node), in the order found; empty when the
        setting is 0. No run paid, no draw made; listed once per process and setting (about
        3,400 workflows and 2 s for 3 nodes on three backbones with tests), so callers copy a
        workflow before using it.

        The library's own version of the enumeration the benchmarks use to know the optimum:
        run 30 found the near-optimal workflows with a liked step (a step-by-step call then two
        tests) a small shape two or more edits from where the searches settle."""
        n = min(self.config.preference_reach_small, self.config.max_nodes)
        if n <= 0:
            return []
        key = (tuple(self.backbone_names), n, self.task.domain == "code", self.agent_task)
        if key not in _SMALL:
            mutator = Mutator(self.backbone_names, random.Random(0), n, code_task=key[2], agent_task=key[3])
            found = {wf.hash(): wf for wf in default_seeds(self.backbone_names, agent=self.agent_task)}
            frontier = list(found.values())
            while frontier:
                nxt = []
                for wf in frontier:
                    # a workflow of n nodes (n > 1) is not edited further: editing them all costs
                    # ~20 times more, for the few shapes only a replace of a grown node makes
                    for child, _ in _structural_neighbours(mutator, wf) if len(wf.nodes) < max(n, 2) else ():
                        if child.hash() not in found:
                            found[child.hash()] = child
                            nxt.append(child)
                frontier = nxt
            _SMALL[key] = [(wf, h, workflow_features(wf)) for h, wf in found.items()]
        return _SMALL[key]

    def _predicted_fitness(self, workflows: list[Counter]) -> list[float]:
        """Fitness of each of ``workflows`` (their :func:`workflow_features`) as a ridge regression (precision 1, free intercept)
        of fitness on the taste features (:data:`_TASTE_KINDS`) of every evaluated workflow
        predicts it (run 30's fit): only the search's own evidence, no run paid. A workflow
        sharing what the fitter ones share (a final test, a call on a strong backbone) is
        predicted fit. With ``preference_reach_anchor`` each prediction adds the residual
        (fitness minus fit) of the nearest evaluated workflow (:func:`_nearest_residual`).
        All zeros before two workflows are evaluated."""
        seen = [i for i in self.seen.values() if math.isfinite(i.fitness)]
        if len(seen) < 2:
            return [0.0] * len(workflows)

        def taste(feats: Counter) -> dict[str, int]:
            return {k: v for k, v in feats.items() if k.split(":")[0] in _TASTE_KINDS}

        rows = [taste(workflow_features(i.workflow)) for i in seen]
        # a feature no evaluated workflow has carries no evidence: left out of the candidates' rows
        index = {k: j for j, k in enumerate(sorted(set().union(*rows)))}
        x = _feature_rows(rows, index, intercept=True)
        y = np.array([i.fitness for i in seen])
        prior = np.eye(len(index) + 1)
        prior[-1, -1] = 0.0  # the intercept is free: only the features are shrunk
        beta = np.linalg.solve(x.T @ x + prior, x.T @ y)
        tastes = [taste(feats) for feats in workflows]
        predicted = np.array([row @ beta for row in _feature_rows(tastes, index, intercept=True)])
        if self.config.preference_reach_anchor:
            predicted += _nearest_residual(tastes, rows, y - x @ beta)
        return [float(v) for v in predicted]

    def _ask_built(self, limit: int) -> int:
        """Ask up to ``limit`` questions about pairs the search builds
        (``SearchConfig.preference_built_pairs``; docs/benchmarks.md, run 29); returns how many
        were answered.

        Runs 27-28 found the model blind to a taste where the search had never evaluated a
        workflow with it (nothing to ask about), or asked once among ~35 answers about
        correctness and cost. So the search makes the contrast itself: the best workflow by
        fitness against its unevaluated structural edit bringing in the feature the answers
        pinned least (:meth:`_built_pair`), on one search problem (the edit's run paid, the
        best's cached). An edit the rater prefers waits in :attr:`_built_liked` to be one of the
        generation's children, unless the answer is one the fitness explains
        (:func:`_for_the_objectives`: the edit right where the best is wrong, or cheaper at the
        same score), which says nothing of a taste (run 35); such an answer is kept but not
        fitted either (:meth:`_answer`, run 38). A question that waits for a person (file mode)
        is recorded in :attr:`_built_waiting` and decided the same way once its answer is read
        back (:meth:`_settle_built`). A pair whose answers agree on every problem
        drawn asks nothing, and the next feature is tried, at most ``3 * limit`` a round. Every
        random draw here is :attr:`built_rng`'s, never the search's.
        """
        parent = self.best_by_fitness()
        asked = answered = 0
        tried: set[str] = set()
        while asked < limit and len(tried) < 3 * limit:
            found = self._built_pair(parent, tried)
            if found is None:
                break
            feature, child, edit = found
            tried.add(feature)
            self.built[child.hash()] = child  # known to the model before its answer is fitted
            got = self._question_problem(parent.workflow, child, self.problems)
            if got is None:
                continue
            problem, tp, tc = got
            asked += 1
            pair = [(parent.hash, tp), (child.hash(), tc)]
            if self.built_rng.random() < 0.5:
                pair.reverse()  # no position bias
            (a, ta), (b, tb) = pair
            winner = self._answer(a, b, problem, ta, tb, built=True)
            if winner is None:  # waits for a person: decided when the answer is read back
                self._built_waiting[child.hash()] = _waiting_record(
                    feature, edit, parent.hash, problem["id"], tp, tc, ((a, ta), (b, tb))
                )
                continue
            answered += 1
            liked = {"a": a, "b": b}.get(winner) == child.hash()
            # an edit liked for what the fitness already measures (right where the best is wrong,
            # or cheaper at the same score) is no taste: no child, no won feature for the reach
            if liked and not _for_the_objectives(tc, tp):
                self._like_built(child, edit, parent.hash, feature)
            said = "tie" if winner == "tie" else ("the edit" if liked else "the best")
            log.info(
                "built pair on %s: best %s vs edit %s (%s): %s preferred",
                feature,
                parent.hash,
                child.hash(),
                edit,
                said,
            )
        return answered

    def _neighbour_mutator(self) -> Mutator:
        """A mutator for listing a workflow's structural neighbours (``neighbours()`` draws nothing):
        its own fixed generator, so the search's random stream stays untouched."""
        return Mutator(
            self.backbone_names,
            random.Random(0),
            self.config.max_nodes,
            code_task=self.task.domain == "code",
            agent_task=self.agent_task,
        )

    def _built_pair(self, parent: Individual, skip: set[str]) -> tuple[str, Workflow, str] | None:
        """``(feature, child, edit)``: of ``parent``'s structural single edits (add, remove,
        replace, backbone) that are fresh, not refused by the failed-edit rule and not yet built,
        the one that brings in (counts more of) the feature not in ``skip`` whose weight has the
        largest posterior variance (:meth:`PreferenceModel.feature_variance`), differing least
        from ``parent`` otherwise (ties: neighbours' fixed order); None when no edit brings one in.

        Prompt features are left out: a rewritten prompt belongs to one workflow, while an
        operator, output, backbone or setting is shared by many, so an answer about one steers
        the search. Equal variances (features no answer contrasted keep the prior's) go coarse
        first (operators, outputs, backbones, then settings), and within a kind the order is
        drawn: a fixed one (the alphabet) would favour some steps.
        """
        mutator = self._neighbour_mutator()
        base = workflow_features(parent.workflow)
        options: list[tuple[Workflow, str, set[str], int]] = []
        for child, edit in self._structural_edits(mutator, parent.workflow, self.built):
            feats = workflow_features(child)
            brings = _brought_in(base, feats) - skip
            if brings:
                apart = sum(abs(feats.get(k, 0) - base.get(k, 0)) for k in set(feats) | set(base))
                options.append((child, edit, brings, apart))
        if not options:
            return None
        features = sorted(set().union(*(o[2] for o in options)))
        self.built_rng.shuffle(features)
        feature = _least_pinned(self.preference_model, features)
        child, edit, _, _ = min((o for o in options if feature in o[2]), key=lambda o: o[3])
        return feature, child, edit

    def _question_problem(
        self, parent: Workflow, child: Workflow, problems: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], dict, dict] | None:
        """``(problem, trace of parent, trace of child)`` for a built pair's question: of up to
        ``_QUESTION_PROBLEMS`` problems drawn (those ``parent`` answered right, by its cached
        traces, first), the first where the answers differ and both are right, else the first
        where they differ; None when they agree on all. A right answer on both sides leaves the
        rater's taste to decide, not correctness."""
        cache = self.evaluator.cache
        order = list(problems)
        self.built_rng.shuffle(order)
        order.sort(key=lambda p: cache.get((parent.hash(), p["id"]), {"score": 0.0})["score"] < 1.0)
        first = None
        for problem in order[:_QUESTION_PROBLEMS]:
            (tp,), _ = self.evaluator.traces(parent, [problem], self.generation)
            (tc,), _ = self.evaluator.traces(child, [problem], self.generation)
            if tp["output"] == tc["output"]:
                continue
            if tp["score"] >= 1.0 and tc["score"] >= 1.0:
                return problem, tp, tc
            first = first or (problem, tp, tc)
        return first

    def ask_final_questions(self) -> int:
        """The final round (``final_questions``): questions about the workflow the choice would
        return against another that could be returned; returns how many were answered.

        Each pair is the current choice and the most informative other finalist (within reach of
        the best returnable one, :meth:`_within_reach`); the model is refitted after every
        answer, so when an answer overturns the choice the next question is about the new one. A
        pair may be asked again on another problem: with two finalists and a rater who flips one
        answer in seven, one answer would decide the choice alone.

        A person's answers read back here (file mode) are stored and fitted, so they count for the
        choice, but a built question one answers stays waiting (:attr:`_built_waiting`, kept in
        the state): no generation follows to make its edit a child, so the next generation of a
        resumed search decides it (:meth:`_settle_built`).
        """
        if self.rater is None or self.config.final_questions <= 0:
            return 0
        self._ingest_file_answers()
        pool = self._returnable()
        if len(pool) < 2:
            return 0
        finalists = self._within_reach(pool)

        def pairs(tried: set[tuple[str, str]]) -> list[tuple[Individual, Individual]]:
            leader, _ = self._choice(finalists)
            return [
                (leader, o)
                for o in finalists
                if o.hash != leader.hash and (leader.hash, o.hash) not in tried and (o.hash, leader.hash) not in tried
            ]

        return self._ask(pairs, self.config.final_questions, repeat=True)

    def _ask(
        self,
        candidate_pairs: Callable[[set[tuple[str, str]]], list[tuple[Individual, Individual]]],
        limit: int,
        repeat: bool = False,
    ) -> int:
        """Ask up to ``limit`` questions, each about the most informative of ``candidate_pairs(tried)``.

        ``tried`` holds the pairs not to ask about again in this round: every pair asked, or with
        ``repeat`` only those that got no answer (their answers agreed on the problems drawn, or
        the question waits for a person), so an answered pair can be asked again on another
        problem (a flipped answer is then outvoted rather than deciding alone).
        """
        answered = asked = drawn = 0
        tried: set[tuple[str, str]] = set()
        # With repeat (the final round, whose runs run_until keeps back at _QUESTION_RUNS a question), a pair
        # whose answers agree on every problem drawn costs runs too: every pair drawn counts
        # against the limit, and no pair is drawn that could take the spend past run_until's budget.
        while asked < limit and not (repeat and (drawn >= limit or self._over_budget(_QUESTION_RUNS))):
            drawn += 1
            pairs = candidate_pairs(tried)
            if not pairs:
                break
            ranked = sorted(
                pairs,
                key=lambda ab: (
                    -self.preference_model.informativeness(ab[0].workflow, ab[1].workflow),
                    ab[0].hash,
                    ab[1].hash,
                ),
            )
            a, b = ranked[0]
            pair = (a.hash, b.hash)
            if self.rng.random() < 0.5:
                a, b = b, a  # no position bias
            order = list(self.rater_problems)
            self.rng.shuffle(order)
            if repeat:  # never the same question twice
                done = {c.problem_id for c in self.preferences.comparisons if {c.a, c.b} == {a.hash, b.hash}}
                order = [p for p in order if p["id"] not in done]
            got_answer = False
            for problem in order[:_QUESTION_PROBLEMS]:
                (ta,), _ = self.evaluator.traces(a.workflow, [problem], self.generation)
                (tb,), _ = self.evaluator.traces(b.workflow, [problem], self.generation)
                if ta["output"] == tb["output"]:
                    continue
                asked += 1
                if self._answer(a.hash, b.hash, problem, ta, tb) is not None:
                    answered += 1
                    got_answer = True
                break
            if not (repeat and got_answer):
                tried.add(pair)
        if self.preferences.release():  # answers the replayed generation did not ask for still count
            self._fit_preferences()
        return answered

    def _answer(self, a: str, b: str, problem: dict[str, Any], ta: dict, tb: dict, built: bool = False) -> str | None:
        """Put "``a`` or ``b`` on ``problem``?" to the rater (their traces ``ta``, ``tb``), count
        the question, store the answer and refit; returns the winner (``a``, ``b``, ``tie``) or
        None when the question waits for a person.

        A ``built`` pair's answer the fitness explains (:func:`_explained`) is stored unfitted
        (``Comparison.fitted``): the model would learn accuracy and cost again from the search's
        own contrasts (run 37). One taken back after a restart is decided the same way (a file
        written before the mark has none), and so is one the rater's file gave and
        :meth:`_ingest_file_answers` stored already (:meth:`_read_back`): returned, not stored
        again."""
        self.questions_asked += 1
        # answered before a restart: the answer given then, not a second question
        taken = self.preferences.take(a, b, problem["id"])
        if taken is not None:
            if built and taken.fitted and _explained(taken.winner, ta, tb):
                # a file written before run 38 has no mark: decided as the answer given now would be
                taken = self.preferences.unfit(taken)
            replayed = getattr(self.rater, "replayed", None)  # a duck-typed rater may lack it
            if replayed is not None and taken.source == getattr(self.rater, "source", None):
                replayed(taken.winner)
            self._fit_preferences()
            return taken.winner
        read = self._read_back(a, b, problem["id"])
        if read is not None:
            winner = read.winner if read.a == a else {"a": "b", "b": "a"}.get(read.winner, read.winner)
            if built and read.fitted and _explained(winner, ta, tb):
                # read back before the restored state knew the pair was built (a restart from a
                # state saved before it was asked): marked now, as the answer given now would be
                self.preferences.unfit(read)
            self._fit_preferences()  # a built edit is known to the model only from now on
            return winner
        query = (problem, ta, tb, f"{a}-{b}-{problem['id']}")
        if built and isinstance(self.rater, FileRater):  # the file says so (other raters keep 4 arguments)
            winner = self.rater.compare(*query, built=True)
        else:
            winner = self.rater.compare(*query)
        if winner is not None:
            fitted = not (built and _explained(winner, ta, tb))
            self.preferences.add(Comparison(a, b, problem["id"], winner, self.rater.source, self.generation, fitted))
            self._fit_preferences()
        return winner

    def _ingest_file_answers(self) -> None:
        # A person may answer questions the search will not ask again (the population moved on):
        # every answer in the file counts, once, whichever way round it was asked; one that
        # preferences.jsonl kept before a restart (pending) is taken back, not added a second time
        # (evolve saves no state after finish(), so the next run finds those answers pending).
        answered = getattr(self.rater, "answered", None)
        if answered is None:
            return
        have = {(frozenset((c.a, c.b)), c.problem_id) for c in self.preferences.comparisons}
        new = 0
        for c in answered():
            key = (frozenset((c.a, c.b)), c.problem_id)
            if key in have:
                continue
            have.add(key)
            if self._waiting_for(c) is None and self._asked_built(c):
                # a state saved before the question has no record of it, and its replay may never
                # build the pair again: without one, a liked edit would never become a child
                self._rebuild_waiting(c)
            taken = self.preferences.take(c.a, c.b, c.problem_id)
            if taken is None:
                self.preferences.add(replace(c, fitted=False) if self._explained_built(c) else c)
            elif taken.fitted and self._explained_built(taken):
                self.preferences.unfit(taken)
            new += 1
        if new:
            self._fit_preferences()

    def _read_back(self, a: str, b: str, problem_id: str) -> Comparison | None:
        """The stored answer to "``a`` or ``b`` on ``problem_id``?" (either way round) that the
        rater's file gave (:meth:`_ingest_file_answers`); None when there is none or the rater
        reads no file. The file holds one answer a question: a search restarted from a state
        saved before it asked that question, or asking it again in a later generation, got the
        same answer from :meth:`FileRater.compare` and stored it a second time."""
        if getattr(self.rater, "answered", None) is None:
            return None
        source = self.rater.source
        for c in self.preferences.comparisons:
            if c.source == source and c.problem_id == problem_id and {c.a, c.b} == {a, b}:
                return c
        return None

    def _settle_built(self) -> None:
        """Decide every waiting built question (:attr:`_built_waiting`) that a stored answer
        answers (:meth:`_built_answered`): one read back from the rater's file, taken back after a
        restart, or read in a final round after which no generation ran."""
        self._rebuild_unrecorded()
        if self._built_waiting:
            for c in list(self.preferences.comparisons):
                self._built_answered(c)

    def _rebuild_unrecorded(self) -> None:
        """Rebuild the question (:meth:`_rebuild_waiting`) of every stored answer to a built pair
        (:meth:`_asked_built`) that no record covers and whose edit the search has not built: one
        read back before the search had evaluated its best (a state saved before the best was) is
        decided once the best is evaluated. The answer's mark follows the rebuilt question."""
        if getattr(self.rater, "answered", None) is None:
            return
        rebuilt = False
        for c in list(self.preferences.comparisons):
            if c.source != self.rater.source or self._waiting_for(c) is not None or not self._asked_built(c):
                continue
            if self._rebuild_waiting(c):
                rebuilt = True
                if c.fitted and self._explained_built(c):
                    self.preferences.unfit(c)
        if rebuilt:
            self._fit_preferences()  # the edit is known to the model from now on

    def _built_answered(self, c: Comparison) -> None:
        """Decide a waiting built question (:attr:`_built_waiting`) that ``c``, a stored answer,
        answers, as :meth:`_ask_built` decides an answer given at once: an edit preferred not for
        the objectives waits in :attr:`_built_liked` to be a child and its feature is won
        (:attr:`built_won`). Each question is decided once (its record goes). An edit evaluated
        meanwhile (not fresh) or already queued is not queued again; its feature is won all the
        same."""
        child = self._waiting_for(c)
        if child is None:
            return
        waiting = self._built_waiting.pop(child)
        liked = {"a": c.a, "b": c.b}.get(c.winner) == child
        if not liked or waiting["explained"]:
            return
        self._like_built(self.built[child], waiting["edit"], waiting["parent"], waiting["feature"])
        log.info("built pair on %s answered: edit %s (%s) preferred", waiting["feature"], child, waiting["edit"])

    def _waiting_for(self, c: Comparison) -> str | None:
        """The edit (its hash) of the waiting built question (:attr:`_built_waiting`) that ``c``
        answers: the same edit and parent, either way round, on the same problem; None if none."""
        for child in (c.a, c.b):
            waiting = self._built_waiting.get(child)
            if waiting is not None and c.problem_id == waiting["problem"] and {c.a, c.b} == {child, waiting["parent"]}:
                return child
        return None

    def _like_built(self, child: Workflow, edit: str, parent: str, feature: str) -> None:
        """A built edit the rater preferred, and not for what the fitness measures: it waits in
        :attr:`_built_liked` to be one of the generation's children (unless evaluated meanwhile or
        already waiting: an answer read back late, :meth:`_built_answered`), and its ``feature``
        is won for the reach (:attr:`built_won`)."""
        if self._fresh(child) and child.hash() not in {wf.hash() for wf, _, _ in self._built_liked}:
            self._built_liked.append((child, edit, parent))
        self.built_won.add(feature)

    def _explained_built(self, c: Comparison) -> bool:
        """Whether ``c``, an answer read back from the rater's file, answers a built question
        (one waiting, :attr:`_built_waiting`: the same edit and parent, either way round, on the
        same problem; or one the file marks built, :meth:`FileRater.asked_built`, which a search
        restarted from a state saved before asking it has no record of) and is one the fitness
        explains (:func:`_explained`) on the two traces of its problem in the cache (the trace
        log's after a restart); such an answer is kept but not fitted, as when the search gets it
        from :meth:`_answer` (run 38). In file mode a built pair is asked once and never built
        again, so its answer only ever comes back this way. False when a trace is not cached.

        Matched by the question, not by a side being in :attr:`built`: a built edit the search
        went on to evaluate is a contender like any other, and a contender question about it is
        fitted however the fitness explains its answer."""
        child = self._waiting_for(c)
        if child is not None and "explains" in self._built_waiting[child]:  # recorded when asked
            return {"a": c.a, "b": c.b}.get(c.winner, "tie") in self._built_waiting[child]["explains"]
        if child is None and not self._asked_built(c):
            return False
        ta = self.evaluator.cache.get((c.a, c.problem_id))
        tb = self.evaluator.cache.get((c.b, c.problem_id))
        return ta is not None and tb is not None and _explained(c.winner, ta, tb)

    def _asked_built(self, c: Comparison) -> bool:
        """Whether ``c``, an answer read back from the rater's file, answers a built pair's
        question by the file alone: its line says ``"built": true`` (:meth:`FileRater.asked_built`),
        or its problem is a search problem and no rater problem, where only a built pair is asked
        (:meth:`_ask_built`; contender and final questions go to rater problems). The second rule
        reads a questions file written before the mark (2fc6664 and earlier), whose lines have no
        ``built``; where the two sets share the problem (the library's default, or evolve with no
        rater problems left) such a line reads as a contender's, as before."""
        asked_built = getattr(self.rater, "asked_built", None)
        if asked_built is not None and asked_built(c.a, c.b, c.problem_id):
            return True
        rater_ids = {p["id"] for p in self.rater_problems}
        return c.problem_id not in rater_ids and any(p["id"] == c.problem_id for p in self.problems)

    def _rebuild_waiting(self, c: Comparison) -> bool:
        """Record the built question ``c`` answers in :attr:`_built_waiting` as :meth:`_ask_built`
        did when it asked it, for a search resumed from a state saved before that (no record, and
        the replay may build another pair): :meth:`_settle_built` then decides it, or the next
        generation does after a final round. The best then is the side the search has evaluated
        whose structural single edit (:func:`_structural_neighbours`) is the other side, bringing
        in a feature a built pair may be about; with several, the one whose weight is pinned least,
        as :meth:`_built_pair` draws it (its random tie-break left out). The traces are the cached
        ones (the trace log's after a restart), run again where the cache lacks one (a run without
        a trace log), as the replay asking the question again would. Returns whether it recorded
        one: not when no side fits (a best the restored search has not evaluated, tried again by
        :meth:`_rebuild_unrecorded`), nor when the search built the edit itself (it asked the
        question, or another about the edit, and decides that), nor when both ways round fit (a
        replace or backbone edit, both sides evaluated by then): the file does not say which side
        was the edit, and taking the best for it would win the best's own feature from an answer
        that kept the best (or lose a liked edit's); the answer keeps the mark its traces give."""
        problem = next((p for p in self.problems if p["id"] == c.problem_id), None)
        ways = self._built_sides(c) if problem is not None else []
        if len(ways) != 1 or ways[0][1] in self.built:
            return False
        parent_hash, child_hash = ways[0]
        parent = self.seen[parent_hash]
        child, edit, brings = self._built_edit(parent_hash, parent.workflow, child_hash)
        child = child.copy()  # the memo's stays untouched
        feature = _least_pinned(self.preference_model, brings)
        (tp,), _ = self.evaluator.traces(parent.workflow, [problem], self.generation)
        (tc,), _ = self.evaluator.traces(child, [problem], self.generation)
        ta, tb = (tp, tc) if c.a == parent_hash else (tc, tp)
        self.built[child_hash] = child
        self._built_waiting[child_hash] = _waiting_record(
            feature, edit, parent_hash, c.problem_id, tp, tc, ((c.a, ta), (c.b, tb))
        )
        log.info(
            "built pair on %s rebuilt from its answer: best %s vs edit %s (%s)",
            feature,
            parent_hash,
            child_hash,
            edit,
        )
        return True

    def _built_sides(self, c: Comparison) -> list[tuple[str, str]]:
        """``(best, edit)`` hashes for each way round the built pair ``c`` answers may have been
        asked (:meth:`_rebuild_waiting`): a side the search has evaluated whose structural single
        edit bringing in a feature (:meth:`_built_edit`) is the other side. Both ways round fit a
        replace or backbone edit once both sides are evaluated."""
        return [
            (best, edit)
            for best, edit in ((c.a, c.b), (c.b, c.a))
            if best in self.seen and self._built_edit(best, self.seen[best].workflow, edit) is not None
        ]

    def _built_edit(
        self, parent_hash: str, parent: Workflow, child_hash: str
    ) -> tuple[Workflow, str, list[str]] | None:
        """``(child, edit, features)``: the first of ``parent``'s (hash ``parent_hash``)
        structural single edits (:func:`_structural_neighbours`) whose workflow hashes to
        ``child_hash``, and the features a built pair may be about (:data:`_TASTE_KINDS`) that it
        brings in; None when there is none, or it brings in none. Memoised (:attr:`_edit_of`): a
        pure function of the two workflows, so callers copy the workflow before keeping it."""
        key = (parent_hash, child_hash)
        if key not in self._edit_of:
            mutator = self._neighbour_mutator()
            found = next(
                ((ch, e) for ch, e in _structural_neighbours(mutator, parent) if ch.hash() == child_hash), None
            )
            self._edit_of[key] = None
            if found is not None:
                base, feats = workflow_features(parent), workflow_features(found[0])
                brings = sorted(_brought_in(base, feats))
                self._edit_of[key] = (*found, brings) if brings else None
        return self._edit_of[key]

    def _crossover_rate(self) -> float:
        if not self.config.use_memory:
            return self.config.crossover_rate
        w = self.memory.steering(self.task.name, self.task.domain, "edit_stats", EDIT_KINDS)
        others = [w[k] for k in EDIT_KINDS if k != "crossover"]
        return min(0.9, self.config.crossover_rate * w["crossover"] / (sum(others) / len(others)))

    def _offspring(self, mutator: Mutator, parent: Individual, pick: Callable[[], Individual]) -> tuple[Workflow, str]:
        if self.rng.random() < self._crossover_rate() and len(self.population) > 1:
            other = pick()
            if other.hash != parent.hash:
                return mutator.cross(parent.workflow, other.workflow)
        if self.optimizer is not None and self.rng.random() < 0.5:
            other = self._second_parent(parent.workflow)
            edit = self.optimizer.propose_edit(
                parent.workflow,
                parent.fitness,
                self._failures(parent.workflow),
                other,
                self._failed.get(parent.hash, set()),
                self.generation,
            )
            if edit is not None:
                kind, _, op = edit.partition(":")
                child, done = mutator.mutate(parent.workflow, kind, op or None)
                if done != "none":
                    return child, done + ":optimizer"
        return mutator.mutate(parent.workflow)

    def _structural_edits(
        self, mutator: Mutator, parent: Workflow, skip: Container[str]
    ) -> Iterator[tuple[Workflow, str]]:
        """``(child, edit)`` for ``parent``'s structural single edits (add, remove, replace, backbone;
        :meth:`Mutator.neighbours`' fixed order) whose child's hash is not in ``skip`` and that the
        failed-edit rule (:meth:`_reject`) lets through."""
        for child, edit in _structural_neighbours(mutator, parent):
            if child.hash() not in skip and not self._reject(parent, child, edit):
                yield child, edit

    def _ranked_structural(self, mutator: Mutator, parent: Individual, taken: set[str]) -> tuple[Workflow, str] | None:
        """``parent``'s untried structural single edit (:meth:`Mutator.neighbours`: add, remove,
        replace, backbone; no prompt or settings edit) with the highest expected gain by memory,
        or None when none is left (``SearchConfig.ranked_structural_share``; docs/hflow.md, run 17).

        The fitter simple workflows each lie one structural edit from a searched one, but the
        random draw proposes a given edit once in 15-200 children and spends a third of them on
        prompts and settings, so the run budget ends first (docs/benchmarks.md, run 16). The gain
        is memory's shrunk estimate of the edit's choice (``add:refine``) times its kind's
        (``add``), times the preference model's steering factor of the choice when
        ``preference_steering`` is on; a tie keeps neighbours' fixed order, so nothing here is
        drawn at random. Children seen, refused by the failed-edit rule, or in ``taken`` (this generation's) are skipped.
        """
        options = list(self._structural_edits(mutator, parent.workflow, taken))
        if not options:
            return None
        gains = [1.0] * len(options)
        if self.config.use_memory:
            task, domain = self.task.name, self.task.domain
            # floor 0: the steering weights are then exp(estimate / spread), an order-keeping gain
            kinds = self.memory.steering(task, domain, "edit_stats", EDIT_KINDS, floor=0.0)
            labels = sorted({edit for _, edit in options})
            choices = self.memory.steering(task, domain, "choice_stats", labels, floor=0.0)
            gains = [kinds[edit.split(":")[0]] * choices[edit] for _, edit in options]
        # preference_steering reaches the ranked children as it reaches the drawn ones: without it
        # a third of the children ignored what the rater likes (run 19, docs/benchmarks.md).
        liked = self._steered_choices({}) or {}
        gains = [g * liked.get(edit, 1.0) for g, (_, edit) in zip(gains, options)]
        return options[max(range(len(options)), key=lambda i: (gains[i], -i))]

    def _escape(self, parent: Individual) -> tuple[Workflow, str]:
        """A new child when the rules give none from ``parent``.

        Once a population has converged, every edit a parent can make has either been evaluated or
        already failed from it, and each offspring comes back as the parent unchanged: a generation
        that spends nothing, and a budget-driven loop that never ends (seen on the simulated GSM8K
        world with 100 search problems). A failed edit kind is one draw, not all of them (a worse
        ``params`` edit tried one temperature), so repeat one first; failing that, bring in an
        immigrant, a random new workflow, as regularized evolution does.
        """
        child, edit = self._mutator(reject=lambda _p, c, _e: not self._fresh(c)).mutate(parent.workflow)
        if edit != "none" and self._fresh(child):
            return child, edit
        free = self._mutator(reject=lambda *_: False)
        for _ in range(free.attempts):
            wf = free.random_workflow()
            if self._fresh(wf):
                return wf, "immigrant"
        return parent.workflow.copy(), "none"

    def step(self) -> dict[str, Any]:
        """Run one generation: preferences, offspring, evaluation, survivor selection. Returns its log row."""
        if not self.population:
            self.initialize()
        self.generation += 1
        self.ask_preferences()
        liked = self._take_built_liked()
        mutator = self._mutator()
        scores = self._score(self.population)

        def pick() -> Individual:
            idx = self.rng.sample(range(len(self.population)), min(self.config.tournament, len(self.population)))
            return self.population[max(idx, key=lambda i: scores[i])]

        children: list[tuple[Workflow, str, Individual]] = []
        n_ranked = round(self.config.ranked_structural_share * self.config.offspring)
        # preference_children: the first ranked slots go to the best workflow's most liked edits
        n_taste = min(self.config.preference_children, n_ranked) if self._has_taste() else 0
        lineage = self._taste_lineage() if self.config.preference_lineage > 0 else None
        n_lineage = self.config.preference_lineage_children if lineage is not None else 0
        for slot in range(self.config.offspring):
            if slot < len(liked):  # preference_built_pairs: an edit the rater preferred, as built
                children.append(liked[slot])
                continue
            i = slot - len(liked)  # the other kinds of children keep their counts; random ones give way
            p1 = pick()
            taken = {c[0].hash() for c in children}
            ranked = None
            if i < n_taste:
                ranked = self._taste_child(mutator, self.best_by_fitness(), taken)
                if ranked is not None:
                    p1 = self.best_by_fitness()
            if ranked is None and i < n_ranked:
                if n_taste <= i < n_taste + n_lineage:
                    p1 = lineage  # preference_lineage_children: the taste lineage's own best edit
                ranked = self._ranked_structural(mutator, p1, taken)
            if ranked is not None:
                wf, edit = ranked
            else:
                wf, edit = self._offspring(mutator, p1, pick)
                if edit == "none" or not self._fresh(wf):
                    wf, edit = self._escape(p1)
            children.append((wf, edit, p1))
        spent = self.spent
        k = self.config.screen_problems
        # the reach child skips the race and is evaluated in full below
        unraced = {wf.hash() for wf, edit, _ in children if edit.startswith("reach:")}
        screened_out, runs_by_hash = race(
            [(wf, parent.workflow) for wf, _, parent in children if wf.hash() not in unraced],
            max(self.population, key=lambda i: i.fitness).workflow,
            self.problems,
            k,
            self.config.screen_margin,
            self._evaluate_many,
            lambda wf, problems: self.evaluator.evaluate(wf, problems, self.generation),
        )
        self._screened |= screened_out
        full = [c[0] for c in children if c[0].hash() not in screened_out]
        done = dict(zip([w.hash() for w in full], self._evaluate_many(full)))
        for h, res in done.items():
            runs_by_hash[h] = runs_by_hash.get(h, 0) + res.new_runs
        results = [
            done.get(c[0].hash()) or self.evaluator.evaluate(c[0], self.problems[:k], self.generation) for c in children
        ]
        pool = {i.hash: i for i in self.population}
        counted: set[str] = set()
        for (wf, edit, parent), res in zip(children, results):
            ind = Individual(wf, res.accuracy, res.cost, res.fitness, edit, parent.hash, self.generation)
            if wf.hash() in screened_out:
                # lineage learns the edit failed (an immigrant is no edit of its parent); the
                # partial score never enters the population
                if edit != "immigrant":
                    self.memory.record_edit(
                        self.task.name,
                        self.task.domain,
                        edit,
                        parent.hash,
                        ind.hash,
                        min(res.fitness - parent.fitness, -1e-9),
                        self.generation,
                    )
                    self._failed.setdefault(parent.hash, set()).add(edit)
                if ind.hash not in counted:
                    counted.add(ind.hash)
                    spent += runs_by_hash.get(ind.hash, 0)
                continue
            # Charge each child's runs in order, so the best-so-far curve is per evaluation even
            # though the generation was evaluated in parallel.
            if ind.hash not in counted:
                counted.add(ind.hash)
                spent += runs_by_hash.get(ind.hash, res.new_runs)
            self._record(ind, parent.fitness, spent)
            pool.setdefault(ind.hash, ind)
        self._fit_preferences()
        candidates = list(pool.values())
        cand_scores = self._score(candidates)
        order = sorted(range(len(candidates)), key=lambda i: (-cand_scores[i], candidates[i].cost, candidates[i].hash))
        self.population = self._keep_taste_lineage(self._survivors([candidates[i] for i in order]))
        self.confirm()
        return self._log_generation()

    def _take_built_liked(self) -> list[tuple[Workflow, str, Individual]]:
        """The built edits the rater preferred this round (:meth:`_ask_built`) as children
        ``(workflow, edit, parent)``: fresh, distinct, at most ``offspring``; the list is emptied."""
        out: list[tuple[Workflow, str, Individual]] = []
        for wf, edit, parent in self._built_liked:
            if parent in self.seen and self._fresh(wf) and wf.hash() not in {c[0].hash() for c in out}:
                out.append((wf, edit, self.seen[parent]))
        self._built_liked = []
        return out[: self.config.offspring]

    def _has_taste(self, z: float = 1.0) -> bool:
        """Whether the rater has shown a taste the fitness does not already measure, so the
        population steering may act (``preference_children``, the taste lineage and its
        children): more of its decided answers go against the objectives
        (:meth:`_answers_against_objectives`) than the modelled flip rate ``eps`` explains, by
        ``z`` binomial standard deviations (``k > n eps + z sqrt(n eps (1 - eps))``). Flips above
        the modelled rate open it too; the choice's wider reach uses :meth:`_tastes` instead
        (run 41), which needs no flip rate.

        A rater who prefers the right answer, then the cheaper, agrees with the fitness: the
        preference model then learns accuracy and cost again, and run 34 found the steering
        spending GSM8K's children and dollars on what the fitness already ranks (held-out
        fitness -2.9 points, fewer seeds at the optimum). Without a rater or answers: False."""
        if self.rater is None or not self.preferences.comparisons:
            return False
        against, decided = self._answers_against_objectives()
        eps = self.config.rater_flip_rate
        return against > decided * eps + z * math.sqrt(decided * eps * (1 - eps))

    def _answers_against_objectives(self) -> tuple[int, int]:
        """``(against, decided)`` over the answers with a winner (ties left out): ``against``
        counts those whose winner was neither right where the other was wrong (a
        higher score) nor cheaper at the same score, i.e. answers the fitness's own terms do not
        explain (a taste, or a flipped answer). Read as ``preference_residual`` reads an answer
        (:meth:`_answer_covariates`: the two traces on the problem asked, else the workflows'
        accuracy and mean cost; an answer with neither counts as against, nothing explaining
        it), so a resumed search gets the same count."""
        against = decided = 0
        for c in self.preferences.comparisons:
            if c.winner not in ("a", "b"):
                continue
            decided += 1
            score, cost = self._answer_covariates(c)
            if c.winner == "b":
                score, cost = -score, -cost
            # the winner's score minus the loser's, and their cost contrast (< 0: the winner is cheaper)
            against += not _objectives_explain(score, cost)
        return against, decided

    def _taste_child(self, mutator: Mutator, parent: Individual, taken: set[str]) -> tuple[Workflow, str] | None:
        """``parent``'s structural single edit (add, remove, replace, backbone) that the preference
        model scores highest above ``parent`` (plus ``preference_children_explore`` times the
        difference's posterior spread, :meth:`_taste_spread`), or None when no fresh, unrefused
        edit gains (``SearchConfig.preference_children``; docs/benchmarks.md, run 27).

        Run 14 found the rater's taste lost in workflows the search never evaluates, mostly near
        its best; the end-of-search polish (run 12) tried the liked edit once and paid for a
        miss with nothing to follow. Made every generation, a liked child that lands near the
        best joins the population and the ordinary variation improves it; one that fails is
        refused from then on by the failed-edit rule, so the next generation tries the next
        liked edit. Ties keep neighbours' fixed order: nothing is drawn.
        """
        model = self.preference_model
        base = model.score(parent.workflow)
        kappa = self.config.preference_children_explore
        best: tuple[float, Workflow, str] | None = None
        for child, edit in self._structural_edits(mutator, parent.workflow, taken):
            gain = model.score(child) - base
            if kappa > 0:
                gain += kappa * self._taste_spread(child, parent.workflow)
            if gain > 1e-9 and (best is None or gain > best[0]):
                best = (gain, child, edit)
        return None if best is None else (best[1], best[2])

    def _taste_spread(self, child: Workflow, parent: Workflow) -> float:
        """Posterior standard deviation of the preference model's score difference ``child -
        parent`` over the features (``preference_children_explore``): features no answer has
        touched keep the prior's variance, so an edit that brings in something the rater was
        never asked about is uncertain, and an optimistic ranking tries it (as UCB does in
        dueling bandits). Per-workflow offsets are left out: an unevaluated child has none."""
        model = self.preference_model
        fc, fp = workflow_features(child), workflow_features(parent)
        diff = {k: fc.get(k, 0) - fp.get(k, 0) for k in set(fc) | set(fp)}
        var = sum(v * v for k, v in diff.items() if k not in model.vocab) / model.l2
        if len(model.vocab):
            dx = np.zeros(len(model.vocab))
            for k, v in diff.items():
                if k in model.vocab:
                    dx[model.vocab[k]] = v
            var += float(dx @ model.cov @ dx)
        return math.sqrt(max(var, 0.0))

    def _taste_lineage(self) -> Individual | None:
        """The workflow the preference model scores highest among those evaluated within
        ``preference_lineage`` fitness of the best (None without a rater or answers)."""
        if not self._has_taste():
            return None
        pool = self._returnable()
        top = max(i.fitness for i in pool)
        near = [i for i in pool if i.fitness >= top - self.config.preference_lineage - 1e-12]
        return max(near, key=lambda i: (self.preference_score(i), i.fitness, -i.cost, i.hash))

    def _keep_taste_lineage(self, survivors: list[Individual]) -> list[Individual]:
        """``survivors`` with one place (the last) given to the workflow the preference model
        scores highest among those evaluated within ``preference_lineage`` fitness of the best,
        when it is not already among them (``SearchConfig.preference_lineage``; run 27).

        Selection ranks by fitness plus a small bonus, so a tasteful workflow a little below the
        best is dropped as soon as fitter children arrive, and the variation never builds on it.
        Kept alive, its own children can carry the taste closer to the best. Without a rater or
        answers the survivors are unchanged."""
        liked = self._taste_lineage() if self.config.preference_lineage > 0 else None
        if liked is None or not survivors:
            return survivors
        if any(i.hash == liked.hash for i in survivors):
            return survivors
        if len(survivors) < self.config.population_size:
            return survivors + [liked]
        return survivors[:-1] + [liked]

    def _survivors(self, ranked: list[Individual]) -> list[Individual]:
        """The best ``population_size`` of ``ranked`` with at most ``max_per_shape`` per shape
        (niching); places left over, if any, go to the best of the rest."""
        cap, size = self.config.max_per_shape, self.config.population_size
        if cap <= 0:
            return ranked[:size]
        kept: list[Individual] = []
        rest: list[Individual] = []
        per_shape: dict[str, int] = {}
        for ind in ranked:
            shape = ind.workflow.shape()
            if per_shape.get(shape, 0) < cap and len(kept) < size:
                per_shape[shape] = per_shape.get(shape, 0) + 1
                kept.append(ind)
            else:
                rest.append(ind)
        return kept + rest[: size - len(kept)]

    def run(self, generations: int, progress: Callable[[dict[str, Any]], None] | None = None) -> Individual:
        """Run ``generations`` more generations; ``progress`` is called with each log row."""
        if not self.population:
            self.initialize()
        for _ in range(generations):
            row = self.step()
            if progress is not None:
                progress(row)
        return self.best()

    def run_until(self, runs: int, dollars: float | None = None, patience: int = 50) -> int:
        """Run generations within a budget; returns how many ran.

        A generation starts only if its evaluations fit in ``runs`` problem runs at worst
        (``offspring`` x search problems, plus ``confirm_top`` x validation problems; the rater's
        questions, a few runs each, are charged as asked), keeping ``confirm_final`` x validation
        problems and the final questions' runs at worst back for :meth:`finish`, and while the
        ledger is below ``dollars`` (None: no dollar limit; the last generation may overrun it,
        since a call's price is known only once made). With a rater, ``preference_polish`` x
        search problems are kept back as well; with ``preference_polish_rank: kept`` their dollars
        too, at the mean price of a problem run so far. Stops after ``patience`` generations in a
        row that ran nothing new.
        """
        if not self.population:
            self.initialize(dollars)
        cfg = self.config
        step = cfg.offspring * len(self.problems) + cfg.confirm_top * len(self.validation)
        # finish() confirms finalists and asks the final questions
        reserve = self._final_reserve()
        polish_runs = cfg.preference_polish * len(self.problems) if self.rater is not None else 0
        # each polished child at most one evaluation on the search problems (preference_polish)
        reserve += polish_runs
        self._budget = runs  # the final round asks nothing that could take the spend past it
        # 'kept' keeps the polish's dollars back too: a search that ends with its dollars spent
        # polishes nothing (run 12: 37 of 100). A run's price is known once paid, so the reserve
        # is priced at the mean dollars per problem run so far.
        kept_runs = polish_runs if cfg.preference_polish_rank == "kept" else 0

        def dollars_left() -> bool:
            if dollars is None:
                return True
            cost = self.pool.ledger.total_cost()
            return cost + (kept_runs * cost / self.spent if kept_runs and self.spent else 0.0) < dollars

        done = idle = 0
        while self.spent + step + reserve <= runs and dollars_left():
            before = (self.spent, self.pool.ledger.total_cost())
            self.step()
            done += 1
            idle = idle + 1 if (self.spent, self.pool.ledger.total_cost()) == before else 0
            if idle >= patience:
                break
        return done

    def _final_reserve(self) -> int:
        """Runs :meth:`finish` keeps for confirming finalists and the final questions."""
        reserve = self.config.confirm_final * len(self.validation)
        if self.rater is not None:
            reserve += self.config.final_questions * _QUESTION_RUNS
        return reserve

    def _over_budget(self, runs: int) -> bool:
        """Whether ``runs`` more problem runs would pass the budget of :meth:`run_until` (never,
        for a search run by generations)."""
        return self._budget is not None and self.spent + runs > self._budget

    def best_by_fitness(self) -> Individual:
        """The individual with the best fitness ever evaluated (then lower cost); once leaders are
        confirmed (``confirm_top``), the best confirmed one."""
        return max(self._returnable(), key=lambda i: (i.fitness, -i.cost, i.hash))

    def choose(self) -> tuple[Individual, dict[str, Any]]:
        """The workflow to return and how preferences changed the choice (:func:`choose_workflow`)."""
        return self._choice(self._returnable())

    def _choice(self, individuals: list[Individual]) -> tuple[Individual, dict[str, Any]]:
        return choose_workflow(
            individuals,
            self.preference_score,
            self._reach_delta(),
            bool(self.preferences.comparisons) and self.rater is not None,
            self._within_reach(individuals),
        )

    def finish(self, max_cost: float | None = None) -> tuple[Individual, dict[str, Any]]:
        """End of the search: confirm up to ``confirm_final`` finalists (:meth:`confirm`), ask the
        final questions (:meth:`ask_final_questions`), then :meth:`choose`. ``max_cost``: stop
        confirming (and polishing, ``preference_polish``) once the ledger's total reaches it."""
        if self.config.preference_polish > 0:
            self.polish(max_cost)
        for _ in range(self.config.confirm_final):
            if max_cost is not None and self.pool.ledger.total_cost() >= max_cost:
                break
            if not self.confirm(1):
                break
        # Answers given before a restart that nothing asked again count only after the final
        # round: a kill during it leaves its answers pending, and the resumed round takes them
        # back question by question (counted first, they would make it ask on new problems).
        self.ask_final_questions()  # refits after every answer
        if self.preferences.release():
            self._fit_preferences()
        chosen, report = self.choose()
        if self.config.preference_polish > 0:
            report["polished"] = dict(self.polished)
        return chosen, report

    def polish(self, max_cost: float | None = None) -> list[Individual]:
        """Evaluate, for each of the ``preference_polish`` best returnable workflows by fitness,
        the one-edit child (:meth:`Mutator.neighbours`) the preference model scores highest above
        its parent; returns the children evaluated.

        The child must gain (score above its parent's) and be fresh (never evaluated, nor picked
        for another parent). It is evaluated on the search problems and recorded like any child,
        so the choice rule and the final questions weigh it with the other finalists. Nothing
        happens without a rater or answers. A child is evaluated only if its runs fit run_until's
        budget with the final round's reserve kept (:meth:`_final_reserve`), and while the ledger
        is below ``max_cost`` (a child's price is known once paid, so the last may overrun it).
        Parents already polished (:attr:`polished`, kept in the state) are not polished again.

        ``preference_polish_rank``: ``liked`` (default) evaluates the single most liked edit of each
        parent. ``kept`` considers only edits that keep the parent's computation (a node added:
        ``add:*``; no operator replaced, node removed, backbone moved or prompt changed) that the
        model scores above the parent, and evaluates them most liked first until one lands within
        ``preference_delta`` of the best fitness or the budget (runs, or ``max_cost``) is spent.
        """
        n = self.config.preference_polish
        if n <= 0 or self.rater is None or not self.preferences.comparisons:
            return []
        model = self.preference_model
        mutator = self._neighbour_mutator()
        parents = sorted(self._returnable(), key=lambda i: (-i.fitness, i.cost, i.hash))[:n]
        picked = {h for h in self.polished.values() if h}
        kept, stop = self.config.preference_polish_rank == "kept", False
        out: list[Individual] = []
        for parent in parents:
            if parent.hash in self.polished or len(self.polished) >= n:
                continue
            if self._polish_spent(max_cost):
                break
            base = model.score(parent.workflow)
            liked: list[tuple[float, int, Workflow, str]] = []
            for k, (child, edit) in enumerate(mutator.neighbours(parent.workflow)):
                if not self._fresh(child) or child.hash() in picked or (kept and not edit.startswith("add:")):
                    continue
                gain = model.score(child) - base
                if gain > 1e-9:
                    liked.append((gain, k, child, edit))
            # most liked first; a tie goes to the first in neighbours' fixed order
            liked.sort(key=lambda t: (-t[0], t[1]))
            if not liked:
                self.polished[parent.hash] = None
                continue
            last: str | None = None
            for gain, _, child, edit in liked if kept else liked[:1]:
                if last is not None and self._polish_spent(max_cost):
                    stop = True
                    break
                res = self.evaluator.evaluate(child, self.problems, self.generation)
                ind = Individual(child, res.accuracy, res.cost, res.fitness, edit, parent.hash, self.generation)
                self._record(ind, parent.fitness)
                last = ind.hash
                picked.add(ind.hash)
                out.append(ind)
                log.info("polish: %s -> %s (%s, preference gain %.3f)", parent.hash, ind.hash, edit, gain)
                if ind.fitness >= self.best_by_fitness().fitness - self.config.preference_delta - 1e-12:
                    break
            self.polished[parent.hash] = last
            if stop:
                break
        return out

    def _polish_spent(self, max_cost: float | None) -> bool:
        """Whether one more polished child would pass run_until's budget (the final round's
        reserve kept) or the ledger has reached ``max_cost``."""
        return self._over_budget(len(self.problems) + self._final_reserve()) or (
            max_cost is not None and self.pool.ledger.total_cost() >= max_cost
        )

    def best(self) -> Individual:
        """The returned workflow: the most preferred within reach of the best fitness (:meth:`_within_reach`)."""
        return self.choose()[0]

    def ranked(self, k: int) -> list[Individual]:
        """The chosen workflow first, then the rest by fitness (then cost)."""
        chosen = self.best()
        rest = sorted(
            (i for i in self.seen.values() if i.hash != chosen.hash), key=lambda i: (-i.fitness, i.cost, i.hash)
        )
        return [chosen] + rest[: max(k - 1, 0)]

    def heldout_report(self, individuals: list[Individual] | None = None) -> list[dict[str, Any]]:
        """Accuracy and mean cost on the held-out problems of the chosen workflow, the best by
        fitness and the single-call baselines (held-out runs are not part of the search budget)."""
        if not self.heldout:
            return []
        chosen, by_fit = self.best(), self.best_by_fitness()
        rows: list[tuple[str, Workflow]] = [("chosen", chosen.workflow), ("best_fitness", by_fit.workflow)]
        rows += [(f"single:{wf.name}", wf) for wf in default_seeds(self.backbone_names, agent=self.agent_task)]
        rows += [(f"extra:{i.hash}", i.workflow) for i in individuals or []]
        runs_before = self.evaluator.problem_runs
        out = []
        for label, wf in rows:
            res = self.evaluator.evaluate(wf, self.heldout, self.generation)
            out.append(
                {
                    "label": label,
                    "hash": wf.hash(),
                    "accuracy": res.accuracy,
                    "cost_per_problem": res.cost,
                    "fitness": res.fitness,
                    "workflow": wf.describe(),
                }
            )
        self.evaluator.problem_runs = runs_before
        return out

    def diversity(self) -> float:
        """Distinct operator multisets in the population over its size (1 = all different shapes)."""
        shapes = {tuple(sorted(n.op for n in i.workflow.nodes)) + (len(i.workflow.edges),) for i in self.population}
        return len(shapes) / max(len(self.population), 1)

    def _log_generation(self) -> dict[str, Any]:
        best, report = self.choose()
        top = self.best_by_fitness()
        gen_cost = self.pool.ledger.summary("generation").get(self.generation, {"cost": 0.0})["cost"]
        row = {
            "generation": self.generation,
            "best_fitness": top.fitness,
            "best_accuracy": top.accuracy,
            "best_cost": top.cost,
            "chosen_fitness": best.fitness,
            "chosen_accuracy": best.accuracy,
            "chosen_changed_by_preferences": report["changed_by_preferences"],
            "mean_fitness": sum(i.fitness for i in self.population) / len(self.population),
            "diversity": self.diversity(),
            "generation_cost": gen_cost,
            "total_cost": self.pool.ledger.total_cost(),
            "problem_runs": self.evaluator.problem_runs,
            "spent": self.spent,
            "preferences": len(self.preferences),
            "questions_asked": self.questions_asked,
            "optimizer_calls": self.optimizer.calls if self.optimizer else 0,
            "optimizer_unusable": self.optimizer.unusable if self.optimizer else 0,
            "best_workflow": best.workflow.describe(),
        }
        self.history.append(row)
        return row

    # ------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Population, seen individuals, history, RNG, cache, preferences, memory and ledger."""
        return {
            "config": asdict(self.config),
            "generation": self.generation,
            "population": [i.to_dict() for i in self.population],
            "seen": [i.to_dict() for i in self.seen.values()],
            "history": list(self.history),
            "best_so_far": [list(x) for x in self.best_so_far],
            "rng": _rng_to_json(self.rng.getstate()),
            "built_rng": _rng_to_json(self.built_rng.getstate()),
            "optimizer_calls": self.optimizer.calls if self.optimizer else 0,
            "optimizer_unusable": self.optimizer.unusable if self.optimizer else 0,
            "optimizer_drawn": self.optimizer.drawn if self.optimizer else 0,
            "questions_asked": self.questions_asked,
            "confirmed": sorted(self.confirmed),
            # children racing stopped early are not fresh: without them a resumed search proposes
            # one again (its partial score cached, the rest paid) where the uninterrupted one did not
            "screened": sorted(self._screened),
            "polished": dict(self.polished),
            "built": {h: wf.to_dict() for h, wf in self.built.items()},
            "built_won": sorted(self.built_won),
            "built_waiting": {h: dict(r) for h, r in self._built_waiting.items()},
            "rater": getattr(self.rater, "state_dict", dict)() if self.rater is not None else {},
            # traces with a failed model call stay out, like the trace log: a resumed run reruns them
            "cache": [[k[0], k[1], v] for k, v in self.evaluator.cache.items() if not trace_failed(v)],
            "problem_runs": self.evaluator.problem_runs,
            "preferences": self.preferences.state_dict(),
            "memory": self.memory.state_dict(),
            "ledger": self.pool.ledger.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, plus the work the logs hold beyond it.

        Raises:
            ConfigError: the state was saved with other search settings (``workers`` aside): a
                resumed search would mix two fitness definitions in one history; or by a version
                that hashed workflows otherwise (its traces, answers and confirmations are filed
                under hashes no workflow has now).
        """
        stale = [d["hash"] for d in state.get("seen", []) if Individual.from_dict(d).hash != d["hash"]]
        if stale:
            raise ConfigError(
                f"the saved search state files {len(stale)} workflows (e.g. {stale[0]}) under hashes this version "
                "computes otherwise (a vote that draws no samples no longer counts its backbone, and one over a "
                "single input hashes as that input): start afresh (evolve --resume false, or another --output)"
            )
        saved = state.get("config") or {}
        changed = sorted(
            k for k, v in asdict(self.config).items() if k != "workers" and k in saved and saved[k] != _plain(v)
        )
        if changed:
            was = ", ".join(f"search.{k}={saved[k]!r} (now {_plain(getattr(self.config, k))!r})" for k in changed)
            raise ConfigError(
                f"the saved search state was made with {was}: resume with the same settings, or start afresh "
                "(evolve --resume false, or another --output)"
            )
        self.generation = state["generation"]
        self.population = [Individual.from_dict(d) for d in state["population"]]
        self.seen = {d["hash"]: Individual.from_dict(d) for d in state["seen"]}
        self.history = list(state["history"])
        self.best_so_far = [tuple(x) for x in state["best_so_far"]]
        self.rng.setstate(_rng_from_json(state["rng"]))
        if "built_rng" in state:  # a state saved before run 38 drew the built pairs from self.rng
            self.built_rng.setstate(_rng_from_json(state["built_rng"]))
        if self.optimizer is not None:
            self.optimizer.calls = int(state.get("optimizer_calls", 0))
            self.optimizer.unusable = int(state.get("optimizer_unusable", 0))
            self.optimizer.drawn = int(state.get("optimizer_drawn", self.optimizer.calls))
        self.questions_asked = int(state.get("questions_asked", 0))
        self.confirmed = set(state.get("confirmed", []))
        self._screened = set(state.get("screened", []))
        self.polished = dict(state.get("polished", {}))
        self.built = {h: Workflow.from_dict(d) for h, d in state.get("built", {}).items()}
        self.built_won = set(state.get("built_won", []))
        # a state saved before the record: nothing waits (its answers fitted, no child, as then)
        self._built_waiting = {h: dict(r) for h, r in state.get("built_waiting", {}).items()}
        if self.rater is not None and hasattr(self.rater, "load_state_dict"):
            self.rater.load_state_dict(state.get("rater") or {})
        logged = dict(self.evaluator.cache)  # read back from the trace log
        self.evaluator.cache.update({(h, p): v for h, p, v in state["cache"] if not trace_failed(v)})
        self.evaluator.cache.update(logged)
        self.preferences.load_state_dict(state["preferences"])
        self.memory.load_state_dict(state["memory"])
        self._failed_cache = None
        self.book_logged_work(state)
        self._fit_preferences()

    def book_logged_work(self, state: dict[str, Any] | None = None) -> int:
        """Count the paid work the logs hold beyond ``state`` (None: a run that crashed before its
        first save): the traces in the trace log are problem runs of the budget, and the ledger is
        the call log's when that has every call the state has. Returns the runs added."""
        booked = {(h, p) for h, p, _ in state["cache"]} if state else set()
        heldout = {p["id"] for p in self.heldout}  # held-out runs are outside the search budget
        extra = len([k for k in self.evaluator.logged if k not in booked and k[1] not in heldout])
        self.evaluator.problem_runs = (state["problem_runs"] if state else 0) + extra
        ledger = self.pool.ledger
        state_calls = sum(r["calls"] for r in state["ledger"].get("rows", [])) if state else 0
        if ledger.replay_log(answers_from_generation=state["generation"] if state else 0) < state_calls and state:
            ledger.load_state_dict(state["ledger"])  # the call log is missing calls (deleted, older run)
        if self.optimizer is not None:
            # optimizer calls paid after the save count (the optimizer does not count the replies the
            # call log serves it again)
            by_role = ledger.summary("role").get("optimizer", {}).get("calls", 0)
            self.optimizer.calls = max(self.optimizer.calls, int(by_role))
        return extra


def _cost_contrast(a: float, b: float) -> float:
    """``tanh(log(a / b))`` of two costs (a floor of 1e-9 dollars keeps free calls finite).

    Saturating: a cost difference counts more the larger it is up to a few-fold, and no further.
    With the plain log ratio a rater who ranks cost below another taste (the simulated one ranks
    it below its hidden criterion) is fitted badly: a 60-fold dearer workflow with the preferred
    feature still wins, which a linear log-cost term can only explain with a weight on the cheap
    backbone again (a probe with such a rater: 0.44 on ``backbone:cheap`` with the log ratio,
    0.17 with this, 0.78 with no covariates)."""
    return math.tanh(math.log(max(float(a), 1e-9)) - math.log(max(float(b), 1e-9)))


def _plain(value: Any) -> Any:
    """A setting as it reads back from the state's JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
