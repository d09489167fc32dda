"""MUZOAdam on tiny models of real architectures (transformers' own classes, shrunk configs).

Weight-decay exemptions per architecture (MeZO exempts biases and layer norms by name; MUZOAdam by
shape), tied embeddings perturbed and restored once, and a before-update hook's writes surviving the
update with float32 master weights.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lightning_agents.optim import MUZOAdam, full_direction

transformers = pytest.importorskip("transformers")

_SMALL = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=64,
    max_position_embeddings=64,
)


def _tiny(arch: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """One decoder layer of ``arch`` with the real config's structure flags (tying, biases, norm placement)."""
    torch.manual_seed(0)
    t = transformers
    if arch == "llama":  # SmolLM2-135M-Instruct: tied, no biases
        model = t.LlamaForCausalLM(t.LlamaConfig(**_SMALL, head_dim=16, tie_word_embeddings=True))
    elif arch == "qwen3":  # Qwen3-0.6B: q_norm / k_norm, tied
        model = t.Qwen3ForCausalLM(t.Qwen3Config(**_SMALL, head_dim=16, tie_word_embeddings=True))
    elif arch == "gemma2":  # gemma-2-2b: norms stored as an offset from 1, sandwich norms, tied
        model = t.Gemma2ForCausalLM(
            t.Gemma2Config(**_SMALL, head_dim=16, tie_word_embeddings=True, query_pre_attn_scalar=16, pad_token_id=0)
        )
    elif arch == "phi3":  # Phi-3-mini: fused qkv_proj and gate_up_proj, untied
        model = t.Phi3ForCausalLM(t.Phi3Config(**_SMALL, tie_word_embeddings=False, pad_token_id=0))
    elif arch == "opt":  # opt-13b: LayerNorms with biases, biases everywhere, learned positions, tied
        model = t.OPTForCausalLM(
            t.OPTConfig(
                hidden_size=32,
                ffn_dim=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                vocab_size=64,
                max_position_embeddings=64,
                word_embed_proj_dim=32,
                do_layer_norm_before=True,
                enable_bias=True,
                pad_token_id=1,
                bos_token_id=2,
                eos_token_id=2,
            )
        )
    elif arch == "gpt2":  # gpt2: Conv1D, ln_1 / ln_2 / ln_f, tied
        model = t.GPT2LMHeadModel(
            t.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=64, bos_token_id=0, eos_token_id=0)
        )
    else:
        raise KeyError(arch)
    return model.to(dtype).eval()


ARCHS = ("llama", "qwen3", "gemma2", "phi3", "opt", "gpt2")
_IDS = torch.randint(3, 64, (2, 8), generator=torch.Generator().manual_seed(1))


def _loss(model: torch.nn.Module):
    return lambda: model(input_ids=_IDS, labels=_IDS).loss


@pytest.mark.parametrize("arch", ARCHS)
def test_weight_decay_spares_exactly_the_norms_and_biases(arch):
    """MeZO's rule by name ('bias', 'layer_norm', 'layernorm') misses GPT-2's ln_*, Qwen3's q_norm/k_norm and
    the final norm of Llama-style models; the shape rule exempts every norm weight and bias, and nothing else."""
    model = _tiny(arch)
    modules = dict(model.named_modules())
    named = list(model.named_parameters())
    before = {name: p.detach().clone() for name, p in named}
    opt = MUZOAdam(model.parameters(), lr=0.1, weight_decay=0.5, num_queries=1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FlatLossWarning: a constant loss leaves only the decay
        opt.step(lambda: torch.tensor(1.0))
    for name, p in named:
        owner = type(modules[name.rsplit(".", 1)[0]]).__name__
        exempt = name.endswith("bias") or "Norm" in owner
        expected = before[name] if exempt else before[name] * (1 - 0.1 * 0.5)
        assert torch.allclose(p, expected, rtol=0, atol=1e-6), (name, owner)  # restore: a few ulp


@pytest.mark.parametrize("arch", ["llama", "gemma2", "opt", "gpt2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tied_embedding_moves_by_one_direction_and_is_restored(arch, dtype):
    model = _tiny(arch, dtype)
    embedding = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is embedding
    index = next(i for i, p in enumerate(model.parameters()) if p is embedding)
    start = embedding.detach().clone()
    seen = []

    def closure():
        seen.append(embedding.detach().clone())
        return _loss(model)()

    opt = MUZOAdam(model.parameters(), lr=0.0, num_queries=2, seed=3)
    opt.step(closure)
    z = full_direction(embedding, opt.last_seeds[0], index, opt.chunk_size)
    plus = (start.double() + opt.eps * z.double()).to(dtype)
    assert torch.allclose(seen[0].double(), plus.double(), rtol=0, atol=1e-6)
    assert len(opt.state) == len(list(model.parameters()))
    if dtype == torch.bfloat16:
        assert torch.equal(embedding, start)  # masters: exact
    else:
        assert torch.allclose(embedding, start, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weights_the_before_update_hook_writes_are_kept(dtype):
    """Lightning's on_before_optimizer_step runs here; with 16-bit weights the update started from the
    float32 master, which silently put back what the hook had written (bf16: 0.5 -> 1.0)."""
    model = _tiny("llama", dtype)
    norm = model.model.norm.weight

    def hook():
        norm.data.fill_(0.5)

    # float32 weights come back from a perturbation cycle within a few ulp; masters restore exactly
    atol = 0.0 if dtype == torch.bfloat16 else 1e-6
    opt = MUZOAdam(model.parameters(), lr=0.0, num_queries=1, seed=0)
    opt.step(_loss(model), before_update=hook)
    assert torch.allclose(norm, torch.full_like(norm, 0.5), rtol=0, atol=atol)
    opt.step(_loss(model))  # and the next step keeps it: the master holds it too
    assert torch.allclose(norm, torch.full_like(norm, 0.5), rtol=0, atol=atol)
