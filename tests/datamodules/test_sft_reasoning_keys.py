"""SFT of reasoning turns on templates that read ``reasoning`` or ``thinking`` (session 44).

Normalized messages keep an assistant's reasoning as ``reasoning_content`` (Qwen3's and GLM's name),
and transformers fills in ``thinking`` when it renders, never ``reasoning``. Solar-Open's template
(``tests/data/tool_call_outputs/templates/upstage-Solar-Open-100B.jinja``, Upstage's
``chat_template.jinja``) reads the reasoning only from ``message.reasoning``, which is also the name
the rollouts store it under for that template (``rollout/agent_turn.py``). So every Solar-Open
trajectory with reasoning was refused for SFT ("the chat template does not render this turn's
reasoning_content"). Messages handed to ``tokenize_conversation`` without normalizing (a rollout's
``reasoning``, gpt-oss's ``thinking``) were rendered with the reasoning, but it was left out of the
labels, since only ``reasoning_content`` was looked for: the think block was trained as context.

Rendering now hands the reasoning to every template under all three names (no real template
renders it twice: the last test checks the templates stored here), and the labels are found from
whichever name holds it. Solar-Open's ``<|think|>`` message and gpt-oss's analysis channel follow
the generation prompt (``<|begin|>assistant`` / ``<|start|>assistant``), so the model's own text,
reasoning included, is labelled from there to the turn's end.
"""

from __future__ import annotations

import copy
import json

import pytest
from chat_template_helpers import (
    CALCULATOR,
    OURS,
    OUTPUTS,
    REAL_TEMPLATES,
    SHARED,
    labelled_runs,
    tokenizer_with_template,
)

from lightning_agents.datamodules.chat import ChatDataModule
from lightning_agents.datamodules.conversations import (
    ConversationError,
    normalize_conversation,
    tokenize_conversation,
    tokenize_many,
    with_reasoning_keys,
)
from lightning_agents.datamodules.topocurate import TopoCurateDataModule
from lightning_agents.models import load_tokenizer

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
GPT_OSS = OURS / "gpt_oss_120b.jinja"
KEYS = ("reasoning_content", "thinking", "reasoning")
CALL = {
    "id": "a1b2c3d4e5",  # Solar-Open's ids: ten lowercase letters or digits
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expression": "17*23"}'},
}
THOUGHT_CALL = "Seventeen times twenty-three is easier with the calculator."
THOUGHT_ANSWER = "The tool returned three hundred ninety-one."
ANSWER = "The answer is 391."


def _trajectory(key: str, call_reasoned: bool = True) -> list[dict]:
    """A reasoned call, its result and a reasoned answer, as a rollout stores them (content ``""`` on a call)."""
    call_turn = {"role": "assistant", "content": "", "tool_calls": [copy.deepcopy(CALL)]}
    if call_reasoned:
        call_turn[key] = THOUGHT_CALL
    return [
        {"role": "user", "content": "What is 17*23?"},
        call_turn,
        {"role": "tool", "tool_call_id": CALL["id"], "name": "calculator", "content": "391"},
        {"role": "assistant", "content": ANSWER, key: THOUGHT_ANSWER},
    ]


SOLAR_CALL_RUN = (
    f"<|think|>{THOUGHT_CALL}<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>a1b2c3d4e5"
    '<|tool_call:name|>calculator<|tool_call:args|>{"expression": "17*23"}<|tool_call:end|><|calls|>'
)
SOLAR_ANSWER_RUN = f"<|think|>{THOUGHT_ANSWER}<|end|><|begin|>assistant<|content|>{ANSWER}<|end|>"
GPT_OSS_ANSWER_RUN = (
    f"<|channel|>analysis<|message|>{THOUGHT_ANSWER}<|end|><|start|>assistant<|channel|>final<|message|>"
    f"{ANSWER}<|return|>"
)


def _tok(path):
    eos, bos, special = REAL_TEMPLATES[path]
    if path == SOLAR:
        # The real tokenizer's EOS is <|endoftext|>; <|flush|> closes an answer (tests/rollout/test_glue_leftovers.py).
        eos = "<|endoftext|>"
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)
    if path == SOLAR:
        tok.add_special_tokens({"additional_special_tokens": ["<|flush|>"]}, replace_extra_special_tokens=False)
    return tok


@pytest.fixture(scope="module")
def solar():
    return _tok(SOLAR)


@pytest.fixture(scope="module")
def gpt_oss():
    return _tok(GPT_OSS)


def _runs(tok, messages: list[dict], path: str, stripped_reasoning: str = "train", notes: list | None = None):
    """Labelled runs of a conversation tokenized the way ``path`` names:

    ``normalized``: normalize_conversation, then tokenize_many rendering with apply_chat_template;
    ``json``: as ChatDataModule does it (the normalized messages through JSON, the compiled template);
    ``raw``: the messages as stored, straight into tokenize_conversation.
    """
    if path == "raw":
        return labelled_runs(tok, tokenize_conversation(tok, copy.deepcopy(messages), [CALCULATOR]))
    normalized, tools = normalize_conversation({"messages": copy.deepcopy(messages), "tools": [CALCULATOR]})
    if path == "json":
        normalized, tools = json.loads(json.dumps(normalized)), json.loads(json.dumps(tools))
    got = []
    row = tokenize_many(
        tok, [(normalized, tools)], from_json=path == "json", stripped_reasoning=stripped_reasoning, notes=got
    )[0]
    if isinstance(row, ConversationError):
        raise row
    if notes is not None:
        notes.extend(got[0])
    return labelled_runs(tok, row)


@pytest.mark.parametrize("path", ["normalized", "json", "raw"])
@pytest.mark.parametrize("key", KEYS)
def test_solar_open_reasoning_is_rendered_and_trained_with_the_turn(solar, key, path):
    # Before: normalized/json refused ("does not render this turn's reasoning_content"); raw `reasoning`
    # and `thinking` rendered nothing or left the <|think|> message unlabelled.
    runs = _runs(solar, _trajectory(key), path)
    assert runs == [SOLAR_CALL_RUN, SOLAR_ANSWER_RUN]


def test_solar_open_drops_earlier_turns_reasoning_so_they_stay_context(solar):
    # "lastthink": Solar-Open writes the <|think|> message only after the last user message; the earlier
    # turn, rendered without the reasoning its model wrote, is context (as Qwen3's), the last one trained whole.
    messages = [
        {"role": "user", "content": "What is 2*3?"},
        {"role": "assistant", "content": "It is 6.", "reasoning": "Two threes make six."},
        {"role": "user", "content": "And 17*23?"},
        {"role": "assistant", "content": ANSWER, "reasoning": THOUGHT_ANSWER},
    ]
    notes: list[str] = []
    assert _runs(solar, messages, "json", "context", notes) == [SOLAR_ANSWER_RUN]
    assert notes == ["message 1: context only: the chat template drops this turn's reasoning"]


@pytest.mark.parametrize("path", ["normalized", "json", "raw"])
@pytest.mark.parametrize("key", KEYS)
def test_gpt_oss_analysis_channel_is_trained_with_the_answer(gpt_oss, key, path):
    # Before: messages not normalized (`thinking`, `reasoning`) rendered the analysis channel, but
    # its labels started at <|channel|>final: the reasoning was trained as context.
    runs = _runs(gpt_oss, _trajectory(key, call_reasoned=False), path)
    assert runs[-1] == GPT_OSS_ANSWER_RUN


@pytest.mark.parametrize("path", ["normalized", "raw"])
def test_gpt_oss_analysis_does_not_depend_on_transformers_filling_in_thinking(gpt_oss, path, monkeypatch):
    # transformers 5.x copies reasoning_content into `thinking` when it renders; without that copy
    # (its helper made a no-op here) gpt-oss's analysis was refused ("does not render this turn's reasoning_content").
    monkeypatch.setattr("transformers.utils.chat_template_utils._alias_reasoning_fields", lambda chat: chat)
    runs = _runs(gpt_oss, _trajectory("reasoning_content", call_reasoned=False), path)
    assert runs[-1] == GPT_OSS_ANSWER_RUN


def test_gpt_oss_drops_a_calls_analysis_once_an_answer_follows_so_that_turn_is_refused(gpt_oss):
    # Why gpt-oss's call turns cannot be trained with their analysis in one row: its template keeps a
    # call's analysis only while no final answer follows it (harmony drops the chain of thought once
    # the model has answered), so the call turn would be trained without the reasoning its model wrote.
    with pytest.raises(ConversationError, match="message 1: the chat template does not render this turn's reasoning"):
        _runs(gpt_oss, _trajectory("thinking"), "json", "context")
    # ending at the call, the conversation renders the analysis, and it is trained with the call
    runs = _runs(gpt_oss, _trajectory("thinking")[:2], "json")
    assert runs == [
        f"<|channel|>analysis<|message|>{THOUGHT_CALL}<|end|><|start|>assistant to=functions.calculator"
        '<|channel|>commentary json<|message|>{"expression": "17*23"}<|call|>'
    ]


def test_chat_data_module_trains_a_solar_open_rollout_with_its_reasoning(solar, tmp_path):
    # Before: DataFormatError "... does not render this turn's reasoning_content".
    path = tmp_path / "solar.jsonl"
    path.write_text(json.dumps({"messages": _trajectory("reasoning"), "tools": [CALCULATOR]}) + "\n")
    dm = ChatDataModule(train=str(path), val=None, cache_dir=None, max_length=4096)
    dm._tokenizer = solar
    dm.setup("fit")
    assert labelled_runs(solar, dm.datasets["fit"][0]) == [SOLAR_CALL_RUN, SOLAR_ANSWER_RUN]


def test_topocurate_trains_solar_open_rollouts_with_their_reasoning(solar, tmp_path):
    # TopoCurate's SFT rows of rollouts written by the rollout command (Solar-Open's reasoning under
    # `reasoning`). Before: ValueError "... does not render this turn's reasoning_content".
    records = [
        {
            "task_id": f"task{t}",
            "trial": k,
            "reward": 1.0,
            "info": {"reference": "391"},
            "tools": [CALCULATOR],
            "traj": _trajectory("reasoning"),
        }
        for t in range(2)
        for k in range(2)
    ]
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(records))
    dm = TopoCurateDataModule(rollouts=[str(path)], cache_dir=None, max_length=4096, batch_size=2)
    dm._tokenizer = solar
    dm.setup("fit")
    rows = dm.datasets["fit"]
    assert len(rows) > 0
    assert all(labelled_runs(solar, row) == [SOLAR_CALL_RUN, SOLAR_ANSWER_RUN] for row in rows)


def test_with_reasoning_keys_fills_the_missing_names_and_copies_only_what_it_changes():
    plain = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert with_reasoning_keys(plain) is plain
    reasoned = [plain[0], {"role": "assistant", "content": "Hello", "reasoning": "Greet back.", "thinking": None}]
    out = with_reasoning_keys(reasoned)
    assert out[0] is plain[0] and out[1] is not reasoned[1]
    assert {k: out[1][k] for k in KEYS} == dict.fromkeys(KEYS, "Greet back.")
    assert reasoned[1] == {"role": "assistant", "content": "Hello", "reasoning": "Greet back.", "thinking": None}
    # a name the message has keeps its own value
    both = with_reasoning_keys([{"role": "assistant", "content": "x", "reasoning_content": "A", "reasoning": "B"}])
    assert (both[0]["reasoning_content"], both[0]["thinking"], both[0]["reasoning"]) == ("A", "A", "B")
    # a blank name is no reasoning (normalize_conversation skips it too): it gets the text
    blank = with_reasoning_keys([{"role": "assistant", "content": "x", "reasoning_content": " ", "reasoning": "B"}])
    assert {k: blank[0][k] for k in KEYS} == dict.fromkeys(KEYS, "B")


def _stored_templates():
    folders = [OURS, OUTPUTS, SHARED]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob("*.jinja"))


def test_no_stored_template_renders_the_reasoning_twice_under_all_three_names():
    """Every template stored here (tests/data's and ../shared/data's when present), given a reasoning
    turn under all three names, renders what it renders given the name it reads alone: none reads two
    names and writes both (Gemma 4 and Mistral's think templates read `reasoning` or `reasoning_content`,
    the first they find). Rendered by the compiled template itself, without transformers' aliasing.
    A sweep of 114 templates (the 112 of the session-42 review plus these) found the same."""
    compile_template = pytest.importorskip("transformers.utils.chat_template_utils")._compile_jinja_template
    tok = load_tokenizer("embedded:student")
    variables = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
    variables.update(bos_token="<s>", eos_token="</s>")
    readers: dict[str, set[str]] = {}
    templates = _stored_templates()
    assert len(templates) >= 35
    for path in templates:
        template = compile_template(path.read_text())
        for cut in (2, 4):  # the reasoned call turn last, and the reasoned answer after its result

            def render(names, template=template, cut=cut):
                messages = _trajectory("reasoning_content")[:cut]
                for m in messages:
                    if "reasoning_content" in m:
                        reasoning = m.pop("reasoning_content")
                        m.update(dict.fromkeys(names, reasoning))
                    for call in m.get("tool_calls") or []:
                        call["function"]["arguments"] = json.loads(call["function"]["arguments"])
                try:
                    return template.render(
                        messages=messages, tools=[CALCULATOR], add_generation_prompt=False, **variables
                    )
                except Exception as exc:  # noqa: BLE001 - a template that refuses this conversation
                    return f"refused: {exc}"

            alone = {name: render((name,)) for name in KEYS}
            together = render(KEYS)
            read = [name for name in KEYS if THOUGHT_CALL in alone[name] or THOUGHT_ANSWER in alone[name]]
            readers.setdefault(path.name, set()).update(read)
            for name in read or ["reasoning_content"]:
                assert together == alone[name], f"{path.name}: {name} alone renders otherwise than all three names"
    assert readers[SOLAR.name] == {"reasoning"}
    assert readers[GPT_OSS.name] == {"thinking"}
    assert readers["qwen3_5_4b.jinja"] == {"reasoning_content"}
