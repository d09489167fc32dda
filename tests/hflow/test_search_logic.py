"""The search loop on a scripted executor, where the right structure is known: HFlow must find it,
preferences must change the returned workflow, and memory must steer edits. The executor is a
stand-in so these tests isolate the search logic; the embedded models run it in test_evolution."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scripted_search import ScriptedBackbone, ScriptedTask

from lightning_agents.hflow import (
    BackbonePool,
    Comparison,
    HFlowSearch,
    Ledger,
    Node,
    PreferenceModel,
    PreferenceStore,
    SearchConfig,
    SimulatedRater,
    Workflow,
    choose_workflow,
    random_search,
)
from lightning_agents.hflow.backbones import Backbone
from lightning_agents.hflow.evaluation import Individual
from lightning_agents.hflow.memory import ExperienceMemory
from lightning_agents.hflow.operators import Trace

# every taste setting off (run 33 turned them on by default), for tests about other mechanisms
TASTE_OFF = dict(
    preference_lineage=0.0,
    preference_lineage_children=0,
    preference_children=0,
    preference_children_explore=0.0,
    preference_built_pairs=0,
    preference_built_reach=0,
    preference_reach_ops=False,
    preference_reach_small=0,
    preference_reach_as_op=False,
    preference_reach_anchor=False,
)


class _Executor:
    """Scores by structure: a programmer node on ``cheap`` solves everything; otherwise little."""

    def __init__(self, two_steps=False):
        self.two_steps = two_steps
        self.task = ScriptedTask()
        self.pool = BackbonePool(
            [ScriptedBackbone("cheap", 1.0, 1.0), ScriptedBackbone("pricey", 10.0, 10.0)], Ledger()
        )

    def run(self, workflow, problems, generation=0, salt=0):
        ops = {(n.op, n.backbone) for n in workflow.nodes}
        out = []
        for p in problems:
            i = int(p["id"][1:])
            if ("programmer", "cheap") in ops:
                score = 1.0
            elif any(b == "pricey" for _, b in ops):
                score = float(i % 2 == 0)
            else:
                score = float(i % 5 == 0)
            if self.two_steps:
                # the full score needs two edits: a cheap programmer and a refine after it
                has_refine = any(n.op == "refine" for n in workflow.nodes)
                score = (
                    1.0
                    if (("programmer", "cheap") in ops and has_refine)
                    else (0.6 if ("programmer", "cheap") in ops else score * 0.5)
                )
            cost = 1e-4 * sum(10 if n.backbone == "pricey" else 1 for n in workflow.nodes if n.backbone)
            steps = [
                {
                    "node": n.id,
                    "op": n.op,
                    "backbone": n.backbone,
                    "text": n.op,
                    "answer": None,
                    "code": None,
                    "note": "",
                }
                for n in workflow.nodes
            ]
            out.append(Trace(p["id"], steps, output=workflow.describe(), answer=None, cost=cost, score=score))
        return out


def _run(seed, two_steps=False, generations=6, **kw):
    ex = _Executor(two_steps)
    cfg = SearchConfig(
        population_size=4, offspring=4, max_nodes=3, eval_problems=10, seed=seed, workers=1, rater="none", **kw
    )
    search = HFlowSearch(ex, cfg, problems=ex.task.problems[:10], rater_problems=ex.task.problems[10:])
    search.run(generations)
    return search


def test_hflow_finds_the_structure_the_seeds_lack():
    for seed in range(3):
        search = _run(seed)
        seeds = max(i.fitness for i in search.seen.values() if i.edit == "seed" and i.workflow.name)
        # the single calls score 0.2 / 0.5; only a programmer@cheap node (evolved, or drawn for
        # the first population's random members) reaches 1.0
        assert seeds <= 0.5
        assert search.best().accuracy == 1.0 and not search.best().workflow.name


def test_hflow_beats_random_search_at_equal_budget():
    wins = 0
    for seed in range(4):
        search = _run(seed)
        budget = search.spent
        rs = random_search(_Executor(), _Executor().task.problems[:10], budget=budget, seed=seed, max_nodes=3)
        wins += search.best().accuracy >= rs["best_accuracy"]
    assert wins >= 3


def test_preferences_change_the_returned_workflow():
    wf_a = Workflow([Node("n0", "generate", backbone="cheap")])
    wf_b = Workflow([Node("n0", "cot", backbone="cheap")])

    class Ind:
        def __init__(self, wf, fitness):
            self.workflow, self.fitness, self.cost, self.accuracy = wf, fitness, 0.0, fitness
            self.hash = wf.hash()

    a, b = Ind(wf_a, 0.80), Ind(wf_b, 0.79)
    model = PreferenceModel(flip_rate=0.15)
    comps = [Comparison(wf_a.hash(), wf_b.hash(), f"p{i}", "b") for i in range(6)]
    model.fit(comps, {wf_a.hash(): wf_a, wf_b.hash(): wf_b})

    def score(i):
        return model.score(i.workflow)

    chosen, report = choose_workflow([a, b], score, delta=0.02, has_preferences=True)
    assert chosen is b and report["changed_by_preferences"] and report["fitness_given_up"] == pytest.approx(0.01)
    # outside delta, accuracy wins whatever the rater says
    chosen, report = choose_workflow([a, Ind(wf_b, 0.70)], score, delta=0.02, has_preferences=True)
    assert chosen is a and not report["changed_by_preferences"]


def test_preference_model_carries_to_offspring_and_tolerates_flips():
    rng = random.Random(0)
    cot = [Workflow([Node("n0", "cot", backbone=b, prompt=p)]) for b in ("cheap", "pricey") for p in ("", "x")]
    gen = [Workflow([Node("n0", "generate", backbone=b, prompt=p)]) for b in ("cheap", "pricey") for p in ("", "x")]
    comps = []
    for _ in range(40):  # the hidden taste: cot over generate, 15% of answers flipped
        a, b = rng.choice(cot), rng.choice(gen)
        winner = "a" if rng.random() > 0.15 else "b"
        comps.append(Comparison(a.hash(), b.hash(), "p", winner))
    known = {w.hash(): w for w in cot + gen}
    model = PreferenceModel(flip_rate=0.15).fit(comps, known)
    # a never-compared child that shares the cot feature inherits the preference
    child = Workflow([Node("n0", "cot", backbone="cheap", prompt="new"), Node("n1", "format")], [("n0", "n1")], "n1")
    other = Workflow(
        [Node("n0", "generate", backbone="cheap", prompt="new"), Node("n1", "format")], [("n0", "n1")], "n1"
    )
    assert model.prob(child, other) > 0.7


def test_preference_fit_stays_finite_with_few_answers():
    """One or two answers must give a modest score, not a diverged one (a plain gradient step
    with the prior's precision in it overshot and blew up to 1e66 on a single answer)."""
    wfs = [Workflow([Node("n0", op, backbone="cheap")]) for op in ("generate", "cot", "programmer")]
    known = {w.hash(): w for w in wfs}
    for comps in (
        [Comparison(wfs[1].hash(), wfs[0].hash(), "p0", "a")],
        [Comparison(wfs[1].hash(), wfs[0].hash(), "p0", "a"), Comparison(wfs[2].hash(), wfs[1].hash(), "p1", "b")],
    ):
        model = PreferenceModel(flip_rate=0.15).fit(comps, known)
        scores = [model.score(w) for w in wfs]
        assert all(abs(x) < 3.0 for x in scores), scores
        assert model.score(wfs[1]) > model.score(wfs[0])
        assert np.all(np.isfinite(model.cov)) and np.all(np.linalg.eigvalsh(model.cov) > 0)


def test_preferences_steer_the_search_and_persist(tmp_path):
    """A rater who wants cot (the fitness does not care) gets a cot workflow within delta."""
    ex = _Executor()

    def likes_cot(problem, trace):
        return float(any(s["op"] == "cot" for s in trace["steps"]))

    store = PreferenceStore(str(tmp_path / "preferences.jsonl"))
    cfg = SearchConfig(
        population_size=4,
        offspring=4,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        questions_per_generation=4,
        preference_delta=0.05,
        rater_flip_rate=0.15,
        steer_choices=False,  # a trajectory where fitness alone ends on a workflow without cot
        **TASTE_OFF,  # the taste settings would steer the fitness trajectory itself to cot
    )
    # one full-accuracy workflow with a cot step exists from the start; the questions must find it
    shows_work = Workflow(
        [
            Node("a", "programmer", backbone="cheap"),
            Node("b", "cot", backbone="cheap"),
            Node("v", "vote", backbone="cheap", params={"samples": 0}),
        ],
        [("a", "v"), ("b", "v")],
        "v",
    )
    search = HFlowSearch(
        ex,
        cfg,
        problems=ex.task.problems[:10],
        rater=SimulatedRater(noise=0.15, seed=0, criterion=likes_cot),
        rater_problems=ex.task.problems[10:],
        preferences=store,
        seeds=[shows_work],
    )
    search.run(8)
    assert not any(n.op == "cot" for n in search.best_by_fitness().workflow.nodes)  # fitness alone would not
    assert any(n.op == "cot" for n in search.best().workflow.nodes)
    assert search.best().fitness >= search.best_by_fitness().fitness - 0.05
    lines = (tmp_path / "preferences.jsonl").read_text().splitlines()
    assert len(lines) == len(search.preferences) > 0
    assert len(PreferenceStore(str(tmp_path / "preferences.jsonl"))) == len(lines)  # a restart reuses them


def test_memory_stops_repeating_failed_edits():
    memory = ExperienceMemory()
    for _ in range(20):
        memory.record_edit("t", "math", "add:vote", "p", "c", -0.3, 1)
    memory.record_edit("t", "math", "remove:generate", "p", "c2", 0.2, 1)
    w = memory.steering("t", "math", "edit_stats", ["add", "remove", "prompt"])
    assert w["add"] < w["prompt"] < w["remove"]
    # shrinkage: two bad results barely move a choice
    m2 = ExperienceMemory()
    m2.record_edit("t", "math", "add:cot", "p", "c", -0.5, 1)
    m2.record_edit("t", "math", "remove:cot", "p", "c", 0.0, 1)
    m2.record_edit("t", "math", "remove:cot", "p", "c", 0.0, 1)
    w2 = m2.steering("t", "math", "edit_stats", ["add", "remove"])
    assert w2["add"] > 0.5 * w2["remove"]
    assert memory.failed_edits("t", "p") == {"add:vote"}


class _AllFailed(dict):
    """Lineage in which every edit already made every parent worse: a converged population."""

    class _Everything(set):
        def __contains__(self, item):
            return True

    def get(self, key, default=None):
        return self._Everything()


def test_a_converged_search_still_spends_its_generations_on_new_workflows():
    # When every edit a parent could make has failed from it, the rules give no child; a
    # generation of unchanged parents spends nothing and a budget-driven loop never ends (the
    # simulated GSM8K world with 100 search problems hung that way). Failed edit kinds are
    # repeated with a new draw, then immigrants come in.
    search = _run(0, generations=2, use_memory=True)
    search._failed_cache = _AllFailed()
    seen = len(search.seen)
    for _ in range(3):
        before = search.spent
        search.step()
        assert search.spent > before
    assert len(search.seen) > seen
    assert all(i.edit != "none" for i in search.seen.values())


def test_run_until_spends_a_budget_and_never_overruns_it():
    ex = _Executor()
    cfg = SearchConfig(population_size=4, offspring=4, max_nodes=3, seed=0, workers=1, rater="none")
    search = HFlowSearch(ex, cfg, problems=ex.task.problems[:10], rater_problems=ex.task.problems[10:])
    generations = search.run_until(200)
    assert generations == search.generation > 0
    # stopped because a whole generation (4 children x 10 problems) no longer fitted
    assert search.spent <= 200 < search.spent + 40
    # a dollar limit already reached stops it before the next generation
    spent = search.spent
    assert search.run_until(10_000, dollars=ex.pool.ledger.total_cost()) == 0 and search.spent == spent


def test_racing_screens_out_bad_children_and_saves_budget():
    full = _run(0)
    raced = _run(0, screen_problems=3, screen_margin=0.0)
    assert raced.best().accuracy == 1.0
    # same generations, fewer problem runs: children worse on the first 3 problems stopped there
    assert raced.spent < full.spent
    assert raced.spent == raced.best_so_far[-1][0] or raced.best_so_far[-1][0] <= raced.spent


def test_racing_goes_in_stages_and_stops_each_child_at_one():
    """screen_problems=2 on 10 problems races on 2, 4 and 8 problems, then all 10: a screened-out
    child has traces on exactly one stage's problems (no more runs were paid for it), and every
    child that entered the population ran on all 10."""
    stopped_at: set[int] = set()
    for seed in range(6):
        search = _run(seed, generations=6, screen_problems=2, screen_margin=0.05)
        runs = {}
        for h, _ in search.evaluator.cache:
            runs[h] = runs.get(h, 0) + 1
        stopped_at |= {runs[h] for h in search._screened}
        assert all(runs[i.hash] == 10 for i in search.population)
        assert sum(runs.values()) == search.evaluator.problem_runs
    # pricey and plain workflows tie on the first 2 problems and part on 4: a later stage stops some
    assert stopped_at <= {2, 4, 8} and 2 in stopped_at and stopped_at & {4, 8}


def test_survivors_are_the_best_of_everything_evaluated():
    """Without preferences, elitist survivor selection keeps the population_size best by fitness
    (then cost) of every workflow ever evaluated; half-way workflows (0.6) are kept to build on."""
    for seed in range(3):
        search = _run(seed, two_steps=True, generations=4, max_per_shape=0)

        def key(i):
            return (-i.fitness, i.cost, i.hash)

        best = sorted(search.seen.values(), key=key)[: search.config.population_size]
        assert [i.hash for i in sorted(search.population, key=key)] == [i.hash for i in best]


def test_niching_keeps_one_member_per_shape_the_best_of_it():
    """With max_per_shape=1, prompt and setting variants of one structure do not crowd the
    population: each shape holds one member, the best evaluated of that shape, and the shapes kept
    are the best shapes."""
    for seed in range(3):
        search = _run(seed, two_steps=True, generations=4, max_per_shape=1)

        def key(i):
            return (-i.fitness, i.cost, i.hash)

        best_of_shape: dict[str, object] = {}
        for i in sorted(search.seen.values(), key=key):
            best_of_shape.setdefault(i.workflow.shape(), i)
        shapes = [i.workflow.shape() for i in search.population]
        assert len(set(shapes)) == len(shapes) == search.config.population_size
        expected = sorted(best_of_shape.values(), key=key)[: search.config.population_size]
        assert sorted(i.hash for i in search.population) == sorted(i.hash for i in expected)


def test_shape_ignores_prompts_and_params_not_structure():
    a = Workflow(
        [Node("n0", "programmer", backbone="cheap"), Node("n1", "refine", backbone="cheap")], [("n0", "n1")], "n1"
    )
    b = a.copy()
    b.nodes[0].prompt, b.nodes[0].params = "Write a short program.", {"retries": 2}
    c = a.copy()
    c.nodes[1].backbone = "pricey"
    assert a.hash() != b.hash() and a.shape() == b.shape()
    assert a.shape() != c.shape()


def test_reflective_optimizer_runs_in_the_loop_and_is_charged():
    from lightning_agents.hflow.backbones import Completion

    class Optimizer(Backbone):
        kind = "scripted"

        def __init__(self):
            super().__init__("opt", 5.0, 20.0)
            self.prompts = []

        def _complete(self, requests):
            self.prompts += [r.messages[-1]["content"] for r in requests]
            self.limits = {r.max_tokens for r in requests}
            return [
                Completion(
                    "Programs do not guess. <edit>add:programmer</edit> "
                    "<instruction>Compute it with code.</instruction>",
                    300,
                    40,
                )
                for _ in requests
            ]

    ex = _Executor()
    opt = Optimizer()
    ex.pool.add(opt)
    cfg = SearchConfig(
        population_size=4,
        offspring=4,
        max_nodes=3,
        eval_problems=10,
        seed=0,
        workers=1,
        rater="none",
        optimizer_backbone="opt",
        optimizer_max_tokens=123,
    )
    search = HFlowSearch(ex, cfg, problems=ex.task.problems[:10])
    search.run(3)
    assert search.optimizer.calls > 0
    assert search.spent == search.evaluator.problem_runs + search.optimizer.calls
    assert ex.pool.ledger.summary("role")["optimizer"]["calls"] == search.optimizer.calls
    assert any(i.edit.endswith(":optimizer") for i in search.seen.values())
    row = search.history[-1]
    assert (row["optimizer_calls"], row["optimizer_unusable"]) == (search.optimizer.calls, 0)
    assert opt.limits == {123}
    # the optimizer was shown scores and failing problems
    assert any("score" in p and "Failure 1" in p for p in opt.prompts)


class _LuckyExecutor(_Executor):
    """``generate@pricey`` is perfect on the first 10 problems (the search set) and wrong on the
    rest; ``programmer@cheap`` is right on 9 in 10 everywhere: on the search set alone the lucky
    one wins."""

    def run(self, workflow, problems, generation=0, salt=0):
        out = super().run(workflow, problems, generation, salt)
        ops = {(n.op, n.backbone) for n in workflow.nodes}
        for t in out:
            i = int(t.problem_id[1:])
            if ("generate", "pricey") in ops:
                t.score = float(i < 10)
            elif ("programmer", "cheap") in ops:
                t.score = float(i % 10 != 3)
            else:
                t.score = 0.0
        return out


def _lucky_search(confirm_top):
    ex = _LuckyExecutor()
    lucky = Workflow([Node("n0", "generate", backbone="pricey")], output="n0")
    solid = Workflow([Node("n0", "programmer", backbone="cheap")], output="n0")
    cfg = SearchConfig(
        population_size=2, offspring=2, max_nodes=1, seed=0, workers=1, rater="none", confirm_top=confirm_top
    )
    search = HFlowSearch(
        ex, cfg, problems=ex.task.problems[:10], rater_problems=ex.task.problems[10:], seeds=[lucky, solid]
    )
    search.initialize()
    return search, lucky, solid


def test_confirming_leaders_on_validation_problems_beats_the_winners_curse():
    plain, lucky, solid = _lucky_search(0)
    assert plain.best().hash == lucky.hash()  # perfect on the 10 search problems
    search, lucky, solid = _lucky_search(2)
    assert search.validation == search.rater_problems  # disjoint from the search problems: the default
    assert search.confirmed == {lucky.hash(), solid.hash()}
    # confirmed scores are over search + validation problems, in the population too
    assert search.seen[lucky.hash()].accuracy == pytest.approx(0.5)
    assert search.seen[solid.hash()].accuracy == pytest.approx(0.9)
    assert search.best().hash == solid.hash() and search.best_so_far[-1][3] == solid.hash()
    # the 2 x 10 validation runs are paid from the budget
    assert search.spent == plain.spent + 20
    # only confirmed workflows are returned; a restart keeps what was confirmed
    state = search.state_dict()
    again, _, _ = _lucky_search(2)
    again.load_state_dict(state)
    assert again.confirmed == search.confirmed
    # one confirmation a call: the lucky leader is confirmed first and falls behind
    one, lucky, solid = _lucky_search(1)
    assert one.confirmed == {lucky.hash()} and one.best().hash == lucky.hash()
    assert one.confirm() == 1 and one.best().hash == solid.hash()


def test_memory_steers_what_edits_choose_not_only_their_kind():
    """Lineage books each edit by kind and choice (add:refine, backbone:mid); with steer_choices
    the mutator brings in what paid more often (an add on a one-node parent: a refine step on the
    backbone that paid), and without it chooses uniformly as before."""
    memory = ExperienceMemory()
    for _ in range(8):
        memory.record_edit("t", "math", "add:refine", "p", "c", 0.1, 1)
        memory.record_edit("t", "math", "add:format", "p", "c", -0.05, 1)
        memory.record_edit("t", "math", "add:generate", "p", "c", -0.2, 1)
        memory.record_edit("t", "math", "backbone:cheap", "p", "c", 0.1, 1)
        memory.record_edit("t", "math", "backbone:pricey", "p", "c", -0.2, 1)
    assert memory.data["tasks"]["t"]["choice_stats"]["add:refine"] == [8, pytest.approx(0.8)]
    ex = _Executor()
    ex.task.name = "t"
    cfg = SearchConfig(max_nodes=3, seed=0, workers=1, rater="none", steer_choices=True)
    search = HFlowSearch(ex, cfg, problems=ex.task.problems[:4], memory=memory)
    parent = Workflow([Node("n0", "programmer", backbone="pricey")], output="n0")

    def shares(mutator):
        adds = [mutator.mutate(parent, "add")[1] for _ in range(1000)]
        moves = [mutator.mutate(parent, "backbone")[1] for _ in range(50)]
        return adds.count("add:refine") / len(adds), moves.count("backbone:cheap") / len(moves)

    refine, cheap = shares(search._mutator())
    assert cheap == 1.0  # the only other backbone
    search.config.steer_choices = False
    refine_plain, _ = shares(search._mutator())
    # plain: half the adds are branches, half the chain steps refine; steering shrinks toward the
    # task mean (4 pseudo-observations) and never forbids, so it shifts, it does not decide
    assert refine_plain == pytest.approx(0.25, abs=0.04) and refine > refine_plain + 0.05
    # a memory from before choice_stats existed still consolidates
    old = ExperienceMemory()
    old.record_edit("u", "math", "remove", "p", "c", 0.1, 1)
    assert "choice_stats" not in old.data["tasks"]["u"]
    old.consolidate("u")
    assert old.data["domains"]["math"]["edit_stats"]["remove"] == [1, 0.1]


def test_preferences_steer_what_edits_choose():
    """With ``preference_steering`` the operator an add brings in and the backbone a move goes to
    follow the preference model's feature weights (a rater who keeps preferring workflows with a
    ``cot`` step on ``cheap`` makes adds of ``cot`` and moves to ``cheap`` more likely), so
    offspring carry the preferred features; at 0, or with no answers, the choices are as without."""
    ex = _Executor()
    cfg = SearchConfig(max_nodes=3, seed=0, workers=1, rater="simulated", use_memory=False, preference_steering=1.0)
    search = HFlowSearch(ex, cfg, problems=ex.task.problems[:4])
    liked = Workflow([Node("n0", "cot", backbone="cheap")], output="n0")
    others = [
        Workflow([Node("n0", "generate", backbone="pricey")], output="n0"),
        Workflow([Node("n0", "programmer", backbone="pricey")], output="n0"),
    ]
    for wf in [liked, *others]:
        search.seen[wf.hash()] = Individual(wf, 0.5, 0.0, 0.5, "seed", None, 0)
    parent = Workflow([Node("n0", "programmer", backbone="pricey")], output="n0")

    def shares(mutator):
        rng = random.Random(1)
        mutator.rng = rng
        adds = [mutator.mutate(parent, "add")[1] for _ in range(2000)]
        return adds.count("add:cot") / len(adds)

    plain = shares(search._mutator())  # no answers yet: nothing to steer by
    for other in others:
        for _ in range(20):
            search.preferences.add(Comparison(liked.hash(), other.hash(), "p0", "a", "simulated", 1))
    search._fit_preferences()
    assert search.preference_model.feature_weight("op:cot") > 0.4
    steered = shares(search._mutator())
    search.config.preference_steering = 0.0
    off = shares(search._mutator())
    # (measured: 0.13 of the adds bring in a cot step unsteered, 0.23 steered)
    assert off == pytest.approx(plain, abs=0.03)
    assert steered > 1.5 * plain
    assert search._steered_choices(None) is None
    search.config.preference_steering = 1.0
    weights = search._steered_choices({"add:cot": 2.0})
    assert weights["add:cot"] > 2.0 and weights["backbone:cheap"] > 1.0 > weights["backbone:pricey"]
    # each factor is bounded: a confident taste shifts choices, it never forbids one
    assert all(
        math.exp(-2) - 1e-9 <= v / {"add:cot": 2.0}.get(k, 1.0) <= math.exp(2) + 1e-9 for k, v in weights.items()
    )
