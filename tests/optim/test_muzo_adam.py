"""MUZOAdam on its own: estimator quality, MeZO equivalence, restoration, moments, checkpoints, bad input."""

from __future__ import annotations

import io
import math
import warnings

import pytest
import torch

from lightning_agents.optim import MUZOAdam, NonFiniteLossWarning, full_direction


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
def test_sgd_q1_equals_mezo_sgd_reference():
    lr, eps, wd = 1e-2, 1e-3, 0.1
    # float64 so that the comparison is not dominated by float32 rounding of L+ - L- (amplified by 1/eps).
    model, loss_fn = _regression(dtype=torch.float64)
    ref_model, ref_loss = _regression(dtype=torch.float64)
    opt = MUZOAdam(model.parameters(), lr=lr, eps=eps, num_queries=1, mode="sgd", weight_decay=wd, seed=7)
    for _ in range(4):
        opt.step(loss_fn)
        (seed,) = opt.last_seeds
        # The MeZO-SGD step (Malladi et al. 2023, Algorithm 1), written out on whole tensors.
        params = list(ref_model.parameters())
        zs = [full_direction(p, seed, i, opt.chunk_size).to(p.dtype) for i, p in enumerate(params)]
        with torch.no_grad():
            for p, z in zip(params, zs):
                p.data = p.data + eps * z
            loss_plus = ref_loss().item()
            for p, z in zip(params, zs):
                p.data = p.data - 2 * eps * z
            loss_minus = ref_loss().item()
            for p, z in zip(params, zs):
                p.data = p.data + eps * z
            projected_grad = (loss_plus - loss_minus) / (2 * eps)
            for p, z in zip(params, zs):
                p.data = p.data - lr * (projected_grad * z + wd * p.data)
        torch.testing.assert_close(_flat(model), _flat(ref_model), rtol=1e-10, atol=1e-12)
    assert opt.num_updates == 4


@pytest.mark.parametrize("moment_dtype", ["float32", "bfloat16"])
def test_adam_update_matches_reference_adamw(moment_dtype):
    lr, eps, wd, q = 1e-2, 1e-3, 0.05, 3
    b1, b2, aeps = 0.9, 0.99, 1e-8
    model, loss_fn = _regression(dtype=torch.float64)
    opt = MUZOAdam(model.parameters(), lr=lr, eps=eps, num_queries=q, betas=(b1, b2), adam_eps=aeps,
                   weight_decay=wd, moment_dtype=moment_dtype, seed=11)
    theta = [p.detach().clone() for p in model.parameters()]
    m = [torch.zeros_like(t) for t in theta]
    v = [torch.zeros_like(t) for t in theta]
    for t in range(1, 4):
        opt.step(loss_fn)
        losses = opt.last_losses.view(-1, 2)
        g = ((losses[:, 0] - losses[:, 1]) / (2 * eps)).tolist()
        for i, p in enumerate(model.parameters()):
            grad = sum(g[j] * full_direction(p, s, i, opt.chunk_size).to(p.dtype) for j, s in enumerate(opt.last_seeds)) / q
            m[i] = b1 * m[i] + (1 - b1) * grad
            v[i] = b2 * v[i] + (1 - b2) * grad * grad
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
        cos = [torch.nn.functional.cosine_similarity(_estimate(model, loss_fn, q, seed), true, dim=0).item()
               for seed in range(12)]
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
def test_int8_moments_are_uint8_and_track_float32():
    runs = {}
    for moment_dtype in ("float32", "int8"):
        model, loss_fn = _regression(d_in=64, d_out=64)
        opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=2, moment_dtype=moment_dtype, seed=5,
                       chunk_size=4096)
        for _ in range(5):
            opt.step(loss_fn)
        runs[moment_dtype] = (_flat(model), opt)
    state = runs["int8"][1].state[next(iter(runs["int8"][1].param_groups[0]["params"]))]
    assert state["exp_avg_q"].dtype == torch.uint8 and state["exp_avg_sq_q"].dtype == torch.uint8
    assert runs["int8"][1].moment_nbytes() < 0.3 * runs["float32"][1].moment_nbytes()
    moved_fp32 = runs["float32"][0] - _flat(_regression(d_in=64, d_out=64)[0])
    moved_int8 = runs["int8"][0] - _flat(_regression(d_in=64, d_out=64)[0])
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
    model, loss_fn = _regression()
    opt = MUZOAdam(model.parameters(), seed=42, **kwargs)
    for _ in range(6):
        opt.step(loss_fn)
    straight = _flat(model)

    model, loss_fn = _regression()
    opt = MUZOAdam(model.parameters(), seed=42, **kwargs)
    for _ in range(3):
        opt.step(loss_fn)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    model, loss_fn = _regression(seed=0)
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
