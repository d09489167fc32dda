"""Learning effect at small scale: GRPO vs GRPO + naive OPD vs RSTG on the embedded task.

Same student init, prompts, steps and sampling for all three; 3 seeds each. Prints one JSON line:
per recipe the mean/std held-out test accuracy after training, the accuracy before training (the
shared baseline measured in this run), and the mean fraction of negative zero-variance groups over
training. Writes a PNG plot next to the docs when --plot is given.

    nice -n 10 python benchmarks/rstg_learning.py --steps 25 --plot docs/benchmarks/rstg_learning.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import lightning as L
import torch

from lightning_agents.datamodules.prompts import PromptDataModule, read_prompt_records
from lightning_agents.modules.rstg import RSTGModule

RECIPES = {
    "grpo": dict(guidance=False, teacher=None),
    "grpo_naive_opd": dict(guidance=True, distill_scope="all", token_selection="all", sample_weight="none", teacher_sft=False),
    "rstg": dict(guidance=True, distill_scope="negative", token_selection="soft_or", sample_weight="teacher_pass_rate", teacher_sft=True),
}


class _Trace(L.Callback):
    def __init__(self):
        self.neg, self.reward = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        m = trainer.callback_metrics
        self.neg.append(float(m["train/frac_negative_zero_var"]))
        self.reward.append(float(m["train/reward_mean"]))


def accuracy(module, records, bs=100):
    module.eval()
    scores = []
    for i in range(0, len(records), bs):
        scores += module._greedy_accuracy(records[i:i + bs])
    return sum(scores) / len(scores)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--test_size", type=int, default=200)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    test = read_prompt_records("embedded:arithmetic/test", size=args.test_size)
    cache_dir = tempfile.mkdtemp(prefix="rstg-bench-")
    common = dict(num_generations=args.num_generations, max_new_tokens=24, micro_batch_size=64, lr=args.lr,
                  teacher_k=8, beta_start=0.5, beta_slope=-0.001, beta_floor=0.1, eps_high=0.28,
                  loss_aggregation="token_mean", log_samples_every_n_steps=0,
                  teacher_cache=f"{cache_dir}/teacher_cache.jsonl")
    results, traces = {}, {}
    baseline = None
    start = time.time()
    for name, switches in RECIPES.items():
        for seed in args.seeds:
            L.seed_everything(seed, verbose=False)
            module = RSTGModule(**common, **switches)
            if baseline is None:
                baseline = accuracy(module, test)
            dm = PromptDataModule(train="embedded:arithmetic/train", val=None, train_size=args.steps * args.batch_size,
                                  batch_size=args.batch_size, seed=seed)
            trace = _Trace()
            trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, callbacks=[trace],
                                limit_val_batches=0)
            trainer.fit(module, dm)
            results.setdefault(name, []).append(accuracy(module, test))
            traces.setdefault(name, []).append(trace.neg)
    summary = {
        "benchmark": "rstg_learning", "steps": args.steps, "seeds": args.seeds, "test_size": args.test_size,
        "batch_size": args.batch_size, "num_generations": args.num_generations,
        "accuracy_before": baseline, "wall_s": round(time.time() - start, 1),
    }
    for name, accs in results.items():
        negs = [statistics.mean(t) for t in traces[name]]
        summary[name] = {"accuracy_mean": statistics.mean(accs), "accuracy_std": statistics.pstdev(accs),
                         "accuracies": accs, "frac_negative_zero_var": statistics.mean(negs)}
    print(json.dumps(summary))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        names = list(results)
        a1.bar(names, [summary[n]["accuracy_mean"] for n in names], yerr=[summary[n]["accuracy_std"] for n in names])
        a1.axhline(baseline, color="gray", linestyle="--", label="before training")
        a1.set_ylabel("test accuracy (greedy)"); a1.legend(); a1.set_title(f"after {args.steps} steps, {len(args.seeds)} seeds")
        for n in names:
            curve = [statistics.mean(vals) for vals in zip(*traces[n])]
            a2.plot(range(1, len(curve) + 1), curve, label=n)
        a2.set_xlabel("step"); a2.set_ylabel("fraction of negative zero-variance groups"); a2.legend()
        fig.tight_layout(); fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
