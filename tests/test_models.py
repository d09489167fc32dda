"""The one model loader: embedded names, explicit dtype, quantization guard, checkpointing switch."""

import pytest
import torch

from lightning_agents.models import QuantizationConfig, load_causal_lm, load_model_and_tokenizer, resolve_model_path


@pytest.mark.parametrize("name", ["embedded:student", "embedded:teacher"])
def test_embedded_checkpoints_load_like_any_model(name):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_model_and_tokenizer(name)
    assert model.config.model_type == "llama"
    assert model.dtype == torch.float32
    assert tokenizer.pad_token is not None and tokenizer.eos_token == "<|im_end|>"
    assert "{% generation" in tokenizer.chat_template
    plain = AutoModelForCausalLM.from_pretrained(resolve_model_path(name))
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in model.parameters())


def test_teacher_is_larger_than_student():
    student = load_causal_lm("embedded:student")
    teacher = load_causal_lm("embedded:teacher")
    assert sum(p.numel() for p in teacher.parameters()) > 3 * sum(p.numel() for p in student.parameters())
    assert student.config.vocab_size == teacher.config.vocab_size


def test_dtype_is_explicit():
    assert load_causal_lm("embedded:student", dtype="bfloat16").dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        load_causal_lm("embedded:student", dtype="float8")


def test_unknown_embedded_name():
    with pytest.raises(ValueError, match="embedded:student, embedded:teacher"):
        resolve_model_path("embedded:giant")
    assert resolve_model_path("Qwen/Qwen3-1.7B") == "Qwen/Qwen3-1.7B"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error path")
def test_quantization_needs_cuda():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        load_causal_lm("embedded:student", quantization=QuantizationConfig(bits=4))


def test_gradient_checkpointing_switch():
    model = load_causal_lm("embedded:student", gradient_checkpointing=True)
    assert model.is_gradient_checkpointing and model.config.use_cache is False


def test_concurrent_loads_in_threads_give_real_weights():
    """from_pretrained patches process-wide state; the loader serialises loads so threads are safe."""
    from concurrent.futures import ThreadPoolExecutor

    reference = {n: p.clone() for n, p in load_causal_lm("embedded:student").named_parameters()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        models = list(pool.map(load_causal_lm, ["embedded:student", "embedded:teacher"] * 4))
    fresh = load_causal_lm("embedded:student")
    for model in models + [fresh]:
        assert all(p.device.type == "cpu" for p in model.parameters())
    for model in models[::2] + [fresh]:
        for name, param in model.named_parameters():
            assert torch.equal(param, reference[name]), name


def test_gguf_names_and_local_path_checks(tmp_path):
    from lightning_agents.models import ModelPathError, check_model_path, split_gguf

    assert split_gguf("/models/smol/SmolLM2.Q4_1.gguf") == ("/models/smol", "SmolLM2.Q4_1.gguf")
    assert split_gguf("/models/smol::SmolLM2.Q4_1.gguf") == ("/models/smol", "SmolLM2.Q4_1.gguf")
    assert split_gguf("Qwen/Qwen3-1.7B") == ("Qwen/Qwen3-1.7B", None)
    check_model_path("Qwen/Qwen3-1.7B")  # a hub id cannot be checked offline: left to the loader
    check_model_path("embedded:student")
    for missing in ("./runs/sft/final", str(tmp_path / "absent"), str(tmp_path / "m.gguf"), f"{tmp_path}::m.gguf"):
        with pytest.raises(ModelPathError, match="does not exist"):
            check_model_path(missing, "model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelPathError, match="not a checkpoint"):
        check_model_path(str(tmp_path / "empty"))
    with pytest.raises(ModelPathError, match="model path ./typo does not exist"):
        load_causal_lm("./typo")


def test_check_same_vocab_names_both_settings_and_the_difference():
    import copy

    from lightning_agents.models import VocabularyMismatchError, check_same_vocab, load_tokenizer

    student = load_tokenizer("embedded:student")
    check_same_vocab(student, load_tokenizer("embedded:teacher"))
    other = copy.deepcopy(student)
    other.add_tokens(["<new_token>"])
    n = len(student)
    with pytest.raises(
        VocabularyMismatchError,
        match=rf"model .* and data.tokenizer .* different vocabularies \({n} vs {n + 1} tokens\)",
    ):
        check_same_vocab(student, other)


def _broken_copy(folder, broken: str):
    """The embedded student's files linked into ``folder``, with ``broken`` replaced by a bad copy."""
    from pathlib import Path

    source = Path(resolve_model_path("embedded:student"))
    for entry in source.iterdir():
        if entry.name != broken:
            (folder / entry.name).symlink_to(entry)
    if broken == "model.safetensors":
        (folder / broken).write_bytes((source / broken).read_bytes()[:4096])  # a copy cut short
    elif broken == "config.json":
        (folder / broken).write_text('{"hidden_size": 64}')  # no model_type
    elif broken == "tokenizer.json":
        (folder / broken).write_text("{oops")
    return folder


@pytest.mark.parametrize(
    "broken, load",
    [("model.safetensors", "model"), ("config.json", "model"), ("tokenizer.json", "tokenizer")],
)
def test_a_broken_file_of_a_local_checkpoint_is_named_with_its_folder(tmp_path, broken, load):
    """Before: a cut-short model.safetensors raised safetensors' own SafetensorError, a garbled
    tokenizer.json a bare JSONDecodeError, neither naming the folder; a config.json without
    model_type a plain ValueError. Now each is the ModelPathError of the setting, naming the folder."""
    from lightning_agents.models import ModelPathError, load_tokenizer

    (tmp_path / "ckpt").mkdir()
    folder = _broken_copy(tmp_path / "ckpt", broken)
    with pytest.raises(ModelPathError, match=rf"^{load}: cannot load '.*ckpt'") as info:
        (load_causal_lm if load == "model" else load_tokenizer)(str(folder))
    # errors.py's promise: an `except ValueError` around the load still catches it.
    assert isinstance(info.value, ValueError)


def test_custom_code_without_trust_remote_code_keeps_its_hint(tmp_path):
    """Before: any ValueError of a local folder became ModelPathError (a FileNotFoundError) with the
    first line only: the line telling to pass trust_remote_code=True was dropped."""
    import json

    from lightning_agents.models import ModelPathError

    config = {
        "model_type": "my_llama",
        "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModelForCausalLM": "modeling_my.MyForCausalLM"},
        "hidden_size": 64,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="trust_remote_code=True") as info:
        load_causal_lm(str(tmp_path))
    assert not isinstance(info.value, ModelPathError)


def test_an_unknown_attn_implementation_of_a_local_folder_is_not_a_path_error(tmp_path):
    """Before: a setting mistake on a local folder was reported as a model path that names no
    loadable checkpoint."""
    from lightning_agents.models import ModelPathError

    (tmp_path / "ckpt").mkdir()
    folder = _broken_copy(tmp_path / "ckpt", broken="")
    with pytest.raises(ValueError, match="bogus") as info:
        load_causal_lm(str(folder), attn_implementation="bogus")
    assert not isinstance(info.value, ModelPathError)


def test_a_gguf_of_an_unsupported_architecture_is_not_a_path_error(tmp_path):
    """Before: transformers' "GGUF model with architecture ... is not supported" (a file of the wrong
    kind, named by the setting) became ModelPathError."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from lightning_agents.models import ModelPathError

    path = tmp_path / "tiny-foo.gguf"
    writer = gguf.GGUFWriter(str(path), "foo")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="not supported") as info:
        load_causal_lm(str(path))
    assert not isinstance(info.value, ModelPathError)
