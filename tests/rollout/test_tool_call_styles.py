"""Agents call tools in their chat template's format: the rollout parser reads each of them.

Round trip on real templates: the assistant turn a template renders for a tool call (what the model
learned to write) is parsed back into the same call. Before, only ``<tool_call>`` blocks were read,
so a Llama or Mistral agent's first call was taken for its final answer and the episode ended.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from chat_template_helpers import SPECIAL_WIDE, WEATHER, tokenizer_with_template

from lightning_agents.datamodules.conversations import normalize_conversation, render_conversation
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.agent_turn import model_tool_call_style
from lightning_agents.rollout.tool_calls import malformed_call, parse_tool_calls

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
# template file, where it lives, eos, style it must be read as
TEMPLATES = [
    ("qwen2_5.jinja", "shared", "<|im_end|>", "hermes"),
    ("qwen3.jinja", "shared", "<|im_end|>", "hermes"),
    ("llama3_1.jinja", "shared", "<|eot_id|>", "llama3_json"),
    ("llama3_2.jinja", "shared", "<|eot_id|>", "llama3_json"),
    ("deepseekv3.jinja", "shared", "<｜end▁of▁sentence｜>", "deepseek_v3"),
    ("mistral_nemo_2407.jinja", "fixture", "</s>", "mistral"),
    ("hermes_tool_use.jinja", "fixture", "<|im_end|>", "hermes"),
    ("qwq_32b.jinja", "fixture", "<|im_end|>", "hermes"),
    ("vllm_internlm2_tool.jinja", "fixture", "<|im_end|>", "json_after:<|action_start|><|plugin|>"),
]


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _tokenizer(base, path, eos):
    return tokenizer_with_template(base, path.read_text(), None, eos, SPECIAL_WIDE)


def _written_call(tok, eos, arguments):
    """The text a model trained on this template writes for a call: the assistant turn's labelled
    span (what SFT on the template teaches), without its end-of-turn token."""
    call = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "3 C"},
        {"role": "assistant", "content": "It is 3 C."},
    ]
    messages, tools = normalize_conversation({"messages": messages, "tools": [WEATHER]})
    text, spans = render_conversation(tok, messages, tools)
    written = text[spans[0][0] : spans[0][1]]
    assert written.endswith(eos)
    return written[: -len(eos)]


@pytest.mark.parametrize(("name", "where", "eos", "style"), TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_the_call_a_template_renders_is_parsed_back(base, shared_data, name, where, eos, style):
    path = (shared_data / "chat_templates" if where == "shared" else FIXTURES) / name
    tok = _tokenizer(base, path, eos)
    assert model_tool_call_style(tok) == style
    arguments = {"city": "Oslo", "units": "metric"}
    written = _written_call(tok, eos, json.dumps(arguments))
    content, calls = parse_tool_calls(written, id_prefix="call_3", style=style)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", arguments)
    ], written
    assert content == "" and not malformed_call(content, style)


@pytest.mark.parametrize(
    ("style", "text", "names"),
    [
        (
            "llama3_json",
            '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}',
            ["a", "b"],
        ),
        ("mistral", '[{"name": "a", "arguments": {"x": 1}}]', ["a"]),  # decoded without its special tokens
        ("mistral", 'Let me check.[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{}', ["a", "b"]),
        ("mistral", 'a{"x": 1}', ["a"]),  # the same, decoded without special tokens
        ("deepseek_v3", 'functiona\n```json\n{"x": 1}\n```', ["a"]),  # markers decoded away
        ("llama3_json", '{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}', ["a", "b"]),
        # Nemotron: a list between tags of its own
        (
            "json_after:<TOOLCALL>",
            'Checking.<TOOLCALL>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]</TOOLCALL>',
            ["a", "b"],
        ),
        (
            "json_after:<|action_start|><|plugin|>",
            '\n{"name": "a", "parameters": {"x": 1}}',
            ["a"],
        ),  # markers decoded away
    ],
)
def test_other_forms_of_each_style(style, text, names):
    _, calls = parse_tool_calls(text, style=style)
    assert [c["function"]["name"] for c in calls] == names


@pytest.mark.parametrize(
    ("style", "text", "malformed"),
    [
        ("llama3_json", "The weather in Oslo is 3 C.", False),
        ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Oslo"', True),
        ("mistral", "It is 3 C in Oslo.", False),
        ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": ', True),
        ("deepseek_v3", "Snowing, 3 C.", False),
        ("json_after:<TOOLCALL>", "It is 3 C.", False),
        ("json_after:<TOOLCALL>", '<TOOLCALL>[{"name": "get_weather", "arguments": ', True),
    ],
)
def test_answers_and_broken_calls(style, text, malformed):
    content, calls = parse_tool_calls(text, style=style)
    assert calls == [] and malformed_call(content, style) == malformed


def test_a_llama_agent_runs_its_tools_in_the_rollout_loop(base, shared_data):
    from lightning_agents.rollout.agent_loop import run_agent_loop

    tok = _tokenizer(base, shared_data / "chat_templates" / "llama3_1.jinja", "<|eot_id|>")
    replies = iter(['{"name": "calculator", "parameters": {"expression": "17 + 25"}}', "The answer is 42."])

    class Llama:
        tokenizer = tok

        def generate(self, conversations, num_samples=1, sampling=None, tools=None):
            return SimpleNamespace(texts=[next(replies) for _ in conversations], truncated=None)

    (rollout,) = run_agent_loop(
        Llama(), [{"id": "p", "question": "What is 17 + 25?", "answer": "42"}], trials=1, max_turns=3
    )
    roles = [m["role"] for m in rollout["traj"]]
    assert roles.count("tool") == 1 and rollout["traj"][-2]["content"] == "42"
    assert rollout["reward"] == 1.0


@pytest.mark.parametrize(
    "text, style",
    [
        ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "hermes"),
        ('<tool_call>{"name": "  ", "arguments": {"x": 1}}</tool_call>', "hermes"),
        ('{"name": "", "parameters": {}}', "llama3_json"),
    ],
)
def test_a_call_with_an_empty_name_is_malformed_not_a_call(text, style):
    # The embedded student sampled `"name": ""`: the rollout wrote a call that curate's reader
    # (rightly) refuses as nameless, and the README's rollout -> curate recipe stopped there.
    content, calls = parse_tool_calls(text, style=style)
    assert calls == [] and malformed_call(content, style)


def test_a_botched_block_beside_a_good_call_is_reported_and_the_good_call_runs():
    """Before: the good ``<tool_call>`` ran and the broken one stayed in the content unreported, so
    RL never told the model its second call was not read."""
    from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, start_episode
    from lightning_agents.tasks.arithmetic import CalculatorTask

    task = CalculatorTask()
    episode = start_episode(task, task.problems[0])
    good = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    step = apply_reply(episode, ModelReply(good + '\n<tool_call>{"name": "calculator", "arguments": {"expr'))
    assert step.malformed and episode.malformed == 1 and not episode.finished
    assert [r["name"] for r in step.replies] == ["calculator", "invalid"]
    assert step.replies[0]["content"] == "5" and step.replies[1]["content"].startswith("error: malformed tool call")
    # A reply of good calls alone is not malformed.
    clean = apply_reply(start_episode(task, task.problems[0]), ModelReply(good))
    assert not clean.malformed and [r["name"] for r in clean.replies] == ["calculator"]
