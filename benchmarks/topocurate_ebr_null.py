"""Do TopoCurate's RL terms carry information beyond the pass rate? A permutation null per task.

The RL score is ``p(1-p) * (1 + a*EBR) * (1 + b*het)``. The error branch ratio (EBR) and strategic
heterogeneity are meant to add what ``p`` does not (``lightning_agents/topology/metrics.py``). This
asks, per task, whether they depend on *which* trials failed, or only on how many did and on the
shape of the graph. The quotient graph's nodes, edges and each trial's choices and strategy do not
depend on outcomes; EBR and heterogeneity read them through ``graph.graph["trials"][t]["outcome"]``.
So the null is: shuffle the success labels among the task's scored trials (``p`` kept), recompute.

1. ``curate_files`` (what ``lightning-agents curate`` runs, default ``SelectionConfig``,
   ``skip_invalid``) analyses the files; the observed EBR and heterogeneity are its ``TaskMetrics``.
2. Tasks with ``0 < p < 1`` and at least ``--min_branch_points`` branch points are tested. Per task
   the null is every distinct assignment of the ``k`` successes to the ``n`` scored trials
   (``C(n, k)`` of them, each equally likely under shuffling) when there are at most
   ``--permutations``; otherwise ``--permutations`` seeded shuffles. The metrics are the package's
   own ``error_branch_ratio`` and ``strategic_heterogeneity`` on a copy of the graph whose trials
   carry the shuffled outcomes. The first ``--check`` assignments of every task are also rebuilt
   from scratch (rewards permuted on the rollouts, ``build_quotient`` + ``analyze_task``) and must
   give the same values, as must the identity assignment and ``curate``'s figures.
3. Per task: observed, null mean, null 95th percentile, one-sided p-value ``P0(null >= observed)``
   (exact, or ``(1 + hits) / (1 + N)`` sampled), and the smallest p-value its null allows (with 4
   trials no assignment can reach 0.05: the per-task test has no power there).
4. Over tasks: the count with ``p < 0.05`` against the count the null predicts (the sum over tasks of
   ``P0(p_t < 0.05)``, exact for discrete nulls, not 5% of the tasks); a pooled test of
   ``sum_t (observed_t - null mean_t)`` against its null (one null draw per task, independent,
   ``--pooled_draws`` times), each way; a pooled dispersion test of ``sum_t z_t^2`` (``z_t`` the
   excess over the task's null standard deviation, tasks whose null varies), which asks whether
   the metric depends on which trials failed at all, in either direction; the mean of ``observed - null mean`` with a percentile bootstrap 95% CI
   over tasks; Pearson correlation of observed EBR with its null mean and with ``p(1-p)``; Spearman
   correlation of the RL score with the score made from the null means (1.0: the topology terms
   rank tasks as shuffled outcomes would).

One JSON line per pool (``--jsonl``, appended), with the command, package versions, git commit,
hashes of the topology sources and of the input files; the Markdown tables are printed.

    python benchmarks/topocurate_ebr_null.py --name taubench_gpt4o_airline \\
        ../shared/data/tau_bench/gpt-4o-airline.json

A few seconds of CPU per pool of 50 tasks.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import itertools
import json
import math
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCHMARK = "topocurate_ebr_null"
ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY_SOURCES = ("graph.py", "metrics.py", "signatures.py", "pipeline.py", "selection.py")


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("lightning-agents", "networkx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance() -> dict:
    """Git commit, whether the topology sources differ from it, and their content hashes."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    import lightning_agents.topology

    # The sources actually imported (PYTHONPATH may point at another copy than this checkout).
    folder = Path(lightning_agents.topology.__file__).resolve().parent
    return {
        "commit": git("rev-parse", "HEAD") or None,
        "topology_imported_from": str(folder),
        "checkout_topology_modified": [
            line.strip() for line in git("status", "--porcelain", "--", "lightning_agents/topology").splitlines()
        ],
        "topology_sha256": {
            name: hashlib.sha256((folder / name).read_bytes()).hexdigest()[:16] for name in TOPOLOGY_SOURCES
        },
    }


def file_info(path: str) -> dict:
    data = Path(path).read_bytes()
    return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()[:16]}


def assignments(n: int, k: int, limit: int, rng: random.Random) -> tuple[list[tuple[int, ...]], bool]:
    """Success sets (indices of the ``n`` scored trials that succeed) under shuffling.

    Every one of the ``C(n, k)`` sets when there are at most ``limit`` (``exact``), else ``limit``
    sets drawn uniformly (a seeded shuffle each).
    """
    if math.comb(n, k) <= limit:
        return list(itertools.combinations(range(n), k)), True
    out = []
    order = list(range(n))
    for _ in range(limit):
        rng.shuffle(order)
        out.append(tuple(sorted(order[:k])))
    return out, False


def with_outcomes(quotient, outcomes: dict):
    """A shallow copy of ``quotient`` whose trials carry ``outcomes`` (structure and caches shared)."""
    from lightning_agents.topology.graph import Quotient

    trials = {t: {**info, "outcome": outcomes[t]} for t, info in quotient.graph["trials"].items()}
    return Quotient({**quotient.graph, "trials": trials}, quotient.nodes, quotient.edges, quotient.successors)


def null_p(observed: float, null: list[float], exact: bool) -> float:
    """One-sided ``P0(null >= observed)``: exact over all assignments, or ``(1 + hits) / (1 + N)``."""
    hits = sum(1 for v in null if v >= observed - 1e-12)
    return hits / len(null) if exact else (1 + hits) / (1 + len(null))


def p_values_of_null(null: list[float], exact: bool) -> list[float]:
    """The p-value each null draw would get as the observation (its law is what the test's size is)."""
    ordered = sorted(null)
    out = []
    for v in null:
        # draws >= v, by bisection on the sorted list (with the same tolerance as null_p)
        lo, hi = 0, len(ordered)
        while lo < hi:
            mid = (lo + hi) // 2
            if ordered[mid] < v - 1e-12:
                lo = mid + 1
            else:
                hi = mid
        hits = len(ordered) - lo
        out.append(hits / len(null) if exact else (1 + hits) / (1 + len(null)))
    return out


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            out[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3 or statistics.pstdev(a) == 0 or statistics.pstdev(b) == 0:
        return None
    return round(statistics.correlation(a, b), 3)


def bootstrap_ci(values: list[float], draws: int, rng: random.Random) -> list[float]:
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(draws))
    return [round(quantile(means, 0.025), 4), round(quantile(means, 0.975), 4)]


def rebuild_check(trials, order, success_sets, ebr_null, het_null, selection, check):
    """Rebuild the first ``check`` assignments from scratch and compare with the fast path."""
    from lightning_agents.topology.graph import build_quotient
    from lightning_agents.topology.metrics import analyze_task

    signatures = selection.signature_config()
    by_trial = {r.trial: r for r in trials}
    scored_rewards = [by_trial[t].reward for t in order]
    successes = [r for r in scored_rewards if r >= selection.success_threshold]
    failures = [r for r in scored_rewards if r < selection.success_threshold]
    for index, chosen in enumerate(success_sets[:check]):
        good, bad = iter(successes), iter(failures)
        copies = []
        for r in trials:
            c = copy.copy(r)
            if r.trial in order:
                c.reward = next(good) if order.index(r.trial) in chosen else next(bad)
            copies.append(c)
        task, _ = analyze_task(build_quotient(copies, signatures, selection.success_threshold))
        if abs(task.error_branch_ratio - ebr_null[index]) > 1e-9 or abs(task.heterogeneity - het_null[index]) > 1e-9:
            raise SystemExit(
                f"task {trials[0].task_id!r}: assignment {chosen} gives EBR {ebr_null[index]} / het "
                f"{het_null[index]} on the shuffled copy but {task.error_branch_ratio} / {task.heterogeneity} "
                "rebuilt from scratch: the metrics read outcomes some other way now; fix with_outcomes"
            )


def analyse_pool(args, selection) -> tuple[dict, list[dict]]:
    from lightning_agents.topology.graph import Quotient
    from lightning_agents.topology.metrics import error_branch_ratio, strategic_heterogeneity, trial_choices
    from lightning_agents.topology.runs import curate_files
    from lightning_agents.topology.selection import rl_score

    rng = random.Random(args.seed)
    t0, c0 = time.time(), time.process_time()
    result, rollouts = curate_files(args.files, selection, {"skip_invalid": True}, keep_graphs=True)
    read_curate_s = round(time.time() - t0, 2)
    by_task: dict[str, list] = {}
    for r in rollouts:
        by_task.setdefault(r.task_id, []).append(r)
    rows = []
    excluded = {"p_in_0_1_or_unscored": 0, "few_branch_points": 0}
    for analysis in result.analyses:
        task = analysis.task
        p = task.pass_rate
        if p is None or p <= 0.0 or p >= 1.0:
            excluded["p_in_0_1_or_unscored"] += 1
            continue
        if task.branch_points < args.min_branch_points:
            excluded["few_branch_points"] += 1
            continue
        quotient = Quotient.from_networkx(analysis.graph)
        trial_choices(quotient)  # cached on the graph dict every shuffled copy shares (outcome-free)
        info = quotient.graph["trials"]
        order = sorted(t for t, i in info.items() if i["outcome"] is not None)
        n, k = len(order), sum(1 for t in order if info[t]["outcome"] is True)
        # The identity assignment must reproduce curate's own figures.
        base = with_outcomes(quotient, {t: i["outcome"] for t, i in info.items()})
        ebr_obs, het_obs = error_branch_ratio(base), strategic_heterogeneity(base)[2]
        if abs(ebr_obs - task.error_branch_ratio) > 1e-9 or abs(het_obs - task.heterogeneity) > 1e-9:
            raise SystemExit(f"task {task.task_id!r}: recomputed EBR/het differ from curate's TaskMetrics")
        success_sets, exact = assignments(n, k, args.permutations, rng)
        ebr_null, het_null = [], []
        for chosen in success_sets:
            chosen_set = set(chosen)
            outcomes = {t: i["outcome"] for t, i in info.items()}
            for index, t in enumerate(order):
                outcomes[t] = index in chosen_set
            shuffled = with_outcomes(quotient, outcomes)
            ebr_null.append(error_branch_ratio(shuffled))
            het_null.append(strategic_heterogeneity(shuffled)[2])
        if args.check:
            rebuild_check(by_task[task.task_id], order, success_sets, ebr_null, het_null, selection, args.check)
        row = {"task_id": task.task_id, "trials": n, "successes": k, "pass_rate": round(p, 4)}
        row["branch_points"] = task.branch_points
        row["assignments"] = len(success_sets)
        row["exact"] = exact
        for name, obs, null in (("ebr", task.error_branch_ratio, ebr_null), ("het", task.heterogeneity, het_null)):
            null_ps = p_values_of_null(null, exact)
            row[name] = {
                "observed": round(obs, 4),
                "null_mean": round(statistics.fmean(null), 4),
                "null_p95": round(quantile(null, 0.95), 4),
                "p_value": round(null_p(obs, null, exact), 4),
                "min_p_value": round(min(null_ps), 4),
                "p_size_005": round(sum(1 for q in null_ps if q < 0.05) / len(null_ps), 4),
                "null_sd": round(statistics.pstdev(null), 4),
            }
            row[name]["_null"] = null
            row[name]["_observed"] = obs
        row["rl_score"] = round(rl_score(task, selection.rl_alpha, selection.rl_beta), 6)
        row["rl_score_null_means"] = round(
            p
            * (1 - p)
            * (1 + selection.rl_alpha * row["ebr"]["null_mean"])
            * (1 + selection.rl_beta * row["het"]["null_mean"]),
            6,
        )
        rows.append(row)
    summary = {
        "tasks": len(result.analyses),
        "trajectories": len(rollouts),
        "skipped_records": len(rollouts.skipped),
        "tested": len(rows),
        "excluded": excluded,
        "read_curate_s": read_curate_s,
    }
    for name in ("ebr", "het"):
        summary[name] = pooled(rows, name, args, rng)
    if rows:
        pq = [r["pass_rate"] * (1 - r["pass_rate"]) for r in rows]
        summary["ebr"]["corr_observed_null_mean"] = pearson(
            [r["ebr"]["observed"] for r in rows], [r["ebr"]["null_mean"] for r in rows]
        )
        summary["ebr"]["corr_observed_pq"] = pearson([r["ebr"]["observed"] for r in rows], pq)
        summary["ebr"]["corr_null_mean_pq"] = pearson([r["ebr"]["null_mean"] for r in rows], pq)
        summary["spearman_rl_score_vs_null_means_score"] = pearson(
            ranks([r["rl_score"] for r in rows]), ranks([r["rl_score_null_means"] for r in rows])
        )
        summary["spearman_rl_score_vs_pq"] = pearson(ranks([r["rl_score"] for r in rows]), ranks(pq))
    summary["cpu_s"] = round(time.process_time() - c0, 2)
    summary["wall_s"] = round(time.time() - t0, 2)
    for r in rows:
        for name in ("ebr", "het"):
            del r[name]["_null"], r[name]["_observed"]
    return summary, rows


def pooled(rows: list[dict], name: str, args, rng: random.Random) -> dict:
    """Over-task figures of one metric (see the module docstring, step 4)."""
    if not rows:
        return {}
    stats = [r[name] for r in rows]
    # Unrounded values; the rounded ones are what the line reports.
    observed = [s["_observed"] for s in stats]
    nulls = [s["_null"] for s in stats]
    means = [statistics.fmean(null) for null in nulls]
    sds = [statistics.pstdev(null) for null in nulls]
    diffs = [o - m for o, m in zip(observed, means)]
    # Pooled permutation tests, one independent null draw per task per round: the summed excess
    # (one-sided, each way), and the summed squared standardised excess over tasks whose null
    # varies (does the metric depend on which trials failed at all, in either direction?).
    varying = [i for i, sd in enumerate(sds) if sd > 0]
    observed_sum = sum(diffs)
    observed_dispersion = sum((diffs[i] / sds[i]) ** 2 for i in varying)
    hits = lows = spread = 0
    for _ in range(args.pooled_draws):
        drawn = [rng.choice(null) - mean for null, mean in zip(nulls, means)]
        total = sum(drawn)
        hits += total >= observed_sum - 1e-9
        lows += total <= observed_sum + 1e-9
        spread += sum((drawn[i] / sds[i]) ** 2 for i in varying) >= observed_dispersion - 1e-9
    return {
        "mean_observed": round(statistics.fmean(s["observed"] for s in stats), 4),
        "mean_null": round(statistics.fmean(means), 4),
        "mean_excess": round(statistics.fmean(diffs), 4),
        "mean_excess_ci95": bootstrap_ci(diffs, args.bootstrap, rng),
        "pooled_p_value": round((1 + hits) / (1 + args.pooled_draws), 4),
        "pooled_p_value_lower": round((1 + lows) / (1 + args.pooled_draws), 4),
        "dispersion_p_value": round((1 + spread) / (1 + args.pooled_draws), 4) if varying else None,
        "tasks_p_lt_005": sum(1 for s in stats if s["p_value"] < 0.05),
        "expected_p_lt_005_under_null": round(sum(s["p_size_005"] for s in stats), 2),
        "tasks_able_to_reach_005": sum(1 for s in stats if s["min_p_value"] < 0.05),
        "tasks_observed_ge_null_p95": sum(1 for s in stats if s["observed"] >= s["null_p95"] - 1e-12),
        "tasks_null_constant": sum(1 for s in stats if s["null_sd"] == 0),
        "abs_excess_lt_01": sum(1 for d in diffs if abs(d) < 0.1),
    }


def markdown(name: str, summary: dict, rows: list[dict]) -> str:
    lines = [
        f"### {name}: {summary['tested']} tasks tested of {summary['tasks']} ({summary['trajectories']} trajectories; "
        f"excluded {summary['excluded']})",
        "",
        "| metric | mean observed | mean null | mean excess [95% CI] | pooled p (greater / less) | dispersion p | tasks p<0.05 | expected under null | "
        "tasks able to reach 0.05 | null constant |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for metric in ("ebr", "het"):
        s = summary.get(metric)
        if not s:
            continue
        low, high = s["mean_excess_ci95"]
        lines.append(
            f"| {metric} | {s['mean_observed']:.3f} | {s['mean_null']:.3f} | {s['mean_excess']:+.3f} [{low:+.3f}, {high:+.3f}] | "
            f"{s['pooled_p_value']:.4f} / {s['pooled_p_value_lower']:.4f} | {s['dispersion_p_value']} | {s['tasks_p_lt_005']} | {s['expected_p_lt_005_under_null']} | "
            f"{s['tasks_able_to_reach_005']} | {s['tasks_null_constant']} |"
        )
    if rows:
        e = summary["ebr"]
        lines += [
            "",
            f"corr(EBR, null mean) {e.get('corr_observed_null_mean')}, corr(EBR, p(1-p)) {e.get('corr_observed_pq')}, "
            f"corr(null mean, p(1-p)) {e.get('corr_null_mean_pq')}; Spearman(RL score, score from null means) "
            f"{summary.get('spearman_rl_score_vs_null_means_score')}, Spearman(RL score, p(1-p)) "
            f"{summary.get('spearman_rl_score_vs_pq')}",
            "",
            "| task | n | k | branch pts | assignments | EBR | null mean | null p95 | p | min p | het | null mean | p |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            a, h = r["ebr"], r["het"]
            lines.append(
                f"| {r['task_id']} | {r['trials']} | {r['successes']} | {r['branch_points']} | {r['assignments']}"
                f"{'' if r['exact'] else ' (sampled)'} | {a['observed']:.3f} | {a['null_mean']:.3f} | {a['null_p95']:.3f} | "
                f"{a['p_value']:.3f} | {a['min_p_value']:.3f} | {h['observed']:.3f} | {h['null_mean']:.3f} | {h['p_value']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="rollout files pooled per task (read with skip_invalid, as curate can)")
    ap.add_argument("--name", required=True, help="name of the pool in the result line")
    ap.add_argument(
        "--permutations", type=int, default=1000, help="exact when C(n, k) <= this, else this many shuffles"
    )
    ap.add_argument("--min_branch_points", type=int, default=2, help="tasks with fewer branch points are not tested")
    ap.add_argument("--seed", type=int, default=0, help="seed of the shuffles, the pooled test and the bootstrap")
    ap.add_argument("--bootstrap", type=int, default=10000, help="bootstrap resamples of the tasks")
    ap.add_argument("--pooled_draws", type=int, default=10000, help="null draws of the pooled summed-excess test")
    ap.add_argument("--check", type=int, default=20, help="assignments per task rebuilt from scratch as a check")
    ap.add_argument(
        "--jsonl", default=str(ROOT / "benchmarks" / "results" / f"{BENCHMARK}.jsonl"), help="result line appended here"
    )
    ap.add_argument("--markdown", default=None, help="also write the tables here")
    args = ap.parse_args()

    import logging

    from lightning_agents.topology.selection import SelectionConfig

    logging.basicConfig(level=logging.ERROR)
    selection = SelectionConfig()
    summary, rows = analyse_pool(args, selection)
    line = {
        "benchmark": BENCHMARK,
        "name": args.name,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(),
        "provenance": provenance(),
        "inputs": [file_info(f) for f in args.files],
        "settings": {k: v for k, v in vars(args).items() if k not in ("files", "jsonl", "markdown")},
        "selection": selection.as_dict(),
        "summary": summary,
        "per_task": rows,
    }
    text = json.dumps(line)
    path = Path(args.jsonl)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text + "\n")
    print(json.dumps({k: line[k] for k in ("benchmark", "name", "command", "summary")}), flush=True)
    table = markdown(args.name, summary, rows)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table)
    print(table)


if __name__ == "__main__":
    main()
