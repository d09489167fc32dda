"""``real_model`` tier: RSTG on SmolLM2-135M-Instruct and real GSM8K items equals the independent
reference of ``tests/rstg_reference.py`` (float32; the embedded float64 version is
``tests/modules/test_rstg_reference.py``). The teacher is the student's checkpoint with its layers
perturbed and 64 padded vocabulary rows (49,216 logits for the student's 49,152), as real teachers
of a larger size pad theirs. Run with ``python -m pytest -m real_model``."""

from __future__ import annotations

import json

import pytest
import torch
from rstg_reference import MODULE_SETTINGS, compare
from test_real_model import smollm2, smollm2_gguf  # noqa: F401  (session fixtures)

from lightning_agents.datamodules.prompts import normalize_prompt_record
from lightning_agents.models import load_causal_lm
from lightning_agents.modules.rstg import RSTGModule

pytestmark = pytest.mark.real_model


def _perturb_and_pad(teacher: torch.nn.Module, vocab: int) -> None:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in teacher.named_parameters():
            if "layers." in name and p.dim() == 2:
                p.add_(torch.randn(p.shape, generator=g) * p.std() * 0.05)
    teacher.resize_token_embeddings(vocab + 1, pad_to_multiple_of=64, mean_resizing=False)


def test_rstg_on_smollm2_and_gsm8k_equals_the_reference(smollm2, shared_data, tmp_path):  # noqa: F811
    lines = (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines()[10:14]
    raw = [json.loads(line) for line in lines]
    records = [normalize_prompt_record(r, f"test.jsonl:{11 + i}") for i, r in enumerate(raw)]
    module = RSTGModule(
        model=smollm2,
        teacher=smollm2,
        reference=smollm2,
        verifier="lightning_agents.rewards.GSM8KVerifier",
        max_new_tokens=16,
        micro_batch_size=8,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        **MODULE_SETTINGS,
    )
    module.configure_model()
    _perturb_and_pad(module.teacher, module.tokenizer.vocab_size)
    assert module.teacher.config.vocab_size == 49216 and module.model.config.vocab_size == 49152
    answers = [r["answer"] for r in raw]  # GSM8K's worked solutions as the teacher's correct answers
    result = compare(module, load_causal_lm(smollm2).train(), records, answers)
    assert result.negative_module == result.negative_reference == [True, False, False, True]
    assert result.max_advantage_diff < 5e-5
    assert result.same_selection and result.selected > 0
    assert result.gradient_norm > 0 and result.gradient_rel_diff < 1e-4, result
