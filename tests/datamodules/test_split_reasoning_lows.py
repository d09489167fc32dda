"""``split_reasoning_turns``: the LOW findings of its review (session 45) mended in session 46.

- A refusal names the setting only where a row that ends with the turn renders its reasoning: the
  template renders the reasoning of a conversation's last turn of that kind (an answer, a tool call,
  a ``<think>`` block), probed once per template (``TemplateLayout.last_turn_reasoning``). Mistral,
  Llama 3 and DeepSeek-R1-Distill render none, and refused the split rows too.
- Skipped and dropped counts name conversations (and the rows of them), not rows alone.
- With ``skip_invalid`` a conversation some of whose rows are refused keeps the rows the template
  labels, and the warning says it is trained in part.
- TopoCurate windows render each split row once, not once per candidate window.

Real templates from tests/data/chat_templates on the embedded tokenizer.
"""

import copy
import json
import logging

import pytest
from chat_template_helpers import OURS, OUTPUTS, WEATHER, labelled_runs
from test_split_reasoning_turns import TRAJECTORY, TWO_QUESTIONS, _module, _templated

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError, tokenize_to_dataset
from lightning_agents.datamodules.conversations import normalize_conversation, template_layout

STOPPED = {  # a tau-bench run: the user's ###STOP### after the answer
    "messages": [*copy.deepcopy(TRAJECTORY["messages"]), {"role": "user", "content": "###STOP###"}],
    "tools": [WEATHER],
}
PLAIN = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}


@pytest.mark.parametrize(
    ("template", "kinds"),
    [
        (OURS / "gpt_oss_120b.jinja", {"answer", "call", "think"}),
        (OURS / "qwen3_5_4b.jinja", {"answer", "call", "think"}),
        (OURS / "kimi_k2_thinking.jinja", {"call", "think"}),
        (OUTPUTS / "google-gemma-4-31B-it.jinja", {"call", "think"}),
        (OURS / "mistral_nemo_2407.jinja", {"think"}),
        (OURS / "deepseek_r1_distill_qwen.jinja", set()),
    ],
    ids=lambda v: getattr(v, "stem", None),
)
def test_the_layout_knows_which_last_turns_keep_their_reasoning(template, kinds):
    assert set(template_layout(_templated(template)).last_turn_reasoning) == kinds


@pytest.mark.parametrize(
    "template",
    ["mistral_nemo_2407.jinja", "deepseek_r1_distill_qwen.jinja", "vllm_llama4_pythonic.jinja", "qwen3_coder.jinja"],
)
@pytest.mark.parametrize("record", [TRAJECTORY, STOPPED], ids=["trajectory", "stopped"])
def test_no_hint_where_the_template_renders_no_reasoning(tmp_path, template, record):
    """The refusal said "set data.split_reasoning_turns: true", whose rows these templates refuse too."""
    tokenizer = _templated(OURS / template)
    with pytest.raises(DataFormatError) as off:
        _module(tmp_path, [record], tokenizer)
    assert "split_reasoning_turns" not in str(off.value)
    assert "not even of one that ends the conversation" in str(off.value)
    assert "remove the reasoning from the data" in str(off.value)
    # the setting would not have helped: its first row is refused as well
    with pytest.raises(DataFormatError, match=r"\(up to message 1\): message 1: the chat template"):
        _module(tmp_path, [record], tokenizer, split_reasoning_turns=True)


@pytest.mark.parametrize("template", [OURS / "gpt_oss_120b.jinja", OURS / "kimi_k2_thinking.jinja"])
@pytest.mark.parametrize("record", [TRAJECTORY, STOPPED], ids=["trajectory", "stopped"])
def test_the_hint_stays_where_a_row_of_its_own_trains_the_turn(tmp_path, template, record):
    """gpt-oss drops a call's analysis once an answer follows; Kimi-K2-Thinking renders a last call's
    reasoning (not a last answer's): the call is trained in its own row with the setting on."""
    tokenizer = _templated(template)
    assert "call" in template_layout(tokenizer).last_turn_reasoning  # what the hint is given on
    with pytest.raises(DataFormatError, match=r"set data\.split_reasoning_turns: true"):
        _module(tmp_path, [record], tokenizer)
    on = _module(tmp_path, [record], tokenizer, split_reasoning_turns=True, skip_invalid=True)
    first = labelled_runs(tokenizer, on.datasets["fit"][0])
    assert len(first) == 1 and "I should call the tool." in first[0] and "Oslo" in first[0]


def test_skipped_counts_conversations_not_rows(tmp_path, caplog):
    """DeepSeek-R1-Distill refuses both rows of a two-question conversation: one conversation lost."""
    r1 = _templated(OURS / "deepseek_r1_distill_qwen.jinja")
    with caplog.at_level(logging.WARNING):
        dm = _module(tmp_path, [TWO_QUESTIONS, PLAIN], r1, split_reasoning_turns=True, skip_invalid=True)
    path = tmp_path / "data.jsonl"
    assert f"{path}: skipped 2 row(s) of 1 conversation(s) that" in caplog.text
    assert "1 conversation(s) skipped whole)" in caplog.text
    assert "in part" not in caplog.text
    assert dm.state_dict()["skipped"] == {"fit": 1}
    assert len(dm.datasets["fit"]) == 1  # PLAIN
    # with the setting off the wording is unchanged
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _module(tmp_path, [TWO_QUESTIONS, PLAIN], r1, skip_invalid=True)
    assert f"{path}: skipped 1 conversation(s) that" in caplog.text and "row(s)" not in caplog.text


def test_a_conversation_trained_in_part_is_kept_and_said(tmp_path, caplog):
    """Kimi-K2-Thinking labels the call's row, not the answer's (its last answer's reasoning is not
    rendered): the call row is kept, and the warning says the conversation is trained in part."""
    kimi = _templated(OURS / "kimi_k2_thinking.jinja")
    with caplog.at_level(logging.WARNING):
        dm = _module(tmp_path, [TRAJECTORY], kimi, split_reasoning_turns=True, skip_invalid=True)
    assert len(dm.datasets["fit"]) == 1
    path = tmp_path / "data.jsonl"
    assert (
        f"{path}: skipped 1 row(s) of 1 conversation(s) that the chat template of tokenizer" in caplog.text
        and f"0 conversation(s) skipped whole, 1 trained in part: their other rows are labelled and kept, first {path}:1"
        in caplog.text
    )
    assert dm.state_dict()["skipped"] == {"fit": 1}


def test_dropped_counts_conversations_not_rows(tmp_path, caplog):
    """The row of the first answer fits max_length; the whole conversation's, whose trained answer
    comes after a long question, keeps no assistant token: one row of one conversation dropped,
    which keeps its other row."""
    record = copy.deepcopy(TWO_QUESTIONS)
    record["messages"][2]["content"] = "And 3+3? " + "Please be careful. " * 200
    qwen = _templated(OURS / "qwen3_5_4b.jinja")
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(record) + "\n")
    dm = ChatDataModule(
        train=str(path), val=None, max_length=256, shuffle=False, cache_dir=None, split_reasoning_turns=True
    )
    dm._tokenizer = qwen
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert len(dm.datasets["fit"]) == 1
    assert "dropped 1 row(s) of 1 conversation(s) with no assistant token within max_length=256" in caplog.text
    assert "0 of those conversations lost every row" in caplog.text
    assert dm.dropped["fit"] == (1, 1)


def test_rows_without_a_location_are_named_by_their_conversation():
    """Rows of conversations without ``where`` (TopoCurate windows) were named ``conversation i`` by
    their index among the rows; ``row_counts`` says how each conversation fared."""
    r1 = _templated(OURS / "deepseek_r1_distill_qwen.jinja")
    conversations = [
        dict(zip(("messages", "tools"), normalize_conversation(copy.deepcopy(r)))) for r in (PLAIN, TWO_QUESTIONS)
    ]
    counts = []
    rows, errors, dropped = tokenize_to_dataset(
        conversations, r1, 4096, skip_invalid=True, cache_dir=None, split_reasoning_turns=True, row_counts=counts
    )
    assert [e.split(": message")[0] for e in errors] == ["conversation 1 (up to message 1)", "conversation 1"]
    assert counts == [(1, 0, 0), (2, 2, 0)]
    assert len(rows) == 1 and dropped == 0


def test_row_counts_come_back_from_the_cache(tmp_path):
    r1 = _templated(OURS / "deepseek_r1_distill_qwen.jinja")
    conversations = [dict(zip(("messages", "tools"), normalize_conversation(copy.deepcopy(TWO_QUESTIONS))))]
    first, again = [], []
    for counts in (first, again):
        tokenize_to_dataset(
            conversations,
            r1,
            4096,
            skip_invalid=True,
            cache_dir=tmp_path,
            split_reasoning_turns=True,
            row_counts=counts,
        )
    assert first == again == [(2, 2, 0)]


def test_topocurate_renders_each_split_row_once(monkeypatch):
    """Sizing the windows of a long conversation rendered every split row of every candidate window;
    the candidates of one start share their rows, which are now rendered once."""
    from lightning_agents.datamodules import topocurate

    qwen = _templated(OURS / "qwen3_5_4b.jinja")
    messages = [{"role": "system", "content": "You are a careful agent."}]
    for k in range(6):
        messages += [
            {"role": "user", "content": f"Question {k}: " + "context " * 30},
            {"role": "assistant", "content": f"Answer {k}.", "reasoning_content": f"Thinking {k} " * 20},
        ]
    rendered = []
    real = topocurate.render_chat_template

    def counted(tokenizer, messages, **kwargs):
        rendered.append(json.dumps(messages, sort_keys=True))
        return real(tokenizer, messages, **kwargs)

    monkeypatch.setattr(topocurate, "render_chat_template", counted)
    dm = topocurate.TopoCurateDataModule(
        rollouts="unused.jsonl", cache_dir=None, max_length=700, split_reasoning_turns=True
    )
    dm._tokenizer = qwen
    rows = dm.tokenize([{"messages": messages, "tools": None}], "fit")
    assert len(rows) > 1  # windows were made
    assert len(rendered) == len(set(rendered))
