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
