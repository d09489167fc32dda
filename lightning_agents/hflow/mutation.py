"""Variation operators over workflows: edits, crossover and the prompt libraries.

Every edit returns a valid workflow (or raises :class:`WorkflowError`, and :meth:`Mutator.mutate`
retries with fresh random choices). Sampling weights for operators, backbones and edit kinds come
from the experience memory (:meth:`lightning_agents.hflow.memory.ExperienceMemory.steering`), and
``reject`` lets the search refuse a child it has already evaluated or an edit that already failed on
the same parent, so a budget is not spent twice on the same idea.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

import networkx as nx

from lightning_agents.hflow.genome import (
    AGENT_OPERATORS,
    BACKBONE_FREE,
    OPERATORS,
    PARAM_DEFAULTS,
    Node,
    Workflow,
    WorkflowError,
    operator_arity,
)

__all__ = ["AGENT_PROMPT_LIBRARY", "CODE_PROMPT_LIBRARY", "EDIT_KINDS", "PROMPT_LIBRARY", "Mutator", "default_seeds"]

# Template edits for prompt mutation when no optimizer backbone is configured: an instruction
# library per operator (the first entry of each is also the operator default).
PROMPT_LIBRARY: dict[str, list[str]] = {
    "generate": [
        "",
        "Answer the question.",
        "Solve the problem and finish with 'The answer is N.'",
        "Write Python code that prints the answer.",
    ],
    "cot": [
        "",
        "Show the calculation, then state the answer.",
        "Think step by step, then finish with 'The answer is N.'",
    ],
    "vote": ["", "Answer the question.", "Write Python code that prints the answer."],
    "programmer": [
        "",
        "Write a short Python program; print only the result.",
        "Write Python code that computes and prints the final number.",
    ],
    "refine": [
        "",
        "Verify each step of the answer and restate the final answer.",
        "Check the previous answer. If it is wrong, correct it. Finish with 'The answer is N.'",
    ],
    "test": [""],
    "format": ["", "The answer is {answer}."],
}
# Code tasks: instructions about functions, edge cases and tests instead of numbers.
CODE_PROMPT_LIBRARY: dict[str, list[str]] = {
    "generate": [
        "",
        "Write the complete function. Handle empty inputs and edge cases.",
        (
            "Implement the function exactly as the docstring specifies; reply with the whole function in a "
            "```python block."
        ),
    ],
    "cot": ["", "First list the edge cases the docstring implies, then write the whole function in a ```python block."],
    "vote": ["", "Write the complete function in a ```python block."],
    "programmer": ["", "Write the complete function in a ```python block; make sure it passes the docstring examples."],
    "refine": [
        "",
        (
            "Trace the function on each docstring example; fix any mismatch and reply with the whole "
            "function in a ```python block."
        ),
    ],
    "test": [""],
    "format": [""],
}
# Tasks with tools: system prompts of the agent and follow-up instructions of a verify step. They
# are about tools and worlds in general, not one world, so any task with tools can use them.
AGENT_PROMPT_LIBRARY: dict[str, list[str]] = {
    "agent": [
        "",
        "Use the tools to do what the user asks. Read every tool result; if a call fails, fix the cause and "
        "try again. When the request is done, reply in one short sentence.",
        "Look up what you need with the tools before you act, then act, then reply briefly.",
    ],
    "verify": [
        "Check with the tools that the request is fully done. If it is not, finish it, then reply.",
        "Look at the last tool results. If the request is not done, continue with the tools; then reply.",
        # the request made again, in the words the agent first saw ({question} is filled in)
        "{question}",
    ],
}
SOURCE_OPS = [op for op, (lo, _) in OPERATORS.items() if lo == 0 and op not in AGENT_OPERATORS]
CHAIN_OPS = ["refine", "format", "test"]
AGENT_SOURCE_OPS = ["agent"]
AGENT_CHAIN_OPS = ["verify"]
EDIT_KINDS = ["add", "remove", "replace", "prompt", "backbone", "params", "crossover"]


def _fresh_id(wf: Workflow, prefix: str = "n") -> str:
    taken = {n.id for n in wf.nodes}
    i = len(taken)
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"


def _weighted(rng: random.Random, items: list[str], weights: dict[str, float] | None) -> str:
    if not weights:
        return rng.choice(items)
    return rng.choices(items, weights=[max(weights.get(i, 1.0), 1e-6) for i in items], k=1)[0]


class Mutator:
    """Variation operators over workflows; every returned workflow is valid.

    Each edit is retried with fresh random choices until the result validates (at most
    ``attempts`` times); if none does, the parent is returned unchanged with edit ``none``.

    Args:
        backbones: pool names nodes may use.
        rng: the search's random generator.
        max_nodes: most nodes in a workflow.
        op_weights: sampling weights of operators (from memory), None for uniform.
        edit_weights: sampling weights of edit kinds (from memory), None for uniform.
        backbone_weights: sampling weights of backbones (from memory), None for uniform.
        optimizer: ``(workflow, node) -> new prompt`` that rewrites a node's prompt (the reflective
            optimizer, which also sees the parent's score and failures), None for template edits.
        code_task: allow the ``test`` operator and use :data:`CODE_PROMPT_LIBRARY`.
        agent_task: the task has tools: workflows are ``agent`` nodes followed by ``verify`` steps
            (:data:`AGENT_PROMPT_LIBRARY`), with no single-turn operators and no vote branches.
        attempts: retries per edit.
        reject: ``(parent, child, edit) -> True`` to refuse a child (already evaluated, or an edit
            that already failed on this parent); the mutator then tries another edit.
        choice_weights: sampling weights of what an edit chooses, keyed ``kind:choice``
            (``add:refine``, ``replace:programmer``, ``backbone:mid``; from memory), multiplied
            into the operator weights; for ``add`` they also set how often the new node is a
            parallel branch rather than a step after a node. None: as without.
    """

    def __init__(
        self,
        backbones: list[str],
        rng: random.Random,
        max_nodes: int = 5,
        op_weights: dict[str, float] | None = None,
        edit_weights: dict[str, float] | None = None,
        backbone_weights: dict[str, float] | None = None,
        optimizer: Callable[[Workflow, Node], str] | None = None,
        code_task: bool = False,
        attempts: int = 12,
        reject: Callable[[Workflow, Workflow, str], bool] | None = None,
        agent_task: bool = False,
        choice_weights: dict[str, float] | None = None,
    ) -> None:
        if not backbones:
            raise ValueError("the mutator needs at least one backbone")
        self.backbones = list(backbones)
        self.rng = rng
        self.max_nodes = max_nodes
        self.op_weights = op_weights
        self.edit_weights = edit_weights
        self.backbone_weights = backbone_weights
        self.optimizer = optimizer
        self.agent_task = agent_task
        if agent_task:
            self.source_ops, self.chain_ops, self.library = AGENT_SOURCE_OPS, AGENT_CHAIN_OPS, AGENT_PROMPT_LIBRARY
        else:
            self.source_ops = SOURCE_OPS
            self.chain_ops = CHAIN_OPS if code_task else [op for op in CHAIN_OPS if op != "test"]
            self.library = CODE_PROMPT_LIBRARY if code_task else PROMPT_LIBRARY
        self.attempts = attempts
        self.reject = reject
        self.choice_weights = choice_weights

    def _backbone(self) -> str:
        return _weighted(self.rng, self.backbones, self.backbone_weights)

    def _op(self, candidates: list[str], kind: str | None = None) -> str:
        return _weighted(self.rng, candidates, self._weights(kind, candidates, self.op_weights))

    def _weights(self, kind: str | None, items: list[str], base: dict[str, float] | None) -> dict[str, float] | None:
        """``base`` times the memory's weight of choosing each item in an edit of ``kind``."""
        if kind is None or not self.choice_weights:
            return base
        return {i: (base or {}).get(i, 1.0) * self.choice_weights.get(f"{kind}:{i}", 1.0) for i in items}

    def _branch_share(self) -> float:
        """How often ``add`` makes a parallel branch: 1/2, or as memory's add weights split."""
        if not self.choice_weights:
            return 0.5
        w = self._weights("add", SOURCE_OPS + self.chain_ops, None) or {}
        branch = sum(w[o] for o in SOURCE_OPS) / len(SOURCE_OPS)
        chain = sum(w[o] for o in self.chain_ops) / len(self.chain_ops)
        return branch / (branch + chain)

    def new_node(self, wf: Workflow, op: str) -> Node:
        """A node of ``op`` with a fresh id, a library prompt and a random backbone."""
        params: dict[str, Any] = {}
        if op == "vote":
            params = {"samples": self.rng.choice([3, 5])}
        return Node(
            _fresh_id(wf),
            op,
            prompt=self.library[op][0],
            backbone=None if op in BACKBONE_FREE else self._backbone(),
            params=params,
        )

    def random_workflow(self, max_edits: int = 2) -> Workflow:
        """A random valid workflow: one source node plus up to ``max_edits`` additions."""
        first = self.new_node(Workflow([]), self._op(self.source_ops))
        wf = Workflow([first], output=first.id)
        for _ in range(self.rng.randint(0, max_edits)):
            wf, _ = self.mutate(wf, "add")
        return wf

    # ------------------------------------------------------------------------- edits
    def add(self, wf: Workflow, op: str | None = None) -> tuple[Workflow, str]:
        """Add a node: a parallel branch into a vote, or a refine/format/test step after a node
        (tasks with tools: a verify step after a node, since episodes do not vote).

        ``op`` asks for a particular operator (a structure edit the optimizer proposed).
        """
        if len(wf.nodes) >= self.max_nodes:
            raise WorkflowError("workflow is full")
        wf = wf.copy()
        if op is not None and op not in (self.chain_ops if self.agent_task else SOURCE_OPS + self.chain_ops):
            raise WorkflowError(f"cannot add operator {op!r} here")
        if not self.agent_task and ((op is None and self.rng.random() < self._branch_share()) or op in SOURCE_OPS):
            op = op or self._op(SOURCE_OPS, "add")
            new = self.new_node(wf, op)
            return self._branch(wf, new, lambda: self.new_node(wf, "vote")), f"add:{op}"
        op = op or self._op(self.chain_ops, "add")
        target = self.rng.choice(wf.nodes).id
        new = self.new_node(wf, op)
        return self._step(wf, target, new), f"add:{op}"

    def _branch(self, wf: Workflow, new: Node, make_vote: Callable[[], Node]) -> Workflow:
        """Vote ``new`` in at the output of ``wf`` (changed in place): into the output vote, or a
        new vote (``make_vote()``, drawn only when needed) over the old output and ``new``."""
        out = wf.node(wf.output)
        if out.op == "vote":
            wf.nodes.append(new)
            wf.edges.append((new.id, out.id))
            return wf
        if len(wf.nodes) + 2 > self.max_nodes:
            raise WorkflowError("no room for a branch and a vote")
        vote = make_vote()
        vote.params = {"samples": 0}
        wf.nodes.append(new)
        vote.id = _fresh_id(wf)
        wf.nodes.append(vote)
        wf.edges += [(wf.output, vote.id), (new.id, vote.id)]
        wf.output = vote.id
        return wf

    @staticmethod
    def _step(wf: Workflow, target: str, new: Node) -> Workflow:
        """Put ``new`` after node ``target`` of ``wf`` (changed in place), taking over its outputs."""
        wf.nodes.append(new)
        wf.edges = [(new.id, t) if s == target else (s, t) for s, t in wf.edges] + [(target, new.id)]
        if wf.output == target:
            wf.output = new.id
        return wf

    def remove(self, wf: Workflow) -> tuple[Workflow, str]:
        """Remove a node and connect its inputs to its outputs."""
        if len(wf.nodes) < 2:
            raise WorkflowError("cannot remove the only node")
        wf = wf.copy()
        victim = self.rng.choice(wf.nodes)
        return self._remove_node(wf, victim), f"remove:{victim.op}"

    @staticmethod
    def _remove_node(wf: Workflow, victim: Node) -> Workflow:
        """Drop ``victim`` from ``wf`` (changed in place), its inputs wired to its outputs."""
        preds, succs = wf.predecessors(victim.id), [t for s, t in wf.edges if s == victim.id]
        if victim.id == wf.output:
            if len(preds) != 1:
                raise WorkflowError("output with several inputs")
            wf.output = preds[0]
        edges = [e for e in wf.edges if victim.id not in e]
        for t in succs:
            for s in preds:
                if (s, t) not in edges:
                    edges.append((s, t))
        wf.edges = edges
        wf.nodes = [n for n in wf.nodes if n.id != victim.id]
        return wf

    def replace(self, wf: Workflow) -> tuple[Workflow, str]:
        """Change one node's operator to another that fits its number of inputs."""
        wf = wf.copy()
        node = self.rng.choice(wf.nodes)
        ops = self._replacements(wf, node)
        if not ops:
            raise WorkflowError("no operator fits")
        op = self._op(ops, "replace")
        self._set_op(wf, node, op)
        node.backbone = None if op in BACKBONE_FREE else (node.backbone or self._backbone())
        return wf, f"replace:{op}"

    def _replacements(self, wf: Workflow, node: Node) -> list[str]:
        """The operators ``node`` may change to: another one that fits its number of inputs."""
        k = len(wf.predecessors(node.id))
        return [
            op
            for op in OPERATORS
            if op != node.op
            and op in self.source_ops + self.chain_ops
            and operator_arity(op)[0] <= k
            and (operator_arity(op)[1] is None or k <= operator_arity(op)[1])
        ]

    def _set_op(self, wf: Workflow, node: Node, op: str) -> None:
        """Make ``node`` an ``op`` node with that operator's default prompt and settings (its backbone aside)."""
        node.op, node.prompt, node.params = op, self.library[op][0], {}
        if op == "vote":
            node.params = {"samples": 0 if wf.predecessors(node.id) else 3}

    def prompt(self, wf: Workflow) -> tuple[Workflow, str]:
        """Rewrite one node's prompt: by the optimizer backbone, else a template from the library."""
        wf = wf.copy()
        nodes = [n for n in wf.nodes if n.op != "format" or len(self.library["format"]) > 1]
        node = self.rng.choice(nodes)
        if self.optimizer is not None and node.op != "format":
            new = self.optimizer(wf, node)
            how = "optimizer"
        else:
            options = [p for p in self.library[node.op] if p != node.prompt]
            if not options:
                raise WorkflowError("no alternative prompt")
            new, how = self.rng.choice(options), "template"
        if new == node.prompt:
            raise WorkflowError("prompt unchanged")
        node.prompt = new
        return wf, f"prompt:{node.op}:{how}"

    def backbone(self, wf: Workflow) -> tuple[Workflow, str]:
        """Move one node to another backbone."""
        wf = wf.copy()
        nodes = [n for n in wf.nodes if n.op not in BACKBONE_FREE]
        if not nodes or len(self.backbones) < 2:
            raise WorkflowError("nothing to move")
        node = self.rng.choice(nodes)
        others = [b for b in self.backbones if b != node.backbone]
        node.backbone = _weighted(self.rng, others, self._weights("backbone", others, None))
        return wf, f"backbone:{node.backbone}"

    def params(self, wf: Workflow) -> tuple[Workflow, str]:
        """Change an operator setting: vote samples, sampling temperature, retries, the completion limit,
        or an episode's turns and when a verify step steps in."""
        wf = wf.copy()
        node = self.rng.choice([n for n in wf.nodes if n.op not in BACKBONE_FREE] or wf.nodes)
        if node.op not in BACKBONE_FREE and self.rng.random() < 0.25:
            # The completion limit is part of the genome: too short truncates answers, too long pays
            # for rambling.
            # (per turn for an episode: one tool call or a short reply)
            sizes = (32, 48, 64, 96, 128) if node.op in AGENT_OPERATORS else (64, 128, 256, 512, 1024, 2048)
            options = [m for m in sizes if m != node.params.get("max_tokens")]
            node.params["max_tokens"] = self.rng.choice(options)
            return wf, f"params:{node.op}.max_tokens"
        if node.op == "vote":
            choices = [s for s in (0, 3, 5, 7) if s != node.params.get("samples") and (s or wf.predecessors(node.id))]
            node.params["samples"] = self.rng.choice(choices)
            return wf, "params:vote.samples"
        if node.op in ("programmer", "test"):
            node.params["retries"] = self.rng.choice([r for r in (0, 1, 2) if r != node.params.get("retries", 1)])
            return wf, f"params:{node.op}.retries"
        if node.op == "format":
            raise WorkflowError("format has no settings")
        if node.op in AGENT_OPERATORS:
            edit = self._agent_params(node)
            if edit is not None:
                return wf, edit
        node.params["temperature"] = self.rng.choice(
            [t for t in (0.0, 0.5, 1.0) if t != node.params.get("temperature", 0.0)]
        )
        return wf, f"params:{node.op}.temperature"

    def _agent_params(self, node: Node) -> str | None:
        # Episode settings: how many turns the agent gets (too few cuts recoveries off, too many
        # pays for loops) and when a verify step steps in; None leaves the temperature edit that
        # every sampled operator shares.
        defaults = PARAM_DEFAULTS[node.op]
        r = self.rng.random()
        if r < 0.5:
            current = node.params.get("max_turns", defaults["max_turns"])
            node.params["max_turns"] = self.rng.choice([t for t in (2, 3, 5, 7, 9, 11) if t != current])
            return f"params:{node.op}.max_turns"
        if node.op == "verify" and r < 0.75:
            current = node.params.get("when", defaults["when"])
            node.params["when"] = self.rng.choice([w for w in ("unfinished", "errors", "always") if w != current])
            return "params:verify.when"
        return None

    def crossover(self, a: Workflow, b: Workflow) -> tuple[Workflow, str]:
        """Graft a sub-graph of ``b`` (a node and all its ancestors) in place of one of ``a``.

        The replaced part of ``a`` is a node ``x`` plus the ancestors that feed only ``x``; the
        graft's root takes over ``x``'s outgoing edges, so every other node keeps its inputs.
        """
        ga, gb = a.graph(), b.graph()
        x = self.rng.choice(a.nodes).id
        y = self.rng.choice(b.nodes).id
        rest = ga.copy()
        rest.remove_node(x)
        keep_anc = nx.ancestors(rest, a.output) | {a.output} if a.output != x else set()
        drop = {x} | {v for v in nx.ancestors(ga, x) if v not in keep_anc}
        donor = nx.ancestors(gb, y) | {y}
        wf = Workflow(
            [n for n in a.copy().nodes if n.id not in drop],
            [e for e in a.edges if e[0] not in drop and e[1] not in drop],
            a.output,
            a.name,
        )
        rename = {}
        for v in sorted(donor, key=lambda v: [n.id for n in b.nodes].index(v)):
            donor_node = Node.from_dict(b.node(v).to_dict())
            rename[v] = donor_node.id = _fresh_id(wf, "x")
            wf.nodes.append(donor_node)
        wf.edges += [(rename[s], rename[t]) for s, t in b.edges if s in donor and t in donor]
        wf.edges += [(rename[y], t) for s, t in a.edges if s == x and t not in drop]
        if a.output == x:
            wf.output = rename[y]
        return wf, "crossover"

    def mutate(self, wf: Workflow, kind: str | None = None, op: str | None = None) -> tuple[Workflow, str]:
        """Apply one edit (``kind`` or a weighted random one); returns ``(valid workflow, edit)``.

        ``op`` with ``kind="add"`` adds that operator (a directed structure edit).
        """
        kinds = ["add", "remove", "replace", "prompt", "backbone", "params"]
        for _ in range(self.attempts):
            k = kind or _weighted(self.rng, kinds, self.edit_weights)
            try:
                child, edit = self.add(wf, op) if (k == "add" and op) else getattr(self, k)(wf)
                child.validate(self.backbones, self.max_nodes)
            except WorkflowError:
                continue
            if self.reject is not None and self.reject(wf, child, edit):
                continue
            if child.hash() != wf.hash():
                child.name = ""  # a label of the parent no longer describes the child
                return child, edit
        return wf.copy(), "none"

    def neighbours(self, wf: Workflow) -> list[tuple[Workflow, str]]:
        """Every valid workflow one edit away from ``wf``, with no random draw: a step (refine,
        format, test) after any node and a branch voted in at the output (single-turn tasks; a
        verify step with tools), each new node on each backbone; any node's operator replaced by
        each that fits; any node moved to each other backbone; any node removed; any node given
        each other library prompt. Settings edits (temperatures, limits, samples) are left out:
        their values are a search's to find, not a taste's. A new vote node takes the backbone of
        the branch it joins; a new vote branch draws 3 samples. Listed once per distinct child
        (the first edit that makes it), in a fixed order, ``wf`` itself never.
        """
        out: dict[str, tuple[Workflow, str]] = {}

        def put(child: Workflow, edit: str) -> None:
            try:
                child.validate(self.backbones, self.max_nodes)
            except WorkflowError:
                return
            h = child.hash()
            if h != wf.hash() and h not in out:
                child.name = ""
                out[h] = (child, edit)

        def node(child: Workflow, op: str, backbone: str | None) -> Node:
            params = {"samples": 3} if op == "vote" else {}
            return Node(_fresh_id(child), op, prompt=self.library[op][0], backbone=backbone, params=params)

        def on(op: str) -> list[str | None]:
            return [None] if op in BACKBONE_FREE else list(self.backbones)

        if len(wf.nodes) < self.max_nodes:
            for target in [n.id for n in wf.nodes]:
                for op in self.chain_ops:
                    for b in on(op):
                        child = wf.copy()
                        put(self._step(child, target, node(child, op, b)), f"add:{op}")
            if not self.agent_task:
                for op in SOURCE_OPS:
                    for b in on(op):
                        child = wf.copy()
                        try:
                            put(self._branch(child, node(child, op, b), partial(node, child, "vote", b)), f"add:{op}")
                        except WorkflowError:
                            pass
        for i, n in enumerate(wf.nodes):
            for op in self._replacements(wf, n):
                for b in [None] if op in BACKBONE_FREE else ([n.backbone] if n.backbone else list(self.backbones)):
                    child = wf.copy()
                    self._set_op(child, child.nodes[i], op)
                    child.nodes[i].backbone = b
                    put(child, f"replace:{op}")
            if n.op not in BACKBONE_FREE:
                for b in self.backbones:
                    if b != n.backbone:
                        child = wf.copy()
                        child.nodes[i].backbone = b
                        put(child, f"backbone:{b}")
            if len(wf.nodes) > 1:
                child = wf.copy()
                try:
                    put(self._remove_node(child, child.nodes[i]), f"remove:{n.op}")
                except WorkflowError:
                    pass
            for prompt in self.library[n.op]:
                if prompt != n.prompt:
                    child = wf.copy()
                    child.nodes[i].prompt = prompt
                    put(child, f"prompt:{n.op}:template")
        return list(out.values())

    def cross(self, a: Workflow, b: Workflow) -> tuple[Workflow, str]:
        """Crossover with retries; falls back to mutating ``a`` when no graft validates."""
        for _ in range(self.attempts):
            try:
                child, edit = self.crossover(a, b)
                child.validate(self.backbones, self.max_nodes)
            except WorkflowError:
                continue
            if child.hash() not in (a.hash(), b.hash()) and not (self.reject and self.reject(a, child, edit)):
                child.name = ""
                return child, edit
        return self.mutate(a)


def default_seeds(backbones: list[str], agent: bool = False) -> list[Workflow]:
    """The single-call baselines: one ``generate`` node per backbone.

    Args:
        backbones: pool names.
        agent: the task has tools: one ``agent`` node per backbone instead (the plain rollout of
            that model, as :func:`~lightning_agents.rollout.agent_loop.run_agent_loop` runs it).
    """
    op = "agent" if agent else "generate"
    return [Workflow([Node("n0", op, backbone=b)], output="n0", name=f"{op}@{b}") for b in backbones]
