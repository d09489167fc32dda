"""TopoCurate at scale: synthetic tool-use rollouts of ~20 steps, 1k / 10k / 100k trajectories.

For each size, fresh subprocesses write a synthetic rollout file (OpenAI/tau-bench JSON Lines,
8 trials per task), then time, end to end, ``load_rollouts`` -> per-task quotient graphs and
metrics -> SFT and RL selections (``curate_rollouts``), and report their peak RSS. Three
variants: ``in_process``, what ``TopoCurateDataModule`` and ``lightning-agents curate`` run by
default (``keep_graphs=False``: each task's graph is dropped once analysed); ``workers_2``, the
same with ``workers=2`` (graphs built in two forked processes, both cores of this CPU, where
each gets at least 256 tasks, so in process at 1k); and ``keep_graphs``, which keeps all graphs
in the result. The baseline, measured in the same run on the same file, is reading alone
(``load_rollouts``): the curation cost is what the end-to-end time adds to it. Each variant runs
``--repeats`` times, each in its own process, and the fastest run counts (as ``timeit`` does:
on a shared machine slower runs measure the other load, not the code); all times are reported.
A run also reports the full garbage collection it leaves for later (``deferred_gc_s``: the
objects made while collection was paused are scanned once by the next full collection).

Steps are the agent-side steps curation analyses (calls, observations, the agent's messages; user
messages are context and not counted since issue 15, so the same file counts ~20% fewer steps).

Prints one JSON line: per size the trajectories, steps, seconds (read, end to end), steps/s and
peak MiB, plus the growth of end-to-end time per 10x of input relative to linear (1.0 = linear)
and whether the targets hold (>= 50k steps/s, growth <= 1.2), per variant.

    nice -n 10 python benchmarks/topocurate_scale.py [--sizes 1000 10000 100000] [--repeats 2] [--variants ...]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRIALS_PER_TASK = 8
TARGET_STEPS_PER_S = 50_000
TARGET_GROWTH = 1.2

_READ_TOOLS = ["get_user_details", "get_reservation_details", "search_direct_flight"]
_USER_LINES = ["I want to change my flight.", "Yes, please proceed.", "Could you check the price?", "No, thanks."]


def synthetic_trajectory(rng: random.Random, task: int) -> tuple[list[dict], float]:
    """One ~20-step trajectory: user turns, reads, a write that may fail and be retried, an answer.

    Trials of a task draw from a task-specific set of arguments, so they share prefixes and
    branch, and some retry a failed write, like real tau-bench trials do.
    """
    traj = [{"role": "user", "content": _USER_LINES[0]}]
    calls = 0

    def call(name: str, arguments: dict, result: str) -> None:
        nonlocal calls
        call_id = f"call_{calls}"
        calls += 1
        traj.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                ],
            }
        )
        traj.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result})

    for _ in range(rng.randint(3, 5)):
        tool = rng.choice(_READ_TOOLS)
        key = rng.randint(0, 2)
        call(tool, {"id": f"t{task}_{key}"}, json.dumps({"id": key, "task": task, "value": key * 7}))
        if rng.random() < 0.4:
            traj.append({"role": "assistant", "content": "Could you confirm the details?"})
            traj.append({"role": "user", "content": rng.choice(_USER_LINES[1:])})
    success = rng.random() < 0.5
    if rng.random() < 0.3:
        call(
            "update_reservation",
            {"id": f"t{task}", "amount": rng.randint(1, 3)},
            "Error: payment amount does not add up",
        )
    call(
        "update_reservation",
        {"id": f"t{task}", "amount": 0 if success else rng.randint(1, 3)},
        json.dumps({"status": "ok"}),
    )
    traj.append({"role": "assistant", "content": "Your reservation is updated. Anything else?"})
    traj.append({"role": "user", "content": "That's all, thanks."})
    return traj, float(success)


def write_synthetic(path: Path, trajectories: int, seed: int = 0) -> None:
    """Write ``trajectories`` rollouts (8 trials per task) as JSON Lines."""
    rng = random.Random(seed)
    with path.open("w") as handle:
        for index in range(trajectories):
            task, trial = divmod(index, TRIALS_PER_TASK)
            traj, reward = synthetic_trajectory(rng, task)
            handle.write(
                json.dumps({"task_id": task, "trial": trial, "reward": reward, "info": {}, "traj": traj}) + "\n"
            )


# name -> (keep_graphs, workers): what the DataModule and `curate` run by default, the same with
# two forked workers (both cores of this CPU), and every graph kept in the result.
VARIANTS = {"in_process": (False, 0), "workers_2": (False, 2), "keep_graphs": (True, 0)}


def measure(trajectories: int, keep_graphs: bool, workers: int) -> dict:
    """Run in a subprocess: write the file, time reading and the full pipeline, report peak RSS."""
    import gc

    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.topology.pipeline import curate_rollouts

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rollouts.jsonl"
        write_synthetic(path, trajectories)
        start, cpu = time.perf_counter(), time.process_time()
        rollouts = load_rollouts(path)
        read_s, read_cpu_s = time.perf_counter() - start, time.process_time() - cpu
        del rollouts
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        result = curate_rollouts(load_rollouts(path), keep_graphs=keep_graphs, workers=workers)
        total_s, total_cpu_s = time.perf_counter() - start, time.process_time() - cpu
        start = time.perf_counter()
        gc.collect()
        deferred_gc_s = time.perf_counter() - start
    steps = result.steps
    return {
        "trajectories": trajectories,
        "tasks": len(result.analyses),
        "steps": steps,
        "read_s": round(read_s, 3),
        "end_to_end_s": round(total_s, 3),
        # CPU time of this process (workers not included): on a shared machine it moves far less
        # with the other load than wall time does.
        "read_cpu_s": round(read_cpu_s, 3),
        "end_to_end_cpu_s": round(total_cpu_s, 3),
        "steps_per_s": round(steps / total_s),
        "read_steps_per_s": round(steps / read_s),
        "deferred_gc_s": round(deferred_gc_s, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # The largest worker's peak; forked workers share the parent's pages until they write them.
        "worker_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
        if workers > 1
        else None,
        "sft_selected": len(result.sft),
        "rl_selected": len(result.rl),
    }


def fastest(size: int, variant: str, repeats: int) -> dict:
    """The fastest of ``repeats`` runs, each in a fresh process, with every run's time listed."""
    keep_graphs, workers = VARIANTS[variant]
    runs = []
    for _ in range(repeats):
        command = [sys.executable, __file__, "--one", str(size), "--workers", str(workers)] + (
            ["--keep-graphs"] if keep_graphs else []
        )
        proc = subprocess.run(command, capture_output=True, text=True, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["end_to_end_s"])
    return dict(best, all_end_to_end_s=[r["end_to_end_s"] for r in runs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="numbers of trajectories")
    parser.add_argument("--repeats", type=int, default=2, help="runs per size and variant; the fastest counts")
    parser.add_argument(
        "--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS), help="what to measure"
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size
    parser.add_argument("--keep-graphs", action="store_true", help=argparse.SUPPRESS)  # internal, with --one
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)  # internal, with --one
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.keep_graphs, args.workers)))
        return
    figures: dict = {"benchmark": "topocurate_scale", "trials_per_task": TRIALS_PER_TASK, "repeats": args.repeats}
    for variant in args.variants:
        runs = [fastest(size, variant, args.repeats) for size in args.sizes]
        growth = [
            round((b["end_to_end_s"] / a["end_to_end_s"]) / (b["trajectories"] / a["trajectories"]), 3)
            for a, b in zip(runs, runs[1:])
        ]
        figures[variant] = {
            "runs": runs,
            "steps_per_s": [r["steps_per_s"] for r in runs],
            "growth_vs_linear_per_step_up": growth,
            "curation_overhead_vs_read": [round(r["end_to_end_s"] / r["read_s"], 2) for r in runs],
            "meets_throughput": min(r["steps_per_s"] for r in runs) >= TARGET_STEPS_PER_S,
            "meets_growth": all(g <= TARGET_GROWTH for g in growth),
        }
    figures.update(target_steps_per_s=TARGET_STEPS_PER_S, target_growth=TARGET_GROWTH)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
