"""The reflective optimizer: an optimizer backbone proposes prompt and structure edits from evidence.

Like AFlow's optimizer (which is shown the graph, its score, experience and failure logs) and GEPA's
reflection on traces, each request shows the parent workflow, its score on the search problems, up
to ``max_failures`` failing problems with what every step produced, the edits that already failed on
this parent, and, for crossover-style proposals, a second parent with its score. Every call goes
through :meth:`BackbonePool.complete` with role ``optimizer``, so it is priced in the ledger; the
search also counts each call as one problem run of its budget.
"""

from __future__ import annotations

import re
from typing import Any

from lightning_agents.hflow.backbones import BackbonePool, Request, request_seed
from lightning_agents.hflow.genome import Node, Workflow

__all__ = ["AGENT_STRUCTURE_EDITS", "STRUCTURE_EDITS", "ReflectiveOptimizer"]

# Structure edits the optimizer may choose from (applied by the mutator).
STRUCTURE_EDITS = [
    "add:cot",
    "add:programmer",
    "add:vote",
    "add:refine",
    "add:test",
    "add:generate",
    "remove",
    "backbone",
    "params",
]
# Tasks with tools: a verify step after the agent, or the agent's settings (turns, temperature).
AGENT_STRUCTURE_EDITS = ["add:verify", "remove", "backbone", "params"]
# Steps whose text is an episode transcript (calls and observations) get more room in the evidence.
_LONG_STEPS = {"agent": 1500, "verify": 1000}
_TAG = re.compile(r"<instruction>(.*?)(?:</instruction>|$)", re.DOTALL | re.IGNORECASE)
_EDIT = re.compile(r"<edit>\s*([a-z:]+)\s*(?:</edit>|$)", re.IGNORECASE)


def _clip(text: Any, n: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 3] + "..."


class ReflectiveOptimizer:
    """Asks an optimizer backbone for a better node prompt or the next structure edit.

    Args:
        pool: the backbone pool (the optimizer must be a member; its calls are booked there).
        backbone: pool name of the optimizer model.
        task_name: shown to the optimizer.
        max_failures: failing problems shown per request.
        max_tokens: completion limit of an optimizer reply.
        seed: seed material for its sampled calls.
        structure_edits: the edits :meth:`propose_edit` may choose from (default
            :data:`STRUCTURE_EDITS`; tasks with tools: :data:`AGENT_STRUCTURE_EDITS`).
    """

    def __init__(
        self,
        pool: BackbonePool,
        backbone: str,
        task_name: str,
        max_failures: int = 3,
        max_tokens: int = 400,
        seed: int = 0,
        structure_edits: list[str] | None = None,
    ) -> None:
        pool.get(backbone)
        self.structure_edits = list(structure_edits or STRUCTURE_EDITS)
        self.pool = pool
        self.backbone = backbone
        self.task_name = task_name
        self.max_failures = max_failures
        self.max_tokens = max_tokens
        self.seed = seed
        self.calls = 0

    def _evidence(
        self,
        workflow: Workflow,
        score: float,
        failures: list[tuple[dict, dict]],
        other: tuple[Workflow, float] | None,
        failed_edits: set[str],
    ) -> str:
        lines = [
            f"Task: {self.task_name}.",
            f"Workflow (score {score:.3f} on the search problems):",
            workflow.describe(),
        ]
        for n in workflow.nodes:
            if n.prompt:
                lines.append(f"  prompt of {n.id} ({n.op}): {_clip(n.prompt, 300)}")
        if other is not None:
            lines += [f"A second workflow (score {other[1]:.3f}):", other[0].describe()]
            for n in other[0].nodes:
                if n.prompt:
                    lines.append(f"  prompt of its {n.id} ({n.op}): {_clip(n.prompt, 300)}")
        if failed_edits:
            lines.append("Edits already tried on this workflow that made it worse: " + ", ".join(sorted(failed_edits)))
        for k, (problem, trace) in enumerate(failures[: self.max_failures]):
            lines.append(f"Failure {k + 1}: problem {problem['id']}: {_clip(problem.get('question'), 600)}")
            if isinstance(problem.get("reference"), str) and len(problem["reference"]) < 40:
                lines.append(f"  expected answer: {problem['reference']}")
            for s in trace.get("steps", []):
                lines.append(
                    f"  [{s['node']} {s['op']}@{s.get('backbone')}] {_clip(s.get('text'), _LONG_STEPS.get(s['op'], 400))}"
                    + (f" (note: {s['note']})" if s.get("note") else "")
                )
            lines.append(f"  final answer: {_clip(trace.get('answer'), 200)}; score {trace.get('score')}")
        return "\n".join(lines)

    def _ask(self, system: str, user: str, generation: int, key: Any) -> str:
        req = Request(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            max_tokens=self.max_tokens,
            temperature=0.7,
            seed=request_seed(self.seed, generation, self.calls, key),
        )
        self.calls += 1
        out = self.pool.complete(self.backbone, [req], role="optimizer", generation=generation)[0]
        return "" if out.error else out.text

    def propose_prompt(
        self,
        workflow: Workflow,
        node: Node,
        score: float,
        failures: list[tuple[dict, dict]],
        other: tuple[Workflow, float] | None = None,
        failed_edits: set[str] = frozenset(),
        generation: int = 0,
    ) -> str:
        """A new instruction for ``node`` (its current one when the reply holds none)."""
        system = (
            "You improve the instructions of one step of an LLM workflow. Study the failures, find what the "
            "step does wrong, and write a better instruction for it. Keep what works. Reply with the new "
            "instruction between <instruction> and </instruction>."
        )
        user = (
            self._evidence(workflow, score, failures, other, failed_edits)
            + f"\nRewrite the instruction of step {node.id} ({node.op}); current: {node.prompt or '(default)'}"
        )
        text = self._ask(system, user, generation, [workflow.hash(), node.id])
        match = _TAG.search(text)
        new = (match.group(1) if match else text).strip().strip('"').strip()
        return new[:1000] if new else node.prompt

    def propose_edit(
        self,
        workflow: Workflow,
        score: float,
        failures: list[tuple[dict, dict]],
        other: tuple[Workflow, float] | None = None,
        failed_edits: set[str] = frozenset(),
        generation: int = 0,
    ) -> str | None:
        """One of the optimizer's structure edits (None when the reply names none)."""
        system = (
            "You improve the structure of an LLM workflow (a DAG of steps). Study the failures and choose ONE "
            "edit from: " + ", ".join(self.structure_edits) + ". Reply with a one-sentence reason and the edit "
            "between <edit> and </edit>."
        )
        text = self._ask(
            system,
            self._evidence(workflow, score, failures, other, failed_edits),
            generation,
            [workflow.hash(), "edit"],
        )
        match = _EDIT.search(text)
        edit = match.group(1).lower() if match else None
        return edit if edit in self.structure_edits else None
