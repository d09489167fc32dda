"""evolve killed mid-generation and resumed: nothing paid is lost from the ledger or the budget,
no question is asked twice, and the result is the uninterrupted run's.

A crash is the state save of the last generation failing: that generation's traces, model calls
and answers are on disk (streamed), its search state is not.
"""

from __future__ import annotations

import json

import pytest
from test_evolve import _config  # tests/commands is on sys.path (rootdir conftest, no packages)

from lightning_agents.cli import cli_main


def _summary(out):
    summary = json.loads((out / "summary.json").read_text())
    ledger = json.loads((out / "ledger.json").read_text())
    return {
        "problem_runs": summary["problem_runs"],
        "spent": summary.get("spent", summary["problem_runs"]),
        "total_cost": round(summary["total_cost"], 9),
        "calls": ledger["total"]["calls"],
        "preferences": summary["preferences"],
        "chosen": summary["choice"]["chosen"],
        "answers": sorted((out / "preferences.jsonl").read_text().splitlines()),
    }


def _crash_at_state_save(monkeypatch, number):
    import lightning_agents.commands.evolve as evolve_module

    real, saves = evolve_module._write, []

    def write(path, text):
        if path.name == "search_state.json":
            saves.append(path)
            if len(saves) == number:
                raise KeyboardInterrupt("killed before the state of this generation was saved")
        real(path, text)

    monkeypatch.setattr(evolve_module, "_write", write)


def test_a_run_killed_mid_generation_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, capsys):
    whole = tmp_path / "whole"
    whole.mkdir()
    cli_main(["evolve", "--config", str(_config(whole, generations=2))])
    expected = _summary(whole / "out")

    killed = tmp_path / "killed"
    killed.mkdir()
    config = str(_config(killed, generations=2))
    with monkeypatch.context() as patch:
        _crash_at_state_save(patch, 3)  # the initial population, generation 1, then generation 2
        with pytest.raises(KeyboardInterrupt):
            cli_main(["evolve", "--config", config])
    state = json.loads((killed / "out" / "search_state.json").read_text())
    assert state["generation"] == 1  # generation 2 ran and was paid, but its state is lost
    cli_main(["evolve", "--config", config])
    assert "evolve: resumed" in capsys.readouterr().err
    assert _summary(killed / "out") == expected


def test_a_run_killed_before_its_first_save_counts_what_it_paid(tmp_path, monkeypatch, capsys):
    whole = tmp_path / "whole"
    whole.mkdir()
    cli_main(["evolve", "--config", str(_config(whole, generations=1))])
    expected = _summary(whole / "out")
    killed = tmp_path / "killed"
    killed.mkdir()
    config = str(_config(killed, generations=1))
    with monkeypatch.context() as patch:
        _crash_at_state_save(patch, 1)
        with pytest.raises(KeyboardInterrupt):
            cli_main(["evolve", "--config", config])
    assert not (killed / "out" / "search_state.json").exists()
    cli_main(["evolve", "--config", config])
    assert "starting at generation 0, reusing" in capsys.readouterr().err
    assert _summary(killed / "out") == expected


def test_resuming_with_other_search_settings_or_a_damaged_state_is_refused(tmp_path, capsys):
    cli_main(["evolve", "--config", str(_config(tmp_path))])
    with pytest.raises(SystemExit) as exit_:
        cli_main(["evolve", "--config", str(_config(tmp_path, generations=2, search={"lambda_cost": 0.0}))])
    assert exit_.value.code == 2
    assert "made with search.lambda_cost=50.0 (now 0.0)" in capsys.readouterr().err
    # more workers is a resume, not another search
    cli_main(["evolve", "--config", str(_config(tmp_path, generations=2, search={"workers": 2}))])
    state = tmp_path / "out" / "search_state.json"
    state.write_text(state.read_text()[:100])
    with pytest.raises(SystemExit):
        cli_main(["evolve", "--config", str(_config(tmp_path, generations=3))])
    assert "search_state.json: not a search state" in capsys.readouterr().err


def test_a_torn_or_foreign_trace_line_is_dropped_with_its_location(tmp_path, caplog):
    from lightning_agents.hflow import (
        ArithmeticTask,
        Backbone,
        BackbonePool,
        Completion,
        Node,
        Workflow,
        WorkflowExecutor,
    )
    from lightning_agents.hflow.evaluation import Evaluator

    class Scripted(Backbone):
        def __init__(self):
            super().__init__("scripted", 1.0, 1.0)

        def _complete(self, requests):
            return [Completion("The answer is 7.", 10, 5) for _ in requests]

    task = ArithmeticTask("val", n=3)
    pool = BackbonePool([Scripted()])
    log = tmp_path / "traces.jsonl"
    first = Evaluator(WorkflowExecutor(task, pool), trace_log=log)
    workflow = Workflow([Node("g", "generate", backbone="scripted")])
    first.traces(workflow, task.problems)
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], "{}", lines[1], lines[2][:40]]))  # a foreign line, a torn last one
    again = Evaluator(WorkflowExecutor(task, pool), trace_log=log)
    assert len(again.cache) == 2
    assert "traces.jsonl:2: skipped a line that is not a trace" in caplog.text
    assert "traces.jsonl:4: dropped a trace cut short" in caplog.text
    _, new = again.traces(workflow, task.problems)
    assert new == 1
    rows = [json.loads(line) for line in log.read_text().splitlines() if line != "{}"]
    assert len(rows) == 3  # the re-run trace is on its own line, not glued to the torn one
