"""BFCLExecutionVerifier on a tampered RL record's reference: refused with the reason, never a crash
inside BFCL's classes (tests/data/bfcl_results/README.md)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from bfcl_glyphh import glyphh_rollouts

from lightning_agents.tasks.tau_actions import ActionReferenceError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason="bfcl-eval is not installed (optional: pip install --no-deps bfcl-eval)",
)


def test_a_class_configuration_that_is_not_an_object_is_refused_by_name():
    from lightning_agents.tasks.bfcl_execution import BFCLExecutionVerifier

    rollout = glyphh_rollouts()["multi_turn_base_0"]
    reference = json.loads(rollout.info["reference"])
    reference["environment"]["initial_config"]["GorillaFileSystem"] = "root"
    verifier = BFCLExecutionVerifier()
    with pytest.raises(ActionReferenceError, match=r"'initial_config' of \['GorillaFileSystem'\] must be an object"):
        verifier.score_turns(rollout.info["turn_calls"], reference)
    with pytest.raises(ActionReferenceError, match="GorillaFileSystem"):
        verifier.check_reference(reference)
