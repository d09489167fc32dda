"""Does MUZO-Adam learn, and only learn, in 16-bit precision? Embedded student, held-out loss and weight drift.

For each learning rate (default: 0 and the GPU configs' 1e-6) the embedded student is trained with
MUZO-Adam for ``--steps`` steps in the chosen precision, from the same checkpoint, with the same
seeds and batches:

- ``bf16-mixed`` (what the GPU configs use): float32 weights, forward under
  ``torch.autocast(bfloat16, cache_enabled=False)``, exactly as Lightning's ``bf16-mixed`` plugin.
- ``bf16-true``: bfloat16 weights; MUZOAdam keeps float32 master copies (``master_weights=True``).

Reported per learning rate: held-out loss (assistant tokens of the embedded validation split, in the
same precision) before and after, its relative change, the relative weight drift
``||theta_T - theta_0|| / ||theta_0||`` and the fraction of weights that changed; then the weight
change of each ``lr > 0`` run against the ``lr = 0`` run. Prints one JSON line.

    OMP_NUM_THREADS=1 python benchmarks/muzo_precision.py --precision bf16-mixed --lrs 0 1e-6 --steps 300
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from itertools import cycle

import torch

from lightning_agents.datamodules import ChatDataModule
from lightning_agents.modules import SFTModule
from lightning_agents.optim import MUZOAdam


def _context(precision: str):
    if precision == "bf16-mixed":
        return torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().reshape(-1) for p in module.parameters() if p.requires_grad])


@torch.no_grad()
def held_out_loss(module: SFTModule, batches, precision: str) -> float:
    module.eval()
    total, weight = 0.0, 0
    for batch in batches:
        n = int((batch["labels"][:, 1:] != -100).sum())
        with _context(precision):
            total += float(module(batch).loss) * n
        weight += n
    return total / weight


def run(lr: float, args, train_batches, val_batches) -> tuple[dict, torch.Tensor]:
    module = SFTModule("embedded:student")
    module.configure_model()
    if args.precision == "bf16-true":
        module.to(torch.bfloat16)
    theta0 = _flat(module)
    start_loss = held_out_loss(module, val_batches, args.precision)
    params = [p for p in module.parameters() if p.requires_grad]
    opt = MUZOAdam(
        params,
        lr=lr,
        eps=args.eps,
        num_queries=args.queries,
        mode="adam",
        moment_dtype=args.moment_dtype,
        seed=args.seed,
    )
    batches = cycle(train_batches)
    module.eval()  # dropout off in perturbed evaluations, as MUZOStrategy does
    start = time.perf_counter()
    for _ in range(args.steps):
        batch = next(batches)

        def closure(batch=batch):
            with _context(args.precision):
                return module(batch).loss

        opt.step(closure)
    seconds = time.perf_counter() - start
    theta = _flat(module)
    end_loss = held_out_loss(module, val_batches, args.precision)
    return {
        "lr": lr,
        "start_loss": round(start_loss, 5),
        "end_loss": round(end_loss, 5),
        "loss_rel_change": round((end_loss - start_loss) / start_loss, 5),
        "weight_rel_drift": float((theta - theta0).norm() / theta0.norm()),
        "weights_changed_fraction": round(float((theta != theta0).float().mean()), 4),
        "master_MiB": round(opt.master_nbytes() / 2**20, 3),
        "seconds": round(seconds, 1),
    }, theta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--precision",
        choices=["bf16-mixed", "bf16-true"],
        default="bf16-mixed",
        help="bf16-mixed: float32 weights under bf16 autocast; bf16-true: bf16 weights with float32 master "
        "copies (default: bf16-mixed)",
    )
    parser.add_argument(
        "--lrs",
        type=float,
        nargs="+",
        default=[0.0, 1e-6],
        help="learning rates, one run each from the same checkpoint; 0 is the no-drift reference (default: 0 1e-6)",
    )
    parser.add_argument("--steps", type=int, default=300, help="MUZO-Adam steps per run (default: 300)")
    parser.add_argument(
        "--queries", type=int, default=4, help="directions per step, q (2q forward passes) (default: 4)"
    )
    parser.add_argument("--eps", type=float, default=1e-3, help="perturbation scale (default: 1e-3)")
    parser.add_argument(
        "--moment-dtype",
        default="bfloat16",
        choices=["float32", "bfloat16", "int8"],
        help="how the Adam moments are kept between steps (default: bfloat16)",
    )
    parser.add_argument("--batch-size", type=int, default=4, help="conversations per step (default: 4)")
    parser.add_argument(
        "--val-batches", type=int, default=4, help="validation batches in the held-out loss (default: 4)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the batch order and the perturbations, shared by every run (default: 0)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    dm = ChatDataModule(tokenizer="embedded:student", embedded_size=8000, max_length=128, batch_size=args.batch_size)
    dm.setup("fit")
    torch.manual_seed(args.seed)
    train_batches = [b for _, b in zip(range(args.steps), dm.train_dataloader())]
    val_batches = [b for _, b in zip(range(args.val_batches), dm.val_dataloader())]
    rows, thetas = [], {}
    for lr in args.lrs:
        row, thetas[lr] = run(lr, args, train_batches, val_batches)
        rows.append(row)
    if 0.0 in thetas:
        base = thetas[0.0]
        for row in rows:
            if row["lr"] > 0:
                row["change_vs_lr0"] = float((thetas[row["lr"]] - base).norm() / base.norm())
                row["changed_vs_lr0_fraction"] = round(float((thetas[row["lr"]] != base).float().mean()), 4)
    print(
        json.dumps(
            {
                "benchmark": "muzo_precision",
                "precision": args.precision,
                "steps": args.steps,
                "queries": args.queries,
                "batch_size": args.batch_size,
                "moment_dtype": args.moment_dtype,
                "eps": args.eps,
                "torch": torch.__version__,
                "runs": rows,
                "lr0_within_0.5pct": all(abs(r["loss_rel_change"]) <= 0.005 for r in rows if r["lr"] == 0.0),
            }
        )
    )


if __name__ == "__main__":
    main()
