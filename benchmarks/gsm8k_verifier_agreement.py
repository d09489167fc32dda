"""How far ``GSM8KVerifier`` agrees with reviewed verdicts on real model outputs and reward hacks.

Reads ``tests/data/gsm8k_outputs/real_outputs.jsonl`` and ``adversarial.jsonl`` (sources in that
folder's README), scores every case with the strict verifier and the lenient one
(``fallback_last_number=True``), both on the main thread and through ``RewardScorer``'s thread pool
(where RSTG and GRPO use the rewards), and prints one JSON line per verifier, place and source:
agreement with the right verdict, wrong 1s, wrong 0s, ``nan`` rewards, and how many wrong 0s are the
strict verifier's by design (the completion states no final answer).

    python benchmarks/gsm8k_verifier_agreement.py
    python benchmarks/gsm8k_verifier_agreement.py --cases my_pairs.jsonl  # {source, completion, reference, expected}
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from lightning_agents.rewards import GSM8KVerifier
from lightning_agents.rewards.registry import RewardScorer

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "gsm8k_outputs"
DEFAULT_CASES = [DATA / "real_outputs.jsonl", DATA / "adversarial.jsonl"]
SPEC = "lightning_agents.rewards.GSM8KVerifier"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _load(paths: list[str]) -> list[dict]:
    cases = []
    for path in paths:
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            case = json.loads(line)
            # a file of source verdicts only (no review) is read as it stands
            case.setdefault("expected", case.get("source_verdict"))
            if case["expected"] not in (0, 1):
                raise ValueError(
                    f"{path}:{n}: 'expected' (or 'source_verdict') must be 0 or 1, got {case['expected']!r}"
                )
            cases.append(case)
    return cases


def _line(name: str, where: str, group: str, got: list[float], rows: list[dict], seconds: float) -> dict:
    expected = [r["expected"] for r in rows]
    wrong_0 = [g == 0.0 and e == 1 for g, e in zip(got, expected)]
    return {
        "benchmark": "gsm8k_verifier_agreement",
        "verifier": name,
        "scored_in": where,
        "group": group,
        "n": len(rows),
        "agree": sum(g == e for g, e in zip(got, expected)),
        "wrong_1": sum(g == 1.0 and e == 0 for g, e in zip(got, expected)),
        "wrong_0": sum(wrong_0),
        "wrong_0_no_statement": sum(w and r.get("statement") is False for w, r in zip(wrong_0, rows)),
        "nan": sum(g != g for g in got),
        "seconds_all_cases": round(seconds, 3),
        "command": " ".join(sys.argv),
        "versions": {"lightning-agents": _version("lightning-agents")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=[str(p) for p in DEFAULT_CASES], help="JSONL files of cases")
    parser.add_argument("--workers", type=int, default=8, help="RewardScorer threads")
    args = parser.parse_args()
    cases = _load(args.cases)
    groups = defaultdict(list)
    for i, case in enumerate(cases):
        groups[case["source"]].append(i)
    completions = [c["completion"] for c in cases]
    references = [str(c["reference"]) for c in cases]
    for name, init_args in (("default", {}), ("fallback_last_number", {"fallback_last_number": True})):
        verifier = GSM8KVerifier(**init_args)
        start = time.perf_counter()
        on_main = [verifier(c, r) for c, r in zip(completions, references)]
        main_s = time.perf_counter() - start
        start = time.perf_counter()
        scorer = RewardScorer({"class_path": SPEC, "init_args": init_args}, max_workers=args.workers)
        pooled = scorer.score(completions, references).rewards
        pooled_s = time.perf_counter() - start
        for group, rows in groups.items():
            for where, rewards, seconds in (("main_thread", on_main, main_s), ("thread_pool", pooled, pooled_s)):
                line = _line(name, where, group, [rewards[i] for i in rows], [cases[i] for i in rows], seconds)
                print(json.dumps(line))


if __name__ == "__main__":
    main()
