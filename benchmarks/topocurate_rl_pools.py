"""TopoCurate RL task selection: GRPO on equal-size task pools chosen by p(1-p) or by TopoCurate.

Issue 15, deliverable 5b (RL half), at small scale on the embedded shop world
(``embedded:agent_world``):

1. Multi-trial rollouts of the student on train problems: ``--rollouts PATH`` (e.g. the
   ``train_rollouts.json`` that ``benchmarks/topocurate_downstream.py`` writes), or, without it,
   sampled here the same way (``generate_train_rollouts``: ``--train_tasks`` problems x
   ``--trials`` episodes at ``--temperature``) into ``<output>/train_rollouts.json``.
2. ``curate_rollouts`` analyses them; two pools of ``--pool_size`` tasks each are built:
   ``pq``, the tasks with the highest p(1-p) of their pass rate p over the trials (ties by task
   order, the analyses' sorted order), and ``topocurate``, the first ``--pool_size`` tasks of
   TopoCurate's RL pick (``select_rl``: ``p(1-p)(1 + a EBR)(1 + b het)``, p in {0, 1} excluded,
   ties by task order). Printed: their overlap and each pool's mean p, p(1-p), error branch
   ratio (EBR), strategic heterogeneity and RL score.
3. For each paired seed and each pool, multi-turn GRPO (``RSTGModule`` with guidance off, through
   ``benchmarks/rstg_learning.py``'s ``train_one``) trains the same student for ``--steps`` steps of
   ``--batch_size`` tasks x ``--num_generations`` episodes (up to ``--max_turns`` turns), training
   prompts drawn only from the pool. Both pools of a seed share the seed: same init, same prompt
   order over the pool, same sampling seeds.
4. Held-out greedy success on ``--test_size`` problems of the test split at step 0 (the untrained
   student, measured once), every ``--eval_every`` steps and at the end; per step the share of
   zero-variance groups (all G episodes of a task equal: all pass or all fail), whose advantage is 0.

Output: one JSON line per run (``--jsonl``, appended and fsynced as each finishes; rerunning the same
command skips runs already there), then a summary line with per-pool means and 95% t-intervals over
seeds and the paired differences (TopoCurate pool minus p(1-p) pool) with 95% t-intervals; the
Markdown tables are printed and written to ``<output>/summary.md``, and ``<output>/heldout.png``
plots held-out success against steps per pool (mean over seeds, 95% band).

Full run (2 pools x 3 seeds, about 30-35 minutes on one core: ~4-5 min of training per run, ~15-25 s
per evaluation of the 256 test problems):

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/topocurate_rl_pools.py \\
        --rollouts runs/topocurate_downstream/train_rollouts.json --pool_size 32 --steps 40 \\
        --seeds 0 1 2 --test_size 0 --eval_every 10 --output runs/topocurate_rl_pools

Tiny smoke run (a few minutes):

    OMP_NUM_THREADS=1 python benchmarks/topocurate_rl_pools.py \\
        --rollouts runs/topocurate_downstream/train_rollouts.json --pool_size 4 --steps 2 --seeds 0 \\
        --test_size 8 --eval_every 1 --output /tmp/rl_pools_smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark scripts

from topocurate_downstream import mean_ci  # noqa: E402  (stdlib-only at import)

POOLS = ("pq", "topocurate")
BENCHMARK = "topocurate_rl_pools"


def pq(p: float | None) -> float:
    """p(1-p) of a pass rate (0 for an unscored task)."""
    return 0.0 if p is None else p * (1.0 - p)


def pq_pool(analyses: list, size: int) -> list[str]:
    """The ``size`` tasks with the highest p(1-p); ties by task order (the analyses' order)."""
    order = sorted(range(len(analyses)), key=lambda i: (-pq(analyses[i].task.pass_rate), i))
    return [analyses[i].task.task_id for i in order[:size]]


def topocurate_pool(analyses: list, size: int, config=None) -> list[str]:
    """The first ``size`` tasks of TopoCurate's RL pick (``select_rl``, highest score first)."""
    from lightning_agents.topology import select_rl

    return [s.task_id for s in select_rl(analyses, config)][:size]


def build_pools(analyses: list, size: int, config=None) -> dict[str, list[str]]:
    """Both pools, each of exactly ``size`` tasks (``ValueError`` when TopoCurate scores fewer)."""
    pools = {"pq": pq_pool(analyses, size), "topocurate": topocurate_pool(analyses, size, config)}
    if len(pools["topocurate"]) < size or len(pools["pq"]) < size:
        raise ValueError(
            f"pools of {size} tasks asked for, but TopoCurate scores only {len(pools['topocurate'])} tasks "
            f"(those with 0 < p < 1) of {len(analyses)}: lower --pool_size or sample more tasks"
        )
    return pools


def pool_figures(analyses: list, ids: list[str], config=None) -> dict:
    """Mean pass rate, p(1-p), EBR, heterogeneity and RL score of a pool's tasks."""
    from lightning_agents.topology import SelectionConfig, rl_score

    config = config or SelectionConfig()  # select_rl's own default, so both read the same weights
    by = {a.task.task_id: a.task for a in analyses}
    tasks = [by[i] for i in ids]

    def avg(values):
        return round(statistics.fmean(values), 4) if values else None

    return {
        "tasks": len(tasks),
        "mean_pass_rate": avg([t.pass_rate or 0.0 for t in tasks]),
        "mean_pq": avg([pq(t.pass_rate) for t in tasks]),
        "mean_ebr": avg([t.error_branch_ratio for t in tasks]),
        "mean_heterogeneity": avg([t.heterogeneity for t in tasks]),
        "mean_rl_score": avg([rl_score(t, config.rl_alpha, config.rl_beta) or 0.0 for t in tasks]),
    }


def eval_steps(steps: int, every: int) -> list[int]:
    """Steps after which held-out success is measured (step 0 is the untrained student)."""
    points = set(range(every, steps + 1, every)) if every > 0 else set()
    return sorted(points | {steps})


def make_callbacks(test: list[dict], points: list[int]):
    """Lightning callbacks: held-out greedy success at ``points``, and per-step group statistics."""
    import lightning as L
    import torch
    from rstg_learning import evaluate

    class HeldOut(L.Callback):
        def __init__(self) -> None:
            self.success: dict[int, float] = {}
            self.eval_s = 0.0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = trainer.global_step
            if step in points and step not in self.success:
                t0 = time.time()
                state = torch.get_rng_state()  # training draws the same numbers with or without evals
                self.success[step] = evaluate(pl_module, test, 0)["greedy"]
                torch.set_rng_state(state)
                pl_module.train()
                self.eval_s += time.time() - t0

    class Groups(L.Callback):
        def __init__(self) -> None:
            self.zero_var: list[float] = []
            self.reward: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            m = trainer.callback_metrics
            if "train/frac_negative_zero_var" in m:
                share = float(m["train/frac_negative_zero_var"]) + float(m["train/frac_positive_zero_var"])
                self.zero_var.append(round(share, 4))
                self.reward.append(round(float(m["train/reward_mean"]), 4))

    return HeldOut(), Groups()


def summarise(runs: list[dict], initial: float | None) -> dict:
    """Per pool mean [95% CI] over seeds; paired differences TopoCurate minus p(1-p), seeds both finished."""
    by = {(r["pool"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs if ("pq", r["seed"]) in by and ("topocurate", r["seed"]) in by})
    points = sorted({int(s) for r in runs for s in r["heldout"]})
    out: dict = {"seeds": seeds, "initial_success": initial, "pools": {}, "topocurate_minus_pq": {}}
    names = ["final_success", "mean_heldout", "zero_var_share", "train_reward"]
    if not seeds:
        return out

    def value(pool, seed, name):
        r = by[(pool, seed)]
        return r["heldout"][str(name)] if isinstance(name, int) else r[name]

    for pool in POOLS:
        entry = {}
        for name in [*names, *points]:
            mean, low, high = mean_ci([value(pool, s, name) for s in seeds])
            entry[f"step_{name}" if isinstance(name, int) else name] = {"mean": mean, "ci95": [low, high]}
        out["pools"][pool] = entry
    for name in [*names, *points]:
        diffs = [value("topocurate", s, name) - value("pq", s, name) for s in seeds]
        mean, low, high = mean_ci(diffs)
        key = f"step_{name}" if isinstance(name, int) else name
        out["topocurate_minus_pq"][key] = {"mean": mean, "ci95": [low, high], "values": diffs}
    return out


def _fmt(e: dict | None) -> str:
    if not e:
        return "n/a"
    low, high = e["ci95"]
    return f"{e['mean']:.3f} [{low:.3f}, {high:.3f}]"


def markdown(summary: dict, pools: dict, figures: dict, proto: dict) -> str:
    """The pool table and the result table (mean [95% CI] over seeds, paired differences)."""
    overlap = len(set(pools["pq"]) & set(pools["topocurate"]))
    lines = [
        f"Pools of {proto['pool_size']} tasks (overlap {overlap}); {proto['steps']} GRPO steps of "
        f"{proto['batch_size']} tasks x G={proto['num_generations']}, lr {proto['lr']:g}, up to "
        f"{proto['max_turns']} turns; {proto['test_size']} test problems; paired seeds {summary['seeds']}; "
        f"untrained student {summary['initial_success']}.",
        "",
        "| pool | tasks | mean p | mean p(1-p) | mean EBR | mean heterogeneity | mean RL score |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pool in POOLS:
        f = figures[pool]
        lines.append(
            f"| {pool} | {f['tasks']} | {f['mean_pass_rate']} | {f['mean_pq']} | {f['mean_ebr']} | "
            f"{f['mean_heterogeneity']} | {f['mean_rl_score']} |"
        )
    if not summary["pools"]:
        return "\n".join(lines + ["", "No seed has finished both pools yet."]) + "\n"
    steps = sorted(int(k[5:]) for k in summary["topocurate_minus_pq"] if k.startswith("step_"))
    heads = [f"held-out @ {s}" for s in steps] + ["mean held-out", "zero-variance groups", "train reward"]
    keys = [f"step_{s}" for s in steps] + ["mean_heldout", "zero_var_share", "train_reward"]
    lines += ["", f"| pool | {' | '.join(heads)} |", "|---|" + "---|" * len(heads)]
    for pool in POOLS:
        lines.append(f"| {pool} | " + " | ".join(_fmt(summary["pools"][pool].get(k)) for k in keys) + " |")
    lines.append(
        "| topocurate minus pq | " + " | ".join(_fmt(summary["topocurate_minus_pq"].get(k)) for k in keys) + " |"
    )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], initial: float | None, path: Path) -> None:
    """Held-out success against steps per pool: mean over seeds with a 95% t band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for pool, colour in zip(POOLS, ("#999999", "#4477aa")):
        rows = [r for r in runs if r["pool"] == pool]
        if not rows:
            continue
        points = sorted({int(s) for r in rows for s in r["heldout"]})
        xs, means, lows, highs = [], [], [], []
        if initial is not None:
            xs, means, lows, highs = [0], [initial], [initial], [initial]
        for step in points:
            mean, low, high = mean_ci([r["heldout"][str(step)] for r in rows if str(step) in r["heldout"]])
            xs.append(step)
            means.append(mean)
            lows.append(low)
            highs.append(high)
        label = {"pq": "p(1-p) pool", "topocurate": "TopoCurate pool"}[pool]
        ax.plot(xs, means, marker="o", color=colour, label=f"{label} ({len(rows)} seeds)")
        ax.fill_between(xs, lows, highs, color=colour, alpha=0.2)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out greedy success")
    ax.set_title("GRPO on equal-size task pools, agent world")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--rollouts",
        default=None,
        help="multi-trial train rollouts (JSON list, as topocurate_downstream.py writes); default: sample them here",
    )
    ap.add_argument("--policy", default="embedded:student", help="the student that samples rollouts (no --rollouts)")
    ap.add_argument("--train_tasks", type=int, default=128, help="train problems sampled when --rollouts is not given")
    ap.add_argument("--trials", type=int, default=8, help="episodes per train problem when --rollouts is not given")
    ap.add_argument("--temperature", type=float, default=0.5, help="sampling temperature of those rollouts")
    ap.add_argument("--rollout_seed", type=int, default=0, help="torch seed of those rollouts")
    ap.add_argument("--rollout_batch_size", type=int, default=512, help="episodes per generate call of those rollouts")
    ap.add_argument("--pool_size", type=int, default=32, help="tasks in each pool (equal sizes)")
    ap.add_argument("--rl_alpha", type=float, default=1.0, help="TopoCurate's EBR weight a in the RL score")
    ap.add_argument("--rl_beta", type=float, default=1.0, help="TopoCurate's heterogeneity weight b in the RL score")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="paired training seeds")
    ap.add_argument("--steps", type=int, default=40, help="GRPO optimizer steps per run")
    ap.add_argument("--lr", type=float, default=2e-4, help="GRPO learning rate")
    ap.add_argument("--batch_size", type=int, default=8, help="pool tasks per GRPO step")
    ap.add_argument("--num_generations", type=int, default=4, help="episodes per task per step (group size G)")
    ap.add_argument("--max_turns", type=int, default=7, help="model turns per episode")
    ap.add_argument("--max_new_tokens", type=int, default=48, help="tokens per model turn")
    ap.add_argument("--test_size", type=int, default=0, help="held-out test problems (0: the whole split, 256)")
    ap.add_argument(
        "--eval_every", type=int, default=20, help="held-out evaluation every this many steps (and at the end)"
    )
    ap.add_argument("--output", default="runs/topocurate_rl_pools", help="folder for summary.md, heldout.png, rollouts")
    ap.add_argument(
        "--jsonl",
        default=None,
        help="run lines appended here; a rerun skips finished runs (default <output>/results.jsonl)",
    )
    args = ap.parse_args()

    import torch
    from rstg_learning import Log, evaluate, records_of, train_one
    from topocurate_downstream import generate_train_rollouts

    from lightning_agents.atomic import atomic_write_text
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.modules.rstg import RSTGModule
    from lightning_agents.tasks import load_task
    from lightning_agents.topology import SelectionConfig, curate_rollouts

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    started = time.time()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(args.jsonl or str(out / "results.jsonl"))

    rollouts_path = Path(args.rollouts) if args.rollouts else out / "train_rollouts.json"
    if not rollouts_path.is_file():
        if args.rollouts:
            ap.error(f"--rollouts {rollouts_path} does not exist")
        gen = argparse.Namespace(**{**vars(args), "batch_size": args.rollout_batch_size})
        generate_train_rollouts(gen, rollouts_path)
    read = load_rollouts(rollouts_path)
    config = SelectionConfig(rl_alpha=args.rl_alpha, rl_beta=args.rl_beta)
    analyses = curate_rollouts(read, config).analyses
    pools = build_pools(analyses, args.pool_size, config)
    figures = {name: pool_figures(analyses, ids, config) for name, ids in pools.items()}
    overlap = sorted(set(pools["pq"]) & set(pools["topocurate"]))
    digest = hashlib.sha1(json.dumps(pools, sort_keys=True).encode()).hexdigest()[:12]
    print(
        json.dumps(
            {
                "benchmark": BENCHMARK,
                "rollouts": {"path": str(rollouts_path), "episodes": len(read), "tasks": len(analyses)},
                "overlap": len(overlap),
                "pool_figures": figures,
                "pools": pools,
            }
        ),
        flush=True,
    )

    task_spec = {"class_path": "lightning_agents.tasks.agent_world.AgentWorldTask"}
    task = load_task("embedded:agent_world")
    problems = {p["id"]: p for p in task.get_problems("train")}
    missing = [i for ids in pools.values() for i in ids if i not in problems]
    if missing:
        raise SystemExit(f"pool tasks not in the agent world's train split: {missing[:5]}")
    test = records_of(task_spec, "test", args.test_size)
    proto = {
        "benchmark": BENCHMARK,
        "pools_digest": digest,
        "pool_size": args.pool_size,
        "steps": args.steps,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "num_generations": args.num_generations,
        "max_turns": args.max_turns,
        "max_new_tokens": args.max_new_tokens,
        "test_size": len(test),
        "eval_every": args.eval_every,
    }
    test_proto = {k: proto[k] for k in ("benchmark", "max_turns", "max_new_tokens", "test_size")}
    initial_line = log.find(**test_proto, run="initial_student")
    if initial_line is None:
        base = RSTGModule(guidance=False, teacher=None, max_new_tokens=args.max_new_tokens, max_turns=args.max_turns)
        base.configure_model()
        t0 = time.time()
        success = evaluate(base, test, 0)["greedy"]
        log.emit({**test_proto, "run": "initial_student", "success": success, "eval_s": round(time.time() - t0, 1)})
        initial_line = log.lines[-1]
        del base
    initial = initial_line["success"]

    setting = {"task": task_spec, "teacher": None, "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns}
    points = eval_steps(args.steps, args.eval_every)
    work = tempfile.mkdtemp(prefix="rl-pools-")
    for seed in args.seeds:  # seed-major: a stopped run leaves whole pairs
        for pool in POOLS:
            if log.find(**proto, pool=pool, seed=seed) is not None:
                continue
            records = [task.prompt_record(problems[i]) for i in pools[pool]]
            held, groups = make_callbacks(test, points)
            t0, c0 = time.time(), time.process_time()
            train_one(
                setting,
                "grpo",
                None,
                seed,
                args.steps,
                args,
                str(Path(work) / "teacher_cache.jsonl"),
                args.lr,
                train_records=records,
                callbacks=[held, groups],
            )
            heldout = {str(s): held.success[s] for s in points if s in held.success}
            log.emit(
                {
                    **proto,
                    "pool": pool,
                    "seed": seed,
                    "heldout": heldout,
                    "final_success": held.success.get(args.steps, math.nan),
                    "mean_heldout": statistics.fmean(heldout.values()) if heldout else math.nan,
                    "zero_var_share": statistics.fmean(groups.zero_var) if groups.zero_var else math.nan,
                    "train_reward": statistics.fmean(groups.reward) if groups.reward else math.nan,
                    "zero_var_by_step": groups.zero_var,
                    "reward_by_step": groups.reward,
                    "wall_s": round(time.time() - t0, 1),
                    "cpu_s": round(time.process_time() - c0, 1),
                    "eval_s": round(held.eval_s, 1),
                }
            )
    runs = [line for line in log.lines if "seed" in line and all(line.get(k) == v for k, v in proto.items())]
    summary = summarise(runs, initial)
    table = markdown(summary, pools, figures, proto)
    atomic_write_text(out / "summary.md", table)
    plot(runs, initial, out / "heldout.png")
    print(
        json.dumps(
            {
                "benchmark": BENCHMARK,
                "summary": summary,
                "overlap": len(overlap),
                "pool_figures": figures,
                "settings": vars(args),
                "wall_s": round(time.time() - started, 1),
            }
        ),
        flush=True,
    )
    print(table)


if __name__ == "__main__":
    main()
