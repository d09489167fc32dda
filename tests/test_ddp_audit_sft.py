"""SFTModule on two CPU processes (DDP, gloo) trains as one process with the same global batch.

DDP averages the ranks' gradients; with each rank's loss the mean over its own assistant tokens,
a token on a rank with few of them weighed more than one on a rank with many, and two processes
with batch 4 drifted away from one process with batch 8 from the first step. The script part of
this test (``__main__``) sits in this file so that the test is one file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from hang_guard import run_or_fail

STEPS = 3


class _Losses(L.Callback):
    """The loss each step returned (what the backward pass differentiates) and the rows it saw."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.rows: list[list[list[int]]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        ids, mask = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
        self.rows.append([[t for t, m in zip(row, keep) if m] for row, keep in zip(ids, mask)])


def _fit(world: int, batch_size: int) -> dict:
    from lightning_agents import ChatDataModule, SFTModule

    torch.set_num_threads(1)
    L.seed_everything(0)
    module = SFTModule(lr=3e-3)
    record = _Losses()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp" if world > 1 else "auto",
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[record],
    )
    trainer.fit(module, ChatDataModule(embedded_size=64, batch_size=batch_size, max_length=96, val=None))
    return {
        "rank": trainer.global_rank,
        "losses": record.losses,
        "rows": record.rows,
        "weights": [p.detach().double().reshape(-1).tolist() for p in module.parameters()],
    }


@pytest.mark.slow
@pytest.mark.distributed
def test_two_processes_with_batch_4_train_as_one_with_batch_8(tmp_path):
    run_or_fail([sys.executable, __file__, str(tmp_path)], "2-process SFT", timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    one = _fit(1, 8)

    # The same rows per global step (EpochShuffleSampler splits each global batch between the ranks).
    for step in range(STEPS):
        assert sorted(one["rows"][step]) == sorted(ranks[0]["rows"][step] + ranks[1]["rows"][step])
    # What DDP optimises, the mean of the ranks' losses, is the one-process loss of the same rows.
    mean_of_ranks = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]
    assert mean_of_ranks == pytest.approx(one["losses"], rel=1e-5)
    # Both ranks hold the same weights, and those of the one-process run up to float rounding, which
    # Adam's normalisation lifts to about 2e-5 here (the per-rank means left a gap of 1.4e-2).
    assert ranks[0]["weights"] == ranks[1]["weights"]
    gap = max(
        abs(a - b)
        for p1, p2 in zip(one["weights"], ranks[0]["weights"], strict=True)
        for a, b in zip(p1, p2, strict=True)
    )
    assert gap < 1e-3, f"2-process weights differ from the 1-process run's by up to {gap:.2e}"


def test_training_step_outside_a_fit_returns_the_plain_mean():
    """Called directly (no trainer, no global token count) the step is the model's own mean loss."""
    from lightning_agents import ChatDataModule, SFTModule
    from lightning_agents.datamodules.chat import collate_padded

    module = SFTModule()
    data = ChatDataModule(embedded_size=8, batch_size=4, max_length=96, val=None)
    data.setup("fit")
    batch = collate_padded([data.datasets["fit"][i] for i in range(4)], pad_id=data.tokenizer.pad_token_id)
    module.log = lambda *a, **k: None  # no trainer to log to
    assert float(module.training_step(batch, 0)) == pytest.approx(float(module(batch).loss), rel=1e-6)


if __name__ == "__main__":
    result = _fit(2, 4)
    (Path(sys.argv[1]) / f"rank{result['rank']}.json").write_text(json.dumps(result))


def test_a_rank_without_assistant_tokens_sends_zero_gradients_not_nan():
    """Its own token mean is 0/0; it still joins DDP's gradient all-reduce, with zeros."""
    from types import SimpleNamespace

    from lightning_agents import SFTModule

    module = SFTModule()
    module.configure_model()
    labels = torch.full((2, 6), -100)
    module._trainer = SimpleNamespace(world_size=2)
    module._global_tokens = (labels, torch.tensor(7.0, dtype=torch.float64))  # all on the other rank
    logits = module.model(input_ids=torch.ones((2, 6), dtype=torch.long)).logits
    # The zero comes from the forward's own output (a zero built from the parameters hung FSDP).
    loss = module._global_token_mean(torch.tensor(float("nan"), requires_grad=True), labels, logits)
    loss.backward()
    assert float(loss) == 0.0
    grads = [p.grad for p in module.parameters() if p.requires_grad]
    assert grads and all(g is not None and not g.any() for g in grads)


def test_a_rank_loss_is_scaled_by_its_share_of_the_global_tokens():
    from types import SimpleNamespace

    from lightning_agents import SFTModule

    module = SFTModule()
    labels = torch.tensor([[-100, 5, 6, -100], [-100, -100, 7, -100]])  # 3 predicted tokens
    module._trainer = SimpleNamespace(world_size=2)
    module._global_tokens = (labels, torch.tensor(12.0, dtype=torch.float64))  # the other rank has 9
    # 2 ranks x 3 of 12 tokens: this rank's mean counts half as much as a rank mean would.
    assert float(module._global_token_mean(torch.tensor(2.0), labels, None)) == pytest.approx(2.0 * 2 * 3 / 12)
    # another batch's count is not used
    assert float(module._global_token_mean(torch.tensor(2.0), labels.clone(), None)) == 2.0
