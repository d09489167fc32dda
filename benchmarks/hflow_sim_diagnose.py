"""Instrumented HFlow runs on the simulated GSM8K world, on development seeds (100 and up) only.

The reported benchmark (``hflow_sim_search.py``, seeds 0-9) says how well each method does; this
says why. Per seed it prints one JSON line: the chosen workflow's held-out fitness and accuracy,
its search fitness, the best held-out fitness among every workflow the search evaluated (so
the loss splits into *choice*, chosen vs best seen, and *exploration*, best seen vs the
optimum), where the near-optimal ones ranked by search fitness, the problem runs until the
best-so-far was within 1 point of the optimum, runs, dollars and questions. ``--recheck K``
also re-scores the K best by search fitness on the 40 rater items (free, outside the budget)
to ask whether more items would have chosen better. Seeds, budget and world are those of the
reported benchmark; ``--set '{"steer_choices": false}'`` overrides HFlow settings.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hflow_sim_diagnose.py --mode hflow --seeds 100 101 102
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hflow_sim import SimExecutor, SimTask, shows_working, sim_pool
from hflow_sim_search import DATA, LAMBDA, PREFERENCE_QUESTIONS, heldout_score, hflow_settings

from lightning_agents.hflow import HFlowSearch, SearchConfig, SimulatedRater, Workflow, random_search

OPTIMUM = 0.850  # held-out fitness of the enumerated optimum (world seed 0, 400 held-out items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(range(100, 120)),
        help="development seeds, 100 or more: each draws its own search and rater items (default: 100-119)",
    )
    ap.add_argument(
        "--mode",
        choices=("hflow", "no_preferences", "preference_benchmark", "random"),
        default="hflow",
        help="what to run: HFlow with a rater that prefers the right, then the cheaper answer; HFlow without a "
        "rater; HFlow with the rater whose hidden criterion is a shown working (15%% noise, 4 questions); or "
        "random search (default: hflow)",
    )
    ap.add_argument("--set", default="{}", help="JSON of SearchConfig fields over the benchmark's")
    ap.add_argument(
        "--recheck",
        type=int,
        default=0,
        help="also re-score this many of the best by search fitness on the 40 rater items (free) and report the "
        "held-out fitness of the best pooled; 0 skips it (default: 0)",
    )
    ap.add_argument("--budget", type=int, default=2400, help="problem runs per seed (default: 2400)")
    ap.add_argument("--dollars", type=float, default=30.0, help="ledger dollars per seed (default: 30)")
    args = ap.parse_args()
    if min(args.seeds) < 100:
        ap.error("seeds below 100 are the reported ones; diagnose on development seeds")
    task = SimTask(str(DATA))
    order = list(task.problems)
    random.Random(0).shuffle(order)
    heldout, rest = order[:400], order[400:]
    memo: dict[str, dict] = {}

    def ho(wf) -> dict:
        if wf.hash() not in memo:
            memo[wf.hash()] = heldout_score(task, heldout, wf, 0)
        return memo[wf.hash()]

    rows = []
    for seed in args.seeds:
        sample = random.Random(1000 + seed).sample(rest, 80)
        search_set, rater_set = sample[:40], sample[40:]
        pool = sim_pool()
        if args.mode == "random":
            out = random_search(
                SimExecutor(task, pool, 0),
                search_set,
                budget=args.budget,
                seed=seed,
                max_nodes=4,
                lambda_cost=LAMBDA,
                cost_budget=args.dollars,
            )
            chosen = ho(Workflow.from_dict(out["best"]))
            reach = next(
                (
                    r[0]
                    for r in out["trajectory"]
                    if ho(Workflow.from_dict(out["workflows"][r[4]]))["fitness"] >= OPTIMUM - 0.01
                ),
                None,
            )
            rows.append(
                {
                    "seed": seed,
                    "fitness": chosen["fitness"],
                    "accuracy": chosen["accuracy"],
                    "reach": reach,
                    "runs": out["problem_runs"],
                    "dollars": out["cost"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            continue
        prefs = args.mode != "no_preferences"
        criterion = shows_working if args.mode == "preference_benchmark" else None
        extra = json.loads(args.set)
        # the preference benchmark's cap (4 a generation) includes the built pairs, asked on top
        built = extra.get("preference_built_pairs", SearchConfig().preference_built_pairs)
        questions = max(1, PREFERENCE_QUESTIONS - built) if criterion else 2
        settings = hflow_settings(seed, preferences=prefs, criterion=criterion, questions=questions)
        settings.update(extra)
        cfg = SearchConfig(**settings)
        rater = SimulatedRater(noise=0.15 if criterion else 0.0, seed=seed, criterion=criterion) if prefs else None
        search = HFlowSearch(
            SimExecutor(task, pool, 0), cfg, problems=search_set, rater=rater, rater_problems=rater_set
        )
        search.run_until(args.budget, args.dollars)
        chosen, report = search.finish(max_cost=args.dollars)
        seen = sorted(search.seen.values(), key=lambda i: (-i.fitness, i.cost, i.hash))
        best_seen = max(ho(i.workflow)["fitness"] for i in seen)
        reach = next(
            (s for s, _, _, h in search.best_so_far if ho(search.seen[h].workflow)["fitness"] >= OPTIMUM - 0.01), None
        )
        row = {
            "seed": seed,
            "fitness": ho(chosen.workflow)["fitness"],
            "accuracy": ho(chosen.workflow)["accuracy"],
            "shows_working": ho(chosen.workflow)["shows_working"],
            "search_fitness": chosen.fitness,
            "best_seen": best_seen,
            "near_optimum_ranks": [k for k, i in enumerate(seen) if ho(i.workflow)["fitness"] >= OPTIMUM - 0.01][:5],
            "evaluated": len(seen),
            "reach": reach,
            "runs": search.spent,
            "dollars": pool.ledger.total_cost(),
            "questions": search.questions_asked,
            "changed_by_preferences": report["changed_by_preferences"],
            "workflow": chosen.workflow.describe(),
        }
        if args.recheck:
            # the K best by search fitness re-scored on the rater items too, the best pooled taken
            ex = SimExecutor(task, sim_pool(), 0)
            top = seen[: args.recheck]
            pooled = []
            for i in top:
                traces = ex.run(i.workflow, rater_set)
                acc = sum(t.score for t in traces) / len(traces)
                cost = sum(t.cost for t in traces) / len(traces)
                pooled.append((i.fitness + acc - LAMBDA * cost) / 2)
            pick = top[max(range(len(top)), key=pooled.__getitem__)]
            row["rechecked_fitness"] = ho(pick.workflow)["fitness"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {
        k: statistics.mean(r[k] for r in rows)
        for k in ("fitness", "accuracy", "best_seen", "rechecked_fitness", "shows_working", "runs", "dollars")
        if k in rows[0]
    }
    summary["reached"] = sum(r["reach"] is not None for r in rows)
    print(json.dumps({"mode": args.mode, "set": json.loads(args.set), "seeds": args.seeds, **summary}))


if __name__ == "__main__":
    main()
