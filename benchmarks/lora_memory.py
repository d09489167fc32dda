"""Peak memory of LoRA SFT vs full SFT on a ~50M-parameter model built from a config, side by side.

A Llama-architecture model (hidden 768, 7 layers, the embedded student's 450-token tokenizer: 49.9M
parameters) is built from a config with random weights and saved to a temporary folder (no download).
Each variant trains ``SFTModule`` under a Lightning Trainer for a few steps on the embedded
arithmetic conversations, in its own process:

- ``full``: every weight trains (AdamW moments for all 49.9M parameters);
- ``lora``: rank-16 LoRA on every linear layer (``all-linear``), the base frozen;
- ``qlora`` (CUDA only, ``--variants full lora qlora``): the same adapters on a base loaded in
  4-bit NF4 through bitsandbytes (``AdapterConfig(qlora=True)``).

On CPU the figure is the peak resident set size of the child above its RSS after imports (the
libraries are not counted); on CUDA it is ``torch.cuda.max_memory_allocated``. Prints one JSON line.

    python benchmarks/lora_memory.py                      # CPU, fp32
    python benchmarks/lora_memory.py --device cuda        # GPU
    python benchmarks/lora_memory.py --device cuda --precision bf16-mixed --variants full lora qlora
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def _rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def build_model(folder: str, hidden: int, layers: int) -> int:
    """Save a random Llama model with the embedded student's tokenizer to ``folder``; returns its size."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_agents.models import resolve_model_path

    student = resolve_model_path("embedded:student")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=450,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(student, name), folder)
    return sum(p.numel() for p in model.parameters())


def child(args) -> None:
    import lightning as L
    import torch

    from lightning_agents import ChatDataModule, SFTModule
    from lightning_agents.adapters import AdapterConfig

    torch.set_num_threads(max(1, os.cpu_count() // 2))
    base_rss = _rss_bytes()
    adapter = (
        AdapterConfig(rank=args.rank, alpha=2 * args.rank, target_modules="all-linear", qlora=args.variant == "qlora")
        if args.variant in ("lora", "qlora")
        else None
    )
    module = SFTModule(model=args.folder, lr=1e-4, adapter=adapter)
    module.configure_model()
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    data = ChatDataModule(
        tokenizer=args.folder,
        embedded_size=args.batch_size * args.steps,
        batch_size=args.batch_size,
        max_length=args.seq_len,
        val=None,
        embedded_styles=["direct", "tool", "program"],
    )
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer = L.Trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        precision=args.precision,
    )
    trainer.fit(module, data)
    seconds = time.perf_counter() - start
    if args.device == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base_rss
    print(
        json.dumps(
            {"variant": args.variant, "trainable_params": trainable, "peak_bytes": peak, "seconds": round(seconds, 1)}
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where to train; the figure is peak RSS on cpu, peak allocated memory on cuda (default: cpu)",
    )
    parser.add_argument(
        "--precision",
        default="32-true",
        help="Lightning Trainer precision, e.g. bf16-mixed on a GPU (default: 32-true)",
    )
    parser.add_argument(
        "--hidden",
        type=int,
        default=768,
        help="hidden size of the built model, a multiple of 64 (one head per 64; MLP 8/3 of it) (default: 768)",
    )
    parser.add_argument("--layers", type=int, default=7, help="decoder layers of the built model (default: 7)")
    parser.add_argument(
        "--rank", type=int, default=16, help="LoRA rank for lora and qlora, alpha twice it (default: 16)"
    )
    parser.add_argument("--batch_size", type=int, default=8, help="conversations per training step (default: 8)")
    parser.add_argument(
        "--seq_len", type=int, default=256, help="most tokens per conversation; longer ones are cut (default: 256)"
    )
    parser.add_argument("--steps", type=int, default=4, help="training steps per variant (default: 4)")
    parser.add_argument(
        "--variants", nargs="+", default=["full", "lora"], choices=["full", "lora", "qlora"], help="what to train"
    )
    parser.add_argument("--variant", choices=["full", "lora", "qlora"], help=argparse.SUPPRESS)  # internal: a child
    parser.add_argument("--folder", help=argparse.SUPPRESS)  # internal: the child's built model
    args = parser.parse_args()
    if args.variant:
        child(args)
        return
    import lightning
    import peft
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as folder:
        total = build_model(folder, args.hidden, args.layers)
        results = {}
        for variant in args.variants:
            cmd = [sys.executable, __file__, "--variant", variant, "--folder", folder] + [
                f"--{k}={v}" for k, v in vars(args).items() if k not in ("variant", "folder", "variants")
            ]
            out = subprocess.run(
                cmd, capture_output=True, text=True, env=dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
            )
            if out.returncode != 0:
                raise SystemExit(out.stderr[-3000:])
            results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    mib = 2**20
    print(
        json.dumps(
            {
                "benchmark": "lora_memory",
                "device": args.device,
                "precision": args.precision,
                "params": total,
                "batch": [args.batch_size, args.seq_len],
                "steps": args.steps,
                "lora_rank": args.rank,
                **{f"{v}_peak_mib": round(r["peak_bytes"] / mib, 1) for v, r in results.items()},
                **{
                    f"{v}_over_full": round(r["peak_bytes"] / results["full"]["peak_bytes"], 3)
                    for v, r in results.items()
                    if v != "full" and "full" in results
                },
                "trainable": {v: r["trainable_params"] for v, r in results.items()},
                "seconds": {v: r["seconds"] for v, r in results.items()},
                "versions": {
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "peft": peft.__version__,
                    "lightning": lightning.__version__,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
