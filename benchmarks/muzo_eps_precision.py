"""How much of MUZO's gradient estimate survives 16-bit compute, per perturbation size ``eps``.

MUZO-Adam estimates each direction's projected gradient as ``(L(w + eps z) - L(w - eps z)) / 2 eps``.
In 16-bit compute the perturbed weights are rounded (bf16-true stores them in bf16; bf16-mixed's
autocast rounds them for every matmul), so a small ``eps`` loses part of the perturbation. For each
precision and ``eps`` this compares the ``q`` projected gradients of one MUZO step on a fixed batch
of the embedded student with the same directions evaluated in float64, over several direction
seeds: the relative error ``||g - g64|| / ||g64||`` (median and range over seeds) and the share of
signs that agree. lr is 0, so no update happens. Prints one JSON line per (precision, eps).

    OMP_NUM_THREADS=1 python benchmarks/muzo_eps_precision.py --eps 1e-3 3e-3 1e-2 --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics

import torch

from lightning_agents.datamodules import ChatDataModule
from lightning_agents.models import load_causal_lm
from lightning_agents.optim import MUZOAdam

# name -> (weight dtype, autocast dtype or None)
PRECISIONS = {
    "32-true": (torch.float32, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-true": (torch.bfloat16, None),
}


def projected(base, batch, weight_dtype, autocast, eps: float, q: int, seed: int) -> torch.Tensor:
    """The q projected gradients of one lr-0 MUZO step (master weights for 16-bit storage)."""
    model = copy.deepcopy(base).to(weight_dtype).eval()
    opt = MUZOAdam(model.parameters(), lr=0.0, eps=eps, num_queries=q, seed=seed)

    def closure():
        ctx = torch.autocast("cpu", dtype=autocast) if autocast else contextlib.nullcontext()
        with torch.no_grad(), ctx:
            return model(**batch, use_cache=False).loss

    opt.step(closure)
    return opt.last_projected_grads.double()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2], help="perturbation sizes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="direction seeds")
    parser.add_argument("--queries", type=int, default=8, help="directions per step")
    parser.add_argument("--batch", type=int, default=32, help="validation rows in the fixed batch")
    args = parser.parse_args()
    data = ChatDataModule(embedded_size=200, max_length=128, batch_size=args.batch, tokenizer="embedded:student")
    data.setup("fit")
    rows = next(iter(data.val_dataloader()))
    batch = {k: v for k, v in rows.items() if k in ("input_ids", "attention_mask", "labels")}
    base = load_causal_lm("embedded:student", dtype="float32").eval()
    for eps in args.eps:
        refs = {s: projected(base, batch, torch.float64, None, eps, args.queries, s) for s in args.seeds}
        for name, (dtype, autocast) in PRECISIONS.items():
            errors, signs = [], []
            for s in args.seeds:
                g = projected(base, batch, dtype, autocast, eps, args.queries, s)
                errors.append(float((g - refs[s]).norm() / refs[s].norm()))
                signs.append(float((g.sign() == refs[s].sign()).double().mean()))
            print(
                json.dumps(
                    {
                        "precision": name,
                        "eps": eps,
                        "seeds": len(args.seeds),
                        "queries": args.queries,
                        "rel_error_median": round(statistics.median(errors), 4),
                        "rel_error_min": round(min(errors), 4),
                        "rel_error_max": round(max(errors), 4),
                        "sign_agreement": round(statistics.mean(signs), 4),
                        "torch": torch.__version__,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
