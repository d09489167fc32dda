"""A BFCL multi-turn result file whose turns are not lists of steps (AIREV-Agent-0.8B's, real
records in ``tests/data/bfcl_results``; see its README)."""

from pathlib import Path

import pytest

from lightning_agents.datamodules._rollout_fields import RolloutFormatError
from lightning_agents.datamodules.trajectories import load_rollouts

FLAT = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "bfcl_results"
    / "AIREV-Agent-0.8B_BFCL_v4_multi_turn_base_result.json"
)


def test_a_multi_turn_file_with_flat_turns_is_named_as_such():
    # One reply string per turn: the error blamed single-turn categories, which this file is not.
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts(FLAT)
    message = str(caught.value)
    assert "result[0] is a str, not a list of steps" in message and "multi-turn record" in message
    assert "single-turn" not in message
