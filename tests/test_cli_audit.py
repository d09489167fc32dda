"""Mistakes found by the session-35 command-line audit: each is one line naming the setting and the
file:line (or the command line) where it was set, exit status 2, before any model loads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cli import QUICKSTART, no_model_loads, one_line_error, run_cli  # noqa: F401 (fixture)

from lightning_agents.cli import cli_main

CONFIGS = Path(QUICKSTART).parent
# a quickstart run cut to a step on 200 examples, without the held-out callback or a logger
ONE_STEP = [
    "--trainer.max_steps",
    "1",
    "--trainer.limit_val_batches",
    "0",
    "--trainer.callbacks",
    "[]",
    "--trainer.logger",
    "false",
    "--data.embedded_size",
    "200",
]


def _edited(tmp_path, old: str, new: str, name: str = "run.yaml") -> Path:
    """configs/quickstart.yaml with the text ``old`` replaced by ``new``."""
    text = Path(QUICKSTART).read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_misspelt_trainer_key_names_its_line(tmp_path, capsys):
    """Before: ``Group 'trainer' does not accept option 'max_step'`` with no file or line."""
    path = _edited(tmp_path, "  max_steps: 250", "  max_step: 250")
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert line.endswith(f"trainer.max_step: no such setting ({path}:{_line(path, 'max_step:')})")


def test_a_misspelt_callback_argument_names_its_line(tmp_path, capsys):
    """Before: the setting was named but not where (the callbacks are a YAML list)."""
    path = _edited(tmp_path, "        max_new_tokens: 32", "        max_new_token: 32")
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert line.endswith(f"max_new_token: no such setting ({path}:{_line(path, 'max_new_token:')})")


@pytest.mark.parametrize(
    ("old", "new", "setting"),
    [
        ("    lr: 0.002\n", "    lr: 0.002\n    lr: 0.5\n", "model.init_args.lr"),
        ("seed_everything: 0\n", "seed_everything: 0\nseed_everything: 7\n", "seed_everything"),
    ],
)
def test_a_key_set_twice_is_refused(tmp_path, capsys, old, new, setting):
    """Before: the later value won without a word (the run trained at lr 0.5)."""
    path = _edited(tmp_path, old, new)
    first = _line(path, new.split(":")[0].strip() + ":")
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert f"--config {path}:{first + 1}: {setting} is set twice (also at line {first})" in line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("this: is: not: yaml: [\n", ":1: not valid YAML (mapping values are not allowed here)"),
        ("trainer:\n\tmax_steps: 1\n", ":2: not valid YAML"),
        ("hello world\n", ":1: a config file holds `setting: value` lines, not 'hello world'"),
    ],
)
def test_a_config_that_is_not_yaml_settings_names_the_file(tmp_path, capsys, text, message):
    """Before: ``Problems parsing config: ... in "<unicode string>"`` or ``Unexpected config: hello world``."""
    path = tmp_path / "notes.txt"
    path.write_text(text)
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert f"--config {path}{message}" in line


def test_seed_everything_of_the_wrong_type_is_one_line(capsys):
    """Before: jsonargparse's Union report flattened into one long line without the setting's source."""
    line = one_line_error(capsys, ["fit", "--config", QUICKSTART, "--seed_everything", "abc", "--print_config"])
    assert line.endswith("seed_everything: expected bool or int, got 'abc' (command line)")


def test_a_wrong_type_names_the_type_as_written(tmp_path, capsys):
    """Before: ``expected <class 'int'>``."""
    path = _edited(tmp_path, "    batch_size: 32", "    batch_size: thirty-two")
    line = one_line_error(capsys, ["fit", "--config", str(path), "--print_config"])
    assert line.endswith(f"data.init_args.batch_size: expected int, got 'thirty-two' ({path}:22)")


def test_a_gpu_config_on_a_machine_without_a_gpu_is_one_line(capsys, monkeypatch, no_model_loads):  # noqa: F811
    """Before: Lightning's ``No supported gpu backend found!`` as a 30-line traceback."""
    from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator

    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: False))
    monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda: False))
    config = CONFIGS / "sft_fsdp_multinode.yaml"
    args = ["fit", "--config", str(config), "--model.model", "embedded:student", "--data.tokenizer", "null"]
    line = one_line_error(capsys, args)
    assert "trainer.accelerator: 'gpu', but this machine has no GPU" in line
    assert line.endswith(f"({config}:{_line(config, 'accelerator:')})")


def test_a_root_dir_that_is_a_file_is_refused_before_training(tmp_path, capsys, no_model_loads):  # noqa: F811
    """Before: a FileExistsError traceback from inside fsspec, after the model had loaded."""
    (tmp_path / "runs").write_text("not a folder")
    args = ["fit", "--config", QUICKSTART, *ONE_STEP, "--trainer.default_root_dir", str(tmp_path / "runs")]
    line = one_line_error(capsys, args)
    assert line.endswith(f"trainer.default_root_dir: {tmp_path / 'runs'} is a file, not a folder (command line)")


def test_a_missing_data_file_names_its_setting(tmp_path, capsys):
    """Before: ``conversation file ... does not exist`` named neither the setting nor its line."""
    path = _edited(tmp_path, "embedded:arithmetic/train", str(tmp_path / "train.jsonl"))
    line = one_line_error(capsys, ["fit", "--config", str(path), *ONE_STEP])
    assert line.endswith(f"does not exist ({path}:{_line(path, 'train.jsonl')})")
    assert "error: data.init_args.train: " in line
    line = one_line_error(capsys, ["fit", "--config", QUICKSTART, *ONE_STEP, "--data.train", str(tmp_path / "t.jsonl")])
    assert "error: data.train: " in line and line.endswith("(command line)")


def test_a_model_that_cannot_load_is_named_once_not_as_the_teacher(capsys, monkeypatch):
    """Before: ``model.init_args.teacher: model.init_args.model: cannot load ... (file:10) (file:11)``:
    the student's failure was wrapped again as the teacher's."""
    import lightning_agents.models as models

    load = models.load_tokenizer

    def offline(name, *args, **kwargs):
        if name == "embedded:student":
            raise ValueError("cannot load 'embedded:student': no connection")
        return load(name, *args, **kwargs)

    monkeypatch.setattr(models, "load_tokenizer", offline)
    config = CONFIGS / "rstg_quickstart.yaml"
    line = one_line_error(capsys, ["fit", "--config", str(config)])
    assert line == (
        "lightning-agents: error: model.init_args.model: cannot load 'embedded:student': no connection "
        f"({config}:{_line(config, 'model: embedded:student')})"
    )


# ------------------------------------------------------------------------------------- convert


def test_convert_refuses_an_output_it_would_destroy(tmp_path, capsys, monkeypatch):
    """Before: convert replaced any existing --output with shutil.rmtree (a folder of the user's
    files was deleted), and a file there was a NotADirectoryError traceback after the conversion."""
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    line = one_line_error(capsys, ["convert", "--source", "embedded:student", "--output", str(mine)])
    assert "output: " in line and "is a folder with other files in it" in line
    assert (mine / "thesis.tex").read_text() == "years of work"

    (tmp_path / "afile").write_text("x")
    line = one_line_error(capsys, ["convert", "--source", "embedded:student", "--output", str(tmp_path / "afile")])
    assert line.endswith(f"output: {tmp_path / 'afile'} is a file; convert writes a folder (command line)")

    monkeypatch.chdir(mine)
    line = one_line_error(capsys, ["convert", "--source", "embedded:student", "--output", "."])
    assert "is the current folder or one above it" in line
    assert (mine / "thesis.tex").exists()


def test_convert_replaces_an_earlier_conversion(tmp_path, capsys):
    out = tmp_path / "hf"
    for _ in range(2):
        cli_main(["convert", "--source", "embedded:student", "--output", str(out)])
    assert (out / "config.json").is_file()
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())
    assert os.listdir(out)


# ------------------------------------------------------------------------ tool output paths


@pytest.mark.parametrize("where", ["a folder", "under a file"])
@pytest.mark.parametrize("tool", ["rollout", "generate"])
def test_a_tool_output_it_cannot_write_is_refused_before_the_model_loads(
    tmp_path,
    capsys,
    no_model_loads,  # noqa: F811
    tool,
    where,
):
    """Before: the whole rollout or generation ran, then the atomic write failed with an
    IsADirectoryError or FileExistsError traceback."""
    (tmp_path / "afile").write_text("x")
    output = tmp_path if where == "a folder" else tmp_path / "afile" / "out.json"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n')
    own = ["--prompts", str(prompts), "--policy", "embedded:student"] if tool == "generate" else ["--num_tasks", "1"]
    line = one_line_error(capsys, [tool, *own, "--output", str(output)])
    expected = "is a folder; name the file to write" if where == "a folder" else f"{tmp_path / 'afile'} is a file"
    assert f"error: output: {output}" in line and expected in line and line.endswith("(command line)")


def test_curate_refuses_an_output_folder_that_is_a_file(tmp_path, capsys):
    """Before: a FileExistsError traceback from mkdir, after the rollouts were curated."""
    rollouts = tmp_path / "r.json"
    rollouts.write_text("[]")
    (tmp_path / "afile").write_text("x")
    args = ["curate", "--rollouts", f"[{rollouts}]", "--output", str(tmp_path / "afile")]
    line = one_line_error(capsys, args)
    assert line.endswith(f"output: {tmp_path / 'afile'} is a file; this writes a folder there (command line)")


def test_a_missing_rollout_file_names_the_setting(tmp_path, capsys):
    """Before: ``rollout file ... does not exist`` without the setting (the list value was not matched)."""
    missing = tmp_path / "nope.json"
    line = one_line_error(capsys, ["curate", "--rollouts", f"[{missing}]", "--output", str(tmp_path / "c")])
    assert line == f"lightning-agents: error: rollouts: rollout file {missing} does not exist (command line)"


def test_a_single_path_where_a_list_goes_names_the_types(tmp_path, capsys):
    """Before: ``expected list[str, got ...`` (the type list was cut at its first bracket)."""
    config = tmp_path / "curate.yaml"
    config.write_text(f"rollouts: {tmp_path / 'r.json'}\n")
    line = one_line_error(capsys, ["curate", "--config", str(config)])
    assert line.endswith(f"rollouts: expected list[str] or null, got '{tmp_path / 'r.json'}' ({config}:1)")


def test_the_top_level_help_describes_the_package_and_reads_whole(capsys):
    """Before: "Lightning Trainer command line tool", and ``test`` listed as "... It's separated
    from fit to make sure you never run on your" (Trainer.test's first docstring line)."""
    code, out = run_cli(["--help"], capsys)
    assert code == 0
    text = " ".join(out.out.split())
    assert "Lightning Trainer command line tool" not in text
    assert "Post-train LLM agents" in text
    assert "never run on your" not in text
    assert "test Perform one evaluation epoch over the test set (only once you mean to look at it)." in text


def test_generate_shows_progress_over_a_long_prompt_file(tmp_path, capsys):
    """Before: generate printed nothing until every prompt was done (rollout and curate had bars)."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"prompt": "{i}+1="}}\n' for i in range(3)))
    args = [
        "generate",
        "--prompts",
        str(prompts),
        "--output",
        str(tmp_path / "g.jsonl"),
        "--policy",
        "embedded:student",
    ]
    cli_main([*args, "--max_new_tokens", "2", "--batch_size", "1"])
    assert "generate: prompts" in capsys.readouterr().err
    cli_main([*args, "--max_new_tokens", "2", "--batch_size", "1", "--progress", "false"])
    assert "generate: prompts" not in capsys.readouterr().err
