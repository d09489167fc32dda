"""A result file whose lines are not records stops the load with a message that says what the
line is and which setting names a format.

Real input (tests/data/bfcl_other_layouts/README.md): the first lines of AYA Pipeline's BFCL
multi_turn_base result file in ShishirPatil/gorilla @ ce92ea60, one JSON array of the model's
replies per line, with no task id.
"""

from pathlib import Path

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts

DATA = Path(__file__).resolve().parents[1] / "data" / "bfcl_other_layouts"


def test_a_line_that_is_a_json_array_is_named_as_one_with_the_format_setting():
    # Before: "cannot tell the rollout format (fields list); ... or pass format=" (a list has no
    # fields, and the setting's values were cut off).
    with pytest.raises(RolloutFormatError) as raised:
        load_rollouts(DATA / "AYA_Pipeline_result_multi_turn_base.jsonl")
    message = str(raised.value)
    assert message.startswith(f"{DATA / 'AYA_Pipeline_result_multi_turn_base.jsonl'}:1: cannot tell the rollout format")
    assert "a JSON array ([]), not a record" in message
    assert "curate --format: openai, tau2 or bfcl" in message
