"""Convergence of zeroth-order fine-tuning on the embedded arithmetic task, against forward passes.

Methods (each with several seeds, same data order per seed): MeZO-SGD (MUZOAdam mode=sgd, q=1),
MUZO-SGD (q=4), MUZO-Adam (q=4) and backprop AdamW as the ceiling. Every method starts from the
embedded student and gets the same budget of forward-pass equivalents (a backprop step counts as
3: one forward plus a backward of about twice its cost). Held-out loss (assistant tokens of the
embedded validation split) is recorded along the way and held-out accuracy (greedy decoding of the
embedded test split) at the end. Prints one JSON line; with --plot writes the PNG.

    python benchmarks/muzo_convergence.py --budget 1600 --seeds 0 1 2 --plot docs/benchmarks/muzo_convergence.png

A pretrained checkpoint (e.g. SmolLM2-135M-Instruct, once the model loader reads it) replaces the
embedded student with ``--model PATH`` (its tokenizer and chat template render the same embedded
arithmetic prompts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from itertools import cycle

import torch

from lightning_agents.atomic import atomic_write_text
from lightning_agents.callbacks import HeldOutAccuracy
from lightning_agents.datamodules import ChatDataModule
from lightning_agents.modules import SFTModule
from lightning_agents.optim import MUZOAdam

BACKPROP_COST = 3  # forward-pass equivalents of one forward + backward step


def methods(args) -> dict[str, dict]:
    return {
        "MeZO-SGD q=1": dict(kind="zo", mode="sgd", q=1, lr=args.sgd_lr),
        "MUZO-SGD q=4": dict(kind="zo", mode="sgd", q=4, lr=args.sgd_lr),
        "MUZO-Adam q=4": dict(kind="zo", mode="adam", q=4, lr=args.adam_lr),
        "AdamW (backprop)": dict(kind="bp", lr=args.backprop_lr),
    }


@torch.no_grad()
def held_out_loss(module: SFTModule, batches) -> float:
    module.eval()
    total, weight = 0.0, 0
    for batch in batches:
        n = int((batch["labels"][:, 1:] != -100).sum())
        total += float(module(batch).loss) * n
        weight += n
    return total / weight


def run(name: str, spec: dict, seed: int, args, train_batches, val_batches, accuracy: HeldOutAccuracy) -> dict:
    torch.manual_seed(seed)
    module = SFTModule(args.model)
    module.configure_model()
    params = [p for p in module.parameters() if p.requires_grad]
    if spec["kind"] == "zo":
        opt = MUZOAdam(params, lr=spec["lr"], eps=args.eps, num_queries=spec["q"], mode=spec["mode"], seed=seed)
        cost = 2 * spec["q"]
    else:
        opt = torch.optim.AdamW(params, lr=spec["lr"])
        cost = BACKPROP_COST
    # Each seed sees its own shuffled order of the training batches, the same for every method.
    order = torch.randperm(len(train_batches), generator=torch.Generator().manual_seed(seed)).tolist()
    batches = cycle([train_batches[i] for i in order])
    curve = [(0, held_out_loss(module, val_batches))]
    next_eval, used, start = args.eval_every, 0, time.perf_counter()
    while used + cost <= args.budget:
        batch = next(batches)
        if spec["kind"] == "zo":
            module.eval()  # dropout off in perturbed evaluations, as MUZOStrategy does
            opt.step(lambda: module(batch).loss)  # noqa: B023 -- called inside step(), this iteration
        else:
            module.train()
            opt.zero_grad(set_to_none=True)
            module(batch).loss.backward()
            opt.step()
        used += cost
        if used >= next_eval:
            curve.append((used, held_out_loss(module, val_batches)))
            next_eval += args.eval_every
    if curve[-1][0] != used:  # the budget ran out between two evaluation points
        curve.append((used, held_out_loss(module, val_batches)))
    module.eval()
    acc = accuracy.evaluate(module)["accuracy"]
    return {
        "method": name,
        "seed": seed,
        "curve": curve,
        "final_loss": curve[-1][1],
        "accuracy": acc,
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:student", help="model id or path (tokenizer too)")
    parser.add_argument("--budget", type=int, default=1600, help="forward-pass equivalents per run")
    parser.add_argument("--eval-every", type=int, default=200, help="forward passes between held-out losses")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="runs per method; a seed sets the batch order, the same for every method (default: 0 1 2)",
    )
    parser.add_argument("--batch-size", type=int, default=16, help="conversations per step (default: 16)")
    parser.add_argument(
        "--val-batches", type=int, default=4, help="validation batches in each held-out loss (default: 4)"
    )
    parser.add_argument("--accuracy-size", type=int, default=100, help="held-out problems for the final accuracy")
    parser.add_argument(
        "--eps", type=float, default=1e-3, help="perturbation scale of the zeroth-order methods (default: 1e-3, MeZO's)"
    )
    parser.add_argument(
        "--sgd-lr", type=float, default=5e-4, help="learning rate of MeZO-SGD and MUZO-SGD (default: 5e-4)"
    )
    parser.add_argument("--adam-lr", type=float, default=1e-3, help="learning rate of MUZO-Adam (default: 1e-3)")
    parser.add_argument(
        "--backprop-lr", type=float, default=3e-4, help="learning rate of the backprop AdamW ceiling (default: 3e-4)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these method names")
    parser.add_argument("--plot", default=None, help="write a PNG of held-out loss vs forward passes")
    parser.add_argument("--raw", default=None, help="write every curve as JSON")
    parser.add_argument(
        "--merge",
        nargs="+",
        default=None,
        help="summarise and plot the --raw files of runs split by --only (same settings) instead of training",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.merge:
        parts = [json.load(open(path)) for path in args.merge]
        report(args, parts[0]["baseline"], [r for part in parts for r in part["runs"]])
        return

    dm = ChatDataModule(tokenizer=args.model, embedded_size=8000, max_length=128, batch_size=args.batch_size)
    dm.setup("fit")
    torch.manual_seed(0)
    train_batches = list(dm.train_dataloader())
    val_batches = [b for _, b in zip(range(args.val_batches), dm.val_dataloader())]
    accuracy = HeldOutAccuracy(split="test", size=args.accuracy_size, max_new_tokens=16)

    base = SFTModule(args.model)
    base.configure_model()
    baseline = {"loss": held_out_loss(base, val_batches), "accuracy": accuracy.evaluate(base)["accuracy"]}
    results = []
    for name, spec in methods(args).items():
        if args.only and name not in args.only:
            continue
        for seed in args.seeds:
            results.append(run(name, spec, seed, args, train_batches, val_batches, accuracy))
            r = results[-1]
            print(  # progress on stderr, so a long run can be followed in its log
                f"{name} seed {seed}: loss {r['final_loss']:.4f} accuracy {r['accuracy']:.3f} ({r['seconds']:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            if args.raw:  # after every run, so a stopped run keeps what it finished
                atomic_write_text(args.raw, json.dumps({"baseline": baseline, "runs": results}))
    report(args, baseline, results)


def report(args, baseline: dict, results: list[dict]) -> None:
    """Print the JSON summary line and, with --plot, write the figure."""
    summary = {}
    for name in dict.fromkeys(r["method"] for r in results):
        rs = [r for r in results if r["method"] == name]
        losses, accs = [r["final_loss"] for r in rs], [r["accuracy"] for r in rs]
        summary[name] = {
            "final_loss_mean": statistics.mean(losses),
            "final_loss_std": statistics.pstdev(losses),
            "accuracy_mean": statistics.mean(accs),
            "accuracy_std": statistics.pstdev(accs),
            "loss_drop": baseline["loss"] - statistics.mean(losses),
            "seconds_per_run": statistics.mean(r["seconds"] for r in rs),
        }
    zo = {k: v for k, v in summary.items() if "backprop" not in k}
    out = {
        "benchmark": "muzo_convergence",
        "model": args.model,
        "budget_forward_passes": args.budget,
        "seeds": args.seeds,
        "lr": {"sgd": args.sgd_lr, "adam": args.adam_lr, "backprop": args.backprop_lr},
        "eps": args.eps,
        "start": baseline,
        "methods": summary,
    }
    if "MeZO-SGD q=1" in zo and "MUZO-Adam q=4" in zo:
        out["muzo_adam_vs_mezo_loss_drop_ratio"] = (
            zo["MUZO-Adam q=4"]["loss_drop"] / zo["MeZO-SGD q=1"]["loss_drop"]
            if zo["MeZO-SGD q=1"]["loss_drop"]
            else None
        )
    print(json.dumps(out))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in summary:
            rs = [r for r in results if r["method"] == name]
            xs = [x for x, _ in rs[0]["curve"]]
            ys = [statistics.mean(r["curve"][i][1] for r in rs) for i in range(len(xs))]
            lo = [min(r["curve"][i][1] for r in rs) for i in range(len(xs))]
            hi = [max(r["curve"][i][1] for r in rs) for i in range(len(xs))]
            (line,) = ax.plot(xs, ys, marker="o", ms=3, label=f"{name} (acc {summary[name]['accuracy_mean']:.2f})")
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
        ax.axhline(baseline["loss"], color="grey", ls=":", lw=1, label=f"start (acc {baseline['accuracy']:.2f})")
        ax.set_xlabel("forward passes (a backprop step counts as 3)")
        ax.set_ylabel("held-out loss (assistant tokens)")
        model = "embedded student" if args.model == "embedded:student" else args.model.rstrip("/").split("/")[-1]
        ax.set_title(f"Embedded arithmetic, {model}, {len(args.seeds)} seed(s): mean, min-max", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
