"""RSTG multi-process leftovers of session 52 (session 53).

1. ``_global_max`` and ``_global_counts`` put their tensor on the module's device. Outside a Trainer
   (``precompute_teacher`` from user code, on every rank) that stays the CPU, and NCCL refuses a CPU
   tensor on every rank. They now use a device the process group's backend takes
   (``_collective_device``). NCCL is faked here (this machine has no GPU); the slow test runs the
   all-reduces on 2 real gloo processes.
2. A data file that mixes records of a task with tools with other records gave the ranks batches of
   different kinds: ``agent_task`` raised on one rank while the others waited in a collective (a hang).
   The file is now refused at ``setup`` on every rank, and each training or evaluation batch is agreed
   on by every rank before its sampling (``_agree_on_batch``). The slow tests run ``collect`` on 2 gloo
   processes with a timeout: every rank must raise, none may hang.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.errors import LightningAgentsError
from lightning_agents.modules.rstg import RSTGModule
from tests.modules.rstg_two_ranks import run_two_ranks

TOOLS = "lightning_agents.tasks.arithmetic.CalculatorTask"
NO_TOOLS = "lightning_agents.tasks.gsm8k.GSM8KTask"


def _plain(n: int, first: int = 0, task: str | None = None) -> list[dict]:
    records = [
        {"id": f"p{i}", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "reference": str(i + 1)}
        for i in range(first, first + n)
    ]
    return [{**r, "task": task} for r in records] if task else records


def _tool_records(n: int) -> list[dict]:
    from lightning_agents.tasks import CalculatorTask

    task = CalculatorTask(split="train", n=n)
    return [task.prompt_record(p) for p in task.problems]


def _fake_nccl(monkeypatch, others: float = 0.0) -> list[torch.device]:
    """Fake an initialised NCCL process group on a machine with a CUDA device 0: each all-reduce is
    refused for a tensor off CUDA, as NCCL does, and adds (sum) or maxes ``others`` in. Tensors asked
    for on CUDA are made on the CPU (this torch has none); returns the device each was asked for."""
    asked: list[torch.device] = []
    real_tensor = torch.tensor

    def tensor(data, *args, device=None, **kwargs):
        asked.append(torch.device(device) if device is not None else torch.device("cpu"))
        return real_tensor(data, *args, **kwargs)

    def all_reduce(t, op=torch.distributed.ReduceOp.SUM):
        if asked[-1].type != "cuda":
            raise RuntimeError(f"No backend type associated with device type {asked[-1].type}")
        t.copy_(torch.maximum(t, torch.full_like(t, others)) if op == torch.distributed.ReduceOp.MAX else t + others)

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch, "tensor", tensor)
    return asked


# ----------------------------------------------------------------------------- 1. the all-reduces' device
def test_all_reduces_of_a_cpu_module_under_nccl_go_to_the_gpu(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))  # no models: the module stays on the CPU
    assert module.device.type == "cpu"
    asked = _fake_nccl(monkeypatch, others=3.0)
    assert module._global_max(1.0) == 3.0
    assert module._global_counts([1.0, 2.0]) == [4.0, 5.0]
    assert asked == [torch.device("cuda", 0)] * 2


def test_the_collective_device_prefers_the_modules_then_a_parameters_then_the_current_gpu(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    _fake_nccl(monkeypatch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert module._collective_device() == torch.device("cuda", 1)
    # a teacher sharded on its GPU (FSDP's device_id) while the module stayed on the CPU
    module.teacher = SimpleNamespace(parameters=lambda: iter([SimpleNamespace(device=torch.device("cuda", 3))]))
    assert module._collective_device() == torch.device("cuda", 3)
    for backend, device in [("gloo", "cpu"), ("cpu:gloo,cuda:nccl", "cpu"), ("nccl", "cuda:3")]:
        monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None, b=backend: b)
        assert module._collective_device() == torch.device(device), backend


def test_the_collective_device_outside_a_process_group_is_the_modules(tmp_path):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    assert module._collective_device() == module.device
    assert module._global_max(2.0) == 2.0


# ----------------------------------------------------------------------------- 2. mixed-task data
def test_one_shot_records_of_a_task_without_tools_share_a_batch_with_plain_ones(tmp_path):
    # both are one-shot prompts; agent_task refused the mix ("use one task per run") on the rank that drew it
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    assert module.agent_task(_plain(1) + _plain(1, first=1, task=NO_TOOLS)) is None


def test_a_batch_mixing_a_task_with_tools_names_its_records(tmp_path):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    with pytest.raises(LightningAgentsError, match=r"a batch mixes records of .*record 2, id 'p0'"):
        module.agent_task(_tool_records(1) + _plain(2))


def test_setup_refuses_a_data_file_mixing_a_task_with_tools_on_every_rank(tmp_path):
    """Every rank reads the whole file at setup: refused there, no rank reaches a collective."""
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    records = _plain(2) + _tool_records(2)
    data = SimpleNamespace(records={"train": records}, hparams={"train": "mixed.jsonl"}, task=None)
    module._trainer = SimpleNamespace(datamodule=data)
    with pytest.raises(LightningAgentsError) as err:
        module.setup("fit")
    message = str(err.value)
    assert "data.train (mixed.jsonl) mixes records of" in message
    assert "no task (first: record 1, id 'p0')" in message
    assert f"{TOOLS} (first: record 3, id {records[2]['id']!r})" in message
    # a file of one task with tools, or of one-shot records of several tasks, still sets up
    data.records = {"train": _tool_records(2)}
    module.setup("fit")
    data.records = {"train": _plain(1) + _plain(1, first=1, task=NO_TOOLS)}
    module.setup("fit")


def _another_rank(monkeypatch, refused: float, with_tools: float) -> list[list[float]]:
    """Fake 2 ranks: the other rank's batch was refused (1) or not, had episodes (1) or not."""
    sent: list[list[float]] = []
    monkeypatch.setattr(RSTGModule, "_world_size", lambda self: 2)

    def counts(self, local):
        sent.append(list(local))
        return [local[0] + refused, local[1] + with_tools]

    monkeypatch.setattr(RSTGModule, "_global_counts", counts)
    return sent


def test_a_rank_whose_batch_is_refused_still_joins_the_others_first(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    sent = _another_rank(monkeypatch, refused=0.0, with_tools=0.0)
    with pytest.raises(LightningAgentsError, match="a training batch mixes records of"):
        module._agree_on_batch(_tool_records(1) + _plain(1), None, "a training batch")
    assert sent == [[1.0, 0.0]]  # it told the others before raising


def test_a_rank_with_a_good_batch_stops_with_a_rank_whose_batch_was_refused(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    sent = _another_rank(monkeypatch, refused=1.0, with_tools=1.0)
    with pytest.raises(LightningAgentsError, match=r"1 other rank\(s\) refused their part of a training batch"):
        module._agree_on_batch(_plain(2), None, "a training batch")
    assert sent == [[0.0, 0.0]]


def test_one_shot_ranks_refuse_episodes_of_another_rank_under_a_sharded_policy(tmp_path, monkeypatch):
    module = RSTGModule(teacher_cache=str(tmp_path / "cache.jsonl"))
    _another_rank(monkeypatch, refused=0.0, with_tools=1.0)
    with pytest.raises(LightningAgentsError, match="episodes .* with a policy sharded across processes"):
        module._agree_on_batch(_plain(2), True, "a training batch")
    module._agree_on_batch(_plain(2), None, "a training batch")  # DDP: each rank samples its own kind


# ----------------------------------------------------------------------------- 2 gloo processes
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gloo", "cpu:gloo"])
def test_all_reduces_outside_a_trainer_on_two_gloo_ranks(tmp_path, mode):
    run_two_ranks(Path(__file__).with_name("rstg_review53_worker.py"), tmp_path, 120, "device", mode)
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got == {"device": "cpu", "max": 2.0, "counts": [3.0, 1.0]}, got


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["mixed", "episodes_sharded"])
def test_every_rank_raises_for_a_batch_refused_on_one(tmp_path, mode):
    """Rank 0's batch is refused (``mixed``: it mixes calculator episodes with plain prompts;
    ``episodes_sharded``: episodes under an FSDP2 student), rank 1's is plain prompts. Before, rank 1
    went on into its next collective (sharded: its ``generate``) and waited for rank 0 forever."""
    run_two_ranks(Path(__file__).with_name("rstg_review53_worker.py"), tmp_path, 180, mode)
    errors = [json.loads((tmp_path / f"rank{rank}.json").read_text())["error"] for rank in (0, 1)]
    if mode == "mixed":
        assert errors[0] is not None and "a training batch mixes records of" in errors[0], errors
    else:
        assert errors[0] is not None and "with a policy sharded across processes" in errors[0], errors
    assert errors[1] is not None, errors
    assert ("other rank(s) refused" in errors[1]) if mode == "mixed" else ("sharded" in errors[1]), errors
