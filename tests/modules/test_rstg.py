"""RSTGModule: guidance switches, teacher weighting, vocabulary check, and end-to-end fits."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_causal_lm
from lightning_agents.modules import rstg_loss as F
from lightning_agents.modules.rstg import RSTGModule, check_same_vocabulary
from lightning_agents.modules.rstg_cache import TeacherCache
from lightning_agents.tasks.arithmetic import (
    arithmetic_conversation,
    make_arithmetic_split,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _records(n):
    out = []
    for rec in make_arithmetic_split("val", n=n):
        out.append(
            {"id": rec["id"], "prompt": arithmetic_conversation(rec)["messages"][:1], "reference": rec["answer"]}
        )
    return out


def _module(tmp_path, **kw):
    args = dict(
        num_generations=4,
        max_new_tokens=16,
        teacher_k=4,
        micro_batch_size=8,
        lr=1e-3,
        beta_start=0.5,
        beta_floor=0.1,
        teacher_cache=str(tmp_path / "cache.jsonl"),
    )
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


def _one_step(module, batches, seed, metrics=None):
    """One optimizer step (SGD, lr 0.1, no clipping) over ``batches`` (one list of records, or a
    list of generation batches when the module accumulates); returns the new parameters."""
    opt = torch.optim.SGD(module.model.parameters(), lr=0.1)
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    module.log_dict = lambda d, *a, **k: metrics.update(d) if metrics is not None else None
    module.log = lambda *a, **k: None
    torch.manual_seed(seed)
    if batches and isinstance(batches[0], dict):
        batches = [batches]
    for i, batch in enumerate(batches):
        module.training_step(batch, i)
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
    # a teacher with a token the student lacks (an added <think>) names it
    with pytest.raises(ValueError, match=r"teacher tokens missing in the student: \['<think>'\]"):
        check_same_vocabulary(student, SimpleNamespace(get_vocab=lambda: {"a": 0, "b": 1, "<think>": 2}))


def test_bad_switches():
    with pytest.raises(ValueError, match="distill_scope"):
        RSTGModule(distill_scope="some", guidance=False, teacher=None)
    with pytest.raises(ValueError, match="teacher"):
        RSTGModule(guidance=True, teacher=None)
    with pytest.raises(ValueError, match="num_generations"):
        RSTGModule(num_generations=1, guidance=False, teacher=None)


def _fit(config, tmp_path, steps=2, extra=()):
    from lightning_agents.cli import cli_main

    args = [
        "fit",
        "--config",
        str(CONFIGS / config),
        f"--trainer.max_steps={steps}",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path),
        "--trainer.val_check_interval",
        str(steps),
        "--trainer.limit_val_batches=1",
        "--trainer.enable_progress_bar=false",
        "--data.init_args.train_size=32",
        "--data.init_args.val_size=16",
        "--data.init_args.batch_size=4",
        "--model.init_args.num_generations=4",
        f"--model.init_args.teacher_cache={tmp_path / 'tc.jsonl'}",
        "--model.init_args.teacher_k=4",
        *extra,
    ]
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


# ----------------------------------------------------------------------------- teacher statistics
class _DirectScorer:
    """Scores with ``verifier`` and passes NaN ("could not verify") through, as RewardScorer does
    for verifier faults; isolates these tests from the scorer's own fault handling."""

    def __init__(self, verifier) -> None:
        self.verifier = verifier

    def score(self, completions, references, verifiers=None):
        from lightning_agents.rewards.registry import ScoreResult

        rewards = [float(self.verifier(c, r)) for c, r in zip(completions, references)]
        self.log = rewards
        return ScoreResult(rewards, sum(math.isnan(x) for x in rewards))


class _CyclingVerifier:
    """Deterministic stand-in for a verifier, by call order: right, right, could not verify (NaN),
    wrong, wrong, right, ... (scored sequentially)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, completion: str, reference: str) -> float:
        self.calls += 1
        return (1.0, 1.0, math.nan, 0.0, 0.0)[(self.calls - 1) % 5]


def test_teacher_pass_rate_and_answer_follow_the_verified_samples(tmp_path, monkeypatch):
    import lightning_agents.modules.rstg as rstg_mod

    records = _records(4)
    m = _module(tmp_path, teacher_k=6, max_new_tokens=19)
    m.scorer = _DirectScorer(_CyclingVerifier())
    seen = []
    original = rstg_mod.HFGenerationEngine.generate

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(rstg_mod.HFGenerationEngine, "generate", spy)
    torch.manual_seed(3)
    info = m.teacher_info(records)
    (out,) = seen
    scores = m.scorer.log
    rates = []
    for i, entry in enumerate(info):
        rows = range(6 * i, 6 * i + 6)
        verified = [r for r in rows if not math.isnan(scores[r])]
        correct = [r for r in verified if scores[r] == 1.0 and not bool(out.truncated[r])]
        expected = len(correct) / len(verified)
        assert entry["pass_rate"] == expected and entry["verified"] == len(verified)
        assert entry["answer"] == (min((out.texts[r] for r in correct), key=len) if correct else None)
        rates.append(expected)
    # The case is informative: rates differ across prompts and include values other than 0.5
    # (an inverted rate, 1 - p, fails above), and truncation removed some right answers.
    assert len(set(rates)) >= 3 and any(r not in (0.0, 0.5, 1.0) for r in rates), rates
    assert any(scores[r] == 1.0 and bool(out.truncated[r]) for r in range(len(scores)))


def test_teacher_cache_key_covers_sampling_and_scoring(tmp_path):
    rec = _records(1)[0]
    base = _module(tmp_path).teacher_key(rec)
    for change in (
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"max_new_tokens": 17},
        {"teacher_k": 5},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"success_threshold": 0.5},
        {"verifier": "lightning_agents.rewards.GSM8KVerifier"},
    ):
        assert _module(tmp_path, **change).teacher_key(rec) != base, change
    assert _module(tmp_path).teacher_key({**rec, "reference": "999"}) != base
    assert _module(tmp_path).teacher_key(rec) == base
    # The teacher's own dtype decides its samples; the student's alone does not. A cache filled by
    # a float32 teacher was served to a bfloat16 one.
    assert _module(tmp_path, teacher_dtype="bfloat16").teacher_key(rec) != base
    # The prompts are the student's rendering: another chat template is another prompt.
    other = _module(tmp_path)
    other.tokenizer.chat_template = other.tokenizer.chat_template.replace("<|im_start|>", "<|im_start|> ")
    assert other.teacher_key(rec) != base


def test_a_teacher_with_its_own_chat_template_is_told_it_reads_the_students(tmp_path, caplog):
    from lightning_agents.models import load_model_and_tokenizer, load_tokenizer

    teacher = tmp_path / "teacher"
    model, tok = load_model_and_tokenizer("embedded:teacher")
    model.save_pretrained(teacher)
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    tok.save_pretrained(teacher)
    assert load_tokenizer(str(teacher)).chat_template != load_tokenizer("embedded:student").chat_template
    with caplog.at_level("WARNING", logger="lightning_agents.modules.rstg"):
        _module(tmp_path, teacher=str(teacher))
    assert "has its own chat template" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="lightning_agents.modules.rstg"):
        _module(tmp_path)
    assert "own chat template" not in caplog.text


def test_teacher_retrained_in_place_with_the_same_shape_gets_a_new_cache_key(tmp_path):
    # The embedded teacher is retrained this way: same architecture, so the same file sizes.
    import time

    from lightning_agents.modules.rstg_cache import model_fingerprint

    folder = tmp_path / "teacher"
    model = load_causal_lm("embedded:teacher")
    model.save_pretrained(folder)
    before = model_fingerprint(str(folder))
    time.sleep(0.05)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    model.save_pretrained(folder)
    assert (folder / "model.safetensors").stat().st_size > 0
    assert model_fingerprint(str(folder)) != before


# ----------------------------------------------------------------------------- teacher SFT
def _answer_nll_grads(model, tokenizer, engine, prompts, answers):
    """Independent computation of grad(sum of answer-token NLL / answer tokens)."""
    model.zero_grad(set_to_none=True)
    total = 0
    losses = []
    for prompt, answer in zip(prompts, answers):
        p = tokenizer(engine.render(prompt), add_special_tokens=False)["input_ids"]
        a = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = torch.tensor([p + a])
        logits = model(input_ids=ids).logits[0, len(p) - 1 : -1]
        losses.append(torch.nn.functional.cross_entropy(logits.double(), torch.tensor(a), reduction="sum"))
        total += len(a)
    (sum(losses) / total).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def test_teacher_sft_adds_exactly_beta_times_the_answer_nll_gradient(tmp_path):
    records = _records(2)
    kw = dict(
        verifier=_AlwaysWrong(),
        beta_start=0.5,
        beta_slope=0.0,
        beta_floor=0.5,
        sample_weight="none",
        importance_sampling="none",
    )
    with_sft = _module(tmp_path / "a", teacher_sft=True, **kw)
    without = _module(tmp_path / "b", teacher_sft=False, **kw)
    answers = ["The answer is 12.", "The answer is 345."]
    for m in (with_sft, without):
        for rec, answer in zip(records, answers):
            m.teacher_cache.put(m.teacher_key(rec), 0.5, answer, 4)
    grads = _answer_nll_grads(
        with_sft.model, with_sft.tokenizer, with_sft.engine, [r["prompt"] for r in records], answers
    )
    before = [p.detach().clone() for p in with_sft.model.parameters()]
    a = _one_step(with_sft, records, 11)
    b = _one_step(without, records, 11)
    # Same samples, same policy loss: the updates differ by -lr * beta * grad(answer NLL).
    for x, y, g, _p0 in zip(a, b, grads, before):
        torch.testing.assert_close(x - y, -0.1 * 0.5 * g.float(), atol=2e-5, rtol=1e-3)
    assert any(float(g.abs().max()) > 1e-3 for g in grads)
    assert not all(torch.equal(x, p0) for x, p0 in zip(a, before))


class _AlwaysWrong:
    def __call__(self, completion: str, reference: str) -> float:
        return 0.0


# ----------------------------------------------------------------------------- faults are not rewards
class _NaNForSome:
    """Could not verify every third sample; the rest wrong."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, completion: str, reference: str) -> float:
        self.calls += 1
        return math.nan if self.calls % 3 == 0 else 0.0


def test_unverifiable_samples_get_no_advantage_no_guidance_and_no_loss(tmp_path):
    records = _records(3)
    m = _module(tmp_path, token_selection="all")
    m.scorer = _DirectScorer(_NaNForSome())
    for rec in records:
        m.teacher_cache.put(m.teacher_key(rec), 1.0, "The answer is 1.", 4)
    torch.manual_seed(0)
    rollout = m.collect(records)
    nan = torch.isnan(rollout.rewards)
    assert nan.any() and not nan.all()
    # Faults do not make a group "all wrong" by themselves, and NaN rows are left out everywhere.
    assert rollout.info["stats"].negative.all()
    assert not rollout.info["opd_rows"][nan].any()
    assert torch.all(rollout.token_adv[nan] == 0) and torch.all(rollout.loss_mask[nan] == 0)
    assert rollout.info["opd_rows"][~nan].all()
    metrics = m._rollout_metrics([rollout])
    assert metrics["train/unverified_frac"] == float(nan.float().mean())
    assert math.isfinite(metrics["train/reward_mean"])


# ----------------------------------------------------------------------------- accumulation
def test_two_accumulated_generation_batches_equal_one_double_batch_in_fp64(tmp_path):
    records = _records(4)
    kw = dict(
        loss_aggregation="token_mean",
        token_selection="soft_or",
        beta_start=0.5,
        beta_slope=0.0,
        micro_batch_size=3,
        max_new_tokens=12,
    )
    acc = _module(tmp_path / "acc", generation_batches_per_step=2, **kw)
    one = _module(tmp_path / "one", generation_batches_per_step=1, **kw)
    torch.manual_seed(5)
    out = acc.engine.generate([r["prompt"] for r in records], num_samples=4, sampling=acc.sampling)
    for m in (acc, one):
        m.model.double()
        m.teacher.double()
        for i, rec in enumerate(records):
            m.teacher_cache.put(m.teacher_key(rec), 0.25 * (i + 1), "The answer is 5.", 4)
    halves = iter([_rows(out, slice(0, 8)), _rows(out, slice(8, 16))])
    acc.engine.generate = lambda *a, **k: next(halves)
    one.engine.generate = lambda *a, **k: out
    a = _one_step(acc, [records[:2], records[2:]], 0)
    b = _one_step(one, [records], 0)
    assert all(p.dtype == torch.float64 for p in a)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-12, rtol=1e-10)
    init = [p.detach().double() for p in load_causal_lm("embedded:student").parameters()]
    assert not all(torch.allclose(x, p0) for x, p0 in zip(a, init))


def _rows(out, sl):
    from dataclasses import fields, replace

    return replace(
        out,
        **{
            f.name: (getattr(out, f.name)[sl] if f.name != "texts" else out.texts[sl])
            for f in fields(out)
            if getattr(out, f.name) is not None
        },
    )


# ----------------------------------------------------------------------------- sampler / trainer gap
def test_truncated_importance_sampling_reweights_by_the_logged_gap(tmp_path):
    records = _records(2)
    kw = dict(guidance=False, teacher=None, loss_aggregation="token_mean", importance_sampling_cap=2.0)
    plain = _module(tmp_path, importance_sampling="none", **kw)
    corrected = _module(tmp_path, importance_sampling="truncated", **kw)
    torch.manual_seed(1)
    out = plain.engine.generate([r["prompt"] for r in records], num_samples=4, sampling=plain.sampling)
    # A sampler that assigns every token 0.5 nats less than the trainer (as a stale vLLM could).
    from dataclasses import replace

    shifted = replace(out, logprobs=(out.logprobs - 0.5) * out.completion_mask)
    logged = {}
    for m in (plain, corrected):
        m.engine.generate = lambda *a, **k: shifted
    corrected_metrics = {}
    a0 = [p.detach().clone() for p in plain.model.parameters()]
    a = _one_step(plain, [records], 2, metrics=logged)
    b = _one_step(corrected, [records], 2, metrics=corrected_metrics)
    for key in ("train/sampler_logprob_gap",):
        assert abs(logged[key] - 0.5) < 1e-4 and abs(corrected_metrics[key] - 0.5) < 1e-4
    w = math.exp(0.5)
    assert abs(corrected_metrics["train/importance_weight_mean"] - w) < 1e-3
    for x, y, p0 in zip(a, b, a0):
        torch.testing.assert_close(y - p0, w * (x - p0), atol=1e-6, rtol=1e-3)
    assert any(float((x - p0).abs().max()) > 0 for x, p0 in zip(a, a0))


def test_hf_sampler_and_trainer_agree(tmp_path):
    records = _records(3)
    m = _module(tmp_path, guidance=False, teacher=None)
    logged = {}
    _one_step(m, [records], 4, metrics=logged)
    assert logged["train/sampler_logprob_gap_abs"] < 1e-3
    assert abs(logged["train/importance_weight_mean"] - 1.0) < 1e-3


# ----------------------------------------------------------------------------- gradient checkpointing
def test_gradient_checkpointing_runs_during_fit(tmp_path, monkeypatch):
    import transformers.modeling_utils as mu

    calls = []
    original = mu.checkpoint

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(mu, "checkpoint", counting)
    _fit("grpo_quickstart.yaml", tmp_path, extra=["--model.init_args.gradient_checkpointing=true"])
    # 2 decoder layers x micro-batches x 2 steps; zero if the student stays in eval mode.
    assert len(calls) >= 4


def test_teacher_cache_command_pregenerates_what_fit_then_reuses(tmp_path):
    from lightning_agents.cli import cli_main

    cache = tmp_path / "tc.jsonl"
    common = [
        f"--model.init_args.teacher_cache={cache}",
        "--model.init_args.teacher_k=2",
        "--data.init_args.train_size=6",
        "--data.init_args.batch_size=3",
    ]
    cli_main(["teacher_cache", "--config", str(CONFIGS / "rstg_quickstart.yaml"), "--progress=false", *common])
    lines = cache.read_text().splitlines()
    assert len(lines) == 6
    # The module that fit builds from the same config finds every training prompt cached.
    cli = cli_main(["--config", str(CONFIGS / "rstg_quickstart.yaml"), *common], run=False)
    module, dm = cli.model, cli.datamodule
    module.configure_model()
    dm.setup("fit")
    records = [r for b in dm.train_dataloader() for r in b]
    assert all(module.teacher_key(r) in module.teacher_cache for r in records)
    assert module.precompute_teacher(records)["computed"] == 0


# ----------------------------------------------------------------------------- multi-turn tool use
def _tool_records(n, reference=None):
    from lightning_agents.tasks import CalculatorTask

    task = CalculatorTask(split="train", n=n)
    records = [task.prompt_record(p) for p in task.problems]
    if reference is not None:
        records = [{**r, "reference": reference} for r in records]
    return records


@pytest.mark.parametrize(
    "recipe",
    [
        dict(guidance=False, teacher=None),
        dict(distill_scope="all", token_selection="all", sample_weight="none", teacher_sft=False),
        dict(),
    ],
)
def test_grpo_opd_and_rstg_train_on_tool_episodes(tmp_path, recipe):
    records = _tool_records(3)
    # Temperature 1.5: at 1.0 the current student solves every calculator problem in every trial,
    # so every group has zero variance and GRPO has nothing to learn from.
    m = _module(tmp_path, max_new_tokens=40, max_turns=3, teacher_k=2, temperature=1.5, **recipe)
    torch.manual_seed(0)
    rollout = m.collect(records)
    out = rollout.out
    assert out.loss_mask is not None
    tool_tokens = out.completion_mask.bool() & ~out.loss_mask.bool()
    assert tool_tokens.any()  # tool results are in the context ...
    assert not (rollout.loss_mask.bool() & tool_tokens).any()  # ... and out of the loss
    assert torch.all(rollout.token_adv[tool_tokens] == 0)
    if "selected" in rollout.info:
        assert not (rollout.info["selected"] & tool_tokens).any()
    before = [p.detach().clone() for p in m.model.parameters()]
    m._pending = [rollout]
    m.hparams.generation_batches_per_step = 1
    after = _one_step(m, [records], 1)
    assert any(not torch.equal(a, b) for a, b in zip(after, before))


def test_teacher_episode_sft_trains_only_the_teachers_turns(tmp_path):
    records = _tool_records(2, reference="-12345")  # nobody can be right: every group negative
    m = _module(tmp_path, max_new_tokens=40, max_turns=3, teacher_k=2)
    torch.manual_seed(0)
    info = m.teacher_info(records)
    assert all(e["pass_rate"] == 0.0 and e["answer"] is None for e in info)
    # A teacher episode from the cache: its stream with the tool output masked.
    tok = m.tokenizer
    prompt_ids = tok(m.engine.render(records[0]["prompt"], m.agent_task(records).tools), add_special_tokens=False)[
        "input_ids"
    ]
    turn = tok(
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>', add_special_tokens=False
    )["input_ids"] + [tok.eos_token_id]
    glue = tok("<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    final = tok("The answer is 2.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    answer = {
        "messages": [],
        "prompt_ids": prompt_ids,
        "ids": turn + glue + final,
        "mask": [1] * len(turn) + [0] * len(glue) + [1] * len(final),
    }
    (row,) = m._sft_rows([records[0]["prompt"]], [answer])
    nll = m._sft_nll([row])
    with torch.no_grad():
        ids = torch.tensor([prompt_ids + answer["ids"]])
        logp = torch.log_softmax(m.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float(), -1)
        per_tok = -logp.gather(1, torch.tensor(answer["ids"])[:, None]).squeeze(1)
    keep = torch.tensor(answer["mask"]).bool()
    torch.testing.assert_close(nll.detach(), per_tok[keep].sum(), atol=1e-4, rtol=1e-4)
    assert float(per_tok[~keep].sum()) > 0  # the masked glue would have counted


class _FailingEveryThird:
    """A verifier whose own machinery fails on every third call (as a crashed sandbox would)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, completion: str, reference: str) -> float:
        from lightning_agents.errors import VerifierError

        self.calls += 1
        if self.calls % 3 == 0:
            raise VerifierError("sandbox could not start")
        return 0.0


def test_verifier_faults_through_the_real_scorer_are_not_rewards(tmp_path):
    from lightning_agents.rewards.registry import RewardScorer

    records = _records(3)
    m = _module(tmp_path, token_selection="all")
    m.scorer = RewardScorer(_FailingEveryThird(), max_workers=1)
    for rec in records:
        m.teacher_cache.put(m.teacher_key(rec), 1.0, "The answer is 1.", 4)
    torch.manual_seed(0)
    rollout = m.collect(records)
    nan = torch.isnan(rollout.rewards)
    assert int(nan.sum()) == 4  # 12 samples, every third failed
    assert rollout.info["stats"].negative.all() and not rollout.info["opd_rows"][nan].any()
    assert torch.all(rollout.loss_mask[nan] == 0)
    metrics = m._rollout_metrics([rollout])
    assert metrics["train/reason_verifier_error"] == 4 and metrics["train/reason_wrong_answer"] == 8
    assert metrics["train/unverified_frac"] == pytest.approx(4 / 12)


def test_records_of_a_task_that_needs_arguments_are_single_turn(tmp_path):
    # configs/rstg_qwen3_gsm8k.yaml stopped at the first validation batch: the records name
    # GSM8KTask, which cannot be built without its data path, and the module built it to ask
    # whether it had tools.
    records = [
        {
            "id": "1",
            "prompt": [{"role": "user", "content": "2 + 2?"}],
            "reference": "4",
            "task": "lightning_agents.tasks.gsm8k.GSM8KTask",
        }
    ]
    m = _module(tmp_path)
    assert m.agent_task(records) is None
    tool_records = _tool_records(1)
    assert m.agent_task(tool_records).tools  # a task with tools is still found from its class path


def test_a_token_without_a_sampler_log_prob_gets_no_distillation_advantage(tmp_path):
    # A vLLM step it did not report (NaN) was taken as log-prob 0 in the distillation advantage:
    # teacher_logp - 0 pushed that token down while the policy term treated it as unknown.
    records = _records(2)
    m = _module(tmp_path, token_selection="all", distill_scope="all", sample_weight="none", teacher_sft=False)
    m.scorer = _DirectScorer(_AlwaysWrong())
    generate = m.engine.generate

    def with_an_unknown_step(*args, **kwargs):
        out = generate(*args, **kwargs)
        out.logprobs[0, 1] = math.nan
        return out

    m.engine.generate = with_an_unknown_step
    torch.manual_seed(0)
    rollout = m.collect(records)
    assert rollout.info["opd_rows"][0] and int(rollout.loss_mask[0].sum()) > 2
    # Every sample wrong: the GRPO advantage is 0, so what is left is the distillation term.
    assert float(rollout.token_adv[0, 1]) == 0.0
    assert (rollout.token_adv[0] != 0).sum() >= 2


class _ScheduledRSTG(RSTGModule):
    """RSTG with a LinearLR scheduler configured the Lightning way (interval, frequency)."""

    def __init__(self, interval: str, frequency: int, **kwargs):
        super().__init__(**kwargs)
        self.schedule = (interval, frequency)
        self.lrs: list[float] = []

    def configure_optimizers(self):
        opt = super().configure_optimizers()
        sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.5, total_iters=4)
        interval, frequency = self.schedule
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": interval, "frequency": frequency}}

    def on_train_batch_start(self, batch, batch_idx):
        self.lrs.append(self.optimizers().param_groups[0]["lr"])
        return super().on_train_batch_start(batch, batch_idx)


@pytest.mark.parametrize(
    "interval, frequency, expected",
    # 6 prompts in batches of 2: 3 updates per epoch, 6 in all; lr 1e-3 falling by 1/8 per scheduler step.
    [("step", 2, [1.0, 1.0, 0.875, 0.875, 0.75, 0.75]), ("epoch", 1, [1.0, 1.0, 1.0, 0.875, 0.875, 0.875])],
)
def test_rstg_steps_its_scheduler_as_the_scheduler_config_says(tmp_path, interval, frequency, expected):
    # RSTG optimises manually and stepped any scheduler once per update, ignoring interval and
    # frequency (a per-epoch LinearLR decayed per update; ReduceLROnPlateau crashed mid-run).
    import lightning as L

    from lightning_agents import PromptDataModule

    module = _ScheduledRSTG(
        interval,
        frequency,
        num_generations=2,
        max_new_tokens=8,
        micro_batch_size=4,
        lr=1e-3,
        log_samples_every_n_steps=0,
        reward_workers=1,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, PromptDataModule(train_size=6, batch_size=2, val=None, seed=0))
    assert module.lrs == pytest.approx([1e-3 * f for f in expected])


def test_rstg_reduce_on_plateau_gets_its_monitored_metric_or_a_clear_error(tmp_path):
    m = _module(tmp_path)
    opt = torch.optim.SGD(m.model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", patience=0, factor=0.5)
    config = SimpleNamespace(
        interval="epoch", frequency=1, reduce_on_plateau=True, monitor="val/accuracy", scheduler=sched
    )
    metrics = {"val/accuracy": torch.tensor(0.5)}
    m._trainer = SimpleNamespace(lr_scheduler_configs=[config], callback_metrics=metrics, current_epoch=0)
    m.on_train_epoch_end()
    m.on_train_epoch_end()  # no improvement: halved
    assert opt.param_groups[0]["lr"] == 0.5
    metrics.clear()
    with pytest.raises(LightningAgentsError, match="monitors 'val/accuracy'"):
        m.on_train_epoch_end()


def test_rstg_logs_one_row_every_log_every_n_steps_updates(tmp_path):
    # With two generation batches per update, Lightning's logger step counted batches and every
    # batch between updates wrote a stale copy of the last update's metrics.
    import csv

    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from lightning_agents import PromptDataModule

    module = RSTGModule(
        num_generations=2,
        max_new_tokens=8,
        micro_batch_size=4,
        lr=1e-3,
        generation_batches_per_step=2,
        log_samples_every_n_steps=0,
        reward_workers=1,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=4,
        logger=CSVLogger(tmp_path, name="csv"),
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, PromptDataModule(train_size=16, batch_size=2, val=None, seed=0))
    (path,) = (tmp_path / "csv").glob("version_*/metrics.csv")
    rows = [r for r in csv.DictReader(path.open()) if r.get("train/loss")]
    # updates 2 and 4 (log_every_n_steps counts updates), at the step Lightning gives the batch
    # that completes them (batches 4 and 8: steps 3 and 7), as its validation and LR rows
    assert [int(r["step"]) for r in rows] == [3, 7]


def test_rstg_steps_a_plateau_scheduler_from_the_cli_with_its_monitor(tmp_path):
    # Lightning drops `monitor` from a manually optimised module's scheduler config: the CLI's
    # ReduceLROnPlateau (what `lr_scheduler: ReduceLROnPlateau` builds) crashed without a metric.
    from lightning.pytorch.cli import ReduceLROnPlateau

    m = _module(tmp_path)
    opt = torch.optim.SGD(m.model.parameters(), lr=1.0)
    sched = ReduceLROnPlateau(opt, monitor="val/accuracy", mode="max", patience=0, factor=0.5)
    config = SimpleNamespace(interval="epoch", frequency=1, reduce_on_plateau=False, monitor=None, scheduler=sched)
    m._trainer = SimpleNamespace(
        lr_scheduler_configs=[config], callback_metrics={"val/accuracy": torch.tensor(0.5)}, current_epoch=0
    )
    m.on_train_epoch_end()
    m.on_train_epoch_end()
    assert opt.param_groups[0]["lr"] == 0.5


def test_reward_mean_is_nan_when_no_sample_was_verified(tmp_path):
    # it read 0.0, as if every sample were wrong, when the verifier could score none of them
    records = _records(2)
    m = _module(tmp_path, token_selection="all")
    m.scorer = _DirectScorer(lambda completion, reference: float("nan"))
    for rec in records:
        m.teacher_cache.put(m.teacher_key(rec), 1.0, "The answer is 1.", 4)
    torch.manual_seed(0)
    metrics = m._rollout_metrics([m.collect(records)])
    assert metrics["train/unverified_frac"] == 1.0
    assert math.isnan(metrics["train/reward_mean"])
