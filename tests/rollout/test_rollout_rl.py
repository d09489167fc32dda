"""Rollout outputs the RL module relies on: G contiguous samples, masks, logprobs, entropies, truncation."""

from __future__ import annotations

import torch

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig


def test_group_rollout_fields_are_consistent():
    model, tok = load_model_and_tokenizer("embedded:student")
    engine = HFGenerationEngine(model, tok)
    prompts = [
        [{"role": "user", "content": "Ava has 3 apples and gets 4 more. How many apples does Ava have now?"}],
        [{"role": "user", "content": "Ben buys 6 boxes with 7 coins each. How many coins does Ben buy?"}],
    ]
    torch.manual_seed(0)
    out = engine.generate(prompts, num_samples=3, sampling=SamplingConfig(max_new_tokens=6, temperature=1.0))
    assert out.completion_ids.shape[0] == 6 and len(out.texts) == 6
    assert torch.equal(out.prompt_ids[0], out.prompt_ids[2]) and not torch.equal(out.prompt_ids[0], out.prompt_ids[3])
    m = out.completion_mask.bool()
    assert torch.all(out.logprobs[~m] == 0) and torch.all(out.logprobs[m] <= 0)
    assert out.entropies is not None and torch.all(out.entropies[~m] == 0) and torch.all(out.entropies[m] >= 0)
    # 6 tokens is too short for a full answer: those rows are truncated and have no EOS.
    eos = tok.eos_token_id
    for row in range(6):
        has_eos = bool((out.completion_ids[row][m[row]] == eos).any())
        assert bool(out.truncated[row]) == (not has_eos)
    assert out.truncated.any()


def test_sampling_logprobs_match_a_forward_pass():
    from lightning_agents.modules.rstg import completion_logprobs

    model, tok = load_model_and_tokenizer("embedded:student")
    engine = HFGenerationEngine(model, tok)
    prompts = [
        [{"role": "user", "content": "Cleo had 45 cards and gave away 7. How many cards are left?"}],
        [{"role": "user", "content": "Dan has 2 pens and gets 9 more. How many pens does Dan have now?"}],
    ]
    torch.manual_seed(1)
    out = engine.generate(prompts, num_samples=2, sampling=SamplingConfig(max_new_tokens=20, temperature=0.7))
    with torch.no_grad():
        logp, ent = completion_logprobs(
            model.eval(),
            out.prompt_ids,
            out.prompt_mask,
            out.completion_ids,
            out.completion_mask,
            temperature=0.7,
            with_entropy=True,
        )
    m = out.completion_mask.bool()
    # The policy ratio at the first update is exp(0) only if training-time log-probs (left padding,
    # position ids, temperature) reproduce the sampler's.
    torch.testing.assert_close(logp[m], out.logprobs[m], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ent[m], out.entropies[m], atol=1e-4, rtol=1e-4)


def test_generation_keeps_no_full_vocabulary_logits():
    """Behaviour log-probs come from the chosen tokens step by step: ``generate`` is never asked to
    return per-step logits or scores ([rows, vocab] float32 per generated token)."""
    model, tok = load_model_and_tokenizer("embedded:student")
    engine = HFGenerationEngine(model, tok)
    seen = {}
    original = model.generate

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    model.generate = spy
    torch.manual_seed(2)
    out = engine.generate(["1 + 1 ="], num_samples=2, sampling=SamplingConfig(max_new_tokens=5))
    assert not seen.get("output_logits") and not seen.get("output_scores")
    assert out.logprobs.shape == out.completion_ids.shape and torch.all(out.logprobs[out.completion_mask.bool()] < 0)


def test_a_checkpoints_generation_config_processors_do_not_shift_the_sampled_distribution():
    # Qwen2.5-Instruct's generation_config.json carries repetition_penalty 1.05: generate applied
    # it, the trainer's forward did not, so the recorded log-probs were another distribution's
    # (0.28 nats a token apart on SmolLM2; RSTG's distillation advantage reached 1.48 with the
    # teacher's weights equal to the student's).
    from lightning_agents.modules.rstg import completion_logprobs

    model, tok = load_model_and_tokenizer("embedded:student")
    model.generation_config.repetition_penalty = 1.3
    model.generation_config.no_repeat_ngram_size = 2
    model.generation_config.min_new_tokens = 5
    engine = HFGenerationEngine(model, tok)
    prompts = [[{"role": "user", "content": "Cleo had 45 cards and gave away 7. How many cards are left?"}]]
    for seeds in (None, [3]):
        torch.manual_seed(2)
        out = engine.generate(prompts, num_samples=3, sampling=SamplingConfig(max_new_tokens=24), seeds=seeds)
        with torch.no_grad():
            logp, _ = completion_logprobs(
                model.eval(), out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask
            )
        m = out.completion_mask.bool()
        torch.testing.assert_close(logp[m], out.logprobs[m], atol=1e-4, rtol=1e-4)
    assert model.generation_config.repetition_penalty == 1.3  # the checkpoint's own config is untouched
