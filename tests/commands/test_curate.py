import csv
import json

import pytest

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.topology import SelectionConfig


class _Tool(CurateCommand):
    """The mixin alone, as the trainer would carry it."""


@pytest.fixture(scope="module")
def tau_file(shared_data):
    return str(shared_data / "tau_bench" / "gpt-4o-airline.json")


def test_curate_writes_sft_rl_and_report(tau_file, tmp_path, capsys):
    out = tmp_path / "curated"
    written = _Tool().curate(
        rollouts=[tau_file], output=str(out), selection=SelectionConfig(rl_top_n=10), draw_tasks=["11"]
    )
    sft = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
    rl = [json.loads(line) for line in (out / "rl_tasks.jsonl").read_text().splitlines()]
    assert len(sft) == 59 and all(r["reward"] == 1.0 for r in sft)
    assert {"messages", "tools", "policy", "task_id", "trial", "recovery", "efficiency"} <= set(sft[0])
    assert all(r["verifier"] == "lightning_agents.tasks.tau_actions.TauActionVerifier" and r["user_goal"] for r in rl)
    assert len(rl) == 10 and all(0 < r["pass_rate"] < 1 for r in rl)
    assert [r["score"] for r in rl] == sorted((r["score"] for r in rl), reverse=True)
    tasks = list(csv.DictReader((out / "report" / "tasks.csv").open()))
    assert len(tasks) == 50 and sum(int(t["rl_selected"]) for t in tasks) == 10
    assert (out / "report" / "graphs" / "task_11.png").stat().st_size > 10_000
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["settings"]["selection"]["rl_top_n"] == 10 and summary["input"]["trajectories"] == 200
    assert set(summary["sft"]) == {"topocurate", "outcome", "random_k", "shortest_k", "pass_rate"}
    assert set(written) >= {"sft", "rl_tasks", "tasks", "trajectories", "summary", "graph_11"}
    printed = capsys.readouterr().out
    assert "| topocurate | 59 | 36 |" in printed and "| random_k | 59 | 36 |" in printed
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_interrupted_run_leaves_no_half_written_file(tau_file, tmp_path, monkeypatch):
    out = tmp_path / "curated"
    _Tool().curate(rollouts=[tau_file], output=str(out), draw_tasks=0)
    before = (out / "rl_tasks.jsonl").read_text()
    import lightning_agents.topology.pipeline as pipeline

    records = pipeline.CurationResult.rl_records

    def partial(self):
        full = records(self)

        def gen():  # the run is interrupted while rl_tasks.jsonl is being written
            yield from full[:2]
            raise KeyboardInterrupt

        return gen()

    monkeypatch.setattr(pipeline.CurationResult, "rl_records", partial)
    with pytest.raises(KeyboardInterrupt):
        _Tool().curate(rollouts=[tau_file], output=str(out), selection=SelectionConfig(rl_top_n=3), draw_tasks=0)
    assert (out / "rl_tasks.jsonl").read_text() == before
    assert sorted(p.name for p in out.iterdir()) == ["report", "rl_tasks.jsonl", "sft.jsonl"]


def test_bad_input_is_reported(tmp_path):
    with pytest.raises(ValueError, match="needs rollout files"):
        _Tool().curate(rollouts=None, output=str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"task_id": 1, "reward": "?", "traj": [{"role": "user", "content": "x"}]}]))
    from lightning_agents.datamodules.trajectories import RolloutFormatError

    with pytest.raises(RolloutFormatError, match=r"bad\.json\[0\]: field 'reward' must be a number"):
        _Tool().curate(rollouts=[str(bad)], output=str(tmp_path / "o"))
    with pytest.raises(ValueError, match="no readable rollout"):
        _Tool().curate(rollouts=[str(bad)], output=str(tmp_path / "o"), skip_invalid=True)


def test_through_the_cli(tau_file, tmp_path, monkeypatch):
    cli = pytest.importorskip("lightning_agents.cli")
    monkeypatch.setattr("sys.argv", ["lightning-agents"])
    out = tmp_path / "cli"
    cli.cli_main(
        [
            "curate",
            "--rollouts",
            f"[{tau_file}]",
            "--output",
            str(out),
            "--draw_tasks",
            "1",
            "--selection.sft_per_task",
            "1",
        ]
    )
    assert len((out / "sft.jsonl").read_text().splitlines()) == 36
    # Two forked workers write the same files (forking even for these 50 tasks).
    monkeypatch.setattr("lightning_agents.topology.pipeline._MIN_TASKS_PER_WORKER", 1)
    cli.cli_main(
        [
            "curate",
            "--rollouts",
            f"[{tau_file}]",
            "--output",
            str(tmp_path / "w2"),
            "--draw_tasks",
            "1",
            "--selection.sft_per_task",
            "1",
            "--workers",
            "2",
        ]
    )
    for name in ("sft.jsonl", "rl_tasks.jsonl", "report/tasks.csv", "report/trajectories.csv"):
        assert (tmp_path / "w2" / name).read_bytes() == (out / name).read_bytes(), name
    # argparse-style multi-value --rollouts, as the console script accepts it
    argv = cli._expand_multi_value_flags(["curate", "--rollouts", tau_file, tau_file, "--output", str(out)])
    assert argv[:3] == ["curate", "--rollouts", f"[{tau_file}, {tau_file}]"]
    argv = cli._expand_multi_value_flags(
        ["curate", "--merge", "a.json", "b.json", "--ground_truth", "t.json", "--output", str(out)]
    )
    assert argv == ["curate", "--merge", "[a.json, b.json]", "--ground_truth", "[t.json]", "--output", str(out)]


def _outputs(folder):
    return {
        name: (folder / name).read_bytes()
        for name in ("sft.jsonl", "rl_tasks.jsonl", "report/tasks.csv", "report/trajectories.csv")
    }


def test_four_shards_merged_equal_the_single_run(tau_file, tmp_path):
    selection = SelectionConfig(rl_top_n=10)
    _Tool().curate(rollouts=[tau_file], output=str(tmp_path / "one"), selection=selection, draw_tasks=0)
    shards = []
    for index in range(4):
        written = _Tool().curate(
            rollouts=[tau_file], output=str(tmp_path / "sharded"), selection=selection, num_shards=4, shard_index=index
        )
        shards.append(written["shard"])
    counts = [len(json.loads(open(s).read())["tasks"]) for s in shards]
    assert sum(counts) == 50 and all(counts)  # every task in exactly one shard
    _Tool().curate(merge=shards, output=str(tmp_path / "merged"), selection=selection)
    assert _outputs(tmp_path / "merged") == _outputs(tmp_path / "one")
    one = json.loads((tmp_path / "one" / "report" / "summary.json").read_text())
    merged = json.loads((tmp_path / "merged" / "report" / "summary.json").read_text())
    assert one["sft"] == merged["sft"] and one["rl"] == merged["rl"] and one["input"] == merged["input"]
    from lightning_agents.topology.shards import ShardError

    with pytest.raises(ShardError, match="every shard"):
        _Tool().curate(merge=shards[:3], output=str(tmp_path / "bad"))
    # --selection.* given with --merge was ignored while the summary recorded it as used: a merge
    # keeps the shards' settings (and says so), other settings are refused.
    _Tool().curate(merge=shards, output=str(tmp_path / "plain"))
    assert _outputs(tmp_path / "plain") == _outputs(tmp_path / "one")
    plain = json.loads((tmp_path / "plain" / "report" / "summary.json").read_text())
    assert plain["settings"]["selection"]["rl_top_n"] == 10
    from lightning_agents.topology.pipeline import CurationError

    with pytest.raises(CurationError, match="rl_top_n"):
        _Tool().curate(merge=shards, output=str(tmp_path / "other"), selection=SelectionConfig(rl_top_n=3))


def test_bfcl_needs_its_possible_answers(shared_data, tmp_path):
    bfcl = shared_data / "bfcl"
    result = str(bfcl / "claude_multi_turn_base_result.json")
    with pytest.raises(ValueError, match="possible-answer"):
        _Tool().curate(rollouts=[result], output=str(tmp_path / "none"))
    answers = str(bfcl / "BFCL_v4_multi_turn_base_possible_answer.json")
    _Tool().curate(rollouts=[result], ground_truth=[answers], output=str(tmp_path / "bfcl"), draw_tasks=0)
    sft = [json.loads(line) for line in (tmp_path / "bfcl" / "sft.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in sft] == ["multi_turn_base_0", "multi_turn_base_1"] and all(
        r["efficiency"] == 1.0 for r in sft
    )


@pytest.mark.slow
def test_ray_engine_gives_the_single_run(tau_file, tmp_path):
    pytest.importorskip("ray")
    selection = SelectionConfig(rl_top_n=10)
    _Tool().curate(rollouts=[tau_file], output=str(tmp_path / "one"), selection=selection, draw_tasks=0)
    _Tool().curate(rollouts=[tau_file], output=str(tmp_path / "ray"), selection=selection, engine="ray", num_shards=3)
    assert _outputs(tmp_path / "ray") == _outputs(tmp_path / "one")
