"""Peak GPU memory and step time of MUZO against inference and backprop, at Qwen3-1.7B size.

MUZO's claim is "fine-tuning in the memory of inference". On a CUDA GPU this builds a randomly
initialised model with Qwen3-1.7B's shape (vocabulary 151936; the shape table of
``rstg_gpu_check.py``) directly on the device and measures, each mode in its own process so one
mode's cached blocks never count against the next: ``torch.cuda.max_memory_allocated`` over
``--steps`` steps on a batch of ``--batch`` x ``--seq`` random tokens, the median step time after
one warm-up step, and how the weights moved.

Modes (``--modes``):

- ``forward``: no-grad forward passes, bf16 weights (the inference reference).
- ``muzo_sgd``: MUZOAdam ``mode="sgd"``, bf16 weights with float32 master copies (the default,
  ``master_weights=True``; the copies cost 4 bytes per parameter).
- ``muzo_adam_bf16`` / ``muzo_adam_int8``: MUZO-Adam with bf16 or bitsandbytes int8 moments.
- ``muzo_sgd_fp32``: float32 weights under bf16 autocast (Lightning's ``bf16-mixed``), no master copy.
- ``adamw_bf16_mixed``: backprop AdamW with float32 weights under bf16 autocast (what a GPU user runs).
- ``lr0``: MUZO-Adam at learning rate 0: every perturbation must be undone exactly, so the bf16
  weights after the steps must equal the initial ones bit for bit (``max_abs_change`` 0).

Random weights say nothing about learning; this measures memory, time and the exact restore.
Without CUDA it exits with a JSON line that says so. Prints one JSON line per mode, then a summary.

    python benchmarks/muzo_gpu_memory.py --steps 4 --batch 8 --seq 512
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ["forward", "muzo_sgd", "muzo_adam_bf16", "muzo_adam_int8", "muzo_sgd_fp32", "adamw_bf16_mixed", "lr0"]


def child(mode: str, steps: int, batch: int, seq: int, queries: int, device: str = "cuda") -> dict:
    from rstg_gpu_check import qwen3_config
    from transformers import AutoModelForCausalLM

    from lightning_agents.optim import MUZOAdam

    cuda = device == "cuda"
    fp32 = mode in ("muzo_sgd_fp32", "adamw_bf16_mixed")
    config = qwen3_config("student")
    if not cuda:  # the CPU smoke run (tests): same code path, a model a thousand times smaller
        config.update(
            dict(
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=32,
                vocab_size=512,
            )
        )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if fp32 else torch.bfloat16)
    model.eval()  # no dropout: the two perturbed evaluations must see the same function
    n_params = sum(p.numel() for p in model.parameters())
    before = [p.detach().clone().cpu() for p in model.parameters()]
    generator = torch.Generator(device).manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device, generator=generator)

    def loss():
        # cache_enabled=False as in Lightning's bf16-mixed: no bf16 copy of the weights is kept
        with torch.autocast(device, dtype=torch.bfloat16, enabled=fp32, cache_enabled=False):
            return model(input_ids=ids, labels=ids, use_cache=False).loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    weights_bytes = torch.cuda.memory_allocated() if cuda else sum(p.numel() * p.element_size() for p in before)
    if mode == "forward":

        def step():
            with torch.no_grad():
                loss()

    elif mode == "adamw_bf16_mixed":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def step():
            opt.zero_grad(set_to_none=True)
            loss().backward()
            opt.step()

    else:
        kind = {
            "muzo_sgd": ("sgd", "float32", 1e-6),
            "muzo_sgd_fp32": ("sgd", "float32", 1e-6),
            "muzo_adam_bf16": ("adam", "bfloat16", 1e-6),
            "muzo_adam_int8": ("adam", "int8", 1e-6),
            "lr0": ("adam", "bfloat16", 0.0),
        }[mode]
        opt = MUZOAdam(model.parameters(), lr=kind[2], num_queries=queries, mode=kind[0], moment_dtype=kind[1], seed=0)

        def step():
            opt.step(loss)

    times = []
    for _ in range(steps + 1):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    changes = [(p.detach().float().cpu() - b.float()).abs() for p, b in zip(model.parameters(), before)]
    # Adam moves a coordinate by about lr per step; the float32 master copies show the true step
    # (a bf16 weight moves by whole ulps). Entries beyond 10 x lr x steps flag a broken update.
    adam = mode.startswith("muzo_adam") or mode == "lr0"
    step_bound = 10 * opt.param_groups[0]["lr"] * (steps + 1) if adam else None
    master_max, beyond = None, None
    if step_bound is not None:
        moved = [
            (opt.state[p]["master"].cpu().view(b.shape) - b.float()).abs()
            for p, b in zip(model.parameters(), before)
            if "master" in opt.state[p]
        ]
        master_max = max(m.max().item() for m in moved) if moved else None
        beyond = sum((m > step_bound).sum().item() for m in moved)
    return {
        "mode": mode,
        "params": n_params,
        "weights_gib": round(weights_bytes / 2**30, 3),
        "peak_gib": round(peak / 2**30, 3),
        "median_step_s": round(statistics.median(times[1:]), 4),
        "max_abs_change": max(c.max().item() for c in changes),
        "changed_fraction": sum((c > 0).sum().item() for c in changes) / n_params,
        "master_max_abs_change": master_max,
        "master_entries_beyond_10_lr_per_step": beyond,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--modes",
        nargs="+",
        default=MODES,
        choices=MODES,
        help="modes to measure, each in a fresh process (default: all; the module docstring says what each runs)",
    )
    ap.add_argument("--steps", type=int, default=4, help="measured steps per mode (after one warm-up step)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per batch")
    ap.add_argument("--seq", type=int, default=512, help="tokens per sequence")
    ap.add_argument("--queries", type=int, default=4, help="MUZO directions per step (2q forward passes)")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)  # internal: measure this one mode here
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: the smoke run of a child
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.batch, args.seq, args.queries, args.device)))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"benchmark": "muzo_gpu_memory", "skipped": "needs a CUDA GPU"}))
        return
    rows = {}
    for mode in args.modes:
        cmd = [sys.executable, __file__, "--child", mode] + [
            f"--{k}={v}" for k, v in vars(args).items() if k in ("steps", "batch", "seq", "queries")
        ]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            rows[mode] = {"mode": mode, "error": out.stderr[-1500:]}
        else:
            rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(rows[mode]), flush=True)
    fwd = rows.get("forward", {}).get("peak_gib")
    import transformers

    print(
        json.dumps(
            {
                "benchmark": "muzo_gpu_memory",
                "device": torch.cuda.get_device_name(),
                "batch": [args.batch, args.seq],
                "queries": args.queries,
                "peak_over_forward": {
                    m: round(r["peak_gib"] / fwd, 3) for m, r in rows.items() if fwd and "peak_gib" in r
                },
                "modes": rows,
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            }
        )
    )


if __name__ == "__main__":
    main()
