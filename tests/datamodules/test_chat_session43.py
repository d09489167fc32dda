"""``data.content_format``: vLLM's ``--chat-template-content-format`` as a ChatDataModule setting.

Only the tokenizer attribute ``chat_template_content_format`` overrode the detection, which a YAML
or command-line run cannot set. The real template is moonshotai/Kimi-K2-Instruct's
(tests/data/tool_call_outputs/templates/moonshotai-Kimi-K2.jinja), which loops over a message's
parts ("openai") and joins them with nothing; the embedded tokenizer has its ``<|im_end|>``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_agents.cli import cli_main
from lightning_agents.datamodules.chat import ChatDataModule

KIMI = Path(__file__).resolve().parents[1] / "data" / "tool_call_outputs" / "templates" / "moonshotai-Kimi-K2.jinja"
PARTS = [{"type": "text", "text": "What is 17*23?"}, {"type": "text", "text": "Answer briefly."}]


def _config(tmp_path: Path, **data) -> Path:
    record = {"messages": [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "391"}]}
    (tmp_path / "d.jsonl").write_text(json.dumps(record) + "\n")
    init = {"train": str(tmp_path / "d.jsonl"), "val": None, "chat_template": str(KIMI), "max_length": 2048}
    init["cache_dir"] = str(tmp_path / "cache")
    config = {
        "model": {"class_path": "SFTModule", "init_args": {"model": "embedded:student"}},
        "data": {"class_path": "ChatDataModule", "init_args": {**init, **data}},
        "trainer": {"accelerator": "cpu", "max_steps": 1, "logger": False, "enable_checkpointing": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _row_text(args: list[str]) -> str:
    data = cli_main(args, run=False).datamodule
    data.setup("fit")
    return data.tokenizer.decode(data.datasets["fit"][0]["input_ids"])


def test_content_format_is_a_data_setting_from_yaml_and_the_command_line(tmp_path):
    # auto: Kimi-K2's template gets the list and glues the parts, as vLLM serves it by default
    config = _config(tmp_path)
    assert "What is 17*23?Answer briefly.<|im_end|>" in _row_text(["--config", str(config)])
    # a server started with --chat-template-content-format string joins them with a newline first;
    # the same cache folder: the setting is part of the tokenized-row key, so the glued row is not reused
    text = _row_text(["--config", str(config), "--data.content_format", "string"])
    assert "What is 17*23?\nAnswer briefly.<|im_end|>" in text
    assert len(list((tmp_path / "cache").iterdir())) == 2
    # from the YAML too, and `openai` says what auto detects here
    assert "What is 17*23?\nAnswer briefly." in _row_text(["--config", str(_config(tmp_path, content_format="string"))])
    text = _row_text(["--config", str(_config(tmp_path, content_format="openai"))])
    assert "What is 17*23?Answer briefly.<|im_end|>" in text


def test_a_bad_content_format_is_refused_naming_the_setting(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["--config", str(_config(tmp_path)), "--data.content_format", "list"], run=False)
    assert "content_format" in capsys.readouterr().err
    with pytest.raises(ValueError, match="data.content_format must be one of 'auto', 'string', 'openai', got 'list'"):
        ChatDataModule(content_format="list")


def test_the_setting_leaves_the_models_own_tokenizer_alone():
    # rollouts and export use the model's tokenizer: the setting belongs to the SFT rows only
    from lightning_agents.models import load_tokenizer

    data = ChatDataModule(content_format="string", cache_dir=None)
    base = load_tokenizer("embedded:student")
    data._model_tokenizer = lambda: base  # the model a Trainer would attach
    assert data.tokenizer.chat_template_content_format == "string"
    assert getattr(base, "chat_template_content_format", None) is None


def test_topocurate_passes_the_content_format_to_its_rows(tmp_path):
    # TopoCurateDataModule is a ChatDataModule too: its SFT rows must read parts as the served model
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text("")
    data = TopoCurateDataModule(str(rollouts), content_format="string", cache_dir=None)
    data._model_tokenizer = lambda: None
    assert data.content_format == "string"
    assert data.tokenizer.chat_template_content_format == "string"
