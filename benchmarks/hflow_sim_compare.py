"""Pair two ``hflow_sim_search.py`` results on the same seeds: ``A`` (the old defaults, every method)
against ``B`` (a changed HFlow setting, HFlow methods only; the baselines do not depend on it, so
``B`` borrows ``A``'s), and report issue 17's targets for both. Prints one JSON line.

    python benchmarks/hflow_sim_compare.py A.json B.json [--reach-against BASELINES_4X.json ...]

``B_minus_A_hflow``: HFlow's held-out fitness, accuracy and cost, B - A (paired bootstrap by
seed). ``target_a``: HFlow's accuracy minus random search's. ``target_b_vs_4x``: HFlow's median
runs to the optimum over the best baseline's at a larger budget (``--reach-against``, as
``hflow_sim_pool.py``). ``seeds_near_o1_at_quarter_cost`` per method: target (c).
``target_d_A``/``_B``: the preference benchmark's hidden criterion and accuracy, with minus
without a rater. A part a file has no rows for (no random search or baselines; no preference
benchmark, as with ``--no-preference-benchmark``) is left out and ``absent`` says which and why.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hflow_sim_pool import reach_ratio
from hflow_sim_search import bootstrap_ci, summarise

BASELINES = ("random_search", "hill_climb", "regularized_evolution", "aflow_style")
KEYS = (
    "heldout_fitness",
    "heldout_accuracy",
    "heldout_cost",
    "reached_optimum",
    "median_runs_to_optimum",
    "mean_runs",
    "mean_dollars",
    "seeds_near_o1_at_quarter_cost",
)


def by_seed(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["seed"])


def target_d(prefs: dict[str, list[dict]]) -> dict | None:
    """The preference benchmark's with minus without a rater (hidden criterion and accuracy,
    paired by seed) and both rates; None when the file has no such rows (a run with
    ``--no-preference-benchmark`` writes empty lists)."""
    with_, without = by_seed(prefs.get("with_rater", [])), by_seed(prefs.get("without_rater", []))
    if not with_ or not without:
        return None
    d = {k: bootstrap_ci([r[k] for r in with_], [r[k] for r in without]) for k in ("shows_working", "accuracy")}
    d["with_rate"] = sum(r["shows_working"] for r in with_) / len(with_)
    d["without_rate"] = sum(r["shows_working"] for r in without) / len(without)
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="hflow_sim_search.py result of the old defaults, every method")
    ap.add_argument("b", help="result of the changed setting on the same world and seeds (HFlow methods)")
    ap.add_argument(
        "--reach-against",
        nargs="+",
        default=[],
        help="the baselines alone at a larger budget on the same seeds (target b's ratio, as hflow_sim_pool.py)",
    )
    args = ap.parse_args()
    a_path, b_path, reach = args.a, args.b, args.reach_against
    A, B = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    if A["seeds"] != B["seeds"] or A["world"] != B["world"]:
        sys.exit(f"{a_path} and {b_path}: not the same world and seeds")
    budget, expensive = A["budget_problem_runs"], A["expensive_single_call"]
    merged = {**A["per_seed"], **B["per_seed"]}
    sa, ca = summarise(A["per_seed"], budget, expensive)
    sb, cb = summarise(merged, budget, expensive)
    ha, hb = by_seed(A["per_seed"]["hflow"]), by_seed(B["per_seed"]["hflow"])
    out: dict = {"summary": "hflow_sim_compare", "a": a_path, "b": b_path, "world": A["world"], "seeds": len(ha)}
    out["B_minus_A_hflow"] = {
        k: bootstrap_ci([r[k] for r in hb], [r[k] for r in ha]) for k in ("fitness", "accuracy", "cost")
    }
    out["A"] = {m: {k: s[k] for k in KEYS} for m, s in sa.items()}
    out["B"] = {m: {k: sb[m][k] for k in KEYS} for m in B["per_seed"]}
    absent: list[str] = []
    if "random_search" in A["per_seed"]:
        out["target_a"] = {"A": ca["hflow"]["accuracy"], "B": cb["hflow"]["accuracy"]}
        out["target_a_variants_B"] = {m: cb[m]["accuracy"] for m in B["per_seed"] if m in cb}
    else:
        absent.append(f"{a_path}: no random_search rows, so no target_a (run it with --methods ... random_search)")
    baselines = [m for m in BASELINES if m in sa]
    if baselines:
        best = min(baselines, key=lambda m: sa[m]["median_runs_to_optimum"])
        out["best_baseline_1x"] = {
            "method": best,
            "reached": sa[best]["reached_optimum"],
            "median": sa[best]["median_runs_to_optimum"],
        }
    else:
        absent.append(f"{a_path}: no baseline rows ({', '.join(BASELINES)}), so no best_baseline_1x")
    reached = [(x["runs_to_optimum"] is not None, y["runs_to_optimum"] is not None) for x, y in zip(hb, ha)]
    out["reached_both_B_only_A_only"] = [
        sum(b and a for b, a in reached),
        sum(b and not a for b, a in reached),
        sum(a and not b for b, a in reached),
    ]
    if reach:
        out["target_b_vs_4x"] = {
            "A": reach_ratio(ha, 2 * budget, reach, 4000),
            "B": reach_ratio(hb, 2 * budget, reach, 4000),
        }
    for name, path, run in (("A", a_path, A), ("B", b_path, B)):
        d = target_d(run["preference_per_seed"])
        if d is None:
            absent.append(
                f"{path}: no preference benchmark rows (run with --no-preference-benchmark), so no target_d_{name}"
            )
        else:
            out[f"target_d_{name}"] = d
    if absent:
        out["absent"] = absent
    print(json.dumps(out))


if __name__ == "__main__":
    main()
