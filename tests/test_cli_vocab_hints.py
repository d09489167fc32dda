"""The hint after a vocabulary mismatch fits the setting (docs audit, session 39).

Before, a teacher of another vocabulary was told "leave model.teacher unset to use the model's
tokenizer", but an unset teacher is embedded:teacher, not the student's tokenizer.
"""

from tests.test_cli import no_model_loads, one_line_error, other_vocab_tokenizer  # noqa: F401 - fixtures


def test_a_teacher_of_another_vocabulary_is_told_what_unset_means(capsys, no_model_loads, other_vocab_tokenizer):  # noqa: F811
    line = one_line_error(
        capsys,
        ["fit", "--model", "RSTGModule", "--model.teacher", str(other_vocab_tokenizer), "--data", "PromptDataModule"],
    )
    assert "model.init_args.teacher" in line and "different vocabularies" in line
    assert "leave model.teacher unset to use the model's tokenizer" not in line
    assert "set model.guidance: false and model.teacher: null for plain GRPO" in line
    assert "(left unset, model.teacher is embedded:teacher)" in line


def test_a_reference_of_another_vocabulary_is_told_to_leave_it_unset(capsys, no_model_loads, other_vocab_tokenizer):  # noqa: F811
    line = one_line_error(
        capsys,
        ["fit", "--model", "RSTGModule", "--model.reference", str(other_vocab_tokenizer), "--data", "PromptDataModule"],
    )
    assert "model.init_args.reference" in line and "different vocabularies" in line
    assert line.rstrip().endswith("leave model.reference unset to use a copy of the initial student (command line)")
