"""Peak memory of zeroth-order vs backprop fine-tuning, each mode in its own process.

A Llama-architecture model of ~63M parameters is built from a config (no download), batch 8 x 256
tokens, fp32, CPU. Modes: (a) no-grad forward only, (b) MUZO sgd, (c) MUZO-Adam fp32 moments,
(d) MUZO-Adam int8 moments (bitsandbytes blockwise), (d') MUZO-Adam bf16 moments, (e) AdamW with
backprop. Memory is the peak resident set size of the child process above its RSS after imports
(so the Python/torch/bitsandbytes libraries are not counted).

The headline figure, MUZO-SGD peak / forward peak, is measured as ``--pairs`` interleaved process
pairs (forward child, MUZO child) in the environment a user has (glibc's default malloc), reported
as median and range; run-to-run spread of the forward alone is large on a shared machine. Beside
it the same pairs with ``MALLOC_MMAP_THRESHOLD_=1048576`` (freed large blocks go back to the OS
instead of staying in the heap), with that setting's cost in MUZO step time. The other modes run
once each in the plain environment. Prints one JSON line.

    OMP_NUM_THREADS=1 python benchmarks/muzo_memory.py --pairs 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MODES = {
    "a_forward": "no-grad forward only",
    "b_muzo_sgd": "MUZO sgd",
    "c_muzo_adam_fp32": "MUZO-Adam, float32 moments",
    "d_muzo_adam_int8": "MUZO-Adam, int8 moments",
    "d_muzo_adam_bf16": "MUZO-Adam, bfloat16 moments",
    "e_adamw_backprop": "AdamW with backprop",
}


def _rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


SIZES = {
    # name: (vocab, hidden, mlp, layers, heads, batch, sequence)
    "full": (8192, 768, 2048, 8, 12, 8, 256),
    "small": (4096, 384, 1024, 4, 6, 8, 128),
}


def child(mode: str, steps: int, size: str = "full") -> dict:
    # bitsandbytes is imported by every mode before the baseline is taken: its native library adds
    # ~100 MiB of resident code, which is not training memory and must not count against int8 only.
    import bitsandbytes.functional  # noqa: F401
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_agents.optim import MUZOAdam

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    baseline = _rss_bytes()
    vocab, hidden, mlp, layers, heads, batch, seq = SIZES[size]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=seq,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float()
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))

    def loss():
        return model(input_ids=ids, labels=ids, use_cache=False).loss

    start, usage_start = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    if mode == "a_forward":
        with torch.no_grad():
            for _ in range(2 * steps):
                loss()
    elif mode == "e_adamw_backprop":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for _ in range(steps):
            opt.zero_grad(set_to_none=False)
            loss().backward()
            opt.step()
    else:
        kind = {
            "b_muzo_sgd": ("sgd", "float32"),
            "c_muzo_adam_fp32": ("adam", "float32"),
            "d_muzo_adam_int8": ("adam", "int8"),
            "d_muzo_adam_bf16": ("adam", "bfloat16"),
        }[mode]
        opt = MUZOAdam(model.parameters(), lr=1e-5, num_queries=1, mode=kind[0], moment_dtype=kind[1], seed=0)
        for _ in range(steps):
            opt.step(loss)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss * 1024
    return {
        "mode": mode,
        "params": n_params,
        "weight_bytes": weight_bytes,
        "peak_above_imports": peak - baseline,
        "seconds": seconds,
        # CPU time of this process (user + system): unlike wall time it does not count waiting for a
        # core on a shared machine; system time is where page faults of freshly mapped memory show.
        "cpu_seconds": usage.ru_utime + usage.ru_stime - usage_start.ru_utime - usage_start.ru_stime,
        "sys_seconds": usage.ru_stime - usage_start.ru_stime,
        "minor_faults": usage.ru_minflt - usage_start.ru_minflt,
    }


def _child(mode: str, steps: int, env: dict, size: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--steps", str(steps), "--size", size],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(values: list[float], digits: int = 3) -> dict:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "all": [round(v, digits) for v in values],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)  # internal: run one mode here
    parser.add_argument(
        "--steps",
        type=int,
        default=2,
        help="training steps per child; the forward mode runs twice as many passes, as one MUZO step "
        "(q=1) does (default: 2)",
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="full",
        help="full: 63M parameters, batch 8 x 256; small: 9M parameters, batch 8 x 128",
    )
    parser.add_argument(
        "--pairs", type=int, default=5, help="interleaved (forward, MUZO-SGD) process pairs per environment"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="children run at once (peak RSS is per process; step times then share the CPUs)",
    )
    parser.add_argument("--skip-other-modes", action="store_true", help="only the forward / MUZO-SGD pairs")
    parser.add_argument("--log", default=None, help="append each child's JSON line here as it finishes")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.size)))
        return
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    envs = {
        "plain": {k: v for k, v in {**os.environ, "OMP_NUM_THREADS": threads}.items() if not k.startswith("MALLOC_")},
        "malloc_tuned": {**os.environ, "OMP_NUM_THREADS": threads, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
    }
    # Interleaved, so machine load hits both environments alike: per pair, the forward child of each
    # environment, then the MUZO child of each (with --jobs 2 the two environments run side by side).
    tasks = [(i, name, mode) for i in range(args.pairs) for mode in ("a_forward", "b_muzo_sgd") for name in envs]

    def run_task(task):
        i, name, mode = task
        out = _child(mode, args.steps, envs[name], args.size)
        if args.log:
            with open(args.log, "a") as handle:
                handle.write(json.dumps({"pair": i, "env": name, **out}) + "\n")
        return out

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = dict(zip(tasks, pool.map(run_task, tasks)))
    pairs: dict[str, list[tuple[dict, dict]]] = {
        name: [(done[(i, name, "a_forward")], done[(i, name, "b_muzo_sgd")]) for i in range(args.pairs)]
        for name in envs
    }
    mib = lambda b: round(b / 2**20, 1)  # noqa: E731
    first = pairs["plain"][0][0]
    w = first["weight_bytes"]
    result = {
        "benchmark": "muzo_memory",
        "size": args.size,
        "params": first["params"],
        "weight_MiB": mib(w),
        "batch": list(SIZES[args.size][5:]),
        "steps": args.steps,
        "pairs": args.pairs,
        "threads": int(threads),
    }
    for name, rows in pairs.items():
        result[name] = {
            "b_over_a": _summary([b["peak_above_imports"] / a["peak_above_imports"] for a, b in rows]),
            "a_forward_MiB": _summary([a["peak_above_imports"] / 2**20 for a, _ in rows], 1),
            "b_muzo_sgd_MiB": _summary([b["peak_above_imports"] / 2**20 for _, b in rows], 1),
            "b_seconds_per_step": _summary([b["seconds"] / args.steps for _, b in rows], 2),
            "b_cpu_seconds_per_step": _summary([b["cpu_seconds"] / args.steps for _, b in rows], 2),
            "b_sys_seconds_per_step": _summary([b["sys_seconds"] / args.steps for _, b in rows], 2),
            "b_minor_faults_per_step": _summary([b["minor_faults"] / args.steps for _, b in rows], 0),
            "a_cpu_seconds_per_forward": _summary([a["cpu_seconds"] / (2 * args.steps) for a, _ in rows], 2),
        }
    result["malloc_tuned_step_time_cost"] = round(
        result["malloc_tuned"]["b_seconds_per_step"]["median"] / result["plain"]["b_seconds_per_step"]["median"] - 1, 3
    )
    # The same ratio on CPU time (user + system), which waiting for a core does not inflate.
    result["malloc_tuned_step_cpu_cost"] = round(
        result["malloc_tuned"]["b_cpu_seconds_per_step"]["median"] / result["plain"]["b_cpu_seconds_per_step"]["median"]
        - 1,
        3,
    )
    # Per pair (the environments alternate, so pair i of each ran back to back): paired ratios.
    result["malloc_tuned_step_cpu_cost_per_pair"] = _summary(
        [
            tuned[1]["cpu_seconds"] / plain[1]["cpu_seconds"] - 1
            for plain, tuned in zip(pairs["plain"], pairs["malloc_tuned"])
        ]
    )
    if not args.skip_other_modes:
        a = statistics.median(r[0]["peak_above_imports"] for r in pairs["plain"])
        others = {
            m: _child(m, args.steps, envs["plain"], args.size)
            for m in ("c_muzo_adam_fp32", "d_muzo_adam_int8", "d_muzo_adam_bf16", "e_adamw_backprop")
        }
        peak = {m: r["peak_above_imports"] for m, r in others.items()}
        b = statistics.median(r[1]["peak_above_imports"] for r in pairs["plain"])
        result["other_modes_plain"] = {
            "peak_MiB": {m: mib(p) for m, p in peak.items()},
            "c_minus_a_over_weights": round((peak["c_muzo_adam_fp32"] - a) / w, 3),
            "d_int8_minus_a_over_weights": round((peak["d_muzo_adam_int8"] - a) / w, 3),
            "d_bf16_minus_a_over_weights": round((peak["d_muzo_adam_bf16"] - a) / w, 3),
            "e_over_b": round(peak["e_adamw_backprop"] / b, 2),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
