"""TopoCurate downstream: SFT on TopoCurate's pick against size-matched baselines, in the agent world.

Issue 15, deliverable 5 (SFT half), at small scale on the embedded shop world
(``embedded:agent_world``):

1. The student samples ``--trials`` episodes (default 8) for each of ``--train_tasks`` problems of
   the train split with the project's agent loop (``run_agent_loop``, what ``lightning-agents
   rollout`` runs); the rollouts are written to ``<output>/train_rollouts.json``.
2. ``curate_rollouts`` reads them (``load_rollouts``) and makes TopoCurate's SFT pick and its
   size-matched baselines (``size_matched_baselines``): ``outcome`` (n successes drawn from all
   successes), ``random_k`` (per task as many random successes as TopoCurate took there),
   ``shortest_k`` (per task as many of its shortest successes). Every selection has the same
   number of trajectories n. The random draws use the run's seed as ``baseline_seed``.
3. For each seed and each selection, the *same* student is fine-tuned (``SFTModule`` under a
   Lightning ``Trainer``, data through ``ChatDataModule`` with assistant-only labels, the tools
   the agent saw rendered in the prompt) for the same number of epochs: equal data size, equal
   steps. Seeds are paired: every method of a seed uses the same training seed and the same
   evaluation sampling seed.
4. Each fine-tuned model, and the untrained student (the baseline, measured in the same run with
   the same seeds), runs the agent loop on ``--heldout_tasks`` problems of the disjoint test split:
   greedy (success rate), ``--pass_k`` samples at ``--eval_temperature`` (pass@k: share of problems with at
   least one success), recovery (share of evaluation episodes whose first tool call returned an
   error that still passed the final-state check) and calls per success (tool calls of
   successful episodes, mean).

Prints one JSON line per (seed, method) run, then one summary line: per method the mean over seeds
with a 95% t-interval, and per baseline its paired difference from TopoCurate (mean, 95% t-interval
over seeds). Writes ``results.jsonl``, ``summary.md`` (the Markdown tables) and ``downstream.png``
(bars with the intervals) under ``--output``.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/topocurate_downstream.py \\
        --train_tasks 96 --trials 8 --heldout_tasks 64 --seeds 0 1 2 --output runs/topocurate_downstream
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

METHODS = ("topocurate", "outcome", "random_k", "shortest_k")
BASELINE = "student"  # the untrained student, measured in the same run
# Two-sided 95% Student-t quantiles by degrees of freedom (normal beyond 30).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_T95.update({df: 2.2 - 0.01 * (df - 11) for df in range(11, 21)})
_T95.update({df: 2.09 - 0.0045 * (df - 20) for df in range(21, 31)})


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval half-width bounds ``(mean, low, high)``; one value gives a zero-width interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = _T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def episode_figures(rollouts: list[dict]) -> dict:
    """Counts over evaluation episodes: successes, first-call failures and their recoveries, calls."""
    successes = first_failed = recovered = 0
    calls_of_successes = []
    for rollout in rollouts:
        success = rollout["reward"] >= 1.0
        successes += success
        calls = sum(len(m.get("tool_calls") or []) for m in rollout["traj"] if m["role"] == "assistant")
        first = next((m for m in rollout["traj"] if m["role"] == "tool"), None)
        if first is not None and str(first.get("content", "")).startswith("error:"):
            first_failed += 1
            recovered += success
        if success:
            calls_of_successes.append(calls)
    return {
        "episodes": len(rollouts),
        "successes": successes,
        "first_call_failed": first_failed,
        "recovered": recovered,
        "calls_of_successes": calls_of_successes,
    }


def evaluate(net, tokenizer, task, problems: list[dict], args, seed: int) -> dict:
    """Greedy success, pass@k, recovery and calls per success of one model on the held-out problems."""
    import torch

    from lightning_agents.rollout.agent_loop import run_agent_loop
    from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig

    net.eval()
    engine = HFGenerationEngine(net, tokenizer)
    common = dict(task=task, max_turns=args.max_turns, batch_size=args.batch_size)
    with torch.no_grad():
        greedy = run_agent_loop(
            engine,
            problems,
            trials=1,
            sampling=SamplingConfig(max_new_tokens=args.max_new_tokens, do_sample=False),
            **common,
        )
        sampled = []
        if args.pass_k:
            # The same sampling seed for every method of a seed: paired comparisons.
            torch.manual_seed(10_000 + seed)
            sampled = run_agent_loop(
                engine,
                problems,
                trials=args.pass_k,
                sampling=SamplingConfig(
                    max_new_tokens=args.max_new_tokens, temperature=args.eval_temperature, do_sample=True
                ),
                **common,
            )
    solved: dict[str, bool] = {}
    for rollout in sampled:
        solved[rollout["task_id"]] = solved.get(rollout["task_id"], False) or rollout["reward"] >= 1.0
    g, everything = episode_figures(greedy), episode_figures(greedy + sampled)
    calls = everything["calls_of_successes"]
    return {
        "greedy_success": g["successes"] / len(problems),
        "pass_at_k": (sum(solved.values()) / len(problems)) if args.pass_k else None,
        # Over greedy and sampled episodes together: the greedy ones alone are too few to count.
        "recovery_rate": everything["recovered"] / everything["first_call_failed"]
        if everything["first_call_failed"]
        else None,
        "first_call_failed": everything["first_call_failed"],
        "recovered": everything["recovered"],
        "calls_per_success": statistics.fmean(calls) if calls else None,
        "successful_episodes": len(calls),
        "eval_episodes": everything["episodes"],
    }


def fine_tune(conversations: list[dict], args, seed: int, folder: Path):
    """The student fine-tuned on ``conversations``; returns ``(model, optimizer steps)``."""
    import lightning as L

    from lightning_agents.atomic import atomic_write_text
    from lightning_agents.datamodules.chat import ChatDataModule
    from lightning_agents.modules.sft import SFTModule

    folder.mkdir(parents=True, exist_ok=True)
    path = atomic_write_text(
        folder / "train.jsonl",
        "".join(json.dumps({"messages": c["messages"], "tools": c["tools"]}) + "\n" for c in conversations),
    )
    L.seed_everything(seed, workers=True, verbose=False)
    module = SFTModule(model=args.policy, lr=args.lr, warmup_steps=args.warmup_steps)
    data = ChatDataModule(
        train=str(path),
        val=None,
        tokenizer=args.policy,
        max_length=args.max_length,
        batch_size=args.sft_batch_size,
        cache_dir=None,
        num_proc=1,
    )
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(folder),
    )
    trainer.fit(module, datamodule=data)
    return module.model, trainer.global_step


def generate_train_rollouts(args, path: Path) -> Path:
    """Sample ``args.trials`` episodes of the student on each of ``args.train_tasks`` train problems
    of the agent world and write them to ``path`` (JSON list, the ``lightning-agents rollout`` rows).

    Reads ``policy``, ``train_tasks``, ``trials``, ``temperature``, ``max_new_tokens``,
    ``max_turns``, ``batch_size`` and ``rollout_seed`` from ``args``.
    """
    import torch

    from lightning_agents.atomic import atomic_write_text
    from lightning_agents.models import load_model_and_tokenizer
    from lightning_agents.rollout.agent_loop import run_agent_loop
    from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig
    from lightning_agents.tasks import load_task

    task = load_task("embedded:agent_world")
    torch.manual_seed(args.rollout_seed)
    net, tokenizer = load_model_and_tokenizer(args.policy, padding_side="left")
    net.eval()
    with torch.no_grad():
        rollouts = run_agent_loop(
            HFGenerationEngine(net, tokenizer),
            task.get_problems("train", n=args.train_tasks),
            trials=args.trials,
            task=task,
            sampling=SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature),
            max_turns=args.max_turns,
            batch_size=args.batch_size,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(rollouts) + "\n")
    return path


def selection_figures(keys: list[tuple[str, int]], result) -> dict:
    """What a selection holds: size, tasks, mean steps, share with a tool error, share with recovery."""
    metrics = {(t.task_id, t.trial): t for a in result.analyses for t in a.trajectories}
    picked = [metrics[tuple(k)] for k in keys]
    return {
        "size": len(picked),
        "tasks": len({t.task_id for t in picked}),
        "mean_steps": round(statistics.fmean(t.steps for t in picked), 3) if picked else None,
        "with_tool_error": round(sum(t.errors > 0 for t in picked) / len(picked), 4) if picked else None,
        "with_recovery": round(sum(t.recovery > 0 for t in picked) / len(picked), 4) if picked else None,
        "mean_efficiency": round(statistics.fmean(t.efficiency or 0.0 for t in picked), 4) if picked else None,
    }


def summarise(runs: list[dict], metric_names: list[str]) -> dict:
    """Per method mean and 95% CI over seeds; per baseline its paired difference from TopoCurate."""
    by = {(r["method"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    methods = [m for m in (BASELINE, *METHODS) if any(r["method"] == m for r in runs)]
    out: dict = {"methods": {}, "paired_vs_topocurate": {}}
    for method in methods:
        out["methods"][method] = {}
        for name in metric_names:
            values = [by[(method, s)][name] for s in seeds if (method, s) in by and by[(method, s)][name] is not None]
            if values:
                mean, low, high = mean_ci(values)
                out["methods"][method][name] = {"mean": mean, "ci95": [low, high], "values": values}
    for method in methods:
        if method == "topocurate":
            continue
        out["paired_vs_topocurate"][method] = {}
        for name in metric_names:
            diffs = [
                by[("topocurate", s)][name] - by[(method, s)][name]
                for s in seeds
                if (method, s) in by
                and ("topocurate", s) in by
                and by[(method, s)][name] is not None
                and by[("topocurate", s)][name] is not None
            ]
            if diffs:
                mean, low, high = mean_ci(diffs)
                out["paired_vs_topocurate"][method][name] = {"mean": mean, "ci95": [low, high], "values": diffs}
    return out


def _fmt(entry: dict | None, digits: int = 3) -> str:
    if not entry:
        return "n/a"
    low, high = entry["ci95"]
    return f"{entry['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def markdown(summary: dict, selections: dict, args) -> str:
    """The result tables: per method (mean [95% CI]) and paired differences from TopoCurate."""
    k = args.pass_k
    names = ["greedy_success", "pass_at_k", "recovery_rate", "calls_per_success"]
    heads = ["held-out success (greedy)", f"pass@{k}", "recovery (first call failed)", "calls per success"]
    lines = [
        f"| method | SFT trajectories | {' | '.join(heads)} |",
        "|---|---:|" + "---|" * len(heads),
    ]
    for method, figures in summary["methods"].items():
        size = selections.get(method, {}).get("size", 0)
        lines.append(f"| {method} | {size} | " + " | ".join(_fmt(figures.get(n)) for n in names) + " |")
    lines += ["", f"| TopoCurate minus | {' | '.join(heads)} |", "|---|" + "---|" * len(heads)]
    for method, figures in summary["paired_vs_topocurate"].items():
        lines.append(f"| {method} | " + " | ".join(_fmt(figures.get(n)) for n in names) + " |")
    lines += [
        "",
        "| selection | trajectories | tasks | mean steps | with a tool error | with recovery | mean efficiency |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, s in selections.items():
        lines.append(
            f"| {method} | {s['size']} | {s['tasks']} | {s['mean_steps']} | {s['with_tool_error']} | "
            f"{s['with_recovery']} | {s['mean_efficiency']} |"
        )
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path, k: int) -> None:
    """Bars per method with 95% intervals: greedy success, pass@k and recovery rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [("greedy_success", "greedy success"), ("pass_at_k", f"pass@{k}"), ("recovery_rate", "recovery rate")]
    methods = list(summary["methods"])
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.4))
    for ax, (name, title) in zip(axes, names):
        means, errors = [], [[], []]
        for method in methods:
            entry = summary["methods"][method].get(name)
            mean = entry["mean"] if entry else float("nan")
            low, high = entry["ci95"] if entry else (mean, mean)
            means.append(mean)
            errors[0].append(mean - low)
            errors[1].append(high - mean)
        ax.bar(range(len(methods)), means, yerr=errors, capsize=3, color=["#999999"] + ["#4477aa"] * (len(methods) - 1))
        ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylim(0, 1)
    fig.suptitle("SFT on equal-size selections, agent world (mean over seeds, 95% CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def versions() -> dict:
    import lightning
    import torch
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "lightning": lightning.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="embedded:student", help="the student that samples and is fine-tuned")
    parser.add_argument("--train_tasks", type=int, default=96, help="train-split problems sampled")
    parser.add_argument("--trials", type=int, default=8, help="episodes per train problem")
    parser.add_argument("--heldout_tasks", type=int, default=64, help="test-split problems evaluated")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="paired seeds")
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        default=list(METHODS),
        help="selections to fine-tune on: TopoCurate's pick and its size-matched baselines (default: all)",
    )
    # 0.5 as in docs/topocurate.md's agent-world rollouts: at 1.0 the embedded student solves
    # a fifth as many train problems, which leaves little to select from.
    parser.add_argument("--temperature", type=float, default=0.5, help="sampling temperature of the train rollouts")
    parser.add_argument("--eval_temperature", type=float, default=0.5, help="sampling temperature of pass@k")
    parser.add_argument(
        "--max_turns", type=int, default=7, help="model turns per episode, train and held-out (default: 7)"
    )
    parser.add_argument("--max_new_tokens", type=int, default=48, help="most tokens per model turn (default: 48)")
    parser.add_argument("--batch_size", type=int, default=512, help="episodes per generate call")
    parser.add_argument("--pass_k", type=int, default=4, help="sampled episodes per held-out problem (0: greedy only)")
    parser.add_argument("--epochs", type=int, default=3, help="SFT epochs (equal sizes, so equal steps)")
    parser.add_argument("--lr", type=float, default=1e-3, help="SFT learning rate (configs/topocurate_sft.yaml's)")
    parser.add_argument(
        "--warmup_steps", type=int, default=0, help="SFT linear learning-rate warmup steps, 0 for none (default: 0)"
    )
    parser.add_argument("--sft_batch_size", type=int, default=16, help="conversations per SFT step (default: 16)")
    parser.add_argument("--max_length", type=int, default=1024, help="SFT tokens per conversation")
    parser.add_argument("--sft_per_task", type=int, default=2, help="TopoCurate's trajectories per task")
    parser.add_argument("--rollout_seed", type=int, default=0, help="torch seed of the train rollouts")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--output",
        default="runs/topocurate_downstream",
        help="folder for the train rollouts, results.jsonl, summary.md and downstream.png "
        "(default: runs/topocurate_downstream)",
    )
    parser.add_argument("--reuse_rollouts", action="store_true", help="read <output>/train_rollouts.json if present")
    args = parser.parse_args()

    import torch

    from lightning_agents.atomic import atomic_write_text
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.models import load_model_and_tokenizer, load_tokenizer
    from lightning_agents.tasks import load_task
    from lightning_agents.topology import SelectionConfig, curate_rollouts

    torch.set_num_threads(args.threads)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    task = load_task("embedded:agent_world")
    heldout = task.get_problems("test", n=args.heldout_tasks)
    tokenizer = load_tokenizer(args.policy, padding_side="left")

    rollouts_path = out / "train_rollouts.json"
    if not (args.reuse_rollouts and rollouts_path.is_file()):
        generate_train_rollouts(args, rollouts_path)
    generation_s = time.time() - started
    read = load_rollouts(rollouts_path)
    rewards = [r.reward for r in read]
    rollout_figures = {
        "episodes": len(read),
        "mean_reward": round(statistics.fmean(rewards), 4),
        "tasks_with_a_success": len({r.task_id for r in read if r.reward >= 1.0}),
        "generation_s": round(generation_s, 1),
    }
    print(json.dumps({"benchmark": "topocurate_downstream", "train_rollouts": rollout_figures}), flush=True)

    runs: list[dict] = []
    selections: dict[str, dict] = {}
    for seed in args.seeds:
        result = curate_rollouts(read, SelectionConfig(sft_per_task=args.sft_per_task, baseline_seed=seed))
        picks = {"topocurate": list(result.sft), **{m: result.baselines["sft"][m] for m in METHODS[1:]}}
        sizes = {m: len(picks[m]) for m in args.methods}
        if not picks["topocurate"]:
            raise SystemExit(
                "TopoCurate selected nothing: the student solved no train problem; sample more tasks or trials"
            )
        if len(set(sizes.values())) != 1:
            raise SystemExit(f"selections differ in size {sizes}: the comparison would not be size-matched")
        torch.manual_seed(seed)
        student, _ = load_model_and_tokenizer(args.policy)
        t0, c0 = time.time(), time.process_time()
        figures = evaluate(student, tokenizer, task, heldout, args, seed)
        runs.append(
            {
                "method": BASELINE,
                "seed": seed,
                "sft_steps": 0,
                "eval_s": round(time.time() - t0, 1),
                "eval_cpu_s": round(time.process_time() - c0, 1),
                **figures,
            }
        )
        print(json.dumps({"benchmark": "topocurate_downstream", **runs[-1]}), flush=True)
        for method in args.methods:
            keys = picks[method]
            selections.setdefault(method, selection_figures(keys, result))
            conversations = result.sft_conversations(keys)
            t0, c0 = time.time(), time.process_time()
            net, steps = fine_tune(conversations, args, seed, out / f"seed{seed}" / method)
            train_s, train_cpu_s = time.time() - t0, time.process_time() - c0
            t0, c0 = time.time(), time.process_time()
            figures = evaluate(net, tokenizer, task, heldout, args, seed)
            runs.append(
                {
                    "method": method,
                    "seed": seed,
                    "selection_size": len(keys),
                    "selection_tasks": len({k[0] for k in keys}),
                    "sft_steps": steps,
                    "train_s": round(train_s, 1),
                    "train_cpu_s": round(train_cpu_s, 1),
                    "eval_s": round(time.time() - t0, 1),
                    "eval_cpu_s": round(time.process_time() - c0, 1),
                    **figures,
                }
            )
            print(json.dumps({"benchmark": "topocurate_downstream", **runs[-1]}), flush=True)
    # The random selections change with the seed; report their first seed's content.
    selections = {m: selections[m] for m in args.methods}
    names = ["greedy_success", "pass_at_k", "recovery_rate", "calls_per_success"]
    summary = summarise(runs, names)
    table = markdown(summary, selections, args)
    atomic_write_text(out / "results.jsonl", "".join(json.dumps(r) + "\n" for r in runs))
    atomic_write_text(out / "summary.md", table)
    plot(summary, out / "downstream.png", args.pass_k)
    print(
        json.dumps(
            {
                "benchmark": "topocurate_downstream",
                "summary": summary,
                "selections": selections,
                "train_rollouts": rollout_figures,
                "settings": vars(args),
                "versions": versions(),
                "wall_s": round(time.time() - started, 1),
                "cpu_s": round(time.process_time(), 1),
            }
        ),
        flush=True,
    )
    print(table)


if __name__ == "__main__":
    main()
