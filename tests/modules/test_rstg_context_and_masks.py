"""RSTG on the edges real runs reach: samples the policy loss drops (``mask_truncated``) and prompts
longer than the student's context. Embedded student and teacher, a few seconds each."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.tasks.arithmetic import arithmetic_conversation, make_arithmetic_split


def _records(n: int) -> list[dict]:
    return [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in make_arithmetic_split("val", n=n)
    ]


def _module(tmp_path, **kw) -> RSTGModule:
    args = dict(
        num_generations=4,
        max_new_tokens=16,
        teacher_k=2,
        micro_batch_size=8,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        sampling_seed=0,
        sample_weight="none",
        teacher_sft=False,
    )
    args.update(kw)
    module = RSTGModule(**args)
    module.configure_model()
    return module


def test_with_mask_truncated_only_trained_tokens_are_distilled(tmp_path):
    # Two new tokens: every sample is truncated, every group all wrong (negative, guided). The policy
    # loss drops truncated samples, so no token of theirs may take the guided-token budget.
    module = _module(tmp_path, max_new_tokens=2, mask_truncated=True)
    rollout = module.collect(_records(2))
    assert bool(rollout.out.truncated.all()) and bool(rollout.info["stats"].negative.all())
    # nothing to distill: no teacher forward on those rows, and no guidance statistic measured over
    # zero tokens (teacher_kl 0.0 halved the step's mean)
    assert "selected" not in rollout.info and not bool(rollout.info["opd_rows"].any())
    assert "teacher_kl" not in rollout.info and rollout.info["distilled_tokens"] == 0.0
    assert torch.equal(rollout.token_adv, torch.zeros_like(rollout.token_adv))
    # the teacher's own answers are still asked for, as SFT targets of these all-wrong prompts
    module = _module(tmp_path, max_new_tokens=2, mask_truncated=True, teacher_sft=True)
    rollout = module.collect(_records(2))
    assert sorted(rollout.info["teacher"]) == [0, 1] and not bool(rollout.info["opd_rows"].any())
    # Without mask_truncated the same tokens are trained and distilled (ceil(20%) of each group's 8).
    module = _module(tmp_path, max_new_tokens=2, mask_truncated=False)
    rollout = module.collect(_records(2))
    assert int(rollout.info["selected"].sum()) == 2 * 2
    assert int((rollout.info["selected"] & ~rollout.loss_mask.bool()).sum()) == 0


def test_samples_longer_than_the_students_context_get_no_reward_guidance_or_loss(tmp_path):
    module = _module(tmp_path, num_generations=2, max_new_tokens=4)
    limit = module.model.config.max_position_embeddings
    records = _records(1)
    long = dict(records[0], id="too-long", prompt=[{"role": "user", "content": "What is 2 + 3? " * (limit // 8)}])
    with pytest.warns(UserWarning, match=r"longer than the student's context .*max_position_embeddings 512.*too-long"):
        rollout = module.collect([long, records[0]])
    assert int(rollout.out.prompt_mask[0].sum()) > limit
    assert all(math.isnan(r) for r in rollout.rewards[:2].tolist())
    assert not any(math.isnan(r) for r in rollout.rewards[2:].tolist())
    assert float(rollout.loss_mask[:2].sum()) == 0.0 and float(rollout.loss_mask[2:].sum()) > 0
    assert not bool(rollout.info["opd_rows"][:2].any())
    assert torch.equal(rollout.token_adv[:2], torch.zeros_like(rollout.token_adv[:2]))


def test_the_context_limit_counts_rope_scaling():
    """Qwen2.5 with YaRN keeps max_position_embeddings at 32,768 and reads 131,072 positions: its
    long samples must not be dropped as beyond the context. llama3 scaling lists the extended
    length already (Llama 3.2: factor 32 over 8,192 is not 262,144); Gemma 3's model config nests it."""
    from transformers import Gemma3Config, GPT2Config, LlamaConfig, Qwen2Config

    from lightning_agents.models import context_length

    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert context_length(Qwen2Config(max_position_embeddings=32768, rope_scaling=yarn))[0] == 131072
    assert context_length(Qwen2Config(max_position_embeddings=32768))[0] == 32768
    llama32 = {"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192}
    llama32 |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert context_length(LlamaConfig(max_position_embeddings=131072, rope_scaling=llama32))[0] == 131072
    # linear scaling without an original length scales max_position_embeddings (review 4: a
    # vicuna-16k-shaped config read 4,096 and would drop every longer sample)
    linear = {"type": "linear", "factor": 4.0}
    assert context_length(LlamaConfig(max_position_embeddings=4096, rope_scaling=linear))[0] == 16384
    gemma3 = Gemma3Config(text_config={"max_position_embeddings": 131072})
    assert context_length(gemma3)[0] == 131072
    assert context_length(GPT2Config(n_positions=1024))[0] == 1024
    assert context_length(None) is None
