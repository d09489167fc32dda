"""Two cheap questions about target (d) of issue 17 (the hidden criterion with - without a rater),
asked of the preference benchmark's own searches: analysis, no lever.

Per seed the with-rater and the without-rater search of ``hflow_sim_search.py``'s preference
benchmark are rebuilt as ``run_hflow`` builds them (the defaults and the command line's HFlow
settings), run through ``run_until`` and ``finish``. Then:

1. **Raced-out children.** Racing (``screen_problems``) drops a child after 10 search problems
   when it falls clearly behind. A child that shows the working and was dropped this way never
   reaches the choice rule. Every such child is scored on all of the seed's search problems (a
   separate pool: the search is not charged); a seed counts as *turnable by a re-race* when the
   with-rater choice lacks the working and a dropped child that shows it comes within
   ``preference_delta`` of the best returnable fitness with held-out accuracy no more than 2
   points below the without-rater choice's (run 14's bar).
2. **Contenders the search problems cannot tell apart.** The choice rule takes the most preferred
   workflow within a fixed ``preference_delta`` of the best fitness. With 50 search problems a
   workflow's fitness is known to about 4 points, so a fixed 0.02 may exclude workflows that are
   no worse. The with-rater choice is re-applied (the search's fitted preference model) with the
   contenders widened to every returnable workflow whose fitness gap to the best is at most ``z``
   standard errors of the paired per-problem fitness difference (read from the evaluator's
   cache), for each ``--z``. This is post hoc: a search run with that rule would also ask its
   questions about the wider set.

    OMP_NUM_THREADS=1 python benchmarks/hflow_sim_contenders.py --world humaneval --search-size 50 \\
        --budget 3000 --dollars 37.5 --seeds $(seq 100 159)

Prints one JSON line per seed, then a summary line (paired bootstrap over seeds, as the search
script computes it).

``--run-delta-se Z --pair-with FILE`` runs the rule instead of re-applying it (run 25): each seed's
with-rater search with ``preference_delta_se = Z``, paired with the without-rater row of that seed in
``FILE`` (this script's ``--out`` of the same seeds; the without-rater search never reads the setting).
``--run-settings JSON`` does the same with any SearchConfig settings that leave a search without a
rater unchanged (run 27: ``{"preference_children": 1, ...}``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hflow_sim_search as sim

import lightning_agents.hflow.search as search_module
from lightning_agents.hflow import HFlowSearch, SearchConfig, SimulatedRater

_race = search_module.race


class RaceLog:
    """Wraps the search module's ``race`` to keep every child it screens out (hash -> workflow)."""

    def __init__(self) -> None:
        self.dropped: dict = {}

    def __call__(self, children, *args, **kwargs):
        out, runs = _race(children, *args, **kwargs)
        for child, _parent in children:
            if child.hash() in out:
                self.dropped.setdefault(child.hash(), child)
        return out, runs


def build(task, search_set, rater_set, seed: int, with_rater: bool, budget: int, dollars: float) -> tuple:
    """The preference benchmark's search (``run_hflow``'s settings), run and finished."""
    crit = sim.shows_working if with_rater else None
    settings = sim.hflow_settings(seed, True, with_rater, crit, sim.preference_questions(), True)
    settings.update(sim.HFLOW_SETTINGS)
    rater = SimulatedRater(noise=0.15, seed=seed, criterion=crit) if with_rater else None
    search = HFlowSearch(
        sim.SimExecutor(task, sim.sim_pool(), 0),
        SearchConfig(**settings),
        problems=search_set,
        rater=rater,
        rater_problems=rater_set,
    )
    search.run_until(budget, dollars)
    chosen, _ = search.finish(max_cost=dollars)
    return search, chosen


def widened_choice(search: HFlowSearch, z: float):
    """The with-rater choice among the returnable workflows within ``preference_delta`` of the best
    or within ``z`` paired standard errors of it (the search's own rule, ``preference_delta_se``);
    returns (choice, contenders, the best by fitness)."""
    pool = search._returnable()
    saved = search.config.preference_delta_se
    search.config.preference_delta_se = z
    try:
        contenders = search._within_reach(pool)
    finally:
        search.config.preference_delta_se = saved
    choice = max(contenders, key=lambda i: (search.preference_score(i), i.fitness, -i.cost, i.hash))
    return choice, contenders, max(pool, key=lambda i: (i.fitness, -i.cost, i.hash))


def seed_row(task, heldout, pool_rest, seed: int, args, held) -> dict:
    search_set, rater_set = sim.seed_sets(pool_rest, seed, args.search_size)
    log = RaceLog()
    search_module.race = log
    try:
        _, without = build(task, search_set, rater_set, seed, False, args.budget, args.dollars)
        log.dropped.clear()
        search, chosen = build(task, search_set, rater_set, seed, True, args.budget, args.dollars)
    finally:
        search_module.race = _race
    wo = held(without.workflow)
    best = search.best_by_fitness().fitness
    row = {
        "seed": seed,
        "without": {"shows_working": wo["shows_working"], "accuracy": wo["accuracy"]},
        "with": {k: held(chosen.workflow)[k] for k in ("shows_working", "accuracy")},
    }
    # 1. raced-out children that show the working
    dropped = []
    for h, wf in log.dropped.items():
        if h in search.seen or not sim.workflow_shows_working(wf):
            continue
        s = sim.heldout_score(task, search_set, wf, 0)
        if s["fitness"] >= best - search.config.preference_delta - 1e-12:
            dropped.append({"describe": wf.describe(), "search_fitness": s["fitness"], **held(wf)})
    qualifying = [d for d in dropped if d["accuracy"] >= wo["accuracy"] - 0.02]
    row["raced_out"] = {
        "dropped": len(log.dropped),
        "dropped_showing_working_within_delta": len(dropped),
        "qualifying": len(qualifying),
        "turnable": not row["with"]["shows_working"] and bool(qualifying),
    }
    # 2. the choice re-applied among contenders the search problems cannot tell apart
    row["widened"] = {}
    for z in args.z:
        choice, contenders, top = widened_choice(search, z)
        row["widened"][str(z)] = {
            "contenders": len(contenders),
            "fitness_given_up": top.fitness - choice.fitness,
            **{k: held(choice.workflow)[k] for k in ("shows_working", "accuracy")},
        }
    return row


def delta_se_row(task, heldout, pool_rest, seed: int, args, held, without: dict) -> dict:
    """Run 25: the with-rater search run with ``preference_delta_se``, beside ``without``."""
    search_set, rater_set = sim.seed_sets(pool_rest, seed, args.search_size)
    search, chosen = build(task, search_set, rater_set, seed, True, args.budget, args.dollars)
    return {
        "seed": seed,
        "preference_delta_se": args.run_delta_se,
        "settings": args.run_settings,
        "with": {k: held(chosen.workflow)[k] for k in ("shows_working", "accuracy")},
        "without": without,
        "questions": search.questions_asked,
        "workflow": chosen.workflow.describe(),
    }


def delta_se_summary(rows: list[dict], defaults: dict[int, dict]) -> dict:
    """The run's hidden criterion and accuracy against no rater, beside the defaults' (``defaults``:
    seed -> the with-rater row of the paired file)."""
    out: dict = {"summary": "delta_se_run", "seeds": len(rows), "preference_delta_se": rows[0]["preference_delta_se"]}
    for label, get in (("defaults", lambda r: defaults[r["seed"]]), ("delta_se", lambda r: r["with"])):
        out[label] = {"seeds_showing_working": sum(get(r)["shows_working"] for r in rows)}
        for field in ("shows_working", "accuracy"):
            stats = sim.paired_bootstrap([get(r)[field] for r in rows], [r["without"][field] for r in rows])
            out[label][field + "_points"] = [round(100 * v, 1) for v in stats]
    stats = sim.paired_bootstrap([r["with"]["accuracy"] for r in rows], [defaults[r["seed"]]["accuracy"] for r in rows])
    out["delta_se_minus_defaults_accuracy_points"] = [round(100 * v, 1) for v in stats]
    out["without_rater_seeds_showing_working"] = sum(r["without"]["shows_working"] for r in rows)
    out["questions_mean"] = statistics.mean(r["questions"] for r in rows)
    return out


def summary(rows: list[dict], zs: list[float]) -> dict:
    def gain(key) -> dict:
        out = {}
        for field in ("shows_working", "accuracy"):
            mean, lo, hi = sim.paired_bootstrap([key(r)[field] for r in rows], [r["without"][field] for r in rows])
            out[field + "_points"] = [round(100 * v, 1) for v in (mean, lo, hi)]
        out["seeds_showing_working"] = sum(key(r)["shows_working"] for r in rows)
        return out

    return {
        "summary": "contenders",
        "seeds": len(rows),
        "without_rater_seeds_showing_working": sum(r["without"]["shows_working"] for r in rows),
        "with_rater": gain(lambda r: r["with"]),
        "raced_out_turnable_seeds": sum(r["raced_out"]["turnable"] for r in rows),
        "raced_out_seeds_with_a_qualifying_child": sum(r["raced_out"]["qualifying"] > 0 for r in rows),
        "widened": {
            str(z): {
                **gain(lambda r, z=z: r["widened"][str(z)]),
                "median_contenders": statistics.median(r["widened"][str(z)]["contenders"] for r in rows),
                "mean_fitness_given_up": round(
                    statistics.mean(r["widened"][str(z)]["fitness_given_up"] for r in rows), 4
                ),
            }
            for z in zs
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--world", choices=sorted(sim.WORLDS), default="gsm8k", help="simulated world (default: gsm8k)")
    ap.add_argument("--seeds", type=int, nargs="+", required=True, help="search seeds (development: 100 and up)")
    ap.add_argument("--search-size", type=int, default=100, help="search problems per seed (default: 100)")
    ap.add_argument("--budget", type=int, default=6000, help="problem runs per search (default: 6000)")
    ap.add_argument("--dollars", type=float, default=75.0, help="dollar budget per search (default: 75)")
    ap.add_argument(
        "--z",
        type=float,
        nargs="+",
        default=[0.0, 1.0, 1.5, 2.0],
        help="standard errors to widen by (default: 0 1 1.5 2)",
    )
    ap.add_argument("--out", help="also write the per-seed rows and the summary to this JSONL")
    ap.add_argument(
        "--run-delta-se",
        type=float,
        help="run the with-rater search with this preference_delta_se instead of the analysis (run 25)",
    )
    ap.add_argument(
        "--run-settings",
        type=json.loads,
        default={},
        help="with --pair-with: run the with-rater search with these SearchConfig settings, a JSON object "
        "(run 27: '{\"preference_children\": 1}'); settings a search without a rater ignores only",
    )
    ap.add_argument(
        "--pair-with", help="with --run-delta-se or --run-settings: this script's --out of the same world and seeds"
    )
    args = ap.parse_args()
    if args.run_settings and args.run_delta_se is None:
        args.run_delta_se = 0.0
    if (args.run_delta_se is None) != (args.pair_with is None):
        ap.error("--run-delta-se (or --run-settings) and --pair-with go together")
    start = time.time()
    sim.use_world(args.world)
    task, heldout, pool_rest = sim.load_world(args.world, 0, sim.WORLDS[args.world][2])
    memo: dict[str, dict] = {}

    def held(wf) -> dict:
        if wf.hash() not in memo:
            memo[wf.hash()] = sim.heldout_score(task, heldout, wf, 0)
        return memo[wf.hash()]

    rows = []
    if args.run_delta_se is not None:
        paired = {r["seed"]: r for r in map(json.loads, Path(args.pair_with).read_text().splitlines()) if "seed" in r}
        missing = sorted(set(args.seeds) - set(paired))
        if missing:
            ap.error(f"--pair-with {args.pair_with}: no row for seeds {missing}")
        sim.HFLOW_SETTINGS["preference_delta_se"] = args.run_delta_se
        sim.HFLOW_SETTINGS.update(args.run_settings)
        for seed in args.seeds:
            rows.append(delta_se_row(task, heldout, pool_rest, seed, args, held, paired[seed]["without"]))
            print(json.dumps(rows[-1]), flush=True)
        line = {"world": args.world, **delta_se_summary(rows, {s: paired[s]["with"] for s in args.seeds})}
    else:
        for seed in args.seeds:
            rows.append(seed_row(task, heldout, pool_rest, seed, args, held))
            print(json.dumps(rows[-1]), flush=True)
        line = {"world": args.world, "search_size": args.search_size, **summary(rows, args.z)}
    line["seconds"] = round(time.time() - start, 1)
    print(json.dumps(line), flush=True)
    if args.out:
        Path(args.out).write_text(
            "".join(json.dumps({"world": args.world, **r}) + "\n" for r in rows) + json.dumps(line) + "\n"
        )


if __name__ == "__main__":
    main()
