"""curate's inputs: which graphs to draw (--draw_tasks) and BFCL results without their possible answers.

Real records from ``tests/data/tau2_pooled`` and ``tests/data/bfcl_results`` (see their READMEs).
"""

import contextlib
import io
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.topology.pipeline import CurationError

DATA = Path(__file__).resolve().parents[1] / "data"
POOLED = [
    str(DATA / "tau2_pooled" / n) for n in ("grok-3-airline-task11.json", "grok-3-airline_tighter_policy-task11.json")
]
BFCL = DATA / "bfcl_results"


class _Tool(CurateCommand):
    pass


def test_an_unknown_task_to_draw_stops_before_anything_is_written(tmp_path):
    # It raised a bare KeyError after sft.jsonl, rl_tasks.jsonl and the report were written.
    out = tmp_path / "o"
    with pytest.raises(CurationError, match=r"no task '99'.*airline/11, airline_tighter_policy/11.*--draw_tasks\+ ID"):
        _Tool().curate(rollouts=POOLED, output=str(out), draw_tasks=["99"])
    assert not (out / "sft.jsonl").exists() and not (out / "report").exists()


def _cli(out, monkeypatch, *args):
    cli = pytest.importorskip("lightning_agents.cli")
    monkeypatch.setattr("sys.argv", ["lightning-agents"])
    with contextlib.redirect_stdout(io.StringIO()):
        cli.cli_main(["curate", "--rollouts", f"[{', '.join(POOLED)}]", "--output", str(out), *args])
    return sorted(p.name for p in (out / "report" / "graphs").glob("*.png"))


def test_one_task_id_to_draw_on_the_command_line(tmp_path, monkeypatch):
    # '--draw_tasks ID' failed with "expected int or list[str]"; '--draw_tasks+ ID' worked.
    drawn = _cli(tmp_path / "one", monkeypatch, "--draw_tasks", "airline_tighter_policy/11")
    assert drawn == ["task_airline_tighter_policy_11.png"]
    assert _cli(tmp_path / "plus", monkeypatch, "--draw_tasks+", "airline/11") == ["task_airline_11.png"]


def test_results_scored_by_another_categorys_answers_name_their_own(tmp_path):
    # miss_param results with base's possible answers: the hint named base's file again.
    with pytest.raises(
        CurationError,
        match=r"category \(multi_turn_miss_param: BFCL's possible_answer/BFCL_v4_multi_turn_miss_param\.json\)",
    ):
        _Tool().curate(
            rollouts=[str(BFCL / "glyphh-ada-1.1_BFCL_v4_multi_turn_miss_param_result.json")],
            ground_truth=[str(BFCL / "BFCL_v4_multi_turn_base_possible_answer.json")],
            output=str(tmp_path / "o"),
        )
