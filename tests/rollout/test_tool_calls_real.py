"""The rollout's tool-call parser on real model outputs and real chat templates.

Two sources of truth. vLLM's own tool-parser tests (``tests/data/tool_call_outputs/vllm_cases.json``,
sources in its README): every string there is parsed as vLLM expects, except for the differences
listed in ``DELIBERATE`` with their reasons. And real chat templates: the call a template renders
(what a model fine-tuned on it writes) must be parsed back into the same call under the style
:func:`tool_call_style` gives the template. Before, Qwen3-Coder/Qwen3.5/Seed-OSS XML calls, GLM-4.5+
``<arg_key>`` calls, Kimi-K2, MiniMax-M2, DeepSeek-V3.1 and V3.2 calls and Mistral Small 3.2's
``[CALL_ID]`` calls were never run: they were read as malformed hermes calls or taken for the model's
final answer.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template

from lightning_agents.datamodules.conversations import _render
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.agent_turn import model_tool_call_style
from lightning_agents.rollout.tool_calls import malformed_call, parse_tool_calls, tool_call_style

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = json.loads((DATA / "tool_call_outputs" / "vllm_cases.json").read_text())
# (style, case id) -> why we differ from vLLM on purpose, and what we return instead.
DELIBERATE = {
    ("llama3_json", "simple (text around the call)"): "vLLM drops the prose around the calls; we keep it as content",
    ("llama3_json", "multiple_json_with_surrounding_text"): "the same",
    ("mistral", "v11 complex (unterminated arguments)"): (
        "vLLM runs the call with its arguments cut off; we run no call with broken arguments and tell the "
        "model its call was malformed"
    ),
    ("deepseek_v3", "malformed_input[1] (no call-begin token)"): (
        "we read calls whose marker tokens were decoded away (the engines decode without special tokens)"
    ),
    ("glm4_moe", "mixed_content (vLLM keeps only the text before the first call)"): (
        "we keep all the text outside the calls"
    ),
    ("kimi_k2", "invalid_json (vLLM returns the broken arguments as they are)"): (
        "a call with broken arguments is not run; it stays in the content"
    ),
    ("deepseek_v32", "with_end_of_sentence_token"): (
        "vLLM drops the end-of-sentence token; we leave it in the content (the engines decode without it)"
    ),
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}},
            "required": ["city", "days"],
        },
    },
}
# "zip" is a string of digits: typed by the schema it stays a string, where a guess would make it 2139.
ARGUMENTS = {"city": "Oslo", "days": 3, "zip": "2139"}
SCHEMA_STYLES = ("qwen3_coder", "glm4_moe", "minimax_m2", "deepseek_v32")


def _parse(text, style, tools=None, **kwargs):
    # Only the styles whose values are text take the schemas (the others' calls carry JSON).
    return parse_tool_calls(text, style=style, **({"tools": tools} if style in SCHEMA_STYLES else {}), **kwargs)


def _outcome(case):
    content, calls = _parse(case["text"], case["style"], CASES["tools"].get(case["style"]))
    return content, [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in calls]


@pytest.mark.parametrize(
    "case",
    [c for c in CASES["cases"] if (c["style"], c["id"]) not in DELIBERATE],
    ids=lambda c: f"{c['style']}:{c['id']}",
)
def test_vllm_test_strings_parse_as_vllm_expects(case):
    content, calls = _outcome(case)
    assert calls == case["calls"]
    if case["content"] != "ANY":
        # vLLM's None is no content; ours is stripped, vLLM's keeps the spaces before a Kimi call
        assert content == (case["content"] or "").strip()
    if not calls and case["calls"] == [] and case["content"] == "ANY":
        # vLLM's malformed inputs: no call, and the model is told its call was malformed
        assert malformed_call(content, case["style"])


def test_the_deliberate_differences_from_vllm():
    by_key = {(c["style"], c["id"]): c for c in CASES["cases"]}
    assert set(DELIBERATE) <= set(by_key)
    got = {key: _outcome(by_key[key]) for key in DELIBERATE}
    prose = got[("llama3_json", "simple (text around the call)")]
    assert prose == ("Here is the result:\nWould you like to know more?", [["getOpenIncidentsTool", {}]])
    cut = by_key[("mistral", "v11 complex (unterminated arguments)")]
    content, calls = got[("mistral", "v11 complex (unterminated arguments)")]
    assert calls == [] and content == cut["text"] and malformed_call(content, "mistral")
    assert got[("deepseek_v3", "malformed_input[1] (no call-begin token)")][1] == [["get_weather", {"city": "Tokyo"}]]
    content, calls = got[("glm4_moe", "mixed_content (vLLM keeps only the text before the first call)")]
    assert [c[1]["city"] for c in calls] == ["Beijing", "Shanghai"] and "Shanghai." in content
    content, calls = got[("kimi_k2", "invalid_json (vLLM returns the broken arguments as they are)")]
    assert calls == [["valid_get_weather", {"city": "Shanghai"}]] and "invalid_get_weather" in content
    content, calls = got[("deepseek_v32", "with_end_of_sentence_token")]
    assert content == "<｜end▁of▁sentence｜>" and calls == [
        ["get_weather", {"location": "Hangzhou", "date": "2024-01-16"}]
    ]


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _rendered_call(tok, string_arguments=False):
    """The assistant's call turn the template renders: the opener (the text between the generation
    prompt and the call's name, what the layout probe reports) and the call up to the turn's stop token."""
    arguments = json.dumps(ARGUMENTS) if string_arguments else dict(ARGUMENTS)
    call = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    user = [{"role": "user", "content": "Weather in Oslo for 3 days?"}]
    conversation = [
        *user,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "3 C"},
        {"role": "assistant", "content": "It is 3 C."},
    ]
    prompt = _render(tok, user, [WEATHER], add_generation_prompt=True)
    text = _render(tok, conversation, [WEATHER])
    start = (
        next(i for i, (a, b) in enumerate(zip(prompt, text)) if a != b) if not text.startswith(prompt) else len(prompt)
    )
    name = text.index("get_weather", start)
    stops = [text.find(stop, name) for stop in (tok.eos_token, "<|observation|>", "<|im_end|>")]
    return text[start:name], text[start : min(at for at in stops if at > 0)]


# template file, folder, bos, eos, style, template needs JSON-string arguments
TEMPLATES = [
    ("qwen3_coder.jinja", "chat_templates", None, "<|im_end|>", "qwen3_coder", False),
    ("qwen3_5_4b.jinja", "chat_templates", None, "<|im_end|>", "qwen3_coder", False),
    ("seed_oss.jinja", "chat_templates", "<seed:bos>", "<seed:eos>", "qwen3_coder", False),
    ("minimax_m2.jinja", "chat_templates", None, "[e~[", "minimax_m2", False),
    (
        "deepseek_v3_2.jinja",
        "chat_templates",
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        "deepseek_v32",
        False,
    ),
    ("glm_4_6.jinja", "chat_templates", None, "<|endoftext|>", "glm4_moe", False),
    ("moonshotai-Kimi-K2.jinja", "tool_call_outputs/templates", None, "<|im_end|>", "kimi_k2", False),
    (
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "tool_call_outputs/templates",
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        "deepseek_v3",
        False,  # its `arguments | tojson` quotes a JSON string a second time; the layout probe gives it dicts
    ),
    ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "tool_call_outputs/templates", "<s>", "</s>", "mistral", False),
]


@pytest.mark.parametrize(("name", "folder", "bos", "eos", "style", "strings"), TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_the_call_a_real_template_renders_is_parsed_back(base, name, folder, bos, eos, style, strings):
    template = (DATA / folder / name).read_text()
    tok = tokenizer_with_template(base, template, bos, eos, SPECIAL_WIDE)
    opener, written = _rendered_call(tok, strings)
    assert tool_call_style(opener) == style, opener
    content, calls = _parse(written, style, [WEATHER], id_prefix="call_1")
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", ARGUMENTS)
    ], written
    assert not malformed_call(content, style)


@pytest.mark.parametrize("name", ["qwen3_coder.jinja", "qwen3_5_4b.jinja", "seed_oss.jinja"])
def test_xml_call_templates_get_the_xml_style_from_their_tokenizer(base, name):
    # The path rollouts take: the layout probe's opener, then the style.
    bos, eos = ("<seed:bos>", "<seed:eos>") if name.startswith("seed") else (None, "<|im_end|>")
    tok = tokenizer_with_template(base, (DATA / "chat_templates" / name).read_text(), bos, eos, SPECIAL_WIDE)
    assert model_tool_call_style(tok) == "qwen3_coder"


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        # schema-less values: JSON where it reads as JSON, Python's constants (templates print with |string)
        (
            "<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=ok>\nTrue\n</parameter>\n</function>",
            {"n": 3, "ok": True},
        ),
        (
            "<function=f>\n<parameter=zip>\n02139\n</parameter>\n<parameter=q>\nhello world\n</parameter>\n</function>",
            {"zip": "02139", "q": "hello world"},
        ),
        ("<function=f>\n<parameter=d>\n{'k': [1, 2]}\n</parameter>\n</function>", {"d": {"k": [1, 2]}}),
        # Python literals with no JSON form stay text (json.dumps of a set raised inside the rollout)
        ("<function=f>\n<parameter=s>\n{1, 2}\n</parameter>\n</function>", {"s": "{1, 2}"}),
        # functionary v3.1 / Llama 3.1's <function=name>{json}</function>
        ('<function=f>{"n": 3}</function>', {"n": 3}),
        # Qwen3.5 falling back to Qwen3's JSON call inside the tags
        ('<tool_call>\n{"name": "f", "arguments": {"n": 3}}\n</tool_call>', {"n": 3}),
    ],
)
def test_xml_values_without_a_schema(text, arguments):
    _, calls = parse_tool_calls(text, style="qwen3_coder")
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [arguments]


def test_xml_values_that_do_not_fit_their_schema_stay_text():
    # float("nan") and float("inf") are Python's; json.dumps would write them as NaN, which is not JSON
    text = "<function=f>\n<parameter=x>\nnan\n</parameter>\n<parameter=n>\nthree\n</parameter>\n</function>"
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"properties": {"x": {"type": "number"}, "n": {"type": "integer"}}},
            },
        }
    ]
    _, calls = parse_tool_calls(text, style="qwen3_coder", tools=tools)
    assert calls[0]["function"]["arguments"] == '{"x": "nan", "n": "three"}'


@pytest.mark.parametrize(
    ("style", "text"),
    [
        ("qwen3_coder", "<function=get_weather>Oslo</function>"),  # text that is neither parameters nor JSON
        ("qwen3_coder", "<tool_call>\n<function=>\n</function>\n</tool_call>"),
        ("glm4_moe", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>"),  # unclosed
        ("kimi_k2", '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Oslo"'),
        ("minimax_m2", '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>'),
    ],
)
def test_broken_calls_of_the_new_styles_are_malformed_not_answers(style, text):
    content, calls = parse_tool_calls(text, style=style)
    assert calls == [] and malformed_call(content, style)


def test_an_unknown_call_form_is_reported_once(caplog):
    opener = "<|tool_call>call:"  # Gemma 4's calls: no style reads them
    with caplog.at_level(logging.WARNING, logger="lightning_agents.rollout.tool_calls"):
        assert tool_call_style(opener) == "hermes"
        tool_call_style(opener)
    assert [r.getMessage().count("<|tool_call>call:") for r in caplog.records] == [1]


def test_a_qwen3_coder_agent_runs_its_xml_calls_in_the_rollout_loop(base):
    """The rollout path end to end: the template's style, the call parsed, its value typed by the
    world's schema (the calculator's expression "42" stays a string) and run."""
    from lightning_agents.rollout.agent_loop import run_agent_loop

    tok = tokenizer_with_template(
        base, (DATA / "chat_templates" / "qwen3_coder.jinja").read_text(), None, "<|im_end|>", SPECIAL_WIDE
    )
    call = "<tool_call>\n<function=calculator>\n<parameter=expression>\n{}\n</parameter>\n</function>\n</tool_call>"
    replies = iter([call.format("17 + 25"), call.format("42"), "The answer is 42."])

    class QwenCoder:
        tokenizer = tok

        def generate(self, conversations, num_samples=1, sampling=None, tools=None):
            return SimpleNamespace(texts=[next(replies) for _ in conversations], truncated=None)

    (rollout,) = run_agent_loop(
        QwenCoder(), [{"id": "p", "question": "What is 17 + 25?", "answer": "42"}], trials=1, max_turns=4
    )
    tool_messages = [m for m in rollout["traj"] if m["role"] == "tool"]
    calls = [c for m in rollout["traj"] if m.get("tool_calls") for c in m["tool_calls"]]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"expression": "17 + 25"}, {"expression": "42"}]
    assert [m["content"] for m in tool_messages] == ["42", "42"]
    assert rollout["reward"] == 1.0


@pytest.mark.parametrize(
    ("style", "text"),
    [
        # unclosed calls, one after another: a lazy group running to the end of the reply from each
        # of them is quadratic (the first DeepSeek-V3.1 pattern took 80 s on 640 kB)
        ("deepseek_v3", "<｜tool▁call▁begin｜>a<｜tool▁sep｜>" * 8000),
        ("glm4_moe", "<tool_call>a<arg_key>" * 10000),
        ("qwen3_coder", "<function=a><parameter=b>" * 10000),
        ("kimi_k2", "functions.a:1 {" * 10000),
        ("minimax_m2", '<invoke name="a"><parameter name="b">' * 10000),
    ],
)
def test_degenerate_replies_are_read_in_linear_time(style, text):
    started = time.perf_counter()
    parse_tool_calls(text, style=style)
    assert time.perf_counter() - started < 2.0
