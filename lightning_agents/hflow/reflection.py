"""The reflective optimizer: an optimizer backbone proposes prompt and structure edits from evidence.

Like AFlow's optimizer (which is shown the graph, its score, experience and failure logs) and GEPA's
reflection on traces, each request shows the parent workflow, its score on the search problems, up
to ``max_failures`` failing problems with what every step produced, the edits that already failed on
this parent, and, for crossover-style proposals, a second parent with its score. Every call goes
through :meth:`BackbonePool.complete` with role ``optimizer``, so it is priced in the ledger; the
search also counts each call as one problem run of its budget.

Replies are read as real models write them, not as the prompt asks: the reasoning block of a
reasoning model is dropped, the format restated in prose before the answer ("I will reply between
<instruction> and </instruction>") is skipped, and a reply with no usable proposal (SmolLM2-135M
answers in free text every time) gives no edit instead of its whole text becoming the new prompt.
Such replies are counted and reported, so a weak optimizer shows up in the log instead of silently
filling the population with its chatter.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from lightning_agents.hflow.backbones import BackbonePool, Completion, Request, request_seed
from lightning_agents.hflow.genome import Node, Workflow
from lightning_agents.tasks.answers import strip_reasoning

__all__ = ["AGENT_STRUCTURE_EDITS", "STRUCTURE_EDITS", "ReflectiveOptimizer", "parse_edit", "parse_instruction"]

log = logging.getLogger(__name__)

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
_OPEN, _CLOSE = "<instruction>", "</instruction>"
# A complete fenced block (GEPA's proposer reads its instruction from one).
_FENCED = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
# Bounded content, so a long reply cannot make the match quadratic.
_EDIT = re.compile(r"<edit>([^<]{0,80})(?:</edit>|\Z)", re.IGNORECASE)
_EDIT_SEPARATOR = re.compile(r"\s*[:_\s]\s*")
# Quotes, backticks and markdown emphasis models wrap an edit name in.
_WRAPPING = " \t\n'\"`*."
# An optimizer whose replies mostly hold no proposal is reported once it has made this many calls.
_REPORT_AFTER = 4


def parse_instruction(text: str | None, truncated: bool = False) -> str | None:
    """The instruction an optimizer reply proposes, or ``None`` when it proposes none.

    The last ``<instruction>`` block after the reasoning block counts (an earlier one is usually the
    format restated or a draft). A block left open at the end counts only when the reply finished on
    its own: cut at ``max_tokens``, it is half an instruction. Without tags, the last complete fenced
    block counts, as in GEPA; free text does not (it is chatter as often as an instruction).

    Args:
        text: the reply.
        truncated: the reply stopped at its token limit.
    """
    text = strip_reasoning(text)
    lower = text.lower()
    start = lower.rfind(_OPEN)
    if start >= 0:
        end = lower.find(_CLOSE, start)
        if end < 0 and truncated:
            return None
        body = text[start + len(_OPEN) : end if end >= 0 else len(text)]
    else:
        fenced = None if truncated else _FENCED.findall(text)
        if not fenced:
            return None
        body = fenced[-1]
    body = body.strip().strip("\"'`").strip()
    return body or None


def parse_edit(text: str | None, allowed: list[str]) -> str | None:
    """The structure edit an optimizer reply names, or ``None`` when it names none of ``allowed``.

    Reads ``<edit>`` blocks after the reasoning block, last first, and takes the first that names an
    allowed edit; spelling variants real models write (``add: vote``, ``Add_Vote``, ```` `add:vote` ````)
    count. A reply that is nothing but an edit name counts too.

    Args:
        text: the reply.
        allowed: the edits that may be chosen.
    """
    text = strip_reasoning(text)

    def normal(name: str) -> str:
        return _EDIT_SEPARATOR.sub(":", name.strip(_WRAPPING).lower())

    candidates = [normal(m) for m in reversed(_EDIT.findall(text))]
    if len(text) <= 80:
        candidates.append(normal(text))
    return next((c for c in candidates if c in allowed), None)


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
        # what seeds the next reply: the calls of this search's history, without those of a
        # generation a crash cut short (paid, so in ``calls``, but replayed with the same seeds)
        self.drawn = 0
        self.unusable = 0
        self._warned = False

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

    def _ask(self, system: str, user: str, generation: int, key: Any) -> Completion:
        req = Request(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            max_tokens=self.max_tokens,
            temperature=0.7,
            seed=request_seed(self.seed, generation, self.drawn, key),
        )
        self.drawn += 1
        reply = self.pool.complete(self.backbone, [req], role="optimizer", generation=generation)[0]
        self.calls += not reply.replayed  # a reply served from the call log was counted when it was paid
        return reply

    def _count(self, proposal: Any, reply: Completion) -> None:
        """Count a reply that proposed nothing usable; say so once when most replies are like that."""
        if proposal is not None:
            return
        self.unusable += 1
        if not self._warned and self.calls >= _REPORT_AFTER and self.unusable * 2 > self.calls:
            self._warned = True
            why = reply.error or ("cut at max_tokens" if reply.truncated else f"last reply: {_clip(reply.text, 200)!r}")
            log.warning(
                "optimizer backbone %r: %d of its first %d replies held no usable proposal (%s); "
                "mutation falls back to its rules for those. A model that follows the reply format "
                "or a larger search.optimizer_max_tokens (now %d) would help.",
                self.backbone,
                self.unusable,
                self.calls,
                why,
                self.max_tokens,
            )

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
        """A new instruction for ``node`` (its current one when the reply holds none, see
        :func:`parse_instruction`)."""
        system = (
            "You improve the instructions of one step of an LLM workflow. Study the failures, find what the "
            "step does wrong, and write a better instruction for it. Keep what works. Reply with the new "
            "instruction between <instruction> and </instruction>."
        )
        user = (
            self._evidence(workflow, score, failures, other, failed_edits)
            + f"\nRewrite the instruction of step {node.id} ({node.op}); current: {node.prompt or '(default)'}"
        )
        reply = self._ask(system, user, generation, [workflow.hash(), node.id])
        new = None if reply.error else parse_instruction(reply.text, reply.truncated)
        self._count(new, reply)
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
        """One of the optimizer's structure edits (None when the reply names none, see :func:`parse_edit`)."""
        system = (
            "You improve the structure of an LLM workflow (a DAG of steps). Study the failures and choose ONE "
            "edit from: " + ", ".join(self.structure_edits) + ". Reply with a one-sentence reason and the edit "
            "between <edit> and </edit>."
        )
        reply = self._ask(
            system,
            self._evidence(workflow, score, failures, other, failed_edits),
            generation,
            [workflow.hash(), "edit"],
        )
        edit = None if reply.error else parse_edit(reply.text, self.structure_edits)
        self._count(edit, reply)
        return edit
