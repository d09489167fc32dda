"""Time per MUZO step against 2q forward passes on the same batch (perturbation + update overhead).

A Llama-architecture model (~9M parameters, built from a config) on a batch of 8 x 256 tokens,
fp32, CPU. For q in {1, 2, 4, 8} (Gaussian directions by default) it measures the step time, the
time spent inside the closure (the 2q forward passes themselves) and a standalone forward pass
measured right before the step, so machine noise hits the reference and the step alike. Repeats
are interleaved (repeat 1 of every q, then repeat 2, ...) and summarised by their median, so a
burst of load on the shared machine hits every setting alike. Every time is taken twice: wall
clock, and the process's CPU time (``time.process_time``), which does not count the time spent
waiting for a core, so with one thread the CPU-time ratios stay meaningful on a loaded machine.
Target: step <= 1.15 x 2q x forward. Prints one JSON line.

    OMP_NUM_THREADS=1 python benchmarks/muzo_speed.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lightning_agents.optim import MUZOAdam


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--queries",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8],
        help="q values to time, each step 2q forward passes (default: 1 2 4 8)",
    )
    parser.add_argument(
        "--directions",
        nargs="+",
        default=["gaussian"],
        help="MUZOAdam direction kinds to time, each with every q, e.g. gaussian rademacher (default: gaussian)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="measured steps per setting (median)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence (batch of 8)")
    parser.add_argument("--chunk-size", type=int, default=None, help="MUZOAdam chunk_size (default: per device)")
    parser.add_argument(
        "--update-path", choices=("auto", "chunked", "fused"), default="auto", help="MUZOAdam update_path"
    )
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    config = LlamaConfig(
        vocab_size=4096,
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=6,
        max_position_embeddings=max(args.seq, 256),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().eval()
    ids = torch.randint(0, config.vocab_size, (8, args.seq), generator=torch.Generator().manual_seed(0))
    closure_time = [0.0, 0.0]  # wall, CPU

    def loss():
        t, c = time.perf_counter(), time.process_time()
        out = model(input_ids=ids, labels=ids, use_cache=False).loss
        closure_time[0] += time.perf_counter() - t
        closure_time[1] += time.process_time() - c
        return out

    def forward_time() -> tuple[float, float]:
        with torch.no_grad():
            t, c = time.perf_counter(), time.process_time()
            model(input_ids=ids, labels=ids, use_cache=False)
            return time.perf_counter() - t, time.process_time() - c

    forward_time()  # warm-up (allocator, kernels)
    settings = [(direction, q) for direction in args.directions for q in args.queries]
    opts = {
        key: MUZOAdam(
            model.parameters(),
            lr=1e-6,
            num_queries=key[1],
            mode="adam",
            direction=key[0],
            seed=0,
            chunk_size=args.chunk_size,
            update_path=args.update_path,
        )
        for key in settings
    }
    kinds = ("step", "closure", "forward", "step_cpu", "closure_cpu", "forward_cpu")
    samples: dict[tuple, dict[str, list[float]]] = {key: {k: [] for k in kinds} for key in settings}
    for _ in range(args.repeats):
        for key in settings:  # interleaved repeats
            wall, cpu = forward_time()
            samples[key]["forward"].append(wall)
            samples[key]["forward_cpu"].append(cpu)
            closure_time[:] = [0.0, 0.0]
            t, c = time.perf_counter(), time.process_time()
            opts[key].step(loss)
            samples[key]["step"].append(time.perf_counter() - t)
            samples[key]["step_cpu"].append(time.process_time() - c)
            samples[key]["closure"].append(closure_time[0])
            samples[key]["closure_cpu"].append(closure_time[1])
    rows = {}
    for (direction, q), got in samples.items():
        step, inside, fwd, step_cpu, _, fwd_cpu = (statistics.median(got[k]) for k in kinds)
        overheads = [(s_ - c) / c for s_, c in zip(got["step"], got["closure"])]
        overheads_cpu = [(s_ - c) / c for s_, c in zip(got["step_cpu"], got["closure_cpu"])]
        ratios_cpu = [s_ / (2 * q * f) for s_, f in zip(got["step_cpu"], got["forward_cpu"])]
        rows[f"{direction}_q{q}"] = {
            "step_s": round(step, 3),
            "forward_s": round(fwd, 3),
            "step_over_2q_forward": round(step / (2 * q * fwd), 3),
            "overhead_vs_closure": round(statistics.median(overheads), 3),
            "overhead_range": [round(min(overheads), 3), round(max(overheads), 3)],
            "meets_1.15": step <= 1.15 * 2 * q * fwd,
            "cpu_step_s": round(step_cpu, 3),
            "cpu_forward_s": round(fwd_cpu, 3),
            "cpu_step_over_2q_forward": round(statistics.median(ratios_cpu), 3),
            "cpu_step_over_2q_forward_range": [round(min(ratios_cpu), 3), round(max(ratios_cpu), 3)],
            "cpu_overhead_vs_closure": round(statistics.median(overheads_cpu), 3),
            "cpu_overhead_range": [round(min(overheads_cpu), 3), round(max(overheads_cpu), 3)],
            "cpu_meets_1.15": statistics.median(ratios_cpu) <= 1.15,
        }
    print(
        json.dumps(
            {
                "benchmark": "muzo_speed",
                "params": sum(p.numel() for p in model.parameters()),
                "batch": [8, args.seq],
                "threads": torch.get_num_threads(),
                "repeats": args.repeats,
                "chunk_size": next(iter(opts.values())).chunk_size,
                "update_path": next(iter(opts.values())).update_path,
                "torch": torch.__version__,
                "results": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
