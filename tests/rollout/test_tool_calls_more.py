"""LFM2's tool calls, and the bare JSON list of calls (xLAM), against vLLM's own test strings.

LiquidAI's LFM2 / LFM2.5 write ``<|tool_call_start|>[get_weather(city="Oslo")]<|tool_call_end|>``: a
Python list of calls between two special tokens, often with text to the user before or after it.
Before, no style read it: its templates render no calls (LFM2.5's only inside ``{% generation %}``
blocks, which the layout probe skips), so the style fell back to ``hermes`` and every LFM2 call was
taken for the model's final answer. The model strings below are vLLM's
(vllm-project/vllm ``tests/tool_parsers/test_lfm2_tool_parser.py`` @ 011cde7c177a, Apache-2.0; the
parser they test is ``vllm/tool_parsers/lfm2_tool_parser.py`` at the same commit), with vLLM's
expected calls. Those of xLAM are from ``tests/tool_parsers/test_xlam_tool_parser.py`` @ 10a67515200c.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lightning_agents.rollout.tool_calls import malformed_call, parse_tool_calls, tool_call_style

START, END = "<|tool_call_start|>", "<|tool_call_end|>"
# LFM2's special tokens (its tokenizer.json, ids 6-13, all "special": true)
LFM2_SPECIALS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
]
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"

SIMPLE = "get_candidate_status(candidate_id='12345')"
SIMPLE_CALL = ["get_candidate_status", {"candidate_id": "12345"}]
MORE_TYPES = (
    "register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, "
    "role=None, passed_test=True, aliases=['John', 'Johnny'])"
)
MORE_TYPES_CALL = [
    "register_user",
    {
        "name": "John Doe",
        "age": 37,
        "address": {"city": "San Francisco", "state": "CA"},
        "role": None,
        "passed_test": True,
        "aliases": ["John", "Johnny"],
    },
]
DOTTED = (
    "grocery.orderIngredients(ingredientList=[{'name': 'Lasagna noodles', 'amount': 250, 'unit': 'g'}], "
    "deliveryAddress='845 Willow Lane, Springfield, IL 62704')"
)
DOTTED_CALL = [
    "grocery.orderIngredients",
    {
        "ingredientList": [{"name": "Lasagna noodles", "amount": 250, "unit": "g"}],
        "deliveryAddress": "845 Willow Lane, Springfield, IL 62704",
    },
]
# vLLM's non-streaming cases: the call list between the markers, and the calls vLLM returns.
LFM2_CASES = {
    "simple": (SIMPLE, [SIMPLE_CALL]),
    "more_types": (MORE_TYPES, [MORE_TYPES_CALL]),
    "parameterless": ("get_weather()", [["get_weather", {}]]),
    "empty_dict": ("do_something_cool(additional_data={})", [["do_something_cool", {"additional_data": {}}]]),
    "empty_list": ("do_something_cool(steps=[])", [["do_something_cool", {"steps": []}]]),
    "set_arg": ("label(tags={'urgent', 'bug'})", [["label", {"tags": ["urgent", "bug"]}]]),
    "leading_zero_int": ("set_date(month=07, day=05)", [["set_date", {"month": 7, "day": 5}]]),
    "escaped_string": (
        r"get_weather(city='Martha\'s Vineyard', metric='\"cool units\"')",
        [["get_weather", {"city": "Martha's Vineyard", "metric": '"cool units"'}]],
    ),
    "dotted_name": (DOTTED, [DOTTED_CALL]),
    "bracket_in_string": ("exec(command='grep -F \"]\" log.txt')", [["exec", {"command": 'grep -F "]" log.txt'}]]),
    "multiline_string_arg": (
        "exec(command='cat > f.py << EOF\nimport csv\nprint(1)\nEOF')",
        [["exec", {"command": "cat > f.py << EOF\nimport csv\nprint(1)\nEOF"}]],
    ),
    "nul_byte_string_arg": ("exec(command='printf a\x00b')", [["exec", {"command": "printf a\x00b"}]]),
    "parallel_calls": (f"{SIMPLE}, {MORE_TYPES}", [SIMPLE_CALL, MORE_TYPES_CALL]),
}


def _calls(calls: list[dict]) -> list:
    return [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in calls]


@pytest.mark.parametrize("case", sorted(LFM2_CASES))
def test_lfm2_calls_are_read_as_vllm_reads_them(case):
    body, expected = LFM2_CASES[case]
    content, calls = parse_tool_calls(f"{START}[{body}]{END}", style="lfm2")
    assert _calls(calls) == expected
    assert content == ""


@pytest.mark.parametrize("case", sorted(LFM2_CASES))
def test_lfm2_calls_decoded_without_special_tokens_are_read(case):
    # the engines decode with skip_special_tokens=True, and LFM2's markers are special tokens
    body, expected = LFM2_CASES[case]
    content, calls = parse_tool_calls(f"[{body}]", style="lfm2")
    assert _calls(calls) == expected and content == ""


@pytest.mark.parametrize(
    ("text", "content"),
    [
        # vLLM's content_after_tool_call case
        (
            f"{START}[{SIMPLE}]{END}\nChecking the current status of candidate ID 12345.",
            "Checking the current status of candidate ID 12345.",
        ),
        # vLLM's leading + trailing text case (one of its streaming tests), read whole
        (f"Let me check. {START}[{SIMPLE}]{END}\nDone.", "Let me check.\nDone."),
        (f"{START} [{SIMPLE}]{END}", ""),  # whitespace after the start token
        # LFM2.5's template renders a message's text, then its calls: the same call decoded without
        # the markers ends the reply
        (f"Checking.{START}[{SIMPLE}]{END}", "Checking."),
        (f"Checking.[{SIMPLE}]", "Checking."),
        (f"[{SIMPLE}]\nChecking the status.", "Checking the status."),
        (f"<think>The user wants a status.</think>[{SIMPLE}]", "<think>The user wants a status.</think>"),
    ],
)
def test_lfm2_text_around_the_call_is_the_content(text, content):
    got_content, calls = parse_tool_calls(text, style="lfm2")
    assert _calls(calls) == [SIMPLE_CALL]
    assert got_content == content


def test_lfm2_echo_of_the_call_is_not_content():
    # vLLM's test_echoed_tool_call_body_not_leaked_to_content: LFM2 repeats the call after the end token
    body = (
        "[grocery.orderIngredients(ingredientList=[{'name': 'apple', 'quantity': '2'}], deliveryAddress='123 Main St')]"
    )
    for text in (f"{START}{body}{END}{body}{END}", body + body):
        content, calls = parse_tool_calls(text, style="lfm2")
        assert [c[0] for c in _calls(calls)] == ["grocery.orderIngredients"] and content == ""


@pytest.mark.parametrize(
    "text",
    [
        # vLLM repairs nested quotes by guessing which quote closes the string; we do not guess
        f"{START}[bash(command='sed -n '360,450p' /testbed/sympy/matrices/common.py')]{END}",
        # vLLM runs the good call and drops the bad one; we run neither (the model retries the list)
        f"{START}[{SIMPLE}, bad(x=b'z')]{END}",
        f"{START}[get_weather(city=input())]{END}",
        f"[{SIMPLE}, get_weather(city=x)]",
    ],
)
def test_lfm2_calls_we_do_not_run_are_reported_as_malformed(text):
    content, calls = parse_tool_calls(text, style="lfm2")
    assert calls == [] and content == text.strip() and malformed_call(content, "lfm2")


@pytest.mark.parametrize(
    "text",
    [
        "How can I help you today?",  # vLLM's test_no_tool_call
        f"{START}[]{END}",  # vLLM's test_empty_tool_call_block
        f"{START}[ ]{END}",
        "The list [1, 2, 3] sums to 6.",
        "Call it as [get_weather(city='Oslo')] and then read the forecast.",  # a mention inside prose
        "[1] Smith, J. (2020). A study.",
        "Use `sorted(xs)`; e.g. [sorted(x) for x in rows] is a list comprehension.",
    ],
)
def test_lfm2_answers_are_not_calls(text):
    content, calls = parse_tool_calls(text, style="lfm2")
    assert calls == [] and content == text.strip()


def test_lfm2_answers_are_not_botched_calls():
    for text in ("How can I help you today?", "The list [1, 2, 3] sums to 6.", "Done: see [the docs](x)."):
        assert not malformed_call(text, "lfm2")


def test_lfm2_style_comes_from_the_opener_or_the_tokenizers_special_tokens():
    # LFM2's templates render no calls (opener None): the tokenizer's call tokens tell
    assert tool_call_style(None, special_tokens=LFM2_SPECIALS) == "lfm2"
    assert tool_call_style(None, special_tokens={t: k for k, t in enumerate(LFM2_SPECIALS)}) == "lfm2"
    assert tool_call_style("<|tool_call_start|>[") == "lfm2"
    # neither a template without calls nor Kimi-K2's `<|tool_call_begin|>` tokens is LFM2
    assert tool_call_style(None) == "hermes"
    assert tool_call_style(None, special_tokens=["<|tool_call_begin|>", "<|tool_call_end|>"]) == "hermes"


def test_pythonic_style_still_refuses_dotted_names_and_sets():
    # only LFM2 reads them (as vLLM's lfm2 parser does): a pythonic `os.system(...)` stays no call
    for text in ["[os.system(cmd='ls')]", "[get_weather(s={1, 2})]"]:
        assert parse_tool_calls(text, style="pythonic")[1] == []


XLAM_ARGS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
XLAM_CALL = json.dumps({"name": "get_current_weather", "arguments": XLAM_ARGS})


def test_a_bare_json_list_opener_is_read_as_a_list_of_calls():
    # xLAM's template opens its calls with `[{"name": `; as json_after:[ every answer with a "["
    # counted as a botched call and no call parsed
    style = tool_call_style('[{"name": "')
    assert style == "mistral"
    for text, content in [
        (f"[{XLAM_CALL}, {XLAM_CALL}]", ""),  # vLLM's parallel_tool_calls
        (f"I'll check the weather for you.[TOOL_CALLS][{XLAM_CALL}]", "I'll check the weather for you."),
    ]:
        got_content, calls = parse_tool_calls(text, style=style)
        assert _calls(calls)[0] == ["get_current_weather", XLAM_ARGS] and got_content == content
    assert not malformed_call("The list [1, 2, 3] sums to 6.", style)


def _real_answers() -> list[str]:
    answers = []
    tau = SHARED / "tau_bench" / "gpt-4o-airline.json"
    for rollout in json.loads(tau.read_text()):
        for message in rollout["traj"]:
            if message["role"] == "assistant" and not message.get("tool_calls") and message.get("content"):
                answers.append(message["content"])
    gsm8k = SHARED / "gsm8k" / "test.jsonl"
    answers += [json.loads(line)["answer"] for line in gsm8k.read_text().splitlines()]
    return answers


@pytest.mark.skipif(not (SHARED / "tau_bench").is_dir(), reason="../shared/data (real rollouts) is absent")
def test_real_final_answers_are_neither_lfm2_calls_nor_botched_ones():
    answers = _real_answers()
    assert len(answers) > 1000
    for text in answers + ["<think>Let me think.</think>" + a for a in answers[:200]]:
        content, calls = parse_tool_calls(text, style="lfm2")
        assert calls == [] and not malformed_call(content, "lfm2"), text[:200]
        assert not malformed_call(text, tool_call_style('[{"name": "')), text[:200]


@pytest.mark.parametrize(
    "unit",
    ["[", "[f(a=", "[f(a='x", "[f(a='''", f"{START}[", "[f(a=0000", "[f(a='\\", "so [f(a=1)]", "[f(a=1)] x "],
)
def test_lfm2_degenerate_replies_are_read_in_linear_time(unit):
    text = unit * (200_000 // len(unit))
    started = time.perf_counter()
    content, _ = parse_tool_calls(text, style="lfm2")
    malformed_call(content, "lfm2")
    assert time.perf_counter() - started < 5.0  # well under 1 s here; CI machines are loaded


# Text after a json_after call: Phi-4-mini's (vLLM ``test_phi4mini_tool_parser.py`` @ 2471a1c1430e),
# Granite 3.0's (``test_granite_tool_parser.py`` @ 2ab4733ef9fc) and Hunyuan-A13B's
# (``test_hunyuan_a13b_tool_parser.py`` @ 10a67515200c) surrounding-text cases. Before, the call was
# reported as malformed and never ran.
@pytest.mark.parametrize(
    ("style", "text", "call", "content"),
    [
        (
            "json_after:functools",
            'Let me check the weather for you.\nfunctools[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]\n'
            "Would you like to know more?",
            ["get_weather", {"city": "Tokyo"}],
            "Let me check the weather for you.\nWould you like to know more?",
        ),
        (
            "json_after:<|tool_call|>",
            'Let me check the weather for you.\n<|tool_call|> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]\n'
            "I'll get that information.",
            ["get_weather", {"city": "Tokyo"}],
            "Let me check the weather for you.\nI'll get that information.",
        ),
        (
            "json_after:<tool_calls>",
            '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Seattle"}}]</tool_calls>\nThank you!',
            ["get_weather", {"city": "Seattle"}],
            "Thank you!",
        ),
    ],
)
def test_text_after_a_json_after_call_is_content(style, text, call, content):
    got_content, calls = parse_tool_calls(text, style=style)
    assert _calls(calls) == [call] and got_content == content


def test_json_after_without_its_marker_still_needs_a_reply_of_calls_alone():
    # decoded without its special token, a marker-less reply counts only when it is nothing but calls
    text = '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}] is how you would call it.'
    assert parse_tool_calls(text, style="json_after:<|tool_call|>") == (text, [])
    bare = '[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]'
    assert _calls(parse_tool_calls(bare, style="json_after:<|tool_call|>")[1]) == [["get_weather", {"city": "Tokyo"}]]


@pytest.mark.parametrize(
    "text",
    [
        # Granite 3.1's `<tool_call>` string before a JSON list (vLLM's granite parser reads it)
        '<tool_call> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}, {"name": "get_time", "arguments": {}}]',
        # xLAM's xml-tags case
        'I\'ll help.<tool_call>[{"name": "get_weather", "arguments": {"city": "Tokyo"}}, '
        '{"name": "get_time", "arguments": {}}]</tool_call>',
    ],
)
def test_a_list_of_calls_in_one_hermes_block_is_read(text):
    content, calls = parse_tool_calls(text, style="hermes")
    assert _calls(calls) == [["get_weather", {"city": "Tokyo"}], ["get_time", {}]]
    assert [c["id"] for c in calls] == ["call_0", "call_1"]
    assert "tool_call" not in content


@pytest.mark.parametrize(
    "block",
    ["[]", '[{"name": "get_weather", "arguments": {}}, {"name": ""}]', '[{"name": "f", "arguments": "not a dict"}]'],
)
def test_a_hermes_list_with_a_bad_item_runs_none_of_it(block):
    text = f"<tool_call>{block}</tool_call>"
    content, calls = parse_tool_calls(text, style="hermes")
    assert calls == [] and content == text and malformed_call(content, "hermes")


def test_lfm2_second_block_is_run_and_its_repeat_is_not():
    other = "get_weather(city='Oslo')"
    text = f"{START}[{SIMPLE}]{END} Also: {START}[{other}]{END}{START}[{other}]{END} Done."
    content, calls = parse_tool_calls(text, "call", style="lfm2")
    assert _calls(calls) == [SIMPLE_CALL, ["get_weather", {"city": "Oslo"}]]
    assert [c["id"] for c in calls] == ["call_0", "call_1"]
    assert content == "Also:\nDone."
    # one bad block: no call runs, the reply is a botched call
    bad = f"{START}[{SIMPLE}]{END}{START}[get_weather(city=x)]{END}"
    assert parse_tool_calls(bad, style="lfm2") == (bad, []) and malformed_call(bad, "lfm2")


def test_a_rollout_of_an_lfm2_model_reads_its_calls_from_its_tokenizers_special_tokens():
    # The path rollouts take (model_tool_call_style): LFM2.5's real template renders calls only
    # inside {% generation %} blocks, so the layout probe finds no opener; its tokenizer's
    # <|tool_call_start|> token names the style (before: hermes, and every call an answer).
    from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template

    from lightning_agents.models import load_tokenizer
    from lightning_agents.rollout.agent_turn import model_tool_call_style

    template = (Path(__file__).resolve().parents[1] / "data" / "chat_templates" / "lfm2_5_8b_a1b.jinja").read_text()
    tok = tokenizer_with_template(
        load_tokenizer("embedded:student"), template, "<|startoftext|>", "<|im_end|>", SPECIAL_WIDE
    )
    tok.add_special_tokens({"additional_special_tokens": LFM2_SPECIALS}, replace_extra_special_tokens=False)
    assert model_tool_call_style(tok) == "lfm2"
    content, calls = parse_tool_calls(f"Checking.{START}[{SIMPLE}]{END}", style=model_tool_call_style(tok))
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [tuple(SIMPLE_CALL)]


def test_a_template_that_renders_no_calls_is_named_in_a_warning(caplog):
    # Granite 3.x and Phi-4-mini's own templates render no calls: hermes is a guess, said once
    import logging

    from lightning_agents.models import load_tokenizer
    from lightning_agents.rollout.agent_turn import model_tool_call_style

    tok = load_tokenizer("embedded:student")
    tok.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}" + "x" * 3
    with caplog.at_level(logging.WARNING, logger="lightning_agents.rollout.agent_turn"):
        assert model_tool_call_style(tok) == "hermes"
        assert model_tool_call_style(tok) == "hermes"
    said = [r.getMessage() for r in caplog.records if "renders no tool calls" in r.getMessage()]
    assert len(said) == 1 and "hermes" in said[0]


@pytest.mark.parametrize("name", ["embedded:student", "embedded:teacher"])
def test_a_template_that_renders_hermes_calls_in_generation_blocks_is_not_warned_about(caplog, name):
    # The embedded models' template marks replies with {% generation %}, which the layout probe
    # skips: it renders <tool_call> blocks, so hermes is known there, not guessed (every rollout
    # and HFlow agent run warned before)
    import logging

    from lightning_agents.models import load_tokenizer
    from lightning_agents.rollout.agent_turn import model_tool_call_style

    with caplog.at_level(logging.WARNING, logger="lightning_agents.rollout.agent_turn"):
        assert model_tool_call_style(load_tokenizer(name)) == "hermes"
    assert not [r for r in caplog.records if "renders no tool calls" in r.getMessage()]


CALL_A, CALL_B = '{"name": "a", "arguments": {"x": 1}}', '{"name": "b", "arguments": {}}'


# Two call blocks in one reply: before, only the first ran and the second stayed in the content,
# never run and never reported (the agent turn reports a botched call only when no call parsed).
@pytest.mark.parametrize(
    ("style", "text", "content"),
    [
        ("json_after:<tool_calls>", f"<tool_calls>[{CALL_A}]</tool_calls>\n<tool_calls>[{CALL_B}]</tool_calls>", ""),
        (
            "json_after:<tool_calls>",
            f"I'll check.\n<tool_calls>[{CALL_A}]</tool_calls>\nAnd:\n<tool_calls>[{CALL_B}]</tool_calls>\nDone.",
            "I'll check.\nAnd:\nDone.",
        ),
        # Granite 3.0's marker is itself a special token, like the closing tags after a block
        ("json_after:<|tool_call|>", f"<|tool_call|>[{CALL_A}]\n<|tool_call|>[{CALL_B}]", ""),
        (
            "json_after:<|action_start|><|plugin|>",
            f"<|action_start|><|plugin|>{CALL_A}<|action_end|>\n<|action_start|><|plugin|>{CALL_B}<|action_end|>",
            "",
        ),
        ("json_after:functools", f"functools[{CALL_A}]\nfunctools[{CALL_B}]", ""),
    ],
)
def test_every_json_after_block_is_run(style, text, content):
    got_content, calls = parse_tool_calls(text, style=style)
    assert _calls(calls) == [["a", {"x": 1}], ["b", {}]]
    assert [c["id"] for c in calls] == ["call_0", "call_1"] and got_content == content


@pytest.mark.parametrize(
    "second",
    [
        f"<tool_calls>[{CALL_B[:-3]}</tool_calls>",  # cut JSON
        '<tool_calls>[{"arguments": {}}]</tool_calls>',  # no name
        "<tool_calls>I could not finish</tool_calls>",  # no JSON after the marker
    ],
)
def test_a_bad_json_after_block_after_a_good_one_makes_the_reply_a_botched_call(second):
    # as lfm2's: running `a` and leaving the botched block in the content would never tell the model
    text = f"<tool_calls>[{CALL_A}]</tool_calls>\n{second}"
    content, calls = parse_tool_calls(text, style="json_after:<tool_calls>")
    assert calls == [] and content == text and malformed_call(content, "json_after:<tool_calls>")


def test_a_marker_inside_a_json_after_call_belongs_to_the_call():
    # Phi-4-mini's marker is a Python module's name: code that uses it is an argument, not a block
    code = "import functools\nprint(functools[1])"
    text = "functools[" + json.dumps({"name": "python", "arguments": {"code": code}}) + "]"
    content, calls = parse_tool_calls(text, style="json_after:functools")
    assert _calls(calls) == [["python", {"code": code}]] and content == ""


@pytest.mark.parametrize(
    "answer",
    [
        '[{"name": "Oslo"}, {"name": "Bergen"}]',  # was: calls to tools named Oslo and Bergen
        '[{"name": "Alice", "age": 30}]',  # was: a call to Alice, `age` dropped
        '[{"name": "Alice", "arguments": {}, "age": 30}]',
        '[{"name": "Alice", "arguments": {}, "parameters": {}}]',
    ],
)
@pytest.mark.parametrize("style", ["mistral", "json_after:<|tool_call|>"])
def test_a_bare_json_list_of_data_is_an_answer_not_calls(answer, style):
    # without the marker, a list is calls only when every item has a call's keys and no others
    assert parse_tool_calls(answer, style=style) == (answer, [])
    assert not malformed_call(answer, style)


@pytest.mark.parametrize(
    ("text", "call"),
    [
        ('[{"name": "f", "arguments": {"q": 1}, "id": "abc123def"}]', ["f", {"q": 1}]),
        ('[{"name": "f", "parameters": {"q": 1}}]', ["f", {"q": 1}]),
        ('[TOOL_CALLS][{"name": "f", "arguments": {"q": 1}, "note": "x"}]', ["f", {"q": 1}]),  # marked: as before
    ],
)
def test_a_bare_json_list_of_calls_is_still_read(text, call):
    assert _calls(parse_tool_calls(text, style="mistral")[1]) == [call]


@pytest.mark.parametrize(
    ("style", "unit"),
    [
        ("json_after:<tool_calls>", f"<tool_calls>[{CALL_A}]</tool_calls>\n"),
        ("json_after:<tool_calls>", "<tool_calls>[]"),
        ("json_after:<|tool_call|>", f"<|tool_call|>[{CALL_A}] "),
        ("json_after:functools", f"functools[{CALL_A}]x"),
        ("json_after:<|tool_call|>", f"[{CALL_A}] "),
        ("mistral", '[{"name": "Oslo"}, '),
    ],
)
def test_json_after_blocks_are_read_in_linear_time(style, unit):
    text = unit * (200_000 // len(unit))
    started = time.perf_counter()
    content, _ = parse_tool_calls(text, style=style)
    malformed_call(content, style)
    assert time.perf_counter() - started < 5.0  # well under 1 s here; CI machines are loaded
