"""A calibrated simulated-backbone world for HFlow benchmarks, built from the real GSM8K items.

The embedded models cannot solve GSM8K, and real endpoints cost money, so the benchmark replaces
the *models* (never the search): a :class:`SimExecutor` runs HFlow workflows with the same
interface as :class:`~lightning_agents.hflow.WorkflowExecutor` (``task``, ``pool``, ``run``),
books every simulated call's tokens in the real :class:`~lightning_agents.hflow.Ledger` at real
prices, and scores the answers. What is simulated and how it is calibrated:

- **Difficulty from the real item**: the number of ``<<a*b=c>>`` calculation steps in the gold
  solution (0-8; 3 on average).
- **Three priced backbones**: ``cheap`` (0.15 / 0.60 $ per M tokens), ``mid`` (2.50 / 10) and
  ``o1`` (15 / 60, an o1-like reasoning model that is billed hidden reasoning tokens, 5x the gold
  solution's length, on every call).
- **Correlated samples**: whether a backbone *knows* a problem is one latent draw per
  (problem, backbone), shared by all its calls; a backbone that knows answers right 92% of the
  time, one that does not 12%, and its wrong answers repeat one systematic value 70% of the time.
  So voting over one backbone's samples saturates at what it knows; mixing backbones helps.
- **Operators**: ``cot`` and ``programmer`` know more problems than ``generate`` (logit bonus
  1.0 and 1.5); a program crashes 12% of the time and ``retries`` re-runs it; ``refine`` fixes a
  wrong input when its backbone knows the problem (75%) and rarely otherwise (8%), and breaks a
  right one 4% of the time; a node whose ``max_tokens`` is below the tokens it needs is truncated
  and answers nothing; ``format`` changes nothing.
- **Real token lengths**: prompt tokens from the question's text, completion tokens from the gold
  solution's length (``cot``: 1.1x, ``programmer``: 1.3x + 20, ``generate`` / a vote sample: 12).
- **The hidden criterion** (for the preference benchmark): an answer *shows its working* when the
  trace the rater reads contains a step-by-step solution (a ``cot`` step; a refine or a vote only
  restates a result, a program's printed number is no worked solution); the fitness does not
  measure it, and the optimum does not have it.

Every random draw is a hash of its inputs, so a workflow's trace on a problem is a function of
the workflow (its canonical hash and node ids), the problem and the world seed.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_agents.hflow import BackbonePool, Ledger, Node, Workflow
from lightning_agents.hflow.backbones import Backbone
from lightning_agents.hflow.operators import Trace

_TOKENS = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class SimModel:
    """A simulated backbone: its price and its skill (logit offset)."""

    name: str
    input_price: float
    output_price: float
    skill: float
    reasoning: float = 0.0  # hidden reasoning tokens per gold-solution token, billed as output


MODELS = [SimModel("cheap", 0.15, 0.60, -0.6), SimModel("mid", 2.50, 10.0, 0.9), SimModel("o1", 15.0, 60.0, 3.2, 5.0)]
OP_BONUS = {"generate": 0.0, "vote": 0.0, "cot": 1.0, "programmer": 1.5, "refine": 1.0}
KNOW_RIGHT, GUESS_RIGHT, SYSTEMATIC = 0.92, 0.12, 0.7
CRASH, FIX_KNOWN, FIX_GUESS, BREAK = 0.12, 0.75, 0.08, 0.04
SHOWS_WORK = frozenset({"cot"})
MAX_TOKENS = {"generate": 256, "cot": 512, "vote": 256, "programmer": 512, "refine": 512}


def _u(*parts: Any) -> float:
    h = hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


class _Priced(Backbone):
    kind = "simulated"


class SimTask:
    """GSM8K problems with their simulated difficulty (what HFlow's search sees as the task)."""

    name = "gsm8k-sim"
    domain = "math"

    def __init__(self, path: str, n: int | None = None, seed: int = 0) -> None:
        rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
        problems = []
        for i, r in enumerate(rows):
            gold = r["answer"].rsplit("####", 1)[1].strip().replace(",", "")
            problems.append(
                {
                    "id": f"gsm8k-{i}",
                    "question": r["question"],
                    "reference": gold,
                    "steps": len(re.findall(r"<<", r["answer"])),
                    "q_tokens": len(_TOKENS.findall(r["question"])),
                    "gold_tokens": len(_TOKENS.findall(r["answer"])),
                }
            )
        if n is not None and n < len(problems):
            problems = random.Random(seed).sample(problems, n)
        self.problems = problems

    def sample(self, n: int | None, seed: int = 0) -> list[dict[str, Any]]:
        if n is None or n >= len(self.problems):
            return list(self.problems)
        return random.Random(seed).sample(self.problems, n)

    def example_tests(self, problem: dict[str, Any]) -> None:
        return None


def sim_pool() -> BackbonePool:
    """The three priced backbones (a fresh ledger)."""
    return BackbonePool([_Priced(m.name, m.input_price, m.output_price) for m in MODELS], Ledger())


class SimExecutor:
    """Runs workflows in the simulated world (same interface as ``WorkflowExecutor``).

    Args:
        task: the :class:`SimTask`.
        pool: the priced pool (every simulated call is booked in its ledger).
        world_seed: seed of the latent draws (which problems each backbone knows).
        max_tokens: completion limits per operator (a node's ``max_tokens`` param overrides).
    """

    def __init__(
        self, task: SimTask, pool: BackbonePool, world_seed: int = 0, max_tokens: dict[str, int] | None = None
    ) -> None:
        self.task, self.pool, self.world_seed = task, pool, world_seed
        self.models = {m.name: m for m in MODELS}
        self.max_tokens = {**MAX_TOKENS, **(max_tokens or {})}

    # -------------------------------------------------------------------------- one call
    def knows(self, p: dict[str, Any], backbone: str, op: str) -> bool:
        m = self.models[backbone]
        logit = m.skill + OP_BONUS.get(op, 0.0) - 0.8 * (p["steps"] - 3) + 0.3
        return _u(self.world_seed, "know", p["id"], backbone) < 1 / (1 + math.exp(-logit))

    def _answer(self, p, backbone, op, key) -> str:
        right = KNOW_RIGHT if self.knows(p, backbone, op) else GUESS_RIGHT
        if _u(self.world_seed, "ans", key) < right:
            return p["reference"]
        if _u(self.world_seed, "sys", key) < SYSTEMATIC:
            return f"wrong-{backbone}"  # the backbone's systematic mistake on this problem
        return f"wrong-{int(_u(self.world_seed, 'rnd', key) * 1000)}"

    def _bill(self, node: Node, p, op: str, out_tokens: float, extra_in: int, trace: Trace, ctx) -> bool:
        """Books one call; returns False when the completion limit truncates the answer."""
        m = self.models[node.backbone]
        limit = int(node.params.get("max_tokens", self.max_tokens.get(op, 256)))
        visible = int(out_tokens)
        billed_out = min(visible, limit) + int(m.reasoning * p["gold_tokens"])
        billed_in = p["q_tokens"] + 30 + len(node.prompt) // 4 + extra_in
        self.pool.ledger.record(
            node.backbone,
            billed_in,
            billed_out,
            role="workflow",
            workflow=ctx["workflow"],
            generation=ctx["generation"],
        )
        trace.cost += (billed_in * m.input_price + billed_out * m.output_price) / 1e6
        trace.input_tokens += billed_in
        trace.output_tokens += billed_out
        return visible <= limit

    def _source(self, node: Node, p, hints: list[str | None], trace: Trace, ctx, k: int = 0, sample: bool = False):
        op = node.op if node.op != "vote" else "generate"
        need = {"generate": 12, "cot": 1.1 * p["gold_tokens"], "programmer": 1.3 * p["gold_tokens"] + 20}[op]
        key = [p["id"], node.backbone, op] + ([ctx["workflow"], ctx["ids"][node.id], k] if sample else [])
        attempts = 1 + int(node.params.get("retries", 1)) if op == "programmer" else 1
        answer = None
        for a in range(attempts):
            if not self._bill(node, p, op, need, 10 * len(hints), trace, ctx):
                return None
            if (
                op == "programmer"
                and _u(self.world_seed, "crash", key, a, ctx["workflow"], ctx["ids"][node.id]) < CRASH
            ):
                continue
            answer = self._answer(p, node.backbone, op, key)
            break
        good = [h for h in hints if h is not None]
        if good and not self.knows(p, node.backbone, op):
            top, n = Counter(good).most_common(1)[0]
            if n * 2 > len(good) and _u(self.world_seed, "hint", key, ctx["ids"][node.id]) < 0.7:
                answer = top  # follows a clear majority of the earlier steps
        return answer

    # ------------------------------------------------------------- what a world decides
    #: refine's chance to fix a wrong input when its backbone knows the problem / when it does not,
    #: and to break a right one
    refine_rates = (FIX_KNOWN, FIX_GUESS, BREAK)

    def shows_working(self, workflow: Workflow) -> bool:
        """Whether the workflow's traces show their working (the preference benchmark's criterion)."""
        return workflow_shows_working(workflow)

    def right(self, p) -> str:
        """The right answer to problem ``p``."""
        return p["reference"]

    def wrong(self, p, backbone: str, key) -> str:
        """The answer a step on ``backbone`` gets wrong (what a refine breaks a right answer into)."""
        return f"wrong-{backbone}"

    def vote(self, p, ballots: list[str]) -> str | None:
        """Majority of the ballots, ties to the first seen (a math answer is compared as a string)."""
        if not ballots:
            return None
        counts = Counter(ballots)
        best = max(counts.values())
        return next(b for b in ballots if counts[b] == best)

    def review_tokens(self, p) -> int:
        """Tokens a refine step reads and writes."""
        return p["gold_tokens"]

    def other_step(self, node: Node, p, ins: list[str | None], trace: Trace, ctx) -> tuple[str | None, str]:
        """Operators other than the sources, vote and refine: ``format`` and ``test`` change no math answer."""
        return (ins[0] if ins else None), ""

    def output_text(self, final: str | None, shows: bool) -> str:
        """What the rater reads as the workflow's answer."""
        return ("Working: ... " if shows else "") + f"The answer is {final}."

    # ----------------------------------------------------------------------- workflow
    def run(
        self, workflow: Workflow, problems: list[dict[str, Any]], generation: int = 0, salt: int = 0
    ) -> list[Trace]:
        workflow.validate(self.pool.names)
        ctx = {"workflow": workflow.hash(), "ids": workflow.canonical_ids(), "generation": generation}
        order = workflow.topological_order()
        shows = self.shows_working(workflow)
        fix_known, fix_guess, break_rate = self.refine_rates
        traces = []
        for p in problems:
            t = Trace(p["id"])
            results: dict[str, str | None] = {}
            for v in order:
                node = workflow.node(v)
                ins = [results[u] for u in workflow.predecessors(v)]
                note = ""
                if node.op in ("generate", "cot", "programmer"):
                    out = self._source(node, p, ins, t, ctx, sample=float(node.params.get("temperature", 0)) > 0)
                elif node.op == "vote":
                    n = int(node.params.get("samples", 0 if ins else 3))
                    ballots = [x for x in ins if x is not None]
                    ballots += [
                        a
                        for a in (self._source(node, p, [], t, ctx, k=j, sample=True) for j in range(n))
                        if a is not None
                    ]
                    out = self.vote(p, ballots)
                elif node.op == "refine":
                    prev = ins[0]
                    key = [p["id"], node.backbone, ctx["workflow"], ctx["ids"][node.id]]
                    review = self.review_tokens(p)
                    if not self._bill(node, p, "refine", review, review, t, ctx):
                        out = prev  # a truncated review keeps its input
                    elif prev == self.right(p):
                        out = (
                            prev
                            if _u(self.world_seed, "break", key) >= break_rate
                            else self.wrong(p, node.backbone, key)
                        )
                    else:
                        fix = fix_known if self.knows(p, node.backbone, "refine") else fix_guess
                        out = self.right(p) if _u(self.world_seed, "fix", key) < fix else prev
                else:
                    out, note = self.other_step(node, p, ins, t, ctx)
                results[v] = out
                t.steps.append(
                    {
                        "node": v,
                        "op": node.op,
                        "backbone": node.backbone,
                        "text": str(out),
                        "answer": out,
                        "code": None,
                        "note": note,
                    }
                )
            final = results[workflow.output]
            t.answer = final
            t.output = self.output_text(final, shows)
            t.score = float(final == self.right(p))
            traces.append(t)
        return traces


def vote_then(x: tuple[str, str], y: tuple[str, str], vote_backbone: str, op: str, backbone: str) -> Workflow:
    """Two source calls ``(op, backbone)``, a vote over their answers, then one ``op`` step on ``backbone``."""
    nodes = [Node("n0", x[0], backbone=x[1]), Node("n1", y[0], backbone=y[1])]
    nodes += [Node("n2", "vote", backbone=vote_backbone, params={"samples": 0}), Node("n3", op, backbone=backbone)]
    return Workflow(nodes, [("n0", "n2"), ("n1", "n2"), ("n2", "n3")], "n3")


def workflow_shows_working(workflow: Workflow) -> bool:
    """Whether the workflow's traces show their working (a step-by-step step somewhere)."""
    return any(n.op in SHOWS_WORK for n in workflow.nodes)


def shows_working(problem: dict[str, Any], trace: dict[str, Any]) -> float:
    """The hidden criterion of the preference benchmark (1.0 when the trace shows its working)."""
    return float(any(s["op"] in SHOWS_WORK for s in trace["steps"]))


def enumerate_workflows(backbones: list[str]) -> list[Workflow]:
    """Every workflow of the small shapes: one call, a vote of k samples, a call then a refine, and
    votes over two or three calls (with and without a refine after); ~1,400 workflows."""
    src = [(op, b) for op in ("generate", "cot", "programmer") for b in backbones]
    out: list[Workflow] = []

    def node(i, op, b, **params):
        return Node(f"n{i}", op, backbone=b, params=params)

    for op, b in src:
        out.append(Workflow([node(0, op, b)]))
        for r in backbones:
            out.append(Workflow([node(0, op, b), node(1, "refine", r)], [("n0", "n1")], "n1"))
    for b in backbones:
        for k in (3, 5):
            out.append(Workflow([node(0, "vote", b, samples=k)]))
            for r in backbones:
                out.append(Workflow([node(0, "vote", b, samples=k), node(1, "refine", r)], [("n0", "n1")], "n1"))
    for i, x in enumerate(src):
        for y in src[i + 1 :]:
            out.append(
                Workflow(
                    [node(0, *x), node(1, *y), node(2, "vote", backbones[0], samples=0)],
                    [("n0", "n2"), ("n1", "n2")],
                    "n2",
                )
            )
            for z in src:
                out.append(
                    Workflow(
                        [node(0, *x), node(1, *y), node(2, *z), node(3, "vote", backbones[0], samples=0)],
                        [("n0", "n3"), ("n1", "n3"), ("n2", "n3")],
                        "n3",
                    )
                )
            out += [vote_then(x, y, backbones[0], "refine", r) for r in backbones]
    unique: dict[str, Workflow] = {}
    for wf in out:
        unique.setdefault(wf.hash(), wf)
    return list(unique.values())
