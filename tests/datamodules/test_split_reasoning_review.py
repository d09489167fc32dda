"""``split_reasoning_turns`` after its review (session 45): a GLM call's row trains the
``<|observation|>`` its model stops at, TopoCurate windows fit their split rows, the refusal the
setting fixes names it, an agent's greeting gets no row. Real templates from tests/data/chat_templates
on the embedded tokenizer."""

import copy

import pytest
from chat_template_helpers import OURS, WEATHER, labelled_runs
from test_split_reasoning_turns import TRAJECTORY, _module, _templated

from lightning_agents.datamodules.chat import DataFormatError, tokenize_to_dataset
from lightning_agents.datamodules.conversations import normalize_conversation
from lightning_agents.template_clock import render_chat_template


def _rows(tokenizer, record, max_length=4096, **settings):
    messages, tools = normalize_conversation(copy.deepcopy(record))
    rows, errors, dropped = tokenize_to_dataset(
        [{"messages": messages, "tools": tools, "where": "d.jsonl:1"}],
        tokenizer,
        max_length,
        cache_dir=None,
        **settings,
    )
    return [labelled_runs(tokenizer, row) for row in rows], errors, dropped


def test_glm_call_keeps_its_observation_end_in_its_own_row():
    """GLM leaves the last turn open (EOS appended); a call is closed by <|observation|>, which its
    model generates. The split row of a call must train that, as the whole conversation does."""
    glm = _templated(OURS / "glm_4_6.jinja")
    off, errors, _ = _rows(glm, TRAJECTORY)
    assert not errors and off[0][0].endswith("</tool_call><|observation|>")
    on, errors, _ = _rows(glm, TRAJECTORY, split_reasoning_turns=True)
    assert not errors
    assert on[0] == [off[0][0]]  # the call's row labels the call as the whole conversation does
    assert on[1] == [off[0][1]]


def test_topocurate_window_fits_its_split_rows(caplog):
    """Windows are sized on the whole rendering, which drops earlier turns' reasoning; the split row
    of such a turn renders it and must fit max_length too (no row cut inside its trained turn)."""
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    qwen = _templated(OURS / "qwen3_5_4b.jinja")
    thought = " ".join(f"step{i} checks the sum." for i in range(150))
    record = {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": thought},
            {"role": "user", "content": "And 3+3?"},
            {"role": "assistant", "content": "6", "reasoning_content": "Three plus three is six."},
        ]
    }
    whole = len(render_chat_template(qwen, record["messages"], tokenize=True, return_dict=True)["input_ids"])
    dm = TopoCurateDataModule(rollouts="unused.jsonl", cache_dir=None, max_length=whole + 8, split_reasoning_turns=True)
    dm._tokenizer = qwen
    rows = dm.tokenize([copy.deepcopy(record)], "fit")
    ends = [labelled_runs(qwen, row)[-1] for row in rows]
    # every trained turn keeps its end; the first answer is trained with its whole thinking or not at all
    assert all(end.endswith("<|im_end|>") for end in ends), ends


def test_refusal_after_the_users_stop_names_the_setting(tmp_path):
    """tau-bench runs end with the user's ###STOP###: the refusal the setting fixes should name it."""
    record = {
        "messages": [
            *copy.deepcopy(TRAJECTORY["messages"]),
            {"role": "user", "content": "###STOP###"},
        ],
        "tools": [WEATHER],
    }
    qwen = _templated(OURS / "qwen3_5_4b.jinja")
    with pytest.raises(DataFormatError, match=r"split_reasoning_turns"):
        _module(tmp_path, [record], qwen)


def test_an_opening_assistant_turn_gets_no_row_of_its_own(tmp_path):
    """An agent's greeting before any user message (tau2) is a leading turn: a row of it alone is
    refused by templates that need a user message (Qwen3.5: "No user query found")."""
    record = {
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "assistant", "content": "Hi! How can I help you?", "reasoning_content": "Greet the user."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
        ]
    }
    qwen = _templated(OURS / "qwen3_5_4b.jinja")
    off = _module(tmp_path, [record], qwen)
    on = _module(tmp_path, [record], qwen, split_reasoning_turns=True)  # refused today
    assert [labelled_runs(qwen, r) for r in on.datasets["fit"]] == [labelled_runs(qwen, r) for r in off.datasets["fit"]]
