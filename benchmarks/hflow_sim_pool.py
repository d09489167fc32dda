"""Pool the per-seed rows of several ``hflow_sim_search.py`` results (same world and settings, other
seeds) and say which workflows could meet the o1 target at all.

A replication on new seeds is run once, with nothing changed; pooling it with the first run gives
the estimate over all seeds (paired bootstrap per seed, as the search script computes it).
``--reach-against`` (the baselines run alone at a larger budget on the same seeds) adds the
ratio of HFlow's median runs to the optimum over the best baseline's, with a bootstrap interval
over seeds (the ratio of two medians over 30 seeds is noisy). ``--optimum-cache`` (the enumeration ``hflow_sim_search.py`` writes) adds how many enumerated
workflows meet target (c), within 1 point of ``generate@o1``'s held-out accuracy at <= 1/4 of its
cost, and whether the fitness optimum does: a world where it does not asks the search for a
different trade-off than the fitness it maximises.

    python benchmarks/hflow_sim_pool.py benchmarks/results/hflow_sim_search_run5_search100.json \
        benchmarks/results/hflow_sim_search_run5_seeds30-59_search100.json --optimum-cache runs/hflow_sim_optimum.json \
        --reach-against benchmarks/results/hflow_sim_search_run5_search100_baselines_4x_budget.json \
        benchmarks/results/hflow_sim_search_run5_seeds30-59_search100_baselines_4x_budget.json

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hflow_sim_search import bootstrap_ci, summarise

SAME = ("world", "budget_problem_runs", "budget_dollars", "search_size", "heldout", "lambda_cost", "hflow_settings")


def reach_ratio(hflow: list[dict], censored: int, files: list[str], resamples: int) -> dict:
    """HFlow's median runs to the optimum over the smallest baseline median in ``files``; a seed
    that never got there counts as twice its own run's budget. The interval resamples seeds (the
    same seeds for every method)."""
    runs = [json.loads(Path(f).read_text()) for f in files]
    mine = {r["seed"]: censored if r["runs_to_optimum"] is None else r["runs_to_optimum"] for r in hflow}
    theirs: dict[str, dict[int, int]] = {}
    for r in runs:
        cap = 2 * r["budget_problem_runs"]
        for m, rows in r["per_seed"].items():
            for row in rows:
                reach = row["runs_to_optimum"]
                theirs.setdefault(m, {})[row["seed"]] = cap if reach is None else reach
    theirs.pop("hflow", None)
    seeds = sorted(mine)
    missing = [m for m, by_seed in theirs.items() if set(by_seed) != set(seeds)]
    if not theirs or missing:
        sys.exit(f"--reach-against: {missing or 'no baselines'} not run on exactly the seeds {seeds}")

    def ratio(sample: list[int]) -> float:
        best = min(statistics.median(by_seed[s] for s in sample) for by_seed in theirs.values())
        return statistics.median(mine[s] for s in sample) / best

    rng = random.Random(0)
    boot = sorted(ratio(rng.choices(seeds, k=len(seeds))) for _ in range(resamples))
    medians = {m: statistics.median(by_seed.values()) for m, by_seed in theirs.items()}
    return {
        "hflow_median": statistics.median(mine.values()),
        "baseline_medians": medians,
        "ratio": ratio(seeds),
        "lo": boot[int(0.025 * resamples)],
        "hi": boot[int(0.975 * resamples) - 1],
        "share_at_most_half": sum(b <= 0.5 for b in boot) / resamples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="hflow_sim_search.py JSON lines (one per file)")
    ap.add_argument("--optimum-cache", default=None, help="the enumeration hflow_sim_search.py wrote for this world")
    ap.add_argument(
        "--reach-against",
        nargs="+",
        default=None,
        help="result files of the baselines alone at a larger budget on the same seeds (--methods ...): "
        "HFlow's median runs to the optimum over the best baseline's there, with a bootstrap interval",
    )
    ap.add_argument("--resamples", type=int, default=4000, help="bootstrap resamples of --reach-against")
    args = ap.parse_args()
    runs = [json.loads(Path(f).read_text()) for f in args.results]
    for f, r in zip(args.results[1:], runs[1:]):
        for k in SAME:
            if r.get(k) != runs[0].get(k):
                sys.exit(f"{f}: {k} is {r.get(k)!r}, not {runs[0].get(k)!r} as in {args.results[0]}")
    seeds = [s for r in runs for s in r["seeds"]]
    if len(set(seeds)) != len(seeds):
        sys.exit(f"seeds overlap: {sorted(s for s in set(seeds) if seeds.count(s) > 1)}")
    first = runs[0]
    per_seed = {m: [row for r in runs for row in r["per_seed"][m]] for m in first["per_seed"]}
    censored = 2 * first["budget_problem_runs"]
    expensive = first["expensive_single_call"]
    summary, minus_random = summarise(per_seed, first["budget_problem_runs"], expensive)
    line = {
        "benchmark": "hflow_sim_pool",
        "results": args.results,
        "world": first["world"],
        "seeds": len(seeds),
        "summary": summary,
        "minus_random_paired_bootstrap_95": minus_random,
    }
    with_rater = [row for r in runs for row in r["preference_per_seed"]["with_rater"]]
    without = [row for r in runs for row in r["preference_per_seed"]["without_rater"]]
    if with_rater:
        line["preference_with_minus_without"] = {
            k: bootstrap_ci([r[k] for r in with_rater], [r[k] for r in without]) for k in ("shows_working", "accuracy")
        }
    if args.reach_against:
        line["reach_ratio"] = reach_ratio(per_seed["hflow"], censored, args.reach_against, args.resamples)
    if args.optimum_cache:
        rows = json.loads(Path(args.optimum_cache).read_text())["rows"]
        o1 = next(r for r in rows if r["describe"] == "n0=generate@o1")
        if abs(o1["accuracy"] - expensive["accuracy"]) > 1e-9:
            sys.exit(f"{args.optimum_cache}: not this world's enumeration (generate@o1 accuracy differs)")
        meets = [r for r in rows if r["accuracy"] >= o1["accuracy"] - 0.01 and r["cost"] <= o1["cost"] / 4]
        optimum = max(rows, key=lambda r: r["fitness"])
        line["o1_target_feasibility"] = {
            "enumerated": len(rows),
            "meeting_o1_target": len(meets),
            "optimum_meets_it": optimum in meets,
            "best_meeting_it": max(meets, key=lambda r: r["fitness"])["describe"] if meets else None,
        }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
