"""A search that stopped and was resumed: every call paid before the stop stays in the ledger, no
call whose answer reached the call log is paid twice (a workflow whose trace was never written, an
optimizer reply: the log's answers serve them), and the resumed search makes the uninterrupted
one's choices.

Before the call log kept answers, the quickstart (``configs/hflow_quickstart.yaml``) run once
without the sandbox, then resumed with it, ended at $0.194385 instead of $0.189277: the 16 calls
($0.005108) of the ``programmer@teacher`` step of a first-population workflow, paid, whose programs
could not run, so no trace was written and the resumed run made them again.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from lightning_agents.hflow import (
    ArithmeticTask,
    Backbone,
    BackbonePool,
    Completion,
    HFlowSearch,
    Node,
    PreferenceStore,
    SearchConfig,
    SimulatedRater,
    Workflow,
    WorkflowExecutor,
)
from lightning_agents.hflow.backbones import Ledger
from lightning_agents.hflow.reflection import STRUCTURE_EDITS
from lightning_agents.rewards.isolation import IsolationUnavailable


class _Scripted(Backbone):
    """Replies from the request alone (a sampled model with a seed): right on every third problem,
    a program for a programmer, an edit or instruction for the optimizer chosen by the seed."""

    kind = "scripted"

    def _complete(self, requests):
        out = []
        for r in requests:
            text = r.messages[-1]["content"]
            if "<edit>" in r.messages[0]["content"]:
                reply = f"<edit>{STRUCTURE_EDITS[r.seed % len(STRUCTURE_EDITS)]}</edit>"
            elif "<instruction>" in r.messages[0]["content"]:
                reply = f"<instruction>Check step {r.seed % 5}.</instruction>"
            elif "python" in text.lower():
                reply = "```python\nprint(7)\n```"
            else:
                reply = f"The answer is {7 if len(text) % 3 == 0 else 8}."
            out.append(Completion(reply, 10 + len(text) % 17, 5 + (r.seed or 0) % 7))
        return out


def _programs_run(self, programs):
    return [SimpleNamespace(returncode=0, stdout="7\n", stderr="", timed_out=False) for _ in programs]


def _no_sandbox(self, programs):
    raise IsolationUnavailable("sandbox isolation='bwrap' is unavailable on this machine (simulated)")


_PROGRAMMER = Workflow([Node("p", "programmer", backbone="pricey")])


def _search(out, seed=0, **settings):
    """A search streaming to ``out`` as ``evolve`` does (traces, calls, answers on disk)."""
    task = ArithmeticTask("val", n=14)
    pool = BackbonePool([_Scripted("cheap", 1.0, 2.0), _Scripted("pricey", 4.0, 8.0)], Ledger())
    pool.ledger.log_calls(out / "calls.jsonl")
    cfg = SearchConfig(population_size=4, offspring=4, max_nodes=3, eval_problems=8, workers=1, seed=seed, **settings)
    rater = SimulatedRater(noise=cfg.rater_noise, seed=seed) if cfg.rater == "simulated" else None
    return HFlowSearch(
        WorkflowExecutor(task, pool),
        cfg,
        problems=task.problems[:8],
        rater=rater,
        rater_problems=task.problems[8:],
        preferences=PreferenceStore(str(out / "preferences.jsonl")),
        seeds=[_PROGRAMMER],
        trace_log=str(out / "traces.jsonl"),
    )


def _calls(out):
    # the logged answer (a dict) as its JSON text, so a row is hashable
    return Counter(
        tuple(sorted((k, json.dumps(v, sort_keys=True) if k == "answer" else v) for k, v in json.loads(line).items()))
        for line in (out / "calls.jsonl").read_text().splitlines()
    )


def _cost(calls):
    prices = {"cheap": (1.0, 2.0), "pricey": (4.0, 8.0)}
    return sum(
        n * (prices[c["backbone"]][0] * c["input_tokens"] + prices[c["backbone"]][1] * c["output_tokens"]) / 1e6
        for c, n in ((dict(k), n) for k, n in calls.items())
    )


def _choices(search):
    return {
        "best_by_generation": [row["best_workflow"] for row in search.history],
        "seen": sorted(search.seen),
        "population": [i.hash for i in search.population],
        "answers": [(c.a, c.b, c.problem_id, c.winner) for c in search.preferences.comparisons],
        "problem_runs": search.evaluator.problem_runs,
        "chosen": search.best().hash,
    }


def _resume(out, state, seed, settings):
    search = _search(out, seed, **settings)
    if state is None:  # evolve's path for a stop before the first save
        search.book_logged_work(None)
    else:
        search.load_state_dict(json.loads(json.dumps(state)))
    return search


@pytest.fixture(autouse=True)
def _fake_sandbox(monkeypatch):
    monkeypatch.setattr(WorkflowExecutor, "_run_programs", _programs_run)


def test_a_run_that_failed_in_a_workflow_keeps_the_calls_it_paid_and_resumes_to_the_same_result(tmp_path, monkeypatch):
    """The quickstart without the sandbox: the first programmer workflow raises after its model
    calls were paid. No trace holds them, but the call log holds their answers: resumed, the
    workflow is served those answers, so the ledger is the clean run's (before the answers were
    logged, it was the clean run's plus those 8 calls, paid twice), and the search is the clean one."""
    (clean_dir := tmp_path / "clean").mkdir()
    clean = _search(clean_dir)
    clean.run(3)
    (failed_dir := tmp_path / "failed").mkdir()
    with monkeypatch.context() as patch:
        patch.setattr(WorkflowExecutor, "_run_programs", _no_sandbox)
        with pytest.raises(IsolationUnavailable):
            _search(failed_dir).run(3)
    paid_by_the_failed_run = _calls(failed_dir)
    # its programs never ran, so no trace of it was written: nothing can replay its calls
    assert not any(json.loads(x)["workflow"] == _PROGRAMMER.hash() for x in _lines(failed_dir / "traces.jsonl"))
    unreusable = Counter({k: n for k, n in paid_by_the_failed_run.items() if dict(k)["workflow"] == _PROGRAMMER.hash()})
    assert sum(unreusable.values()) == 8  # one call per search problem, paid and then lost

    resumed = _resume(failed_dir, None, 0, {})
    resumed.run(3)
    assert _choices(resumed) == _choices(clean)
    assert _calls(failed_dir) == _calls(clean_dir)
    assert resumed.pool.ledger.calls() == clean.pool.ledger.calls()
    assert resumed.pool.ledger.total_cost() == pytest.approx(clean.pool.ledger.total_cost())
    assert _cost(unreusable) > 0  # what the resumed run did not pay again


def _lines(path):
    return path.read_text().splitlines() if path.is_file() else []


SETTINGS = {
    "racing": {"rater": "none", "screen_problems": 2, "screen_margin": 0.05},
    # the careless rater's flips: a resumed search must flip the answers the uninterrupted one did
    "noisy rater": {"rater": "simulated", "rater_noise": 0.3, "questions_per_generation": 3},
    # sampled optimizer replies are seeded by their number: the replayed generation's replies must
    # be drawn with the numbers the uninterrupted run drew them with
    "optimizer": {"rater": "none", "optimizer_backbone": "cheap"},
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_search_stopped_mid_generation_resumes_to_the_uninterrupted_one(tmp_path, name):
    """Stopped after generation 2 was paid and streamed but before its state was saved (evolve's
    crash window), resumed from generation 1's state: the same choices as the uninterrupted search,
    and the same calls: the stopped generation's optimizer calls, paid again before the call log
    kept answers, are served from it, and the budget counts each once."""
    settings, seed, generations = SETTINGS[name], 3, 5
    (clean_dir := tmp_path / "clean").mkdir()
    clean = _search(clean_dir, seed, **settings)
    clean.run(generations)

    (stopped_dir := tmp_path / "stopped").mkdir()
    stopped = _search(stopped_dir, seed, **settings)
    stopped.run(1)
    state = stopped.state_dict()
    before = _calls(stopped_dir)
    stopped.step()  # paid and streamed; its state is never saved
    replayed = Counter({k: n for k, n in (_calls(stopped_dir) - before).items() if dict(k)["role"] == "optimizer"})
    assert sum(replayed.values()) > 0 or name != "optimizer"

    resumed = _resume(stopped_dir, state, seed, settings)
    resumed.run(generations - resumed.generation)
    assert _choices(resumed) == _choices(clean)
    assert _calls(stopped_dir) == _calls(clean_dir)
    assert resumed.pool.ledger.total_cost() == pytest.approx(clean.pool.ledger.total_cost())
    assert resumed.spent == clean.spent


def test_children_racing_stopped_stay_stopped_after_a_resume():
    """A child racing screened out is not fresh: a resumed search that forgot those proposed one
    again (its first problems served from the cache, the rest paid) where the uninterrupted one
    proposed another, and went its own way (seed 15: 302 problem runs instead of 320)."""
    from test_search_logic import _Executor  # tests/hflow is on sys.path (rootdir conftest, no packages)

    def search():
        ex = _Executor()
        cfg = SearchConfig(
            population_size=4,
            offspring=4,
            max_nodes=3,
            eval_problems=10,
            seed=15,
            workers=1,
            rater="none",
            screen_problems=2,
            screen_margin=0.05,
            ranked_structural_share=0.0,  # the random children are the ones racing stops here
        )
        return HFlowSearch(ex, cfg, problems=ex.task.problems[:10], rater_problems=ex.task.problems[10:])

    whole = search()
    whole.run(8)
    stopped = search()
    stopped.run(3)
    assert stopped._screened  # the case at hand: some children were stopped before the save
    resumed = search()
    resumed.load_state_dict(json.loads(json.dumps(stopped.state_dict())))
    assert resumed._screened == stopped._screened
    resumed.run(5)
    assert _choices(resumed) == _choices(whole)


def test_the_optimizer_budget_counts_every_paid_reply_once_after_a_resume(tmp_path):
    """Resumed, the budget starts from the call log's paid optimizer calls; a reply the log serves
    again is not counted a second time, and a request the log cannot serve (its prompt changed: a
    failed trace re-run) is paid and counted. Subtracting every logged answer instead left 5 of 25
    paid calls out of the budget (review, session 34)."""
    from lightning_agents.hflow.reflection import ReflectiveOptimizer

    first = BackbonePool([_Scripted("cheap", 1.0, 2.0)], Ledger())
    first.ledger.log_calls(tmp_path / "calls.jsonl")
    paid = ReflectiveOptimizer(first, "cheap", "arithmetic")
    for generation in (2, 3):  # paid after the last save, then killed
        for k in range(5):
            paid._ask("", f"gen {generation} #{k}", generation, k)

    ledger = Ledger()
    ledger.log_calls(tmp_path / "calls.jsonl")
    pool = BackbonePool([_Scripted("cheap", 1.0, 2.0)], ledger)
    ledger.replay_log()
    optimizer = ReflectiveOptimizer(pool, "cheap", "arithmetic")
    optimizer.calls = int(ledger.summary("role")["optimizer"]["calls"])  # book_logged_work's rule
    for k in range(5):  # generation 2 again: the same requests, served from the log
        reply = optimizer._ask("", f"gen 2 #{k}", 2, k)
        assert reply.replayed
    assert optimizer.calls == 10 and ledger.calls() == 10
    for k in range(5):  # generation 3 with other prompts: paid
        assert not optimizer._ask("", f"gen 3 #{k} (other failures)", 3, k).replayed
    assert optimizer.calls == 15 == ledger.calls()


def test_a_logged_answer_is_served_only_to_the_backbone_that_gave_it(tmp_path):
    """The replay key holds the backbone's description: switched to another model (here: another
    kind of scripted model under the same name), the resumed run asks again (review, session 34:
    the old model's answer was served and nothing sent)."""
    from lightning_agents.hflow.backbones import Request

    class _Other(_Scripted):
        kind = "other-scripted"

    request = Request([{"role": "user", "content": "What is 3 + 4?"}])
    first = BackbonePool([_Scripted("m", 1.0, 2.0)], Ledger())
    first.ledger.log_calls(tmp_path / "calls.jsonl")
    first.complete("m", [request], workflow="w")
    for backbone, served in ((_Scripted("m", 1.0, 2.0), True), (_Other("m", 1.0, 2.0), False)):
        ledger = Ledger()
        ledger.log_calls(tmp_path / "calls.jsonl")
        pool = BackbonePool([backbone], ledger)
        ledger.replay_log()
        assert pool.complete("m", [request], workflow="w")[0].replayed is served


def test_a_malformed_logged_answer_stops_the_resume_naming_its_line(tmp_path):
    log = tmp_path / "calls.jsonl"
    row = {"backbone": "m", "role": "workflow", "workflow": "w", "generation": 0, "input_tokens": 3}
    row |= {"output_tokens": 2, "request": "ab", "answer": {"text": "7", "tool_calls": [1, "x"], "truncated": False}}
    log.write_text(json.dumps(row) + "\n" + json.dumps(row | {"answer": {"text": "7"}}) + "\n")
    ledger = Ledger()
    ledger.log_calls(log)
    with pytest.raises(Exception, match=r"calls\.jsonl:1: not a call record"):
        ledger.replay_log()
