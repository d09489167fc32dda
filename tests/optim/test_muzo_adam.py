"""MUZOAdam on its own: estimator quality, MeZO equivalence, restoration, moments, checkpoints, bad input."""

from __future__ import annotations

import io
import math
import warnings

import pytest
import torch

from lightning_agents.errors import LightningAgentsError
from lightning_agents.optim import MUZOAdam, MUZOConfigError, NonFiniteLossWarning, full_direction


def _regression(dtype=torch.float32, seed=0, d_in=12, d_out=3, n=32):
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(d_in, 8), torch.nn.Tanh(), torch.nn.Linear(8, d_out)).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=dtype) * 0.5)
    x = torch.randn(n, d_in, generator=gen, dtype=dtype)
    y = torch.randn(n, d_out, generator=gen, dtype=dtype)
    return model, lambda: torch.nn.functional.mse_loss(model(x), y)


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def _true_grad(model, loss_fn) -> torch.Tensor:
    model.zero_grad()
    with torch.enable_grad():
        loss_fn().backward()
    g = torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return g


def _estimate(model, loss_fn, q, seed, direction="gaussian", eps=1e-4):
    """grad_hat of one step, read off an SGD step with lr=1 (theta_0 - theta_1) and then undone."""
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=1.0, eps=eps, num_queries=q, mode="sgd", seed=seed, direction=direction)
    opt.step(loss_fn)
    estimate = before - _flat(model)
    torch.nn.utils.vector_to_parameters(before, model.parameters())
    return estimate


# ---------------------------------------------------------------------------------------------- bad input
def test_construction_errors_are_clear():
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="num_queries must be an integer >= 1"):
        MUZOAdam(model.parameters(), num_queries=0)
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        MUZOAdam(model.parameters(), eps=0.0)
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        MUZOAdam(model.parameters(), eps=-1e-3)
    with pytest.raises(ValueError, match="moment_dtype must be one of"):
        MUZOAdam(model.parameters(), moment_dtype="float16")
    with pytest.raises(ValueError, match="mode must be one of"):
        MUZOAdam(model.parameters(), mode="lion")
    with pytest.raises(ValueError, match="no parameters"):
        MUZOAdam([])
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        MUZOAdam(model.parameters())


def test_step_without_closure_or_loss_fails_clearly():
    model, _ = _regression()
    opt = MUZOAdam(model.parameters(), seed=0)
    with pytest.raises(RuntimeError, match="needs a closure"):
        opt.step()
    with pytest.raises(RuntimeError, match="returned None"):
        opt.step(lambda: None)


# ---------------------------------------------------------------------------------------------- mechanics
def test_closure_runs_2q_times_without_grad_and_sees_perturbed_weights():
    model, loss_fn = _regression()
    opt = MUZOAdam(model.parameters(), lr=0.0, num_queries=3, seed=1)
    seen = []

    def closure():
        seen.append((torch.is_grad_enabled(), _flat(model)))
        return loss_fn()

    before = _flat(model)
    opt.step(closure)
    assert len(seen) == 6 and not any(grad for grad, _ in seen)
    for j in range(3):
        plus, minus = seen[2 * j][1], seen[2 * j + 1][1]
        # theta + eps z and theta - eps z are symmetric around theta.
        torch.testing.assert_close((plus + minus) / 2, before, atol=1e-6, rtol=0)
        assert (plus - before).abs().max() > 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_parameters_restored_after_perturbation_cycle(dtype):
    model, loss_fn = _regression(dtype=dtype)
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=0.0, eps=1e-3, num_queries=4, seed=3)
    for _ in range(3):
        opt.step(loss_fn)
    after = _flat(model)
    # +eps z, -2 eps z, +eps z is exact up to the rounding of three in-place additions.
    ulp = torch.finfo(dtype).eps * before.abs().float().clamp_min(1e-3)
    assert ((after.float() - before.float()).abs() <= 3 * 3 * ulp + 1e-30).all()
    if dtype == torch.float64:
        torch.testing.assert_close(after, before, rtol=1e-14, atol=1e-15)


def test_closure_error_leaves_parameters_restored():
    model, loss_fn = _regression()
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=2, seed=0)
    calls = {"n": 0}

    def failing():
        calls["n"] += 1
        if calls["n"] == 4:  # inside the second query, at theta - eps z_2
            raise KeyboardInterrupt
        return loss_fn()

    with pytest.raises(KeyboardInterrupt):
        opt.step(failing)
    torch.testing.assert_close(_flat(model), before, atol=1e-6, rtol=0)
    assert opt.num_updates == 0


def test_frozen_parameters_are_never_touched():
    model, loss_fn = _regression()
    model[0].weight.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=2, seed=0)
    seen = []
    opt.step(lambda: (seen.append(model[0].weight.detach().clone()), loss_fn())[1])
    assert all(torch.equal(s, frozen) for s in seen) and torch.equal(model[0].weight, frozen)
    assert not torch.equal(_flat(model[2]), _flat(_regression()[0][2]))


# ---------------------------------------------------------------------------------------------- MeZO equivalence
class _LayerNormNet(torch.nn.Module):
    """Linear -> LayerNorm -> Tanh -> Linear, with OPT-style names (``layer_norm``, ``bias``)."""

    def __init__(self, dtype=torch.float64, seed=0):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 8)
        self.layer_norm = torch.nn.LayerNorm(8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.to(dtype)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=dtype) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
        self.x = torch.randn(32, 12, generator=gen, dtype=dtype)
        self.y = torch.randn(32, 3, generator=gen, dtype=dtype)

    def forward(self, x):
        return self.fc2(torch.tanh(self.layer_norm(self.fc1(x))))

    def loss(self):
        return torch.nn.functional.mse_loss(self(self.x), self.y)


def _mezo_step(model, seed, lr, eps, wd, chunk_size):
    """One MeZO-SGD step transcribed from Malladi et al. 2023 (Algorithm 1 and its trainer's zo_update).

    MeZO perturbs every parameter by eps * z, evaluates, moves to -eps z, evaluates, restores, and
    updates with ``param - lr * (projected_grad * z + weight_decay * param)``, except for parameters
    whose name contains "bias", "layer_norm" or "layernorm", which get no weight decay. Only z comes
    from MUZOAdam's generator (the directions must be the same to compare the steps).
    """
    named = list(model.named_parameters())
    zs = {name: full_direction(p, seed, i, chunk_size).to(p.dtype) for i, (name, p) in enumerate(named)}
    with torch.no_grad():
        for name, p in named:
            p.data = p.data + eps * zs[name]
        loss_plus = model.loss().item()
        for name, p in named:
            p.data = p.data - 2 * eps * zs[name]
        loss_minus = model.loss().item()
        for name, p in named:
            p.data = p.data + eps * zs[name]
        projected_grad = (loss_plus - loss_minus) / (2 * eps)
        for name, p in named:
            if "bias" not in name and "layer_norm" not in name and "layernorm" not in name:
                p.data = p.data - lr * (projected_grad * zs[name] + wd * p.data)
            else:
                p.data = p.data - lr * (projected_grad * zs[name])


def test_sgd_q1_equals_mezo_sgd_reference_with_its_weight_decay_exemptions():
    lr, eps, wd = 1e-2, 1e-3, 0.1
    # float64 so that the comparison is not dominated by float32 rounding of L+ - L- (amplified by 1/eps).
    model, ref = _LayerNormNet(), _LayerNormNet()
    opt = MUZOAdam(model.parameters(), lr=lr, eps=eps, num_queries=1, mode="sgd", weight_decay=wd, seed=7)
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    for _ in range(5):
        opt.step(model.loss)
        (seed,) = opt.last_seeds
        _mezo_step(ref, seed, lr, eps, wd, opt.chunk_size)
        torch.testing.assert_close(_flat(model), _flat(ref), rtol=0, atol=1e-12)
    assert opt.num_updates == 5
    # The comparison is sensitive to the exemptions: decaying every tensor moves the biases and
    # LayerNorm weights by about lr * wd * |theta| per step, far beyond 1e-12.
    assert all(not torch.equal(start[n], p) for n, p in model.named_parameters())


def test_weight_decay_exempt_none_decays_every_tensor():
    lr, wd = 1e-2, 0.5
    model = _LayerNormNet()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = MUZOAdam(
        model.parameters(), lr=lr, num_queries=1, mode="sgd", weight_decay=wd, seed=0, weight_decay_exempt="none"
    )
    opt.step(lambda: torch.zeros((), dtype=torch.float64))  # a constant loss: only decay moves weights
    for name, p in model.named_parameters():
        torch.testing.assert_close(p, before[name] * (1 - lr * wd))
    model = _LayerNormNet()
    opt = MUZOAdam(model.parameters(), lr=lr, num_queries=1, mode="sgd", weight_decay=wd, seed=0)
    opt.step(lambda: torch.zeros((), dtype=torch.float64))
    for name, p in model.named_parameters():
        expected = before[name] if p.dim() < 2 else before[name] * (1 - lr * wd)
        torch.testing.assert_close(p, expected)


@pytest.mark.parametrize("moment_dtype", ["float32", "bfloat16"])
def test_adam_update_matches_reference_adamw(moment_dtype):
    lr, eps, wd, q = 1e-2, 1e-3, 0.05, 3
    b1, b2, aeps = 0.9, 0.99, 1e-8
    model, loss_fn = _regression(dtype=torch.float64)
    opt = MUZOAdam(
        model.parameters(),
        lr=lr,
        eps=eps,
        num_queries=q,
        betas=(b1, b2),
        adam_eps=aeps,
        weight_decay=wd,
        moment_dtype=moment_dtype,
        seed=11,
    )
    theta = [p.detach().clone() for p in model.parameters()]
    m = [torch.zeros_like(t) for t in theta]
    v = [torch.zeros_like(t) for t in theta]
    for t in range(1, 4):
        opt.step(loss_fn)
        losses = opt.last_losses.view(-1, 2)
        g = ((losses[:, 0] - losses[:, 1]) / (2 * eps)).tolist()
        for i, p in enumerate(model.parameters()):
            grad = (
                sum(g[j] * full_direction(p, s, i, opt.chunk_size).to(p.dtype) for j, s in enumerate(opt.last_seeds))
                / q
            )
            m[i] = b1 * m[i] + (1 - b1) * grad
            v[i] = b2 * v[i] + (1 - b2) * grad * grad
            if p.dim() >= 2:  # biases are exempt from decay by default, as in MeZO
                theta[i] = theta[i] * (1 - lr * wd)
            theta[i] = theta[i] - lr * (m[i] / (1 - b1**t)) / ((v[i] / (1 - b2**t)).sqrt() + aeps)
        # The moments are stored in float32 (resp. bfloat16) although the weights are float64.
        tol = dict(rtol=1e-6, atol=1e-8) if moment_dtype == "float32" else dict(rtol=0, atol=2e-3)
        torch.testing.assert_close(_flat(model), torch.cat([x.reshape(-1) for x in theta]), **tol)


# ---------------------------------------------------------------------------------------------- estimator quality
def test_cosine_to_true_gradient_grows_with_queries():
    model, loss_fn = _regression(dtype=torch.float64)
    true = _true_grad(model, loss_fn)
    mean_cos = {}
    for q in (1, 4, 16):
        cos = [
            torch.nn.functional.cosine_similarity(_estimate(model, loss_fn, q, seed), true, dim=0).item()
            for seed in range(12)
        ]
        mean_cos[q] = sum(cos) / len(cos)
    d = true.numel()
    assert mean_cos[1] < mean_cos[4] < mean_cos[16]
    # For Gaussian z the expected cosine is about sqrt(q / (q + d + 1)).
    assert mean_cos[16] == pytest.approx(math.sqrt(16 / (16 + d + 1)), rel=0.35)


@pytest.mark.parametrize("direction", ["gaussian", "rademacher"])
def test_estimator_is_unbiased_on_a_quadratic(direction):
    gen = torch.Generator().manual_seed(0)
    d = 10
    a = torch.randn(d, d, generator=gen, dtype=torch.float64)
    a = a @ a.T / d + torch.eye(d, dtype=torch.float64)
    b = torch.randn(d, generator=gen, dtype=torch.float64)
    theta = torch.nn.Parameter(torch.randn(d, generator=gen, dtype=torch.float64))
    loss_fn = lambda: 0.5 * theta @ a @ theta + b @ theta  # noqa: E731
    true = (a @ theta + b).detach()
    theta0 = theta.detach().clone()
    opt = MUZOAdam([theta], lr=1.0, eps=1e-2, num_queries=1, mode="sgd", seed=0, direction=direction)
    n = 3000
    total = torch.zeros(d, dtype=torch.float64)
    for _ in range(n):
        opt.step(loss_fn)
        total += theta0 - theta.detach()
        theta.data.copy_(theta0)
    mean = total / n
    # Central differences are exact on a quadratic, so E[g z z] = grad; the noise is ~sqrt(d / n).
    assert (mean - true).norm() / true.norm() < 4 * math.sqrt((d + 2) / n)


def test_training_reduces_loss_sgd_and_adam():
    for mode, lr in (("sgd", 2e-2), ("adam", 3e-3)):
        model, loss_fn = _regression()
        start = loss_fn().item()
        opt = MUZOAdam(model.parameters(), lr=lr, num_queries=4, mode=mode, seed=0)
        for _ in range(150):
            opt.step(loss_fn)
        assert loss_fn().item() < 0.8 * start, mode


# ---------------------------------------------------------------------------------------------- moments
def test_int8_moments_use_bitsandbytes_8bit_optimizer_layout_and_track_float32():
    import bitsandbytes.functional as bnb_f

    runs = {}
    for moment_dtype in ("float32", "int8"):
        model, loss_fn = _regression(d_in=1000, d_out=4)  # an 8000-entry matrix and small tensors
        opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=2, moment_dtype=moment_dtype, seed=5)
        for _ in range(5):
            opt.step(loss_fn)
        runs[moment_dtype] = (_flat(model), opt, model)
    _, opt8, model8 = runs["int8"]
    _, opt32, model32 = runs["float32"]
    big = opt8.state[model8[0].weight]
    # bitsandbytes' 8-bit Adam: uint8 codes, one float32 absmax per 256 entries, its signed dynamic
    # map for m and unsigned map for v; tensors under 4096 entries keep float32 moments.
    assert big["exp_avg_q"].dtype == torch.uint8 and big["exp_avg_sq_q"].dtype == torch.uint8
    assert big["exp_avg_absmax"].shape == (math.ceil(8000 / 256),)
    for name, signed in (("exp_avg", True), ("exp_avg_sq", False)):
        decoded = bnb_f.dequantize_blockwise(
            big[name + "_q"], absmax=big[name + "_absmax"], code=bnb_f.create_dynamic_map(signed=signed), blocksize=256
        )
        reference = opt32.state[model32[0].weight][name]
        assert torch.nn.functional.cosine_similarity(decoded, reference, dim=0) > 0.99
    for small in (model8[0].bias, model8[2].weight, model8[2].bias):
        assert opt8.state[small]["exp_avg"].dtype == torch.float32 and "exp_avg_q" not in opt8.state[small]
    assert opt8.moment_nbytes() < 0.35 * opt32.moment_nbytes()
    start = _flat(_regression(d_in=1000, d_out=4)[0])
    moved_fp32, moved_int8 = runs["float32"][0] - start, runs["int8"][0] - start
    assert torch.nn.functional.cosine_similarity(moved_fp32, moved_int8, dim=0) > 0.95


def test_int8_unsupported_platform_fails_at_construction(monkeypatch):
    import bitsandbytes.functional as bnb_f

    def broken(*args, **kwargs):
        raise NotImplementedError("no kernel for this device")

    monkeypatch.setattr(bnb_f, "quantize_blockwise", broken)
    with pytest.raises(RuntimeError, match="moment_dtype='int8' is not supported on cpu"):
        MUZOAdam(torch.nn.Linear(4, 4).parameters(), moment_dtype="int8")


# ---------------------------------------------------------------------------------------------- non-finite losses
def test_non_finite_loss_skips_update_and_restores_parameters():
    model, loss_fn = _regression()
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=2, seed=0)
    opt.step(loss_fn)
    before = _flat(model)
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        return torch.tensor(float("nan")) if calls["n"] == 2 else loss_fn()

    moments = {k: v.clone() for k, v in opt.state[model[0].weight].items()}
    with pytest.warns(NonFiniteLossWarning, match="update skipped"):
        opt.step(flaky)
    torch.testing.assert_close(_flat(model), before, atol=1e-6, rtol=0)
    assert opt.num_skipped == 1 and opt.num_updates == 1
    assert all(torch.equal(opt.state[model[0].weight][k], v) for k, v in moments.items())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step(loss_fn)  # training continues normally
    assert opt.num_updates == 2


# ---------------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize(
    ("mode", "moment_dtype"), [("adam", "float32"), ("adam", "bfloat16"), ("adam", "int8"), ("sgd", "float32")]
)
def test_resume_from_state_dict_is_bit_identical(mode, moment_dtype):
    kwargs = dict(lr=1e-2, num_queries=2, mode=mode, moment_dtype=moment_dtype)
    model, loss_fn = _regression(d_in=600)  # a 4800-entry matrix: int8 moments (>= 4096 entries)
    opt = MUZOAdam(model.parameters(), seed=42, **kwargs)
    for _ in range(6):
        opt.step(loss_fn)
    straight = _flat(model)

    model, loss_fn = _regression(d_in=600)
    opt = MUZOAdam(model.parameters(), seed=42, **kwargs)
    for _ in range(3):
        opt.step(loss_fn)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    model, loss_fn = _regression(seed=0, d_in=600)
    model.load_state_dict(saved["model"])
    opt = MUZOAdam(model.parameters(), seed=999, **kwargs)  # a different seed: the checkpoint wins
    opt.load_state_dict(saved["opt"])
    if mode == "adam":
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.uint8}[moment_dtype]
        key = "exp_avg_q" if moment_dtype == "int8" else "exp_avg"
        assert opt.state[model[0].weight][key].dtype == dtype
    for _ in range(3):
        opt.step(loss_fn)
    assert torch.equal(_flat(model), straight)


def test_load_state_dict_rejects_an_incompatible_checkpoint():
    model, loss_fn = _regression()
    opt = MUZOAdam(model.parameters(), seed=0)
    opt.step(loss_fn)
    other = MUZOAdam(model.parameters(), seed=0, direction="rademacher")
    with pytest.raises(ValueError, match="direction"):
        other.load_state_dict(opt.state_dict())
    with pytest.raises(ValueError, match="not a MUZOAdam state dict"):
        other.load_state_dict(torch.optim.SGD(model.parameters(), lr=0.1).state_dict())


def test_loss_reducer_sees_the_2q_losses_and_drives_the_update():
    model, loss_fn = _regression()
    seen = []

    def reducer(losses):
        seen.append(losses.clone())
        return torch.zeros_like(losses)  # as if every rank saw equal losses: zero estimate

    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=3, mode="sgd", seed=0)
    opt.set_loss_reducer(reducer)
    before = _flat(model)
    opt.step(loss_fn)
    assert seen[0].shape == (6,) and seen[0].dtype == torch.float64
    torch.testing.assert_close(_flat(model), before, atol=1e-6, rtol=0)


def test_failing_loss_reducer_leaves_parameters_restored():
    model, loss_fn = _regression()
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=2, seed=0)

    def broken(losses):
        raise RuntimeError("collective timed out")

    opt.set_loss_reducer(broken)
    with pytest.raises(RuntimeError, match="collective timed out"):
        opt.step(loss_fn)
    torch.testing.assert_close(_flat(model), before, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------- 16-bit weights
def test_bf16_weights_do_not_drift_at_lr_zero_with_master_weights():
    model, loss_fn = _regression(dtype=torch.bfloat16)
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=0.0, eps=1e-3, num_queries=4, seed=3)
    for _ in range(300):
        opt.step(loss_fn)
    # Every perturbation is written from the float32 master and the restore copies the master back:
    # 2400 evaluations later the bf16 weights are bit for bit where they started.
    assert torch.equal(_flat(model), before)
    assert opt.master_nbytes() == 4 * before.numel()


def test_bf16_update_at_a_small_learning_rate_moves_the_weights():
    # lr 1e-4 is below half a bf16 ulp of most weights (~0.5 * 2^-8 * |w|): in-place bf16 updates
    # would round every step away; the master accumulates them until the bf16 weights move.
    model, loss_fn = _regression(dtype=torch.bfloat16)
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=1e-4, num_queries=2, seed=3)
    for _ in range(100):
        opt.step(loss_fn)
    masters = torch.cat([opt.state[p]["master"] for p in model.parameters()])
    moved = (masters - before.float()).abs()
    # 100 Adam steps of about lr each with noisy signs: a random walk of ~lr * sqrt(100).
    assert moved.median() > 3e-4
    assert (_flat(model) != before).float().mean() > 0.1  # where the master crossed a bf16 rounding boundary
    torch.testing.assert_close(_flat(model), masters.to(torch.bfloat16), rtol=0, atol=0)


def test_bf16_plain_perturbation_is_refused_with_the_reason():
    model, _ = _regression(dtype=torch.bfloat16)
    with pytest.raises(MUZOConfigError, match="random-walk") as info:
        MUZOAdam(model.parameters(), master_weights=False)
    assert isinstance(info.value, LightningAgentsError) and isinstance(info.value, ValueError)
    assert "bf16-mixed" in str(info.value)


def test_bf16_master_weights_checkpoint_resume_is_bit_identical():
    kwargs = dict(lr=1e-3, num_queries=2, moment_dtype="bfloat16")
    model, loss_fn = _regression(dtype=torch.bfloat16)
    opt = MUZOAdam(model.parameters(), seed=1, **kwargs)
    for _ in range(4):
        opt.step(loss_fn)
    straight = _flat(model)
    model, loss_fn = _regression(dtype=torch.bfloat16)
    opt = MUZOAdam(model.parameters(), seed=1, **kwargs)
    for _ in range(2):
        opt.step(loss_fn)
    saved = {"model": model.state_dict(), "opt": opt.state_dict()}
    model, loss_fn = _regression(dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # everything must come from the checkpoint
    model.load_state_dict(saved["model"])
    opt = MUZOAdam(model.parameters(), seed=0, **kwargs)
    opt.load_state_dict(saved["opt"])
    assert opt.state[model[0].weight]["master"].dtype == torch.float32
    for _ in range(2):
        opt.step(loss_fn)
    assert torch.equal(_flat(model), straight)


# ---------------------------------------------------------------------------------------------- bf16 moments
def _second_moment_after_burst(moment_dtype: str, steps: int = 3000, n: int = 4096) -> list[float]:
    """Mean of Adam's v over steps after a 10x gradient burst (lr 0: the same z and g in every run)."""
    theta = torch.nn.Parameter(torch.zeros(n))
    w = torch.randn(n, generator=torch.Generator().manual_seed(0)) / math.sqrt(n)
    scale = {"value": 1.0}
    opt = MUZOAdam([theta], lr=0.0, num_queries=1, moment_dtype=moment_dtype, seed=0, chunk_size=1024)
    trace = []
    for step in range(steps + 100):
        scale["value"] = 10.0 if 50 <= step < 100 else 1.0
        opt.step(lambda: scale["value"] * (w @ theta))
        if step >= 100 and (step - 100) % 250 == 249:
            v = opt.state[theta]["exp_avg_sq"].float()
            trace.append(float(v.mean()))
    return trace


def test_bf16_moment_store_tracks_float32_after_a_gradient_burst():
    from lightning_agents.optim.moments import MomentStore

    # Adam's moment recursions through the stores alone (the optimizer's test below is slow).
    n, gen = 4096, torch.Generator().manual_seed(0)
    stores = {d: (MomentStore(d, signed=True), MomentStore(d, signed=False), {}) for d in ("float32", "bfloat16")}
    for m_store, v_store, state in stores.values():
        m_store.init(state, "m", n, torch.device("cpu"))
        v_store.init(state, "v", n, torch.device("cpu"))
    rounding = torch.Generator().manual_seed(1)
    means = {d: [] for d in stores}
    for step in range(3100):
        g = torch.randn(n, generator=gen) * (10.0 if 50 <= step < 100 else 1.0)
        for d, (m_store, v_store, state) in stores.items():
            m = m_store.read(state, "m", 0, n).mul_(0.9).add_(g, alpha=0.1)
            v = v_store.read(state, "v", 0, n).mul_(0.999).addcmul_(g, g, value=0.001)
            m_store.write(state, "m", 0, n, m, rounding)
            v_store.write(state, "v", 0, n, v, rounding)
            if step >= 100 and step % 250 == 99:
                means[d].append(float(state["v"].float().mean()))
    assert means["float32"][-1] < 0.3 * means["float32"][0]
    for a, b in zip(means["float32"], means["bfloat16"]):
        assert abs(b - a) <= 0.1 * a, means


@pytest.mark.slow
def test_bf16_moments_track_float32_after_a_gradient_burst():
    fp32, bf16 = _second_moment_after_burst("float32"), _second_moment_after_burst("bfloat16")
    assert fp32[-1] < 0.3 * fp32[0], "v must decay after the burst in float32"
    # Stochastic rounding keeps bf16's v unbiased: it decays with float32's, within 10% all along.
    # (Round-to-nearest freezes it: 0.999 v rounds back to v, so v stays near its burst value.)
    for a, b in zip(fp32, bf16):
        assert abs(b - a) <= 0.1 * a, (fp32, bf16)


def test_stochastic_rounding_is_unbiased_and_lands_on_neighbours():
    from lightning_agents.optim.moments import round_to_bf16_stochastic

    x = torch.full((200_000,), 1.0 + 2**-10)  # a quarter of the way from 1 to the next bf16 (1 + 2^-7)... 1/8
    out = torch.empty_like(x, dtype=torch.bfloat16)
    round_to_bf16_stochastic(x, out, torch.Generator().manual_seed(0))
    values = set(out.float().unique().tolist())
    assert values == {1.0, 1.0 + 2**-7}
    assert abs(float(out.float().mean()) - (1.0 + 2**-10)) < 2e-5
    neg = torch.tensor([-3.3, float("inf"), float("nan")])
    out = torch.empty(3, dtype=torch.bfloat16)
    round_to_bf16_stochastic(neg, out, torch.Generator().manual_seed(0))
    assert out[0] in (
        torch.tensor(-3.3).bfloat16(),
        torch.tensor(-3.3).bfloat16().nextafter(torch.tensor(-4.0).bfloat16()),
        torch.tensor(-3.3).bfloat16().nextafter(torch.tensor(0.0).bfloat16()),
    )
    assert out[1] == float("inf") and torch.isnan(out[2])


# ---------------------------------------------------------------------------------------------- hooks, shards, chunks
def test_before_update_sees_unperturbed_weights_and_runs_once():
    model, loss_fn = _regression()
    before = _flat(model)
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=3, seed=0)
    seen = []
    opt.step(loss_fn, before_update=lambda: seen.append(_flat(model)))
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], before, atol=1e-6, rtol=0)
    assert not torch.allclose(_flat(model), before)


def test_query_shards_in_two_threads_equal_the_single_process_step():
    import threading

    q, steps = 4, 3
    single, single_loss = _regression(dtype=torch.float64)
    opt = MUZOAdam(single.parameters(), lr=1e-2, num_queries=q, seed=9)
    for _ in range(steps):
        opt.step(single_loss)

    barrier, slots, evaluations = threading.Barrier(2), [None, None], [0, 0]
    results = [None, None]

    def sum_over_shards(rank):
        def reduce(losses):
            slots[rank] = losses
            barrier.wait()
            total = slots[0] + slots[1]
            barrier.wait()
            return total

        return reduce

    def worker(rank):
        model, loss_fn = _regression(dtype=torch.float64)
        shard = MUZOAdam(model.parameters(), lr=1e-2, num_queries=q, seed=9)
        shard.set_query_shard(rank, 2)
        shard.set_loss_reducer(sum_over_shards(rank))
        assert shard.evaluations_per_step == q

        def counted():
            evaluations[rank] += 1
            return loss_fn()

        for _ in range(steps):
            shard.step(counted)
        results[rank] = _flat(model)

    threads = [threading.Thread(target=worker, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert evaluations == [q * steps, q * steps]  # each rank evaluates half of the 2q per step
    # Each rank perturbs only its own queries, so the ranks' perturb/restore roundings differ at
    # the last bit (here float64): equal to the single-process update to rounding.
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-14)
    torch.testing.assert_close(results[0], _flat(single), rtol=0, atol=1e-13)
    assert not torch.equal(results[0], _flat(_regression(dtype=torch.float64)[0]))


def test_chunk_size_defaults_per_device_and_resumes_from_the_checkpoint():
    model, loss_fn = _regression()
    opt = MUZOAdam(model.parameters(), seed=0)
    assert opt.chunk_size == 1 << 16
    other = MUZOAdam(model.parameters(), seed=0, chunk_size=512)
    other.step(loss_fn)
    fresh = MUZOAdam(model.parameters(), seed=0)
    fresh.load_state_dict(other.state_dict())
    assert fresh.chunk_size == 512
    explicit = MUZOAdam(model.parameters(), seed=0, chunk_size=1024)
    with pytest.raises(MUZOConfigError, match="chunk_size"):
        explicit.load_state_dict(other.state_dict())
    with pytest.raises(MUZOConfigError, match="multiple of 256"):
        MUZOAdam(model.parameters(), chunk_size=1000)


def test_chunked_update_equals_a_single_chunk_update():
    # Chunk boundaries must not change the math: same z (drawn in one piece vs in 256-entry pieces).
    model_a, loss_a = _regression(dtype=torch.float64, d_in=100)
    model_b, loss_b = _regression(dtype=torch.float64, d_in=100)
    opt_a = MUZOAdam(model_a.parameters(), lr=1e-2, num_queries=2, seed=4, chunk_size=256)
    opt_b = MUZOAdam(model_b.parameters(), lr=1e-2, num_queries=2, seed=4, chunk_size=1 << 16)
    for _ in range(3):
        opt_a.step(loss_a)
        opt_b.step(loss_b)
    # Gaussian draws of consecutive chunks equal one draw of the whole, so the updates agree.
    torch.testing.assert_close(_flat(model_a), _flat(model_b), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------ fused update path
def _wide(dtype=torch.float32, width=300, seed=0):
    """Two linear layers whose weights span many 256-entry chunks (and exceed int8's 4096 minimum)."""
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen).to(dtype) * 0.3)
    x = torch.randn(24, width, generator=gen).to(dtype)
    y = torch.randn(24, 3, generator=gen).to(dtype)
    return model, lambda: torch.nn.functional.mse_loss(model(x).float(), y.float())


@pytest.mark.parametrize(
    "mode, moment_dtype, dtype, direction",
    [
        ("adam", "float32", torch.float32, "gaussian"),
        ("adam", "int8", torch.float32, "gaussian"),
        ("sgd", "float32", torch.float32, "rademacher"),
        ("adam", "float32", torch.bfloat16, "gaussian"),  # master weights
    ],
)
def test_fused_update_equals_chunked_update(mode, moment_dtype, dtype, direction):
    # The fused path (whole tensors, the accelerator default) forced on the CPU must give the
    # chunked path's update: torch's CPU generators continue a stream identically in pieces.
    results = []
    for path in ("chunked", "fused"):
        model, loss_fn = _wide(dtype)
        opt = MUZOAdam(
            model.parameters(),
            lr=1e-2,
            num_queries=3,
            mode=mode,
            moment_dtype=moment_dtype,
            direction=direction,
            weight_decay=0.1,
            seed=7,
            chunk_size=256,
            update_path=path,
        )
        assert opt.update_path == path
        for _ in range(4):
            opt.step(loss_fn)
        results.append(_flat(model).float())
    start = _flat(_wide(dtype)[0]).float()
    assert not torch.equal(results[0], start)
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=1e-6)


def _op_counts(model, loss_fn, **kwargs) -> int:
    """aten operations dispatched by one MUZOAdam step outside the closure (the kernel launches a GPU would see)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.active, self.n = True, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.active:
                self.n += 1
            return func(*args, **(kwargs or {}))

    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=2, seed=0, chunk_size=256, **kwargs)
    opt.step(loss_fn)  # first step allocates moments and buffers

    def closure():
        counter.active = False
        try:
            return loss_fn()
        finally:
            counter.active = True

    with Count() as counter:
        opt.step(closure)
    return counter.n


def test_fused_path_launches_grow_with_tensors_not_chunks():
    narrow, wide = _wide(width=64), _wide(width=1024)  # 4 tensors each; 4 vs 64 chunks in the big weight
    chunked = [_op_counts(*m, update_path="chunked") for m in (narrow, wide)]
    fused = [_op_counts(*m, update_path="fused") for m in (narrow, wide)]
    assert fused[0] == fused[1]  # O(tensors): the same 4 tensors, whatever their size
    assert chunked[1] > 5 * chunked[0]  # O(chunks)
    assert fused[1] * 10 < chunked[1]


def test_update_path_defaults_per_device_and_resumes_from_the_checkpoint():
    from lightning_agents.optim.muzo_adam import default_update_path

    assert default_update_path("cpu") == "chunked"
    assert default_update_path("cuda") == "fused"
    assert default_update_path(torch.device("cuda", 1)) == "fused"
    model, loss_fn = _regression()
    assert MUZOAdam(model.parameters(), seed=0).update_path == "chunked"
    fused = MUZOAdam(model.parameters(), seed=0, update_path="fused")
    fused.step(loss_fn)
    fresh = MUZOAdam(model.parameters(), seed=0)
    fresh.load_state_dict(fused.state_dict())
    assert fresh.update_path == "fused"  # on CUDA the directions depend on it
    with pytest.raises(MUZOConfigError, match="update_path"):
        MUZOAdam(model.parameters(), seed=0, update_path="chunked").load_state_dict(fused.state_dict())
    old = fused.state_dict()
    del old["muzo"]["update_path"]  # a checkpoint from before the fused path was chunked
    fresh = MUZOAdam(model.parameters(), seed=0)
    fresh.load_state_dict(old)
    assert fresh.update_path == "chunked"
    with pytest.raises(MUZOConfigError, match="update_path"):
        MUZOAdam(model.parameters(), update_path="compiled")


def test_a_step_inside_an_outer_autocast_sees_each_perturbation():
    # autocast keeps its bf16 copy of each weight that requires grad until the outermost region
    # exits, even under no_grad: every evaluation after the first used the unperturbed copies.
    def projected(outer: bool) -> list[float]:
        model, _ = _regression(seed=3, d_in=16, d_out=4)
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))

        def closure():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model(x).float().pow(2).mean()

        opt = MUZOAdam(model.parameters(), lr=1e-3, eps=1e-2, num_queries=2, seed=0)
        if outer:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                opt.step(closure)
        else:
            opt.step(closure)
        return opt.last_projected_grads.tolist()

    assert projected(outer=True) == projected(outer=False)


def test_query_parallelism_needs_a_direction_per_process():
    model, _ = _regression()
    opt = MUZOAdam(model.parameters(), num_queries=1)
    with pytest.raises(MUZOConfigError, match="num_queries=1 across 2 processes"):
        opt.set_query_shard(1, 2)
    MUZOAdam(model.parameters(), num_queries=2).set_query_shard(1, 2)
