"""The HFlow genome: a workflow is a small DAG of operator nodes, each with a prompt and a backbone.

A :class:`Workflow` is plain data (no torch, no Lightning): it validates itself with networkx,
serialises to readable YAML/JSON and back, hashes canonically (the cache key of its evaluations)
and draws itself as a PNG. Running it is :mod:`lightning_agents.hflow.operators`' job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from lightning_agents.errors import LightningAgentsError

__all__ = [
    "AGENT_OPERATORS",
    "OPERATORS",
    "PARAM_DEFAULTS",
    "SINGLE_TURN_OPERATORS",
    "Node",
    "Workflow",
    "WorkflowError",
    "calls_no_model",
    "canonical_params",
    "has_tools",
    "operator_arity",
    "operators_for",
]

# Operator name -> (min inputs, max inputs or None for unbounded).
# generate / cot / programmer / vote may start a chain (0 inputs); with inputs they see the
# upstream answers as hints (vote counts them as ballots). refine / test / format transform
# exactly one upstream result. agent runs a multi-turn tool-using episode in the problem's world
# (it always starts one); verify continues an upstream episode in the same world.
OPERATORS: dict[str, tuple[int, int | None]] = {
    "generate": (0, None),
    "cot": (0, None),
    "vote": (0, None),
    "programmer": (0, None),
    "refine": (1, 1),
    "test": (1, 1),
    "format": (1, 1),
    "agent": (0, 0),
    "verify": (1, 1),
}
# Operators that make no model call, so they carry no backbone.
BACKBONE_FREE = frozenset({"format"})
#: Operators of tasks with tools: their results are episodes (a conversation and a world), which
#: only another of them can take as input.
AGENT_OPERATORS: tuple[str, ...] = ("agent", "verify")
#: Operators of single-turn tasks, in the order the search has always drawn them from.
SINGLE_TURN_OPERATORS: tuple[str, ...] = tuple(op for op in OPERATORS if op not in AGENT_OPERATORS)


def has_tools(task: Any) -> bool:
    """Whether ``task`` gives its model tools (then workflows are episodes: ``agent`` / ``verify``)."""
    return bool(getattr(task, "tools", None))


def operators_for(task: Any) -> tuple[str, ...]:
    """The operators that make sense for ``task``: :data:`AGENT_OPERATORS` when it has tools (its
    answers are episodes in a world), else :data:`SINGLE_TURN_OPERATORS`."""
    return AGENT_OPERATORS if has_tools(task) else SINGLE_TURN_OPERATORS


def calls_no_model(op: str, params: dict[str, Any], n_inputs: int) -> bool:
    """Whether a node makes no model call: ``format``, and a ``vote`` that only counts its inputs'
    ballots (no samples of its own), whose backbone and sampling settings are never used."""
    if op in BACKBONE_FREE:
        return True
    return op == "vote" and n_inputs > 0 and int(params.get("samples", 0)) == 0


def _canonical_setup(node: Node, n_inputs: int) -> tuple[str, str | None, dict[str, Any]]:
    """``(prompt, backbone, params)`` of ``node`` as far as they change what it computes: a node that
    calls no model has no backbone, and a vote that draws no samples uses no prompt either."""
    if not calls_no_model(node.op, node.params, n_inputs):
        return node.prompt, node.backbone, canonical_params(node.op, node.params, n_inputs)
    prompt = "" if node.op == "vote" else node.prompt  # format's prompt is its answer template
    return prompt, None, canonical_params(node.op, node.params, n_inputs)


class WorkflowError(LightningAgentsError, ValueError):
    """A workflow that is not a valid HFlow DAG (the message says which rule it breaks)."""


# Param values an operator uses when the param is absent; spelled-out defaults do not change the hash.
PARAM_DEFAULTS: dict[str, dict[str, Any]] = {
    "generate": {"temperature": 0.0},
    "cot": {"temperature": 0.0},
    "refine": {"temperature": 0.0},
    "programmer": {"temperature": 0.0, "retries": 1},
    "test": {"temperature": 0.0, "retries": 1},
    "vote": {"temperature": 0.7},
    "format": {},
    "agent": {"temperature": 0.0, "max_turns": 7, "max_tool_calls": 8},
    "verify": {"temperature": 0.0, "max_turns": 3, "max_tool_calls": 8, "when": "unfinished"},
}


def canonical_params(op: str, params: dict[str, Any], n_inputs: int) -> dict[str, Any]:
    """``params`` without entries equal to the operator's defaults (vote's sample count depends on
    its inputs), and none at all for a vote that draws no samples (its temperature is never used)."""
    if op == "vote" and calls_no_model(op, params, n_inputs):
        return {}
    defaults = dict(PARAM_DEFAULTS.get(op, {}))
    if op == "vote":
        defaults["samples"] = 0 if n_inputs else 3
    return {k: v for k, v in sorted(params.items()) if defaults.get(k, object()) != v}


def operator_arity(op: str) -> tuple[int, int | None]:
    """``(min, max)`` number of inputs of operator ``op``; ``max`` is None when unbounded."""
    try:
        return OPERATORS[op]
    except KeyError:
        raise WorkflowError(f"unknown operator {op!r}; expected one of {sorted(OPERATORS)}") from None


@dataclass
class Node:
    """One operator node of a workflow.

    Args:
        id: unique name of the node inside its workflow.
        op: operator, one of :data:`OPERATORS`.
        prompt: the node's instruction (system prompt; for ``format`` the answer template with
            ``{answer}``). Empty means the operator's default.
        backbone: name of the model in the backbone pool that serves this node (None for
            ``format``, which calls no model).
        params: operator settings, e.g. ``{"samples": 5, "temperature": 0.8}`` for ``vote`` or
            ``{"retries": 2}`` for ``programmer``.
    """

    id: str
    op: str
    prompt: str = ""
    backbone: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form; keys in a stable order for readable YAML."""
        out: dict[str, Any] = {"id": self.id, "op": self.op, "prompt": self.prompt, "backbone": self.backbone}
        if self.params:
            out["params"] = dict(self.params)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        """Inverse of :meth:`to_dict`; unknown keys are an error rather than silently dropped."""
        if not isinstance(data, dict):
            raise WorkflowError(f"a node must be a mapping, got {type(data).__name__}")
        unknown = set(data) - {"id", "op", "prompt", "backbone", "params"}
        if unknown:
            raise WorkflowError(f"node {data.get('id')!r} has unknown keys {sorted(unknown)}")
        for key in ("id", "op"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise WorkflowError(f"node needs a non-empty string {key!r}: {data}")
        return cls(
            id=data["id"],
            op=data["op"],
            prompt=str(data.get("prompt") or ""),
            backbone=data.get("backbone"),
            params=dict(data.get("params") or {}),
        )


@dataclass
class Workflow:
    """A DAG of operator nodes with one output node.

    Every node must lead to the output (no dead branches), the output must be the only sink, and
    each operator's number of inputs must be within its arity (:data:`OPERATORS`).

    Args:
        nodes: the operator nodes.
        edges: ``(source id, target id)`` pairs; the target reads the source's result.
        output: id of the node whose result is the workflow's answer.
        name: free label (not part of the hash).
    """

    nodes: list[Node]
    edges: list[tuple[str, str]] = field(default_factory=list)
    output: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        self.edges = [tuple(e) for e in self.edges]  # type: ignore[misc]
        if not self.output and len(self.nodes) == 1:
            self.output = self.nodes[0].id

    # ----------------------------------------------------------------------------- structure
    def node(self, node_id: str) -> Node:
        """The node called ``node_id``."""
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f"workflow has no node {node_id!r}")

    def graph(self) -> nx.DiGraph:
        """The workflow as a networkx DiGraph whose node attribute ``node`` is the :class:`Node`."""
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.id, node=n)
        g.add_edges_from(self.edges)
        return g

    def predecessors(self, node_id: str) -> list[str]:
        """Input node ids of ``node_id`` in edge order (the order hints and ballots are given in)."""
        return [s for s, t in self.edges if t == node_id]

    def topological_order(self) -> list[str]:
        """Node ids in an execution order; ties broken by node order so runs are deterministic."""
        index = {n.id: i for i, n in enumerate(self.nodes)}
        return list(nx.lexicographical_topological_sort(self.graph(), key=lambda v: index[v]))

    def validate(self, backbones: Iterable[str] | None = None, max_nodes: int | None = None) -> Workflow:
        """Raise :class:`WorkflowError` unless this is a valid workflow; returns self.

        Args:
            backbones: names available in the pool; when given, every node's backbone must be one.
            max_nodes: upper bound on the number of nodes.
        """
        if not self.nodes:
            raise WorkflowError("a workflow needs at least one node")
        ids = [n.id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise WorkflowError(f"duplicate node ids in {ids}")
        if max_nodes is not None and len(ids) > max_nodes:
            raise WorkflowError(f"{len(ids)} nodes exceed the limit of {max_nodes}")
        known = set(ids)
        for s, t in self.edges:
            if s not in known or t not in known:
                raise WorkflowError(f"edge {s}->{t} names a node that does not exist")
            if s == t:
                raise WorkflowError(f"self-loop on {s}")
        if len(set(self.edges)) != len(self.edges):
            raise WorkflowError("duplicate edges")
        if self.output not in known:
            raise WorkflowError(f"output node {self.output!r} does not exist")
        g = self.graph()
        if not nx.is_directed_acyclic_graph(g):
            raise WorkflowError(f"workflow has a cycle: {nx.find_cycle(g)}")
        sinks = [v for v in g if g.out_degree(v) == 0]
        if sinks != [self.output]:
            raise WorkflowError(f"the output {self.output!r} must be the only sink, sinks are {sinks}")
        dead = known - nx.ancestors(g, self.output) - {self.output}
        if dead:
            raise WorkflowError(f"nodes {sorted(dead)} do not lead to the output")
        pool = set(backbones) if backbones is not None else None
        for n in self.nodes:
            lo, hi = operator_arity(n.op)
            k = g.in_degree(n.id)
            if k < lo or (hi is not None and k > hi):
                raise WorkflowError(
                    f"{n.op} node {n.id!r} has {k} inputs; it takes {lo}..{hi if hi is not None else 'any'}"
                )
            if n.op in BACKBONE_FREE:
                continue
            if not n.backbone:
                raise WorkflowError(f"{n.op} node {n.id!r} needs a backbone")
            if pool is not None and n.backbone not in pool:
                raise WorkflowError(f"node {n.id!r} uses backbone {n.backbone!r}, not in the pool {sorted(pool)}")
        if self.node(self.output).op == "test" and not self.predecessors(self.output):
            raise WorkflowError("a test node needs code to test")
        ops = {n.id: n.op for n in self.nodes}
        for s, t in self.edges:
            # An episode (conversation + world) is not an answer text, nor the other way round.
            if (ops[s] in AGENT_OPERATORS) != (ops[t] in AGENT_OPERATORS):
                raise WorkflowError(
                    f"edge {s}->{t}: {ops[s]} feeds {ops[t]}; agent and verify results (episodes) only "
                    "flow into verify nodes, and verify nodes only take them"
                )
        return self

    def is_valid(self, backbones: Iterable[str] | None = None, max_nodes: int | None = None) -> bool:
        """True when :meth:`validate` passes."""
        try:
            self.validate(backbones, max_nodes)
        except WorkflowError:
            return False
        return True

    def backbones(self) -> set[str]:
        """Names of the backbones the workflow calls."""
        return {n.backbone for n in self.nodes if n.backbone and n.op not in BACKBONE_FREE}

    def copy(self) -> Workflow:
        """A deep copy (nodes and params are new objects)."""
        return Workflow.from_dict(self.to_dict())

    # ---------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``{"name", "output", "nodes": [...], "edges": [[src, dst], ...]}``."""
        return {
            "name": self.name,
            "output": self.output,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [list(e) for e in self.edges],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workflow:
        """Inverse of :meth:`to_dict`. Does not validate (call :meth:`validate`)."""
        if not isinstance(data, dict) or "nodes" not in data:
            raise WorkflowError("a workflow must be a mapping with a 'nodes' list")
        edges = []
        for e in data.get("edges") or []:
            if not isinstance(e, (list, tuple)) or len(e) != 2:
                raise WorkflowError(f"an edge must be a [source, target] pair, got {e!r}")
            edges.append((str(e[0]), str(e[1])))
        return cls(
            nodes=[Node.from_dict(n) for n in data["nodes"]],
            edges=edges,
            output=str(data.get("output") or ""),
            name=str(data.get("name") or ""),
        )

    def to_json(self, indent: int | None = 2) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Workflow:
        """Parse :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    def to_yaml(self) -> str:
        """Readable YAML of :meth:`to_dict` (block style, multi-line prompts kept literal)."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True, default_flow_style=None)

    @classmethod
    def from_yaml(cls, text: str) -> Workflow:
        """Parse :meth:`to_yaml` output (or any YAML of the same shape)."""
        import yaml

        return cls.from_dict(yaml.safe_load(text))

    def save(self, path: str | Path) -> Path:
        """Write YAML (``.yaml``/``.yml``) or JSON (anything else) to ``path``."""
        path = Path(path)
        text = self.to_yaml() if path.suffix in (".yaml", ".yml") else self.to_json()
        path.write_text(text)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Workflow:
        """Read a workflow written by :meth:`save`."""
        path = Path(path)
        text = path.read_text()
        return cls.from_yaml(text) if path.suffix in (".yaml", ".yml") else cls.from_json(text)

    def canonical_ids(self) -> dict[str, str]:
        """Node id -> canonical id (``n0``, ``n1``, ...) that does not depend on names or list order.

        Each node gets a signature from its content (operator, prompt, backbone, params with
        defaults removed) and its inputs' signatures in input order; canonical ids number the nodes
        by signature. Two workflows that compute the same thing therefore get the same ids, which
        the executor also uses to seed sampled calls, so they also produce the same samples.
        """
        try:
            order = self.topological_order()
        except nx.NetworkXUnfeasible:
            order = [n.id for n in self.nodes]
        through = self._pass_through()
        sig: dict[str, str] = {}
        for v in order:
            if v in through:
                sig[v] = sig.get(through[v], through[v])  # computes what its input computes
                continue
            node = self.node(v)
            preds = self.predecessors(v)
            content = [node.op, *_canonical_setup(node, len(preds)), [sig.get(p, p) for p in preds]]
            sig[v] = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        ranked = sorted((v for v in order if v not in through), key=lambda v: (sig[v], order.index(v)))
        ids = {old: f"n{i}" for i, old in enumerate(ranked)}
        # a pass-through vote makes no call, so its id seeds nothing; numbered after the others so
        # theirs are the ids of the workflow without it
        ids.update({v: f"n{len(ranked) + k}" for k, v in enumerate(v for v in order if v in through)})
        return ids

    def _pass_through(self) -> dict[str, str]:
        """Vote node id -> the node whose result it passes on, for each vote with one input and no
        samples of its own: one ballot wins, so it computes what its input computes (the executor
        passes that input's result on unchanged), and a workflow with it hashes as one without it."""
        out: dict[str, str] = {}
        for n in self.nodes:
            preds = self.predecessors(n.id)
            if n.op == "vote" and len(preds) == 1 and calls_no_model(n.op, n.params, 1):
                out[n.id] = preds[0]
        for v in list(out):  # a chain of them passes on the first input that is not one
            seen = {v}
            while out[v] in out and out[v] not in seen:
                seen.add(out[v])
                out[v] = out[out[v]]
        return out

    def canonical(self) -> dict[str, Any]:
        """Structure, prompts, backbones and params with node ids, node order and defaults abstracted away.

        Two workflows that differ only in node names, the order nodes are listed in, or params
        spelled out at their default values compute the same thing, so they share a hash (and a
        cache entry). So do two that differ in the backbone, prompt or temperature of a vote that
        draws no samples (it calls no model), and a workflow with a vote over a single input and
        no samples and the one without it (the vote passes its input's result on). The order of a
        node's inputs counts: it is the order of ballots (a tie goes to the first) and of hints.
        """
        rename = self.canonical_ids()
        through = self._pass_through()

        def source(v: str) -> str:
            return rename.get(through.get(v, v), v)

        nodes = []
        for n in self.nodes:
            if n.id in through:
                continue
            d = {**n.to_dict(), "id": rename[n.id]}
            d["prompt"], d["backbone"], params = _canonical_setup(n, len(self.predecessors(n.id)))
            d.pop("params", None)
            if params:
                d["params"] = params
            nodes.append(d)
        nodes.sort(key=lambda d: int(d["id"][1:]))
        # Input order matters (ballot and hint order), so edges keep their per-target order.
        targets = {t for _, t in self.edges if t not in through}
        edges = sorted(
            ([source(s), rename[t], i] for t in targets for i, s in enumerate(self.predecessors(t))),
            key=lambda e: (int(e[1][1:]), e[2]),
        )
        return {"output": source(self.output), "nodes": nodes, "edges": [e[:2] for e in edges]}

    def hash(self) -> str:
        """Stable 16-hex-digit content hash of :meth:`canonical` (ignores ``name``, node ids and order)."""
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def shape(self) -> str:
        """Hash of the structure alone: operators, backbones and edges, with every prompt and
        param blanked. Prompt and setting variants of one workflow share a shape; the search keeps
        few of them in its population so it cannot fill up with re-draws of one idea."""
        bare = self.copy()
        for n in bare.nodes:
            n.prompt, n.params = "", {}
        return "s" + bare.hash()[1:]

    # ---------------------------------------------------------------------------- drawing
    def render_png(self, path: str | Path | None = None, title: str | None = None, dpi: int = 110) -> bytes:
        """Draw the DAG (operators, backbones, prompt snippets) as a PNG.

        Args:
            path: where to write the PNG; None only returns the bytes.
            title: figure title (default: the workflow's name and hash).
            dpi: resolution.

        Returns:
            The PNG bytes.
        """
        import io

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        g = self.graph()
        # Layers by longest path from a source give a left-to-right flow layout.
        for layer, nodes in enumerate(nx.topological_generations(g)):
            for v in nodes:
                g.nodes[v]["layer"] = layer
        pos = nx.multipartite_layout(g, subset_key="layer")
        colors = {
            "generate": "#9ecae1",
            "cot": "#a1d99b",
            "vote": "#fdae6b",
            "programmer": "#bcbddc",
            "refine": "#fdd0a2",
            "test": "#fc9272",
            "format": "#d9d9d9",
            "agent": "#9ebcda",
            "verify": "#fcbba1",
        }
        width = 2.6 + 2.2 * (max(g.nodes[v]["layer"] for v in g) + 1)
        fig, ax = plt.subplots(figsize=(width, 3.8))
        try:
            labels = {}
            for n in self.nodes:
                snippet = (n.prompt[:28] + "...") if len(n.prompt) > 28 else n.prompt
                extra = ",".join(f"{k}={v}" for k, v in sorted(n.params.items()))
                labels[n.id] = "\n".join(x for x in (f"{n.id}: {n.op}", n.backbone or "", extra, snippet) if x)
            nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowsize=16, node_size=4200)
            nx.draw_networkx_nodes(
                g,
                pos,
                ax=ax,
                node_size=4200,
                node_shape="s",
                node_color=[colors.get(g.nodes[v]["node"].op, "#ffffff") for v in g],
                edgecolors=["#d62728" if v == self.output else "#333333" for v in g],
                linewidths=2,
            )
            nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=6.5)
            ax.set_title(title or f"{self.name or 'workflow'} [{self.hash()}]", fontsize=9)
            ax.axis("off")
            ax.margins(0.25)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        finally:
            plt.close(fig)
        data = buf.getvalue()
        if path is not None:
            Path(path).write_bytes(data)
        return data

    def describe(self) -> str:
        """One line: ``op@backbone -> op@backbone ...`` in execution order."""
        parts = []
        for v in self.topological_order():
            n = self.node(v)
            ins = self.predecessors(v)
            tag = f"{n.op}@{n.backbone}" if n.backbone else n.op
            if n.params:
                tag += "(" + ",".join(f"{k}={val}" for k, val in sorted(n.params.items())) + ")"
            parts.append(f"{v}={tag}" + (f"<-[{','.join(ins)}]" if ins else ""))
        return "; ".join(parts)
