"""Code-reward throughput: programs per second scoring the 164 canonical HumanEval solutions.

Each solution is the prompt followed by its canonical body, scored by ``CodeVerifier`` against the
reference the training data module builds (``test + check(entry_point)``), with ``--workers``
threads as ``RewardScorer`` would run them. Prints one JSON line: programs/s, how many passed,
the isolation in force and the package versions.

    python benchmarks/sandbox_throughput.py --workers 2
    python benchmarks/sandbox_throughput.py --workers 2 --limit 40   # a quick subset
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load(path: Path, limit: int | None) -> list[tuple[str, str]]:
    with gzip.open(path, "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    pairs = [(r["prompt"] + r["canonical_solution"], f"{r['test']}\n\ncheck({r['entry_point']})\n") for r in rows]
    return pairs[:limit] if limit else pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/humaneval/HumanEval.jsonl.gz")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--isolation", default=None, help="CodeVerifier isolation (default: the verifier's default)")
    args = ap.parse_args()

    from lightning_agents.rewards import CodeVerifier

    kwargs = {} if args.isolation is None else {"isolation": args.isolation}
    verifier = CodeVerifier(**kwargs)
    pairs = load(args.data, args.limit)
    verifier(*pairs[0])  # warm-up: probes the machine's isolation once
    rates, passed = [], 0
    for _ in range(args.repeats):
        start = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            scores = list(pool.map(lambda p: verifier(*p), pairs))
        rates.append(len(pairs) / (time.perf_counter() - start))
        passed = sum(1 for s in scores if s == 1.0)
    isolation = getattr(verifier, "isolation", "legacy")
    print(json.dumps({
        "benchmark": "sandbox_throughput", "programs": len(pairs), "workers": args.workers,
        "programs_per_s": round(max(rates), 2), "all_rates": [round(r, 2) for r in rates],
        "passed": passed, "isolation": isolation, "python": platform.python_version(),
    }))


if __name__ == "__main__":
    main()
