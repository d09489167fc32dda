"""Calibration of the simulated HumanEval world (benchmarks/hflow_sim_code.py) by running real code.

For each of the 164 HumanEval problems: the canonical solution and up to :data:`MAX_MUTANTS`
single-edit mutants of it (made with :mod:`ast`: arithmetic operator swaps, comparison flips,
``and``/``or`` swaps, a dropped ``not``, integer constants off by one, a ``range`` bound off by
one, boolean / numeric return values edited) are run in the package sandbox
(:func:`lightning_agents.rewards.sandbox.run_python`, ``bwrap``, 6 s and 512 MiB per program),
each once against the docstring's examples (:func:`~lightning_agents.tasks.code_examples.behaviour_program`,
the probe HFlow's code vote uses, which also says whether each example passes, as the ``test``
operator checks them) and against the problem's real hidden ``check`` tests. Per program it
records whether the hidden tests pass, whether the examples pass, how many of them pass
(``passed``: the ``test`` operator keeps the attempt that passes most when none passes all; a
program that does not get through every example, by hanging, exiting or crashing on one, passes
none, as the operator counts) and a digest of its behaviour on the examples (what the vote
clusters by). The canonical solution must pass both (reported in ``canonical_failures``:
HumanEval/47 and /116, whose docstrings contradict their tests). Calibrations written before
``passed`` existed (``hflow_sim_code_calibration_v1.json``, runs 1-6 of docs/benchmarks.md, and
``hflow_sim_code_calibration_v2.json``, run 7) still load: the world then keeps a failing
``test`` step's last fix, as the operator did then.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hflow_sim_code_calibrate.py

writes ``benchmarks/hflow_sim_code_calibration.json`` (the world reads it; nothing is run again
when the benchmark runs).
"""

from __future__ import annotations

import argparse
import ast
import copy
import gzip
import hashlib
import json
import random
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lightning_agents.rewards.sandbox import run_python
from lightning_agents.tasks.code import humaneval_reference
from lightning_agents.tasks.code_examples import behaviour_program, docstring_examples, parse_behaviour

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
CACHE = Path(__file__).resolve().parent / "hflow_sim_code_calibration.json"
MAX_MUTANTS = 16
TIMEOUT_S = 6.0
_TOKENS = re.compile(r"\w+|[^\w\s]")
_HIDDEN_OK = "__hflow_hidden_ok__"

_BINOP_SWAP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
_CMP_SWAP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


def load_rows(path: str | Path = DATA) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _sites(fn: ast.FunctionDef) -> list[tuple[str, list[int], Any]]:
    """Every mutation site inside ``fn`` as ``(kind, path of child indexes, detail)``."""
    out: list[tuple[str, list[int], Any]] = []

    def walk(node: ast.AST, path: list[int]) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            out.append(("binop", path, None))
        if isinstance(node, ast.AugAssign) and type(node.op) in _BINOP_SWAP:
            out.append(("augassign", path, None))
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in _CMP_SWAP:
                    out.append(("compare", path, k))
        if isinstance(node, ast.BoolOp):
            out.append(("boolop", path, None))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append(("drop-not", path, None))
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int)
            and not isinstance(node.value, bool)
            and abs(node.value) < 10**6
        ):
            out.append(("const+1", path, 1))
            out.append(("const-1", path, -1))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and node.args:
            out.append(("range-1", path, None))
        if isinstance(node, ast.Return) and node.value is not None:
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, bool):
                out.append(("return-flip", path, None))
            elif isinstance(v, (ast.Compare, ast.BoolOp)):
                out.append(("return-not", path, None))
        for k, child in enumerate(ast.iter_child_nodes(node)):
            walk(child, path + [k])

    docstring = fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant)
    children = list(ast.iter_child_nodes(fn))
    for stmt in fn.body[1:] if docstring else fn.body:
        walk(stmt, [next(k for k, c in enumerate(children) if c is stmt)])
    return out


def _node_at(fn: ast.AST, path: list[int]) -> ast.AST:
    node = fn
    for k in path:
        node = list(ast.iter_child_nodes(node))[k]
    return node


def _apply(kind: str, node: ast.AST, detail: Any) -> None:
    if kind == "binop" or kind == "augassign":
        node.op = _BINOP_SWAP[type(node.op)]()
    elif kind == "compare":
        node.ops[detail] = _CMP_SWAP[type(node.ops[detail])]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "drop-not":
        node.hflow_drop = True  # replaced below by its operand
    elif kind in ("const+1", "const-1"):
        node.value = node.value + detail
    elif kind == "range-1":
        last = node.args[-1] if len(node.args) < 3 else node.args[1]
        idx = next(k for k, a in enumerate(node.args) if a is last)
        node.args[idx] = ast.BinOp(left=last, op=ast.Sub(), right=ast.Constant(1))
    elif kind == "return-flip":
        node.value.value = not node.value.value
    elif kind == "return-not":
        node.value = ast.UnaryOp(op=ast.Not(), operand=node.value)


class _DropUAdd(ast.NodeTransformer):
    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        return node.operand if getattr(node, "hflow_drop", False) else node


def mutants(row: dict[str, Any], limit: int = MAX_MUTANTS) -> list[dict[str, str]]:
    """Up to ``limit`` distinct single-edit mutants of the canonical solution (deterministic)."""
    source = row["prompt"] + row["canonical_solution"]
    tree = ast.parse(source)
    fn = _function(tree, row["entry_point"])
    if fn is None:
        return []
    canonical = ast.unparse(tree)
    seen, out = {canonical}, []
    for kind, path, detail in _sites(fn):
        t2 = copy.deepcopy(tree)
        _apply(kind, _node_at(_function(t2, row["entry_point"]), path), detail)
        t2 = ast.fix_missing_locations(_DropUAdd().visit(t2))
        try:
            text = ast.unparse(t2)
            compile(text, "<mutant>", "exec")
        except (SyntaxError, ValueError):
            continue
        if text not in seen:
            seen.add(text)
            out.append({"kind": kind, "source": text})
    rng = random.Random(row["task_id"])
    if len(out) > limit:
        out = [out[k] for k in sorted(rng.sample(range(len(out)), limit))]
    return out


def probe_program(program: str, row: dict[str, Any]) -> str:
    """``program``, then the vote's example probe, then the real hidden tests in their own namespace."""
    reference = humaneval_reference(row["test"], row["entry_point"], row["prompt"])
    probe = behaviour_program(program, row["prompt"], row["entry_point"])
    return (
        probe
        + "\n_hflow_ns = {"
        + repr(row["entry_point"])
        + ": "
        + row["entry_point"]
        + "}\n"
        + f"exec({reference!r}, _hflow_ns)\n"
        + f"print({_HIDDEN_OK!r})\n"
    )


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def _examples_passed(lines: list[str], n_examples: int, finished_probe: bool) -> int:
    """How many examples the probe's lines say passed, counted as the ``test`` operator counts
    them: each example on its own, and none at all when the run did not get through every example
    (a hang, an exit or a crash on one: the operator's harness then prints no count)."""
    if not finished_probe:
        return 0
    oks = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("done") == "examples":
            break
        if isinstance(row, dict) and "r" in row:
            oks.append(bool(row.get("ok")))
    return sum(oks[:n_examples])


def run_one(program: str, row: dict[str, Any], n_examples: int) -> dict[str, Any]:
    """Runs one program; returns ``hidden`` (passes the real tests), ``examples`` (passes every
    docstring example), ``passed`` (how many examples it passes; what the ``test`` operator keeps
    the best attempt by) and ``sig`` (digest of its behaviour on the examples)."""
    res = run_python(probe_program(program, row), timeout_s=TIMEOUT_S, memory_mb=512)
    lines = [x for x in (res.stdout or "").splitlines() if x.startswith('{"t": ""')]
    finished_probe = sum('"r"' in x for x in lines) >= n_examples
    # the test operator fails a program that errors or hangs on an example; the vote gives a
    # program that does not run at all the signature "!crashed"
    sig, ok = parse_behaviour("\n".join(lines), finished_probe)
    return {
        "hidden": _HIDDEN_OK in (res.stdout or ""),
        "examples": bool(ok and finished_probe),
        "passed": _examples_passed(lines, n_examples, finished_probe),
        "sig": _digest(sig) if finished_probe else "!crashed",
        "timed_out": bool(res.timed_out),
    }


def _branches(fn: ast.AST) -> int:
    kinds = (ast.If, ast.For, ast.While, ast.IfExp, ast.comprehension, ast.BoolOp, ast.Try)
    return sum(isinstance(n, kinds) for n in ast.walk(fn))


def calibrate_problem(row: dict[str, Any], limit: int = MAX_MUTANTS) -> dict[str, Any]:
    """The calibration record of one problem (runs its canonical solution and mutants)."""
    examples = docstring_examples(row["prompt"], row["entry_point"])
    tree = ast.parse(row["prompt"] + row["canonical_solution"])
    fn = _function(tree, row["entry_point"])
    canonical = run_one(row["prompt"] + row["canonical_solution"], row, len(examples))
    muts = []
    for m in mutants(row, limit):
        r = run_one(m["source"], row, len(examples))
        muts.append({"kind": m["kind"], "src": _digest(m["source"]), **r})
    return {
        "id": row["task_id"],
        "entry_point": row["entry_point"],
        "prompt_tokens": len(_TOKENS.findall(row["prompt"])),
        "canonical_tokens": len(_TOKENS.findall(row["canonical_solution"])),
        "canonical_lines": sum(1 for x in row["canonical_solution"].splitlines() if x.strip()),
        "branches": _branches(fn) if fn is not None else 0,
        "examples": len(examples),
        "canonical": canonical,
        "mutants": muts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data", default=str(DATA), help="HumanEval.jsonl.gz (default: ../shared/data/humaneval/HumanEval.jsonl.gz)"
    )
    ap.add_argument(
        "--out",
        default=str(CACHE),
        help="calibration cache to write; the world reads benchmarks/hflow_sim_code_calibration.json "
        "(the default), so write elsewhere to look without changing it",
    )
    ap.add_argument(
        "--workers", type=int, default=2, help="problems calibrated at once, each in its own sandbox runs (default: 2)"
    )
    ap.add_argument("--limit", type=int, default=None, help="only the first N problems (a quick look)")
    args = ap.parse_args()
    start = time.time()
    rows = load_rows(args.data)[: args.limit]
    with ThreadPoolExecutor(args.workers) as ex:
        records = list(ex.map(calibrate_problem, rows))
    bad = [r["id"] for r in records if not (r["canonical"]["hidden"] and r["canonical"]["examples"])]
    for r in records:
        print(
            r["id"],
            "examples",
            r["examples"],
            "mutants",
            len(r["mutants"]),
            "wrong",
            sum(not m["hidden"] for m in r["mutants"]),
            "missed",
            sum(not m["hidden"] and m["examples"] for m in r["mutants"]),
            file=sys.stderr,
        )
    if bad:
        print(f"canonical solutions failing their hidden tests or examples: {bad}", file=sys.stderr)
    out = {
        "data": "HumanEval.jsonl.gz",
        "max_mutants": MAX_MUTANTS,
        "timeout_s": TIMEOUT_S,
        "seconds": round(time.time() - start, 1),
        "canonical_failures": bad,
        "problems": records,
    }
    Path(args.out).write_text(json.dumps(out, indent=0) + "\n")
    print(json.dumps({"problems": len(records), "seconds": out["seconds"], "canonical_failures": bad}))


if __name__ == "__main__":
    main()
