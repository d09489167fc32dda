"""Peak memory of zeroth-order vs backprop fine-tuning, each mode in its own process.

A Llama-architecture model of ~63M parameters is built from a config (no download), batch 8 x 256
tokens, fp32, CPU. Modes: (a) no-grad forward only, (b) MUZO sgd, (c) MUZO-Adam fp32 moments,
(d) MUZO-Adam int8 moments (bitsandbytes blockwise), (d') MUZO-Adam bf16 moments, (e) AdamW with
backprop. Memory is the peak resident set size of the child process above its RSS after imports
(so the Python/torch/bitsandbytes libraries are not counted); every child runs with the same glibc setting
``MALLOC_MMAP_THRESHOLD_`` so freed chunk buffers are returned to the OS rather than kept as heap
fragments. Prints one JSON line with the figures and the targets of the issue.

    python benchmarks/muzo_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

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


def child(mode: str, steps: int) -> dict:
    # bitsandbytes is imported by every mode before the baseline is taken: its native library adds
    # ~100 MiB of resident code, which is not training memory and must not count against int8 only.
    import bitsandbytes.functional  # noqa: F401
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_agents.optim import MUZOAdam

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    baseline = _rss_bytes()
    config = LlamaConfig(
        vocab_size=8192, hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
        num_key_value_heads=12, max_position_embeddings=256, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float()
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (8, 256), generator=torch.Generator().manual_seed(0))

    def loss():
        return model(input_ids=ids, labels=ids, use_cache=False).loss

    start = time.perf_counter()
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
        kind = {"b_muzo_sgd": ("sgd", "float32"), "c_muzo_adam_fp32": ("adam", "float32"),
                "d_muzo_adam_int8": ("adam", "int8"), "d_muzo_adam_bf16": ("adam", "bfloat16")}[mode]
        opt = MUZOAdam(model.parameters(), lr=1e-5, num_queries=1, mode=kind[0], moment_dtype=kind[1], seed=0)
        for _ in range(steps):
            opt.step(loss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"mode": mode, "params": n_params, "weight_bytes": weight_bytes, "peak_above_imports": peak - baseline,
            "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    rows = {}
    for mode in MODES:
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(args.steps)],
                             capture_output=True, text=True, env=env, check=True)
        rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    mib = lambda b: round(b / 2**20, 1)  # noqa: E731
    w = rows["a_forward"]["weight_bytes"]
    a = rows["a_forward"]["peak_above_imports"]
    peak = {m: r["peak_above_imports"] for m, r in rows.items()}
    result = {
        "benchmark": "muzo_memory",
        "params": rows["a_forward"]["params"],
        "weight_MiB": mib(w),
        "batch": [8, 256],
        "peak_MiB": {m: mib(p) for m, p in peak.items()},
        "b_over_a": round(peak["b_muzo_sgd"] / a, 3),
        "c_minus_a_over_weights": round((peak["c_muzo_adam_fp32"] - a) / w, 3),
        "d_int8_minus_a_over_weights": round((peak["d_muzo_adam_int8"] - a) / w, 3),
        "d_bf16_minus_a_over_weights": round((peak["d_muzo_adam_bf16"] - a) / w, 3),
        "e_over_b": round(peak["e_adamw_backprop"] / peak["b_muzo_sgd"], 2),
        "targets": {"b_over_a<=1.10": peak["b_muzo_sgd"] / a <= 1.10,
                    "c<=a+2.1W": peak["c_muzo_adam_fp32"] <= a + 2.1 * w,
                    "d(int8)<=a+0.6W": peak["d_muzo_adam_int8"] <= a + 0.6 * w},
        "seconds": {m: round(r["seconds"], 1) for m, r in rows.items()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
