"""Curation reports: per-task and per-trajectory CSV tables, a summary that compares TopoCurate's
selections with the baselines, and drawings of quotient graphs.

Every file is written atomically (a temporary file in the same folder, then ``os.replace``), so
an interrupted run leaves either the previous file or the new one, never half of one.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from lightning_agents.atomic import atomic_write, atomic_write_text
from lightning_agents.topology.pipeline import CurationError, CurationResult
from lightning_agents.topology.signatures import signature_label

__all__ = [
    "draw_quotient_graph",
    "selection_summary",
    "summary_markdown",
    "task_table_csv",
    "trajectory_table_csv",
    "write_jsonl",
    "write_report",
]


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write records as JSON Lines, atomically."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    return atomic_write(path, write)


def _csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: ("" if v is None else round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
            )
    return buffer.getvalue()


def task_table_csv(result: CurationResult) -> str:
    """Per-task metrics with TopoCurate's RL score and whether each selection took the task."""
    rl = {s.task_id: s.score for s in result.rl}
    sft_counts = Counter(task for task, _ in result.sft)
    pass_rate_tasks = set(result.baselines["rl"]["pass_rate"])
    rows = []
    for analysis in result.analyses:
        row = analysis.task.as_dict()
        row["rl_score"] = rl.get(analysis.task.task_id)
        row["rl_selected"] = int(analysis.task.task_id in rl)
        row["sft_selected"] = sft_counts.get(analysis.task.task_id, 0)
        row["pass_rate_baseline"] = int(analysis.task.task_id in pass_rate_tasks)
        rows.append(row)
    return _csv(rows)


def trajectory_table_csv(result: CurationResult) -> str:
    """Per-trajectory metrics and whether TopoCurate's SFT selection took the trajectory."""
    chosen = set(result.sft)
    rows = []
    for analysis in result.analyses:
        for t in analysis.trajectories:
            row = t.as_dict()
            row["sft_selected"] = int((t.task_id, t.trial) in chosen)
            rows.append(row)
    return _csv(rows)


def _distribution(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mean": None, "min": None, "median": None, "max": None}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
    }


def _pass_rate_histogram(pass_rates: Iterable[float | None]) -> dict[str, int]:
    # Pass rates of K trials take K+1 values; their exact values are the natural bins.
    counts = Counter("unscored" if p is None else f"{p:.2f}" for p in pass_rates)
    return dict(sorted(counts.items()))


def _jaccard(a: Iterable, b: Iterable) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def selection_summary(result: CurationResult) -> dict[str, Any]:
    """Every selection next to its size-matched baselines, with what distinguishes them.

    SFT selections: ``topocurate`` and the baselines of the same size (``outcome``, ``random_k``,
    ``shortest_k``, ``pass_rate``; see
    :func:`~lightning_agents.topology.selection.size_matched_baselines`): per selection the
    trajectories and tasks, the share with a tool error and with a recovery, mean recovery
    events, efficiency, steps, loops and writes, and the overlap (Jaccard) with TopoCurate's pick.
    RL selections: ``topocurate`` and ``uncertainty`` (top p(1-p)), ``pass_rate``, ``outcome`` of
    the same size, with mean pass rate, EBR and heterogeneity and the overlap.
    """
    metrics = {(t.task_id, t.trial): t for a in result.analyses for t in a.trajectories}
    tasks = {a.task.task_id: a.task for a in result.analyses}
    sft_sets = {"topocurate": list(result.sft), **result.baselines["sft"]}
    rl_sets = {"topocurate": [s.task_id for s in result.rl], **result.baselines["rl"]}
    sft = {}
    for name, keys in sft_sets.items():
        chosen = [metrics[tuple(k)] for k in keys]
        n = len(chosen) or 1
        sft[name] = {
            "trajectories": len(chosen),
            "tasks": len({t.task_id for t in chosen}),
            "with_recovery": sum(1 for t in chosen if t.recovery > 0),
            "tool_error_share": sum(1 for t in chosen if t.errors > 0) / n,
            "recovery": _distribution([float(t.recovery) for t in chosen]),
            "efficiency": _distribution([t.efficiency for t in chosen if t.efficiency is not None]),
            "steps": _distribution([float(t.steps) for t in chosen]),
            "loops": _distribution([float(t.loops) for t in chosen]),
            "writes": _distribution([float(t.writes) for t in chosen]),
            "overlap_with_topocurate": _jaccard(map(tuple, keys), result.sft),
            "pass_rate_histogram": _pass_rate_histogram(tasks[t.task_id].pass_rate for t in chosen),
        }
    rl = {}
    for name, task_ids in rl_sets.items():
        chosen = [tasks[t] for t in task_ids]
        rl[name] = {
            "tasks": len(chosen),
            "pass_rate_histogram": _pass_rate_histogram(t.pass_rate for t in chosen),
            "degenerate_tasks": sum(1 for t in chosen if t.pass_rate in (0.0, 1.0)),
            "error_branch_ratio": _distribution([t.error_branch_ratio for t in chosen]),
            "heterogeneity": _distribution([t.heterogeneity for t in chosen]),
            "overlap_with_topocurate": _jaccard(task_ids, rl_sets["topocurate"]),
        }
    all_trajectories = list(metrics.values())
    summary = {
        "input": {
            "tasks": len(result.analyses),
            "trajectories": len(all_trajectories),
            "steps": result.steps,
            "successes": sum(1 for t in all_trajectories if t.success),
            "trajectories_with_errors": sum(1 for t in all_trajectories if t.errors > 0),
            "branch_points": sum(a.task.branch_points for a in result.analyses),
            "pass_rate_histogram": _pass_rate_histogram(t.pass_rate for t in tasks.values()),
        },
        "sft": sft,
        "rl": rl,
    }
    # tau2 telecom's simulated user runs tools on its own phone; they change the state the agent
    # diagnoses, so the graphs keep them and the step counts (and efficiency) include them. Said
    # so where it happens, since the summary otherwise reads as the agent's steps alone.
    user_steps = result.user_tool_steps
    if user_steps:
        summary["input"]["user_tool_steps"] = user_steps
    return summary


def _steps_text(inp: dict[str, Any]) -> str:
    user_steps = inp.get("user_tool_steps")
    if not user_steps:
        return f"{inp['steps']} agent-side steps"
    return (
        f"{inp['steps']} steps ({inp['steps'] - user_steps} agent-side, {user_steps} the simulated user's own "
        "tool calls and their results, which step counts and efficiency include)"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables (what docs/topocurate.md shows for the tau-bench file)."""
    inp = summary["input"]
    lines = [
        f"Input: {inp['tasks']} tasks, {inp['trajectories']} trajectories ({inp['successes']} successful, "
        f"{inp['trajectories_with_errors']} with tool errors), {_steps_text(inp)}, {inp.get('branch_points', '-')} branch points. "
        f"Task pass rates: " + ", ".join(f"{k}: {v}" for k, v in inp["pass_rate_histogram"].items()) + ".",
        "",
        "| SFT selection (size-matched) | trajectories | tasks | tool-error share | with recovery | mean recovery events | mean efficiency | mean steps | mean loops | overlap with TopoCurate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summary["sft"].items():
        lines.append(
            f"| {name} | {s['trajectories']} | {s['tasks']} | {_fmt(s['tool_error_share'])} | {s['with_recovery']} | "
            f"{_fmt(s['recovery']['mean'])} | {_fmt(s['efficiency']['mean'])} | {_fmt(s['steps']['mean'])} | "
            f"{_fmt(s['loops']['mean'])} | {_fmt(s['overlap_with_topocurate'])} |"
        )
    lines += [
        "",
        "| RL selection (size-matched) | tasks | tasks with p in {0, 1} | mean EBR | mean heterogeneity | overlap with TopoCurate | pass-rate histogram |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in summary["rl"].items():
        histogram = ", ".join(f"{k}: {v}" for k, v in s["pass_rate_histogram"].items()) or "-"
        lines.append(
            f"| {name} | {s['tasks']} | {s['degenerate_tasks']} | {_fmt(s['error_branch_ratio']['mean'])} | "
            f"{_fmt(s['heterogeneity']['mean'])} | {_fmt(s['overlap_with_topocurate'])} | {histogram} |"
        )
    return "\n".join(lines) + "\n"


def _most_common(counts: dict) -> Any:
    # Highest count first, then the smallest key, so a drawing does not depend on dict order.
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _positions(graph: nx.DiGraph) -> dict[int, tuple[float, float]]:
    """x: distance from the root; y: the lane of the first trial through the node.

    Each trial gets a lane; a shared prefix sits on the lane of its first trial and a trial that
    splits off moves to its own lane, so every trial reads as a line from left to right and the
    splits and merges are where lines meet.
    """
    depth = nx.single_source_shortest_path_length(graph, graph.graph["root"])
    deepest = max(depth.values(), default=0)
    lanes: dict[int, list[int]] = {}
    for lane, (_, info) in enumerate(sorted(graph.graph.get("trials", {}).items())):
        for node in set(info["path"]):
            lanes.setdefault(node, []).append(lane)
    # Nodes off the root's reach or on no trial occur only in hand-built graphs; they go last.
    return {n: (float(depth.get(n, deepest + 1)), -float(min(lanes.get(n, [0])))) for n in graph.nodes}


def draw_quotient_graph(graph: nx.DiGraph, path: str | Path, title: str | None = None, max_labels: int = 40) -> Path:
    """Draw a quotient graph to a PNG, layered by distance from the root.

    Edges are green when only successful trials took them, red when only failed ones did, orange
    when both did (grey when unscored); error observations are dashed; width grows with the
    number of trials. Nodes where trials ended are marked (green square: success, red cross:
    failure). Branch-point out-edges are labelled with their step.

    Args:
        graph: a quotient graph from :func:`~lightning_agents.topology.build_quotient_graph`.
        path: the PNG to write (atomically).
        title: figure title; defaults to the task id with its pass rate.
        max_labels: most edge labels drawn (the busiest branch points first).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    pos = _positions(graph)
    width = max(6.0, min(40.0, 0.3 * (max((x for x, _ in pos.values()), default=0) + 1)))
    height = max(3.0, min(20.0, 0.8 * len(graph.graph.get("trials", {})) + 1.5))
    fig, ax = plt.subplots(figsize=(width, height))
    styles = {"success": "#2ca02c", "failure": "#d62728", "mixed": "#ff7f0e", "unscored": "#7f7f7f"}
    for kind, color in styles.items():
        for dashed in (False, True):
            edges = []
            widths = []
            for u, v, a in graph.edges(data=True):
                s, f = a["success"], a["failure"]
                edge_kind = "mixed" if s and f else "success" if s else "failure" if f else "unscored"
                if edge_kind == kind and bool(a.get("error")) == dashed:
                    edges.append((u, v))
                    widths.append(1.0 + 1.5 * math.log1p(s + f + a.get("unscored", 0)))
            if edges:
                nx.draw_networkx_edges(
                    graph,
                    pos,
                    edgelist=edges,
                    width=widths,
                    edge_color=color,
                    style="dashed" if dashed else "solid",
                    arrows=True,
                    arrowsize=8,
                    ax=ax,
                    node_size=60,
                    # Error edges run back to where the call was made: a wide arc keeps the loop visible.
                    connectionstyle="arc3,rad=0.6" if dashed else "arc3,rad=0.08",
                )
    nx.draw_networkx_nodes(graph, pos, node_size=40, node_color="#4c72b0", ax=ax)
    ends_ok = [n for n, c in graph.nodes(data="ends_success") if c]
    ends_bad = [n for n, c in graph.nodes(data="ends_failure") if c]
    nx.draw_networkx_nodes(graph, pos, nodelist=ends_ok, node_shape="s", node_size=120, node_color="#2ca02c", ax=ax)
    nx.draw_networkx_nodes(graph, pos, nodelist=ends_bad, node_shape="X", node_size=140, node_color="#d62728", ax=ax)
    nx.draw_networkx_nodes(graph, pos, nodelist=[graph.graph["root"]], node_size=160, node_color="black", ax=ax)

    def forward(u: int) -> list[int]:
        return [v for v in graph.successors(u) if pos[v][0] > pos[u][0]]

    # Only real splits get labels: a node whose extra successor is an error loop back is not one.
    branch = sorted((n for n in graph.nodes if len(forward(n)) >= 2), key=lambda n: (pos[n][0], n))
    labels = {}
    for node in branch:
        for v in forward(node):
            if len(labels) < max_labels:
                labels[(node, v)] = signature_label(_most_common(graph.edges[node, v]["signatures"]), width=28)
    if labels:
        nx.draw_networkx_edge_labels(graph, pos, edge_labels=labels, font_size=6, ax=ax, rotate=False)
    trials = graph.graph.get("trials", {})
    scored = [t["outcome"] for t in trials.values() if t["outcome"] is not None]
    rate = f"{sum(scored)}/{len(scored)} successful" if scored else "unscored"
    ax.set_title(title or f"task {graph.graph.get('task_id')}: {len(trials)} trials, {rate}")
    legend = [
        Line2D([0], [0], color=styles["success"], lw=2, label="only successful trials"),
        Line2D([0], [0], color=styles["failure"], lw=2, label="only failed trials"),
        Line2D([0], [0], color=styles["mixed"], lw=2, label="both"),
        Line2D([0], [0], color="black", lw=1.5, ls="--", label="error observation"),
        Line2D([0], [0], marker="s", color="w", markerfacecolor=styles["success"], markersize=8, label="success ends"),
        Line2D([0], [0], marker="X", color="w", markerfacecolor=styles["failure"], markersize=9, label="failure ends"),
    ]
    ax.legend(
        handles=legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(legend), fontsize=7, frameon=False
    )
    ax.set_axis_off()
    fig.tight_layout()
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    finally:
        plt.close(fig)


def write_report(
    result: CurationResult,
    directory: str | Path,
    draw_tasks: Sequence[str] | int = 3,
    settings: dict[str, Any] | None = None,
    reward_check: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``tasks.csv``, ``trajectories.csv``, ``summary.json``, ``summary.md`` and graph PNGs.

    Args:
        result: the curation result.
        directory: the report folder (created).
        draw_tasks: task ids to draw, or a count: that many of TopoCurate's top RL tasks (then
            tasks with the most branch points when there are fewer).
        settings: the curation settings, recorded in ``summary.json``.
        reward_check: the files' rewards against the verifier
            (:func:`~lightning_agents.topology.reward_check.reward_check`), recorded in ``summary.json``.

    Returns:
        The paths written, by name.
    """
    check_draw_tasks(result, draw_tasks)
    directory = Path(directory)
    summary = selection_summary(result)
    if settings is not None:
        summary = {"settings": settings, **summary}
    if reward_check is not None:
        summary["reward_check"] = reward_check
    written = {
        "tasks": atomic_write_text(directory / "tasks.csv", task_table_csv(result)),
        "trajectories": atomic_write_text(directory / "trajectories.csv", trajectory_table_csv(result)),
        "summary": atomic_write_text(directory / "summary.json", json.dumps(summary, indent=2, default=str) + "\n"),
        "summary_md": atomic_write_text(directory / "summary.md", summary_markdown(summary)),
    }
    if isinstance(draw_tasks, int):
        chosen = [s.task_id for s in result.rl[:draw_tasks]]
        rest = sorted(result.analyses, key=lambda a: (-a.task.branch_points, a.task.task_id))
        chosen += [a.task.task_id for a in rest if a.task.task_id not in chosen][: max(0, draw_tasks - len(chosen))]
    else:
        chosen = [str(t) for t in draw_tasks]
    for task_id in chosen:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(task_id))
        written[f"graph_{task_id}"] = draw_quotient_graph(
            result.graph(task_id), directory / "graphs" / f"task_{safe}.png"
        )
    return written


def check_draw_tasks(result: CurationResult, draw_tasks: int | Sequence[str]) -> None:
    """Refuse task ids to draw that are not among the curated tasks, before anything is written.

    Raises:
        CurationError: naming the unknown ids and some known ones.
    """
    if isinstance(draw_tasks, int):
        if draw_tasks < 0:
            raise CurationError(f"--draw_tasks: a count of top RL tasks must be at least 0, got {draw_tasks}")
        return
    if isinstance(draw_tasks, str):
        draw_tasks = [draw_tasks]
    known = [a.task.task_id for a in result.analyses]
    known_set = set(known)
    unknown = [str(t) for t in draw_tasks if str(t) not in known_set]
    if unknown:
        # a pooled run names tasks by domain: point at the ids that end in the one asked for
        pooled = [k for t in unknown for k in known if k.endswith(f"/{t}")]
        if pooled:
            raise CurationError(
                f"--draw_tasks: no task {', '.join(map(repr, unknown))}: tasks of several domains are named "
                f"<domain>/<id> in this run, e.g. {', '.join(pooled[:5])}"
            )
        more = f" ... ({len(known)} in all)" if len(known) > 10 else ""
        raise CurationError(
            f"--draw_tasks: no task {', '.join(map(repr, unknown))} among the curated tasks; they are "
            f"{', '.join(known[:10])}{more} (a number alone, --draw_tasks 3, is a count of top RL tasks; "
            "give ids as --draw_tasks+ ID)"
        )
