"""How far the BFCL verifiers agree with BFCL's own verdicts on real multi-turn result files.

BFCL scores a multi-turn trial by executing the model's calls and the ground truth in its API
classes; its score files (``score/<model>/multi_turn/BFCL_v4_multi_turn_<category>_score.json``)
list the failed trials after a summary line. ``--verifier action`` (the default) scores with
``BFCLActionVerifier``, which decides from the calls alone (no BFCL code is run); ``--verifier
execution`` with ``BFCLExecutionVerifier``, which executes the calls in the API classes of the
optional ``bfcl-eval`` package (``pip install --no-deps bfcl-eval``). For each result file this
reads the trials with the possible answers and questions of their category, scores them, and
counts agreement with the score file. One JSON line per result file, then one for all of them.

    python benchmarks/bfcl_verifier_agreement.py \\
        --results result/glyphh-ada-1.1/multi_turn/BFCL_v4_multi_turn_{base,long_context,miss_func,miss_param}_result.json \\
        --scores score/glyphh-ada-1.1/multi_turn/ --ground_truth bfcl_eval/data/ [--verifier execution]

(paths inside ShishirPatil/gorilla's ``berkeley-function-call-leaderboard`` at a commit that has
them; the ground-truth folder holds ``BFCL_v4_multi_turn_<category>.json``, the
``possible_answer/`` files and ``multi_turn_func_doc/``.)
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections import Counter
from pathlib import Path

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.tasks.tau_actions import BFCLActionVerifier


def _category(path: Path) -> str:
    match = re.search(r"(multi_turn_[a-z_]+?)_(?:result|score)\.json$", path.name)
    if not match:
        raise SystemExit(f"{path}: not a BFCL multi-turn result or score file name")
    return match.group(1)


def _failed(score_file: Path) -> set[str]:
    lines = [line for line in score_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {json.loads(line)["id"] for line in lines[1:]}  # the first line is the summary


def _ground_truth(folder: Path, category: str) -> list[str]:
    question = next(folder.rglob(f"BFCL_v*_{category}.json"))
    answer = next(folder.rglob(f"possible_answer/BFCL_v*_{category}.json"), None) or next(
        folder.rglob(f"BFCL_v*_{category}_possible_answer.json")
    )
    return [str(question), str(answer)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", nargs="+", type=Path, required=True, help="BFCL multi-turn result files")
    parser.add_argument("--scores", type=Path, required=True, help="folder with the matching *_score.json files")
    parser.add_argument("--ground_truth", type=Path, required=True, help="folder with questions and possible answers")
    parser.add_argument(
        "--verifier",
        choices=("action", "execution"),
        default="action",
        help="BFCLActionVerifier (calls alone) or BFCLExecutionVerifier (executes them; needs bfcl-eval)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.verifier == "execution":
        from lightning_agents.tasks.bfcl_execution import BFCLExecutionVerifier

        execution = BFCLExecutionVerifier()

        def score(rollout) -> float:
            # The reader keeps the question file's initial state beside the reference.
            reference = json.loads(rollout.info["reference"])
            return execution.score_turns(rollout.info["turn_calls"], reference, rollout.info["environment"])
    else:
        action = BFCLActionVerifier()

        def score(rollout) -> float:
            return action.score_turns(rollout.info["turn_calls"], json.loads(rollout.info["reference"]))

    total = Counter()
    for result in args.results:
        category = _category(result)
        score_file = next(args.scores.rglob(f"BFCL_v*_{category}_score.json"))
        failed = _failed(score_file)
        counts = Counter()
        for rollout in load_rollouts([str(result)], ground_truth=_ground_truth(args.ground_truth, category)):
            bfcl = rollout.task_id not in failed
            ours = score(rollout) == 1.0
            counts["trials"] += 1
            counts["agree"] += bfcl == ours
            counts["bfcl_only"] += bfcl and not ours
            counts["verifier_only"] += ours and not bfcl
        total.update(counts)
        print(json.dumps({"result": str(result), "category": category, "verifier": args.verifier, **counts}))
    print(json.dumps({"result": "all", "verifier": args.verifier, **total}))


if __name__ == "__main__":
    main()
