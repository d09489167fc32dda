"""HFlow vs baselines on the calibrated simulated-backbone world (benchmarks/hflow_sim.py), equal budgets.

Every method gets the same budget: ``--budget`` problem runs (a workflow on one search problem,
cache misses only; HFlow's preference questions run workflows on rater problems and count) and
``--dollars`` of ledger cost (simulated calls at real prices); a method stops when either is
spent. Methods: HFlow (full), HFlow without memory, HFlow without preferences, random search, the
one-edit hill climber, regularized evolution and the AFlow-style search; HFlow races children on
10 search problems before the other 30 (``screen_problems``) unless "no racing". Per seed (a different
search sample of 40 GSM8K items each): the chosen workflow's held-out fitness, accuracy and cost on
400 held-out items, and the problem runs until the best-so-far workflow is within 1 point of the
true optimum (held-out fitness), the optimum found by enumerating every small workflow
(:func:`hflow_sim.enumerate_workflows`). Then the preference benchmark: a simulated rater whose
hidden criterion is "the trace shows its working" (a ``cot`` step), 15% of answers flipped, at
most 4 questions a generation, the built pairs' included (since run 38 they ask on top of the
contender questions, so those are 4 less ``preference_built_pairs``), versus HFlow without a rater.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hflow_sim_search.py --seeds 0 1 2 3 4 5 6 7 8 9

``--world humaneval`` runs the same comparison in the simulated HumanEval world
(benchmarks/hflow_sim_code.py: 64 held-out items under 8 latent draws each, search and rater items
drawn from the other 100; hidden criterion "the trace shows a cot reasoning step").

``--rater-noise 0.15 --rater-flip-rate 0.1 --run-settings '{"preference_taste_delta": 0.04}'`` gives the
main HFlow methods a rater without a taste whose answers are 15% flipped, modelled as 10% (run 40b,
the noisy control of run 40's lever); with no options their rater never errs, as in runs 1-40.

Prints one JSON line (and writes it to --out).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hflow_sim import (
    SimExecutor,
    SimTask,
    enumerate_workflows,
    shows_working,
    sim_pool,
    workflow_shows_working,
)

from lightning_agents.hflow import (
    HFlowSearch,
    SearchConfig,
    SimulatedRater,
    Workflow,
    aflow_search,
    hill_climb,
    random_search,
    regularized_evolution,
)

LAMBDA = 5.0  # one cent per problem costs 5 accuracy points
# the library's defaults: the taste flags' defaults follow them (run 33 changed ten of them)
_DEFAULT = SearchConfig()
# HFlow settings from the command line (--preference-delta, --confirm-top, ...), over run_hflow's own
HFLOW_SETTINGS: dict = {}
# The issue's cap on the preference benchmark: at most 4 questions a generation, the built pairs'
# included (since run 38 they are asked on top of questions_per_generation, not in its slots).
PREFERENCE_QUESTIONS = 4


def preference_questions() -> int:
    """``questions_per_generation`` of the preference benchmark's with-rater search: the cap less
    the built pairs a generation asks (``preference_built_pairs``, as set for this run)."""
    built = HFLOW_SETTINGS.get("preference_built_pairs", _DEFAULT.preference_built_pairs)
    return max(1, PREFERENCE_QUESTIONS - built)


DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "gsm8k" / "test.jsonl"
# --world: the world module, its data and its held-out size (benchmarks/hflow_sim_code.py for HumanEval)
WORLDS = {
    "gsm8k": ("hflow_sim", DATA, 400),
    "humaneval": ("hflow_sim_code", DATA.parents[1] / "humaneval" / "HumanEval.jsonl.gz", 64),
}


def use_world(name: str) -> None:
    """Point this script at a world: the functions here look the world's names up as globals."""
    module = importlib.import_module(WORLDS[name][0])
    for attr in (
        "SimExecutor",
        "SimTask",
        "enumerate_workflows",
        "shows_working",
        "sim_pool",
        "workflow_shows_working",
    ):
        globals()[attr] = getattr(module, attr)


def load_world(world: str, world_seed: int, heldout_n: int, calibration: str | None = None):
    """The world's task, its held-out problems and the rest (the pool every seed's search and rater
    problems are drawn from): the world seed's shuffle puts ``heldout_n`` items aside."""
    task = SimTask(str(WORLDS[world][1]), **({"calibration": calibration} if calibration else {}))
    order = list(task.problems)
    random.Random(world_seed).shuffle(order)
    heldout, pool_rest = order[:heldout_n], order[heldout_n:]
    if hasattr(task, "heldout_instances"):  # HumanEval: each held-out item under several latent draws
        heldout = task.heldout_instances(heldout)
    return task, heldout, pool_rest


def seed_sets(pool_rest: list, seed: int, size: int) -> tuple[list, list]:
    """A seed's ``size`` search problems and as many rater problems, drawn from the pool."""
    sample = random.Random(1000 + seed).sample(pool_rest, 2 * size)
    return sample[:size], sample[size:]


def enumerated_heldout(task, heldout, world: str, world_seed: int, heldout_n: int, cache: str | None) -> list[dict]:
    """Every enumerated workflow's held-out score, best fitness first (``rows[0]`` is the optimum).

    Scoring ~1,000 workflows takes minutes, so the rows are cached in ``cache`` (default: one file per
    world in the working folder) under a key of what they depend on.
    """
    gsm8k = world == "gsm8k"
    path = Path(cache or ("hflow_sim_optimum.json" if gsm8k else f"hflow_sim_{world}_optimum.json"))
    key = [world_seed, heldout_n] if gsm8k else [world, world_seed, heldout_n, len(heldout)]
    if not gsm8k:
        # the optimum depends on what the calibration says each program does: a cache from another
        # calibration is stale
        key.append(hashlib.sha256(Path(task.calibration_path).read_bytes()).hexdigest()[:12])
    if path.is_file() and json.loads(path.read_text()).get("key") == key:
        rows = json.loads(path.read_text())["rows"]
    else:
        rows = [
            {"workflow": wf.to_dict(), "describe": wf.describe(), **heldout_score(task, heldout, wf, world_seed)}
            for wf in enumerate_workflows(["cheap", "mid", "o1"])
        ]
        path.write_text(json.dumps({"key": key, "rows": rows}))
    return sorted(rows, key=lambda r: -r["fitness"])


def heldout_score(task, heldout, wf: Workflow, world_seed: int) -> dict:
    traces = SimExecutor(task, sim_pool(), world_seed).run(wf, heldout)
    acc = sum(t.score for t in traces) / len(traces)
    cost = sum(t.cost for t in traces) / len(traces)
    return {
        "fitness": acc - LAMBDA * cost,
        "accuracy": acc,
        "cost": cost,
        "shows_working": float(workflow_shows_working(wf)),
    }


def hflow_settings(
    seed, memory=True, preferences=True, criterion=None, questions=2, racing=True, flip_rate=None
) -> dict:
    """The benchmark's HFlow SearchConfig settings (before the command line's --preference-delta etc.).

    ``flip_rate`` is the modelled ``rater_flip_rate``; None keeps the benchmark's own: 0.15 for the
    hidden-criterion rater (it errs that often), 0.05 for the main methods' noiseless rater.
    """
    return dict(
        population_size=6,
        offspring=6,
        max_nodes=4,
        lambda_cost=LAMBDA,
        seed=seed,
        workers=1,
        use_memory=memory,
        questions_per_generation=questions if preferences else 0,
        rater="simulated" if preferences else "none",
        preference_delta=0.02,
        rater_flip_rate=flip_rate if flip_rate is not None else (0.15 if criterion else 0.05),
        preference_weight=0.05,
        screen_problems=10 if racing else 0,
        screen_margin=0.1,
    )


def run_hflow(
    task,
    search_set,
    rater_set,
    budget,
    dollars,
    seed,
    world_seed,
    memory=True,
    preferences=True,
    criterion=None,
    noise=0.0,
    questions=2,
    racing=True,
    flip_rate=None,
):
    pool = sim_pool()
    settings = hflow_settings(seed, memory, preferences, criterion, questions, racing, flip_rate)
    settings.update({k: v for k, v in HFLOW_SETTINGS.items() if racing or k != "screen_problems"})
    cfg = SearchConfig(**settings)
    rater = SimulatedRater(noise=noise, seed=seed, criterion=criterion) if preferences else None
    search = HFlowSearch(
        SimExecutor(task, pool, world_seed), cfg, problems=search_set, rater=rater, rater_problems=rater_set
    )
    # no generation starts that could overrun the budget, so HFlow never spends more than the baselines
    search.run_until(budget, dollars)
    chosen, report = search.finish(max_cost=dollars)
    traj = [(r[0], r[3]) for r in search.best_so_far]
    return {
        "chosen": chosen.workflow,
        "trajectory": traj,
        "workflows": {h: i.workflow for h, i in search.seen.items()},
        "runs": search.spent,
        "dollars": pool.ledger.total_cost(),
        "changed": report["changed_by_preferences"],
        "questions": search.questions_asked,
    }


def run_baseline(fn, task, search_set, budget, dollars, seed, world_seed):
    pool = sim_pool()
    out = fn(
        SimExecutor(task, pool, world_seed),
        search_set,
        budget=budget,
        seed=seed,
        max_nodes=4,
        lambda_cost=LAMBDA,
        cost_budget=dollars,
    )
    wfs = {h: Workflow.from_dict(d) for h, d in out["workflows"].items()}
    return {
        "chosen": Workflow.from_dict(out["best"]),
        "trajectory": [(r[0], r[4]) for r in out["trajectory"]],
        "workflows": wfs,
        "runs": out["problem_runs"],
        "dollars": out["cost"],
        "changed": False,
        "questions": 0,
    }


def runs_to_optimum(res, task, heldout, world_seed, target, memo) -> int | None:
    for runs, h in res["trajectory"]:
        if h not in memo:
            memo[h] = heldout_score(task, heldout, res["workflows"][h], world_seed)["fitness"]
        if memo[h] >= target:
            return runs
    return None


def paired_bootstrap(a: list[float], b: list[float], n: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    diffs = [x - y for x, y in zip(a, b)]
    rng = random.Random(seed)
    means = sorted(statistics.mean(rng.choices(diffs, k=len(diffs))) for _ in range(n))
    return statistics.mean(diffs), means[int(0.025 * n)], means[int(0.975 * n) - 1]


def bootstrap_ci(a: list[float], b: list[float]) -> dict[str, float]:
    """:func:`paired_bootstrap` of ``a - b`` as ``{"mean", "lo", "hi"}``."""
    return dict(zip(("mean", "lo", "hi"), paired_bootstrap(a, b)))


def summarise(per_seed: dict[str, list[dict]], budget: int, expensive: dict) -> tuple[dict, dict]:
    """Per-method means over seeds, and every method minus random search (paired bootstrap by seed).

    A seed that never got within 1 point of the optimum counts as ``2 x budget`` runs in the median;
    ``expensive`` is the expensive single call's held-out row (target (c)).
    """
    summary = {}
    for name, rows in per_seed.items():
        summary[name] = {
            "heldout_fitness": statistics.mean(r["fitness"] for r in rows),
            "heldout_accuracy": statistics.mean(r["accuracy"] for r in rows),
            "heldout_cost": statistics.mean(r["cost"] for r in rows),
            "reached_optimum": sum(r["runs_to_optimum"] is not None for r in rows),
            "median_runs_to_optimum": statistics.median(
                r["runs_to_optimum"] if r["runs_to_optimum"] is not None else budget * 2 for r in rows
            ),
            "mean_runs": statistics.mean(r["runs"] for r in rows),
            "mean_dollars": statistics.mean(r["dollars"] for r in rows),
            # target (c): within 1 point of the expensive single call's accuracy at <= 1/4 its cost
            "seeds_near_o1_at_quarter_cost": sum(
                r["accuracy"] >= expensive["accuracy"] - 0.01 and r["cost"] <= expensive["cost"] / 4 for r in rows
            ),
        }
    ci = {
        name: {
            k: bootstrap_ci([r[k] for r in rows], [r[k] for r in per_seed["random_search"]])
            for k in ("fitness", "accuracy")
        }
        for name, rows in per_seed.items()
        if name != "random_search" and "random_search" in per_seed
    }
    return summary, ci


def check_run_settings(ap: argparse.ArgumentParser, settings) -> None:
    """``--run-settings`` must be a JSON object of SearchConfig fields; name the bad ones before any search."""
    if not isinstance(settings, dict):
        ap.error(f"--run-settings: a JSON object of SearchConfig settings, not {settings!r}")
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(SearchConfig)})
    if unknown:
        ap.error(f"--run-settings: {unknown} are not SearchConfig settings (lightning_agents/hflow/config.py)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="search seeds; each draws its own search and rater items and runs every method (default: 0 1 2)",
    )
    ap.add_argument("--budget", type=int, default=1600, help="problem runs per method and seed")
    ap.add_argument("--dollars", type=float, default=10.0, help="ledger dollars per method and seed")
    ap.add_argument("--world", choices=sorted(WORLDS), default="gsm8k", help="simulated world (default: gsm8k)")
    ap.add_argument("--heldout", type=int, default=None, help="held-out items (default: 400 GSM8K, 64 HumanEval)")
    ap.add_argument(
        "--search-size",
        type=int,
        default=40,
        help="search items per seed; as many more are the rater's (default: 40)",
    )
    ap.add_argument(
        "--world-seed",
        type=int,
        default=0,
        help="seed of the world: which items are held out and every latent draw (default: 0)",
    )
    ap.add_argument(
        "--calibration",
        default=None,
        help="HumanEval world only: the calibration cache it reads (default: "
        "benchmarks/hflow_sim_code_calibration.json; runs 1-6 in docs/benchmarks.md read "
        "benchmarks/hflow_sim_code_calibration_v1.json, made before the docstring forms of session 36; "
        "run 7 read benchmarks/hflow_sim_code_calibration_v2.json, made before the test step kept its "
        "best attempt; neither records example counts, so their test step keeps the last fix)",
    )
    ap.add_argument("--optimum-cache", default=None, help="default: hflow_sim_optimum.json (GSM8K), else per world")
    ap.add_argument("--out", default=None, help="also write the result line to this file (default: print only)")
    ap.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="run only these methods (default: all); e.g. the baselines alone at a larger budget, to "
        "measure their runs to the optimum where the equal budget ends before they reach it",
    )
    ap.add_argument("--no-preference-benchmark", action="store_true", help="skip the hidden-criterion runs")
    ap.add_argument(
        "--rater-noise",
        type=float,
        default=0.0,
        help="share of answers the main HFlow methods' simulated rater (no hidden criterion: it prefers "
        "the correct, then the cheaper trace) flips; the preference benchmark's rater keeps its 0.15 "
        "(default: 0, a rater who never errs; run 40b: 0.15)",
    )
    ap.add_argument(
        "--rater-flip-rate",
        type=float,
        default=0.05,
        help="the main HFlow methods' rater_flip_rate, how often their preference model assumes the rater "
        "errs; the preference benchmark keeps 0.15 (default: 0.05; run 40b: 0.1, the library's default)",
    )
    ap.add_argument(
        "--run-settings",
        type=json.loads,
        default={},
        help="SearchConfig settings, a JSON object, over every HFlow search of the run (the preference "
        "benchmark's too), applied after the options above, e.g. run 40b's "
        "'{\"preference_taste_delta\": 0.04}' (default: none)",
    )
    hf = ap.add_argument_group("HFlow settings (SearchConfig fields; defaults are the reported run's)")
    hf.add_argument(
        "--preference-delta",
        type=float,
        default=0.02,
        help="the returned workflow is the most preferred within this much fitness of the best (default: 0.02)",
    )
    hf.add_argument(
        "--preference-delta-se",
        type=float,
        default=0.0,
        help="also within reach: a fitness gap of at most this many paired standard errors (default: 0, off; runs 24-25)",
    )
    hf.add_argument(
        "--preference-weight",
        type=float,
        default=0.05,
        help="most fitness points the preference model adds or takes away in selection (default: 0.05)",
    )
    hf.add_argument(
        "--preference-steering",
        type=float,
        default=0.0,
        help="how strongly the preference model's feature weights steer what edits choose (default: 0, off)",
    )
    hf.add_argument(
        "--preference-residual",
        type=int,
        default=0,
        choices=(0, 1),
        help="1: the preference model explains each answer by the traces' score and cost first, and "
        "selection and steering see only the taste left over (default: 0, the plain model)",
    )
    hf.add_argument(
        "--preference-certainty",
        type=float,
        default=0.0,
        help="k: the selection bonus and the steering use each preference weight and score m shrunk by "
        "its posterior variance v, m * m^2 / (m^2 + k v) (default: 0, the point estimates)",
    )
    hf.add_argument(
        "--preference-polish",
        type=int,
        default=0,
        help="n: when the search ends, the n best workflows each get the one-edit child the preference "
        "model scores highest above them evaluated, within the budget (default: 0, off)",
    )
    hf.add_argument(
        "--preference-polish-rank",
        default="liked",
        choices=("liked", "kept"),
        help="which edits the polish tries: liked (the most liked edit, run 12) or kept (edits that add a "
        "node, most liked first until one lands within the delta; dollars reserved too; run 13)",
    )
    hf.add_argument("--confirm-top", type=int, default=0, help="leaders confirmed on the rater set a generation")
    hf.add_argument(
        "--final-questions",
        type=int,
        default=4,
        help="questions about the finalists when the search ends (default: 4; 0: none, as in runs 1-7)",
    )
    hf.add_argument("--confirm-final", type=int, default=0, help="finalists confirmed on the rater set at the end")
    hf.add_argument("--steer-choices", type=int, default=1, choices=(0, 1), help="memory steers add/replace/backbone")
    hf.add_argument("--screen-problems", type=int, default=10, help="first racing stage (not for 'no racing')")
    hf.add_argument(
        "--screen-margin",
        type=float,
        default=0.1,
        help="how far below its parent, in fitness on the screening problems, a raced child may fall and "
        "still go on; shrinks as more problems score it (default: 0.1)",
    )
    hf.add_argument(
        "--starter-dollar-share",
        type=float,
        default=0.0,
        help="price cap on the first population's random members: each is priced on a few search problems "
        "and dropped if a search-set evaluation would cost more than this share of --dollars (default: 0, off)",
    )
    hf.add_argument(
        "--ranked-structural-share",
        type=float,
        default=0.34,
        help="share of each generation's children that are the parent's best untried structural single "
        "edit by memory's expected gain, not a random draw (default: 0.34, run 18; 0: runs 1-17)",
    )
    hf.add_argument(
        "--preference-lineage",
        type=float,
        default=_DEFAULT.preference_lineage,
        help="fitness band: one survivor place a generation for the most preferred workflow within it of "
        "the best (default: %(default)s; 0: off; runs 27, 33)",
    )
    hf.add_argument(
        "--preference-lineage-children",
        type=int,
        default=_DEFAULT.preference_lineage_children,
        help="with --preference-lineage: ranked structural children a generation whose parent is that "
        "workflow (default: %(default)s; runs 27, 33)",
    )
    hf.add_argument(
        "--preference-children",
        type=int,
        default=_DEFAULT.preference_children,
        help="ranked structural children a generation that are the best workflow's most liked structural "
        "edit (default: %(default)s; 0: off; runs 27, 33)",
    )
    hf.add_argument(
        "--preference-children-explore",
        type=float,
        default=_DEFAULT.preference_children_explore,
        help="k: the taste children rank edits by the model's gain plus k posterior standard deviations "
        "(default: %(default)s; 0: the gain alone; runs 27, 33)",
    )
    hf.add_argument(
        "--preference-built-pairs",
        type=int,
        default=_DEFAULT.preference_built_pairs,
        help="each generation, this many questions on top of the contender ones (within the preference benchmark's "
        "cap of 4) pit the best workflow against its unevaluated edit "
        "bringing in the feature the answers pinned least; a preferred edit becomes a child (default: %(default)s; 0: off; runs 29, 33)",
    )
    ap.add_argument(
        "--preference-built-reach",
        type=int,
        default=_DEFAULT.preference_built_reach,
        choices=(0, 1, 2),
        help="once the answers like a feature the best workflow lacks, one child a generation is the fresh workflow up "
        "to this many structural edits away with it that a fitness regression predicts fittest (default: %(default)s; 0: off; runs 31-33)",
    )
    ap.add_argument(
        "--preference-reach-ops",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULT.preference_reach_ops,
        help="--preference-built-reach reaches only for operator features (op:cot), never outputs (default: %(default)s; run 32)",
    )
    ap.add_argument(
        "--preference-reach-small",
        type=int,
        default=_DEFAULT.preference_reach_small,
        choices=(0, 1, 2, 3),
        help="--preference-built-reach also considers every workflow of at most this many nodes "
        "(default: %(default)s; 0: off; run 32)",
    )
    ap.add_argument(
        "--preference-reach-as-op",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULT.preference_reach_as_op,
        help="a won op@backbone:X@b or output:X counts for --preference-built-reach as op:X (default: %(default)s; run 33)",
    )
    ap.add_argument(
        "--preference-reach-anchor",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULT.preference_reach_anchor,
        help="--preference-built-reach's predictions add the nearest evaluated workflow's residual (default: %(default)s; run 33)",
    )
    args = ap.parse_args()
    check_run_settings(ap, args.run_settings)
    if not 0 <= args.rater_noise <= 1 or not 0 <= args.rater_flip_rate < 0.5:
        ap.error("--rater-noise must lie in [0, 1] and --rater-flip-rate in [0, 0.5)")
    HFLOW_SETTINGS.update(
        preference_lineage=args.preference_lineage,
        preference_lineage_children=args.preference_lineage_children,
        preference_children=args.preference_children,
        preference_children_explore=args.preference_children_explore,
        preference_built_pairs=args.preference_built_pairs,
        preference_built_reach=args.preference_built_reach,
        preference_reach_ops=args.preference_reach_ops,
        preference_reach_small=args.preference_reach_small,
        preference_reach_as_op=args.preference_reach_as_op,
        preference_reach_anchor=args.preference_reach_anchor,
        preference_delta=args.preference_delta,
        preference_delta_se=args.preference_delta_se,
        preference_weight=args.preference_weight,
        preference_steering=args.preference_steering,
        preference_residual=bool(args.preference_residual),
        preference_certainty=args.preference_certainty,
        preference_polish=args.preference_polish,
        preference_polish_rank=args.preference_polish_rank,
        confirm_top=args.confirm_top,
        final_questions=args.final_questions,
        confirm_final=args.confirm_final,
        steer_choices=bool(args.steer_choices),
        screen_problems=args.screen_problems,
        screen_margin=args.screen_margin,
        starter_dollar_share=args.starter_dollar_share,
        ranked_structural_share=args.ranked_structural_share,
    )
    HFLOW_SETTINGS.update(args.run_settings)
    start = time.time()
    use_world(args.world)
    args.heldout = WORLDS[args.world][2] if args.heldout is None else args.heldout
    if args.calibration and args.world != "humaneval":
        ap.error("--calibration is for --world humaneval")
    task, heldout, pool_rest = load_world(args.world, args.world_seed, args.heldout, args.calibration)
    enum = enumerated_heldout(task, heldout, args.world, args.world_seed, args.heldout, args.optimum_cache)
    optimum = enum[0]
    singles = [r for r in enum if ";" not in r["describe"] and "vote" not in r["describe"]]
    expensive = next(r for r in singles if r["describe"] == "n0=generate@o1")
    best_single = max(singles, key=lambda r: r["fitness"])
    within_1pt = sum(r["fitness"] >= optimum["fitness"] - 0.01 for r in enum) / len(enum)

    # the main methods' rater: never errs unless --rater-noise says so (run 40b)
    main_rater = {"noise": args.rater_noise, "flip_rate": args.rater_flip_rate}
    methods = {
        "hflow": lambda s, ss, rs: run_hflow(task, ss, rs, args.budget, args.dollars, s, args.world_seed, **main_rater),
        "hflow_no_memory": lambda s, ss, rs: run_hflow(
            task, ss, rs, args.budget, args.dollars, s, args.world_seed, memory=False, **main_rater
        ),
        "hflow_no_preferences": lambda s, ss, rs: run_hflow(
            task, ss, rs, args.budget, args.dollars, s, args.world_seed, preferences=False, **main_rater
        ),
        "hflow_no_racing": lambda s, ss, rs: run_hflow(
            task, ss, rs, args.budget, args.dollars, s, args.world_seed, racing=False, **main_rater
        ),
        "random_search": lambda s, ss, rs: run_baseline(
            random_search, task, ss, args.budget, args.dollars, s, args.world_seed
        ),
        "hill_climb": lambda s, ss, rs: run_baseline(
            hill_climb, task, ss, args.budget, args.dollars, s, args.world_seed
        ),
        "regularized_evolution": lambda s, ss, rs: run_baseline(
            regularized_evolution, task, ss, args.budget, args.dollars, s, args.world_seed
        ),
        "aflow_style": lambda s, ss, rs: run_baseline(
            aflow_search, task, ss, args.budget, args.dollars, s, args.world_seed
        ),
    }
    unknown = set(args.methods or ()) - set(methods)
    if unknown:
        ap.error(f"--methods: unknown {sorted(unknown)}; choose from {sorted(methods)}")
    methods = {k: v for k, v in methods.items() if args.methods is None or k in args.methods}
    per_seed: dict[str, list[dict]] = {m: [] for m in methods}
    prefs: dict[str, list[dict]] = {"with_rater": [], "without_rater": []}
    memo: dict[str, float] = {}
    for seed in args.seeds:
        search_set, rater_set = seed_sets(pool_rest, seed, args.search_size)
        for name, fn in methods.items():
            res = fn(seed, search_set, rater_set)
            score = heldout_score(task, heldout, res["chosen"], args.world_seed)
            reach = runs_to_optimum(res, task, heldout, args.world_seed, optimum["fitness"] - 0.01, memo)
            per_seed[name].append(
                {
                    "seed": seed,
                    **score,
                    "runs": res["runs"],
                    "dollars": res["dollars"],
                    "runs_to_optimum": reach,
                    "workflow": res["chosen"].describe(),
                }
            )
            # progress on stderr, so a long run that is cut short still shows what it measured
            print(json.dumps({"seed": seed, "method": name, **per_seed[name][-1]}), file=sys.stderr, flush=True)
        for label, crit in (
            () if args.no_preference_benchmark else (("with_rater", shows_working), ("without_rater", None))
        ):
            res = run_hflow(
                task,
                search_set,
                rater_set,
                args.budget,
                args.dollars,
                seed,
                args.world_seed,
                preferences=crit is not None,
                criterion=crit,
                noise=0.15,
                questions=preference_questions(),
            )
            score = heldout_score(task, heldout, res["chosen"], args.world_seed)
            prefs[label].append(
                {
                    "seed": seed,
                    **score,
                    "questions": res["questions"],
                    "changed": res["changed"],
                    "workflow": res["chosen"].describe(),
                }
            )
            print(json.dumps({"seed": seed, "preferences": label, **prefs[label][-1]}), file=sys.stderr, flush=True)

    summary, ci = summarise(per_seed, args.budget, expensive)
    baselines = [b for b in ("random_search", "hill_climb", "regularized_evolution", "aflow_style") if b in summary]
    best_baseline = min(baselines, key=lambda b: summary[b]["median_runs_to_optimum"]) if baselines else None
    pref_summary = {
        k: {
            "shows_working": statistics.mean(r["shows_working"] for r in v),
            "accuracy": statistics.mean(r["accuracy"] for r in v),
            "questions": statistics.mean(r["questions"] for r in v),
        }
        for k, v in prefs.items()
        if v
    }
    if prefs["with_rater"]:
        pref_summary["with_minus_without_paired_bootstrap_95"] = {
            k: bootstrap_ci([r[k] for r in prefs["with_rater"]], [r[k] for r in prefs["without_rater"]])
            for k in ("shows_working", "accuracy")
        }
    line = {
        "benchmark": "hflow_sim_search",
        "world": args.world,
        "seeds": args.seeds,
        "budget_problem_runs": args.budget,
        "budget_dollars": args.dollars,
        "lambda_cost": LAMBDA,
        "heldout": args.heldout,
        "hflow_settings": HFLOW_SETTINGS,
        # only when set: a default run's line stays as the stored ones (runs 1-40)
        **({"main_rater": main_rater} if main_rater != {"noise": 0.0, "flip_rate": 0.05} else {}),
        "search_size": args.search_size,
        "enumerated_workflows": len(enum),
        "optimum": {k: optimum[k] for k in ("describe", "fitness", "accuracy", "cost")},
        "best_single_call": {k: best_single[k] for k in ("describe", "fitness", "accuracy", "cost")},
        "expensive_single_call": {k: expensive[k] for k in ("describe", "fitness", "accuracy", "cost")},
        "share_within_1pt_of_optimum": within_1pt,
        "summary": summary,
        "minus_random_paired_bootstrap_95": ci,
        "best_baseline_by_runs": best_baseline,
        "preference_benchmark": pref_summary,
        "per_seed": per_seed,
        "preference_per_seed": prefs,
        "seconds": round(time.time() - start, 1),
    }
    text = json.dumps(line)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
