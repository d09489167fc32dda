"""tau2's directory layout (results.json + simulations/<id>.json) is refused with what to do.

tau2's newer runner writes a run as a folder; its results.json holds only ``timestamp``, ``info``
and ``tasks`` (sierra-research/tau2-bench @ a2c0247,
``tests/test_voice/test_interaction_metrics/testdata/experiment/results.json``: those three keys,
``tasks`` empty). Given that file, the refusal said only that the format could not be told.
"""

import json

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts


def test_a_tau2_results_json_without_simulations_is_refused_naming_the_layout(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"timestamp": "2026-06-30T11:40:29", "info": {"num_trials": 1}, "tasks": []}))
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts([path])
    message = str(caught.value)
    assert message.startswith(f"{path}: cannot tell the rollout format")
    assert "tau2's directory layout" in message and "merge them into one tau2 Results file" in message
