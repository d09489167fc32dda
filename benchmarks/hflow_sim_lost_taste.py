"""Where the rater's taste ("shows the working") is lost in the preference benchmark's with-rater search.

Run 40's diagnosis (docs/benchmarks.md, "HFlow, run 40", development seeds). Per seed the
with-rater search is rebuilt as ``hflow_sim_contenders.py --run-settings S --pair-with FILE`` builds
it (``hflow_sim_contenders.build``: the preference benchmark's settings, then ``S`` over them),
with every child that racing screened logged. The row says which workflows showing the working
the search built, evaluated in full and had within reach of its choice, and puts the seed in one
class (the row's ``class``: ok, i, ii, iii, iv):

- ok: the returned workflow shows the working;
- (i) none built: no child raced, no evaluated workflow and no built-pair edit shows it;
- (ii) built, never fully evaluated: some were built (raced or as built-pair edits) but none
  is returnable (``HFlowSearch._returnable``: the confirmed workflows once any are, else every
  fully evaluated one);
- (iii) evaluated, outside reach: some are returnable, none lies within the choice's reach
  (``HFlowSearch._within_reach``: ``preference_delta`` of the best fitness, plus
  ``preference_taste_delta`` once the answers show a taste);
- (iv) inside reach, not chosen: one lay within reach, the preference model chose another.

These four cover every seed, so class (v) ("other", run 40's table) is never given. The
without-rater side is read, not rerun: ``--pair-with`` is a ``hflow_sim_contenders.py --out``
file of the same world and seeds (its ``without`` rows). Search size, budget and dollars are the
preference benchmark's for the world (HumanEval 50 problems / 3,000 runs / $37.5; GSM8K 100 /
6,000 / $75). No optimum cache is read, so any working folder does; one process, 10-30 s a
seed on one core:

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hflow_sim_lost_taste.py humaneval \\
        --pair-with benchmarks/results/hflow_sim_run24_contenders_humaneval.jsonl \\
        --out diag_he130.jsonl --seeds $(seq 130 159)

``--run-settings`` defaults to run 33's ten settings, the ones run 40's diagnosis used. That
diagnosis ran at 2fc6664, before run 40 made ``preference_taste_delta`` 0.04 the default; to
reproduce its rows at a later commit add ``"preference_taste_delta": 0`` to the settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hflow_sim_contenders as contenders
import hflow_sim_search as sim

import lightning_agents.hflow.search as search_module

# run 33's ten preference settings (the with-rater search of runs 33-40's development rows)
RUN33_SETTINGS = {
    "preference_built_pairs": 1,
    "preference_children": 1,
    "preference_children_explore": 1.0,
    "preference_lineage": 0.08,
    "preference_lineage_children": 1,
    "preference_built_reach": 2,
    "preference_reach_ops": True,
    "preference_reach_small": 3,
    "preference_reach_as_op": True,
    "preference_reach_anchor": True,
}
# the preference benchmark's search size, problem runs and dollars per world
WORLD_BUDGETS = {"humaneval": (50, 3000, 37.5), "gsm8k": (100, 6000, 75.0)}


class RaceLog:
    """Wraps the search module's ``race`` to keep every child it screened: hash -> (workflow,
    whether racing dropped it)."""

    def __init__(self, race) -> None:
        self.race = race
        self.raced: dict = {}

    def __call__(self, children, *args, **kwargs):
        out, runs = self.race(children, *args, **kwargs)
        for child, _parent in children:
            self.raced[child.hash()] = (child, child.hash() in out)
        return out, runs


def classify(chosen_shows: bool, sw_built: int, sw_eval: int, sw_reach: int) -> str:
    """The seed's class from what showed the working: the returned workflow, then the counts of
    such workflows built, fully evaluated and within reach (module docstring)."""
    if chosen_shows:
        return "ok"
    if not sw_built:
        return "i"
    if not sw_eval:
        return "ii"
    if not sw_reach:
        return "iii"
    return "iv"


def seed_row(world_data, seed: int, without: dict, held) -> dict:
    """One seed's with-rater search, rebuilt and logged, as one row (``without``: the paired row's
    held-out scores of the without-rater choice; ``held``: workflow -> held-out scores)."""
    task, _heldout, pool_rest, (size, budget, dollars) = world_data
    shows = sim.workflow_shows_working
    log = RaceLog(search_module.race)
    search_module.race = log
    try:
        search_set, rater_set = sim.seed_sets(pool_rest, seed, size)
        search, chosen = contenders.build(task, search_set, rater_set, seed, True, budget, dollars)
    finally:
        search_module.race = log.race
    pool = search._returnable()
    reach = search._within_reach(pool)
    best = search.best_by_fitness()
    built = {h: wf for h, (wf, _) in log.raced.items()}
    built.update({h: i.workflow for h, i in search.seen.items()})
    built_edits = dict(search.built)
    sw_built = {h for h, wf in {**built, **built_edits}.items() if shows(wf)}
    sw_eval = [i for i in pool if shows(i.workflow)]
    sw_reach = [i for i in reach if shows(i.workflow)]
    against, decided = search._answers_against_objectives()
    with_scores = held(chosen.workflow)
    row = {
        "seed": seed,
        "class": classify(shows(chosen.workflow), len(sw_built), len(sw_eval), len(sw_reach)),
        "with": {k: with_scores[k] for k in ("shows_working", "accuracy")},
        "without": without,
        "stored_38b_with": None,  # kept for the stored rows' shape (run 40 compared them elsewhere)
        "chosen": chosen.workflow.describe(),
        "best": best.workflow.describe(),
        "best_fitness": best.fitness,
        "questions": search.questions_asked,
        "answers_against": [against, decided],
        "has_taste": search._has_taste(),
        "n_built": len(built),
        "n_built_edits_only": len(set(built_edits) - set(built)),
        "sw_built": len(sw_built),
        "sw_built_in_edits_only": len(sw_built - set(built)),
        # raced out: dropped by racing and never evaluated in full afterwards
        "sw_raced_out": sum(1 for h, (wf, out) in log.raced.items() if out and shows(wf) and h not in search.seen),
        "sw_eval": len(sw_eval),
        "contenders": len(reach),
        "sw_reach": len(sw_reach),
    }
    if sw_eval:
        top = max(sw_eval, key=lambda i: (i.fitness, -i.cost, i.hash))
        row["sw_best_gap"] = round(best.fitness - top.fitness, 4)
        row["sw_best"] = top.workflow.describe()
        row["sw_best_held"] = {k: held(top.workflow)[k] for k in ("accuracy", "fitness")}
        row["sw_best_pref"] = round(search.preference_score(top), 3)
    if sw_reach:
        row["sw_reach_pref"] = [round(search.preference_score(i), 3) for i in sw_reach]
    row["chosen_pref"] = round(search.preference_score(chosen), 3)
    row["chosen_acc_minus_without"] = round(row["with"]["accuracy"] - without["accuracy"], 4)
    return row


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (``--help`` explains each argument)."""
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "world",
        choices=sorted(WORLD_BUDGETS),
        help="simulated world; fixes the search size, problem runs and dollars to the preference "
        "benchmark's (humaneval: 50 / 3000 / 37.5, gsm8k: 100 / 6000 / 75)",
    )
    ap.add_argument(
        "--pair-with",
        required=True,
        help="hflow_sim_contenders.py --out file of the same world with a row for every seed: its "
        "'without' (the without-rater choice's held-out scores) is copied into each row",
    )
    ap.add_argument("--seeds", type=int, nargs="+", required=True, help="search seeds (development: 100 and up)")
    ap.add_argument("--out", help="also write the per-seed rows to this JSONL (they are printed either way)")
    ap.add_argument(
        "--run-settings",
        type=json.loads,
        default=dict(RUN33_SETTINGS),
        help="SearchConfig settings of the with-rater search, a JSON object over the benchmark's "
        "(default: run 33's ten, as run 40's diagnosis; add '\"preference_taste_delta\": 0' to reproduce "
        "that diagnosis after run 40 changed the default)",
    )
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    paired = {r["seed"]: r for r in map(json.loads, Path(args.pair_with).read_text().splitlines()) if "seed" in r}
    missing = sorted(set(args.seeds) - set(paired))
    if missing:
        sys.exit(f"--pair-with {args.pair_with}: no row for seeds {missing}")
    sim.use_world(args.world)
    task, heldout, pool_rest = sim.load_world(args.world, 0, sim.WORLDS[args.world][2])
    # as hflow_sim_contenders.py --run-settings: a fixed reach unless the settings say otherwise
    sim.HFLOW_SETTINGS["preference_delta_se"] = 0.0
    sim.HFLOW_SETTINGS.update(args.run_settings)
    memo: dict[str, dict] = {}

    def held(wf) -> dict:
        if wf.hash() not in memo:
            memo[wf.hash()] = sim.heldout_score(task, heldout, wf, 0)
        return memo[wf.hash()]

    world_data = (task, heldout, pool_rest, WORLD_BUDGETS[args.world])
    fh = open(args.out, "w") if args.out else None
    try:
        for seed in args.seeds:
            row = seed_row(world_data, seed, paired[seed]["without"], held)
            print(json.dumps(row), flush=True)
            if fh:
                fh.write(json.dumps(row) + "\n")
                fh.flush()
    finally:
        if fh:
            fh.close()


if __name__ == "__main__":
    main()
