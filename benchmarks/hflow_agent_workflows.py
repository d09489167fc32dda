"""Fixed episode workflows on the agent world, on the same search / held-out split as ``evolve``.

Reads an evolve config (default ``configs/hflow_agent_world.yaml``): its backbones, task, task
size and ``search`` settings give the pool and the split (``build_task`` + ``split_problems``, as
``evolve`` does). Scores the plain agents of each backbone, an agent followed by a ``verify`` step
of every kind (``when``: unfinished / errors / always; the default instruction and the request
made again, ``{question}``), and, with ``--best``, the chosen workflow of an ``evolve`` run
(``best_workflows.yaml``). Fitness is the config's ``accuracy - lambda_cost * cost``.

    OMP_NUM_THREADS=1 python benchmarks/hflow_agent_workflows.py [--config FILE] [--best OUT/best_workflows.yaml]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from lightning_agents.hflow import BackbonePool, Evaluator, Node, SearchConfig, Workflow, WorkflowExecutor
from lightning_agents.hflow.factory import split_problems
from lightning_agents.tasks import build_task


def candidates(student: str, teacher: str) -> dict[str, Workflow]:
    """The plain agents and agent -> verify chains this benchmark scores."""
    out = {
        f"agent@{student}": Workflow([Node("a", "agent", backbone=student)]),
        f"agent@{teacher}": Workflow([Node("a", "agent", backbone=teacher)]),
    }
    for when in ("unfinished", "errors", "always"):
        for label, prompt in (("check", ""), ("again", "{question}")):
            verify = Node("v", "verify", prompt=prompt, backbone=teacher, params={"when": when})
            out[f"agent@{student} > verify@{teacher}({when}, {label})"] = Workflow(
                [Node("a", "agent", backbone=student), verify], [("a", "v")], output="v"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/hflow_agent_world.yaml", help="an evolve config")
    ap.add_argument("--best", default=None, help="best_workflows.yaml of an evolve run: score its first workflow")
    args = ap.parse_args()
    cfg = yaml.safe_load(Path(args.config).read_text())
    search = SearchConfig(**cfg["search"])
    task = build_task(cfg["task"], n=cfg.get("task_size"))
    val, _, heldout = split_problems(task.problems, search)
    pool = BackbonePool.from_specs(cfg["backbones"])
    evaluator = Evaluator(WorkflowExecutor(task, pool, max_tokens=search.max_tokens), search.lambda_cost)
    student, teacher = pool.names[:2]
    workflows = candidates(student, teacher)
    if args.best:
        workflows["evolve: chosen"] = Workflow.from_dict(yaml.safe_load(Path(args.best).read_text())[0]["workflow"])
    rows, start = [], time.time()
    for label, wf in workflows.items():
        s, h = evaluator.evaluate(wf, val), evaluator.evaluate(wf, heldout)
        rows.append(
            {
                "workflow": label,
                "search_accuracy": round(s.accuracy, 4),
                "search_fitness": round(s.fitness, 4),
                "heldout_accuracy": round(h.accuracy, 4),
                "heldout_cost_per_problem": round(h.cost, 6),
                "heldout_fitness": round(h.fitness, 4),
            }
        )
    print(
        json.dumps(
            {
                "config": args.config,
                "search_problems": len(val),
                "heldout_problems": len(heldout),
                "lambda_cost": search.lambda_cost,
                "rows": rows,
                "total_cost": round(pool.ledger.total_cost(), 6),
                "wall_s": round(time.time() - start, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
