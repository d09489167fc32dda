"""The (seed, epoch) shuffle every package data module trains with: its order, split and state.

Run as a script, this file is one side of the real Lightning resume test below:
``python test_shuffling.py OUTDIR first`` or ``python test_shuffling.py OUTDIR resume WORLD``."""

import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from lightning_agents.datamodules.shuffling import EpochShuffleSampler, shuffled_loader
from lightning_agents.rollout.seeding import run_seed


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_order_is_distributed_samplers_for_every_rank_and_epoch(replicas):
    rows = list(range(10))
    for epoch in (0, 1, 5):
        covered = []
        for rank in range(replicas):
            ours = EpochShuffleSampler(rows, seed=7, num_replicas=replicas, rank=rank)
            theirs = DistributedSampler(rows, num_replicas=replicas, rank=rank, shuffle=True, seed=7)
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)
            covered += list(ours)
        assert set(covered) == set(rows)
    one = EpochShuffleSampler(rows, seed=7)
    first = list(one)
    one.set_epoch(1)
    assert sorted(first) == rows and list(one) != first


def test_state_continues_within_an_epoch_and_moves_to_the_next_when_it_was_done():
    rows = list(range(12))
    straight = EpochShuffleSampler(rows, seed=3)
    straight.set_epoch(2)
    order = list(straight)
    taken = EpochShuffleSampler(rows, seed=3)
    taken.set_epoch(2)
    it = iter(taken)
    head = [next(it) for _ in range(5)]
    resumed = EpochShuffleSampler(rows, seed=99)  # the seed comes from the state
    resumed.load_state_dict(taken.state_dict())
    assert head + list(resumed) == order
    assert resumed.state_dict() == {"seed": 3, "epoch": 2, "yielded": 12, "num_replicas": 1}
    after = EpochShuffleSampler(rows, seed=0)
    after.load_state_dict(resumed.state_dict())
    nxt = EpochShuffleSampler(rows, seed=3)
    nxt.set_epoch(3)
    assert after.epoch == 3 and list(after) == list(nxt)


def test_the_loader_splits_epochs_between_processes_as_lightning_would():
    rows = list(range(16))
    ddp = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    assert shuffled_loader(rows, batch_size=2, seed=0, collate_fn=list, trainer=ddp).sampler.num_replicas == 2
    own = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, use_distributed_sampler=False)
    single = L.Trainer(accelerator="cpu", devices=1, logger=False)
    for trainer in (own, single, None):
        assert shuffled_loader(rows, batch_size=2, seed=0, collate_fn=list, trainer=trainer).sampler.num_replicas == 1


def test_the_run_seed_is_the_default_and_a_checkpoint_carries_it(monkeypatch):
    from lightning_agents import ChatDataModule

    monkeypatch.setenv("PL_GLOBAL_SEED", "41")
    assert run_seed(None) == 41 and run_seed(5) == 5
    data = ChatDataModule(embedded_size=8, val=None)
    state = data.state_dict()
    assert state["shuffle_seed"] == 41
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")
    resumed = ChatDataModule(embedded_size=8, val=None)
    resumed.load_state_dict(state)
    assert run_seed(resumed.seed) == 41


def _global_order(rows, seed, epoch, replicas):
    """The epoch's padded order as ``replicas`` ranks share it: position ``k`` goes to rank ``k % replicas``."""
    shares = []
    for rank in range(replicas):
        sampler = EpochShuffleSampler(rows, seed=seed, num_replicas=replicas, rank=rank)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return [index for column in zip(*shares) for index in column]


def _save_and_resume(rows, old, new, taken, epoch=2):
    """Every one of ``old`` ranks hands out ``taken`` indices; rank 0's state is loaded on ``new`` ranks,
    as Lightning does. Returns the indices before, each new rank's after, and the loaded samplers."""
    before, state = [], None
    for rank in range(old):
        sampler = EpochShuffleSampler(rows, seed=5, num_replicas=old, rank=rank)
        sampler.set_epoch(epoch)
        it = iter(sampler)
        before += [next(it) for _ in range(taken)]
        if rank == 0:
            state = sampler.state_dict()
    resumed = []
    for rank in range(new):
        sampler = EpochShuffleSampler(rows, seed=5, num_replicas=new, rank=rank)
        sampler.set_epoch(epoch)  # the fit loop's call
        sampler.load_state_dict(state)
        resumed.append(sampler)
    return before, [list(s) for s in resumed], resumed


@pytest.mark.parametrize(
    ("old", "new", "taken", "n_rows"),
    [
        (2, 1, 3, 12),
        (2, 4, 2, 12),
        (2, 4, 3, 12),  # yielded 3 is the new share's length: the epoch is not done
        (4, 2, 2, 12),
        (2, 3, 2, 12),
        (2, 3, 3, 12),
        (3, 2, 1, 12),
        (3, 2, 2, 12),
        (2, 3, 2, 10),  # the new split pads the epoch
        (3, 2, 2, 10),  # the old split padded it
    ],
)
def test_a_mid_epoch_state_resumes_on_another_world_size_without_skipping_a_row(old, new, taken, n_rows, caplog):
    rows = list(range(n_rows))
    with caplog.at_level(logging.WARNING, logger="lightning_agents.datamodules.shuffling"):
        before, after, samplers = _save_and_resume(rows, old, new, taken)
    consumed = taken * old
    repeated = consumed % new
    assert all(s.epoch == 2 for s in samplers)
    # The new ranks continue the epoch's global order from the last multiple of their number.
    order = _global_order(rows, seed=5, epoch=2, replicas=new)
    assert [index for column in zip(*after) for index in column] == order[consumed - repeated :]
    seen = Counter(before + [index for share in after for index in share])
    assert set(seen) == set(rows)
    padding = len(order) - n_rows
    assert sum(seen.values()) - n_rows == repeated + padding
    warnings = [r for r in caplog.records if "mid-epoch checkpoint" in r.getMessage()]
    if repeated:
        # Once per resume (rank 0 of the new run), saying how many rows repeat and how to avoid it.
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert f"{repeated} of them are trained again" in message
        assert f"resuming on {old} processes continues exactly" in message
    else:
        assert warnings == []
        if not padding:
            assert set(seen.values()) == {1}


@pytest.mark.parametrize(("old", "new"), [(2, 1), (2, 4), (3, 2), (1, 3)])
def test_a_finished_epoch_resumes_at_the_next_on_any_world_size(old, new):
    rows = list(range(10))
    share = len(EpochShuffleSampler(rows, seed=5, num_replicas=old))
    _, after, samplers = _save_and_resume(rows, old, new, share)
    assert all(s.epoch == 3 for s in samplers)
    assert [index for column in zip(*after) for index in column] == _global_order(rows, seed=5, epoch=3, replicas=new)


def test_the_same_world_size_resumes_exactly_without_a_warning(caplog):
    rows = list(range(11))
    with caplog.at_level(logging.WARNING, logger="lightning_agents.datamodules.shuffling"):
        before, after, _ = _save_and_resume(rows, 3, 3, 2)
    order = _global_order(rows, seed=5, epoch=2, replicas=3)
    assert sorted(before) == sorted(order[:6])
    assert [index for column in zip(*after) for index in column] == order[6:]
    assert not caplog.records


def test_a_state_saved_before_num_replicas_was_kept_loads_as_before():
    rows = list(range(12))
    old_state = {"seed": 5, "epoch": 2, "yielded": 2}
    for replicas in (1, 2, 4):
        for rank in range(replicas):
            sampler = EpochShuffleSampler(rows, seed=0, num_replicas=replicas, rank=rank)
            sampler.load_state_dict(old_state)
            fresh = EpochShuffleSampler(rows, seed=5, num_replicas=replicas, rank=rank)
            fresh.set_epoch(2)
            assert sampler.epoch == 2 and list(sampler) == list(fresh)[2:]
    # A count that fills this run's share finished the epoch, as it did before.
    done = EpochShuffleSampler(rows, seed=0, num_replicas=4, rank=1)
    done.load_state_dict({"seed": 5, "epoch": 2, "yielded": 3})
    assert done.epoch == 3 and len(list(done)) == 3


# A real Lightning fit: 16 rows, batch 2, a checkpoint after 2 steps on 2 processes (ddp, gloo on
# CPU), resumed on another number of processes. The script part sits here so that the test is one file.
_ROWS = list(range(16))


class _Recorder(L.LightningModule):
    def __init__(self, out, tag):
        super().__init__()
        self.out, self.tag = out, tag
        self.w = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        with open(os.path.join(self.out, f"{self.tag}_rank{self.global_rank}.jsonl"), "a") as f:
            f.write(json.dumps({"step": self.global_step, "rows": batch}) + "\n")
        return self.w(torch.ones(1, 1)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Rows(L.LightningDataModule):
    def train_dataloader(self):
        return shuffled_loader(_ROWS, batch_size=2, seed=0, collate_fn=list, trainer=self.trainer)


def _fit(out, phase, world):
    from lightning.pytorch.callbacks import ModelCheckpoint

    tag = "first" if phase == "first" else f"resumed{world}"
    common = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, max_epochs=1)
    strategy = "ddp" if world > 1 else "auto"
    if phase == "first":
        every_two = ModelCheckpoint(dirpath=os.path.join(out, "checkpoints"), every_n_train_steps=2, save_top_k=-1)
        trainer = L.Trainer(devices=world, strategy=strategy, callbacks=[every_two], default_root_dir=out, **common)
        trainer.fit(_Recorder(out, tag), _Rows())
    else:
        trainer = L.Trainer(devices=world, strategy=strategy, default_root_dir=os.path.join(out, tag), **common)
        trainer.fit(_Recorder(out, tag), _Rows(), ckpt_path=os.path.join(out, "checkpoints", "epoch=0-step=2.ckpt"))


@pytest.mark.slow
@pytest.mark.distributed
def test_lightning_resumes_a_two_process_checkpoint_on_one_process_without_repeating_rows(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    for args in (["first", "2"], ["resume", "1"]):
        proc = subprocess.run(
            [sys.executable, __file__, str(tmp_path), *args], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    def batches(tag, ranks):
        return [json.loads(line) for r in range(ranks) for line in (tmp_path / f"{tag}_rank{r}.jsonl").open()]

    before = [b for b in batches("first", 2) if b["step"] < 2]
    seen = Counter(row for b in before + batches("resumed1", 1) for row in b["rows"])
    assert seen == Counter(_ROWS)


if __name__ == "__main__":
    _fit(sys.argv[1], sys.argv[2], int(sys.argv[3]))
