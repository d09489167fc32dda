import json
import re

import pytest
import yaml

from lightning_agents.hflow import Workflow


def _config(tmp_path, **extra):
    cfg = {
        "backbones": [
            {"name": "student", "model": "embedded:student", "kind": "hf", "input_price": 1.0, "output_price": 2.0},
            {"name": "teacher", "model": "embedded:teacher", "kind": "hf", "input_price": 4.0, "output_price": 8.0},
        ],
        "task": "embedded:arithmetic/val",
        "task_size": 16,
        "generations": 1,
        "search": {
            "eval_problems": 6,
            "heldout_problems": 4,
            "population_size": 3,
            "offspring": 3,
            "max_nodes": 3,
            "lambda_cost": 50.0,
            "questions_per_generation": 2,
            "workers": 1,
        },
        "memory_file": str(tmp_path / "memory.json"),
        "output": str(tmp_path / "out"),
        "progress": False,
    }
    search = extra.pop("search", {})
    cfg.update(extra)
    cfg["search"].update(search)
    path = tmp_path / "evolve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_evolve_cli_writes_workflows_ledger_and_memory(tmp_path):
    from lightning_agents.cli import cli_main

    cli_main(["evolve", "--config", str(_config(tmp_path))])
    out = tmp_path / "out"
    best = yaml.safe_load((out / "best_workflows.yaml").read_text())
    assert best[0]["rank"] == 1 and Workflow.from_dict(best[0]["workflow"]).is_valid(["student", "teacher"])
    # the chosen workflow comes first; preferences may trade at most preference_delta of fitness
    assert best[0]["fitness"] >= max(b["fitness"] for b in best) - 0.02 - 1e-9
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["total"]["calls"] == sum(v["calls"] for v in ledger["by_backbone"].values()) > 0
    assert set(ledger["by_backbone"]) <= {"student", "teacher"}
    memory = json.loads((tmp_path / "memory.json").read_text())
    assert "math" in memory["domains"] and memory["lineage"]
    assert (out / "best_workflow.png").stat().st_size > 5000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generations"] == 1 and summary["total_cost"] == pytest.approx(ledger["total"]["cost"])
    assert len((out / "history.jsonl").read_text().splitlines()) == 2  # initial population + 1 generation
    # held-out report of the chosen workflow and the single calls, on problems the search never ran
    labels = [r["label"] for r in summary["heldout"]]
    assert labels[:2] == ["chosen", "best_fitness"] and "single:generate@teacher" in labels
    assert summary["choice"]["chosen"] == best[0]["hash"]
    # every simulated answer is on disk, and a restart with more generations reuses it and the traces
    answers = (out / "preferences.jsonl").read_text().splitlines()
    assert len(answers) == summary["preferences"] > 0
    runs_first = summary["problem_runs"]
    cli_main(["evolve", "--config", str(_config(tmp_path, generations=2))])
    summary2 = json.loads((out / "summary.json").read_text())
    assert summary2["generations"] == 2
    assert (out / "preferences.jsonl").read_text().splitlines()[: len(answers)] == answers
    assert summary2["preferences"] >= len(answers)
    # resumed: the first run's problem runs are carried over, not paid again
    assert summary2["problem_runs"] >= runs_first
    history = (out / "history.jsonl").read_text().splitlines()
    assert len(history) == 3


def test_evolve_file_mode_writes_questions_for_a_person(tmp_path):
    from lightning_agents.commands.evolve import EvolveCommand
    from lightning_agents.hflow import SearchConfig

    cfg = yaml.safe_load(_config(tmp_path).read_text())
    cfg.update(preferences_file=str(tmp_path / "q.jsonl"), generations=1)
    cfg["search"] = SearchConfig(**{**cfg["search"], "rater": "file"})
    EvolveCommand().evolve(**cfg)
    lines = [json.loads(x) for x in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert lines and all(x["winner"] is None and x["a"]["output"] != x["b"]["output"] for x in lines)
    # a person answers every question "b"; the next run reads the answers and keeps them
    for x in lines:
        x["winner"] = "b"
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cfg["generations"] = 2
    EvolveCommand().evolve(**cfg)
    kept = [json.loads(x) for x in (tmp_path / "out" / "preferences.jsonl").read_text().splitlines()]
    assert kept and all(k["source"] == "file" for k in kept)


def test_evolve_rejects_a_pool_without_prices(tmp_path):
    from lightning_agents.commands.evolve import EvolveCommand
    from lightning_agents.hflow import ConfigError

    with pytest.raises(ConfigError, match="output_price"):
        EvolveCommand().evolve(
            backbones=[{"name": "s", "model": "embedded:student", "input_price": 1.0}],
            output=str(tmp_path / "o"),
            progress=False,
        )


def test_evolve_agent_world_config_end_to_end(tmp_path):
    """configs/hflow_agent_world.yaml at a tiny size: agent workflows on the shop world, scored by its state."""
    from pathlib import Path

    from lightning_agents.cli import cli_main

    cfg = yaml.safe_load((Path(__file__).parents[2] / "configs" / "hflow_agent_world.yaml").read_text())
    cfg.update(task_size=8, generations=1, memory_file=str(tmp_path / "memory.json"), output=str(tmp_path / "out"))
    cfg["search"].update(eval_problems=4, heldout_problems=3, population_size=2, offspring=2, screen_problems=0)
    path = tmp_path / "agent_world.yaml"
    path.write_text(yaml.safe_dump({**cfg, "progress": False}))
    cli_main(["evolve", "--config", str(path)])
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "agent_world-val" and summary["generations"] == 1
    best = yaml.safe_load((out / "best_workflows.yaml").read_text())
    for row in best:
        assert {n["op"] for n in row["workflow"]["nodes"]} <= {"agent", "verify"}
    # the seeds are the plain agents of each backbone; held-out success is the world's final state
    labels = {r["label"]: r for r in summary["heldout"]}
    assert {"chosen", "single:agent@student", "single:agent@teacher"} <= set(labels)
    assert labels["single:agent@student"]["accuracy"] > 0 and labels["single:agent@teacher"]["accuracy"] > 0
    # every turn of every episode is a booked call: far more calls than problem runs
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["total"]["calls"] > summary["problem_runs"] > 0
    traces = [json.loads(x)["trace"] for x in (out / "traces.jsonl").read_text().splitlines()]
    assert any("call " in t["output"] and "-> " in t["output"] for t in traces)
    memory = json.loads((tmp_path / "memory.json").read_text())
    assert "agent" in memory["domains"]


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("population_size", 0, "search.population_size must be at least 1, got 0"),
        ("eval_problems", 0, "search.eval_problems must be at least 1"),
        ("lambda_cost", -1.0, "search.lambda_cost must be at least 0"),
        ("optimizer_max_tokens", 0, "search.optimizer_max_tokens must be at least 1"),
        ("rater_flip_rate", 0.5, r"search.rater_flip_rate must be in \[0, 0.5\)"),
        ("crossover_rate", 1.5, r"search.crossover_rate must be in \[0, 1.0\]"),
        ("max_tokens", {"generat": 100}, "search.max_tokens: unknown operator 'generat'"),
        ("max_tokens", {"cot": 0}, "search.max_tokens.cot must be a positive integer"),
    ],
)
def test_a_bad_search_setting_is_named_before_anything_runs(tmp_path, capsys, setting, value, message):
    # Before, population_size 0 or a misspelt operator in max_tokens ran (the latter silently ignored).
    from lightning_agents.cli import cli_main

    with pytest.raises(SystemExit) as exc:
        cli_main(["evolve", "--config", str(_config(tmp_path, search={setting: value}))])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and re.search(message, err), err[-500:]
    assert not (tmp_path / "out").exists()


def test_evolve_checks_the_sandbox_before_paying_for_anything(tmp_path, monkeypatch, capsys):
    # Without a sandbox the quickstart paid for 48 calls ($0.011) before its first programmer step
    # stopped it; now it stops before the first call.
    from lightning_agents.cli import cli_main
    from lightning_agents.rewards import isolation

    def unavailable(mode):
        raise isolation.IsolationUnavailable(f"sandbox isolation={mode!r} is unavailable on this machine")

    monkeypatch.setattr(isolation, "check_isolation", unavailable)
    with pytest.raises(SystemExit):
        cli_main(["evolve", "--config", str(_config(tmp_path))])
    assert "sandbox isolation='bwrap' is unavailable" in capsys.readouterr().err
    calls = tmp_path / "out" / "calls.jsonl"
    assert not calls.is_file() or not calls.read_text().strip()
