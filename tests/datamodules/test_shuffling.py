"""The (seed, epoch) shuffle every package data module trains with: its order, split and state."""

import lightning as L
import pytest
from torch.utils.data.distributed import DistributedSampler

from lightning_agents.datamodules.shuffling import EpochShuffleSampler, run_seed, shuffled_loader


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
    assert resumed.state_dict() == {"seed": 3, "epoch": 2, "yielded": 12}
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
