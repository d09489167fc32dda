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
    proc = subprocess.run(
        [Path(sys.executable).with_name("lightning-agents"), "--help"], capture_output=True, text=True
    )
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
    assert usage, (
        f"{config.name} needs a usage comment: '# lightning-agents <subcommand> --config configs/{config.name}'"
    )
    code, out = run_cli([usage.group(1), "--config", str(config), "--print_config"], capsys)
    assert code == 0, out.err
    printed = yaml.safe_load(out.out)
    assert isinstance(printed, dict) and printed


EMBEDDED_FIT_CONFIGS = [
    c
    for c in CONFIGS
    if re.search(r"lightning-agents fit (?:--config|-c) configs/", c.read_text())
    and "embedded:" in c.read_text()
    and not re.search(r"^\s*(?:model|teacher|reference|tokenizer): (?!embedded:)\S*/", c.read_text(), re.M)
    and not re.search(r"^\s*accelerator: gpu", c.read_text(), re.M)
]


@pytest.mark.parametrize("config", EMBEDDED_FIT_CONFIGS, ids=[c.name for c in EMBEDDED_FIT_CONFIGS])
def test_every_embedded_fit_config_instantiates_and_builds_its_optimizer(config):
    """Parsing is not enough: the classes are built as `fit` builds them, then the optimizer over the
    weights configure_model creates (configs/muzo_quickstart.yaml parsed but could not start)."""
    cli = cli_main(["--config", str(config), "--trainer.logger", "false"], run=False)
    cli.model.configure_model()
    built = cli.model.configure_optimizers()
    optimizer = built[0][0] if isinstance(built, tuple) else built
    optimizer = optimizer[0] if isinstance(optimizer, list) else optimizer
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) > 0


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
        "curate",
        "--rollouts",
        "[a.json, b.json]",
        "--output",
        "o",
    ]


def test_export_merge_flag_stays_a_bool():
    # `export --merge false` (README) is a bool, not curate's list of shard files.
    argv = ["export", "--ckpt_path", "last.ckpt", "--output", "out", "--merge", "false"]
    assert _expand_multi_value_flags(argv) == argv
    assert _expand_multi_value_flags(["curate", "--merge", "a.json", "b.json"]) == [
        "curate",
        "--merge",
        "[a.json, b.json]",
    ]


def test_fit_through_cli_main(tmp_path):
    cli = cli_main(
        [
            "fit",
            "--model",
            "SFTModule",
            "--model.lr",
            "0.003",
            "--data",
            "ChatDataModule",
            "--data.embedded_size",
            "64",
            "--data.batch_size",
            "16",
            "--data.val",
            "null",
            "--trainer.max_steps",
            "3",
            "--trainer.accelerator",
            "cpu",
            "--trainer.logger",
            "false",
            "--trainer.enable_checkpointing",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert isinstance(cli, AgentsCLI)
    assert cli.trainer.global_step == 3
    assert cli.model.model.config.model_type == "llama"


@pytest.mark.parametrize(
    ("optimizer", "strategy"),
    [("lightning_agents.optim.MUZOAdam", "muzo"), ("torch.optim.AdamW", "auto")],
)
def test_config_optimizer_section_meets_the_weights_built_in_configure_model(tmp_path, optimizer, strategy):
    # The modules create their weights in configure_model; Lightning's CLI builds an `optimizer:`
    # section when it instantiates the classes, before that. configs/muzo_quickstart.yaml failed so
    # ("got no parameters to optimise") until the CLI deferred the optimizer to configure_optimizers.
    cli = cli_main(
        [
            "fit",
            "--config",
            str(CONFIGS[0].parent / "muzo_quickstart.yaml"),
            "--optimizer",
            optimizer,
            "--optimizer.lr",
            "0.001",
            "--lr_scheduler",
            "torch.optim.lr_scheduler.LinearLR",
            "--trainer.strategy",
            strategy,
            "--data.embedded_size",
            "64",
            "--data.val",
            "null",
            "--trainer.max_steps",
            "2",
            "--trainer.val_check_interval",
            "null",
            "--trainer.logger",
            "false",
            "--trainer.callbacks",
            "[]",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    assert cli.trainer.global_step == 2
    (opt,) = cli.trainer.optimizers
    assert type(opt).__name__ == optimizer.rsplit(".", 1)[1]
    trained = {id(p) for group in opt.param_groups for p in group["params"]}
    assert trained == {id(p) for p in cli.model.model.parameters()}
    assert type(cli.trainer.lr_scheduler_configs[0].scheduler).__name__ == "LinearLR"


def test_bad_input_is_one_line_not_a_traceback(tmp_path):
    exe = Path(sys.executable).with_name("lightning-agents")
    proc = subprocess.run(
        [exe, "curate", "--rollouts", str(tmp_path / "absent.json"), "--output", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    # Only the error: not the trainer's start-up lines (GPU/TPU available, a logging tip), which
    # are about training and came before every tool's own output.
    assert proc.stderr.strip().splitlines() == [
        f"lightning-agents: error: rollouts: rollout file {tmp_path / 'absent.json'} does not exist (command line)"
    ], proc.stderr


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


# One model setting and one-line errors: each exits 2 before any model is loaded, with a single
# stderr line naming the setting and where its value came from.


def one_line_error(capsys, args):
    code, out = run_cli(args, capsys)
    lines = out.err.strip().splitlines()
    assert code == 2, out.err
    assert len(lines) == 1 and lines[0].startswith("lightning-agents: error: "), out.err
    return lines[0]


@pytest.fixture
def no_model_loads(monkeypatch):
    """Fail the test if a model's weights start loading: errors must come before that."""
    import lightning_agents.models as models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the settings were checked")

    import lightning_agents.modules.rstg as rstg
    import lightning_agents.modules.sft as sft

    monkeypatch.setattr(models, "load_causal_lm", refuse)
    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)
    for module in (sft, rstg):
        for name in ("load_causal_lm", "load_model_and_tokenizer"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)


@pytest.fixture(scope="module")
def other_vocab_tokenizer(tmp_path_factory):
    from lightning_agents.models import load_tokenizer

    tok = load_tokenizer("embedded:student")
    tok.add_tokens(["<an_extra_token>"])
    path = tmp_path_factory.mktemp("other_tokenizer")
    tok.save_pretrained(path)
    return path


QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")


def test_data_tokenizer_follows_the_model(capsys):
    code, out = run_cli(["fit", "--config", QUICKSTART, "--model.model", "embedded:teacher", "--print_config"], capsys)
    assert code == 0, out.err
    printed = yaml.safe_load(out.out)
    assert printed["data"]["init_args"].get("tokenizer") in (None, "embedded:teacher")
    cli = cli_main(
        ["--config", QUICKSTART, "--model.model", "embedded:teacher", "--trainer.logger", "false"], run=False
    )
    assert cli.datamodule.tokenizer_name == "embedded:teacher"


def test_mismatched_data_tokenizer_is_a_one_line_error(capsys, no_model_loads, other_vocab_tokenizer):
    line = one_line_error(capsys, ["fit", "--config", QUICKSTART, "--data.tokenizer", str(other_vocab_tokenizer)])
    assert "data.init_args.tokenizer" in line and "different vocabularies" in line and "(command line)" in line


def test_mismatched_teacher_is_a_one_line_error(capsys, no_model_loads, other_vocab_tokenizer):
    line = one_line_error(
        capsys,
        ["fit", "--model", "RSTGModule", "--model.teacher", str(other_vocab_tokenizer), "--data", "PromptDataModule"],
    )
    assert "model.init_args.teacher" in line and "different vocabularies" in line


def test_bad_model_path_names_the_setting_and_yaml_line(capsys, no_model_loads, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(Path(QUICKSTART).read_text().replace("model: embedded:student", "model: ./checkpoints/typo"))
    line = one_line_error(capsys, ["fit", "--config", str(config)])
    lineno = next(i for i, text in enumerate(config.read_text().splitlines(), 1) if "./checkpoints/typo" in text)
    assert line == (
        "lightning-agents: error: model.init_args.model: model path ./checkpoints/typo does not exist "
        f"({config}:{lineno})"
    )


def test_bad_tokenizer_path(capsys, no_model_loads):
    line = one_line_error(capsys, ["fit", "--config", QUICKSTART, "--data.tokenizer", "/no/such/tokenizer"])
    assert "data.init_args.tokenizer" in line and "/no/such/tokenizer does not exist" in line


def test_unknown_choice_is_refused_by_print_config(capsys):
    line = one_line_error(
        capsys, ["fit", "--model", "RSTGModule", "--model.loss_aggregation", "token-mean", "--print_config"]
    )
    assert line == (
        "lightning-agents: error: model.init_args.loss_aggregation: 'token-mean' is not one of "
        "'sequence_mean', 'token_mean', 'constant' (command line)"
    )


def test_help_lists_the_choices(capsys):
    code, out = run_cli(["fit", "--model.help", "RSTGModule"], capsys)
    assert code == 0 and "sequence_mean" in out.out and "token_mean" in out.out


def test_unknown_yaml_key_names_file_and_line(capsys, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(Path(QUICKSTART).read_text().replace("    lr: 0.002\n", "    learning_rate: 0.002\n"))
    line = one_line_error(capsys, ["fit", "--config", str(config), "--print_config"])
    lineno = next(i for i, text in enumerate(config.read_text().splitlines(), 1) if "learning_rate" in text)
    assert line == f"lightning-agents: error: model.init_args.learning_rate: no such setting ({config}:{lineno})"
