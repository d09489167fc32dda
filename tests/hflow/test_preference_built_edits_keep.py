"""Built edits that keep the best workflow's computation (issue 17 target d, run 30,
``SearchConfig.preference_built_keep``): with the setting, a built pair's edit is one a ridge fit
of fitness on the evaluated workflows' features predicts to lose at most ``preference_delta``,
so an answer preferring it brings in a child the choice can still return. Off by default; with
no rater the search is unchanged."""

from __future__ import annotations

import pytest
from test_preference_built_pairs import PLAIN, _cot, _pin_all_but_cot, _search, _started

from lightning_agents.hflow import SearchConfig


def _has_programmer(wf) -> bool:
    return any(n.op == "programmer" and n.backbone == "cheap" for n in wf.nodes)


def test_off_by_default():
    assert SearchConfig().preference_built_keep is False


def test_the_fit_predicts_a_loss_for_dropping_the_working_step():
    search = _search(preference_built_pairs=1, preference_built_keep=True)
    # nothing evaluated yet: no evidence, no predicted loss
    assert search._predicted_losses(PLAIN, [PLAIN]) == [0.0]
    search = _started(search)
    # the scripted world: a cheap programmer solves everything, anything else little
    options = [child for child, _ in search._mutator().neighbours(PLAIN) if _cot(child)]
    keeps = [c for c in options if _has_programmer(c)]
    drops = [c for c in options if not _has_programmer(c)]
    assert keeps and drops
    losses = dict(zip([c.hash() for c in options], search._predicted_losses(PLAIN, options)))
    assert max(losses[c.hash()] for c in keeps) < min(losses[c.hash()] for c in drops)
    assert min(losses[c.hash()] for c in drops) > search.config.preference_delta


def test_the_kept_edit_is_built_and_evaluates_within_delta_where_the_least_different_does_not():
    picks = {}
    for keep in (False, True):
        search = _started(_search(preference_built_pairs=1, preference_built_keep=keep))
        best = search.best_by_fitness()
        assert best.hash == PLAIN.hash()
        feature, child, edit = search._built_pair(best, set())
        assert feature == "op:cot" and _cot(child)
        # what the edit really scores on the search problems (the search's own evaluator)
        fitness = search.evaluator.evaluate(child, search.problems, search.generation).fitness
        picks[keep] = (child, edit, best.fitness - fitness)
    # run 29's rule (least different) replaces the working programmer with cot: far below the best
    child, edit, loss = picks[False]
    assert edit == "replace:cot" and not _has_programmer(child)
    assert loss > 0.5
    # the kept edit votes a cot branch in beside it: within preference_delta of the best
    child, edit, loss = picks[True]
    assert edit == "add:cot" and _has_programmer(child)
    assert loss <= SearchConfig().preference_delta


@pytest.mark.parametrize("case", ["no rater", "answers but no rater"])
def test_without_a_rater_the_search_is_unchanged(case):
    runs = []
    for settings in ({"preference_built_pairs": 2, "preference_built_keep": True}, {}):
        search = _search(rater=None, questions_per_generation=4, **settings)
        search.initialize()
        if case == "answers but no rater":
            _pin_all_but_cot(search)
        for _ in range(3):
            search.step()
        runs.append(([i.hash for i in search.population], sorted(search.seen), search.spent, search.questions_asked))
    assert runs[0] == runs[1]
