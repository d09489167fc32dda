"""Price-aware starters (``SearchConfig.starter_dollar_share``, issue 17 run 16): with a dollar
budget, a random member of the first population is priced on a few search problems first and
dropped when one search-set evaluation would cost more than the share of the dollars. Memory seeds,
the single-call baselines and extra seeds are never capped, and the setting is off by default.

The scripted executor bills 1e-4 a problem per ``cheap`` node and 1e-3 per ``pricey`` node, so on
10 problems any random workflow with a ``pricey`` node costs at least 1e-2 and an all-``cheap`` one
at most 3e-3: a cap of 5e-3 (share 0.005 of 1 dollar) keeps exactly the all-``cheap`` ones."""

from __future__ import annotations

import pytest
from test_search_logic import _Executor

from lightning_agents.hflow import HFlowSearch, SearchConfig
from lightning_agents.hflow.backbones import ConfigError

SEEDS = range(6)
PROBLEMS = 10


def _search(seed: int, **kw) -> HFlowSearch:
    ex = _Executor()
    cfg = SearchConfig(
        population_size=8,
        offspring=4,
        max_nodes=3,
        eval_problems=PROBLEMS,
        seed=seed,
        workers=1,
        rater="none",
        use_memory=False,
        **kw,
    )
    return HFlowSearch(ex, cfg, problems=ex.task.problems[:PROBLEMS], rater_problems=ex.task.problems[PROBLEMS:])


def _random_starters(search: HFlowSearch) -> list:
    # the single-call baselines are named generate@<backbone>; random draws have no name
    return [i for i in search.population if not i.workflow.name]


def _pricey(ind) -> bool:
    return any(n.backbone == "pricey" for n in ind.workflow.nodes)


def test_uncapped_first_populations_hold_pricey_random_starters():
    """The premise of the other tests: without the cap some random starters use ``pricey``."""
    hit = 0
    for seed in SEEDS:
        search = _search(seed)
        search.initialize(dollars=1.0)
        hit += sum(_pricey(i) for i in _random_starters(search))
    assert hit >= 3


def test_capped_random_starters_cost_at_most_the_share_of_the_dollars():
    for seed in SEEDS:
        search = _search(seed, starter_dollar_share=0.005)
        search.initialize(dollars=1.0)
        starters = _random_starters(search)
        assert starters, f"seed {seed}: no random starter was kept"
        for ind in starters:
            assert ind.cost * PROBLEMS <= 0.005 + 1e-12, (seed, ind.workflow.describe(), ind.cost)
            assert not _pricey(ind)
        # the baselines are never capped: generate@pricey costs 1e-2 a set, twice the cap
        assert any(i.workflow.name == "generate@pricey" for i in search.population)
        assert len({i.hash for i in search.population}) == 8


def test_run_until_passes_its_dollar_budget_to_the_cap():
    for seed in SEEDS:
        search = _search(seed, starter_dollar_share=0.005)
        search.run_until(runs=0, dollars=1.0)  # initializes, then no generation fits
        assert not any(_pricey(i) for i in _random_starters(search)), seed


def test_probes_are_paid_once_and_rejected_probes_count_as_spent(monkeypatch):
    search = _search(0, starter_dollar_share=0.005, starter_probe_problems=3)
    verdicts: list[bool] = []
    probe = search._affordable

    def recording(workflow, cap):
        verdicts.append(probe(workflow, cap))
        return verdicts[-1]

    monkeypatch.setattr(search, "_affordable", recording)
    search.initialize(dollars=1.0)
    rejected = verdicts.count(False)
    assert rejected >= 1 and verdicts.count(True) == len(_random_starters(search))
    # every member is run once on every search problem (a kept starter's probe traces reused),
    # each rejected draw on the 3 probe problems only
    assert search.spent == PROBLEMS * len(search.population) + 3 * rejected


@pytest.mark.parametrize("how", ["default", "no dollars"])
def test_off_by_default_and_without_a_dollar_budget(how):
    """Off, the first population is the old one draw for draw (the cap consumes no randomness)."""
    for seed in SEEDS:
        old = _search(seed)
        old.initialize(dollars=1.0)
        if how == "default":
            new = _search(seed)
            new.initialize(dollars=1.0)
        else:
            new = _search(seed, starter_dollar_share=0.005)
            new.initialize()  # run() and callers without a dollar budget cap nothing
        assert [i.hash for i in new.population] == [i.hash for i in old.population]
        assert new.spent == old.spent


@pytest.mark.parametrize(("name", "value"), [("starter_dollar_share", -0.1), ("starter_probe_problems", 0)])
def test_bad_settings_are_refused(name, value):
    with pytest.raises(ConfigError, match=f"search.{name}"):
        SearchConfig(**{name: value})
