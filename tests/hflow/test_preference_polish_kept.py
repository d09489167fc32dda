"""The polish's ``kept`` ranking (``SearchConfig.preference_polish_rank``): only edits that add a
node are tried, most liked first, until one lands within ``preference_delta`` of the best fitness
or the budget is spent; ``run_until`` keeps the polish's dollars back as well as its runs."""

from __future__ import annotations

import pytest

from lightning_agents.hflow import HFlowSearch, SearchConfig, SimulatedRater, Workflow
from lightning_agents.hflow.backbones import ConfigError
from tests.hflow.test_preference_polish import GEN, GEN_REFINED, PLAIN, _has_refine, _search, _wants_refine
from tests.hflow.test_search_logic import _Executor


def _ops(wf: Workflow) -> set[tuple[str, str | None]]:
    return {(n.op, n.backbone) for n in wf.nodes}


def _taste(wf: Workflow) -> float:
    """A stand-in model score: a lone non-programmer node (the programmer replaced) is liked
    most, then a refine on `pricey` added after the programmer, then one on `cheap`, then a
    format step."""
    ops = _ops(wf)
    if len(wf.nodes) == 1 and ("programmer", "cheap") not in ops:
        return 5.0
    if ("programmer", "cheap") in ops and ("refine", "pricey") in ops:
        return 3.0
    if ("programmer", "cheap") in ops and ("refine", "cheap") in ops:
        return 2.0
    if ("programmer", "cheap") in ops and any(n.op == "format" for n in wf.nodes):
        return 1.0  # liked least, never reached: the cheap refine lands first
    return 0.0


def _ready(rank, monkeypatch, lambda_cost=100.0):
    # lambda 100: a refine step on `pricey` costs 0.1 of fitness (outside the 0.02 delta), one on
    # `cheap` 0.01 (inside); the cheap programmer scores 1.0 with or without the step.
    search = _search(polish=1, preference_polish_rank=rank, lambda_cost=lambda_cost)
    search.initialize()
    _wants_refine(search)
    monkeypatch.setattr(search.preference_model, "score", _taste)
    return search


def test_liked_evaluates_the_replacement_the_model_likes_most(monkeypatch):
    """Run 12's behaviour, for contrast: the most liked edit replaces the programmer."""
    search = _ready("liked", monkeypatch)
    before = search.spent
    (child,) = search.polish()
    assert child.edit.startswith("replace:") and ("programmer", "cheap") not in _ops(child.workflow)
    assert search.spent == before + len(search.problems)


def test_kept_tries_added_nodes_most_liked_first_until_one_lands_within_delta(monkeypatch):
    search = _ready("kept", monkeypatch)
    best = search.best_by_fitness()
    assert best.hash == PLAIN.hash()
    before = search.spent
    first, second = search.polish()
    # the replacement (liked most) is never tried: it would drop what the parent computes
    assert first.edit == second.edit == "add:refine" and first.parent == second.parent == PLAIN.hash()
    assert ("refine", "pricey") in _ops(first.workflow)  # liked more, tried first ...
    assert first.fitness < best.fitness - 0.02  # ... and outside the delta, so the next is tried
    assert ("refine", "cheap") in _ops(second.workflow) and second.fitness >= best.fitness - 0.02
    assert search.polished == {PLAIN.hash(): second.hash}  # stopped at the one that landed
    assert search.spent == before + 2 * len(search.problems)
    chosen, _ = search.choose()
    assert chosen.hash == second.hash  # the most liked within the delta


def test_kept_stops_when_the_budget_is_spent(monkeypatch):
    search = _ready("kept", monkeypatch)
    search._budget = search.spent + len(search.problems)  # room for one child, not two
    (only,) = search.polish()
    assert ("refine", "pricey") in _ops(only.workflow)
    assert search.polished == {PLAIN.hash(): only.hash} and search.spent == search._budget


def test_kept_with_no_liked_addition_polishes_nothing(monkeypatch):
    search = _search(polish=1, preference_polish_rank="kept", lambda_cost=100.0)
    search.initialize()
    _wants_refine(search)
    # only the replacement gains: nothing that keeps the parent's computation is liked
    monkeypatch.setattr(search.preference_model, "score", lambda wf: 5.0 if _taste(wf) == 5.0 else 0.0)
    before = search.spent
    assert search.polish() == [] and search.spent == before
    assert search.polished == {PLAIN.hash(): None}


def test_an_unknown_rank_is_refused():
    with pytest.raises(ConfigError, match="preference_polish_rank"):
        SearchConfig(preference_polish_rank="loved")


class _PayingExecutor(_Executor):
    """The scripted executor, with every node's call paid on the ledger (one unit a problem)."""

    def run(self, workflow, problems, generation=0, salt=0):
        for _ in problems:
            for n in workflow.nodes:
                if n.backbone:
                    self.pool.ledger.record(n.backbone, 1000, 0, workflow=workflow.hash(), generation=generation)
        return super().run(workflow, problems, generation, salt)


def _paying(rank: str) -> HFlowSearch:
    ex = _PayingExecutor()
    cfg = SearchConfig(
        population_size=3,
        offspring=2,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=2,
        final_questions=0,
        preference_delta=0.02,
        preference_polish=2,
        preference_polish_rank=rank,
        # random children: with ranked ones this small world runs out of fresh edits, and both
        # ranks then stop at the same generation, which is not the case at hand
        ranked_structural_share=0.0,
        # no built pairs: asked on top of the two questions since run 38, their runs here make both
        # ranks stop at the same generation too
        preference_built_pairs=0,
    )
    return HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.0, criterion=_has_refine),
        rater_problems=ex.task.problems[10:],
        seeds=[GEN, GEN_REFINED],
    )


def test_kept_keeps_dollars_back_for_the_polish():
    """With the dollars the binding limit, `liked` spends them on generations and polishes
    nothing (run 12: 37 of 100 searches); `kept` stops the generations early enough that
    its reserve, priced at the mean dollars a run so far, is left for the polish."""
    runs = 300
    probe = _paying("liked")
    probe.run_until(runs)
    # the dollars the run-limited search spends; half of them binds
    dollars = probe.pool.ledger.total_cost() / 2
    out = {}
    for rank in ("liked", "kept"):
        search = _paying(rank)
        search.run_until(runs, dollars)
        out[rank] = (search.pool.ledger.total_cost(), search.generation, search._polish_spent(dollars))
    liked, kept = out["liked"], out["kept"]
    assert liked[0] >= dollars and liked[2]  # dollars spent: the polish could not run
    assert kept[1] < liked[1] and kept[0] < dollars and not kept[2]  # fewer generations, dollars left
