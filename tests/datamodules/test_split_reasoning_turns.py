"""``split_reasoning_turns``: SFT rows for multi-turn reasoning data whose chat template drops earlier turns' reasoning.

gpt-oss's template keeps a tool call's analysis only while no final answer follows, so the standard
gpt-oss agent trajectory (user, call with analysis, tool result, answer with analysis) was refused
("message 1: the chat template does not render this turn's reasoning_content ..."); Qwen3's drops
the thinking of answers before the last user message, which were left as context only. With the
setting each such turn is trained in a row that ends with it, as an engine fed it to the model.
"""

import copy
import json
import logging
import os

import pytest
from chat_template_helpers import OURS, REAL_TEMPLATES, SHARED, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError, tokenize_to_dataset
from lightning_agents.datamodules.conversations import normalize_conversation, tokenize_many
from lightning_agents.models import load_tokenizer

CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
# The standard gpt-oss agent trajectory: the call's analysis, the tool's result, the answer's analysis.
TRAJECTORY = {
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Oslo: 3 C, snow"},
        {"role": "assistant", "content": "It is snowing.", "reasoning_content": "The tool said snow."},
    ],
    "tools": [WEATHER],
}
TWO_QUESTIONS = {
    "messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "Three plus three is six."},
    ]
}
GPT_OSS_ROWS = [
    [
        "<|channel|>analysis<|message|>I should call the tool.<|end|><|start|>assistant to=functions.get_weather"
        '<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>'
    ],
    [
        "<|channel|>analysis<|message|>The tool said snow.<|end|><|start|>assistant<|channel|>final<|message|>It is snowing.<|return|>"
    ],
]
QWEN3_ROWS = [
    ["Two plus two is four.\n</think>\n\n4<|im_end|>"],
    ["Three plus three is six.\n</think>\n\n6<|im_end|>"],
]


def _templated(path):
    eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


def _module(tmp_path, records, tokenizer, **settings):
    """A ChatDataModule on a JSONL file of ``records`` with ``tokenizer``, set up for fit."""
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = {"cache_dir": None, **settings}
    dm = ChatDataModule(train=str(path), val=None, max_length=4096, shuffle=False, **settings)
    dm._tokenizer = tokenizer
    dm.setup("fit")
    return dm


def _runs(dm):
    return [labelled_runs(dm.tokenizer, row) for row in dm.datasets["fit"]]


@pytest.fixture(scope="module")
def gpt_oss():
    return _templated(OURS / "gpt_oss_120b.jinja")


def test_gpt_oss_trajectory_trains_the_call_with_its_analysis(tmp_path, gpt_oss):
    dm = _module(tmp_path, [TRAJECTORY], gpt_oss, split_reasoning_turns=True)
    assert _runs(dm) == GPT_OSS_ROWS
    # the second row holds the call as context, without its analysis (the template drops it there)
    text = gpt_oss.decode(dm.datasets["fit"][1]["input_ids"])
    assert "I should call the tool." not in text and '{"city": "Oslo"}<|call|>' in text


def test_gpt_oss_trajectory_off_is_refused_naming_the_setting(tmp_path, gpt_oss):
    with pytest.raises(DataFormatError, match=r"data\.jsonl:1: message 1: .*set data\.split_reasoning_turns: true"):
        _module(tmp_path, [TRAJECTORY], gpt_oss)
    # DeepSeek-R1-Distill drops the reasoning of the last answer too: with no later assistant turn,
    # a row of its own would not help, so that refusal does not name the setting
    r1 = _templated(OURS / "deepseek_r1_distill_qwen.jinja")
    one = normalize_conversation(copy.deepcopy(TWO_QUESTIONS))[0][:2]
    (error,) = tokenize_many(r1, [(one, None)], 4096, stripped_reasoning="context")
    assert "so only the answer would be trained" in str(error)
    assert "split_reasoning_turns" not in str(error)


# Qwen3.5's generation prompt opens the think block, Qwen3's leaves it to the model.
@pytest.mark.parametrize(
    ("template", "opener"),
    [(OURS / "qwen3_5_4b.jinja", ""), (SHARED / "qwen3.jinja", "<think>\n")],
    ids=["qwen3_5_4b", "qwen3"],
)
def test_qwen3_first_answer_is_trained_with_its_thinking(tmp_path, template, opener, caplog):
    if not template.is_file():
        pytest.skip(f"{template} is absent (../shared/data)")
    tokenizer = _templated(template)
    with caplog.at_level(logging.WARNING):
        dm = _module(tmp_path, [TWO_QUESTIONS], tokenizer, split_reasoning_turns=True)
    expected = [[opener + run for run in row] for row in QWEN3_ROWS]
    assert _runs(dm) == expected
    assert "context only" not in caplog.text
    off = _module(tmp_path, [TWO_QUESTIONS], tokenizer)
    assert _runs(off) == expected[1:]  # today: the first answer is context only


def test_a_run_that_ends_with_the_users_stop_trains_its_last_answer(tmp_path):
    # tau-bench runs end with the user's ###STOP###, after which Qwen3 drops the last answer's
    # thinking too: that answer gets a row of its own, and the whole run, with nothing left to train, none
    record = copy.deepcopy(TWO_QUESTIONS)
    record["messages"].append({"role": "user", "content": "###STOP###"})
    qwen = _templated(OURS / "qwen3_5_4b.jinja")
    with pytest.raises(DataFormatError, match=r"drops the reasoning of every trainable assistant turn"):
        _module(tmp_path, [record], qwen)
    dm = _module(tmp_path, [record], qwen, split_reasoning_turns=True)
    assert _runs(dm) == QWEN3_ROWS


@pytest.mark.parametrize("template", ["qwen3_5_4b.jinja", "gpt_oss_120b.jinja"])
def test_off_rows_are_todays(tmp_path, template):
    """Off (the default), the rows are those of the unchanged pipeline (tokenize_many as before)."""
    tokenizer = _templated(OURS / template)
    plain = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    records = [TWO_QUESTIONS, plain] if template.startswith("qwen") else [plain]
    dm = _module(tmp_path, records, tokenizer)
    expected = tokenize_many(
        tokenizer, [normalize_conversation(copy.deepcopy(r)) for r in records], 4096, stripped_reasoning="context"
    )
    got = dm.datasets["fit"]
    assert [list(r["input_ids"]) for r in got] == [list(r["input_ids"]) for r in expected]
    assert [list(r["labels"]) for r in got] == [list(r["labels"]) for r in expected]
    # a conversation with no turn to split gives the same rows with the setting on
    on = _module(tmp_path, [plain], tokenizer, split_reasoning_turns=True)
    assert on.datasets["fit"][0]["input_ids"] == dm.datasets["fit"][-1]["input_ids"]
    assert on.datasets["fit"][0]["labels"] == dm.datasets["fit"][-1]["labels"]


@pytest.mark.parametrize("value", ["false", 1, None])
def test_a_setting_that_is_not_a_bool_is_refused(value):
    with pytest.raises(ValueError, match=r"data\.split_reasoning_turns must be true or false, got"):
        ChatDataModule(split_reasoning_turns=value)


def test_cache_key_changes_with_the_setting(tmp_path, gpt_oss):
    plain = [
        {
            "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
            "tools": None,
        }
    ]
    cache = tmp_path / "cache"
    tokenize_to_dataset(plain, gpt_oss, 4096, cache_dir=cache)
    tokenize_to_dataset(plain, gpt_oss, 4096, cache_dir=cache, split_reasoning_turns=True)
    assert len(os.listdir(cache)) == 2  # the same payload, another key
    tokenize_to_dataset(plain, gpt_oss, 4096, cache_dir=cache, split_reasoning_turns=True)
    assert len(os.listdir(cache)) == 2  # and that key is reused


def test_a_split_row_the_template_refuses_names_the_record_and_turn(tmp_path, caplog):
    # DeepSeek-R1-Distill drops the reasoning of every turn, the last one's too
    r1 = _templated(OURS / "deepseek_r1_distill_qwen.jinja")
    with pytest.raises(DataFormatError, match=r"data\.jsonl:1 \(up to message 1\): message 1: the chat template"):
        _module(tmp_path, [TWO_QUESTIONS], r1, split_reasoning_turns=True)
    with caplog.at_level(logging.WARNING):
        dm = _module(tmp_path, [TWO_QUESTIONS], r1, split_reasoning_turns=True, skip_invalid=True)
    # one warning for the file, both rows and their one conversation counted
    assert f"{tmp_path / 'data.jsonl'}: skipped 2 row(s) of 1 conversation(s)" in caplog.text
    assert [e.split(": message")[0] for e in dm.skipped["fit"]] == [
        f"{tmp_path / 'data.jsonl'}:1 (up to message 1)",
        f"{tmp_path / 'data.jsonl'}:1",
    ]


def test_weight_0_turn_with_dropped_reasoning_is_context_not_refused(tmp_path, gpt_oss):
    record = copy.deepcopy(TRAJECTORY)
    record["messages"][1]["weight"] = 0
    dm = _module(tmp_path, [record], gpt_oss)
    assert _runs(dm) == GPT_OSS_ROWS[1:]


def test_split_rows_of_a_conversation():
    from lightning_agents.datamodules.reasoning_turns import split_reasoning_turns

    messages, tools = normalize_conversation(copy.deepcopy(TRAJECTORY))
    messages += [
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Sun.", "reasoning_content": "Guess.", "weight": 0},
        {"role": "user", "content": "Sure?"},
        {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "<think>It was sunny.</think>Forecast.", "weight": 0},
    ]
    before = copy.deepcopy(messages)
    rows = split_reasoning_turns({"messages": messages, "tools": tools, "where": "f.jsonl:7"})
    assert messages == before  # not modified
    # rows for the call and the first answer; the weight-0 turns, the turn without reasoning and the
    # last assistant turn get none; in the whole conversation only the turn without reasoning is trained
    assert [r["where"] for r in rows] == ["f.jsonl:7 (up to message 1)", "f.jsonl:7 (up to message 3)", "f.jsonl:7"]
    # the call's row runs through its result: the template closes the call where the result opens
    assert [len(r["messages"]) for r in rows] == [3, 4, len(messages)]
    weights = [[m.get("weight") for m in r["messages"] if m["role"] == "assistant"] for r in rows]
    assert weights == [[None], [0, None], [0, 0, 0, None, 0]]
    assert all(r["tools"] == tools for r in rows)


def test_whole_conversation_without_a_trained_turn_left_is_dropped():
    from lightning_agents.datamodules.reasoning_turns import split_reasoning_turns

    messages = copy.deepcopy(TWO_QUESTIONS["messages"])
    messages[3]["weight"] = 0
    rows = split_reasoning_turns({"messages": messages, "tools": None})
    assert len(rows) == 1 and rows[0]["messages"] == messages[:2]
    plain = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    assert split_reasoning_turns(plain) == [plain]


def test_the_as_written_fallback_is_split_alike_or_the_conversation_kept_whole():
    from lightning_agents.datamodules.reasoning_turns import split_reasoning_turns

    messages = normalize_conversation(copy.deepcopy(TWO_QUESTIONS))[0]
    plain = [{**m, "content": m["content"] + " (as written)"} for m in messages]
    rows = split_reasoning_turns(
        {"messages": messages, "tools": None, "as_written": {"messages": plain, "tools": None}}
    )
    assert [r["as_written"]["messages"] for r in rows] == [
        plain[:2],
        [plain[0], {**plain[1], "weight": 0}, plain[2], plain[3]],
    ]
    # a fallback whose messages do not line up (text calls merged differently): not split
    conversation = {"messages": messages, "tools": None, "as_written": {"messages": plain[:3], "tools": None}}
    assert split_reasoning_turns(conversation) == [conversation]


def test_topocurate_tokenizes_with_the_setting(tmp_path, gpt_oss):
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    dm = TopoCurateDataModule(
        rollouts=str(tmp_path / "unused.jsonl"), cache_dir=None, max_length=4096, split_reasoning_turns=True
    )
    dm._tokenizer = gpt_oss
    rows = dm.tokenize([copy.deepcopy(TRAJECTORY)], "fit")
    assert [labelled_runs(gpt_oss, row) for row in rows] == GPT_OSS_ROWS


def _config(tmp_path, name="config.yaml", **data):
    """A fit config of the embedded student (it has ``<|im_end|>``) with Qwen3.5's template on TWO_QUESTIONS."""
    import yaml

    (tmp_path / "d.jsonl").write_text(json.dumps(TWO_QUESTIONS) + "\n")
    init = {"train": str(tmp_path / "d.jsonl"), "val": None, "max_length": 4096, "cache_dir": None}
    init["chat_template"] = str(OURS / "qwen3_5_4b.jinja")
    config = {
        "model": {"class_path": "SFTModule", "init_args": {"model": "embedded:student"}},
        "data": {"class_path": "ChatDataModule", "init_args": {**init, **data}},
        "trainer": {"accelerator": "cpu", "max_steps": 1, "logger": False, "enable_checkpointing": False},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_setting_from_yaml_and_the_command_line(tmp_path, capsys):
    from lightning_agents.cli import cli_main

    for args in (
        ["--config", _config(tmp_path, "on.yaml", split_reasoning_turns=True)],
        ["--config", _config(tmp_path), "--data.split_reasoning_turns", "true"],
    ):
        data = cli_main(args, run=False).datamodule
        assert data.split_reasoning_turns is True
        data.setup("fit")
        assert len(data.datasets["fit"]) == 2
    off = cli_main(["--config", _config(tmp_path)], run=False).datamodule
    off.setup("fit")
    assert off.split_reasoning_turns is False and len(off.datasets["fit"]) == 1
    with pytest.raises(SystemExit):
        cli_main(["--config", _config(tmp_path), "--data.split_reasoning_turns", "maybe"], run=False)
    assert "split_reasoning_turns" in capsys.readouterr().err
