"""--help of the tool subcommands and of nested class settings; what each tool's parser accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml
from test_cli import QUICKSTART, one_line_error, run_cli  # tests/ is on sys.path (rootdir conftest)

from lightning_agents.cli import TOOL_SUBCOMMANDS, cli_main, nested_class_help

TOOLS = [t for t in TOOL_SUBCOMMANDS if t != "teacher_cache"]
FIT_OPTIONS = ("--trainer", "--model", "--data", "--optimizer", "--lr_scheduler", "--seed_everything")
# one argument of each tool's own
OWN_ARGUMENT = {
    "curate": "--rollouts",
    "evolve": "--backbones",
    "rollout": "--policy",
    "export": "--ckpt_path",
    "generate": "--prompts",
    "convert": "--source",
}


def options(help_text: str) -> set[str]:
    """The option names a --help text lists (``--trainer.max_steps``, ``--output``, ...)."""
    return set(re.findall(r"^\s+(--[\w.]+)", help_text, re.M))


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_help_lists_only_what_the_tool_reads(tool, capsys):
    """Before: every tool's --help held Lightning's whole fit parser (500+ lines: --trainer.*,
    --model, --data, --optimizer, --lr_scheduler, --seed_everything), all refused or ignored."""
    code, out = run_cli([tool, "--help"], capsys)
    assert code == 0, out.err
    listed = options(out.out)
    own = OWN_ARGUMENT[tool]
    fit = sorted(o for o in listed if o.split(".")[0] in FIT_OPTIONS)
    assert not fit, f"{tool} --help lists fit options: {fit}"
    assert own in listed and "--config" in out.out
    # the fit parser alone is 500+ lines; evolve's own settings take about 410
    assert len(out.out.splitlines()) < 480


def test_teacher_cache_help_keeps_the_fit_config_it_reads(capsys):
    """teacher_cache reads the fit config: model, data, trainer.default_root_dir, seed_everything."""
    code, out = run_cli(["teacher_cache", "--help"], capsys)
    assert code == 0, out.err
    listed = options(out.out)
    for option in ("--model", "--data", "--trainer.default_root_dir", "--seed_everything", "--batch_size"):
        assert option in listed
    # and says which of them it reads (before: only the first line of the method's docstring)
    text = " ".join(out.out.split())
    assert "optimizer and lr_scheduler are accepted so that the same file parses, and ignored" in text


def test_teacher_cache_still_takes_a_whole_fit_config(capsys):
    code, out = run_cli(["teacher_cache", "--config", QUICKSTART, "--print_config"], capsys)
    assert code == 0, out.err
    printed = yaml.safe_load(out.out)
    assert printed["model"]["class_path"].endswith("SFTModule") and "trainer" in printed


def test_a_fit_section_in_a_tool_config_is_one_line_with_its_line(tmp_path, capsys):
    """Before: a tool's config could hold a trainer: section, accepted and ignored."""
    config = tmp_path / "curate.yaml"
    config.write_text("output: out\ntrainer:\n  max_steps: 3\n")
    line = one_line_error(capsys, ["curate", "--config", str(config), "--print_config"])
    assert line == (
        f"lightning-agents: error: trainer.max_steps: an option of fit, which curate does not use ({config}:3)"
    )


def test_a_tool_refuses_seed_everything(capsys):
    """Before: accepted and ignored by every tool (those that sample take --seed)."""
    line = one_line_error(capsys, ["rollout", "--seed_everything", "3", "--print_config"])
    assert "rollout does not use --seed_everything" in line


@pytest.mark.parametrize("tool", ["evolve", "curate"])
def test_tool_configs_still_parse(tool, capsys):
    config = Path(QUICKSTART).parent / "hflow_quickstart.yaml"
    args = ["--config", str(config)] if tool == "evolve" else ["--rollouts", "[r.json]", "--output", "o"]
    code, out = run_cli([tool, *args, "--print_config"], capsys)
    assert code == 0, out.err
    printed = yaml.safe_load(out.out)
    assert "trainer" not in printed and "model" not in printed and "seed_everything" not in printed


def test_export_does_not_build_the_checkpoint_model_it_ignores(tmp_path, monkeypatch):
    """Before: Lightning parsed the checkpoint's hyperparameters into export's (unused) model
    setting and built that module, loading its tokenizer, before export rebuilt it."""
    import lightning_agents.export as export

    ckpt = tmp_path / "last.ckpt"
    torch.save({"hyper_parameters": {"_class_path": "lightning_agents.SFTModule", "model": "embedded:student"}}, ckpt)
    loaded = []
    monkeypatch.setattr(export, "load_trained_module", lambda path: loaded.append(path) or _Module())
    monkeypatch.setattr(export, "export_hf_folder", lambda *args, **kwargs: tmp_path / "hf")
    cli = cli_main(["export", "--ckpt_path", str(ckpt), "--output", str(tmp_path / "hf")])
    assert loaded == [str(ckpt)]
    assert cli.model is None and "model" not in cli.config.export


class _Module:
    model = tokenizer = adapter = None


def test_a_file_torch_cannot_read_is_one_line(tmp_path, capsys):
    """Before: some non-checkpoints (this one: a KeyError in torch's weights-only unpickler) ended
    in a traceback."""
    bogus = tmp_path / "notes.ckpt"
    bogus.write_text("junk\n")
    line = one_line_error(capsys, ["export", "--ckpt_path", str(bogus), "--output", str(tmp_path / "out")])
    assert f"ckpt_path: {bogus} is not a checkpoint this package wrote" in line


# ----------------------------------------------------------------------- help of a dataclass setting


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "lightning_agents.SFTModule", "--model.adapter.help", "lightning_agents.adapters.AdapterConfig"],
        ["--model", "SFTModule", "--model.adapter.help", "AdapterConfig"],
        ["--model", "SFTModule", "--model.adapter.help"],
        ["--model=RSTGModule", "--model.adapter.help"],
        ["--config", QUICKSTART, "--model.adapter.help"],
    ],
    ids=["class_paths", "short_names", "no_value", "rstg", "from_config"],
)
def test_adapter_help_after_the_model_class(args, capsys):
    """Before: "ignored explicit argument" (with a value) or "--model: expected one argument"
    (without): jsonargparse hands --model.* options that follow --model CLASS to the class's parser
    with a value, and the help of a dataclass setting takes none."""
    code, out = run_cli(["fit", *args], capsys)
    assert code == 0, out.err
    assert "Help for --model.adapter.help=lightning_agents.AdapterConfig" in out.out
    assert "--model.adapter.rank" in out.out and "LoRA rank" in out.out


def test_adapter_help_the_jsonargparse_way(capsys):
    """What jsonargparse itself understands, and what cli_main rewrites the forms above to."""
    code, out = run_cli(["fit", "--model.help", "SFTModule", "--model.adapter.help"], capsys)
    assert code == 0 and "--model.adapter.rank" in out.out
    assert nested_class_help(["fit", "--model", "SFTModule", "--model.adapter.help", "AdapterConfig"]) == [
        "fit",
        "--model.help",
        "SFTModule",
        "--model.adapter.help",
    ]


def test_quantization_help_from_a_config(capsys):
    code, out = run_cli(["fit", "--config", QUICKSTART, "--model.quantization.help"], capsys)
    assert code == 0, out.err
    assert "--model.quantization.bits" in out.out


def test_a_required_dataclass_setting_shows_the_class_help(capsys):
    """TopoCurateDataModule's selection is a group of the class's own help."""
    config = Path(QUICKSTART).parent / "topocurate_sft.yaml"
    code, out = run_cli(["fit", "--config", str(config), "--data.selection.help"], capsys)
    assert code == 0, out.err
    assert "--data.selection.sft_per_task" in out.out


def test_other_help_options_are_left_to_jsonargparse():
    for argv in (
        ["fit", "--model.help", "SFTModule"],
        ["fit", "--model", "SFTModule", "--model.lr.help"],
        ["fit", "--trainer.callbacks.help", "HeldOutAccuracy"],
        ["curate", "--selection.help"],
        ["fit", "--model", "--model.adapter.help"],  # no class: jsonargparse's error
    ):
        assert nested_class_help(argv) == argv


# --------------------------------------------------------------------------------- documentation

HELP_PAGES = [
    ["fit", "--help"],
    *(["fit", "--model.help", m] for m in ("SFTModule", "RSTGModule")),
    *(["fit", "--data.help", d] for d in ("ChatDataModule", "PromptDataModule", "TopoCurateDataModule")),
    ["fit", "--model.help", "SFTModule", "--model.adapter.help"],
    ["fit", "--model.help", "SFTModule", "--model.quantization.help"],
    ["evolve", "--backbones.help"],
    *([t, "--help"] for t in TOOL_SUBCOMMANDS),
]


def help_entries(text: str) -> dict[str, str]:
    """``{option: its help text}`` of an argparse --help page."""
    found: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"  (-[^\s,]+)\S*(?: \S+)*?(?:\s{2,}(.*))?$", line)
        if line.startswith("  -") and match:
            current = match.group(1)
            found[current] = match.group(2) or ""
        elif current and line.startswith("      "):
            found[current] += " " + line.strip()
        else:
            current = None
    return found


@pytest.mark.parametrize("args", HELP_PAGES, ids=[" ".join(a) for a in HELP_PAGES])
def test_every_argument_is_explained(args, capsys):
    """An audit found none with an empty help line or only its type; this keeps it so."""
    code, out = run_cli(args, capsys)
    assert code == 0, out.err
    entries = help_entries(out.out)
    assert len(entries) > 3
    bare = [o for o, text in entries.items() if not re.sub(r"\((?:required, )?type:.*\)$", "", text.strip()).strip()]
    assert not bare, f"{' '.join(args)}: no explanation for {bare}"
