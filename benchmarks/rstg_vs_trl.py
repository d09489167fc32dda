"""Training throughput and memory: RSTGModule (GRPO mode) vs TRL's GRPOTrainer, same setup.

Same tiny model (embedded student), same prompts (embedded arithmetic train split), G=8, the same
completion length, token-mean loss (TRL ``loss_type="dapo"``, ours ``loss_aggregation=token_mean``),
no KL, one update per generation batch, gradient checkpointing on for both or off for both
(``--gradient_checkpointing``). Each run is its own subprocess; the sides are interleaved
(RSTG, TRL, TRL, RSTG, ...) for ``--repeats`` rounds so drifting machine load hits both alike, and
the medians are reported. Per run: wall seconds and CPU seconds of the timed steps (one warm-up
step excluded), tokens, and memory above imports (peak RSS minus the RSS once both libraries are
imported, so import size does not count). Needs ``trl`` (``pip install 'lightning-agents[bench]'``).

    OMP_NUM_THREADS=1 python benchmarks/rstg_vs_trl.py --steps 8 --repeats 5 --gradient_checkpointing
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _rstg(args):
    import lightning as L
    import torch

    from lightning_agents.datamodules.prompts import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule

    torch.manual_seed(0)
    module = RSTGModule(
        guidance=False,
        teacher=None,
        num_generations=args.g,
        max_new_tokens=args.length,
        micro_batch_size=args.prompts * args.g,
        lr=1e-5,
        loss_aggregation="token_mean",
        eps_high=0.28,
        log_samples_every_n_steps=0,
        max_grad_norm=1.0,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    dm = PromptDataModule(val=None, train_size=(args.steps + 1) * args.prompts, batch_size=args.prompts, shuffle=False)
    tokens = []

    class Count(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            m = trainer.callback_metrics
            tokens.append(float(m["train/completion_length"]) * args.prompts * args.g)

    # One warm-up step outside the timing, as for TRL.
    L.Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    ).fit(module, dm)
    tokens.clear()
    trainer = L.Trainer(
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[Count()],
        limit_val_batches=0,
    )
    start, cpu = time.perf_counter(), time.process_time()
    trainer.fit(module, dm)
    return sum(tokens), time.perf_counter() - start, time.process_time() - cpu


def _trl(args):
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lightning_agents.datamodules.prompts import read_prompt_records
    from lightning_agents.models import load_model_and_tokenizer
    from lightning_agents.rewards import ArithmeticVerifier

    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer("embedded:student")
    recs = read_prompt_records("embedded:arithmetic/train", size=(args.steps + 1) * args.prompts)
    ds = Dataset.from_list([{"prompt": r["prompt"], "reference": r["reference"]} for r in recs])
    verifier = ArithmeticVerifier()
    tokens = []

    def reward(prompts, completions, reference, **kw):
        ids = kw.get("completion_ids")
        tokens.append(sum(len(x) for x in ids) if ids is not None else 0)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [verifier(t, r) for t, r in zip(texts, reference)]

    times, cpus = [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            times.append(time.perf_counter())
            cpus.append(time.process_time())

        def on_train_end(self, a, state, control, **kw):
            times.append(time.perf_counter())
            cpus.append(time.process_time())

    cfg = GRPOConfig(
        output_dir="/tmp/trl-bench",
        per_device_train_batch_size=args.prompts * args.g,
        num_generations=args.g,
        max_completion_length=args.length,
        max_steps=args.steps + 1,
        learning_rate=1e-5,
        loss_type="dapo",
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        temperature=1.0,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_grad_norm=1.0,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    trainer = GRPOTrainer(
        model=model, processing_class=tok, reward_funcs=[reward], args=cfg, train_dataset=ds, callbacks=[Timer()]
    )
    trainer.train()
    # Drop the first (warm-up) step from both the tokens and the time.
    return sum(tokens[1:]), times[-1] - times[1], cpus[-1] - cpus[1]


def _run_side(args) -> None:
    import torch

    torch.set_num_threads(1)
    # Both libraries imported before the baseline, whichever side runs: memory above imports.
    import lightning  # noqa: F401
    import trl  # noqa: F401

    import lightning_agents.modules.rstg  # noqa: F401

    base = _rss_mb()
    toks, secs, cpu = (_rstg if args.side == "rstg" else _trl)(args)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        "RESULT "
        + json.dumps(
            {
                "tokens": toks,
                "seconds": secs,
                "cpu_seconds": cpu,
                "rss_after_imports_mb": base,
                "peak_rss_mb": peak_mb,
                "memory_above_imports_mb": peak_mb - base,
            }
        )
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps", type=int, default=8, help="timed optimizer steps per run, after one warm-up step (default: 8)"
    )
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step (default: 8)")
    ap.add_argument("--g", type=int, default=8, help="completions per prompt, the group size G (default: 8)")
    ap.add_argument("--length", type=int, default=32, help="most tokens per completion (default: 32)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds (RSTG and TRL once each)")
    ap.add_argument("--gradient_checkpointing", action="store_true", help="on for both sides")
    ap.add_argument(
        "--side",
        choices=["rstg", "trl"],
        default=None,
        help="run one side once in this process and print its RESULT line (what each interleaved run is); "
        "default: the whole comparison",
    )
    args = ap.parse_args()
    if importlib.util.find_spec("trl") is None:
        # both sides import trl (the memory baseline counts both libraries) and the report names its
        # version: without it every run would fail, after minutes of work
        ap.exit(2, "needs trl: pip install 'lightning-agents[bench]'\n")
    if args.side:
        _run_side(args)
        return
    runs: dict[str, list[dict]] = {"rstg": [], "trl": []}
    for r in range(args.repeats):
        for side in ("rstg", "trl") if r % 2 == 0 else ("trl", "rstg"):
            cmd = [
                sys.executable,
                __file__,
                "--side",
                side,
                "--steps",
                str(args.steps),
                "--prompts",
                str(args.prompts),
                "--g",
                str(args.g),
                "--length",
                str(args.length),
            ]
            if args.gradient_checkpointing:
                cmd.append("--gradient_checkpointing")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                runs[side].append({"error": proc.stderr[-1500:]})
                continue
            res = json.loads(line[-1][7:])
            res["tokens_per_s"] = res["tokens"] / res["seconds"]
            res["tokens_per_cpu_s"] = res["tokens"] / res["cpu_seconds"]
            runs[side].append(res)
    import importlib.metadata as md

    out = {
        "benchmark": "rstg_vs_trl",
        "steps": args.steps,
        "prompts_per_step": args.prompts,
        "G": args.g,
        "max_completion_length": args.length,
        "repeats": args.repeats,
        "gradient_checkpointing": args.gradient_checkpointing,
        "versions": {p: md.version(p) for p in ("torch", "transformers", "trl", "lightning")},
        "runs": runs,
    }
    ok = {s: [r for r in v if "error" not in r] for s, v in runs.items()}
    if ok["rstg"] and ok["trl"]:

        def med(side, key):
            return statistics.median(r[key] for r in ok[side])

        out["median"] = {
            s: {k: med(s, k) for k in ("tokens_per_s", "tokens_per_cpu_s", "memory_above_imports_mb")} for s in ok
        }
        out["wall_throughput_ratio"] = med("rstg", "tokens_per_s") / med("trl", "tokens_per_s")
        out["cpu_throughput_ratio"] = med("rstg", "tokens_per_cpu_s") / med("trl", "tokens_per_cpu_s")
        out["memory_above_imports_ratio"] = med("rstg", "memory_above_imports_mb") / med(
            "trl", "memory_above_imports_mb"
        )
        pairs = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ok["rstg"], ok["trl"])]
        out["wall_ratio_range"] = [min(pairs), max(pairs)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
