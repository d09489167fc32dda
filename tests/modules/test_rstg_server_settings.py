"""RSTG settings for the vLLM server sampler (timeouts, concurrency, retries, served model name,
API key from the environment) and the explicit ``context_length``: they reach the engine and the
context check, are validated, refused where they do not apply, and listed by ``fit --help``."""

from __future__ import annotations

import re

import pytest
import torch

from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError
from lightning_agents.rollout import GenerationOutput

SERVER = dict(engine="vllm", vllm_mode="server", vllm_server_url="http://127.0.0.1:9/v1", guidance=False)


def _server_module(tmp_path, **kw) -> RSTGModule:
    return RSTGModule(**SERVER, teacher_cache=str(tmp_path / "cache.jsonl"), **kw)


# ----------------------------------------------------------------------------- server settings
def test_server_settings_reach_the_engine(tmp_path, monkeypatch):
    """Before: none of them was a setting (TypeError): a slow 70B server, or one started with an API
    key, could not be used from a config."""
    pytest.importorskip("openai")
    monkeypatch.setenv("MY_VLLM_KEY", "sk-test-123")
    module = _server_module(
        tmp_path,
        vllm_weights_dir=str(tmp_path / "served"),
        vllm_server_model="policy-70b",
        vllm_server_timeout=1800.0,
        vllm_server_reload_timeout=900.0,
        vllm_server_max_concurrency=5,
        vllm_server_max_retries=0,
        vllm_server_api_key_env="MY_VLLM_KEY",
    )
    module.configure_model()  # builds the engine; it contacts the server only to sample
    engine = module.engine
    assert type(engine).__name__ == "VLLMServerEngine"
    assert engine.timeout == 1800.0 and engine.client.timeout == 1800.0
    assert engine.reload_timeout == 900.0 and engine.max_retries == 0 and engine.client.max_retries == 0
    assert engine.max_concurrency == 5 and engine.model == "policy-70b"
    assert engine.client.api_key == "sk-test-123"
    # the key is read, never stored: checkpoints and hparams.yaml hold only the variable's name
    assert "sk-test-123" not in repr(dict(module.hparams))


def test_unset_server_settings_keep_the_engines_defaults_and_vllm_api_key(tmp_path, monkeypatch):
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    module = _server_module(tmp_path)
    module.configure_model()
    defaults = VLLMServerEngine("http://127.0.0.1:9/v1", module.tokenizer)
    engine = module.engine
    for name in ("timeout", "reload_timeout", "max_retries", "max_concurrency", "_model"):
        assert getattr(engine, name) == getattr(defaults, name), name
    assert engine.client.api_key == "EMPTY"  # no key: what a server started without --api-key ignores
    # the variable `vllm serve` reads its own --api-key from is read by default
    monkeypatch.setenv("VLLM_API_KEY", "sk-shared")
    module = _server_module(tmp_path)
    module.configure_model()
    assert module.engine.client.api_key == "sk-shared"


def test_a_named_api_key_variable_that_is_unset_is_refused_before_models_load(tmp_path, monkeypatch):
    import lightning as L

    monkeypatch.delenv("MY_VLLM_KEY", raising=False)
    module = _server_module(tmp_path, vllm_server_api_key_env="MY_VLLM_KEY")
    module.trainer = L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu", devices=1)
    with pytest.raises(RSTGSettingError, match=r"vllm_server_api_key_env names the environment variable MY_VLLM_KEY"):
        module.configure_model()
    assert module.model is None


def test_a_checkpoint_loaded_without_a_trainer_needs_no_api_key(tmp_path, monkeypatch):
    # `export` and `generate --ckpt_path` load the module without a Trainer and never ask the
    # sampling server: the key's variable need not be set there (review of fa7be9a)
    monkeypatch.delenv("MY_VLLM_KEY", raising=False)
    module = _server_module(tmp_path, vllm_server_api_key_env="MY_VLLM_KEY")
    module.configure_model()
    assert module.model is not None and module.engine.client.api_key == "EMPTY"


@pytest.mark.parametrize(
    "engine_args",
    [dict(engine="hf"), dict(engine="vllm", vllm_mode="colocate")],
    ids=["hf", "vllm-colocate"],
)
@pytest.mark.parametrize(
    "setting",
    [
        ("vllm_server_timeout", 1800.0),
        ("vllm_server_max_concurrency", 8),
        ("vllm_server_max_retries", 5),
        ("vllm_server_model", "policy"),
        ("vllm_server_api_key_env", "MY_VLLM_KEY"),
    ],
    ids=lambda s: s[0],
)
def test_server_settings_are_refused_by_the_other_samplers(engine_args, setting):
    name, value = setting
    with pytest.raises(RSTGSettingError, match=rf"model\.{name} applies to the vLLM server sampler only"):
        RSTGModule(guidance=False, **engine_args, **{name: value})


def test_a_reload_timeout_without_a_weights_dir_is_refused():
    with pytest.raises(RSTGSettingError, match=r"vllm_server_reload_timeout needs model\.vllm_weights_dir"):
        RSTGModule(**SERVER, vllm_server_reload_timeout=900.0)


@pytest.mark.parametrize(
    "name,value,rule",
    [
        ("vllm_server_timeout", 0.0, "> 0"),
        ("vllm_server_timeout", -5.0, "> 0"),
        ("vllm_server_reload_timeout", 0.0, "> 0"),
        ("vllm_server_max_concurrency", 0, ">= 1"),
        ("vllm_server_max_retries", -1, ">= 0"),
        ("vllm_server_model", " ", "a name"),
        ("vllm_server_api_key_env", "", "an environment variable name"),
        ("vllm_server_api_key_env", "token-abc123", "an environment variable name"),
        ("context_length", 0, ">= 1"),
    ],
)
def test_bad_values_are_refused_by_name(tmp_path, name, value, rule):
    args = dict(SERVER, vllm_weights_dir=str(tmp_path)) if name.startswith("vllm") else dict(guidance=False)
    with pytest.raises(RSTGSettingError, match=rf"model\.{name} must be {re.escape(rule)}") as err:
        RSTGModule(**args, **{name: value})
    if name == "vllm_server_api_key_env" and value:
        assert value not in str(err.value)  # a key pasted in place of a name is not echoed to the logs


def test_fit_help_lists_the_new_settings(capsys):
    from test_cli import run_cli  # tests/ is on sys.path (rootdir conftest)
    from test_cli_help import help_entries

    code, out = run_cli(["fit", "--model.help", "RSTGModule"], capsys)
    assert code == 0, out.err
    entries = help_entries(out.out)
    for option in (
        "--model.vllm_server_model",
        "--model.vllm_server_timeout",
        "--model.vllm_server_reload_timeout",
        "--model.vllm_server_max_concurrency",
        "--model.vllm_server_max_retries",
        "--model.vllm_server_api_key_env",
        "--model.context_length",
    ):
        assert option in entries, option
    assert "VLLM_API_KEY" in entries["--model.vllm_server_api_key_env"]
    assert "Gemma 3" in entries["--model.context_length"]


# ----------------------------------------------------------------------------- context_length
def _output(lengths: list[int]) -> GenerationOutput:
    """Rows whose prompt + completion hold ``lengths`` tokens (all in the prompt)."""
    width = max(lengths)
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths])
    return GenerationOutput(
        prompt_ids=torch.zeros_like(mask),
        prompt_mask=mask,
        completion_ids=torch.zeros((len(lengths), 1), dtype=torch.long),
        completion_mask=torch.zeros((len(lengths), 1), dtype=torch.long),
        logprobs=torch.zeros((len(lengths), 1)),
        texts=[""] * len(lengths),
        truncated=torch.zeros(len(lengths), dtype=torch.bool),
    )


def test_context_length_overrides_the_derived_context(tmp_path):
    """Before: the limit always came from the config (512 for the embedded student, Gemma 3's
    RoPE-scaled guess for a real one), whatever the user knew; ``context_length`` was a TypeError."""
    records = [{"id": "a"}, {"id": "b"}]
    derived = RSTGModule(num_generations=2, guidance=False)
    derived.configure_model()
    assert derived.model.config.max_position_embeddings == 512
    out = _output([100, 300, 600, 40])
    with pytest.warns(UserWarning, match=r"600 > 512 tokens, max_position_embeddings 512; records \['b'\]"):
        assert derived.beyond_context(out, records).tolist() == [False, False, True, False]
    # a smaller context than the config's: the setting is the limit and is named in the warning
    shorter = RSTGModule(num_generations=2, guidance=False, context_length=256)
    shorter.model = derived.model
    with pytest.warns(UserWarning, match=r"600 > 256 tokens, model\.context_length; records \['a', 'b'\]"):
        assert shorter.beyond_context(out, records).tolist() == [False, True, True, False]
    # a larger one: nothing is flagged (no model needed to know it)
    longer = RSTGModule(num_generations=2, guidance=False, context_length=1024)
    assert longer.model is None
    assert longer.beyond_context(out, records).tolist() == [False] * 4
    assert longer.hparams.context_length == 1024
