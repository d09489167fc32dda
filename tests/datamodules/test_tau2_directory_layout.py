"""tau2's directory layout (results.json + simulations/<id>.json) is refused with what to do.

tau2's newer runner writes a run as a folder; its results.json holds only ``timestamp``, ``info``
and ``tasks`` (sierra-research/tau2-bench @ a2c0247,
``tests/test_voice/test_interaction_metrics/testdata/experiment/results.json``: those three keys,
``tasks`` empty), and tau2-bench converts it into one ``Results`` file itself: ``tau2
convert-results PATH --to json`` (``src/tau2/cli.py`` at the same commit; PATH is the folder or
its results.json). However the run is given (the file, ``format="tau2"``, the folder) the refusal
names the layout and that command.
"""

import json

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts


def _run_folder(tmp_path):
    """A run in tau2's directory layout (one simulation file is enough to be one)."""
    folder = tmp_path / "run"
    (folder / "simulations").mkdir(parents=True)
    meta = {"timestamp": "2026-06-30T11:40:29", "info": {"num_trials": 1}, "tasks": [], "simulation_index": []}
    (folder / "results.json").write_text(json.dumps(meta))
    (folder / "simulations" / "a.json").write_text(json.dumps({"id": "a", "task_id": "1", "messages": []}))
    return folder


def _refusal(path, **kwargs):
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts([path], **kwargs)
    return str(caught.value)


def test_a_tau2_results_json_without_simulations_is_refused_naming_the_layout(tmp_path):
    path = _run_folder(tmp_path) / "results.json"
    message = _refusal(path)
    assert message.startswith(f"{path}: it is tau2's directory layout of a run")
    assert f"`tau2 convert-results {path} --to json`" in message


def test_the_layout_given_as_format_tau2_is_refused_naming_the_layout(tmp_path):
    # Before: "field 'task_id' must be a non-empty string or integer, got None (tau2 format)".
    path = _run_folder(tmp_path) / "results.json"
    message = _refusal(path, format="tau2")
    assert message.startswith(f"{path}: it is tau2's directory layout of a run")
    assert f"`tau2 convert-results {path} --to json`" in message


def test_the_run_folder_is_refused_naming_the_layout(tmp_path):
    # Before: "rollout file .../run does not exist" (a FileNotFoundError), of a folder that does.
    folder = _run_folder(tmp_path)
    message = _refusal(folder)
    assert message.startswith(f"{folder} is a folder: it is tau2's directory layout of a run")
    assert f"`tau2 convert-results {folder} --to json`" in message


def test_another_folder_is_refused_as_a_folder(tmp_path):
    message = _refusal(tmp_path)
    assert message == f"{tmp_path} is a folder, not a rollout file: pass the rollout files in it"


def test_one_simulation_file_of_the_layout_is_refused_naming_the_run_folder(tmp_path):
    # A real tau2 simulation (tests/data/tau2_runs/sierra-gpt-4.1-retail.json, its first) saved as
    # the layout saves it. Before, it loaded silently as one trial without the run's policy (no
    # system message) and without its task (no ground truth).
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "data" / "tau2_runs" / "sierra-gpt-4.1-retail.json"
    simulation = json.loads(source.read_text())["simulations"][0]
    folder = _run_folder(tmp_path)
    path = folder / "simulations" / f"{simulation['id']}.json"
    path.write_text(json.dumps(simulation))
    message = _refusal(path)
    assert message.startswith(
        f"{path} is one simulation of a tau2 run folder ({folder}): it is tau2's directory layout"
    )
    assert f"`tau2 convert-results {folder} --to json`" in message
    # The same simulation anywhere else is a record of its own, read as before.
    elsewhere = tmp_path / "simulation.json"
    elsewhere.write_text(json.dumps(simulation))
    assert len(load_rollouts([elsewhere])) == 1
