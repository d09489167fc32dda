"""Time per MUZO step against 2q forward passes on the same batch (perturbation + update overhead).

A Llama-architecture model (~9M parameters, built from a config) on a batch of 8 x 256 tokens,
fp32, CPU. For q in {1, 2, 4, 8} and both direction distributions it measures the step time, the
time spent inside the closure (the 2q forward passes themselves) and a standalone forward pass
measured right before the step, so machine noise hits the reference and the step alike. Target:
step <= 1.15 x 2q x forward. Prints one JSON line.

    python benchmarks/muzo_speed.py
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
    parser.add_argument("--directions", nargs="+", default=["gaussian", "rademacher"])
    parser.add_argument("--repeats", type=int, default=1, help="measured steps per setting (median)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    config = LlamaConfig(vocab_size=4096, hidden_size=384, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=256,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().eval()
    ids = torch.randint(0, config.vocab_size, (8, 256), generator=torch.Generator().manual_seed(0))
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
    rows = {}
    for direction in args.directions:
        for q in args.queries:
            opt = MUZOAdam(model.parameters(), lr=1e-6, num_queries=q, mode="adam", direction=direction, seed=0)
            steps, closures, forwards = [], [], []
            for _ in range(args.repeats):
                forwards.append(forward_time())
                closure_time[0] = 0.0
                t = time.perf_counter()
                opt.step(loss)
                steps.append(time.perf_counter() - t)
                closures.append(closure_time[0])
            step, inside, fwd = statistics.median(steps), statistics.median(closures), statistics.median(forwards)
            rows[f"{direction}_q{q}"] = {
                "step_s": round(step, 3), "forward_s": round(fwd, 3),
                "step_over_2q_forward": round(step / (2 * q * fwd), 3),
                "overhead_vs_closure": round((step - inside) / inside, 3),
                "meets_1.15": step <= 1.15 * 2 * q * fwd,
            }
    print(json.dumps({"benchmark": "muzo_speed", "params": sum(p.numel() for p in model.parameters()),
                      "batch": [8, 256], "threads": torch.get_num_threads(), "results": rows}))


if __name__ == "__main__":
    main()
