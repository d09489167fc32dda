"""The settings of an HFlow search, declared once: ``evolve``, ``HFlowCallback`` and the benchmarks
all take a :class:`SearchConfig` (``search:`` in YAML) and build the search with
:func:`lightning_agents.hflow.factory.build_search`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lightning_agents.hflow.backbones import ConfigError
from lightning_agents.hflow.genome import OPERATORS

__all__ = ["SearchConfig"]

# Lower bounds of the numeric settings (inclusive); the rest of the checks are in __post_init__.
_AT_LEAST = {
    "population_size": 1,
    "offspring": 1,
    "max_nodes": 1,
    "lambda_cost": 0,
    "eval_problems": 1,
    "heldout_problems": 0,
    "preference_weight": 0,
    "preference_steering": 0,
    "preference_certainty": 0,
    "preference_delta": 0,
    "preference_delta_se": 0,
    "preference_taste_delta": 0,
    "preference_polish": 0,
    "preference_lineage": 0,
    "preference_children": 0,
    "preference_lineage_children": 0,
    "preference_children_explore": 0,
    "preference_built_pairs": 0,
    "questions_per_generation": 0,
    "final_questions": 0,
    "tournament": 1,
    "optimizer_max_tokens": 1,
    "screen_problems": 0,
    "screen_margin": 0,
    "max_per_shape": 0,
    "confirm_top": 0,
    "confirm_final": 0,
    "workers": 1,
    "starter_dollar_share": 0,
    "starter_probe_problems": 1,
}
# Probabilities (upper bound, whether it is allowed): a flip rate of 0.5 or more would make an
# answer evidence for the other side.
_PROBABILITIES = {
    "rater_noise": (1.0, True),
    "rater_flip_rate": (0.5, False),
    "preference_taste_alpha": (1.0, False),
    "crossover_rate": (1.0, True),
    "ranked_structural_share": (1.0, True),
}
_CHOICES = {
    "objective": ("scalar", "pareto"),
    "rater": ("none", "simulated", "file", "interactive"),
    "preference_polish_rank": ("liked", "kept"),
    "preference_built_reach": (0, 1, 2),
    "preference_reach_small": (0, 1, 2, 3),
}


@dataclass
class SearchConfig:
    """Settings of an HFlow search.

    Args:
        population_size: individuals kept each generation.
        offspring: new candidates per generation.
        max_nodes: most nodes in a workflow.
        lambda_cost: fitness = accuracy - lambda_cost * mean cost per problem.
        objective: ``scalar`` (the fitness above) or ``pareto`` (rank by non-domination on
            accuracy and cost, fitness breaking ties within a front).
        eval_problems: search problems each workflow's fitness is measured on (None: all that
            are not held out). The default 16 keeps the CPU quickstart short; on a real task use
            100 or more: with 40 the luckiest of several close workflows is chosen (simulated
            benchmark, docs/benchmarks.md run 5).
        heldout_problems: problems kept out of the search; the chosen workflows are scored on
            them at the end (0: no held-out report).
        rater: who answers pairwise questions: ``none``; ``simulated`` (checks answers, then
            prefers the cheaper; for unattended runs); ``file`` (questions go to a JSONL a person
            answers between runs); ``interactive`` (asked in the terminal).
        rater_noise: probability that the simulated rater flips its answer.
        preference_weight: fitness points the preference model may add or take away in parent
            and survivor selection (its log-odds score enters as ``weight * tanh(score / 2)``,
            so a confident taste moves a workflow by at most this much); 0 ignores preferences there.
        preference_steering: how strongly what the preference model likes steers what edits
            choose: an add or replace brings in operator ``op`` with its sampling weight times
            ``exp(steering * w[op:op])`` and a backbone move goes to ``b`` with
            ``exp(steering * w[backbone:b])`` (``w``: the model's feature weights, log-odds; each
            factor kept within [1/e^2, e^2]), so offspring carry the features the rater prefers
            rather than waiting for random edits to stumble on them; 0: edits ignore preferences.
            A trade (docs/benchmarks.md, run 9): the rater's taste reaches the result more often,
            the search for accuracy slows down.
        preference_residual: fit the preference model to the rater's taste beyond what the
            fitness measures (each answer explained first by the two traces' score difference
            and cost contrast), so a rater who prefers the cheaper of two right answers does not
            pull selection and steering toward cheap backbones on top of ``lambda_cost``. Off by
            default (docs/hflow.md, Selection; docs/benchmarks.md, run 10).
        preference_certainty: shrink each feature weight and workflow score ``m`` of variance
            ``v`` to ``m * m^2 / (m^2 + certainty * v)`` in the selection bonus and the steering,
            so a taste resting on a few noisy answers counts for little; the returned workflow
            and the choice of pairs use the model unscaled. 0 (the default): off; 1: a weight
            one standard deviation from 0 counts half (docs/hflow.md, Selection; run 11).
        preference_delta: the returned workflow is the most preferred among those whose fitness
            is within this of the best (0: the best fitness wins, preferences only break ties).
        preference_delta_se: also count as within reach of the best a workflow whose fitness gap
            to it is at most this many standard errors of their paired difference (per search
            problem, from the cached traces; search + validation problems where both are
            confirmed), for the returned workflow, the questions and the final round. A fixed
            delta ignores how well the search problems measure a gap: with 50 problems a
            workflow's accuracy is known to about 4 points, so gaps the problems cannot resolve
            are traded for the rater's taste, and wide gaps never are. 0 (default): the fixed
            delta alone (docs/benchmarks.md, runs 24-25).
        preference_taste_delta: once the rater's answers show a taste for a workflow feature
            (``preference_taste_alpha``), the workflows carrying it (having the feature, or lacking
            it, as the answers prefer) are within reach when within ``preference_delta`` plus this
            of the best fitness: of the returned workflow, the questions and the final round; the
            other workflows keep ``preference_delta``. Run 40 found every HumanEval search that
            lost the taste had evaluated a workflow with it 0.02-0.05 below the best, the model
            preferring it, and the fixed delta keeping it out; run 40b found the earlier gate
            (answers against the objectives above a modelled flip rate) opened by a tasteless
            rater's flips, widening every workflow's reach. Default 0.04 (run 41, test seeds:
            the hidden criterion +35.0 / +61.7 points against no rater, HumanEval / GSM8K, at
            +0.7 / -1.8 points of accuracy; a tasteless rater with 15% flips opened it in none of
            50 searches). 0: off, the fixed delta alone.
        preference_taste_alpha: the level of the taste test that opens
            ``preference_taste_delta`` (:mod:`lightning_agents.hflow.taste`): for each workflow
            feature and direction, whether the answers go against the objectives (the higher
            score, then the lower cost) more often where the objectives' loser has the taste side
            of the feature and their winner has not than elsewhere (one-sided Fisher exact test,
            Tarone-Bonferroni over the features). Flips that ignore the features, at any rate,
            open it about this often; no flip rate is modelled. Default 0.05.
        preference_taste_z: removed in run 41 (it set the flip-count gate the taste test
            replaced); any value is refused, naming ``preference_taste_alpha``.
        preference_polish: at the end the ``n`` best workflows each get a child the preference
            model likes, returned only through the choice rule. 0 (default): off (runs 12-13).
        preference_polish_rank: ``liked`` (default): the most liked edit; ``kept``: liked added
            nodes until one lands within ``preference_delta``, dollars reserved too.
        preference_lineage: a fitness band; with a rater whose answers show a taste the fitness
            does not measure (more go against it than the flip rate explains; run 35), one survivor
            place each generation goes to the workflow the preference model scores highest among those
            evaluated within this much fitness of the best, so a tasteful line stays in the
            population for the ordinary variation to improve (the rest as ``max_per_shape``
            ranks them). 0: off (docs/benchmarks.md, runs 27, 33).
        preference_lineage_children: with ``preference_lineage``, this many of each generation's
            ranked structural children (after ``preference_children``'s) take the kept tasteful
            workflow as their parent instead of a tournament's pick, so the line is improved, not
            only carried. 0: off.
        preference_children: of each generation's ranked structural children
            (``ranked_structural_share``), this many are instead the structural single edits of
            the best workflow by fitness that the preference model scores highest above it
            (fresh, not refused by the failed-edit rule); only with a taste the fitness does not
            measure, as for ``preference_lineage``. 0: off (docs/benchmarks.md, runs 27, 33, 35).
        preference_children_explore: ``k``: the taste children rank edits by the model's gain
            plus ``k`` times its posterior standard deviation (features the rater was never asked
            about keep the prior's), so an edit bringing in an untried feature is tried and then
            asked about; 0: the gain alone.
        preference_built_pairs: each generation, up to this many questions on top of
            ``questions_per_generation`` are about a pair the search builds rather than two
            evaluated workflows (their draws from their own random generator): the best
            workflow by fitness and its unevaluated structural single edit (add, remove, replace,
            backbone) that brings in the feature (operator, output, backbone, setting; not
            prompts) whose weight the answers have pinned least (largest posterior variance),
            asked on a search problem both answer right when one of those drawn has that. The
            edit's runs (one per problem tried) are paid and counted like every run. When the
            rater prefers the edit, and not for what the fitness measures (right where the best
            is wrong, or cheaper at the same score; run 35), it is one of the generation's
            children, so the choice can return it; an answer for what the fitness measures is
            kept but not fitted (run 38). With a rater and ``questions_per_generation`` > 0
            only. 0: off (docs/benchmarks.md, runs 29, 33, 35, 38).
        preference_built_reach: once a built pair's answer liked a feature the best workflow
            lacks, one more child a generation: the fresh workflow with it, up to this many (0-2)
            composed structural edits from the best, that a ridge fit of fitness predicts
            fittest, evaluated on every search problem. 0: off (docs/hflow.md, runs 31-33).
        preference_reach_ops: the reach child brings in operator features only (``op:cot``),
            never output features.
        preference_reach_small: the reach child may also be any workflow of at most this many
            (0-3) nodes, not only an edit of the best.
        preference_reach_as_op: a won ``op@backbone:X@b`` or ``output:X`` counts for the reach
            as operator ``X``.
        preference_reach_anchor: the reach's predictions add the residual (fitness minus fit)
            of the nearest evaluated workflow.
        questions_per_generation: cap on pairwise questions asked each generation about
            evaluated workflows (built pairs ask on top, so a generation asks up to this plus
            ``preference_built_pairs``). 0: none during the search, built pairs' included.
        final_questions: questions asked when the search ends (:meth:`HFlowSearch.finish`),
            each about the workflow the choice would return and another that could be returned
            (fitness within ``preference_delta`` of the best). Questions during the search are
            asked before a generation's children exist and range over every near-best workflow;
            without this round the last children and the finalists' order are never asked about,
            and the choice among them rests on what their features predict. Only a search that
            ends runs it (``evolve``, the benchmarks); ``HFlowCallback`` never ends its search.
            0: no final round.
        rater_flip_rate: how often the preference model assumes a rater answers the wrong way
            round (answers are evidence, not ground truth).
        crossover_rate: base probability an offspring comes from crossover (scaled by memory).
        tournament: tournament size for parent selection.
        use_memory: seed the first population from the domain memory and steer edits with the
            task's and domain's statistics.
        optimizer_backbone: pool name of the model that proposes prompt and structure edits from
            the parent's score and failures (None: template edits).
        optimizer_max_tokens: completion limit of each optimizer reply. A reasoning model needs
            room for its thinking and the tagged answer after it: a reply cut at the limit
            proposes nothing (the log says so when most replies are unusable).
        screen_problems: race children first on this many search problems and evaluate on the rest
            only those not clearly worse than their parent there (0: every child on every problem).
            Saves budget for more children; a screened-out child keeps its partial score.
        screen_margin: how far below its parent (fitness on the screening problems) a child may
            fall and still be evaluated further. Racing goes in stages (``screen_problems``,
            twice that, ... then all), the margin shrinking as ``screen_margin * sqrt(k / m)`` on
            ``m`` problems, like the standard error of a mean.
        max_per_shape: most population members with one shape (operators, backbones and edges,
            prompts and params aside; :meth:`Workflow.shape`); 0 for no limit. Without it, prompt
            and setting variants of one lucky workflow (new samples of the same thing) crowd out
            every other structure and the search stops exploring.
        steer_choices: with ``use_memory``, also steer what an edit chooses (the operator an add
            or replace brings in, the backbone a node moves to, whether an add is a parallel
            branch or a step after a node) by the fitness changes such choices caused so far in
            this task (shrunk toward the domain's, like the edit kinds), not only the edit kind;
            False: choices uniform (or by operator / backbone statistics) as before.
        confirm_top: leaders confirmed per generation (:meth:`HFlowSearch.confirm`): a workflow
            that would become the returned one on the search problems alone is first run on
            the validation problems too (default: the rater problems that are not search
            problems) and judged on both; only confirmed workflows are returned. Guards against
            the luckiest of many close workflows winning on a small search set; 0 turns it off.
            On the simulated GSM8K benchmark (40 search + 40 rater items) it did not improve
            the held-out result (80 items still cannot separate the leaders) and cost
            exploration; see docs/benchmarks.md, run 4.
        confirm_final: finalists confirmed the same way when the search ends
            (:meth:`HFlowSearch.finish`, which ``evolve`` calls): the choice is then made on
            search + validation problems without paying for confirmations every generation.
        max_tokens: completion limit per operator (``{"generate": 512, "cot": 1024}``) for this
            task, over the defaults; mutation may still change a node's own limit.
        workers: workflows evaluated in parallel (threads).
        seed: seed of every random choice.
        starter_dollar_share: cap on a random starter's price for one search-set evaluation, as
            a share of ``run_until``'s dollars (0: off); a dearer one, priced on
            ``starter_probe_problems`` problems, is redrawn (docs/hflow.md; run 16).
        starter_probe_problems: search problems a random starter is priced on (kept if it joins).
        ranked_structural_share: share of each generation's children that are the parent's best
            untried structural single edit by memory's expected gain (default 0.34; 0: every child
            drawn at random, as before run 18; docs/hflow.md).
    """

    population_size: int = 8
    offspring: int = 8
    max_nodes: int = 5
    lambda_cost: float = 0.0
    objective: Literal["scalar", "pareto"] = "scalar"
    eval_problems: int | None = 16
    heldout_problems: int = 0
    rater: Literal["none", "simulated", "file", "interactive"] = "simulated"
    rater_noise: float = 0.0
    preference_weight: float = 0.05
    preference_steering: float = 0.0
    preference_residual: bool = False
    preference_certainty: float = 0.0
    preference_delta: float = 0.02
    preference_delta_se: float = 0.0
    preference_taste_delta: float = 0.04
    preference_taste_alpha: float = 0.05
    preference_taste_z: float | None = None
    preference_polish: int = 0
    preference_polish_rank: Literal["liked", "kept"] = "liked"
    preference_lineage: float = 0.08
    preference_children: int = 1
    preference_lineage_children: int = 1
    preference_children_explore: float = 1.0
    preference_built_pairs: int = 1
    preference_built_reach: int = 2
    preference_reach_ops: bool = True
    preference_reach_small: int = 3
    preference_reach_as_op: bool = True
    preference_reach_anchor: bool = True
    questions_per_generation: int = 4
    final_questions: int = 4
    rater_flip_rate: float = 0.1
    crossover_rate: float = 0.25
    tournament: int = 3
    use_memory: bool = True
    optimizer_backbone: str | None = None
    optimizer_max_tokens: int = 400
    screen_problems: int = 0
    screen_margin: float = 0.1
    max_per_shape: int = 1
    steer_choices: bool = True
    confirm_top: int = 0
    confirm_final: int = 0
    max_tokens: dict[str, int] | None = None
    workers: int = 2
    seed: int = 0
    starter_dollar_share: float = 0.0
    starter_probe_problems: int = 4
    ranked_structural_share: float = 0.34

    def __post_init__(self) -> None:
        """Refuse settings no search can run with, naming the setting (``search.<name>``)."""
        if self.preference_taste_z is not None:
            raise ConfigError(
                "search.preference_taste_z was removed in run 41: the wider reach (preference_taste_delta) "
                "now opens on a feature-level taste test, set by search.preference_taste_alpha "
                "(docs/benchmarks.md, run 41)"
            )
        for name, low in _AT_LEAST.items():
            value = getattr(self, name)
            if value is not None and not value >= low:  # `not >=` also catches NaN
                raise ConfigError(f"search.{name} must be at least {low}, got {value!r}")
        for name, (high, closed) in _PROBABILITIES.items():
            value = getattr(self, name)
            if not (0.0 <= value <= high if closed else 0.0 <= value < high):
                raise ConfigError(f"search.{name} must be in [0, {high}{']' if closed else ')'}, got {value!r}")
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"search.{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        for op, limit in (self.max_tokens or {}).items():
            if op not in OPERATORS:
                raise ConfigError(f"search.max_tokens: unknown operator {op!r}; operators are {sorted(OPERATORS)}")
            if not isinstance(limit, int) or limit < 1:
                raise ConfigError(f"search.max_tokens.{op} must be a positive integer, got {limit!r}")
