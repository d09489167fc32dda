"""MUZOAdam says when its finite differences cannot see the loss change, and names a bad parameter.

From an audit (session 34): a loss returned in bfloat16 (any module under ``bf16-true`` that does
not upcast its output) rounds L+ and L- to 8 significant bits, so most projected gradients were
exactly 0 and the run learned a fraction of what it should, without a word; a trainable set the
loss does not read gave a zero estimate every step, silently.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lightning_agents.optim import FlatLossWarning, LowPrecisionLossWarning, MUZOAdam, MUZOConfigError


def _model(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(dtype)
    x = torch.randn(16, 6, generator=gen).to(dtype)
    y = torch.randn(16, 1, generator=gen).to(dtype)
    return model, x, y


def _steps(opt, closure, n):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(n):
            opt.step(closure)
    return [w for w in caught if issubclass(w.category, (LowPrecisionLossWarning, FlatLossWarning))]


@pytest.mark.parametrize(("dtype", "bits"), [(torch.bfloat16, 8), (torch.float16, 11)])
def test_a_16_bit_loss_is_warned_once_with_the_remedy(dtype, bits):
    model, x, y = _model(dtype)
    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=4, seed=0)
    caught = _steps(opt, lambda: torch.nn.functional.mse_loss(model(x), y), 5)
    low = [w for w in caught if w.category is LowPrecisionLossWarning]
    assert len(low) == 1, "once per optimizer, not once per evaluation"
    message = str(low[0].message)
    assert str(dtype) in message and f"{bits} significant bits" in message and "eps=0.001" in message
    assert ".float()" in message  # says what to do


def test_a_float32_loss_from_16_bit_weights_is_not_warned():
    # The remedy the warning gives: the model runs in bf16, the loss is taken in float32.
    model, x, y = _model(torch.bfloat16)
    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=4, seed=0)
    caught = _steps(opt, lambda: torch.nn.functional.mse_loss(model(x).float(), y.float()), 5)
    assert caught == []
    assert bool(opt.last_projected_grads.all()), "a float32 loss sees every perturbation"


def _zero_projections(upcast: bool) -> int:
    model, x, y = _model(torch.bfloat16, seed=1)
    opt = MUZOAdam(model.parameters(), lr=0.0, num_queries=8, seed=3)

    def loss():
        out = model(x)
        return torch.nn.functional.mse_loss(out.float(), y.float()) if upcast else torch.nn.functional.mse_loss(out, y)

    zeros = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(5):
            opt.step(loss)
            zeros += int((opt.last_projected_grads == 0).sum())
    return zeros


def test_a_bf16_loss_rounds_many_projected_gradients_to_zero():
    # The arithmetic behind the warning, on the same bf16 weights: bf16 loss vs float32 loss.
    assert _zero_projections(upcast=True) == 0
    assert _zero_projections(upcast=False) >= 10  # of 40


def test_a_loss_that_ignores_the_trained_parameters_is_warned_once():
    model, x, y = _model()
    unused = torch.nn.Linear(32, 1)  # e.g. a head configure_optimizers passes but forward never reads
    opt = MUZOAdam(unused.parameters(), lr=1e-2, num_queries=2, seed=0)
    caught = _steps(opt, lambda: torch.nn.functional.mse_loss(model(x), y), 3)
    assert [w.category for w in caught] == [FlatLossWarning]
    message = str(caught[0].message)
    assert "did not change under any of the 2 perturbations" in message and "requires_grad" in message
    assert opt.num_updates == 3 and opt.last_projected_grads.tolist() == [0.0, 0.0]


def test_a_loss_that_moves_is_not_called_flat():
    model, x, y = _model()
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=2, seed=0)
    assert _steps(opt, lambda: torch.nn.functional.mse_loss(model(x), y), 3) == []


def test_a_non_contiguous_parameter_is_refused_at_construction_by_position_and_shape():
    model, _, _ = _model()
    model[0].weight = torch.nn.Parameter(torch.randn(6, 32).t())  # shape (32, 6), column-major
    with pytest.raises(MUZOConfigError, match=r"parameter 0 of group 0 \(shape \(32, 6\), stride \(1, 32\)\)"):
        MUZOAdam(model.parameters(), lr=1e-3)
