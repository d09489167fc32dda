"""The lightning-agents CLI: subcommands, --help, --print_config, overrides, and a real fit."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lightning_agents.cli import AgentsCLI, _expand_multi_value_flags, cli_main

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return exc.value.code, capsys.readouterr()


def test_help_lists_every_subcommand(capsys):
    code, out = run_cli(["--help"], capsys)
    assert code == 0
    for name in ("fit", "validate", "test", "curate", "evolve", "rollout", "export", "generate"):
        assert f"    {name}" in out.out
    # Replaced by `generate` (see README).
    assert "    predict" not in out.out


def test_console_script_is_installed():
    proc = subprocess.run([Path(sys.executable).with_name("lightning-agents"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "curate" in proc.stdout


def test_fit_help_documents_module_arguments(capsys):
    code, out = run_cli(["fit", "--model.help", "SFTModule"], capsys)
    assert code == 0
    assert "--model.gradient_checkpointing" in out.out
    assert "recompute activations" in out.out


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_every_config_validates(config, capsys):
    """Each YAML names its command in a usage comment and parses against it: class names resolve
    and every argument type checks."""
    usage = re.search(r"lightning-agents (\w+) (?:--config|-c) configs/" + re.escape(config.name), config.read_text())
    assert usage, f"{config.name} needs a usage comment: '# lightning-agents <subcommand> --config configs/{config.name}'"
    code, out = run_cli([usage.group(1), "--config", str(config), "--print_config"], capsys)
    assert code == 0, out.err
    printed = yaml.safe_load(out.out)
    assert isinstance(printed, dict) and printed


def test_dotted_overrides_and_short_class_names(capsys):
    config = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
    code, out = run_cli(
        ["fit", "--config", str(config), "--model.lr", "0.01", "--trainer.max_steps", "7", "--print_config"], capsys
    )
    assert code == 0
    printed = yaml.safe_load(out.out)
    assert printed["model"]["init_args"]["lr"] == 0.01
    assert printed["trainer"]["max_steps"] == 7
    assert printed["model"]["class_path"].endswith("SFTModule")
    assert printed["data"]["class_path"].endswith("ChatDataModule")


def test_unknown_argument_is_a_clear_error(capsys):
    code, out = run_cli(["fit", "--model", "SFTModule", "--model.learning_rate", "1"], capsys)
    assert code != 0
    assert "learning_rate" in out.err


def test_multi_value_rollouts_flag_is_expanded():
    assert _expand_multi_value_flags(["curate", "--rollouts", "a.json", "b.json", "--output", "o"]) == [
        "curate", "--rollouts", "[a.json, b.json]", "--output", "o"
    ]


def test_fit_through_cli_main(tmp_path):
    cli = cli_main(
        [
            "fit",
            "--model", "SFTModule", "--model.lr", "0.003",
            "--data", "ChatDataModule", "--data.embedded_size", "64", "--data.batch_size", "16", "--data.val", "null",
            "--trainer.max_steps", "3", "--trainer.accelerator", "cpu", "--trainer.logger", "false",
            "--trainer.enable_checkpointing", "false", "--trainer.default_root_dir", str(tmp_path),
            "--trainer.enable_progress_bar", "false",
        ]
    )
    assert isinstance(cli, AgentsCLI)
    assert cli.trainer.global_step == 3
    assert cli.model.model.config.model_type == "llama"


def test_bad_input_is_one_line_not_a_traceback(tmp_path):
    exe = Path(sys.executable).with_name("lightning-agents")
    proc = subprocess.run([exe, "curate", "--rollouts", str(tmp_path / "absent.json"), "--output", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"lightning-agents: error: rollout file {tmp_path / 'absent.json'} does not exist"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("flag", "name"),
    [
        ("--model.help", "SFTModule"),
        ("--model.help", "RSTGModule"),
        ("--data.help", "ChatDataModule"),
        ("--data.help", "TopoCurateDataModule"),
        ("--data.help", "PromptDataModule"),
        ("--trainer.callbacks.help", "HeldOutAccuracy"),
        ("--trainer.callbacks.help", "HFlowCallback"),
        ("--trainer.strategy.help", "MUZOStrategy"),
        ("--trainer.strategy.help", "MUZODDPStrategy"),
        ("--optimizer.help", "MUZOAdam"),
    ],
)
def test_every_package_class_resolves_by_short_name(flag, name, capsys):
    code, out = run_cli(["fit", flag, name], capsys)
    assert code == 0, out.err
    assert out.out.startswith("usage:") and "(type:" in out.out  # the class's documented arguments


def test_an_unknown_short_name_is_refused(capsys):
    code, out = run_cli(["fit", "--model.help", "NoSuchModule"], capsys)
    assert code != 0 and "NoSuchModule" in out.err
