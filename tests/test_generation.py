"""The shared generation path: left padding, EOS masking, sampling log-probs, tool-call parsing."""

import pytest
import torch

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig, parse_tool_calls
from lightning_agents.rollout.evaluate import evaluate_accuracy
from lightning_agents.tasks.arithmetic import ArithmeticVerifier, make_arithmetic_split


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = load_model_and_tokenizer("embedded:student")
    return HFGenerationEngine(model.eval(), tokenizer)


def prompts(n):
    return [[{"role": "user", "content": r["question"]}] for r in make_arithmetic_split("val")[:n]]


def test_batched_greedy_equals_one_at_a_time(engine):
    greedy = SamplingConfig(max_new_tokens=24, do_sample=False)
    batch = engine.generate(prompts(4), sampling=greedy)
    for i, prompt in enumerate(prompts(4)):
        alone = engine.generate([prompt], sampling=greedy)
        assert alone.texts[0] == batch.texts[i]


def test_masks_and_logprobs_match_a_forward_pass(engine):
    torch.manual_seed(0)
    out = engine.generate(prompts(3), num_samples=2, sampling=SamplingConfig(max_new_tokens=20, temperature=1.0))
    assert out.completion_ids.shape[0] == 6
    assert torch.equal(out.prompt_ids[0], out.prompt_ids[1])  # samples of a prompt are contiguous
    eos = engine.tokenizer.eos_token_id
    for row in range(6):
        ids, mask = out.completion_ids[row], out.completion_mask[row]
        n = int(mask.sum())
        if not out.truncated[row]:
            assert ids[n - 1] == eos and (ids[: n - 1] != eos).all()
        assert (mask[n:] == 0).all()
    full = torch.cat([out.prompt_ids, out.completion_ids], 1)
    attention = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        logits = engine.model(input_ids=full, attention_mask=attention).logits
    p = out.prompt_ids.shape[1]
    expected = (
        torch.log_softmax(logits[:, p - 1 : -1].float(), -1).gather(2, out.completion_ids.unsqueeze(-1)).squeeze(-1)
    )
    expected = expected * out.completion_mask
    torch.testing.assert_close(out.logprobs, expected, atol=2e-4, rtol=1e-4)
    assert out.num_completion_tokens == int(out.completion_mask.sum())


def test_seeded_samples_depend_only_on_the_prompts_seed(engine):
    # Temperature 1.5: at 1.0 the student is so sure of a one-digit sum that all four samples agree.
    sampling = SamplingConfig(max_new_tokens=16, temperature=1.5)
    torch.manual_seed(0)
    batch = engine.generate(prompts(3), num_samples=4, sampling=sampling, seeds=[11, 22, 33])
    # Another global random state, the prompt alone, and a different order: the same samples.
    torch.manual_seed(999)
    alone = engine.generate(prompts(3)[1:2], num_samples=4, sampling=sampling, seeds=[22])
    assert alone.texts == batch.texts[4:8]
    swapped = engine.generate(prompts(3)[::-1], num_samples=4, sampling=sampling, seeds=[33, 22, 11])
    assert swapped.texts[:4] == batch.texts[8:12] and swapped.texts[8:12] == batch.texts[:4]
    # The seed matters, and the G samples of one prompt are not copies of each other.
    other = engine.generate(prompts(3)[1:2], num_samples=4, sampling=sampling, seeds=[23])
    assert other.texts != alone.texts
    assert len(set(batch.texts[:4])) > 1
    # The sampling log-probs are still the sampled tokens' (the greedy pick of the one-hot scores
    # is not what is recorded).
    assert bool((batch.logprobs[batch.completion_mask.bool()] < 0).any())


def test_seeded_sampling_draws_from_the_models_distribution(engine):
    prompt = prompts(1)
    ids, mask = engine.encode_prompts(prompt)
    with torch.no_grad():
        probs = torch.softmax(engine.model(input_ids=ids, attention_mask=mask).logits[0, -1].float(), -1)
    n = 600
    first = SamplingConfig(max_new_tokens=1, temperature=1.0)
    out = engine.generate(prompt, num_samples=n, sampling=first, seeds=[5])
    counts = torch.bincount(out.completion_ids[:, 0], minlength=probs.numel()).float() / n
    top = probs.topk(3).indices
    # Binomial standard error at n=600 is at most 0.021: four of them.
    assert torch.allclose(counts[top], probs[top], atol=0.085), (counts[top], probs[top])
    # top_k=1 is greedy; top_p keeps the draws inside the nucleus.
    greedy = engine.generate(prompt, num_samples=2, sampling=SamplingConfig(max_new_tokens=8, do_sample=False))
    top1 = engine.generate(prompt, num_samples=2, sampling=SamplingConfig(max_new_tokens=8, top_k=1), seeds=[5])
    assert top1.texts == greedy.texts
    nucleus = engine.generate(prompt, num_samples=200, sampling=SamplingConfig(max_new_tokens=1, top_p=0.5), seeds=[5])
    sorted_p, order = probs.sort(descending=True)
    keep = order[: int((sorted_p.cumsum(0) < 0.5).sum()) + 1]
    assert set(nucleus.completion_ids[:, 0].tolist()) <= set(keep.tolist())


def test_truncation_is_reported(engine):
    out = engine.generate(prompts(2), sampling=SamplingConfig(max_new_tokens=2, do_sample=False))
    assert out.truncated.all() and out.completion_mask.sum() == 4


def test_evaluate_accuracy_scores_with_the_verifier(engine):
    n = 16
    records = make_arithmetic_split("val")[:n]
    references = [r["answer"] for r in records]
    result = evaluate_accuracy(engine, prompts(n), references, ArithmeticVerifier(), batch_size=3, max_new_tokens=32)
    # The expected figure, computed independently: greedy-decode each prompt alone and score it.
    greedy = SamplingConfig(max_new_tokens=32, do_sample=False)
    texts = [engine.generate([p], sampling=greedy).texts[0] for p in prompts(n)]
    scores = [ArithmeticVerifier()(t, ref) for t, ref in zip(texts, references)]
    assert 0.0 < sum(scores) < n  # the student gets some, not all, right: both directions are tested
    assert result["n"] == n and result["accuracy"] == pytest.approx(sum(scores) / n)
    wrong = evaluate_accuracy(engine, prompts(n), ["-1"] * n, ArithmeticVerifier())
    assert wrong["accuracy"] == 0.0


def test_parse_tool_calls():
    text = 'Let me check.<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me check."
    assert calls == [
        {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2 + 3"}'}}
    ]
    content, calls = parse_tool_calls("<tool_call>{broken</tool_call> done")
    assert calls == [] and "{broken" in content
