"""Tool calls that ShareGPT assistant turns write as text (hermes-function-calling-v1's ``<tool_call>``
Python dicts, ToolACE's ``[Func Name(a=1)]``) become OpenAI tool calls, so each chat template renders
them in its own syntax and the rollout's parser for that template reads them back.

Rows are the real ones in ``tests/data/conversations`` (sources in its README); the variants built
here change them only where a test needs another shape (two calls in a turn, a broken call).
"""

from __future__ import annotations

import ast
import copy
import json
import logging
import re
from pathlib import Path

import pytest
from chat_template_helpers import SPECIAL_WIDE, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.chat import ChatDataModule, read_conversations, tokenize_to_dataset
from lightning_agents.datamodules.conversations import normalize_conversation, template_layout, tokenize_conversation
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.tool_calls import parse_tool_calls, tool_call_style

DATA = Path(__file__).resolve().parents[1] / "data" / "conversations"
LOGGER = "lightning_agents.datamodules.chat"


def _row(name: str) -> dict:
    return copy.deepcopy(json.loads((DATA / name).read_text())[0])


def _hermes() -> dict:
    return _row("hermes_function_calling.json")


def _toolace() -> dict:
    return _row("toolace.json")


def _normalize(record: dict, **kwargs):
    kept: list = []
    messages, tools = normalize_conversation(record, text_calls_kept=kept, **kwargs)
    return messages, tools, kept


def _calls(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


# -- Hermes ----------------------------------------------------------------------------------------


def test_hermes_python_dict_call_becomes_a_tool_call_with_its_result_and_tools():
    raw = _hermes()["conversations"]
    messages, tools, kept = _normalize(_hermes())
    assert not kept
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    call = ast.literal_eval(raw[2]["value"].split("<tool_call>")[1].split("</tool_call>")[0].strip())
    assert messages[2]["content"] == ""
    assert _calls(messages[2]) == [("search_flights", call["arguments"])]
    assert messages[2]["tool_calls"][0]["function"]["arguments"]["flexible_cancellation"] is True
    # The tool turn loses its <tool_response> wrapper (templates add their own) and answers the call.
    body = raw[3]["value"].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>\n")
    assert messages[3]["content"] == body
    assert messages[3]["tool_call_id"] == messages[2]["tool_calls"][0]["id"]
    assert messages[3]["name"] == "search_flights"
    assert messages[4]["content"] == raw[4]["value"]
    # The <tools> list of the system prompt becomes the tools; the prompt keeps its own prose only.
    listed = ast.literal_eval(raw[0]["value"].split("<tools>\n")[1].split("\n</tools>")[0])
    assert tools == listed
    assert messages[0]["content"] == raw[0]["value"].split("\n<tools>")[0]
    assert "<tool_call>" not in messages[0]["content"]


def test_hermes_json_blocks_several_per_turn_with_text_around_them():
    record = _hermes()
    turns = record["conversations"]
    outbound = {"departure_city": "Los Angeles", "destination_city": "Auckland", "departure_date": "2023-07-10"}
    back = "{'arguments': {'departure_city': 'Auckland', 'destination_city': 'Los Angeles', 'departure_date': '2023-07-24'}, 'name': 'search_flights'}"
    turns[2]["value"] = (
        "I'll search both legs.\n<tool_call>\n"
        + json.dumps({"name": "search_flights", "arguments": outbound})
        + "\n</tool_call>\n<tool_call>\n"
        + back
        + "\n</tool_call>\nThen I'll compare them."
    )
    turns[3]["value"] = (
        '<tool_response>\n{"flights": ["AA118"]}\n</tool_response>\n<tool_response>\n{"flights": ["AA117"]}\n</tool_response>\n'
    )
    messages, _, kept = _normalize(record)
    assert not kept
    assert messages[2]["content"] == "I'll search both legs.\nThen I'll compare them."
    assert _calls(messages[2]) == [
        ("search_flights", outbound),
        ("search_flights", ast.literal_eval(back)["arguments"]),
    ]
    ids = [c["id"] for c in messages[2]["tool_calls"]]
    assert len(set(ids)) == 2 and all(len(i) == 9 and i.isalnum() for i in ids)  # Mistral's id rule
    assert [m["role"] for m in messages[3:6]] == ["tool", "tool", "assistant"]
    assert [m["content"] for m in messages[3:5]] == ['{"flights": ["AA118"]}', '{"flights": ["AA117"]}']
    assert [m["tool_call_id"] for m in messages[3:5]] == ids


def _parallel_hermes(answers=(("get_time", {"time": "14:05"}), ("get_weather", {"temp_c": 21}))) -> dict:
    """A Hermes row (the dataset's system prompt, Python-dict calls) with two calls in one turn,
    answered by responses that name their function."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [
        {"type": "function", "function": {"name": n, "description": n, "parameters": schema}}
        for n in ("get_weather", "get_time")
    ]
    system = _hermes()["conversations"][0]["value"]
    system = re.sub(
        r"<tools>\n\[.*?</tools>", lambda m: "<tools>\n" + json.dumps(tools) + "\n</tools>", system, flags=re.S
    )
    calls = "".join(
        f"<tool_call>\n{{'arguments': {{'city': 'Paris'}}, 'name': '{n}'}}\n</tool_call>\n"
        for n in ("get_weather", "get_time")
    )
    responses = "".join(
        f"<tool_response>\n{json.dumps({'name': n, 'content': c})}\n</tool_response>\n" for n, c in answers
    )
    turns = [
        {"from": "system", "value": system},
        {"from": "human", "value": "Weather and local time in Paris?"},
        {"from": "gpt", "value": calls},
        {"from": "tool", "value": responses},
        {"from": "gpt", "value": "It is 21 C and 14:05 in Paris."},
    ]
    return {"conversations": turns}


def test_hermes_responses_are_linked_by_the_name_they_answer():
    # Parallel calls answered out of order: linked by position, get_weather's result answered get_time.
    messages, _, kept = _normalize(_parallel_hermes())
    assert not kept
    calls = {c["id"]: c["function"]["name"] for c in messages[2]["tool_calls"]}
    for message in messages[3:5]:
        assert calls[message["tool_call_id"]] == message["name"] == json.loads(message["content"])["name"]
    # responses naming functions that were not called: the conversation stays as written
    _, _, kept = _normalize(_parallel_hermes(answers=(("get_time", {}), ("get_news", {}))))
    assert kept and "answer" in kept[0][1]


# -- ToolACE ---------------------------------------------------------------------------------------


def test_toolace_calls_with_spaces_in_names_become_tool_calls():
    raw = _toolace()
    messages, tools, kept = _normalize(_toolace())
    assert not kept
    assert [t["function"]["name"] for t in tools] == [
        "GetCompetitions",
        "Get Manager Placeholder Image",
        "Search Competition API",
        "Get Category Image",
    ]
    system = raw["system"]
    assert messages[0]["content"] == system.split("Here is a list of functions")[0].strip()
    assert "Should you decide" not in messages[0]["content"] and "[func1(" not in messages[0]["content"]
    assert _calls(messages[2]) == [("GetCompetitions", {})]
    assert _calls(messages[8]) == [("Get Manager Placeholder Image", {"sport": "football"})]
    for call_turn, tool_turn in ((2, 3), (8, 9)):
        assert messages[tool_turn]["tool_call_id"] == messages[call_turn]["tool_calls"][0]["id"]
        assert messages[tool_turn]["content"] == raw["conversations"][tool_turn - 1]["value"]
    texts = [m["content"] for m in messages if m["role"] == "assistant" and not m.get("tool_calls")]
    assert texts == [
        t["value"] for t in raw["conversations"] if t["from"] == "assistant" and not t["value"].startswith("[")
    ]


def test_toolace_parallel_calls_and_their_result_list_are_split_per_call():
    record = _toolace()
    turns = record["conversations"]
    turns[7]["value"] = '[Get Manager Placeholder Image(sport="football"), Get Category Image(slug="champions-league")]'
    results = [
        {"name": "Get Manager Placeholder Image", "results": {"image": "data:image/png;base64,AAAA"}},
        {"name": "Get Category Image", "results": {"image": "https://img.example/champions-league.png"}},
    ]
    turns[8]["value"] = json.dumps(results)
    messages, _, kept = _normalize(record)
    assert not kept
    assert _calls(messages[8]) == [
        ("Get Manager Placeholder Image", {"sport": "football"}),
        ("Get Category Image", {"slug": "champions-league"}),
    ]
    assert [json.loads(m["content"]) for m in messages[9:11]] == results
    assert [m["tool_call_id"] for m in messages[9:11]] == [c["id"] for c in messages[8]["tool_calls"]]


def test_toolace_json_constants_in_arguments_are_read_as_json():
    # ToolACE mixes JSON's true/false/null into its Python-looking calls.
    record = _toolace()
    record["conversations"][7]["value"] = '[Get Manager Placeholder Image(sport="football", hd=true, team=null)]'
    messages, _, kept = _normalize(record)
    assert not kept
    assert _calls(messages[8]) == [("Get Manager Placeholder Image", {"sport": "football", "hd": True, "team": None})]


@pytest.mark.parametrize(
    "value",
    [
        '[Get Manager Placeholder Image(sport=input("sport"))]',  # not a literal: never evaluated
        "[Get Manager Placeholder Image(sport=football)]",  # a bare name other than true/false/null
        '[Get Manager Placeholder Image("football")]',  # positional: which parameter is meant?
        '[Get Player Image(sport="football")]',  # not one of the conversation's tools
        '[Get Manager Placeholder Image(sport="a, Get Category Image(slug=1)")]',  # a name in a string
        '[Get Manager Placeholder Image(sport="football")',  # unclosed
    ],
)
def test_toolace_calls_that_do_not_parse_keep_the_conversation_as_written(value):
    record = _toolace()
    record["conversations"][7]["value"] = value
    as_written, _ = normalize_conversation(copy.deepcopy(record), parse_text_tool_calls=False)
    messages, tools, kept = _normalize(record)
    # All or nothing: the call that parses stays text too, with the system prompt and its tool list.
    assert messages == as_written and tools is None
    assert [turn for turn, _ in kept] == [1, 7]
    assert all(reason.startswith("conversations[7] ") for _, reason in kept)


def test_a_bracketed_call_without_known_tools_is_text_and_not_reported():
    record = _toolace()
    record["system"] = "You are an expert in composing functions."
    messages, tools, kept = _normalize(record)
    assert messages[2]["content"] == "[GetCompetitions()]" and "tool_calls" not in messages[2]
    assert tools is None and not kept


# -- through the chat templates and back through the rollout's parser ------------------------------

# Qwen2.5's and Llama 3.1's originals live in ../shared/data; Mistral Nemo's is in tests/data, so one
# round trip runs without the shared folder too.
TEMPLATES = {
    "qwen2_5": ("qwen2_5.jinja", None, "<|im_end|>", "hermes"),
    "llama3_1": ("llama3_1.jinja", "<|begin_of_text|>", "<|eot_id|>", "llama3_json"),
    "mistral_nemo": ("mistral_nemo_2407.jinja", "<s>", "</s>", "mistral"),
}
LOCAL_TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"


@pytest.fixture(scope="module")
def base_tokenizer():
    return load_tokenizer("embedded:student")


@pytest.fixture
def templated(request, base_tokenizer):
    def make(key):
        name, bos, eos, _ = TEMPLATES[key]
        local = LOCAL_TEMPLATES / name
        path = local if local.is_file() else request.getfixturevalue("shared_data") / "chat_templates" / name
        return tokenizer_with_template(base_tokenizer, path.read_text(), bos, eos, SPECIAL_WIDE)

    return make


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize(
    "source, call_turn, dataset_syntax",
    [("hermes_function_calling.json", 2, "{'arguments'"), ("toolace.json", 8, "Placeholder Image(sport=")],
)
def test_calls_render_in_each_templates_syntax_and_parse_back(templated, template, source, call_turn, dataset_syntax):
    tokenizer = templated(template)
    eos, expected_style = TEMPLATES[template][2:]
    conversations, _ = read_conversations(str(DATA / source))
    messages, tools = conversations[0]["messages"], conversations[0]["tools"]
    expected = _calls(messages[call_turn])
    layout = template_layout(tokenizer)
    style = tool_call_style(layout.tool_call_opener)
    assert style == expected_style
    row = tokenize_conversation(tokenizer, messages, tools)
    runs = labelled_runs(tokenizer, row)
    call_runs = [r for r in runs if r.startswith(layout.tool_call_opener)]
    assert len(call_runs) == len([m for m in messages if m.get("tool_calls")])
    content, calls = parse_tool_calls(call_runs[-1].removesuffix(eos), style=style)
    assert content == ""
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == expected
    text = tokenizer.decode(row["input_ids"])
    # The template's own syntax only: the dataset's is gone from the calls and from the system prompt.
    assert dataset_syntax not in text
    # The template lists the tools itself (Llama 3.1 in the first user turn, Qwen2.5 in the system turn,
    # Mistral before the last user turn).
    assert text.count('"name": "' + expected[0][0] + '"') >= 2
    assert "</tool_response>\n</tool_response>" not in text and "<tool_response>\n<tool_response>" not in text
    # The tool results are context, never labelled.
    result = next(m["content"] for m in messages[call_turn + 1 :] if m["role"] == "tool")
    assert not any(result[:60] in r for r in runs)


# -- fallbacks: what does not parse stays text, and is reported ------------------------------------


def test_real_malformed_hermes_row_stays_text_with_one_warning(caplog):
    """hermes-function-calling-v1's structured-extraction row writes ``\\n`` as two characters and
    puts the name inside the arguments: it stays exactly as written, and the reader says so."""
    path = DATA / "hermes_extraction.json"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        conversations, _ = read_conversations(str(path))
    as_written, _ = read_conversations(str(path), parse_text_tool_calls=False)
    assert conversations == as_written
    raw = _row("hermes_extraction.json")["conversations"]
    assert [m["content"] for m in conversations[0]["messages"]] == [t["value"] for t in raw]
    assert conversations[0]["tools"] is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{path}: 1 assistant turn(s) with tool calls written as text stay text")
    assert f"first at {path}[0]: conversations[2] <tool_call> block 1" in warnings[0]


@pytest.mark.parametrize(
    "value",
    [
        "<tool_call>\n{'arguments': {'departure_city': 'Los Angeles'}, 'name': 'search_flights'}\n",  # unclosed
        "<tool_call>\n{'arguments': {'departure_city': __import__('os').getcwd()}, 'name': 'search_flights'}\n</tool_call>\n",
        "<tool_call>\n{'arguments': {'departure_city': 'Los Angeles'}}\n</tool_call>\n",  # no name
        "<tool_call>\n{'arguments': {'when': {2023, 7}}, 'name': 'search_flights'}\n</tool_call>\n",  # a set
        "<tool_call>\nsearch_flights(departure_city='Los Angeles')\n</tool_call>\n",
    ],
)
def test_malformed_hermes_blocks_stay_text(value):
    record = _hermes()
    record["conversations"][2]["value"] = value
    as_written, _ = normalize_conversation(copy.deepcopy(record), parse_text_tool_calls=False)
    messages, tools, kept = _normalize(record)
    assert messages == as_written and tools is None
    assert messages[2]["content"] == value and messages[3]["content"].startswith("<tool_response>")
    assert [turn for turn, _ in kept] == [2]


def test_tool_responses_that_do_not_match_the_calls_keep_the_conversation_as_written():
    record = _hermes()
    record["conversations"][3]["value"] += (
        '<tool_response>\n{"name": "search_flights", "content": {}}\n</tool_response>\n'
    )
    as_written, _ = normalize_conversation(copy.deepcopy(record), parse_text_tool_calls=False)
    messages, tools, kept = _normalize(record)
    assert messages == as_written and tools is None
    assert kept == [(2, "conversations[3] 2 <tool_response> block(s) answer 1 tool call(s)")]


def test_one_warning_per_file_counts_the_turns_and_names_the_first_line(tmp_path, caplog):
    bad = _hermes()
    bad["conversations"][2]["value"] = "<tool_call>\n{'arguments': {}, 'name': 'search_flights'\n</tool_call>\n"
    path = tmp_path / "hermes.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (_hermes(), bad, bad)) + "\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        conversations, _ = read_conversations(str(path))
    assert _calls(conversations[0]["messages"][2]) and "tool_calls" not in conversations[1]["messages"][2]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert (
        warnings[0].startswith(f"{path}: 2 assistant turn(s)") and f"first at {path}:2: conversations[2]" in warnings[0]
    )


def test_the_old_behaviour_is_an_option_of_the_data_module(tmp_path, caplog):
    path = str(DATA / "hermes_function_calling.json")
    raw = _hermes()["conversations"]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        as_text = ChatDataModule(train=path, val=None, parse_text_tool_calls=False).load_conversations("fit")
    assert [m["content"] for m in as_text[0]["messages"]] == [t["value"] for t in raw]
    assert as_text[0]["tools"] is None and not caplog.records
    parsed = ChatDataModule(train=path, val=None).load_conversations("fit")
    assert _calls(parsed[0]["messages"][2])[0][0] == "search_flights"


def test_a_template_that_cannot_show_tool_use_keeps_the_calls_as_text(tmp_path):
    # Plain ChatML (OpenHermes-2.5's template) renders content only: structured calls failed to
    # render (and with skip_invalid every tool-calling conversation was dropped), and the tool list
    # taken out of the system prompt would have vanished.
    chatml = tmp_path / "chatml.jinja"
    chatml.write_text(
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    path = str(DATA / "hermes_function_calling.json")
    data = ChatDataModule(train=path, val=None, chat_template=str(chatml), cache_dir=None, max_length=4096)
    data.setup("fit")
    (row,) = data.datasets["fit"]
    text = data.tokenizer.decode(row["input_ids"])
    trained = data.tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    assert "<tools>" in text and "<tool_call>" in trained and "search_flights" in trained


def test_turns_a_template_cannot_render_structured_are_trained_as_written(templated, tmp_path, caplog):
    # Llama 3.1 renders one call per turn: the structured conversation failed to tokenize and stopped
    # setup (or, with skip_invalid, was dropped), where the text trained before.
    path = tmp_path / "parallel.json"
    path.write_text(json.dumps([_parallel_hermes()]))
    conversations, _ = read_conversations(str(path))
    assert len(conversations[0]["messages"][2]["tool_calls"]) == 2 and "as_written" in conversations[0]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rows, errors, _ = tokenize_to_dataset(conversations, templated("llama3_1"), 4096, cache_dir=str(tmp_path))
    assert len(rows) == 1 and not errors
    assert "1 conversation(s) whose tool calls were written as text are trained as written" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):  # the cached rows say it too
        rows, _, _ = tokenize_to_dataset(conversations, templated("llama3_1"), 4096, cache_dir=str(tmp_path))
    assert len(rows) == 1 and "trained as written" in caplog.text
    tokenizer = templated("llama3_1")
    trained = tokenizer.decode([t for t, label in zip(rows[0]["input_ids"], rows[0]["labels"]) if label != -100])
    assert "<tool_call>" in trained and "get_time" in trained
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):  # Qwen2.5 renders parallel calls: structured
        rows, errors, _ = tokenize_to_dataset(conversations, templated("qwen2_5"), 4096, cache_dir=None)
    assert len(rows) == 1 and not errors and "trained as written" not in caplog.text
