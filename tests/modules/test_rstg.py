"""RSTGModule: guidance switches, teacher weighting, vocabulary check, and end-to-end fits."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.models import load_causal_lm
from lightning_agents.modules import rstg_loss as F
from lightning_agents.modules.rstg import RSTGModule, check_same_vocabulary
from lightning_agents.modules.rstg_cache import TeacherCache
from lightning_agents.rewards.arithmetic import arithmetic_conversation, make_arithmetic_split

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _records(n):
    out = []
    for rec in make_arithmetic_split("val", n=n):
        out.append({"id": rec["id"], "prompt": arithmetic_conversation(rec)["messages"][:1], "reference": rec["answer"]})
    return out


def _module(tmp_path, **kw):
    args = dict(num_generations=4, max_new_tokens=16, teacher_k=4, micro_batch_size=8, lr=1e-3,
                beta_start=0.5, beta_floor=0.1, teacher_cache=str(tmp_path / "cache.jsonl"))
    args.update(kw)
    module = RSTGModule(**args)
    module.configure_model()
    return module


def test_opd_only_on_negative_groups_weighted_by_cached_pass_rates(tmp_path):
    torch.manual_seed(0)
    records = _records(3)
    m = _module(tmp_path, token_fraction=0.2)
    # Pre-filled cache: the module must use these pass rates as sample weights, not recompute them.
    rates = [0.25, 0.75, 0.5]
    for rec, rate in zip(records, rates):
        key = m.teacher_key(rec)
        m.teacher_cache.put(key, rate, "The answer is 1.", 4)
    out = m.engine.generate([r["prompt"] for r in records], num_samples=4, sampling=m.sampling)
    rewards = torch.tensor([0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0], dtype=torch.float32)  # groups 0, 2 negative
    adv, info = m.compute_token_advantages(out, rewards, records)
    mask = out.completion_mask.float()
    grpo = F.group_advantages(rewards, 4)[:, None] * mask
    # Group 1 is mixed: exactly the GRPO advantage, no OPD term.
    torch.testing.assert_close(adv[4:8], grpo[4:8])
    assert not info["selected"][4:8].any()
    weights = info["weights"]
    assert weights[:4].tolist() == [0.25] * 4 and weights[8:].tolist() == [0.5] * 4
    beta = m.beta()
    expected = beta * weights[:, None] * info["a_opd"] * info["selected"]
    torch.testing.assert_close(adv[:4], expected[:4])
    torch.testing.assert_close(adv[8:], expected[8:])
    for g in (0, 2):
        rows = slice(4 * g, 4 * g + 4)
        n = int(mask[rows].sum())
        assert int(info["selected"][rows].sum()) == min(n, max(1, math.ceil(0.2 * n)))
    assert len(m.teacher_cache) == 3  # nothing was recomputed


def test_teacher_pass_rate_is_computed_once_and_cached(tmp_path):
    records = _records(2)
    m = _module(tmp_path)
    info = m.teacher_info(records)
    assert all(0.0 <= e["pass_rate"] <= 1.0 for e in info)
    lines = (tmp_path / "cache.jsonl").read_text().splitlines()
    assert len(lines) == 2
    again = m.teacher_info(records)
    assert again == info and len((tmp_path / "cache.jsonl").read_text().splitlines()) == 2
    assert TeacherCache(tmp_path / "cache.jsonl").get(info[0]["key"]) == info[0]


def _one_step(module, records, seed):
    opt = torch.optim.SGD(module.model.parameters(), lr=0.1)
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    module.log_dict = lambda *a, **k: None
    module.log = lambda *a, **k: None
    torch.manual_seed(seed)
    module.training_step(records, 0)
    return [p.detach().clone() for p in module.model.parameters()]


def test_guidance_with_zero_weight_reduces_to_grpo_exactly(tmp_path):
    records = _records(4)
    grpo = _module(tmp_path, guidance=False, teacher=None)
    guided = _module(tmp_path, guidance=True, beta_start=0.0, beta_slope=0.0, beta_floor=0.0, teacher_sft=False)
    a = _one_step(grpo, records, 7)
    b = _one_step(guided, records, 7)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    # ... and a non-zero beta changes the update (the comparison can fail).
    strong = _module(tmp_path, guidance=True, beta_start=5.0, beta_floor=5.0, teacher_sft=False, sample_weight="none")
    c = _one_step(strong, records, 7)
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_vocabulary_mismatch_is_refused():
    student = SimpleNamespace(get_vocab=lambda: {"a": 0, "b": 1})
    check_same_vocabulary(student, SimpleNamespace(get_vocab=lambda: {"a": 0, "b": 1}))
    with pytest.raises(ValueError, match="different vocabulary"):
        check_same_vocabulary(student, SimpleNamespace(get_vocab=lambda: {"a": 1, "b": 0}), "other")


def test_bad_switches():
    with pytest.raises(ValueError, match="distill_scope"):
        RSTGModule(distill_scope="some", guidance=False, teacher=None)
    with pytest.raises(ValueError, match="teacher"):
        RSTGModule(guidance=True, teacher=None)
    with pytest.raises(ValueError, match="num_generations"):
        RSTGModule(num_generations=1, guidance=False, teacher=None)


def _fit(config, tmp_path, steps=2):
    from lightning_agents.cli import cli_main

    args = ["fit", "--config", str(CONFIGS / config), f"--trainer.max_steps={steps}",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.logger.init_args.save_dir", str(tmp_path),
            "--trainer.val_check_interval", str(steps), "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false", "--data.init_args.train_size=32", "--data.init_args.val_size=16",
            "--data.init_args.batch_size=4", "--model.init_args.num_generations=4",
            f"--model.init_args.teacher_cache={tmp_path / 'tc.jsonl'}", "--model.init_args.teacher_k=4"]
    before = list(load_causal_lm("embedded:student").parameters())
    cli = cli_main(args)
    assert cli.trainer.global_step == steps
    after = list(cli.model.model.parameters())
    assert any(not torch.equal(x, y.detach()) for x, y in zip(before, after))
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    assert "train/reward_mean" in metrics and "val/accuracy" in metrics
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert list(Path(tmp_path).rglob("events.out.tfevents*"))
    return metrics


def test_fit_rstg_quickstart(tmp_path):
    metrics = _fit("rstg_quickstart.yaml", tmp_path)
    assert 0.0 <= metrics["train/frac_negative_zero_var"] <= 1.0


@pytest.mark.parametrize("config", ["grpo_quickstart.yaml", "grpo_opd_quickstart.yaml"])
def test_fit_other_quickstarts(config, tmp_path):
    metrics = _fit(config, tmp_path)
    if config.startswith("grpo_opd"):
        assert metrics["train/frac_tokens_distilled"] > 0.0
    else:
        assert metrics["train/frac_tokens_distilled"] == 0.0
