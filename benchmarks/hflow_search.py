"""HFlow vs HFlow without preferences vs random search vs a one-edit hill climber, equal budgets.

On the embedded arithmetic task with the tiny student (cheap) and teacher (4x the price) as the
pool. Every method spends the same budget of *problem runs* (a workflow executed on one problem,
cache misses only; HFlow's preference questions run workflows on rater problems and count too).
Per method and seed: best search-set accuracy and fitness, total cost (ledger), test accuracy of
the chosen workflow on held-out problems, and the problem runs HFlow needed to reach the hill
climber's final fitness. Then memory transfer: HFlow on a related task (the test split) starting
from the memory of a run on the val split, versus from scratch, measured by problem runs to reach
the first run's best fitness.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hflow_search.py [--budget 180] [--seeds 0 1 2]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from lightning_agents.hflow import (
    ArithmeticTask,
    BackbonePool,
    ExperienceMemory,
    HFlowSearch,
    Ledger,
    LocalHFBackbone,
    Node,
    SearchConfig,
    SimulatedRater,
    Workflow,
    WorkflowExecutor,
    hill_climb,
    random_search,
)
from lightning_agents.models import load_model_and_tokenizer

LAMBDA = 50.0  # one unit of cost per problem costs 50 accuracy points; a student call costs ~1e-4


def make_pool(models) -> BackbonePool:
    (sm, st), (tm, tt) = models
    return BackbonePool(
        [
            LocalHFBackbone("student", input_price=1.0, output_price=2.0, model_object=sm, tokenizer=st),
            LocalHFBackbone("teacher", input_price=4.0, output_price=8.0, model_object=tm, tokenizer=tt),
        ],
        Ledger(),
    )


def runs_to_reach(trajectory, target: float, column: int = 1) -> int | None:
    """First problem-run count at which the best-so-far (column 1: fitness, 2: its accuracy) reaches target."""
    for row in trajectory:
        if row[column] >= target - 1e-12:
            return row[0]
    return None


def run_hflow(models, task, val, rest, budget, seed, preferences=True, memory=None):
    pool = make_pool(models)
    cfg = SearchConfig(
        population_size=4,
        offspring=4,
        max_nodes=4,
        lambda_cost=LAMBDA,
        eval_problems=len(val),
        seed=seed,
        workers=1,
        questions_per_generation=2 if preferences else 0,
        preference_weight=0.1 if preferences else 0.0,
    )
    search = HFlowSearch(
        WorkflowExecutor(task, pool),
        cfg,
        problems=val,
        rater=SimulatedRater(seed=seed) if preferences else None,
        rater_problems=rest,
        memory=memory or ExperienceMemory(),
    )
    search.initialize()
    while search.evaluator.problem_runs < budget:
        search.step()
    # A generation evaluates several children at once and may end past the budget; for equal
    # budgets report the best individual found within it (the trajectory is per evaluation).
    within = [row for row in search.best_so_far if row[0] <= budget] or search.best_so_far[:1]
    runs, _, _, best_hash = within[-1]
    best = search.seen.get(best_hash) or search.best()
    return {
        "best": best.workflow,
        "best_fitness": best.fitness,
        "best_accuracy": best.accuracy,
        "trajectory": within,
        "problem_runs": max(runs, within[-1][0]),
        "cost": pool.ledger.total_cost(),
        "search": search,
    }


def test_accuracy(models, test_task, workflow: Workflow) -> float:
    traces = WorkflowExecutor(test_task, make_pool(models)).run(workflow, test_task.problems)
    return sum(t.score for t in traces) / len(traces)


def plot(result: dict, path: str) -> None:
    """Bar charts of a result line: held-out accuracy and cost per method, and memory transfer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["summary"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    per_seed = result["per_seed"]
    for ax, key, label in (
        (axes[0], "test_accuracy", "held-out accuracy of the chosen workflow"),
        (axes[1], "cost", "total search cost (ledger)"),
    ):
        means = [statistics.mean(r[key] for r in per_seed[n]) for n in names]
        ax.bar(names, means, color=["#3182bd", "#9ecae1", "#fd8d3c", "#74c476"][: len(names)])
        for i, n in enumerate(names):
            ax.scatter([i] * len(per_seed[n]), [r[key] for r in per_seed[n]], color="k", s=12, zorder=3)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=15)
    axes[0].axhline(result["best_single_call_test_accuracy"], ls="--", color="r", label="best single call")
    axes[0].legend(fontsize=7)
    mem = result["memory_transfer"]
    budget = result["budget_problem_runs"]
    xs = range(len(mem))
    axes[2].bar([x - 0.2 for x in xs], [m["with_memory_runs"] or budget for m in mem], 0.4, label="with memory")
    axes[2].bar([x + 0.2 for x in xs], [m["without_memory_runs"] or budget for m in mem], 0.4, label="without")
    axes[2].set_xticks(list(xs), [f"seed {m['seed']}" for m in mem])
    axes[2].set_title("problem runs to reach the first task's best fitness", fontsize=9)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot-from", default=None, help="draw the plot of a saved result line and exit")
    parser.add_argument("--plot", default=None, help="PNG path for the plot")
    parser.add_argument("--budget", type=int, default=180, help="problem runs per method and seed")
    parser.add_argument(
        "--search-problems",
        type=int,
        default=12,
        help="problems of the 60-problem val split that score each workflow; the rest are the rater's (default: 12)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="search seeds; each runs every method, and the memory-transfer runs use seed + 100 (default: 0 1 2)",
    )
    args = parser.parse_args()
    if args.plot_from:
        plot(json.loads(open(args.plot_from).read().strip().splitlines()[-1]), args.plot or "hflow_search.png")
        return
    t0 = time.time()
    models = (load_model_and_tokenizer("embedded:student"), load_model_and_tokenizer("embedded:teacher"))
    task = ArithmeticTask("val", n=60)
    val, rest = task.split(args.search_problems, seed=0)
    held_out = ArithmeticTask("test", n=60)

    # Single-call baselines on the same search set and on the held-out set.
    singles = {}
    for b in ("student", "teacher"):
        wf = Workflow([Node("n0", "generate", backbone=b)])
        pool = make_pool(models)
        traces = WorkflowExecutor(task, pool).run(wf, val)
        acc = sum(t.score for t in traces) / len(traces)
        singles[b] = {
            "search_accuracy": acc,
            "test_accuracy": test_accuracy(models, held_out, wf),
            "cost_per_problem": sum(t.cost for t in traces) / len(traces),
        }
    best_single = max(s["test_accuracy"] for s in singles.values())

    methods = {}
    for seed in args.seeds:
        rows = {}
        rows["hflow"] = run_hflow(models, task, val, rest, args.budget, seed, preferences=True)
        rows["hflow_no_prefs"] = run_hflow(models, task, val, rest, args.budget, seed, preferences=False)
        for name, fn in (("random_search", random_search), ("hill_climber", hill_climb)):
            pool = make_pool(models)
            out = fn(WorkflowExecutor(task, pool), val, budget=args.budget, seed=seed, max_nodes=4, lambda_cost=LAMBDA)
            out["best"] = Workflow.from_dict(out["best"])
            out["cost"] = pool.ledger.total_cost()
            rows[name] = out
        hc_final = rows["hill_climber"]["best_accuracy"]
        hc_runs = rows["hill_climber"]["problem_runs"]
        for name, r in rows.items():
            methods.setdefault(name, []).append(
                {
                    "seed": seed,
                    "best_accuracy": r["best_accuracy"],
                    "best_fitness": r["best_fitness"],
                    "cost": r["cost"],
                    "problem_runs": r["problem_runs"],
                    "test_accuracy": test_accuracy(models, held_out, r["best"]),
                    "runs_to_hill_climber_final": runs_to_reach(r["trajectory"], hc_final, column=2),
                    "hill_climber_runs": hc_runs,
                    "best_workflow": r["best"].describe(),
                }
            )

    summary = {}
    for name, rows in methods.items():
        reached = [r["runs_to_hill_climber_final"] for r in rows]
        summary[name] = {
            "best_accuracy_mean": statistics.mean(r["best_accuracy"] for r in rows),
            "best_fitness_mean": statistics.mean(r["best_fitness"] for r in rows),
            "test_accuracy_mean": statistics.mean(r["test_accuracy"] for r in rows),
            "cost_mean": statistics.mean(r["cost"] for r in rows),
            "problem_runs_mean": statistics.mean(r["problem_runs"] for r in rows),
            "runs_to_hill_climber_final": reached,
            "reached_hc_with_half_budget": sum(
                x is not None and x <= r["hill_climber_runs"] / 2 for x, r in zip(reached, rows)
            ),
        }

    # Memory transfer: a run on the val split writes memory; a related task (test split) starts from it.
    mem_rows = []
    related = ArithmeticTask("test", n=60, seed=4242, name="arithmetic-related")
    rval, rrest = related.split(args.search_problems, seed=0)
    for seed in args.seeds:
        first = run_hflow(models, task, val, rest, args.budget, seed, preferences=False)
        first["search"].memory.consolidate(task.name)
        target = first["best_fitness"]
        memory = ExperienceMemory()
        memory.load_state_dict(first["search"].memory.state_dict())
        warm = run_hflow(models, related, rval, rrest, args.budget, seed + 100, preferences=False, memory=memory)
        cold = run_hflow(models, related, rval, rrest, args.budget, seed + 100, preferences=False)
        mem_rows.append(
            {
                "seed": seed,
                "target_fitness": target,
                "with_memory_runs": runs_to_reach(warm["trajectory"], target),
                "without_memory_runs": runs_to_reach(cold["trajectory"], target),
                "with_memory_best": warm["best_fitness"],
                "without_memory_best": cold["best_fitness"],
            }
        )

    result = {
        "benchmark": "hflow_search",
        "budget_problem_runs": args.budget,
        "search_problems": len(val),
        "held_out_problems": len(held_out.problems),
        "lambda_cost": LAMBDA,
        "seeds": args.seeds,
        "single_call": singles,
        "best_single_call_test_accuracy": best_single,
        "summary": summary,
        "per_seed": methods,
        "memory_transfer": mem_rows,
        "seconds": round(time.time() - t0, 1),
    }
    if args.plot:
        plot(result, args.plot)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
