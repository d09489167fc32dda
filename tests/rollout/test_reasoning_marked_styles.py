"""Reasoning delimiters that are special tokens beyond Solar-Open's (session 44): Mistral's
``[THINK]...[/THINK]`` (mistral-common control tokens), Gemma 4's ``<|channel>thought ...<channel|>``
and gpt-oss's harmony channels vanish from a decode without special tokens, so a reasoning that
named the answer was scored. The engines now hand those replies over with their markers and
``strip_reasoning`` reads the answer from them; every other template's decode is unchanged."""

from __future__ import annotations

import pytest
import torch
from chat_template_helpers import GEMMA4, OURS, OUTPUTS, SPECIAL_WIDE, tokenizer_with_template

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.hf_engine import decode_completions, marked_style, stop_token_ids
from lightning_agents.rollout.tool_calls import split_reasoning
from lightning_agents.rollout.vllm_engine import pack_completions
from lightning_agents.tasks import extract_gsm8k_answer, strip_reasoning

DRAFT = "Draft: 3+4 = 7, so #### 7."
ANSWER = "I am not sure; it may be seven."
# template, eos, bos, special-token pattern, expected style, reply with its markers
CASES = {
    "ministral_reasoning": (
        OUTPUTS / "mistralai-Ministral-3-14B-Reasoning-2512.jinja", "</s>", "<s>", SPECIAL_WIDE, "mistral_think",
        f"[THINK]{DRAFT}[/THINK]{ANSWER}",
    ),
    "gemma4": (
        OUTPUTS / "google-gemma-4-31B-it.jinja", "<turn|>", "<bos>", GEMMA4, "gemma4",
        f"<|channel>thought\n{DRAFT}<channel|>{ANSWER}",
    ),
    "gpt_oss": (
        OURS / "gpt_oss_120b.jinja", "<|return|>", "<|startoftext|>", SPECIAL_WIDE, "harmony",
        f"<|channel|>analysis<|message|>{DRAFT}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _texts(tok, reply: str) -> list[str]:
    """The reply as the HF engine and both vLLM engines hand it over (it ended at a stop token)."""
    stops = stop_token_ids(tok)
    ids = tok.encode(reply, add_special_tokens=False) + [stops[0]]
    hf = decode_completions(tok, torch.tensor([ids]), torch.ones((1, len(ids)), dtype=torch.long), stops)[0]
    ones = torch.ones((1, 2), dtype=torch.long)
    packed = pack_completions(tok, ones, ones, 1, [ids], [[0.0] * len(ids)], ["stop"], stops).texts[0]
    return [hf, packed]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_reasoning_behind_special_token_delimiters_is_not_scored(base, case):
    path, eos, bos, pattern, style, reply = CASES[case]
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
    assert marked_style(tok) == style
    for text in _texts(tok, reply):
        # before: "Draft: 3+4 = 7, so #### 7.I am not sure..." (markers dropped), scored 7
        assert text == reply
        assert strip_reasoning(text) == ANSWER
        assert extract_gsm8k_answer(text) is None


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("[THINK]Let me see: #### 7", ""),  # cut mid-thought: no answer
        ("<|channel>thought\nLet me see: #### 7", ""),
        (f"<|channel>thought\n{DRAFT}<channel|>{ANSWER}<|channel>thought\n<channel|>", ANSWER),
        (f"<|channel|>analysis<|message|>{DRAFT}<|end|>", ""),  # no final message
        (f"<|channel|>analysis<|message|>{DRAFT}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|end|>", ANSWER),
    ],
)  # fmt: skip
def test_strip_reasoning_reads_the_answer_after_each_marked_block(text, answer):
    assert strip_reasoning(text) == answer


def test_an_agent_reply_keeps_its_reasoning_out_of_the_content():
    assert split_reasoning(f"[THINK]{DRAFT}[/THINK]{ANSWER}", "mistral") == (DRAFT, ANSWER)
    assert split_reasoning(f"<|channel>thought\n{DRAFT}<channel|>{ANSWER}", "gemma4") == (DRAFT, ANSWER)
    assert split_reasoning(f"{DRAFT}{ANSWER}", "mistral") == ("", f"{DRAFT}{ANSWER}")
    # the channel's name is `thought` and a newline (or nothing, before the close), not any word it opens
    assert split_reasoning(f"<|channel>thoughtful {DRAFT}<channel|>{ANSWER}", "gemma4") == (
        f"thoughtful {DRAFT}",
        ANSWER,
    )
    assert split_reasoning(f"<|channel>thought<channel|>{ANSWER}", "gemma4") == ("", ANSWER)


@pytest.mark.parametrize(
    ("path", "eos", "bos"),
    [
        (OURS / "mistral_nemo_2407.jinja", "</s>", "<s>"),
        (OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja", "</s>", "<s>"),
    ],
)
def test_a_mistral_template_without_think_blocks_keeps_its_call_markers(base, path, eos, bos):
    # decoded without them, a call after text and a botched call were read as the answer
    # (tests/rollout/test_mistral_malformed_follow_up.py)
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, SPECIAL_WIDE)
    assert marked_style(tok) == "mistral"
    reply = 'Let me see.[TOOL_CALLS][{"name": "f", "arguments": {}}]'
    ids = tok.encode(reply, add_special_tokens=False)
    texts = decode_completions(tok, torch.tensor([ids]), torch.ones((1, len(ids)), dtype=torch.long), [])
    assert texts == [reply]


def test_a_gemma4_reasoned_call_re_renders_as_sampled(base):
    """Gemma 4's template writes a turn's reasoning as ``<|channel>thought\\nRSN\\n<channel|>``: the
    reasoning was stored with that newline and re-rendered as ``RSN\\n\\n<channel|>``, not as sampled."""
    from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, model_tool_call_style, start_episode
    from lightning_agents.rollout.hf_engine import template_messages
    from lightning_agents.tasks import CalculatorTask
    from lightning_agents.template_clock import render_chat_template

    path, eos, bos, pattern, _, _ = CASES["gemma4"]
    tok = tokenizer_with_template(base, path.read_text(), bos, eos, pattern)
    task = CalculatorTask(split="val", n=1)
    episode = start_episode(task, task.problems[0], tool_call_style=model_tool_call_style(tok))

    def render():
        messages = template_messages(tok, episode.messages, None)
        return render_chat_template(
            tok, messages, tools=task.tools, tokenize=False, add_generation_prompt=True, enable_thinking=True
        )

    prompt = render()
    reply = f'<|channel>thought\n{DRAFT}\n<channel|><|tool_call>call:calculator{{expression:<|"|>3+4<|"|>}}<tool_call|>'
    step = apply_reply(episode, ModelReply(reply))
    assert step.assistant["reasoning_content"] == DRAFT
    assert render().startswith(prompt + reply)
