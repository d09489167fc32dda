import csv
import io
import json

import pytest

from lightning_agents.topology import build_quotient_graph, curate_rollouts
from lightning_agents.topology.report import (
    atomic_write,
    atomic_write_text,
    draw_quotient_graph,
    selection_summary,
    summary_markdown,
    task_table_csv,
    trajectory_table_csv,
    write_report,
)


@pytest.fixture
def result(rollout):
    trials = [
        rollout("a", 0, 1.0, ["u:hi", "c:get_a", "o:1", "a:The answer is 1."]),
        rollout("a", 1, 0.0, ["u:hi", "c:get_b", "o:2", "a:The answer is 2."]),
        rollout(
            "a", 2, 1.0, ["u:hi", "c:get_b", "o:2", "c:book", "e:Error: no", "c:get_a", "o:1", "a:The answer is 1."]
        ),
        rollout("b", 0, 1.0, ["u:hi", "c:get_a", "o:1"]),
        rollout("b", 1, 1.0, ["u:hi", "c:get_c", "o:1"]),
        rollout("c", 0, 0.0, ["u:hi"]),
    ]
    return curate_rollouts(trials)


def test_tables(result):
    tasks = list(csv.DictReader(io.StringIO(task_table_csv(result))))
    assert [t["task_id"] for t in tasks] == ["a", "b", "c"]
    assert tasks[0]["rl_selected"] == "1" and tasks[1]["rl_selected"] == "0" and tasks[2]["pass_rate"] == "0.0"
    assert tasks[0]["rl_score"] != "" and tasks[1]["rl_score"] == ""
    rows = list(csv.DictReader(io.StringIO(trajectory_table_csv(result))))
    assert len(rows) == 6
    selected = {(r["task_id"], r["trial"]) for r in rows if r["sft_selected"] == "1"}
    assert selected == {(t, str(i)) for t, i in result.sft}


def test_summary_compares_selections(result):
    summary = selection_summary(result)
    assert summary["input"] == {
        "tasks": 3,
        "trajectories": 6,
        "steps": result.steps,
        "successes": 4,
        "trajectories_with_errors": 1,
        "branch_points": summary["input"]["branch_points"],
        "pass_rate_histogram": {"0.00": 1, "0.67": 1, "1.00": 1},
    }
    # Every baseline has TopoCurate's size (4 successes, 2 per task: a and b).
    assert {name: s["trajectories"] for name, s in summary["sft"].items()} == {
        "topocurate": 4,
        "outcome": 4,
        "random_k": 4,
        "shortest_k": 4,
        "pass_rate": 2,  # only task a lies in the band
    }
    assert (
        summary["sft"]["topocurate"]["with_recovery"] == 1
        and summary["sft"]["topocurate"]["overlap_with_topocurate"] == 1.0
    )
    assert summary["rl"]["topocurate"]["tasks"] == 1 and summary["rl"]["topocurate"]["pass_rate_histogram"] == {
        "0.67": 1
    }
    assert summary["rl"]["uncertainty"]["tasks"] == 1 and summary["rl"]["outcome"]["tasks"] == 1
    text = summary_markdown(summary)
    assert (
        "| topocurate | 1 | 0 |" in text and "| SFT selection (size-matched) |" in text and "| shortest_k | 4 |" in text
    )


def test_drawing_shows_success_and_failure_edges_in_different_colours(result, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    png = draw_quotient_graph(result.analysis("a").graph, tmp_path / "a.png")
    image = imread(png)[..., :3]
    flat = image.reshape(-1, 3)

    def has(rgb):
        target = [c / 255 for c in rgb]
        return bool((abs(flat - target).max(axis=1) < 0.05).any())

    assert has((0x2C, 0xA0, 0x2C)) and has((0xD6, 0x27, 0x28))  # green and red edges
    assert list(tmp_path.iterdir()) == [png]  # no temporary left behind


def test_write_report(result, tmp_path):
    written = write_report(result, tmp_path / "report", draw_tasks=2, settings={"x": 1})
    assert (tmp_path / "report" / "graphs" / "task_a.png").is_file()
    assert len([k for k in written if k.startswith("graph_")]) == 2
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["settings"] == {"x": 1}
    assert (tmp_path / "report" / "summary.md").read_text() == summary_markdown(
        {k: v for k, v in summary.items() if k != "settings"}
    )


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path):
    target = atomic_write_text(tmp_path / "out.txt", "old")

    def broken(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, broken)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_drawing_a_graph_with_an_error_loop(rollout, tmp_path):
    graph = build_quotient_graph([rollout("t", 0, 1.0, ["c:book", "e:Error: declined", "c:book", "o:ok"])])
    assert draw_quotient_graph(graph, tmp_path / "loop.png").stat().st_size > 1000
