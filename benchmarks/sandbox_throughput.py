"""Code-reward throughput: programs per second scoring the 164 canonical HumanEval solutions.

Each solution is the prompt followed by its canonical body, scored by ``CodeVerifier`` against the
reference the training data module builds (``test + check(entry_point)``), with ``--workers``
threads as ``RewardScorer`` would run them. Prints one JSON line: programs/s, how many passed,
the isolation in force and the package versions.

    PYTHONPATH=$PWD python benchmarks/sandbox_throughput.py --workers 2
    PYTHONPATH=$PWD python benchmarks/sandbox_throughput.py --workers 2 --limit 40   # a quick subset

``lightning_agents`` is imported from ``PYTHONPATH``. With ``--baseline-code DIR`` (a checkout of the
code before a change, e.g. ``git archive cfcfd02 lightning_agents | tar -x -C /tmp/la-before``) the
script measures that code and this one alternately, each in a fresh subprocess, ``--repeats`` times,
and prints both rates and their ratio:

    PYTHONPATH=$PWD python benchmarks/sandbox_throughput.py --workers 2 --repeats 2 --baseline-code /tmp/la-before
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path, limit: int | None) -> list[tuple[str, str]]:
    with gzip.open(path, "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    pairs = [(r["prompt"] + r["canonical_solution"], f"{r['test']}\n\ncheck({r['entry_point']})\n") for r in rows]
    return pairs[:limit] if limit else pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared/data/humaneval/HumanEval.jsonl.gz",
        help="HumanEval.jsonl.gz (default: ../shared/data/humaneval/HumanEval.jsonl.gz)",
    )
    ap.add_argument("--workers", type=int, default=2, help="programs scored at once, in threads (default: 2)")
    ap.add_argument(
        "--limit", type=int, default=None, help="only the first N problems, a quick look (default: all 164)"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="timed passes over the programs, the fastest reported; with --baseline-code, rounds of one "
        "run of each code (default: 1)",
    )
    ap.add_argument("--isolation", default=None, help="CodeVerifier isolation (default: the verifier's default)")
    ap.add_argument("--baseline-code", default=None, help="a checkout of the old code to compare with, alternately")
    args = ap.parse_args()
    if args.baseline_code:
        compare(args)
        return

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
    print(
        json.dumps(
            {
                "benchmark": "sandbox_throughput",
                "programs": len(pairs),
                "workers": args.workers,
                "programs_per_s": round(max(rates), 2),
                "all_rates": [round(r, 2) for r in rates],
                "passed": passed,
                "isolation": isolation,
                "code": str(Path(sys.modules["lightning_agents"].__file__).parents[1]),
                "python": platform.python_version(),
            }
        )
    )


def compare(args: argparse.Namespace) -> None:
    """Alternate fresh subprocesses of the baseline code and this code; report the best rate of each."""
    here = str(Path(__file__).resolve())
    common = ["--workers", str(args.workers), "--data", str(args.data)] + (
        ["--limit", str(args.limit)] if args.limit else []
    )
    mine = os.environ.get("PYTHONPATH", str(ROOT))
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.repeats):
        for label, code, extra in (
            ("before", args.baseline_code, []),
            ("after", mine, ["--isolation", args.isolation] if args.isolation else []),
        ):
            out = subprocess.run(
                [sys.executable, here, *common, *extra],
                env={**os.environ, "PYTHONPATH": code},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs[label].append(json.loads(out.strip().splitlines()[-1]))
    before = max(r["programs_per_s"] for r in runs["before"])
    after = max(r["programs_per_s"] for r in runs["after"])
    print(
        json.dumps(
            {
                "benchmark": "sandbox_throughput_compare",
                "programs": runs["after"][0]["programs"],
                "workers": args.workers,
                "before_programs_per_s": before,
                "after_programs_per_s": after,
                "ratio": round(after / before, 3),
                "before_rates": [r["programs_per_s"] for r in runs["before"]],
                "after_rates": [r["programs_per_s"] for r in runs["after"]],
                "passed_before": runs["before"][-1]["passed"],
                "passed_after": runs["after"][-1]["passed"],
                "isolation_after": runs["after"][-1]["isolation"],
                "python": platform.python_version(),
            }
        )
    )


if __name__ == "__main__":
    main()
