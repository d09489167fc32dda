"""The pure parts (rollout readers, topology, the action verifiers) import without torch, Lightning or transformers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "lightning", "transformers")


@pytest.mark.parametrize(
    "module",
    [
        "lightning_agents.datamodules.trajectories",
        "lightning_agents.topology",
        "lightning_agents.topology.runs",
        "lightning_agents.topology.report",
        "lightning_agents.tasks.tau_actions",
    ],
)
def test_pure_part_imports_without_torch_lightning_or_transformers(module):
    # A fresh interpreter: this test process has long imported torch through other tests.
    code = f"import sys, json, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], f"importing {module} loaded heavy modules"


def test_the_datamodules_package_still_exports_its_classes():
    import lightning_agents.datamodules as datamodules

    assert datamodules.load_rollouts.__module__ == "lightning_agents.datamodules.trajectories"
    assert "TopoCurateDataModule" in dir(datamodules)
    with pytest.raises(AttributeError):
        datamodules.NoSuchThing  # noqa: B018
