"""Time per MUZO step against 2q forward passes on the same batch (perturbation + update overhead).

A Llama-architecture model (~9M parameters, built from a config) on a batch of 8 x 256 tokens,
fp32, CPU. For q in {1, 2, 4, 8} (Gaussian directions by default) it measures the step time, the
time spent inside the closure (the 2q forward passes themselves) and a standalone forward pass
measured right before the step, so machine noise hits the reference and the step alike. Repeats
are interleaved (repeat 1 of every q, then repeat 2, ...) and summarised by their median, so a
burst of load on the shared machine hits every setting alike. Target: step <= 1.15 x 2q x forward.
Prints one JSON line.

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
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--directions", nargs="+", default=["gaussian"])
    parser.add_argument("--repeats", type=int, default=3, help="measured steps per setting (median)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence (batch of 8)")
    parser.add_argument("--chunk-size", type=int, default=None, help="MUZOAdam chunk_size (default: per device)")
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
    closure_time = [0.0]

    def loss():
        t = time.perf_counter()
        out = model(input_ids=ids, labels=ids, use_cache=False).loss
        closure_time[0] += time.perf_counter() - t
        return out

    def forward_time() -> float:
        with torch.no_grad():
            t = time.perf_counter()
            model(input_ids=ids, labels=ids, use_cache=False)
            return time.perf_counter() - t

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
        )
        for key in settings
    }
    samples: dict[tuple, dict[str, list[float]]] = {key: {"step": [], "closure": [], "forward": []} for key in settings}
    for _ in range(args.repeats):
        for key in settings:  # interleaved repeats
            samples[key]["forward"].append(forward_time())
            closure_time[0] = 0.0
            t = time.perf_counter()
            opts[key].step(loss)
            samples[key]["step"].append(time.perf_counter() - t)
            samples[key]["closure"].append(closure_time[0])
    rows = {}
    for (direction, q), got in samples.items():
        step, inside, fwd = (statistics.median(got[k]) for k in ("step", "closure", "forward"))
        overheads = [(s_ - c) / c for s_, c in zip(got["step"], got["closure"])]
        rows[f"{direction}_q{q}"] = {
            "step_s": round(step, 3),
            "forward_s": round(fwd, 3),
            "step_over_2q_forward": round(step / (2 * q * fwd), 3),
            "overhead_vs_closure": round(statistics.median(overheads), 3),
            "overhead_range": [round(min(overheads), 3), round(max(overheads), 3)],
            "meets_1.15": step <= 1.15 * 2 * q * fwd,
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
                "torch": torch.__version__,
                "results": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
