"""Mistakes found by the session-35 review of the CLI audit (2d0b211): ``convert`` still deleted a
folder of the user's files, a tab-indented JSON ``--config`` was refused as "not valid YAML", and
``target_modules: q_proj`` gave a garbled union report instead of the adapter's own message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_cli import QUICKSTART, run_cli
from test_cli import one_line_error as _one_line_error

from lightning_agents.cli import cli_main

MARKER = "lightning_agents_export.json"


def one_line_error(capsys, args):
    """The CLI's one error line, without its ``lightning-agents: error: `` prefix."""
    return _one_line_error(capsys, args).removeprefix("lightning-agents: error: ")


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _line(path: Path, text: str, nth: int = 1) -> int:
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line][nth - 1]


# ------------------------------------------------------------------------------------- convert


@pytest.fixture
def model_folder(tmp_path):
    """A loadable HF model folder that also holds the user's GGUF file and notes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_agents.models import load_tokenizer

    folder = tmp_path / "my-finetune"
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    load_tokenizer("embedded:student").save_pretrained(folder)
    (folder / "model-Q4_K_M.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    (folder / "NOTES.md").write_text("my training notes\n")
    return folder


def test_convert_into_its_own_source_folder_is_refused(model_folder, capsys):
    """Before: the source folder has config.json, so it passed as "an earlier conversion" and was
    replaced whole: the user's .gguf file and NOTES.md were deleted."""
    before = _listing(model_folder)
    line = one_line_error(capsys, ["convert", "--source", str(model_folder), "--output", str(model_folder)])
    assert line.startswith(f"output: {model_folder} is the source's folder ({model_folder}); ")
    assert line.endswith("name a new folder outside it (command line)")
    assert _listing(model_folder) == before


def test_convert_into_a_folder_holding_or_inside_the_source_is_refused(model_folder, capsys):
    gguf = model_folder / "model-Q4_K_M.gguf"
    line = one_line_error(capsys, ["convert", "--source", str(gguf), "--output", str(model_folder)])
    assert line.startswith(f"output: {model_folder} holds the source ({gguf}); ")
    inside = model_folder / "hf"
    line = one_line_error(capsys, ["convert", "--source", str(model_folder), "--output", str(inside)])
    assert line.startswith(f"output: {inside} lies inside the source's folder ({model_folder}); ")
    assert not inside.exists() and (model_folder / "NOTES.md").is_file()


def test_convert_refuses_a_model_folder_it_did_not_mark(model_folder, tmp_path, capsys):
    """Before: any folder with config.json (another model, a conversion by the old code) was
    replaced whole; now only a folder that convert (or export) marked is."""
    line = one_line_error(capsys, ["convert", "--source", "embedded:student", "--output", str(model_folder)])
    assert line.startswith(
        f"output: {model_folder} is a model folder that convert did not mark as its own (no {MARKER}"
    )
    assert f"delete it by hand (rm -r {model_folder})" in line
    assert (model_folder / "NOTES.md").is_file() and (model_folder / "model-Q4_K_M.gguf").is_file()


def test_convert_marks_its_output_and_replaces_only_that(tmp_path, capsys):
    out = tmp_path / "hf"
    cli_main(["convert", "--source", "embedded:student", "--output", str(out), "--dtype", "bfloat16"])
    assert json.loads((out / MARKER).read_text()) == {"converted_from": "embedded:student", "dtype": "bfloat16"}
    cli_main(["convert", "--source", "embedded:student", "--output", str(out)])
    assert json.loads((out / MARKER).read_text())["dtype"] == "float32"
    assert (out / "config.json").is_file()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_convert_help_and_readme_describe_the_marker(capsys):
    code, out = run_cli(["convert", "--help"], capsys)
    assert code == 0 and MARKER in out.out and "deleted by hand" in out.out
    readme = (Path(QUICKSTART).parents[1] / "README.md").read_text()
    assert f"or an earlier conversion or export (it holds\n`{MARKER}`)" in readme


# ------------------------------------------------------------------------- JSON configs


def _quickstart_json(tmp_path, name: str = "run.json", **edits) -> Path:
    """configs/quickstart.yaml as JSON indented with tabs, as ``json.dump(cfg, f, indent="\\t")`` writes it."""
    config = yaml.safe_load(Path(QUICKSTART).read_text())
    for key, value in edits.items():
        config["trainer"][key] = value
    path = tmp_path / name
    path.write_text(json.dumps(config, indent="\t"))
    return path


def test_a_tab_indented_json_config_is_accepted(tmp_path, capsys):
    """Before: refused as ``not valid YAML (found character '\\t' ...)``; jsonargparse reads it."""
    path = _quickstart_json(tmp_path)
    code, out = run_cli(["fit", "--config", str(path), "--print_config"], capsys)
    assert code == 0, out.err
    assert yaml.safe_load(out.out)["trainer"]["max_steps"] == 250


def test_a_tab_indented_json_config_names_the_line_of_its_mistakes(tmp_path, capsys):
    path = _quickstart_json(tmp_path, max_step=3)
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    where = _line(path, '"max_step"')
    assert line == f"trainer.max_step: no such setting ({path}:{where})"


def test_a_key_twice_in_a_tab_indented_json_config_is_refused(tmp_path, capsys):
    path = _quickstart_json(tmp_path)
    text = path.read_text().replace('"max_steps": 250,', '"max_steps": 250,\n\t\t"max_steps": 3,', 1)
    path.write_text(text)
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    first = _line(path, '"max_steps"')
    assert line.startswith(f"--config {path}:{first + 1}: trainer.max_steps is set twice (also at line {first})")


def test_a_key_twice_in_json_that_yaml_cannot_read_is_named(tmp_path, capsys):
    """JSON that even without tabs is no YAML (a key over YAML's 1024 characters) is checked by
    json's own parser, which names the key and, where it occurs just twice, the text its line."""
    path = tmp_path / "run.json"
    long_key = "k" * 1100
    path.write_text(f'{{\n\t"{long_key}": 1,\n\t"seed_everything": 0,\n\t"seed_everything": 1\n}}\n')
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert line.startswith(f"--config {path}:4: seed_everything is set twice in one object; ")


# ------------------------------------------------------------------- adapter target_modules


@pytest.mark.parametrize("where", ["config", "command line"])
def test_a_bare_string_target_modules_shows_the_adapter_message(tmp_path, capsys, where):
    """Before: ``model.init_args.adapter.target_modules: class_path 'lightning_agents.SFTModule':
    Parser key "adapter":`` (jsonargparse's nested union report, cut at its first line)."""
    expected = (
        "adapter.target_modules must be all-linear or a list of layer names, got the string 'q_proj'; "
        "write [q_proj] for one layer"
    )
    if where == "config":
        path = tmp_path / "run.yaml"
        path.write_text(
            "model:\n  class_path: SFTModule\n  init_args:\n    model: embedded:student\n"
            "    adapter:\n      target_modules: q_proj\n"
        )
        args, located = ["--config", str(path)], f"{path}:6"
    else:
        args = ["--model", "SFTModule", "--model.model", "embedded:student", "--model.adapter.target_modules", "q_proj"]
        located = "command line"
    line = one_line_error(capsys, ["fit", *args, "--print_config"])
    assert line == f"{expected} ({located})"
