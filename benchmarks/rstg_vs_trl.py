"""Training throughput and peak memory: RSTGModule (GRPO mode) vs TRL's GRPOTrainer, same setup.

Same tiny model (embedded student), same prompts (embedded arithmetic train split), G=8, the same
completion length, token-mean loss (TRL ``loss_type="dapo"``, ours ``loss_aggregation=token_mean``),
no KL, one update per generation batch. Each side runs in its own subprocess so peak RSS is its own.
Throughput = completion tokens / wall time of the training steps (generation included).
TRL is not a dependency: run this with an interpreter that has it, e.g. ``/work/venv-trl/bin/python``.

    nice -n 10 /work/venv-trl/bin/python benchmarks/rstg_vs_trl.py --steps 8
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _rstg(args):
    import lightning as L
    import torch

    from lightning_agents.datamodules.prompts import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule

    torch.manual_seed(0)
    module = RSTGModule(guidance=False, teacher=None, num_generations=args.g, max_new_tokens=args.length,
                        micro_batch_size=args.prompts * args.g, lr=1e-5, loss_aggregation="token_mean",
                        eps_high=0.28, log_samples_every_n_steps=0, max_grad_norm=1.0)
    dm = PromptDataModule(val=None, train_size=(args.steps + 1) * args.prompts, batch_size=args.prompts, shuffle=False)
    tokens = []

    class Count(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            m = trainer.callback_metrics
            tokens.append(float(m["train/completion_length"]) * args.prompts * args.g)

    # One warm-up step outside the timing, as for TRL.
    L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, accelerator="cpu").fit(module, dm)
    tokens.clear()
    trainer = L.Trainer(max_steps=args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", callbacks=[Count()], limit_val_batches=0)
    start = time.perf_counter()
    trainer.fit(module, dm)
    return sum(tokens), time.perf_counter() - start


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

    times = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            times.append(time.perf_counter())

        def on_train_end(self, a, state, control, **kw):
            times.append(time.perf_counter())

    cfg = GRPOConfig(output_dir="/tmp/trl-bench", per_device_train_batch_size=args.prompts * args.g,
                     num_generations=args.g, max_completion_length=args.length, max_steps=args.steps + 1,
                     learning_rate=1e-5, loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28,
                     temperature=1.0, use_cpu=True, bf16=False, report_to="none", logging_steps=1,
                     save_strategy="no", gradient_accumulation_steps=1, num_iterations=1, max_grad_norm=1.0,
                     shuffle_dataset=False, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[reward], args=cfg, train_dataset=ds,
                          callbacks=[Timer()])
    trainer.train()
    # Drop the first (warm-up) step from both the tokens and the time.
    return sum(tokens[1:]), times[-1] - times[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--g", type=int, default=8)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--side", choices=["rstg", "trl"], default=None)
    args = ap.parse_args()
    if args.side:
        import torch

        torch.set_num_threads(1)
        toks, secs = (_rstg if args.side == "rstg" else _trl)(args)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps({"tokens": toks, "seconds": secs, "peak_rss_mb": peak_mb}))
        return
    out = {"benchmark": "rstg_vs_trl", "steps": args.steps, "prompts_per_step": args.prompts, "G": args.g,
           "max_completion_length": args.length}
    for side in ("rstg", "trl"):
        cmd = [sys.executable, __file__, "--side", side, "--steps", str(args.steps), "--prompts", str(args.prompts),
               "--g", str(args.g), "--length", str(args.length)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            out[side] = {"error": proc.stderr[-1500:]}
            continue
        r = json.loads(line[-1][7:])
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        out[side] = r
    if "tokens_per_s" in out.get("rstg", {}) and "tokens_per_s" in out.get("trl", {}):
        out["throughput_ratio"] = out["rstg"]["tokens_per_s"] / out["trl"]["tokens_per_s"]
        out["peak_memory_ratio"] = out["rstg"]["peak_rss_mb"] / out["trl"]["peak_rss_mb"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
