"""Generation from a policy sharded across processes: FSDP1 and FSDP2 for real (2 gloo processes
on CPU), DeepSpeed ZeRO-3 (not installable here) with its gather isolated."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from lightning_agents.models import load_causal_lm
from lightning_agents.rollout.sharding import gathered_for_generation, sharding_kind

WORKER = Path(__file__).with_name("sharded_generation_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unsharded_model_needs_nothing():
    model = load_causal_lm("embedded:student")
    assert sharding_kind(model) == "none"
    with gathered_for_generation(model) as synced:
        assert synced is None


def test_zero3_parameters_are_gathered_for_generation(monkeypatch):
    model = load_causal_lm("embedded:student")
    for i, p in enumerate(model.parameters()):
        p.ds_id = i  # what DeepSpeed ZeRO-3 marks its partitioned parameters with
    gathered = []

    class GatheredParameters:
        def __init__(self, params):
            self.params = params

        def __enter__(self):
            gathered.append(self.params)

        def __exit__(self, *exc):
            gathered.append("released")

    fake = types.ModuleType("deepspeed")
    fake.zero = types.SimpleNamespace(GatheredParameters=GatheredParameters)
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    assert sharding_kind(model) == "zero3"
    with gathered_for_generation(model) as synced:
        assert synced is None  # every parameter is local inside: no collective per forward
        assert len(gathered) == 1 and len(gathered[0]) == len(list(model.parameters()))
    assert gathered[-1] == "released"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["fsdp1", "fsdp2"])
def test_sharded_policy_samples_what_the_full_policy_samples(tmp_path, kind):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        str(WORKER),
        kind,
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:  # ranks that stop stepping at different times wait forever
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"sharded generation hung: {stderr[-2000:]}")
    assert proc.returncode == 0, stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["kind"] == kind and r["sharded"] and r["synced"] is True
        runs = ["outside_forward", "inside_forward"] if kind == "fsdp1" else ["outside_forward"]
        for name in runs:
            assert r[name]["equal"], (r["rank"], name)
    # The ranks' completions ended at different steps (what synced_gpus is for).
    assert max(ranks[0]["outside_forward"]["lengths"]) != max(ranks[1]["outside_forward"]["lengths"])


def test_rstg_samples_through_the_gather_and_refuses_sharded_multi_turn(monkeypatch):
    from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
    from lightning_agents.rollout import SamplingConfig
    from lightning_agents.tasks import CalculatorTask

    module = RSTGModule(guidance=False, num_generations=2, max_new_tokens=4, reward_workers=1)
    module.configure_model()
    seen = []

    def fake_gather(model, root):
        seen.append(model)
        return gathered_for_generation(model, root)

    monkeypatch.setattr("lightning_agents.modules.rstg.gathered_for_generation", fake_gather)
    task = CalculatorTask(split="val", n=2)
    records = [task.prompt_record(p) for p in task.problems]
    with module.student_generation() as synced:
        assert synced is None  # one process, nothing sharded
    assert seen == [module.model]
    # Ranks of a sharded policy must run the same generate calls; episodes cannot promise that.
    with pytest.raises(RSTGSettingError, match="multi-turn"):
        module._sample(module.engine, records, 2, SamplingConfig(max_new_tokens=4), synced_gpus=True)
