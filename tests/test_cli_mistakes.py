"""Mistakes a user makes in a config or on the command line: one line naming the setting and where
it was set, before anything expensive runs (found by an audit of 131 such mistakes)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_cli import QUICKSTART, one_line_error, run_cli  # tests/ is on sys.path (rootdir conftest)

CONFIGS = Path(QUICKSTART).parent


def _copy(tmp_path, name, edit):
    """``configs/<name>`` copied into ``tmp_path/cfg`` with ``edit(dict)`` applied."""
    config = yaml.safe_load((CONFIGS / name).read_text())
    edit(config)
    folder = tmp_path / "cfg"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _line_of(path, key):
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith(f"{key}:"))


def test_a_config_given_by_a_relative_path_with_a_folder_keeps_its_line(tmp_path, capsys, monkeypatch):
    """jsonargparse changes directory while it parses: a relative ``cfg/run.yaml`` lost its file:line."""
    path = _copy(tmp_path, "quickstart.yaml", lambda c: c["model"]["init_args"].update(lerning_rate=0.002))
    monkeypatch.chdir(tmp_path)
    line = one_line_error(capsys, ["fit", "--config", "cfg/quickstart.yaml", "--print_config"])
    assert line.endswith(
        f"model.init_args.lerning_rate: no such setting (cfg/quickstart.yaml:{_line_of(path, 'lerning_rate')})"
    )


@pytest.mark.parametrize(
    ("edit", "key", "message"),
    [
        (
            lambda c: c["model"]["init_args"].update(num_generations=1),
            "num_generations",
            "model.num_generations must be >= 2",
        ),
        (
            lambda c: c["model"]["init_args"].update(temperature=0.0),
            "temperature",
            "model.temperature must be > 0, got 0.0",
        ),
        (lambda c: c["model"]["init_args"].update(eps_low=-0.2), "eps_low", "model.eps_low must be >= 0, got -0.2"),
        (lambda c: c["data"]["init_args"].update(batch_size=0), "batch_size", "data.batch_size must be >= 1, got 0"),
    ],
    ids=["num_generations", "temperature", "eps_low", "batch_size"],
)
def test_a_value_a_constructor_refuses_is_one_line_with_its_line(tmp_path, capsys, monkeypatch, edit, key, message):
    """Before: jsonargparse wrapped the module's own message in a 70-line "does not validate" report."""
    path = _copy(tmp_path, "grpo_quickstart.yaml", edit)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(capsys, ["fit", "--config", "cfg/grpo_quickstart.yaml"])
    assert message in line and line.endswith(f"(cfg/grpo_quickstart.yaml:{_line_of(path, key)})"), line


def test_sft_settings_that_trained_silently_are_refused(tmp_path, capsys):
    path = _copy(tmp_path, "quickstart.yaml", lambda c: c["data"]["init_args"].update(max_length=-1))
    line = one_line_error(capsys, ["fit", "--config", str(path)])
    assert "data.max_length must be >= 1, got -1" in line  # it trained on rows cut one token short


def test_muzo_adam_without_its_strategy_is_refused(tmp_path, capsys):
    """Lightning's own closure runs backward: each of the 2q evaluations paid backprop's memory."""
    path = _copy(tmp_path, "muzo_quickstart.yaml", lambda c: c["trainer"].pop("strategy"))
    code, out = run_cli(["fit", "--config", str(path), "--trainer.max_steps", "1", "--trainer.logger", "false"], capsys)
    line = out.err.strip().splitlines()[-1]  # at its first step, after the weights loaded
    assert code == 2 and line.startswith("lightning-agents: error: MUZOAdam: its closure ran backward"), out.err
    assert "trainer.strategy: muzo" in line


def test_missing_data_file_is_named_at_once_not_looked_up_as_a_dataset(tmp_path, capsys):
    path = _copy(tmp_path, "grpo_quickstart.yaml", lambda c: c["data"]["init_args"].update(train="data/nope.jsonl"))
    line = one_line_error(capsys, ["fit", "--config", str(path)])
    assert "'data/nope.jsonl' does not exist" in line


def test_gzipped_conversation_and_rollout_files_are_read(tmp_path):
    from lightning_agents.datamodules.chat import read_conversations
    from lightning_agents.datamodules.trajectories import load_rollouts

    rollouts = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau_bench" / "gpt-4o-airline.json"
    if not rollouts.is_file():
        pytest.skip("../shared/data is not beside this checkout")
    packed = tmp_path / "airline.json.gz"
    with rollouts.open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert len(load_rollouts(packed)) == len(load_rollouts(rollouts)) == 200
    conversations = tmp_path / "chat.jsonl.gz"
    with gzip.open(conversations, "wt") as fh:
        fh.write(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}))
    found, errors = read_conversations(str(conversations))
    assert len(found) == 1 and not errors


def test_too_many_held_out_problems_is_refused(tmp_path, capsys):
    """Cut to fit, it left the search one problem to choose a workflow on."""
    config = yaml.safe_load((CONFIGS / "hflow_quickstart.yaml").read_text())
    config.update(task_size=8, output=str(tmp_path / "out"), memory_file=str(tmp_path / "memory.json"))
    config["search"]["heldout_problems"] = 8
    path = tmp_path / "evolve.yaml"
    path.write_text(yaml.safe_dump(config))
    line = one_line_error(capsys, ["evolve", "--config", str(path)])
    assert "search.heldout_problems=8 leaves no problems to search: the task has 8" in line


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path, capsys):
    bogus = tmp_path / "notes.ckpt"
    bogus.write_text("not a checkpoint\n")
    line = one_line_error(capsys, ["export", "--ckpt_path", str(bogus), "--output", str(tmp_path / "out")])
    assert f"ckpt_path: {bogus} is not a checkpoint this package wrote" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rollout", "--num_tasks", "0"], "num_tasks must be >= 1, got 0"),  # wrote an empty file, then divided by 0
        (
            ["generate", "--policy", "embedded:student", "--prompts", "p.jsonl", "--num_samples", "0"],
            "num_samples must be >= 1",
        ),
        (["curate", "--rollouts", "[r.json]", "--num_shards", "0"], "--num_shards >= 1"),
    ],
    ids=["rollout", "generate", "curate"],
)
def test_tool_counts_below_one_are_refused_before_any_work(tmp_path, capsys, args, message):
    line = one_line_error(capsys, [*args, "--output", str(tmp_path / "out")])
    assert message in line


def test_an_unknown_class_is_one_line_naming_the_section(tmp_path, capsys):
    """Before: 400 characters of jsonargparse's union report."""
    path = _copy(tmp_path, "quickstart.yaml", lambda c: c["data"].update(class_path="ChatDataModul"))
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert line.startswith("lightning-agents: error: data: 'ChatDataModul' names no class"), line
    line = one_line_error(
        capsys, ["fit", "--config", QUICKSTART, "--model", "lightning_agents.modules.SFTModul", "--print_config"]
    )
    assert (
        "model: class_path 'lightning_agents.modules.SFTModul': module 'lightning_agents.modules' has no attribute"
        in line
    )


def test_a_tool_refuses_fit_options_it_would_ignore(tmp_path, capsys):
    """The tools are subcommands of Lightning's CLI, so every one accepted --trainer.* and ignored it."""
    line = one_line_error(
        capsys, ["curate", "--rollouts", "[r.json]", "--output", str(tmp_path), "--trainer.max_steps", "5"]
    )
    assert "curate does not use --trainer.max_steps" in line


@pytest.mark.parametrize(
    "args, flag",
    [
        (["evolve", "--config", "configs/hflow_quickstart.yaml", "--preferences", "simulated"], "--preferences"),
        (["fit", "--config", QUICKSTART, "--trainer.max_step", "5"], "--trainer.max_step"),
    ],
)
def test_a_shortened_flag_is_refused_not_read_as_the_setting_it_begins(capsys, args, flag):
    """argparse's prefix matching read `--preferences simulated` as `--preferences_file simulated`."""
    root = Path(__file__).resolve().parents[1]
    args = [str(root / a) if a.startswith("configs/") else a for a in args]
    line = one_line_error(capsys, [*args, "--print_config"])
    assert f"unrecognized arguments: {flag}" in line


def test_a_scheduler_without_an_optimizer_section_is_refused(tmp_path, capsys):
    """Lightning applies `lr_scheduler:` only with `optimizer:`; alone it was dropped silently and
    the run trained at the module's own rate."""
    path = _copy(
        tmp_path,
        "quickstart.yaml",
        lambda c: c.update(lr_scheduler={"class_path": "torch.optim.lr_scheduler.LinearLR"}),
    )
    line = one_line_error(capsys, ["fit", "--config", str(path), "--trainer.max_steps", "1"])
    assert "lr_scheduler" in line and "needs an optimizer: section" in line and "quickstart.yaml:" in line


@pytest.mark.parametrize(
    "flag, instead",
    [
        ("--trainer.accumulate_grad_batches=4", "generation_batches_per_step"),
        ("--trainer.gradient_clip_val=1.0", "max_grad_norm"),
    ],
)
def test_rstg_names_its_own_setting_for_what_lightning_refuses_it(capsys, flag, instead):
    """Lightning refused these with "switch to automatic optimization", which RSTG cannot do."""
    config = str(Path(__file__).resolve().parents[1] / "configs" / "rstg_quickstart.yaml")
    line = one_line_error(capsys, ["fit", "--config", config, flag, "--trainer.max_steps", "1"])
    assert f"use model.{instead}" in line


def test_an_optimizer_argument_it_refuses_is_one_line_with_its_line(tmp_path, capsys):
    """MUZOAdam names its argument after its class (`MUZOAdam: num_queries must be ...`): the line
    of `optimizer.init_args.num_queries` was missing from the error."""
    path = _copy(tmp_path, "muzo_quickstart.yaml", lambda c: c["optimizer"]["init_args"].update(num_queries=0))
    code, out = run_cli(["fit", "--config", str(path)], capsys)
    line = out.err.strip().splitlines()[-1]  # the optimizer is built after the weights load
    assert code == 2 and "MUZOAdam: num_queries must be an integer >= 1, got 0" in line, out.err
    assert line.endswith(f"({path}:{_line_of(path, 'num_queries')})"), line
