"""Old against new TopoCurate code on the same synthetic file, interleaved, for a shared machine.

Runs ``benchmarks/topocurate_scale.py --one N --workers 0`` (the default in-process path) in fresh
processes, alternating the code under test (ABBA order per repeat) so both see the same load, and
prints each run's JSON line (plus the 1-minute load average) and a summary of medians, including
the process CPU time of the end-to-end call, which moves far less with other load than wall time.

    mkdir -p /tmp/la-before && git archive <old commit> lightning_agents | tar -x -C /tmp/la-before
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/topocurate_scale_compare.py --before /tmp/la-before \\
        --sizes 1000 10000 --repeats 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCALE = Path(__file__).with_name("topocurate_scale.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="folder holding the old lightning_agents package")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parents[1]), help="folder of the new one")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1000, 10000],
        help="numbers of trajectories in the synthetic file, one comparison each (default: 1000 10000)",
    )
    parser.add_argument("--repeats", type=int, default=4, help="runs per code and size")
    args = parser.parse_args()
    code = {"before": args.before, "after": args.after}
    runs: dict[str, list[dict]] = {}
    for size in args.sizes:
        for repeat in range(args.repeats):
            for name in ("before", "after") if repeat % 2 == 0 else ("after", "before"):
                env = dict(os.environ, PYTHONPATH=code[name])
                proc = subprocess.run(
                    [sys.executable, str(SCALE), "--one", str(size), "--workers", "0"],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                line = json.loads(proc.stdout.strip().splitlines()[-1])
                line["load1"] = round(os.getloadavg()[0], 1)
                runs.setdefault(f"{size}/{name}", []).append(line)
                print(name, json.dumps(line), flush=True)
    summary = {
        key: {
            "median_cpu_s": statistics.median(r["end_to_end_cpu_s"] for r in found),
            "cpu_s": [r["end_to_end_cpu_s"] for r in found],
            "median_end_to_end_s": statistics.median(r["end_to_end_s"] for r in found),
            "load1": [r["load1"] for r in found],
            "sft_selected": sorted({r["sft_selected"] for r in found}),
            "rl_selected": sorted({r["rl_selected"] for r in found}),
        }
        for key, found in runs.items()
    }
    print(json.dumps({"benchmark": "topocurate_scale_compare", "summary": summary}))


if __name__ == "__main__":
    main()
