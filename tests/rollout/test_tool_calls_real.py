"""The rollout's tool-call parser on real model outputs and real chat templates.

Two sources of truth. vLLM's own tool-parser tests (``tests/data/tool_call_outputs/vllm_cases.json``,
sources in its README): every string there is parsed as vLLM expects, except for the differences
listed in ``DELIBERATE`` with their reasons. And real chat templates: the call a template renders
(what a model fine-tuned on it writes) must be parsed back into the same call under the style
:func:`tool_call_style` gives the template. Before, Qwen3-Coder/Qwen3.5/Seed-OSS XML calls, GLM-4.5+
``<arg_key>`` calls, Kimi-K2, MiniMax-M2, DeepSeek-V3.1 and V3.2 calls and Mistral Small 3.2's
``[CALL_ID]`` calls were never run: they were read as malformed hermes calls or taken for the model's
final answer. So were gpt-oss (harmony), Gemma 3 / Llama 4 (pythonic), Gemma 4, Command R7B,
Solar-Open and functionary v3.2 calls.
"""

from __future__ import annotations

import json
import logging
import re
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
    ("harmony", "multiple_tools (vLLM passes not-JSON and empty arguments through as text)"): (
        "a call whose arguments are not a JSON object is not run; it stays in the content (malformed), and "
        "empty arguments are {}"
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
    content, calls = got[("harmony", "multiple_tools (vLLM passes not-JSON and empty arguments through as text)")]
    tokyo = {"location": "Tokyo"}
    assert calls == [
        ["get_current_weather", tokyo],
        ["get_user_location", tokyo],
        ["no_content_type", tokyo],
        ["empty_args", {}],
        ["no_args", {}],
    ]
    assert content.endswith("to=functions.not_json_no_content_type<|message|>foo") and malformed_call(
        content, "harmony"
    )


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _rendered_call(tok, string_arguments=False, arguments=None):
    """The assistant's call turn the template renders: the opener (the text between the generation
    prompt and the call's name, what the layout probe reports) and the call up to the turn's stop token."""
    arguments = dict(ARGUMENTS if arguments is None else arguments)
    arguments = json.dumps(arguments) if string_arguments else arguments
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
    if text.rfind("<", 0, start) > text.rfind(">", 0, start):
        # the prompt and the call part inside a tag (Gemma 4's prompt ends with an empty thought
        # channel, `<|channel>`, where the call turn has `<|tool_call>`): the call starts at the tag
        start = text.rfind("<", 0, start)
    name = text.index("get_weather", start)
    # gpt-oss stops at <|call|>, Solar-Open at <|calls|>
    stops = [
        text.find(stop, name) for stop in (tok.eos_token, "<|observation|>", "<|im_end|>", "<|call|>", "<|calls|>")
    ]
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
    ("gpt_oss_120b.jinja", "chat_templates", None, "<|return|>", "harmony", False),
    ("google-gemma-4-31B-it.jinja", "tool_call_outputs/templates", "<bos>", "<turn|>", "gemma4", False),
    ("google-gemma-4-31B-it.jinja", "tool_call_outputs/templates", "<bos>", "<turn|>", "gemma4", True),
    # Command R7B's template is CC-BY-NC-4.0, so it is not vendored: its calls are tested as strings below
    ("upstage-Solar-Open-100B.jinja", "tool_call_outputs/templates", None, "<|end|>", "solar_open", False),
    # its template pastes the arguments as they are: they must be a JSON string
    ("functionary_medium_v3_2.jinja", "chat_templates", "<|begin_of_text|>", "<|eot_id|>", "functionary_v3_2", True),
]
# The templates whose calls the rollout read as final answers before (no style read them).
GEMMA3 = ("vllm-gemma3-pythonic.jinja", "tool_call_outputs/templates", "<bos>", "<end_of_turn>", "pythonic", False)
NEW_STYLE_TEMPLATES = [
    t for t in TEMPLATES if t[4] in ("harmony", "gemma4", "command_r7b", "solar_open", "functionary_v3_2")
] + [GEMMA3]


@pytest.mark.parametrize(
    ("name", "folder", "bos", "eos", "style", "strings"),
    TEMPLATES,
    ids=[t[0] + (" (JSON-string arguments)" if t[5] else "") for t in TEMPLATES],
)
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
    opener = " functools["  # FireFunction v2's calls (` functools[{"name": ...}]`): no style reads them
    with caplog.at_level(logging.WARNING, logger="lightning_agents.rollout.tool_calls"):
        assert tool_call_style(opener) == "hermes"
        tool_call_style(opener)
    assert [r.getMessage().count("' functools['") for r in caplog.records] == [1]


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
        # openers without `>`: the name group ran from each to the end of the reply (17-36 s for 200 kB)
        ("qwen3_coder", "<function=" * 20000),
        ("qwen3_coder", "<function=a>" + "<parameter=" * 20000),
        ("kimi_k2", "functions.a:1 {" * 10000),
        ("minimax_m2", '<invoke name="a"><parameter name="b">' * 10000),
    ],
)
def test_degenerate_replies_are_read_in_linear_time(style, text):
    started = time.perf_counter()
    parse_tool_calls(text, style=style)
    # linear: 0.1-0.3 s here; the quadratic forms took 7-40 s, and a CI machine under load is slower
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize(
    ("name", "folder", "bos", "eos", "style", "strings"),
    NEW_STYLE_TEMPLATES,
    ids=[t[0] + (" (JSON-string arguments)" if t[5] else "") for t in NEW_STYLE_TEMPLATES],
)
def test_new_style_templates_get_their_style_from_their_tokenizer(base, name, folder, bos, eos, style, strings):
    # The path rollouts take: the layout probe's opener, then the style (before: hermes, with a warning).
    tok = tokenizer_with_template(base, (DATA / folder / name).read_text(), bos, eos, SPECIAL_WIDE)
    assert model_tool_call_style(tok) == style


# What reaches the parser from an engine that decodes without special tokens: gpt-oss's harmony
# markers (<|start|>, <|channel|>, <|message|>, <|constrain|>, <|call|>, ...) are all special tokens.
HARMONY_SPECIAL = re.compile(r"<\|(?:start|end|message|channel|constrain|call|return)\|>")


@pytest.mark.parametrize(
    "case",
    [c for c in CASES["cases"] if c["style"] == "harmony" and c["calls"] and (c["style"], c["id"]) not in DELIBERATE],
    ids=lambda c: c["id"],
)
def test_harmony_calls_are_read_from_text_decoded_without_special_tokens(case):
    decoded = HARMONY_SPECIAL.sub("", case["text"])
    assert "<|" not in decoded
    content, calls = parse_tool_calls(decoded, style="harmony")
    assert [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in calls] == case["calls"]
    assert content == (case["content"] or "")  # the analysis channel is not the content here either


@pytest.mark.parametrize(
    ("text", "tools", "name"),
    [
        # gpt-oss's template puts the recipient before the channel: decoded, the channel runs into the name
        (' to=functions.get_weathercommentary json{"city": "Oslo"}', None, "get_weather"),
        (' to=functions.get_weathercommentary json{"city": "Oslo"}', [WEATHER], "get_weather"),
        # a tool whose own name ends in a channel word keeps it
        ('commentary to=functions.add_commentary json{"city": "Oslo"}', None, "add_commentary"),
        (
            ' to=functions.get_commentarycommentary json{"city": "Oslo"}',
            [{"type": "function", "function": {"name": "get_commentary", "parameters": {}}}],
            "get_commentary",
        ),
    ],
)
def test_harmony_names_decoded_without_special_tokens(text, tools, name):
    content, calls = parse_tool_calls(text, style="harmony", tools=tools)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (name, {"city": "Oslo"})
    ]
    assert content == ""


@pytest.mark.parametrize("special_tokens", [True, False], ids=["with_special_tokens", "decoded_without"])
def test_harmony_reasoning_is_not_the_answer(special_tokens):
    # vLLM's openai parser: the analysis channel is reasoning, the final channel the content
    text = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 42.<|return|>"
    text = text if special_tokens else HARMONY_SPECIAL.sub("", text)  # analysisEasy.assistantfinalThe answer...
    assert parse_tool_calls(text, style="harmony") == ("The answer is 42.", [])


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        # Gemma 3's template prints values with tojson: JSON's true/false/null are its literals
        (
            '[f(ok=true, no=false, none=null, n=-3, x=[1, {"k": 2.5}])]',
            {"ok": True, "no": False, "none": None, "n": -3, "x": [1, {"k": 2.5}]},
        ),
        ("[f(t=(1, 2))]", {"t": [1, 2]}),
    ],
)
def test_pythonic_literals(text, arguments):
    _, calls = parse_tool_calls(text, style="pythonic")
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [arguments]


@pytest.mark.parametrize(
    "text",
    [
        "[get_weather(city=Oslo)]",  # a variable
        "[get_weather(city=__import__('os').getcwd())]",  # a call: never evaluated
        "[get_weather(days=1 + 2)]",  # an expression
        "[get_weather('Oslo')]",  # positional
        "[get_weather(**{'city': 'Oslo'})]",
        "[get_weather(n=1e999)]",  # no JSON number
        "[get_weather(s={1, 2})]",  # a set
        "[get_weather(d={1: 'a'})]",  # a key JSON cannot have
        "[os.system(cmd='ls')]",  # not a plain name
        "[get_weather(city='Oslo')",  # cut off
    ],
)
def test_pythonic_non_literal_calls_are_malformed(text):
    content, calls = parse_tool_calls(text, style="pythonic")
    assert calls == [] and content == text and malformed_call(content, "pythonic")


def test_pythonic_prose_is_an_answer_not_a_call():
    # vLLM's pythonic parser reads a reply that is nothing but the list; prose that mentions a list is an answer
    text = "The list is [1, 2] and f(x) is 3."
    assert parse_tool_calls(text, style="pythonic") == (text, []) and not malformed_call(text, "pythonic")


@pytest.mark.parametrize(
    ("style", "text", "content"),
    [
        # Command R7B decoded without its special tokens (<|START_THINKING|>, <|START_ACTION|>, ...)
        (
            "command_r7b",
            'I will check the weather.[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Oslo"}}\n]',
            "I will check the weather.",
        ),
        (
            "command_r7b",
            '<|START_THINKING|>I will check.<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": '
            '"get_weather", "parameters": {"city": "Oslo"}}]<|END_ACTION|>',
            "I will check.",
        ),
        (
            "solar_open",
            'Checking.<|tool_calls|><|tool_call:begin|>x1<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Oslo"}'
            "<|tool_call:end|><|calls|>",
            "Checking.",
        ),
        ("gemma4", '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>', ""),
        # Gemma 4's template given the arguments as a JSON string, as the SFT layout probe gives them
        ("gemma4", 'Checking.<|tool_call>call:get_weather{{"city": "Oslo"}}<tool_call|>', "Checking."),
    ],
)
def test_calls_of_command_r7b_solar_open_and_gemma4(style, text, content):
    got, calls = parse_tool_calls(text, style=style)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert got == content


@pytest.mark.parametrize(
    ("style", "text"),
    [
        ("harmony", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>Oslo<|call|>"),
        ("harmony", 'commentary to=functions.get_weather json{"city": "Oslo"'),  # decoded, cut off
        ("command_r7b", '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city"'),
        ("command_r7b", '[{"tool_call_id": "0", "parameters": {}}]'),  # no name
        ("solar_open", "<|tool_calls|><|tool_call:begin|>x<|tool_call:name|>get_weather<|tool_call:args|>Oslo"),
        ("gemma4", '<|tool_call>call:get_weather{city:<|"|>Oslo}<tool_call|>'),  # unterminated string
        ("gemma4", '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>'),  # unclosed
    ],
)
def test_broken_calls_of_the_harmony_to_gemma4_styles_are_malformed(style, text):
    content, calls = parse_tool_calls(text, style=style)
    assert calls == [] and malformed_call(content, style)


@pytest.mark.parametrize(
    ("style", "text"),
    [
        ("harmony", "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{" * 10000),
        ("harmony", 'to=functions.a json{"k": "' * 10000),
        # the channel words decoding leaves at the end were cut off one copy at a time
        ("harmony", "final " * 160000 + ' to=functions.f json{"a": 1}'),
        ("pythonic", "[a(b=[" * 10000 + "]"),
        ("command_r7b", '<|START_ACTION|>[{"tool_name": "a", "parameters": {' * 10000),
        ("command_r7b", '[{"tool_call_id": "0", "tool_name": "a", "parameters": {"k": "' * 10000),
        # decoding each call against the whole reply was quadratic: 20 s for 40,000 cut calls
        ("solar_open", '<|tool_call:begin|>x<|tool_call:name|>a<|tool_call:args|>{"k": [' * 40000),
        ("gemma4", "<|tool_call>call:a{b:[" * 10000),
        ("gemma4", "<|tool_call>call:a{b:[" * 10000 + "<tool_call|>"),
    ],
)
def test_degenerate_replies_of_the_new_styles_are_read_in_linear_time(style, text):
    started = time.perf_counter()
    parse_tool_calls(text, style=style)
    # linear: 0.1-0.3 s here; the quadratic forms took 7-40 s, and a CI machine under load is slower
    assert time.perf_counter() - started < 5.0


def test_the_gemma3_pythonic_template_call_is_parsed_back(base):
    """vLLM's Gemma 3 pythonic template renders a one-argument call that reads back. With more
    arguments it writes no commas between them (`{% set first = false %}` inside its loop does not
    outlive the iteration in Jinja), text no Python parser reads: the call is malformed, not an answer."""
    tok = tokenizer_with_template(base, (DATA / GEMMA3[1] / GEMMA3[0]).read_text(), GEMMA3[2], GEMMA3[3], SPECIAL_WIDE)
    opener, written = _rendered_call(tok, arguments={"city": "Oslo"})
    assert tool_call_style(opener) == "pythonic" and written == '[get_weather(city="Oslo")]'
    content, calls = parse_tool_calls(written, style="pythonic")
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    _, written = _rendered_call(tok)
    assert written == '[get_weather(city="Oslo"days=3zip="2139")]'
    content, calls = parse_tool_calls(written, style="pythonic")
    assert calls == [] and malformed_call(content, "pythonic")


@pytest.mark.parametrize("special_tokens", [True, False], ids=["with_special_tokens", "decoded_without"])
def test_a_gpt_oss_agent_runs_its_harmony_calls_in_the_rollout_loop(base, special_tokens):
    """The rollout path end to end for gpt-oss: the template's style, then its calls as the engines
    hand them over, with the special tokens (the vLLM server) or decoded without them (HF, vLLM
    offline); before, each call was taken for the final answer and the episode ended unanswered."""
    from lightning_agents.rollout.agent_loop import run_agent_loop

    tok = tokenizer_with_template(
        base, (DATA / "chat_templates" / "gpt_oss_120b.jinja").read_text(), None, "<|return|>", SPECIAL_WIDE
    )
    call = (
        "<|channel|>analysis<|message|>Use the calculator.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.calculator <|constrain|>json<|message|>{{"expression": "{}"}}<|call|>'
    )
    answer = "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 42.<|return|>"
    replies = [call.format("17 + 25"), call.format("42"), answer]
    replies = iter(replies if special_tokens else [HARMONY_SPECIAL.sub("", r) for r in replies])

    class GptOss:
        tokenizer = tok

        def generate(self, conversations, num_samples=1, sampling=None, tools=None):
            return SimpleNamespace(texts=[next(replies) for _ in conversations], truncated=None)

    (rollout,) = run_agent_loop(
        GptOss(), [{"id": "p", "question": "What is 17 + 25?", "answer": "42"}], trials=1, max_turns=4
    )
    calls = [c for m in rollout["traj"] if m.get("tool_calls") for c in m["tool_calls"]]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"expression": "17 + 25"}, {"expression": "42"}]
    assert [m["content"] for m in rollout["traj"] if m["role"] == "tool"] == ["42", "42"]
    # the analysis is the turn's thinking (with its markers; decoded without them it cannot be told apart)
    thinking = {"thinking": "Done."} if special_tokens else {}
    assert rollout["traj"][-1] == {"role": "assistant", "content": "The answer is 42.", **thinking}
    assert rollout["reward"] == 1.0


# llama.cpp's functionary v3.2 parser tests (ggml-org/llama.cpp `tests/test-chat.cpp`, MIT; read from the
# code index, which reported no commit; the `meetkai-functionary-medium-v3.2.jinja` block). vLLM has no
# parser for this format. (model output after the prompt's `>>>`, content, calls)
FUNCTIONARY_CASES = [
    (
        'all\nHello, world!\nnono\nWhat\'s up?>>>special_function\n{"arg1": 1}\n',
        "Hello, world!\nnono\nWhat's up?",
        [["special_function", {"arg1": 1}]],
    ),
    ("python\n# This is a program:\nprint('hey')", "", [["python", {"code": "# This is a program:\nprint('hey')"}]]),
    ('special_function\n{"arg1": 1} \n                    ', "", [["special_function", {"arg1": 1}]]),
    ("all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ('special_function\n{"arg1": 1}', "", [["special_function", {"arg1": 1}]]),
]


@pytest.mark.parametrize(("text", "content", "calls"), FUNCTIONARY_CASES)
def test_llama_cpp_functionary_v3_2_strings_parse_as_llama_cpp_expects(text, content, calls):
    got_content, got = parse_tool_calls(text, style="functionary_v3_2")
    assert (got_content, [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in got]) == (
        content,
        calls,
    )
    assert not malformed_call(got_content, "functionary_v3_2")


def test_a_functionary_v3_2_turn_with_text_and_two_calls_is_parsed_back(base):
    """The whole turn its template renders after the prompt's `>>>`: `all` and the text, then a
    message per call; a call cut short stays in the content as malformed, and `>>>` in an answer
    (Python's prompt) is text."""
    template = (DATA / "chat_templates" / "functionary_medium_v3_2.jinja").read_text()
    tok = tokenizer_with_template(base, template, "<|begin_of_text|>", "<|eot_id|>", SPECIAL_WIDE)
    calls = [
        {"id": f"c{k}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(arguments)}}
        for k, arguments in enumerate([{"city": "Oslo", "days": 3}, {"city": "Bergen", "days": 1}])
    ]
    user = [{"role": "user", "content": "Weather in Oslo and Bergen?"}]
    prompt = _render(tok, user, [WEATHER], add_generation_prompt=True)
    text = _render(tok, [*user, {"role": "assistant", "content": "Checking both.", "tool_calls": calls}], [WEATHER])
    assert text.startswith(prompt) and prompt.endswith(">>>")
    written = text[len(prompt) : text.index("<|eot_id|>", len(prompt))]
    content, parsed = parse_tool_calls(written, style="functionary_v3_2")
    assert content == "Checking both." and not malformed_call(content, "functionary_v3_2")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed] == [
        ("get_weather", c["function"]["arguments"]) for c in calls
    ]
    cut = written[: written.rindex("}") - 3]
    content, parsed = parse_tool_calls(cut, style="functionary_v3_2")
    assert len(parsed) == 1 and malformed_call(content, "functionary_v3_2")
    content, parsed = parse_tool_calls("all\nTry this:\n>>> print(1)\n1", style="functionary_v3_2")
    assert parsed == [] and content == "Try this:\n>>> print(1)\n1" and not malformed_call(content, "functionary_v3_2")


def test_functionary_v3_2_calls_are_read_in_linear_time():
    for unit in ('>>>f\n{"a": ', ">>>", "f\n" * 3 + ">"):
        text = unit * (600_000 // len(unit))
        start = time.perf_counter()
        parse_tool_calls(text, style="functionary_v3_2")
        assert time.perf_counter() - start < 5.0, unit  # 0.25 s here; a loaded CI machine took 2.5 s
