"""evolve's output paths are checked before a model loads or a call is paid (docs audit, session 39)."""

import pytest

from tests.commands.test_evolve import _config


@pytest.fixture
def no_pool(monkeypatch):
    """Building the pool is the first paid work: a check that comes after it comes too late."""
    from lightning_agents.hflow.backbones import BackbonePool

    def refuse(*args, **kwargs):
        raise RuntimeError("the pool was built before the output paths were checked")

    monkeypatch.setattr(BackbonePool, "from_specs", refuse)


@pytest.mark.parametrize(
    ("setting", "under_file", "message"),
    [
        # before: a FileExistsError after the whole search (3.5 min of calls in the quickstart)
        ("memory_file", "afile/mem.json", r"memory_file: .*afile/mem.json cannot be written: .*afile is a file"),
        ("preferences_file", "afile/q.jsonl", r"preferences_file: .*afile/q.jsonl cannot be written"),
        # before: raw FileExistsError / NotADirectoryError tracebacks from mkdir
        ("output", "afile", r"output: .*afile is a file; this writes a folder there"),
        ("output", "afile/sub", r"output: .*afile/sub cannot be written: .*afile is a file"),
    ],
)
def test_an_unwritable_evolve_output_is_refused_in_one_line_before_any_work(
    tmp_path, capsys, no_pool, setting, under_file, message
):
    import re

    from lightning_agents.cli import cli_main

    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit) as exc:
        cli_main(["evolve", "--config", str(_config(tmp_path)), f"--{setting}", str(tmp_path / under_file)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err and re.search(message, err[-1]), err[-3:]
    assert "Traceback" not in "\n".join(err)


def test_a_folder_where_evolve_writes_a_file_is_refused(tmp_path, no_pool):
    from lightning_agents.commands.evolve import EvolveCommand
    from lightning_agents.commands.outputs import OutputPathError

    (tmp_path / "out" / "summary.json").mkdir(parents=True)
    with pytest.raises(
        OutputPathError, match=r"output: .*summary.json is a folder where evolve writes its summary.json"
    ):
        EvolveCommand().evolve(
            backbones=[{"name": "s", "model": "embedded:student", "input_price": 1.0, "output_price": 2.0}],
            output=str(tmp_path / "out"),
            progress=False,
        )
    memory = tmp_path / "mem"
    memory.mkdir()
    with pytest.raises(OutputPathError, match=r"memory_file: .*mem is a folder"):
        EvolveCommand().evolve(
            backbones=[{"name": "s", "model": "embedded:student", "input_price": 1.0, "output_price": 2.0}],
            output=str(tmp_path / "out2"),
            memory_file=str(memory),
            progress=False,
        )
