"""Exact resume: 4 steps, a mid-epoch checkpoint, resume to 8 gives the weights of 8 straight steps."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.adapters import AdapterConfig


def _trainer(root, max_steps=-1, ckpt=None, **kwargs):
    # Checkpoint every 4 steps in both runs: the straight run takes the same hooks as the first half.
    ckpt = ckpt or ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=4, save_top_k=-1, filename="{step}")
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[ckpt],
        limit_val_batches=0,
        num_sanity_val_steps=0,
        **kwargs,
    )


def straight_and_resumed(tmp_path, make_module, make_data, steps=8, resume_at=4, **trainer_kwargs):
    """Weights after ``steps`` straight steps and after ``resume_at`` + resume to ``steps``."""
    L.seed_everything(0)
    straight = make_module()
    _trainer(tmp_path / "straight", steps, **trainer_kwargs).fit(straight, make_data())
    L.seed_everything(0)
    first = make_module()
    _trainer(tmp_path / "first", resume_at, **trainer_kwargs).fit(first, make_data())
    # A different seed before the resume: everything random must come from the checkpoint.
    L.seed_everything(123)
    resumed = make_module()
    ckpt = tmp_path / "first" / "ckpt" / f"step={resume_at}.ckpt"
    _trainer(tmp_path / "resumed", steps, **trainer_kwargs).fit(resumed, make_data(), ckpt_path=str(ckpt))
    return dict(straight.named_parameters()), dict(resumed.named_parameters()), dict(first.named_parameters())


def assert_bit_identical(straight, resumed, first):
    assert straight.keys() == resumed.keys()
    differ = [n for n in straight if not torch.equal(straight[n], resumed[n])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"
    # The second half did train (the comparison is not between two untouched models).
    assert any(not torch.equal(straight[n], first[n]) for n in straight)


@pytest.mark.parametrize("adapter", [None, AdapterConfig(rank=4, alpha=8, dropout=0.2)], ids=["full", "lora"])
def test_sft_resume_mid_epoch_is_bit_identical(tmp_path, adapter):
    # 48 conversations in batches of 8: 6 steps per epoch, so step 4 is mid-epoch and step 8 is in
    # the second (reshuffled) epoch.
    def make_data():
        return ChatDataModule(embedded_size=48, batch_size=8, max_length=96, val=None, shuffle=True)

    straight, resumed, first = straight_and_resumed(tmp_path, lambda: SFTModule(lr=3e-3, adapter=adapter), make_data)
    assert_bit_identical(straight, resumed, first)


class MUZOSFT(SFTModule):
    """SFT with MUZO-Adam over the trainable parameters (the adapters only, when there are adapters)."""

    def configure_optimizers(self):
        from lightning_agents.optim import MUZOAdam

        return MUZOAdam([p for p in self.parameters() if p.requires_grad], lr=1e-3, num_queries=2, seed=7)


@pytest.mark.parametrize("adapter", [None, AdapterConfig(rank=4, alpha=8)], ids=["full", "lora"])
def test_muzo_resume_mid_epoch_is_bit_identical(tmp_path, adapter):
    import lightning_agents.strategies  # noqa: F401 - registers the 'muzo' strategy

    def make_data():
        return ChatDataModule(embedded_size=48, batch_size=8, max_length=96, val=None, shuffle=True)

    straight, resumed, first = straight_and_resumed(
        tmp_path, lambda: MUZOSFT(adapter=adapter), make_data, strategy="muzo"
    )
    assert_bit_identical(straight, resumed, first)
    if adapter is not None:
        # Zeroth-order updates touch the adapters only: the frozen base is the loaded checkpoint.
        base = SFTModule(adapter=adapter)
        base.configure_model()
        base_params = dict(base.named_parameters())
        frozen = [n for n in straight if "lora_" not in n]
        assert frozen and all(torch.equal(straight[n], base_params[n]) for n in frozen)
        # LoRA's B starts at zero, so a non-zero B is an update.
        assert any(bool(p.abs().sum() > 0) for n, p in straight.items() if "lora_B" in n)


def rstg_module(adapter=None, **kwargs):
    from lightning_agents.modules.rstg import RSTGModule

    # Guidance through teacher log-probs on every prompt, no teacher sampling (see
    # TEACHER_SAMPLING for the recipe's default guidance).
    args = dict(
        num_generations=2,
        max_new_tokens=8,
        micro_batch_size=4,
        lr=1e-3,
        distill_scope="all",
        sample_weight="none",
        teacher_sft=False,
        beta_start=0.5,
        beta_kl=0.05,
        adapter=adapter,
        log_samples_every_n_steps=0,
        reward_workers=1,
    )
    args.update(kwargs)
    return RSTGModule(**args)


@pytest.mark.parametrize("adapter", [None, AdapterConfig(rank=4, alpha=8)], ids=["full", "lora"])
def test_rstg_resume_mid_epoch_is_bit_identical(tmp_path, adapter):
    from lightning_agents import PromptDataModule

    def make_data():
        # 12 prompts in batches of 2: 6 steps per epoch, shuffled.
        return PromptDataModule(train_size=12, batch_size=2, val=None, shuffle=True, seed=3)

    straight, resumed, first = straight_and_resumed(tmp_path, lambda: rstg_module(adapter), make_data)
    assert_bit_identical(straight, resumed, first)


# The recipe's guidance (configs/rstg_quickstart.yaml): teacher mean@k pass rates as weights and SFT
# on the teacher's answers, both from k teacher samples per all-wrong prompt, kept in the teacher
# cache of each run's root directory.
TEACHER_SAMPLING = dict(
    distill_scope="negative",
    sample_weight="teacher_pass_rate",
    teacher_sft=True,
    teacher_k=4,
    max_new_tokens=24,
    beta_kl=0.0,
)


def test_rstg_resume_with_teacher_sampling_is_bit_identical(tmp_path):
    """The resumed run starts with an empty teacher cache, so it samples the teacher on prompts
    whose statistics the straight run took from its cache (the second epoch's): sampling must not
    depend on what was drawn or cached before."""
    import json

    from lightning_agents import PromptDataModule

    def make_data():
        # 6 prompts in batches of 2: step 4 is mid-epoch 2, and prompts recur often enough that one
        # all-wrong prompt of the first half is all-wrong again after the resume (checked below).
        return PromptDataModule(train_size=6, batch_size=2, val=None, shuffle=True, seed=2)

    straight, resumed, first = straight_and_resumed(tmp_path, lambda: rstg_module(None, **TEACHER_SAMPLING), make_data)
    assert_bit_identical(straight, resumed, first)
    # The teacher really sampled, and its statistics entered the loss (a correct answer somewhere).
    entries = [json.loads(line) for line in (tmp_path / "straight" / "rstg_teacher_cache.jsonl").open()]
    resumed_entries = [json.loads(line) for line in (tmp_path / "resumed" / "rstg_teacher_cache.jsonl").open()]
    assert entries and any(e["pass_rate"] for e in entries) and any(e["answer"] for e in entries)
    # The resumed run recomputed, with the same result, statistics the straight run had cached
    # during the first half (computed there in another batch).
    first_half = {
        e["key"]: e for e in (json.loads(x) for x in (tmp_path / "first" / "rstg_teacher_cache.jsonl").open())
    }
    again = [e for e in resumed_entries if e["key"] in first_half]
    assert again, "no prompt of the first half came back after the resume: the test would not test the cache"
    for e in again:
        assert (e["pass_rate"], e["answer"]) == (first_half[e["key"]]["pass_rate"], first_half[e["key"]]["answer"])


def resume_from_epoch_end(tmp_path, make_module, make_data):
    """Weights after 2 straight epochs and after 1 epoch + a resume from its end-of-epoch
    checkpoint (the resumed run seeded differently): ``(straight, resumed, first)``."""

    def trainer(root, max_epochs):
        ckpt = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
        return _trainer(root, ckpt=ckpt, max_epochs=max_epochs)

    L.seed_everything(0)
    straight = make_module()
    trainer(tmp_path / "straight", 2).fit(straight, make_data())
    L.seed_everything(0)
    first = make_module()
    trainer(tmp_path / "first", 1).fit(first, make_data())
    L.seed_everything(123)
    resumed = make_module()
    trainer(tmp_path / "resumed", 2).fit(
        resumed, make_data(), ckpt_path=str(tmp_path / "first" / "ckpt" / "epoch=0.ckpt")
    )
    return tuple(dict(m.named_parameters()) for m in (straight, resumed, first))


def test_sft_resume_from_an_end_of_epoch_checkpoint_is_bit_identical(tmp_path, caplog):
    """Lightning's default checkpoint is taken when an epoch ends, where the stateful loader's
    state is not restored: the next epoch's order must follow from (seed, epoch) alone, with the
    seed taken from the checkpoint."""

    def make_data():
        return ChatDataModule(embedded_size=32, batch_size=8, max_length=96, val=None, shuffle=True)

    weights = resume_from_epoch_end(
        tmp_path, lambda: SFTModule(lr=3e-3, adapter=AdapterConfig(rank=4, alpha=8, dropout=0.2)), make_data
    )
    assert "checkpoint taken at the end of an epoch" not in caplog.text
    assert_bit_identical(*weights)


def test_sft_resume_mid_epoch_in_a_later_epoch_is_bit_identical(tmp_path):
    """A checkpoint in the middle of epoch 1: the resumed sampler continues epoch 1's order at the
    checkpoint's position."""

    def make_data():
        # 48 conversations in batches of 8: step 8 is the third batch of epoch 1.
        return ChatDataModule(embedded_size=48, batch_size=8, max_length=96, val=None, shuffle=True)

    straight, resumed, first = straight_and_resumed(
        tmp_path, lambda: SFTModule(lr=3e-3), make_data, steps=11, resume_at=8
    )
    assert_bit_identical(straight, resumed, first)


def test_rstg_resume_from_an_end_of_epoch_checkpoint_is_bit_identical(tmp_path):
    from lightning_agents import PromptDataModule

    def make_data():
        return PromptDataModule(train_size=6, batch_size=2, val=None, shuffle=True, seed=3)

    assert_bit_identical(*resume_from_epoch_end(tmp_path, rstg_module, make_data))


def _end_of_epoch_checkpoint():
    from lightning_agents.resume import RNGResume

    class Progress:
        is_last_batch = True

    class Trainer:
        class fit_loop:  # noqa: N801 -- the attribute path Lightning's trainer has
            class epoch_loop:  # noqa: N801
                batch_progress = Progress()

    checkpoint = {}
    RNGResume().save(checkpoint, 0, Trainer())
    return checkpoint


def test_an_end_of_epoch_resume_is_warned_about_only_for_a_random_sampler(caplog):
    from torch.utils.data import DataLoader

    from lightning_agents.datamodules.shuffling import shuffled_loader
    from lightning_agents.resume import RNGResume

    class Trainer:
        def __init__(self, loader):
            self.train_dataloader = loader

    checkpoint = _end_of_epoch_checkpoint()
    for loader, warned in (
        (DataLoader(list(range(8)), shuffle=True), True),
        ({"a": DataLoader(list(range(8))), "b": DataLoader(list(range(8)), shuffle=True)}, True),
        (shuffled_loader(list(range(8)), batch_size=2, seed=0, collate_fn=list), False),
        (DataLoader(list(range(8)), shuffle=False), False),
    ):
        caplog.clear()
        resume = RNGResume()
        resume.load(checkpoint, 0)
        resume.restore_pending(Trainer(loader))
        assert ("checkpoint taken at the end of an epoch" in caplog.text) is warned, loader


def test_a_checkpoint_of_a_run_given_paths_from_python_resumes(tmp_path):
    # Lightning resumes with torch.load(weights_only=True), which refused the PosixPath that
    # ChatDataModule(cache_dir=Path(...)) wrote into the checkpoint's hyperparameters.
    from pathlib import Path

    def make_data():
        return ChatDataModule(embedded_size=16, batch_size=8, max_length=64, val=None, cache_dir=Path(tmp_path / "c"))

    L.seed_everything(0)
    _trainer(tmp_path / "first", 4).fit(SFTModule(model="embedded:student"), make_data())
    assert isinstance(make_data().hparams["cache_dir"], str)
    resumed = _trainer(tmp_path / "resumed", 5)
    resumed.fit(
        SFTModule(model="embedded:student"), make_data(), ckpt_path=str(tmp_path / "first" / "ckpt" / "step=4.ckpt")
    )
    assert resumed.global_step == 5
