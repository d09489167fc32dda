"""Hierarchical experience memory of HFlow, persisted as JSON.

Three levels:

- lineage: every evaluated edit, ``parent -> child`` with its kind (``add:programmer``,
  ``backbone:teacher`` ...) and the fitness change it caused;
- task: what worked on one task: its best workflows and per-operator / per-backbone / per-edit
  statistics, the last both by edit kind (``add``) and by kind and choice (``add:refine``,
  ``backbone:mid``);
- domain (``math``, ``code``): the same statistics pooled over tasks plus the best workflows of
  earlier tasks, which seed a new task's first population and bias which edits the search tries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_agents.atomic import atomic_write_text
from lightning_agents.errors import LightningAgentsError
from lightning_agents.hflow.genome import Workflow
from lightning_agents.json_text import JSONTextError, loads_json

__all__ = ["ExperienceMemory", "MemoryFileError"]

# Statistics a task keeps and its domain pools.
_LEVELS = ("op_stats", "backbone_stats", "edit_stats", "choice_stats")


class MemoryFileError(LightningAgentsError, ValueError):
    """An experience memory file that cannot be read (the message names the file and what is wrong)."""


def _check(state: Any) -> None:
    """Raise ``ValueError`` naming the first part of ``state`` that is not an experience memory's:
    a hand-edited or half-copied file failed later with an ``AttributeError`` from deep in the search."""
    if not isinstance(state, dict):
        raise ValueError(f"the memory is a JSON {type(state).__name__}, not an object")
    for key, kind in (("lineage", list), ("tasks", dict), ("domains", dict)):
        if key not in state:
            raise ValueError(f"experience memory is missing its {key!r} level")
        if not isinstance(state[key], kind):
            raise ValueError(f"its {key!r} level is a {type(state[key]).__name__}, not a {kind.__name__}")
    for level, lists in (("tasks", ("best",)), ("domains", ("seeds", "tasks"))):
        for name, entry in state[level].items():
            where = f"{level}.{name}"
            if not isinstance(entry, dict):
                raise ValueError(f"{where} is a {type(entry).__name__}, not an object")
            for key in lists:
                if not isinstance(entry.get(key, []), list):
                    raise ValueError(f"{where}.{key} is not a list")
            for key in _LEVELS:
                stats = entry.get(key, {})
                ok = isinstance(stats, dict) and all(
                    isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)
                    for v in stats.values()
                )
                if not ok:
                    raise ValueError(f"{where}.{key} is not a table of [count, total] pairs")


def _bump(stats: dict[str, list[float]], key: str, value: float) -> None:
    n, total = stats.get(key, [0, 0.0])
    stats[key] = [n + 1, total + value]


class ExperienceMemory:
    """Lineage, task and domain experience; JSON on disk.

    Args:
        path: JSON file to load from (if it exists) and :meth:`save` to; None keeps it in memory.
        max_lineage: most lineage records kept (oldest dropped) so the file stays small.
        seeds_per_domain: best workflows kept per domain for seeding.
    """

    def __init__(self, path: str | None = None, max_lineage: int = 5000, seeds_per_domain: int = 4) -> None:
        self.path = Path(path) if path else None
        self.max_lineage = max_lineage
        self.seeds_per_domain = seeds_per_domain
        self.data: dict[str, Any] = {"lineage": [], "tasks": {}, "domains": {}}
        if self.path is not None and self.path.is_file():
            try:
                self.load_state_dict(loads_json(self.path.read_text()))
            except (JSONTextError, ValueError) as exc:
                raise MemoryFileError(
                    f"{self.path}: not an HFlow experience memory ({exc}); mend it, or move it away to "
                    "start from an empty memory (a run writes it again when it ends)"
                ) from None

    # ------------------------------------------------------------------------- recording
    def _task(self, task: str, domain: str) -> dict[str, Any]:
        return self.data["tasks"].setdefault(
            task, {"domain": domain, "best": [], "op_stats": {}, "backbone_stats": {}, "edit_stats": {}}
        )

    def record_evaluation(self, task: str, domain: str, workflow: Workflow, fitness: float, keep: int = 5) -> None:
        """Book an evaluated workflow at the task level (operator/backbone stats, best list)."""
        t = self._task(task, domain)
        for node in workflow.nodes:
            _bump(t["op_stats"], node.op, fitness)
            if node.backbone:
                _bump(t["backbone_stats"], node.backbone, fitness)
        h = workflow.hash()
        best = [b for b in t["best"] if b["hash"] != h]
        best.append({"hash": h, "fitness": fitness, "workflow": workflow.to_dict()})
        best.sort(key=lambda b: -b["fitness"])
        t["best"] = best[:keep]

    def record_edit(
        self, task: str, domain: str, edit: str, parent: str, child: str, delta: float, generation: int
    ) -> None:
        """Book one edit's fitness change (lineage level and the task's edit statistics)."""
        self.data["lineage"].append(
            {"task": task, "generation": generation, "edit": edit, "parent": parent, "child": child, "delta": delta}
        )
        if len(self.data["lineage"]) > self.max_lineage:
            del self.data["lineage"][: len(self.data["lineage"]) - self.max_lineage]
        # Statistics by edit kind (add, remove, ...): the level the mutator's edit choice is biased at,
        # and by kind and what it chose (add:refine, backbone:mid, replace:programmer): the level
        # the choice within a kind is biased at.
        t = self._task(task, domain)
        _bump(t["edit_stats"], edit.split(":")[0], delta)
        parts = edit.split(":")
        if len(parts) > 1:
            _bump(t.setdefault("choice_stats", {}), ":".join(parts[:2]), delta)

    def consolidate(self, task: str) -> None:
        """Fold a task's experience into its domain's priors (call once the task's search ends)."""
        t = self.data["tasks"].get(task)
        if t is None:
            return
        d = self.data["domains"].setdefault(
            t["domain"],
            {"op_stats": {}, "backbone_stats": {}, "edit_stats": {}, "choice_stats": {}, "seeds": [], "tasks": []},
        )
        # A task's statistics grow over every run on it (each run with the same memory file adds
        # to them): the domain takes what was added since the task's last fold, so a second run
        # counts too and nothing counts twice. A memory written before folds were recorded holds
        # no record for a task it folded: its statistics so far count as folded.
        folded = d.setdefault("folded", {})
        if task not in d["tasks"]:
            d["tasks"].append(task)
            last: dict[str, Any] = {}
        else:
            last = folded.get(task) or {level: t.get(level, {}) for level in _LEVELS}
        for level in _LEVELS:
            pooled = d.setdefault(level, {})  # memories written before choice_stats lack the level
            before = last.get(level, {})
            for key, (n, total) in t.get(level, {}).items():
                n_prev, t_prev = before.get(key, [0, 0.0])
                if n != n_prev:
                    n0, t0 = pooled.get(key, [0, 0.0])
                    pooled[key] = [n0 + n - n_prev, t0 + total - t_prev]
        folded[task] = json.loads(json.dumps({level: t.get(level, {}) for level in _LEVELS}))
        # the best workflows of every run (a later run's may be better) seed the domain's next tasks
        seeds = {s["hash"]: s for s in d["seeds"]}
        for b in t["best"]:
            seeds[b["hash"]] = {"hash": b["hash"], "fitness": b["fitness"], "workflow": b["workflow"], "task": task}
        d["seeds"] = sorted(seeds.values(), key=lambda s: -s["fitness"])[: self.seeds_per_domain]

    # ---------------------------------------------------------------------------- priors
    def seeds(self, domain: str, backbones: list[str] | None = None, max_nodes: int | None = None) -> list[Workflow]:
        """Best workflows of earlier tasks in ``domain`` that are valid with the current pool."""
        out = []
        for s in self.data["domains"].get(domain, {}).get("seeds", []):
            wf = Workflow.from_dict(s["workflow"])
            if wf.is_valid(backbones, max_nodes):
                out.append(wf)
        return out

    def weights(self, domain: str, level: str, keys: list[str], floor: float = 0.2) -> dict[str, float]:
        """Sampling weights for ``keys`` (operators, backbones or edit kinds) from domain experience.

        Keys are weighted by their mean outcome, shifted so the worst gets ``floor`` of the best,
        and unseen keys get the mean weight: experience biases the search but never rules a choice
        out. Without experience every weight is 1.
        """
        stats = self.data["domains"].get(domain, {}).get(level, {})
        means = {k: stats[k][1] / stats[k][0] for k in keys if k in stats and stats[k][0] > 0}
        if not means:
            return {k: 1.0 for k in keys}
        lo, hi = min(means.values()), max(means.values())
        span = (hi - lo) or 1.0
        scaled = {k: floor + (1 - floor) * (v - lo) / span for k, v in means.items()}
        default = sum(scaled.values()) / len(scaled)
        return {k: scaled.get(k, default) for k in keys}

    def steering(
        self,
        task: str,
        domain: str,
        level: str,
        keys: list[str],
        prior_strength: float = 4.0,
        temperature: float | None = None,
        floor: float = 0.25,
    ) -> dict[str, float]:
        """Sampling weights for ``keys`` from this task's statistics so far, shrunk toward the domain's.

        The estimate of each key's mean outcome is ``(sum + k * prior) / (n + k)`` with ``k =
        prior_strength`` pseudo-observations at the domain mean (or the overall task mean when the
        domain has none), so two bad evaluations move a choice a little and twenty move it a lot.
        Weights are ``exp(estimate / temperature)`` (temperature: the spread of the values the
        estimates are made from: the mean outcome of every key this task observed at ``level``,
        and the priors), clipped below at ``floor`` of the largest: experience steers, it never
        forbids. The temperature is not the spread of ``keys`` alone: with one of them observed it
        would be 0 (a floor of 1e-3), and one sample's shrunk difference from the prior would send
        it, or every other key, to ``floor`` (one ``add:vote`` that gained 0.02 made ``add:cot``
        four times less likely; docs/benchmarks.md, HFlow run 15).
        """
        t = self.data["tasks"].get(task, {}).get(level, {})
        d = self.data["domains"].get(domain, {}).get(level, {})
        n_all = sum(v[0] for v in t.values())
        overall = sum(v[1] for v in t.values()) / n_all if n_all else 0.0
        means = []
        priors = []
        est = {}
        for k in keys:
            n, total = t.get(k, [0, 0.0])
            dn, dt = d.get(k, [0, 0.0])
            prior = dt / dn if dn else overall
            priors.append(prior)
            est[k] = (total + prior_strength * prior) / (n + prior_strength)
            if n:
                means.append(total / n)
        if not means:
            return {k: 1.0 for k in keys}
        # the scale of the estimates: every observed mean of the level (the prior pools them) and the priors
        scale = [v[1] / v[0] for v in t.values() if v[0]] + priors
        spread = temperature or max(float(max(scale) - min(scale)), 1e-3)
        top = max(est.values())
        raw = {k: pow(2.718281828, (v - top) / spread) for k, v in est.items()}
        return {k: max(v, floor) for k, v in raw.items()}

    def failed_edits(self, task: str, parent: str) -> set[str]:
        """Edits already tried on workflow ``parent`` of ``task`` that made it worse (from the lineage)."""
        return {
            r["edit"] for r in self.data["lineage"] if r["task"] == task and r["parent"] == parent and r["delta"] < 0
        }

    # ----------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """The whole memory as plain data."""
        return json.loads(json.dumps(self.data))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the memory with :meth:`state_dict` output (``ValueError`` names what is not one)."""
        _check(state)
        self.data = json.loads(json.dumps(state))

    def save(self, path: str | None = None) -> Path:
        """Write the JSON atomically (temporary file, then rename) to ``path`` or the configured path."""
        target = Path(path) if path else self.path
        if target is None:
            raise ValueError("no path to save the experience memory to")
        return atomic_write_text(target, json.dumps(self.data, indent=1))
