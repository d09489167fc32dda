"""MUZOAdam and memory shared with others: tied weights, 16-bit masters; and what a closure may return.

From an audit on SmolLM2-135M-Instruct (session 36, /work/h36/muzo): its tied ``lm_head`` /
``embed_tokens`` weight listed twice (``embed_tokens.parameters() + lm_head.parameters()``) was
perturbed by ``eps (z_a + z_b)`` (std 1.414 eps) and updated twice a step from one moment state
(2.35x Adam's bound on the first step) with only torch's warning; and with bf16 weights a
``model.load_state_dict`` between steps was undone at the next step by the stale float32 master.
A closure returning a transformers ``ModelOutput``, a dict or a tuple failed with ``float()``'s
TypeError, and a complex loss was silently cast to its real part.
"""

from __future__ import annotations

import pytest
import torch

from lightning_agents.optim import MUZOAdam, MUZOConfigError


class _Tied(torch.nn.Module):
    """An embedding whose weight is also the output layer's, as in SmolLM2 or Llama."""

    def __init__(self, dtype=torch.float32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(12, 8).to(dtype)
        self.head = torch.nn.Linear(8, 12, bias=False).to(dtype)
        self.head.weight = self.embed.weight

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(tokens[:, :-1])).float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 12), tokens[:, 1:].reshape(-1))


_TOKENS = torch.randint(0, 12, (4, 6), generator=torch.Generator().manual_seed(1))


def test_a_tied_weight_listed_twice_is_refused():
    model = _Tied()
    listed = list(model.embed.parameters()) + list(model.head.parameters())
    with pytest.raises(MUZOConfigError, match="parameter 0 of group 0 and parameter 1 of group 0 .* same tensor"):
        MUZOAdam(listed, lr=1e-3, num_queries=1, seed=0)


def test_a_tied_weight_listed_once_is_perturbed_by_eps_z():
    model = _Tied()
    start = model.embed.weight.detach().clone()
    seen = []

    def closure():
        if not seen:
            seen.append((model.head.weight.detach() - start) / 1e-2)
        return model.loss(_TOKENS)

    MUZOAdam(model.parameters(), lr=1e-3, eps=1e-2, num_queries=1, seed=0, direction="rademacher").step(closure)
    # Rademacher entries are exactly +-1: a second listing would give 0 or +-2.
    assert torch.allclose(seen[0].abs(), torch.ones_like(start), atol=1e-4)


def test_parameters_sharing_memory_are_refused_but_disjoint_views_are_not():
    flat = torch.zeros(40)
    a = torch.nn.Parameter(flat[:24].view(4, 6))
    overlapping = torch.nn.Parameter(flat[20:40].view(4, 5))
    with pytest.raises(MUZOConfigError, match="share memory"):
        MUZOAdam([a, overlapping], lr=1e-3, num_queries=1, seed=0)
    disjoint = torch.nn.Parameter(flat[24:40].view(4, 4))
    opt = MUZOAdam([a, disjoint], lr=1e-3, num_queries=1, seed=0)
    opt.step(lambda: (a.sum() - 1) ** 2 + (disjoint.sum() + 1) ** 2)
    assert opt.num_updates == 1


def test_a_tensor_appended_to_a_second_group_later_is_refused_at_the_next_step():
    model = _Tied()
    frozen_copy = model.head.weight
    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=1, seed=0)
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))]})
    opt.param_groups[1]["params"].append(frozen_copy)
    with pytest.raises(MUZOConfigError, match="same tensor"):
        opt.step(lambda: model.loss(_TOKENS))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("update_path", ["chunked", "fused"])
def test_weights_loaded_between_steps_are_kept_with_16_bit_masters(dtype, update_path):
    model = _Tied(dtype)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = MUZOAdam(model.parameters(), lr=1e-2, num_queries=2, seed=0, chunk_size=256, update_path=update_path)
    opt.step(lambda: model.loss(_TOKENS))
    assert not torch.equal(model.embed.weight, start["embed.weight"])
    model.load_state_dict(start)
    for group in opt.param_groups:
        group["lr"] = 0.0
    opt.step(lambda: model.loss(_TOKENS))
    # lr 0 with masters is exact: the loaded weights, bit for bit (the stale master put the trained ones back).
    assert torch.equal(model.embed.weight, start["embed.weight"])


def test_masters_keep_their_precision_where_the_weights_were_not_touched():
    model = _Tied(torch.bfloat16)
    opt = MUZOAdam(model.parameters(), lr=1e-4, num_queries=1, seed=0)
    opt.step(lambda: model.loss(_TOKENS))
    master = opt.state[model.embed.weight]["master"].clone()
    with torch.no_grad():
        model.embed.weight[0].fill_(0.5)
    for group in opt.param_groups:
        group["lr"] = 0.0
    opt.step(lambda: model.loss(_TOKENS))
    now = opt.state[model.embed.weight]["master"].view(12, 8)
    assert torch.equal(now[0], torch.full((8,), 0.5))
    assert torch.equal(now[1:], master.view(12, 8)[1:])  # sub-bf16 precision kept


class _Output(dict):
    """What a transformers model returns: a mapping with a ``loss`` entry (like ``ModelOutput``)."""


def test_a_closure_may_return_a_model_output_or_a_dict_with_the_loss():
    updates = []
    for wrap in (lambda loss: loss, lambda loss: _Output(loss=loss, logits=None), lambda loss: {"loss": loss}):
        model = _Tied()
        opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=2, seed=0)
        opt.step(lambda wrap=wrap, model=model: wrap(model.loss(_TOKENS)))
        updates.append(model.embed.weight.detach().clone())
    assert torch.equal(updates[0], updates[1]) and torch.equal(updates[0], updates[2])


@pytest.mark.parametrize(
    ("value", "named"),
    [((torch.tensor(1.0), None), "tuple"), ({"logits": torch.zeros(2)}, "dict"), (torch.tensor(1 + 2j), "complex64")],
)
def test_a_closure_returning_something_else_is_refused_by_type_with_the_weights_restored(value, named):
    model = _Tied()
    start = model.embed.weight.detach().clone()
    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=1, seed=0, direction="rademacher")
    with pytest.raises(RuntimeError, match=f"returned a {named}|real loss, got a torch.{named}"):
        opt.step(lambda: value)
    assert torch.allclose(model.embed.weight, start, atol=1e-6)


def test_a_closure_may_return_a_one_element_numpy_array():
    # `loss.numpy()` trained before the loss type check and was refused by it (review)
    import numpy as np

    model = _Tied()
    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=2, seed=0)
    opt.step(lambda: model.loss(_TOKENS).detach().numpy())
    as_array = model.embed.weight.detach().clone()
    model = _Tied()
    opt = MUZOAdam(model.parameters(), lr=1e-3, num_queries=2, seed=0)
    opt.step(lambda: model.loss(_TOKENS))
    assert torch.equal(model.embed.weight, as_array) and np.asarray(1.0).size == 1


def test_reload_masters_starts_from_loaded_weights_exactly():
    """A load that puts a bf16 weight back to a value it already held is not seen by the per-entry
    check: its master keeps a sub-bf16 offset (review: 871 of 4,680 entries). reload_masters()
    makes every master the loaded weight."""
    model = _Tied(torch.bfloat16)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = MUZOAdam(model.parameters(), lr=1e-4, num_queries=2, seed=0)
    for _ in range(3):
        opt.step(lambda: model.loss(_TOKENS))
    model.load_state_dict(start)
    master = opt.state[model.embed.weight]["master"]
    assert opt.reload_masters() == 1
    assert torch.equal(master, start["embed.weight"].reshape(-1).float())
