"""Assistant-only labels on the original chat templates of real model families.

Each template in ``../shared/data/chat_templates`` is attached to the embedded tokenizer extended
with the template's special tokens. The expected labelled text of every assistant message is
written out here per template family, independently of how the code finds it: the message's
content, its tool calls as the family renders them, and the end-of-turn token; never system,
user or tool text, never template-inserted text such as Qwen3's empty think block.
"""

from __future__ import annotations

import copy
import json
import re
from functools import partial

import pytest
from chat_template_helpers import CALCULATOR, WEATHER, labelled_runs, tokenizer_with_template

from lightning_agents.datamodules import conversations
from lightning_agents.datamodules.conversations import (
    ConversationError,
    normalize_conversation,
    template_layout,
    tokenize_conversation,
)
from lightning_agents.models import load_tokenizer
from lightning_agents.template_clock import render_chat_template


def call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


CONVERSATIONS = {
    "system_multi_turn": {
        "messages": [
            {"role": "system", "content": "You are a careful assistant. Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is Paris."},
            {"role": "user", "content": "And of Italy?"},
            {"role": "assistant", "content": "Rome is the capital of Italy."},
        ],
    },
    "tool_call_and_result": {
        "messages": [
            {"role": "system", "content": "Use the calculator for arithmetic."},
            {"role": "user", "content": "Tom has 17 apples and buys 25 more. How many now?"},
            {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expression": "17 + 25"}, "c1")]},
            {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "42"},
            {"role": "assistant", "content": "Tom has 42 apples."},
        ],
        "tools": [CALCULATOR],
    },
    "content_then_parallel_calls": {
        "messages": [
            {"role": "user", "content": "Weather in Oslo and in Lima, please."},
            {
                "role": "assistant",
                "content": "Let me look both up.",
                "tool_calls": [
                    call("get_weather", {"city": "Oslo"}, "w1"),
                    call("get_weather", {"city": "Lima"}, "w2"),
                ],
            },
            {"role": "tool", "tool_call_id": "w1", "name": "get_weather", "content": "Oslo: 3 C, snow"},
            {"role": "tool", "tool_call_id": "w2", "name": "get_weather", "content": "Lima: 24 C, sunny"},
            {"role": "assistant", "content": "Oslo is snowy at 3 C; Lima is sunny at 24 C."},
        ],
        "tools": [WEATHER],
    },
    "parallel_calls_without_content": {
        "messages": [
            {"role": "system", "content": "You check the weather."},
            {"role": "user", "content": "Is it warmer in Oslo or in Lima?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call("get_weather", {"city": "Oslo"}, "w1"),
                    call("get_weather", {"city": "Lima"}, "w2"),
                ],
            },
            {"role": "tool", "tool_call_id": "w1", "name": "get_weather", "content": "Oslo: 3 C"},
            {"role": "tool", "tool_call_id": "w2", "name": "get_weather", "content": "Lima: 24 C"},
            {"role": "assistant", "content": "Lima is warmer."},
            {"role": "user", "content": "By how much?"},
            {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expression": "24 - 3"}, "c9")]},
            {"role": "tool", "tool_call_id": "c9", "name": "calculator", "content": "21"},
            {"role": "assistant", "content": "By 21 degrees."},
        ],
        "tools": [WEATHER, CALCULATOR],
    },
}


def _args(fn):
    return json.dumps(json.loads(fn["arguments"]), ensure_ascii=False)


def expected_chatml_tools(message, state):
    """Qwen2.5 / Qwen3 / Qwen3-2507: content, then each call in <tool_call> tags, then <|im_end|>."""
    parts = [message["content"]] if message["content"] else []
    for c in message.get("tool_calls") or []:
        fn = c["function"]
        parts.append('<tool_call>\n{"name": "' + fn["name"] + '", "arguments": ' + _args(fn) + "}\n</tool_call>")
    return "\n".join(parts) + "<|im_end|>"


def expected_llama(message, state):
    calls = message.get("tool_calls") or []
    if calls:
        fn = calls[0]["function"]
        return '{"name": "' + fn["name"] + '", "parameters": ' + _args(fn) + "}<|eot_id|>"
    return message["content"].strip() + "<|eot_id|>"


def expected_deepseek(message, state):
    calls = message.get("tool_calls") or []
    if not calls:
        return message["content"] + "<｜end▁of▁sentence｜>"
    rendered = "\n".join(
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
        + c["function"]["name"]
        + "\n```json\n"
        + _args(c["function"])
        + "\n```<｜tool▁call▁end｜>"
        for c in calls
    )
    end = "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    if state.get("called"):
        # The template opens <｜tool▁calls▁begin｜> only in the conversation's first tool-call turn
        # (its `ns.is_first` is never reset); later turns start at the call itself.
        return rendered + end
    state["called"] = True
    return (message["content"] or "") + "<｜tool▁calls▁begin｜>" + rendered + end


def expected_plain(end):
    def expected(message, state):
        assert not message.get("tool_calls")
        return message["content"] + end

    return expected


# template -> (bos, eos, expected labelled text of one assistant message, which conversations it refuses and why)
FAMILIES = {
    "qwen2_5.jinja": (None, "<|im_end|>", expected_chatml_tools, {}),
    "qwen3.jinja": (None, "<|im_end|>", expected_chatml_tools, {}),
    "qwen3_instruct_2507.jinja": (None, "<|im_end|>", expected_chatml_tools, {}),
    "llama3_1.jinja": (
        "<|begin_of_text|>",
        "<|eot_id|>",
        expected_llama,
        {
            "content_then_parallel_calls": "cannot render",  # raise_exception: single tool-calls only
            "parallel_calls_without_content": "cannot render",
        },
    ),
    "llama3_2.jinja": (
        "<|begin_of_text|>",
        "<|eot_id|>",
        expected_llama,
        {
            "content_then_parallel_calls": "cannot render",
            "parallel_calls_without_content": "cannot render",
        },
    ),
    "deepseekv3.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", expected_deepseek, {}),
    "phi3_5.jinja": (
        None,
        "<|endoftext|>",
        expected_plain("<|end|>"),
        {
            "tool_call_and_result": "does not render tool calls",
            "content_then_parallel_calls": "does not render tool calls",
            "parallel_calls_without_content": "does not render tool calls",
        },
    ),
    "smollm2.jinja": (
        None,
        "<|im_end|>",
        expected_plain("<|im_end|>"),
        {
            "tool_call_and_result": "does not render tool calls",
            "content_then_parallel_calls": "does not render tool calls",
            "parallel_calls_without_content": "does not render tool calls",
        },
    ),
}


@pytest.fixture(scope="module")
def base_tokenizer():
    return load_tokenizer("embedded:student")


@pytest.fixture(scope="module")
def templates(shared_data):
    folder = shared_data / "chat_templates"
    found = sorted(p.name for p in folder.glob("*.jinja"))
    assert set(found) == set(FAMILIES), f"a template without expectations here: {set(found) ^ set(FAMILIES)}"
    return {name: (folder / name).read_text() for name in found}


@pytest.mark.parametrize("template_name", sorted(FAMILIES))
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_labels_are_exactly_the_assistant_parts(templates, base_tokenizer, template_name, conversation):
    bos, eos, expected_of, refused = FAMILIES[template_name]
    tok = tokenizer_with_template(base_tokenizer, templates[template_name], bos, eos)
    messages, tools = normalize_conversation(copy.deepcopy(CONVERSATIONS[conversation]))
    if conversation in refused:
        with pytest.raises(ConversationError, match=refused[conversation]):
            tokenize_conversation(tok, messages, tools)
        return
    row = tokenize_conversation(tok, messages, tools)
    raw = CONVERSATIONS[conversation]["messages"]
    state = {}
    expected = [expected_of(m, state) for m in raw if m["role"] == "assistant"]
    assert labelled_runs(tok, row) == expected
    # never the other roles' text, never a template-inserted think block
    labelled = "".join(labelled_runs(tok, row))
    for m in raw:
        if m["role"] != "assistant" and len(m["content"]) > 3:
            assert m["content"] not in labelled
    assert "<think>" not in labelled


@pytest.mark.parametrize("template_name", ["qwen2_5.jinja", "qwen3.jinja", "deepseekv3.jinja", "llama3_1.jinja"])
def test_real_tau_bench_conversation(templates, base_tokenizer, shared_data, template_name):
    """A real 32-message tau-bench airline trajectory (system prompt, 8 tool calls, user turns)."""
    bos, eos, expected_of, _ = FAMILIES[template_name]
    tok = tokenizer_with_template(base_tokenizer, templates[template_name], bos, eos)
    trajectory = json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text())[0]["traj"]
    messages, tools = normalize_conversation({"messages": trajectory})
    row = tokenize_conversation(tok, messages, tools)
    state = {}
    expected = [expected_of(m, state) for m in trajectory if m["role"] == "assistant"]
    assert labelled_runs(tok, row) == expected


def test_qwen3_rewrites_earlier_turns_and_the_old_prefix_method_would_mislabel(templates, base_tokenizer):
    """Qwen3 is not prefix-preserving; the locator does not depend on it."""
    tok = tokenizer_with_template(base_tokenizer, templates["qwen3.jinja"], None, "<|im_end|>")
    messages, tools = normalize_conversation(copy.deepcopy(CONVERSATIONS["tool_call_and_result"]))
    full = render_chat_template(tok, messages, tools=tools, tokenize=False)
    partial = render_chat_template(tok, messages[:3], tools=tools, tokenize=False)
    assert not full.startswith(partial)  # the last turn gets an empty think block, earlier ones do not
    assert "<think>\n\n</think>" in full


@pytest.mark.parametrize(
    "spelling",
    ["{% generation %}", "{%- generation %}", "{% generation -%}", "{%- generation -%}", "{%generation%}"],
)
def test_generation_markers_in_every_spelling_use_the_template_mask(base_tokenizer, spelling):
    tok = copy.deepcopy(base_tokenizer)
    template = re.sub(r"\{%-?\s*generation\s*-?%\}", spelling, tok.chat_template)
    # the embedded template's spacing must survive: only the tag's whitespace control changes
    tok.chat_template = template
    layout = template_layout(tok)
    assert layout.generation_markers
    # Labelled from the mask, but where turns end and how calls open is probed all the same
    # (generation stops and the rollouts' call parser read them).
    assert layout.stop_tokens == ("<|im_end|>",) and layout.tool_call_opener == '<tool_call>{"name": "'
    messages, tools = normalize_conversation(copy.deepcopy(CONVERSATIONS["tool_call_and_result"]))
    row = tokenize_conversation(tok, messages, tools)
    runs = labelled_runs(tok, row)
    assert len(runs) == 2 and runs[1].startswith("Tom has 42 apples.") and runs[1].endswith("<|im_end|>")


def test_a_tokenizer_without_the_template_tokens_is_refused_clearly(templates, base_tokenizer):
    tok = copy.deepcopy(base_tokenizer)
    tok.chat_template = templates["phi3_5.jinja"]  # <|end|> is not a token of this tokenizer
    messages, tools = normalize_conversation(copy.deepcopy(CONVERSATIONS["system_multi_turn"]))
    with pytest.raises(ValueError, match="special tokens"):
        tokenize_conversation(tok, messages, tools)


# The shortcuts of the fast path (see conversations._json_renderer and conversations._Encoder) must
# give exactly what apply_chat_template and a whole-text tokenizer call give.


def _tau_bench(shared_data, n):
    return [
        {"messages": r["traj"]} for r in json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text())[:n]
    ]


def _outcome(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - both paths must refuse alike
        return ("refused", type(exc).__name__)


@pytest.mark.parametrize("template_name", sorted(FAMILIES))
def test_json_conversations_render_and_label_as_apply_chat_template_does(
    templates, base_tokenizer, shared_data, template_name
):
    """The data module's path (direct render of JSON-decoded data): byte-identical text, identical rows."""
    bos, eos, _, _ = FAMILIES[template_name]
    tok = tokenizer_with_template(base_tokenizer, templates[template_name], bos, eos)
    render = conversations._plan(tok).json_render
    assert render is not None
    cases = [CONVERSATIONS[k] for k in sorted(CONVERSATIONS)] + _tau_bench(shared_data, 3)
    for case in cases:
        messages, tools = normalize_conversation(copy.deepcopy(case))
        for form in (messages, conversations._with_string_arguments(messages)):
            decoded = json.loads(json.dumps({"messages": form, "tools": tools}))
            expected = _outcome(partial(render_chat_template, tok, form, tools=tools, tokenize=False))
            assert _outcome(partial(render, tok, decoded["messages"], decoded["tools"])) == expected
        decoded = json.loads(json.dumps({"messages": messages, "tools": tools}))
        row = conversations.tokenize_many(tok, [(decoded["messages"], decoded["tools"])], from_json=True)[0]
        reference = _outcome(partial(tokenize_conversation, tok, messages, tools))
        if isinstance(row, ConversationError):
            assert reference == ("refused", "ConversationError")
        else:
            assert {k: v.tolist() for k, v in row.items()} == reference


def _whole_text(tok, texts):
    encoded = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
    return [(ids, [list(o) for o in offsets]) for ids, offsets in zip(encoded["input_ids"], encoded["offset_mapping"])]


def _encoded(encoder, texts):
    return [
        (ids.tolist(), [[int(s), int(e)] for s, e in zip(starts, ends)]) for ids, starts, ends in encoder.encode(texts)
    ]


def test_encoder_gives_the_tokenizers_own_ids_and_offsets(templates, base_tokenizer, shared_data):
    """System prompt tokenized once, offsets from byte lengths: the same as tokenizing each text whole."""
    tok = tokenizer_with_template(base_tokenizer, templates["qwen2_5.jinja"], None, "<|im_end|>")
    encoder = conversations._Encoder(tok, "<|im_end|>")
    assert encoder.marker == "<|im_end|>" and encoder.byte_lengths is not None  # both shortcuts in use
    texts = [
        render_chat_template(tok, normalize_conversation(c)[0], tokenize=False) for c in _tau_bench(shared_data, 12)
    ]
    assert any(not t.isascii() for t in texts)  # multi-byte characters: byte and character offsets differ
    texts += ["", "<|im_end|>", "x<|im_end|>", "<|im_end|> été 中文<|im_end|>\n", "no marker at all: café"]
    for _ in range(2):  # the second time the prefixes come from the cache
        assert _encoded(encoder, texts) == _whole_text(tok, texts)
    assert texts[0][: texts[0].index("<|im_end|>") + len("<|im_end|>")] in encoder.prefixes


def test_an_added_token_across_the_marker_keeps_the_text_whole(base_tokenizer):
    tok = copy.deepcopy(base_tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>", "d<|im"]}, replace_extra_special_tokens=False)
    encoder = conversations._Encoder(tok, "<|im_end|>")
    assert encoder.marker == "<|im_end|>"
    crossing, plain = "you and<|im_end|>\nnext", "you an<|im_end|>\nnext"
    assert encoder._split_at(crossing) == -1 and encoder._split_at(plain) == len("you an<|im_end|>")
    assert _encoded(encoder, [crossing, plain]) == _whole_text(tok, [crossing, plain])


@pytest.mark.parametrize("scheme, splits", [("first", False), ("always", True)])
def test_a_tokenizer_that_treats_the_first_piece_differently_is_not_split(shared_data, scheme, splits):
    """Metaspace with prepend_scheme="first" marks only the input's first word: no prefix reuse there."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [m["content"] for c in _tau_bench(shared_data, 5) for m in c["messages"] if m.get("content")]
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme)
    backend.decoder = decoders.Metaspace(prepend_scheme=scheme)
    special = ["<unk>", "<|im_start|>", "<|im_end|>"]
    backend.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=special, show_progress=False)
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", unk_token="<unk>")
    encoder = conversations._Encoder(tok, "<|im_end|>")
    assert (encoder.marker is not None) == splits
    assert encoder.byte_lengths is None  # not byte-level: the tokenizer's own offsets
    texts = ["<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n"] * 2
    assert _encoded(encoder, texts) == _whole_text(tok, texts)


@pytest.mark.parametrize("template_name", ["llama3_1.jinja", "llama3_2.jinja"])
def test_a_reply_quoting_a_tool_result_that_llama_renders_as_json_is_labelled_itself(
    templates, base_tokenizer, template_name
):
    # Llama 3.1/3.2 render a string tool result with |tojson (quoted, newlines escaped), so the
    # locator did not find it and kept its cursor before it: a reply repeating the result's first
    # line was "found" inside the tool result, which was trained on instead of the reply. The
    # tool output is a real tau2 telecom one (sierra-research/tau2-bench GPT-4.1 no-user run).
    bos, eos, expected_of, _ = FAMILIES[template_name]
    tok = tokenizer_with_template(base_tokenizer, templates[template_name], bos, eos)
    raw = [
        {"role": "system", "content": "You are a telecom support agent."},
        {"role": "user", "content": "My phone shows no signal, please fix it."},
        {"role": "assistant", "content": "", "tool_calls": [call("reset_apn_settings", {}, "c1")]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "reset_apn_settings",
            "content": "APN settings will reset at reboot.\nStatus Bar: 📵 No Signal | 📵 Data Disabled | 🔋 80%",
        },
        {"role": "assistant", "content": "APN settings will reset at reboot."},
        {"role": "user", "content": "OK, thanks."},
        {"role": "assistant", "content": "You're welcome."},
    ]
    messages, tools = normalize_conversation(copy.deepcopy({"messages": raw}))
    row = tokenize_conversation(tok, messages, tools)
    state = {}
    assert labelled_runs(tok, row) == [expected_of(m, state) for m in raw if m["role"] == "assistant"]
    assert "Status Bar" not in "".join(labelled_runs(tok, row))
