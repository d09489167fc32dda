"""Text parts joined as vLLM's OpenAI server gives them to the chat template, in rollouts and SFT
alike (review of a722ec6, M1): a template that loops over a message's parts ("openai" content
format, vllm-project/vllm vllm/renderers/hf.py ``_detect_content_format``) gets the list and
joins it itself, so a newline join there was not the served prompt; a "string" template and
every tool message get the parts joined with a newline (vllm/entrypoints/chat_utils.py).

Only repository test data is used (tests/data/chat_templates, tests/data/tool_call_outputs)."""

from __future__ import annotations

import warnings

import pytest
from chat_template_helpers import OURS, OUTPUTS, REAL_TEMPLATES, SPECIAL_WIDE, labelled_runs, tokenizer_with_template

import lightning_agents.content_parts as content_parts
from lightning_agents.datamodules.conversations import normalize_conversation, tokenize_conversation
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import HFGenerationEngine
from lightning_agents.template_clock import render_chat_template

PARTS = [{"type": "text", "text": "What is 17*23?"}, {"type": "text", "text": "Answer briefly."}]
#: Parts with whitespace at their edges: Gemma 3 and Llama 4 trim each part they are given.
EDGED = [{"type": "text", "text": "What is 17*23? "}, {"type": "text", "text": "\nAnswer briefly."}]
SMALL = OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja"
#: Templates that loop over a message's content parts themselves (vLLM: "openai" format).
OPENAI_FORMAT = [SMALL, OUTPUTS / "vllm-gemma3-pythonic.jinja", OUTPUTS / "moonshotai-Kimi-K2.jinja"]
OPENAI_FORMAT.append(OURS / "vllm_llama4_pythonic.jinja")


def _tok(path):
    eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


@pytest.mark.parametrize("parts", [PARTS, EDGED], ids=["plain", "edged"])
@pytest.mark.parametrize("path", OPENAI_FORMAT, ids=lambda p: p.stem)
def test_a_prompt_in_text_parts_renders_as_the_template_renders_the_list(path, parts):
    # vLLM hands these templates the parts as a list; a722ec6 joined them with "\n" first, so the
    # rollout prompt read "17*23?\nAnswer briefly." where the served one reads "17*23?Answer briefly.".
    tok = _tok(path)
    conversation = [{"role": "user", "content": parts}]
    served = render_chat_template(tok, conversation, tokenize=False, add_generation_prompt=True)
    assert HFGenerationEngine(None, tok).render(conversation) == served
    assert content_parts.template_content_format(tok.chat_template) == "openai"


def test_sft_trains_a_user_turn_in_text_parts_as_mistral_small_3_2_reads_it_served():
    tok = _tok(SMALL)
    record = {"messages": [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "391"}]}
    messages, tools = normalize_conversation(record)
    text = tok.decode(tokenize_conversation(tok, messages, tools)["input_ids"])
    served = render_chat_template(tok, record["messages"], tokenize=False)
    assert "17*23?Answer briefly." in served and "17*23?Answer briefly." in text
    # an assistant reply in parts is labelled as the template joins it
    record["messages"][1]["content"] = [{"type": "text", "text": "It is"}, {"type": "text", "text": " 391."}]
    messages, tools = normalize_conversation(record)
    row = tokenize_conversation(tok, messages, tools)
    labelled = tok.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    assert labelled.startswith("It is 391.")
    # and the rollout prompt of the same turn is the SFT row's context
    prompt = HFGenerationEngine(None, tok).render(record["messages"][:1])
    assert text.startswith(prompt[: prompt.index("[/INST]")])


def test_a_string_template_and_tool_results_join_parts_with_a_newline():
    # Nemo's template reads content only as a string: vLLM joins the parts with "\n" first, and
    # the rollout prompt and the SFT row do too.
    nemo = _tok(OURS / "mistral_nemo_2407.jinja")
    assert content_parts.template_content_format(nemo.chat_template) == "string"
    assert content_parts.prompt_parts_join(nemo, "user") == "\n"
    record = {"messages": [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "391"}]}
    messages, tools = normalize_conversation(record)
    assert "17*23?\nAnswer briefly." in nemo.decode(tokenize_conversation(nemo, messages, tools)["input_ids"])
    assert "17*23?\nAnswer briefly." in HFGenerationEngine(None, nemo).render(record["messages"][:1])
    # A tool message's parts are joined by vLLM itself, whatever the template's format.
    small = _tok(SMALL)
    assert (
        content_parts.prompt_parts_join(small, "user") == "" and content_parts.prompt_parts_join(small, "tool") == "\n"
    )


def test_the_content_format_is_detected_as_vllm_detects_it():
    loops = (
        "{% for message in messages %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endfor %}"
    )
    assert content_parts.template_content_format(loops) == "openai"
    # through a variable assigned from messages (vLLM follows assignments)
    assigned = "{% set rest = messages[1:] %}" + loops.replace("in messages", "in rest")
    assert content_parts.template_content_format(assigned) == "openai"
    # mistral-common v7+ loop over `loop_messages + [sentinel]` and a merged `content`: vLLM's
    # detector finds no loop over a message's content there, so it serves them as "string".
    merged = (
        "{% set loop_messages = messages %}{% for message in loop_messages + [{'role': 'x'}] %}"
        "{% set content = message['content'] %}{% for block in content %}{{ block }}{% endfor %}{% endfor %}"
    )
    assert content_parts.template_content_format(merged) == "string"
    assert content_parts.template_content_format("{{ messages[0]['content'] }}") == "string"
    # vLLM asserts a matching assignment binds a plain name; where not, it falls back to "string"
    namespaced = "{% set ns = namespace() %}{% set ns.rest = messages %}" + loops
    assert content_parts.template_content_format(namespaced) == "string"
    with warnings.catch_warnings():  # does not parse: vLLM's default (the warning has its own test)
        warnings.simplefilter("ignore", RuntimeWarning)
        assert content_parts.template_content_format("{% for x in %}") == "string"


def test_chat_template_content_format_overrides_the_detection_as_vllm_s_option_does():
    tok = _tok(SMALL)
    tok.chat_template_content_format = "string"  # vLLM's --chat-template-content-format string
    conversation = [{"role": "user", "content": PARTS}]
    assert "17*23?\nAnswer briefly.[/INST]" in HFGenerationEngine(None, tok).render(conversation)
    tok.chat_template_content_format = "lists"
    with pytest.raises(ValueError, match="chat_template_content_format"):
        HFGenerationEngine(None, tok).render(conversation)


def test_a_non_text_part_is_still_refused():
    tok = _tok(SMALL)
    image = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "x"}}]
    with pytest.raises(Exception, match="image_url"):
        HFGenerationEngine(None, tok).render([{"role": "user", "content": image}])


def test_the_rl_glue_shows_a_new_user_turn_in_parts_as_the_template_joins_them():
    # The glue's check that each new message is shown looked for the parts joined with "\n", which
    # a template that glues them (Small 3.2) never shows: it would refuse the turn.
    from lightning_agents.rollout.agent_loop import continuation_text

    tok = _tok(SMALL)
    history = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    glue = continuation_text(tok, history, [{"role": "user", "content": PARTS}], None, None, ["</s>"])
    assert "17*23?Answer briefly.[/INST]" in glue


GEMMA4 = OUTPUTS / "google-gemma-4-31B-it.jinja"


def _parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


def _real_tokenizer(path):
    eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


# Review of 49542b2, F1: Gemma 4 prints a system message's list as a Python repr; the probe takes the repr's
# middle as the system "separator", so SFT rows and rollout prompts carry it inside the system prompt.
def test_a_system_prompt_in_parts_on_gemma_4_is_not_joined_with_a_python_repr_fragment():
    tok = _real_tokenizer(GEMMA4)
    sep = content_parts.prompt_parts_join(tok, "system")
    assert "'type'" not in sep and "{" not in sep, sep
    conv = {
        "messages": [
            {"role": "system", "content": _parts("Be brief.", "Use the calculator.")},
            {"role": "user", "content": "What is 17*23?"},
            {"role": "assistant", "content": "391"},
        ]
    }
    msgs, tools = normalize_conversation(conv)
    text = tok.decode(tokenize_conversation(tok, msgs, tools)["input_ids"])
    assert "'type': 'text'" not in text, text[:300]


# Review of 49542b2, F3: where the template does not show a role's join (it renders only the first part, as
# Devstral-2507 and Apriel do for an assistant message, Small 3.2 / Llama 4 / Devstral for a system
# one), the user's join is taken: "" on the Mistral family, so an assistant's paragraphs are labelled
# glued ("The answer.It is 391.") where a722ec6 labelled "The answer.\nIt is 391.".
DEVSTRAL_LIKE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{% if message['content'] is string %}[INST]{{ message['content'] }}[/INST]"
    "{% else %}[INST]{% for block in message['content'] %}{{ block['text'] }}{% endfor %}[/INST]{% endif %}"
    "{% elif message['role'] == 'assistant' %}{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{{ message['content'][0]['text'] }}{% endif %}{{ eos_token }}{% endif %}{% endfor %}"
)


def test_an_assistant_join_the_template_does_not_show_falls_back_to_a_newline():
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), DEVSTRAL_LIKE, "<s>", "</s>", SPECIAL_WIDE)
    assert content_parts.template_content_format(DEVSTRAL_LIKE) == "openai"
    conv = {
        "messages": [
            {"role": "user", "content": "What is 17*23?"},
            {"role": "assistant", "content": _parts("The answer.", "It is 391.")},
        ]
    }
    msgs, tools = normalize_conversation(conv)
    runs = labelled_runs(tok, tokenize_conversation(tok, msgs, tools))
    assert "The answer.It is 391." not in runs[-1], runs


# Review of 49542b2, F2 (brief's numbering): a single text part was not kept as parts in SFT, so a
# template that trims each part it is given (Llama 4) labelled " Alpha one.\n" where the served model
# and rollouts (which join list content of any length) read "Alpha one.".
def test_a_single_edged_assistant_part_is_labelled_as_llama_4_renders_it():
    from lightning_agents.rollout.hf_engine import template_messages

    tok = _real_tokenizer(OURS / "vllm_llama4_pythonic.jinja")
    conv = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": _parts(" Alpha one.\n")}]
    served = render_chat_template(tok, conv, tokenize=False)
    assert render_chat_template(tok, template_messages(tok, conv), tokenize=False) == served
    msgs, tools = normalize_conversation({"messages": conv})
    runs = labelled_runs(tok, tokenize_conversation(tok, msgs, tools))
    assert runs[-1] == "Alpha one.<|eot|>", runs


@pytest.mark.parametrize("path", list(REAL_TEMPLATES), ids=lambda p: p.stem)
def test_a_single_part_assistant_label_is_the_text_the_rollout_renders(path):
    # Labels cover the assistant's text exactly as the template renders it in rollouts: trimmed where
    # the template trims a part (Gemma 3 and 4, Llama 4), with its edges where it does not.
    from lightning_agents.rollout.hf_engine import template_messages

    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data)")
    tok = _real_tokenizer(path)
    conv = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": _parts(" Alpha one.\n")}]
    try:
        rollout = render_chat_template(tok, template_messages(tok, conv), tokenize=False)
    except Exception as exc:  # noqa: BLE001 - a template that needs more than this conversation
        pytest.skip(f"{path.name} refuses a two-message conversation: {exc}")
    msgs, tools = normalize_conversation({"messages": conv})
    runs = labelled_runs(tok, tokenize_conversation(tok, msgs, tools))
    assert "Alpha one." in runs[-1] and "Hi." not in runs[-1], runs
    assert (" Alpha one.\n" in runs[-1]) == (" Alpha one.\n" in rollout), (runs[-1], rollout)


# Review of 49542b2, F4: the tokenized-row cache key ignored chat_template_content_format, which changes
# the join: a run with the override read the rows of a run without it.
def test_the_tokenized_cache_key_covers_the_content_format_override(tmp_path):
    import json

    from lightning_agents.datamodules.chat import read_conversations, tokenize_to_dataset

    tok = _real_tokenizer(SMALL)
    record = {"messages": [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "391"}]}
    (tmp_path / "d.jsonl").write_text(json.dumps(record) + "\n")
    convs, _ = read_conversations(str(tmp_path / "d.jsonl"))
    rows, _, _ = tokenize_to_dataset(convs, tok, 8192, cache_dir=tmp_path / "cache")
    assert "17*23?Answer briefly." in tok.decode(rows[0]["input_ids"])  # auto: "openai", glued
    tok.chat_template_content_format = "string"
    rows, _, _ = tokenize_to_dataset(convs, tok, 8192, cache_dir=tmp_path / "cache")
    assert "17*23?\nAnswer briefly." in tok.decode(rows[0]["input_ids"])


# Review of 49542b2, F5: without transformers' private _compile_jinja_template every template read as
# "string" with no warning, so the newline join came back unnoticed.
def test_the_content_format_does_not_depend_on_a_private_transformers_helper(monkeypatch):
    import transformers.utils.chat_template_utils as ctu

    monkeypatch.delattr(ctu, "_compile_jinja_template")
    content_parts.template_content_format.cache_clear()
    try:
        assert content_parts.template_content_format(SMALL.read_text()) == "openai"
    finally:
        content_parts.template_content_format.cache_clear()


def test_a_template_that_does_not_parse_warns_before_falling_back_to_string(monkeypatch):
    monkeypatch.setattr(content_parts, "_PARSE_WARNED", set(), raising=False)
    broken = "{% for message in messages %}{{ message['content'] }"
    content_parts.template_content_format.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not parse the chat template"):
            assert content_parts.template_content_format(broken) == "string"
    finally:
        content_parts.template_content_format.cache_clear()
