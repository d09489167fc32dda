"""How far ``BoxedMathVerifier`` agrees with graders' own verdicts on hand-reviewed cases.

Reads ``benchmarks/data/math_grader_cases.jsonl`` (sources in ``benchmarks/data/README.md``), scores
every case with the verifier (math-verify backend when installed, and the fallback alone), both on
the main thread and through ``RewardScorer``'s thread pool (where the rewards are used), and prints
one JSON line per backend and case group: agreement, wrong 1s, wrong 0s, ``nan`` rewards.

    python benchmarks/math_verifier_agreement.py
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from lightning_agents.rewards.registry import RewardScorer
from lightning_agents.tasks.math import BoxedMathVerifier

DATA = Path(__file__).resolve().parent / "data" / "math_grader_cases.jsonl"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=str(DATA), help="JSONL of {source, completion, reference, expected}")
    parser.add_argument("--workers", type=int, default=8, help="RewardScorer threads")
    args = parser.parse_args()
    cases = [json.loads(line) for line in Path(args.cases).read_text(encoding="utf-8").splitlines() if line.strip()]
    groups = defaultdict(list)
    for i, case in enumerate(cases):
        groups["adversarial" if case["source"].startswith("adversarial") else "real"].append(i)
    specs = {
        "default": {"class_path": "lightning_agents.rewards.BoxedMathVerifier", "init_args": {}},
        "fallback": {
            "class_path": "lightning_agents.rewards.BoxedMathVerifier",
            "init_args": {"use_math_verify": False},
        },
    }
    completions = [c["completion"] for c in cases]
    references = [c["reference"] for c in cases]
    for name, spec in specs.items():
        verifier = BoxedMathVerifier(**spec["init_args"])
        start = time.perf_counter()
        on_main = [verifier(c, r) for c, r in zip(completions, references)]
        main_s = time.perf_counter() - start
        start = time.perf_counter()
        threaded = RewardScorer(spec, max_workers=args.workers).score(completions, references)
        threaded_s = time.perf_counter() - start
        backend = verifier.backend
        for group, rows in groups.items():
            expected = [cases[i]["expected"] for i in rows]
            for where, rewards, seconds in (
                ("main_thread", on_main, main_s),
                ("thread_pool", threaded.rewards, threaded_s),
            ):
                got = [rewards[i] for i in rows]
                line = {
                    "benchmark": "math_verifier_agreement",
                    "verifier": name,
                    "backend": backend,
                    "scored_in": where,
                    "group": group,
                    "n": len(rows),
                    "agree": sum(g == e for g, e in zip(got, expected)),
                    "wrong_1": sum(g == 1.0 and e == 0 for g, e in zip(got, expected)),
                    "wrong_0": sum(g == 0.0 and e == 1 for g, e in zip(got, expected)),
                    "nan": sum(g != g for g in got),
                    "seconds_all_cases": round(seconds, 2),
                    "command": " ".join(sys.argv),
                    "versions": {
                        "math-verify": _version("math-verify"),
                        "lightning-agents": _version("lightning-agents"),
                    },
                }
                print(json.dumps(line))


if __name__ == "__main__":
    main()
