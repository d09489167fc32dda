"""RSTG against the independent reference of ``tests/rstg_reference.py`` (written from the
definition, not from ``rstg_loss.py``), in float64 on the embedded student, with a teacher whose
vocabulary is padded to a multiple of 64 as real checkpoints are, at a sampling temperature of 0.7,
for the three loss aggregations. The same check on SmolLM2-135M-Instruct is in
``tests/test_real_model_rstg.py``."""

from __future__ import annotations

import pytest
from rstg_reference import MODULE_SETTINGS, compare

from lightning_agents.models import load_causal_lm
from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.tasks.arithmetic import arithmetic_conversation, make_arithmetic_split


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant"])
def test_module_equals_an_independent_reference_in_float64(tmp_path, aggregation):
    records = [
        {"id": r["id"], "prompt": arithmetic_conversation(r)["messages"][:1], "reference": r["answer"]}
        for r in make_arithmetic_split("val", n=4)
    ]
    module = RSTGModule(
        teacher="embedded:teacher",
        reference="embedded:teacher",
        max_new_tokens=10,
        micro_batch_size=3,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        loss_aggregation=aggregation,
        **MODULE_SETTINGS,
    )
    module.configure_model()
    vocab = module.teacher.config.vocab_size
    module.teacher.resize_token_embeddings(vocab + 1, pad_to_multiple_of=64, mean_resizing=False)
    assert module.teacher.config.vocab_size == 512 > vocab
    for model in (module.model, module.teacher, module.ref_model):
        model.double()
    answers = [f"The answer is {r['reference']}." for r in records]
    result = compare(module, load_causal_lm("embedded:student").double(), records, answers)
    assert result.negative_module == result.negative_reference == [True, False, False, True]
    # The module's teacher pass runs left-padded batches; 1e-7 is float32 rotary tables, not float64.
    assert result.max_advantage_diff < 1e-7
    assert result.same_selection and result.selected > 0
    assert result.gradient_norm > 0 and result.gradient_rel_diff < 1e-6, result
