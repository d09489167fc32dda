"""A calibrated simulated-backbone world for HFlow benchmarks, built from the real HumanEval items.

The companion of :mod:`hflow_sim` (the GSM8K world, unchanged): the same three priced backbones,
the same ledger booking and hashed latent draws, but the answers are *programs*, and what they
do on a problem comes from running real code. :mod:`hflow_sim_code_calibrate` ran, once, the
canonical solution of each of the 164 problems and up to 16 single-edit mutants of it (operator
swaps, comparison flips, off-by-one constants and ``range`` bounds, edited return values) against
the problem's hidden ``check`` tests and its docstring examples, in the package sandbox; its
cache (``hflow_sim_code_calibration.json``) says, per program, whether the hidden tests pass,
whether the examples pass, how many of them pass and its behaviour on the examples. 1,332 of the
1,508 mutants fail the hidden tests; 242 of those (18%) still pass every docstring example, 686
pass some but not all, and 12 problems have no usable example at all (the first calibration,
``hflow_sim_code_calibration_v1.json``, read fewer docstring forms: 430 and 38). What is
simulated and how it is calibrated:

- **Difficulty from the real item**: ``d`` = z-score of log(canonical solution tokens) + 0.5 x
  z-score of its branches (``if`` / loops / comprehensions / boolean operators / ``try``),
  standardised over the 164 items.
- **Three priced backbones** as in :mod:`hflow_sim`: ``cheap`` (0.15 / 0.60 $ per M tokens, skill
  -0.6), ``mid`` (2.50 / 10, 0.9) and ``o1`` (15 / 60, 3.2, billed hidden reasoning tokens, 5x the
  canonical solution's length, on every call).
- **Correlated samples**: whether a backbone *knows* a problem is one latent draw per (problem,
  backbone) with probability ``sigmoid(skill + op bonus - SLOPE x d + OFFSET)`` (SLOPE 1.1,
  OFFSET 0.4; op bonus ``cot`` 0.6, ``programmer`` 0.4, ``refine`` 0.6, ``test`` fix 1.0). A
  backbone that knows writes a right program 90% of the time, one that does not 15%. A wrong
  program is one of the problem's *wrong mutants* (those that fail the hidden tests): 60% of the
  time the backbone's systematic one (one mutant per (problem, backbone)), otherwise any of them;
  5% of all programs do not run at all (``!crashed``). A problem without a wrong mutant (12 of
  164) gets a generic wrong program that the examples catch when there are any.
- **Operators, following the real ones** (:mod:`lightning_agents.hflow.operators`): ``generate``,
  ``cot`` and ``programmer`` write a program; ``programmer`` runs it and rewrites one that does
  not run (``retries``, default 1). ``vote`` clusters its ballots (upstream programs and
  ``samples`` sampled ones) by their *calibrated behaviour on the docstring examples*, as
  ``_vote_by_behaviour`` does: programs with equal behaviour merge, a group whose programs pass
  the examples comes first, then the largest, ties to the first seen; the winner is the group's
  first program, so a wrong mutant that behaves like the right program on the examples can win
  for it, and on a problem without examples every program that runs is one group. ``test`` makes
  no call while its input passes the examples (a right program always does, except on
  HumanEval/47 and /116, whose docstrings state wrong results; kept as they are); on a failure it asks its
  backbone for a fix, up to ``retries`` times (default 1): the fix is right with 85% (knows) or
  30% (does not), else a fresh wrong draw, and is tested again; when no attempt passes every
  example, the attempt that passes the most (the calibration's ``passed`` count; a program that
  does not run counts -1, below one that runs and passes none) is kept, ties to the earliest (the
  input), as the real operator keeps it; without examples it only catches
  a program that does not run. (A calibration without counts, ``hflow_sim_code_calibration_v1.json``
  of runs 1-6 or ``_v2.json`` of run 7, keeps the last fix, as the operator did then.) ``refine``
  repairs a wrong program with 70% when its backbone knows the problem (8% otherwise) and
  breaks a right one 4% of the time; ``format`` changes nothing.
  A step with earlier programs as hints follows a clear majority of them 70% of the time when it
  does not know the problem. A node whose ``max_tokens`` (code defaults of the real executor:
  512, ``cot`` 768, ``test`` 768) is below what it needs is truncated and answers nothing.
- **Real token lengths**: the prompt (function stub and docstring) in, plus 40 for the instruction;
  a program is the canonical solution's tokens + 20 (signature and fences); ``cot`` adds
  0.8 x that + 40 of reasoning; ``programmer`` + 10; ``refine`` and a ``test`` fix read the
  program (and the failing assertion, 30) and write a new one; hints are programs.
- **The hidden criterion** (for the preference benchmark): the trace shows a *reasoning step*,
  a ``cot`` step that explains the algorithm and its edge cases before the code; the fitness does
  not measure it, and the optimum does not have it.
- **Held-out instances**: 164 items are too few for a tight held-out estimate, so each held-out
  item is used under :data:`HELDOUT_REPLICAS` independent latent draws (ids ``HumanEval/3#r2``);
  the search and rater items are other items.

Every random draw is a hash of its inputs, so a workflow's trace on a problem is a function of
the workflow (its canonical hash and node ids), the problem and the world seed.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hflow_sim as _gsm8k
from hflow_sim import _u, sim_pool

from lightning_agents.hflow import Node, Workflow
from lightning_agents.hflow.operators import DEFAULT_MAX_TOKENS, Trace

__all__ = [
    "CALIBRATION",
    "SimCodeExecutor",
    "SimCodeTask",
    "enumerate_workflows",
    "shows_working",
    "sim_pool",
    "workflow_shows_working",
]

CALIBRATION = Path(__file__).resolve().parent / "hflow_sim_code_calibration.json"
SLOPE, OFFSET = 1.1, 0.4
OP_BONUS = {"generate": 0.0, "vote": 0.0, "cot": 0.6, "programmer": 0.4, "refine": 0.6, "test": 1.0}
KNOW_RIGHT, GUESS_RIGHT, SYSTEMATIC, BROKEN = 0.90, 0.15, 0.6, 0.05
FIX_KNOWN, FIX_GUESS, BREAK = 0.70, 0.08, 0.04
TEST_FIX_KNOWN, TEST_FIX_GUESS = 0.85, 0.30
HINT_FOLLOW = 0.7
SHOWS_WORK = frozenset({"cot"})
HELDOUT_REPLICAS = 8
RIGHT, CRASHED, GENERIC = "right", "crashed", "generic"


def _z(xs: list[float]) -> list[float]:
    m, s = statistics.mean(xs), statistics.pstdev(xs) or 1.0
    return [(x - m) / s for x in xs]


class SimCodeTask(_gsm8k.SimTask):
    """HumanEval problems with their calibration (what HFlow's search sees as the task); sampling and
    the example-test hook are the GSM8K world's.

    Args:
        path: ``HumanEval.jsonl.gz`` (the prompts, for the rater and the checks).
        calibration: the calibration cache of :mod:`hflow_sim_code_calibrate`.

    Attributes:
        counts: whether the calibration counts the examples each program passes (from session 37
            on); without them a failing ``test`` step keeps its last fix, as runs 1-7 measured.
    """

    name = "humaneval-sim"
    domain = "code"

    def __init__(self, path: str, calibration: str | Path = CALIBRATION) -> None:
        with gzip.open(path, "rt") as f:
            rows = {r["task_id"]: r for r in (json.loads(x) for x in f if x.strip())}
        self.calibration_path = Path(calibration)
        cal = json.loads(Path(calibration).read_text())["problems"]
        if sorted(c["id"] for c in cal) != sorted(rows):
            raise ValueError(f"{calibration} does not cover the problems of {path}")
        # calibrations v1 (runs 1-6) and v2 (run 7) have no per-program example counts
        self.counts = all("passed" in c["canonical"] and all("passed" in m for m in c["mutants"]) for c in cal)
        size = _z([math.log(c["canonical_tokens"]) for c in cal])
        branch = _z([float(c["branches"]) for c in cal])
        self.problems = []
        for c, zs, zb in zip(cal, size, branch):
            wrong = [(f"m{k}", m) for k, m in enumerate(c["mutants"]) if not m["hidden"]]
            self.problems.append(
                {
                    "id": c["id"],
                    "base": c["id"],
                    "question": rows[c["id"]]["prompt"],
                    "reference": RIGHT,
                    "difficulty": zs + 0.5 * zb,
                    "examples": c["examples"],
                    # what the hflow_sim booking reads: prompt + instruction, and the solution length
                    "q_tokens": c["prompt_tokens"] + 10,
                    "gold_tokens": c["canonical_tokens"],
                    "code_tokens": c["canonical_tokens"] + 20,
                    # behaviour on the examples: (signature, passes every example)
                    "behaviour": {
                        RIGHT: (c["canonical"]["sig"], c["canonical"]["examples"]),
                        CRASHED: ("!crashed", False),
                        GENERIC: ("generic", False) if c["examples"] else (c["canonical"]["sig"], True),
                        **{name: (m["sig"], m["examples"]) for name, m in wrong},
                    },
                    # how many examples each program passes (what a failing test step keeps the
                    # best attempt by); None: a calibration from before the counts
                    "passed": (
                        {
                            RIGHT: c["canonical"]["passed"],
                            CRASHED: -1,  # does not run: below a program that runs and passes none
                            GENERIC: 0,  # the generic wrong program fails every example there is
                            **{name: m["passed"] for name, m in wrong},
                        }
                        if self.counts
                        else None
                    ),
                    "wrong": [name for name, _ in wrong] or [GENERIC],
                }
            )

    @staticmethod
    def heldout_instances(problems: list[dict[str, Any]], replicas: int = HELDOUT_REPLICAS) -> list[dict[str, Any]]:
        """Each problem under ``replicas`` independent latent draws (fresh ids, same item)."""
        return [{**p, "id": f"{p['base']}#r{r}"} for r in range(replicas) for p in problems]


class SimCodeExecutor(_gsm8k.SimExecutor):
    """Runs workflows in the simulated HumanEval world (same interface as ``WorkflowExecutor``).

    Args:
        task: the :class:`SimCodeTask`.
        pool: the priced pool (every simulated call is booked in its ledger).
        world_seed: seed of the latent draws.
        max_tokens: completion limits per operator (over the real executor's code defaults).
    """

    def __init__(self, task, pool, world_seed: int = 0, max_tokens: dict[str, int] | None = None) -> None:
        super().__init__(task, pool, world_seed, {**DEFAULT_MAX_TOKENS["code"], **(max_tokens or {})})

    def knows(self, p: dict[str, Any], backbone: str, op: str) -> bool:
        m = self.models[backbone]
        logit = m.skill + OP_BONUS.get(op, 0.0) - SLOPE * p["difficulty"] + OFFSET
        return _u(self.world_seed, "know", p["id"], backbone) < 1 / (1 + math.exp(-logit))

    def _wrong(self, p, backbone, key) -> str:
        if _u(self.world_seed, "sys", key) < SYSTEMATIC:
            pick = _u(self.world_seed, "sysm", p["id"], backbone)  # the backbone's systematic mistake
        else:
            pick = _u(self.world_seed, "rndm", key)
        return p["wrong"][int(pick * len(p["wrong"]))]

    def _program(self, p, backbone, op, key) -> str:
        if _u(self.world_seed, "broken", key) < BROKEN:
            return CRASHED
        right = KNOW_RIGHT if self.knows(p, backbone, op) else GUESS_RIGHT
        if _u(self.world_seed, "ans", key) < right:
            return RIGHT
        return self._wrong(p, backbone, key)

    def _source(self, node: Node, p, hints, trace: Trace, ctx, k: int = 0, sample: bool = False):
        op = node.op if node.op != "vote" else "generate"
        code = p["code_tokens"]
        need = {"generate": code, "cot": code + 0.8 * code + 40, "programmer": code + 10}[op]
        key = [p["id"], node.backbone, op] + ([ctx["workflow"], ctx["ids"][node.id], k] if sample else [])
        attempts = 1 + int(node.params.get("retries", 1)) if op == "programmer" else 1
        extra = code * len(hints)  # earlier programs shown as hints
        answer = None
        for a in range(attempts):
            if not self._bill(node, p, op, need, extra, trace, ctx):
                return None
            answer = self._program(p, node.backbone, op, key + [a] if a else key)
            if op != "programmer" or answer != CRASHED:
                break  # a programmer runs its program and rewrites one that does not run
        good = [h for h in hints if h is not None]
        if good and not self.knows(p, node.backbone, op):
            top, n = Counter(good).most_common(1)[0]
            if n * 2 > len(good) and _u(self.world_seed, "hint", key, ctx["ids"][node.id]) < HINT_FOLLOW:
                answer = top  # follows a clear majority of the earlier steps
        if op == "programmer" and answer == CRASHED:
            return None  # "no working program"
        return answer

    def vote(self, p, ballots: list[str]) -> str | None:
        """The real code vote: group by behaviour on the examples, passing groups first, then the
        largest, ties to the first seen; the group's first program wins."""
        if not ballots:
            return None
        groups: dict[str, list[int]] = {}
        passes: dict[str, bool] = {}
        for k, b in enumerate(ballots):
            sig, ok = p["behaviour"][b]
            groups.setdefault(sig, []).append(k)
            passes[sig] = passes.get(sig, False) or ok
        best = max(groups, key=lambda g: (passes[g], len(groups[g]), -groups[g][0]))
        return ballots[groups[best][0]]

    def test(self, node: Node, p, prev: str | None, trace: Trace, ctx) -> tuple[str | None, str]:
        """The real ``test`` operator: run the program on the examples; on a failure ask for a fix.
        When no attempt passes every example, the one that passes the most is kept (ties: the
        earliest, so the input wins them), as the operator does. A calibration without example
        counts (``hflow_sim_code_calibration_v1.json`` of runs 1-6, ``_v2`` of run 7) keeps the
        last fix, as the operator did when those runs were made, so they replay as measured."""
        if prev is None:
            return None, "nothing to test"
        current = prev
        retries = int(node.params.get("retries", 1))
        key = [p["id"], node.backbone, ctx["workflow"], ctx["ids"][node.id]]
        counts = p["passed"]
        best = (counts[current], 0, current) if counts is not None else None
        for attempt in range(retries + 1):
            if p["behaviour"][current][1]:
                return current, f"tests pass (round {attempt})"
            if counts is not None and counts[current] > best[0]:
                best = (counts[current], attempt, current)
            if attempt == retries:
                break
            code = p["code_tokens"]
            if not self._bill(node, p, "test", code, code + 30, trace, ctx):
                continue  # a truncated fix leaves the program as it was
            fix = TEST_FIX_KNOWN if self.knows(p, node.backbone, "test") else TEST_FIX_GUESS
            if _u(self.world_seed, "tfix", key, attempt) < fix:
                current = RIGHT
            else:
                current = self._wrong(p, node.backbone, key + [attempt])
        if best is None:
            return current, "tests fail"
        n, k, kept = best
        if not p["examples"]:
            what = "no examples, it does not run"
        elif n < 0:
            what = "it does not reach the examples"
        else:
            what = f"{n}/{p['examples']} examples pass"
        return kept, f"tests fail; kept round {k} ({what})"

    refine_rates = (FIX_KNOWN, FIX_GUESS, BREAK)

    def shows_working(self, workflow: Workflow) -> bool:
        return workflow_shows_working(workflow)

    def right(self, p) -> str:
        return RIGHT

    def wrong(self, p, backbone: str, key) -> str:
        return self._wrong(p, backbone, key)

    def review_tokens(self, p) -> int:
        return p["code_tokens"]

    def other_step(self, node: Node, p, ins, trace: Trace, ctx) -> tuple[str | None, str]:
        if node.op == "test":
            return self.test(node, p, ins[0], trace, ctx)
        return (ins[0] if ins else None), ""  # format: no change to the program

    def output_text(self, final: str | None, shows: bool) -> str:
        return ("Reasoning: ... " if shows else "") + f"```python\n# program {final}\n```"


# the search script builds executors by this name
SimExecutor = SimCodeExecutor


def SimTask(path: str, calibration: str | Path = CALIBRATION) -> SimCodeTask:  # noqa: N802 - the search script's constructor name
    return SimCodeTask(path, calibration)


def workflow_shows_working(workflow: Workflow) -> bool:
    """Whether the workflow's traces show a reasoning step (a ``cot`` step somewhere)."""
    return any(n.op in SHOWS_WORK for n in workflow.nodes)


def shows_working(problem: dict[str, Any], trace: dict[str, Any]) -> float:
    """The hidden criterion of the preference benchmark (1.0 when the trace shows a reasoning step)."""
    return float(any(s["op"] in SHOWS_WORK for s in trace["steps"]))


def enumerate_workflows(backbones: list[str]) -> list[Workflow]:
    """The GSM8K world's small shapes (:func:`hflow_sim.enumerate_workflows`) plus the shapes with a
    ``test`` step: a call or a k-sample vote then a test, a call then a test then a refine, a call
    then a refine then a test, a call then two tests, and a vote over two calls then a test."""
    out = list(_gsm8k.enumerate_workflows(backbones))
    src = [(op, b) for op in ("generate", "cot", "programmer") for b in backbones]

    def node(i, op, b, **params):
        return Node(f"n{i}", op, backbone=b, params=params)

    def chain(*nodes):
        return Workflow(list(nodes), [(f"n{i}", f"n{i + 1}") for i in range(len(nodes) - 1)], f"n{len(nodes) - 1}")

    for op, b in src:
        for t in backbones:
            out.append(chain(node(0, op, b), node(1, "test", t)))
            for r in backbones:
                out.append(chain(node(0, op, b), node(1, "test", t), node(2, "refine", r)))
                out.append(chain(node(0, op, b), node(1, "refine", r), node(2, "test", t)))
                out.append(chain(node(0, op, b), node(1, "test", t), node(2, "test", r)))
    for b in backbones:
        for k in (3, 5):
            for t in backbones:
                out.append(chain(node(0, "vote", b, samples=k), node(1, "test", t)))
    for i, x in enumerate(src):
        for y in src[i + 1 :]:
            out += [_gsm8k.vote_then(x, y, backbones[0], "test", t) for t in backbones]
    unique: dict[str, Workflow] = {}
    for wf in out:
        unique.setdefault(wf.hash(), wf)
    return list(unique.values())


def calibration_table(task: SimCodeTask, cal_path: str | Path = CALIBRATION) -> dict[str, Any]:
    """The calibration figures the docs report."""
    cal = json.loads(Path(cal_path).read_text())
    probs = cal["problems"]
    wrong = [[m for m in c["mutants"] if not m["hidden"]] for c in probs]
    with_ex = [w for w, c in zip(wrong, probs) if c["examples"] and w]
    caught = [sum(not m["examples"] for m in w) / len(w) for w in with_ex]
    return {
        "problems": len(probs),
        "with_examples": sum(c["examples"] > 0 for c in probs),
        "examples_mean": statistics.mean(c["examples"] for c in probs),
        "mutants": sum(len(c["mutants"]) for c in probs),
        "mutants_wrong": sum(len(w) for w in wrong),
        "mutants_wrong_passing_examples": sum(m["examples"] for w in wrong for m in w),
        "mutants_equivalent": sum(m["hidden"] for c in probs for m in c["mutants"]),
        "mutants_timed_out": sum(m["timed_out"] for c in probs for m in c["mutants"]),
        "problems_without_wrong_mutant": sum(not w for w in wrong),
        "catch_rate_mean_over_problems_with_examples": statistics.mean(caught),
        "catch_rate_median": statistics.median(caught),
        "problems_all_wrong_caught": sum(c == 1.0 for c in caught),
        "canonical_tokens_mean": statistics.mean(c["canonical_tokens"] for c in probs),
        "prompt_tokens_mean": statistics.mean(c["prompt_tokens"] for c in probs),
        "branches_mean": statistics.mean(c["branches"] for c in probs),
        "canonical_failures": cal["canonical_failures"],
        "calibration_seconds": cal["seconds"],
    }


def main() -> None:
    """Prints the calibration table and the enumerated world's figures (the optimum, the best
    single call, the expensive single call, the share of workflows within 1 point)."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument(
        "--data",
        default=str(
            Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
        ),
        help="HumanEval.jsonl.gz; the calibration cache must cover its problems "
        "(default: ../shared/data/humaneval/HumanEval.jsonl.gz)",
    )
    ap.add_argument(
        "--world-seed",
        type=int,
        default=0,
        help="seed of the world: which items are held out and every latent draw (default: 0)",
    )
    ap.add_argument(
        "--heldout",
        type=int,
        default=64,
        help="held-out problems that score every enumerated workflow, each under 8 latent draws (default: 64)",
    )
    ap.add_argument("--top", type=int, default=15, help="workflows to print, best fitness first (default: 15)")
    args = ap.parse_args()
    start = time.time()
    task = SimCodeTask(args.data)
    print(json.dumps(calibration_table(task)))
    order = list(task.problems)
    random.Random(args.world_seed).shuffle(order)
    heldout = task.heldout_instances(order[: args.heldout])
    rows = []
    for wf in enumerate_workflows(["cheap", "mid", "o1"]):
        traces = SimCodeExecutor(task, sim_pool(), args.world_seed).run(wf, heldout)
        acc = sum(t.score for t in traces) / len(traces)
        cost = sum(t.cost for t in traces) / len(traces)
        rows.append(
            {
                "describe": wf.describe(),
                "fitness": acc - 5.0 * cost,
                "accuracy": acc,
                "cost": cost,
                "shows": workflow_shows_working(wf),
            }
        )
    rows.sort(key=lambda r: -r["fitness"])
    for r in rows[: args.top]:
        print(f"{r['fitness']:.3f} {r['accuracy']:.3f} {r['cost']:.4f} {int(r['shows'])} {r['describe']}")
    singles = [r for r in rows if ";" not in r["describe"] and "vote" not in r["describe"]]
    for r in sorted(singles, key=lambda r: -r["fitness"]):
        print(f"single {r['fitness']:.3f} {r['accuracy']:.3f} {r['cost']:.4f} {r['describe']}")
    best = rows[0]["fitness"]
    print(
        json.dumps(
            {
                "workflows": len(rows),
                "within_1pt": sum(r["fitness"] >= best - 0.01 for r in rows) / len(rows),
                "within_2pt": sum(r["fitness"] >= best - 0.02 for r in rows) / len(rows),
                "best_with_cot": next(r for r in rows if r["shows"]),
                "best_with_test": next(r for r in rows if "test" in r["describe"]),
                "best_without_test": next(r for r in rows if "test" not in r["describe"]),
                "seconds": round(time.time() - start, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
