"""Command R7B's tool-use template on the SFT label machinery.

The real template (llama.cpp ``models/templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja``,
mirror Raudbjorn/ggml-llama.cpp @ ae1a0b1c71a8) is CC-BY-NC-4.0 and not vendored; ``R7B`` below is
cut to the three things about it that no other template showed (the real one was checked the same
way: the marker harness, the per-turn prompt oracle and 200 tau-bench airline runs):

- an answer closes with ``<|END_RESPONSE|>`` and then the EOS ``<|END_OF_TURN_TOKEN|>``, a call
  with ``<|END_ACTION|>`` and the same EOS;
- it writes its generation prompt (``<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>
  <|END_THINKING|>``) whether asked or not, and renders a history answer with ``<|START_RESPONSE|>``
  in place of the empty thinking block (a call turn keeps it);
- it numbers the calls of a conversation, and heads each tool result with the number of the first
  call that has the result's id (``"is_error": null`` after the result, as the real one writes).
"""

from __future__ import annotations

import copy
import json
import logging
import re

import pytest
from chat_template_helpers import REAL_TEMPLATES, SHARED, SPECIAL_WIDE, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules.conversations import (
    NOTE_PROMPT_UNLIKE_TURN,
    ConversationError,
    _render,
    _render_and_locate,
    normalize_conversation,
    render_conversation,
    template_layout,
    tokenize_many,
    turn_end_token_ids,
)
from lightning_agents.models import load_tokenizer

R7B = (
    "{{ bos_token }}{%- macro call_number(messages, wanted) -%}"
    "{%- set n = namespace(value=0, found=false) -%}"
    "{%- for m in messages -%}{%- for c in m.tool_calls or [] -%}"
    "{%- if c.id == wanted and not n.found -%}{{ n.value }}{%- set n.found = true -%}{%- endif -%}"
    "{%- set n.value = n.value + 1 -%}{%- endfor -%}{%- endfor -%}{%- endmacro -%}"
    "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># System Preamble\n"
    "{%- if tools %}\n## Available Tools\n{% for t in tools %}{{ t.function | tojson }}\n{% endfor %}{% endif -%}"
    "<|END_OF_TURN_TOKEN|>{%- set count = namespace(value=0) -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' or m.role == 'system' -%}"
    "<|START_OF_TURN_TOKEN|>{{ '<|USER_TOKEN|>' if m.role == 'user' else '<|SYSTEM_TOKEN|>' }}{{ m.content }}"
    "<|END_OF_TURN_TOKEN|>"
    "{%- elif m.role == 'assistant' -%}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    "{%- if m.tool_calls -%}<|START_THINKING|>{{ m.reasoning_content or '' }}<|END_THINKING|><|START_ACTION|>[\n"
    '{%- for c in m.tool_calls %}    {"tool_call_id": "{{ count.value }}", "tool_name": '
    '"{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}'
    "{% if not loop.last %},{% endif %}\n{%- set count.value = count.value + 1 -%}{%- endfor %}]<|END_ACTION|>"
    "{%- else -%}<|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|>{%- endif -%}<|END_OF_TURN_TOKEN|>"
    "{%- elif m.role == 'tool' -%}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[\n    {\n"
    '        "tool_call_id": "{{ call_number(messages, m.tool_call_id) }}",\n'
    '        "results": {\n            "0": {{ m.content | tojson }}\n        },\n'
    '        "is_error": null\n    }\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>'
    "{%- endif -%}{%- endfor -%}"
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>"
)
TAU_BENCH = SHARED.parent / "tau_bench" / "gpt-4o-airline.json"


def _call(call_id, city):
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}


def _u(text):
    return {"role": "user", "content": text}


def _a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def _t(text, call_id):
    return {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": text}


def _two_call_turns(first_id, second_id, answers=("call_1", "call_1")):
    return {
        "messages": [
            _u("Weather in Oslo, then Paris?"),
            _a("", tool_calls=[_call(first_id, "Oslo")]),
            _t("Oslo: snow", answers[0]),
            _a("", tool_calls=[_call(second_id, "Paris")]),
            _t("Paris: rain", answers[1]),
            _a("Snow, then rain."),
        ],
        "tools": [WEATHER],
    }


@pytest.fixture(scope="module")
def tok():
    return tokenizer_with_template(
        load_tokenizer("embedded:student"), R7B, "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", SPECIAL_WIDE
    )


def _rows(tok, record):
    notes: list[list[str]] = []
    rows = tokenize_many(tok, [normalize_conversation(copy.deepcopy(record))], None, notes=notes)
    if isinstance(rows[0], Exception):
        raise rows[0]
    return rows[0], notes[0]


def _located(tok, record):
    messages, tools = normalize_conversation(copy.deepcopy(record))
    return _render_and_locate(tok, template_layout(tok), messages, tools, _render)


def _result_numbers(text):
    return re.findall(r'"tool_call_id": "(\d*)",\s+"results": \{\s*"0": "([^"]*)"', text)


def test_answers_and_calls_are_trained_through_the_eos_after_their_closing_token(tok):
    # The model writes `<|END_RESPONSE|>` (or `<|END_ACTION|>`) and then its EOS, where an engine
    # stops; the labels ended at the first, so the EOS was context and the model never learned to stop.
    row, _ = _rows(tok, {"messages": [_u("Hi"), _a("Hello."), _u("How are you?"), _a("Fine.")]})
    assert labelled_runs(tok, row) == [
        "Hello.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
        "Fine.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
    ]
    row, _ = _rows(
        tok,
        {
            "messages": [
                _u("Weather in Oslo?"),
                _a("", tool_calls=[_call("c1", "Oslo")]),
                _t("Snow", "c1"),
                _a("Snow."),
            ],
            "tools": [WEATHER],
        },
    )
    call, answer = labelled_runs(tok, row)
    assert call.startswith("<|START_ACTION|>[") and call.endswith("]<|END_ACTION|><|END_OF_TURN_TOKEN|>")
    assert answer == "Snow.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>"


def test_turn_end_token_is_the_eos(tok):
    # The turn's end tokens were `<|END_RESPONSE|>` and `<|END_ACTION|>`, both taken for tokens written
    # inside a turn: none was known (generation stopped at the tokenizer's EOS alone).
    assert turn_end_token_ids(tok) == [tok.convert_tokens_to_ids("<|END_OF_TURN_TOKEN|>")]


def test_answer_rendered_without_the_prompt_it_is_generated_after_is_noted(tok):
    # An engine feeds the model `<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>` (written whether
    # asked or not); a history answer is rendered after `<|CHATBOT_TOKEN|><|START_RESPONSE|>`. The
    # template looked as if it had no generation prompt, so nothing was noted.
    _, notes = _rows(tok, {"messages": [_u("Hi"), _a("Hello.")]})
    assert len(notes) == 1 and NOTE_PROMPT_UNLIKE_TURN in notes[0] and notes[0].startswith("message 1: ")
    # Said in whole tokens, not `'RESPONSE|>' where the prompt has 'THINKING|>...'`.
    assert "(the turn has '<|START_RESPONSE|>' where the prompt has '<|START_THINKING|><|END_THINKING|>')" in notes[0]
    # A call holds the prompt (its turn opens with the empty thinking block); the answer after the
    # tool result does not.
    record = {
        "messages": [_u("Weather in Oslo?"), _a("", tool_calls=[_call("c1", "Oslo")]), _t("Snow", "c1"), _a("Snow.")],
        "tools": [WEATHER],
    }
    _, notes = _rows(tok, record)
    assert [n.split(": ", 1)[0] for n in notes if NOTE_PROMPT_UNLIKE_TURN in n] == ["message 3"]


def test_results_are_numbered_by_their_own_call_when_ids_repeat(tok):
    # tau-bench's gpt-4o runs reuse an id in a later turn: the Paris result was headed with the
    # number of the Oslo call (the first call with that id).
    text, _, notes = _located(tok, _two_call_turns("call_1", "call_1"))
    assert _result_numbers(text) == [("0", "Oslo: snow"), ("1", "Paris: rain")]
    from lightning_agents.datamodules.conversations import NOTE_CALL_IDS_UNIQUE

    assert NOTE_CALL_IDS_UNIQUE in notes
    # Results without ids answer the calls in order (all were headed "0", the first id-less call).
    record = _two_call_turns(None, None, answers=(None, None))
    text, _, _ = _located(tok, record)
    assert _result_numbers(text) == [("0", "Oslo: snow"), ("1", "Paris: rain")]
    # Ids of their own are kept: nothing to note.
    text, _, notes = _located(tok, _two_call_turns("call_1", "call_2", answers=("call_1", "call_2")))
    assert _result_numbers(text) == [("0", "Oslo: snow"), ("1", "Paris: rain")]
    assert NOTE_CALL_IDS_UNIQUE not in notes


def test_result_without_an_id_answers_the_call_no_later_result_names(tok):
    # The id-less Rome result took the first unanswered call (Oslo's), and the Oslo result, which
    # names its call, was then paired with Oslo's too: both were headed "0", Rome's call had none.
    record = {
        "messages": [
            _u("Oslo and Rome?"),
            _a("", tool_calls=[_call("c1", "Oslo"), _call("c2", "Rome")]),
            {"role": "tool", "name": "get_weather", "content": "Rome: rain"},
            _t("Oslo: sun", "c1"),
            _a("Sun, then rain."),
        ],
        "tools": [WEATHER],
    }
    text, _, _ = _located(tok, record)
    assert _result_numbers(text) == [("1", "Rome: rain"), ("0", "Oslo: sun")]


def test_note_after_a_tool_result_says_how_the_turn_differs_from_the_prompt(tok):
    # The note said "(none of the prompt is rendered before the turn)" though 133 of the 159
    # characters of the prompt after a result are: the difference was looked for in the 60
    # characters it quotes, and the quote began inside `<|END_OF_TURN_TOKEN|>` ('|><|START_...').
    record = {
        "messages": [_u("Weather in Oslo?"), _a("", tool_calls=[_call("c1", "Oslo")]), _t("Snow", "c1"), _a("Snow.")],
        "tools": [WEATHER],
    }
    _, notes = _rows(tok, record)
    (note,) = [n for n in notes if NOTE_PROMPT_UNLIKE_TURN in n]
    assert note.startswith("message 3: ")
    assert "(the turn has '<|START_RESPONSE|>' where the prompt has '<|START_THINKING|><|END_THINKING|>')" in note
    quoted = note.split(NOTE_PROMPT_UNLIKE_TURN, 1)[1].split(", not ", 1)[0]
    assert quoted == " '<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>'"


def test_result_answering_no_call_is_refused_naming_it(tok):
    # It was rendered as answering call "" (no call), silently.
    record = _two_call_turns("call_1", "call_2", answers=("call_1", "zzz"))
    with pytest.raises(
        ConversationError, match=r"message 4 \(tool\): its tool_call_id 'zzz' is the id of no tool call"
    ):
        _located(tok, record)


def test_only_command_r7b_pairs_results_by_ids_it_does_not_write(tok):
    assert template_layout(tok).call_ids_paired
    base = load_tokenizer("embedded:student")
    for path, (eos, bos, special) in REAL_TEMPLATES.items():
        if path.is_file():  # ../shared/data's templates are absent in CI
            layout = template_layout(tokenizer_with_template(base, path.read_text(), bos, eos, special))
            assert not layout.call_ids_paired, path.name


@pytest.mark.parametrize("word", ["is_error", "null", "results", "END_TOOL_RESULT", "START_THINKING"])
def test_next_user_message_that_is_a_word_written_after_a_tool_result_labels_the_turn_before_it(tok, word):
    # `"is_error": null` closes every result: a user answering "null" after the answer that
    # follows it refused that answer (the words were not taken for the template's own, since the
    # prompt it writes after a result, `<|START_THINKING|><|END_THINKING|>`, is not in the history).
    def runs(user):
        record = {
            "messages": [
                _u("Weather in Oslo?"),
                _a("", tool_calls=[_call("c1", "Oslo")]),
                _t("Snow", "c1"),
                _a("Snow."),
                _u(user),
                _a("Done."),
            ],
            "tools": [WEATHER],
        }
        text, spans = render_conversation(tok, *normalize_conversation(record))
        return [text[s:e] for s, e in spans]

    assert runs(word) == runs("Qzxv")


def test_ids_reused_in_real_tau_bench_runs_number_each_result_by_its_call(tok, caplog):
    if not TAU_BENCH.is_file():
        pytest.skip(f"{TAU_BENCH} is absent (../shared/data lives beside the clone)")
    runs = json.loads(TAU_BENCH.read_text())[:12]
    checked = 0
    for run in runs:
        messages, tools = normalize_conversation({"messages": copy.deepcopy(run["traj"])})
        try:
            text, _, _ = _render_and_locate(tok, template_layout(tok), messages, tools, _render, "into_first_user")
        except ConversationError:
            continue  # text and a call in one message: R7B renders no content beside calls
        want, pending, index = [], [], 0
        for m in messages:
            if m.get("tool_calls"):
                pending = [(c["id"], str(index + k)) for k, c in enumerate(m["tool_calls"])]
                index += len(m["tool_calls"])
            elif m["role"] == "tool":
                k = next(k for k, (cid, _) in enumerate(pending) if cid == m["tool_call_id"])
                want.append(pending.pop(k)[1])
        assert [number for number, _ in _result_numbers(text)] == want
        checked += 1
    assert checked >= 8
    from lightning_agents.datamodules.chat import _warn_notes
    from lightning_agents.datamodules.conversations import NOTE_CALL_IDS_UNIQUE

    with caplog.at_level(logging.WARNING):
        _warn_notes([f"conversation 0: {NOTE_CALL_IDS_UNIQUE}"], "the chat template r7b.jinja (data.chat_template)")
    assert "1 conversation(s) have tool-call ids that repeat or are missing" in caplog.text
    assert "r7b.jinja" in caplog.text
