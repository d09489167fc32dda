"""End-of-turn tokens other than the tokenizer's EOS, and what real vLLM servers send at a stop.

Gemma ends a turn with ``<end_of_turn>`` (EOS ``<eos>``), Phi-3.5 with ``<|end|>`` (EOS
``<|endoftext|>``), Llama 3.1 a tool call with ``<|eom_id|>``: the model's generation config lists
them, and samplers must stop there like ``transformers`` and vLLM do.
"""

from __future__ import annotations

import math

import pytest
import torch
from fake_http import JSONHandler, serve

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.agent_loop import continuation_text
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.rollout.vllm_engine import pack_completions, parse_token_logprobs

PROMPT = [[{"role": "user", "content": "Ava has 3 apples and gets 4 more. How many apples does Ava have now?"}]]
GREEDY = SamplingConfig(max_new_tokens=12, do_sample=False)


def test_the_generation_configs_end_of_turn_ids_follow_the_eos():
    _, tok = load_model_and_tokenizer("embedded:student")
    eos = tok.eos_token_id

    class Config:
        eos_token_id = [7, eos, 9]

    assert stop_token_ids(tok, Config()) == [eos, 7, 9]
    Config.eos_token_id = 7
    assert stop_token_ids(tok, Config()) == [eos, 7]
    assert stop_token_ids(tok, None) == [eos]


def test_the_hf_engine_stops_at_an_end_of_turn_id_its_generation_config_lists():
    model, tok = load_model_and_tokenizer("embedded:student")
    free = HFGenerationEngine(model, tok).generate(PROMPT, sampling=GREEDY)
    tokens = free.completion_ids[0, : int(free.completion_mask[0].sum())].tolist()
    assert len(tokens) >= 4
    end = tokens[2]  # stands for an end-of-turn token the greedy reply reaches at step 3
    first = tokens.index(end)
    model.generation_config.eos_token_id = [tok.eos_token_id, end]
    out = HFGenerationEngine(model, tok).generate(PROMPT, sampling=GREEDY)
    # Stopped at the first `end` (the reply without it ran to 12 tokens or its EOS).
    assert out.completion_mask[0].tolist() == [1] * (first + 1)
    assert out.completion_ids[0].tolist() == tokens[: first + 1]
    assert not bool(out.truncated[0])


def test_pack_completions_cuts_at_any_stop_id_and_an_aborted_sample_is_unfinished():
    _, tok = load_model_and_tokenizer("embedded:student")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    prompt_ids, prompt_mask = torch.tensor([[5, 6]]), torch.tensor([[1, 1]])
    out = pack_completions(
        tok,
        prompt_ids,
        prompt_mask,
        3,
        [[10, 77, 11], [12, eos], [13]],
        [[-0.1] * 3, [-0.2] * 2, [-0.3]],
        ["stop", "stop", "abort"],
        stop_ids=[eos, 77],
    )
    # Cut after the stop id; the width is the longest sample after the cut.
    assert out.completion_ids.tolist() == [[10, 77], [12, eos], [13, pad]]
    assert out.truncated.tolist() == [False, False, True]


def test_vllms_minus_9999_log_prob_is_unknown():
    ids, lps = parse_token_logprobs({"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-9999.0, -0.5]})
    assert ids == [5, 6] and math.isnan(lps[0]) and lps[1] == -0.5


class _VLLMServer:
    """Replies to /completions as vLLM's OpenAI server does (stop token kept, ``stop_reason``),
    or with vLLM's 400 for a prompt over ``max_model_len``."""

    def __init__(self, choices, status=200, error=None):
        outer = self
        self.requests = 0
        self.bodies = []

        class Handler(JSONHandler):
            def do_GET(self):
                self.send_json(
                    200, {"object": "list", "data": [{"id": "policy", "object": "model", "owned_by": "vllm"}]}
                )

            def do_POST(self):
                outer.bodies.append(self.read_json())
                outer.requests += 1
                if status != 200:
                    self.send_json(
                        status, {"error": {"message": error, "type": "BadRequestError", "param": None, "code": 400}}
                    )
                    return
                body = [
                    {
                        "index": i,
                        "text": "",
                        "finish_reason": c["finish"],
                        "stop_reason": c.get("stop_reason"),
                        "logprobs": {
                            "tokens": [f"token_id:{t}" for t in c["tokens"]],
                            "token_logprobs": c["logprobs"],
                            "top_logprobs": None,
                            "text_offset": [0] * len(c["tokens"]),
                        },
                    }
                    for i, c in enumerate(choices)
                ]
                self.send_json(
                    200, {"id": "x", "object": "text_completion", "created": 0, "model": "policy", "choices": body}
                )

        self.httpd, self.url = serve(Handler)

    def close(self):
        self.httpd.shutdown()


def test_a_sample_vllm_stopped_at_another_end_of_turn_id_gets_no_phantom_eos():
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = load_model_and_tokenizer("embedded:student")
    eos = tok.eos_token_id
    # vLLM stopped sample 0 at id 1 (a generation_config EOS it names in stop_reason) and kept it;
    # sample 1 at the tokenizer's EOS.
    server = _VLLMServer(
        [
            {"tokens": [40, 41, 1], "logprobs": [-0.1, -0.2, -0.05], "finish": "stop", "stop_reason": 1},
            {"tokens": [42, eos], "logprobs": [-0.3, -0.4], "finish": "stop"},
        ]
    )
    try:
        out = VLLMServerEngine(server.url, tok).generate(PROMPT, num_samples=2, sampling=GREEDY)
    finally:
        server.close()
    assert out.completion_ids[0].tolist() == [40, 41, 1] and out.completion_mask[0].tolist() == [1, 1, 1]
    assert not torch.isnan(out.logprobs).any()
    assert out.truncated.tolist() == [False, False]


def test_a_prompt_over_the_servers_context_costs_its_samples_not_the_run():
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = load_model_and_tokenizer("embedded:student")
    overflow = (
        "This model's maximum context length is 4096 tokens. However, your request has 4101 input tokens. "
        "Please reduce the length of the input messages."
    )
    server = _VLLMServer([], status=400, error=overflow)
    try:
        out = VLLMServerEngine(server.url, tok).generate(PROMPT, num_samples=2, sampling=GREEDY)
    finally:
        server.close()
    assert out.completion_mask.sum() == 0 and out.truncated.tolist() == [True, True]
    other = _VLLMServer([], status=400, error="temperature must be non-negative")
    try:
        with pytest.raises(Exception, match="temperature must be non-negative"):
            VLLMServerEngine(other.url, tok).generate(PROMPT, num_samples=2, sampling=GREEDY)
    finally:
        other.close()


def test_phi35_glue_starts_after_the_turns_own_end_token(shared_data):
    # Phi-3.5 ends turns with <|end|> and closes a conversation rendered without a generation
    # prompt with its EOS <|endoftext|>: the old glue search (EOS only) refused the template.
    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.models import load_tokenizer

    template = (shared_data / "chat_templates" / "phi3_5.jinja").read_text()
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), template, None, "<|endoftext|>")
    msgs = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "Let me check."}]
    new = [{"role": "user", "content": "Go on."}]
    glue = continuation_text(tok, msgs, new, None, end_tokens=["<|endoftext|>", "<|end|>", "<|assistant|>"])
    assert glue == "\n<|user|>\nGo on.<|end|>\n<|assistant|>\n"
    # With the EOS alone the glue misses the newline the template puts after <|end|>.
    assert continuation_text(tok, msgs, new, None) == glue[1:]


def test_a_text_answer_ends_with_the_token_the_template_closes_a_turn_with(shared_data):
    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.models import load_tokenizer
    from lightning_agents.rollout.hf_engine import turn_end_id

    base = load_tokenizer("embedded:student")
    assert turn_end_id(base, [base.eos_token_id, 5]) == base.eos_token_id  # ChatML: <|im_end|> is the EOS
    template = (shared_data / "chat_templates" / "phi3_5.jinja").read_text()
    phi = tokenizer_with_template(base, template, None, "<|endoftext|>")
    end, assistant = phi.convert_tokens_to_ids(["<|end|>", "<|assistant|>"])
    assert turn_end_id(phi, [phi.eos_token_id, assistant, end]) == end
    assert turn_end_id(phi, [phi.eos_token_id]) == phi.eos_token_id


def test_rstg_teacher_sft_rows_end_with_the_turns_end_token(tmp_path, shared_data):
    # Teacher SFT appended the tokenizer's EOS to a text answer: on Phi-3.5 it taught the model to
    # close its turns with <|endoftext|> where the template (and the model) use <|end|>.
    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.modules.rstg import RSTGModule

    module = RSTGModule(num_generations=2, max_new_tokens=8)
    module.configure_model()
    template = (shared_data / "chat_templates" / "phi3_5.jinja").read_text()
    phi = tokenizer_with_template(module.tokenizer, template, None, "<|endoftext|>")
    end = phi.convert_tokens_to_ids("<|end|>")
    module.tokenizer = module.engine.tokenizer = phi
    module.engine.stop_ids = [phi.eos_token_id, end]
    ((_, answer, mask),) = module._sft_rows([[{"role": "user", "content": "2 + 2?"}]], ["The answer is 4."])
    assert answer[-1] == end and mask == [1] * len(answer)


def _chatml_fine_tune_of_a_base_model():
    """The embedded student as a base model fine-tuned on ChatML: its tokenizer's and generation
    config's EOS is ``<|endoftext|>`` (Qwen2.5's base), its template closes turns with ``<|im_end|>``."""
    from chat_template_helpers import tokenizer_with_template

    model, tok = load_model_and_tokenizer("embedded:student")
    tok = tokenizer_with_template(tok, tok.chat_template, None, "<|endoftext|>")
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def test_a_chatml_fine_tune_of_a_base_model_stops_at_im_end():
    """Before: the engines stopped at the EOS and the generation config's ids only, so the rollouts
    of a base model fine-tuned on ChatML ran past ``<|im_end|>`` to ``max_new_tokens`` (truncated,
    scored 0)."""
    model, tok = _chatml_fine_tune_of_a_base_model()
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_ids(tok, model.generation_config) == [tok.eos_token_id, im_end]
    sampling = SamplingConfig(max_new_tokens=40, do_sample=False)
    out = HFGenerationEngine(model, tok).generate(PROMPT, sampling=sampling)
    tokens = out.completion_ids[0, : int(out.completion_mask[0].sum())].tolist()
    assert tokens[-1] == im_end and im_end not in tokens[:-1] and len(tokens) < 40
    assert not bool(out.truncated[0])


def test_vllm_is_told_the_templates_end_of_turn_and_a_sample_holding_it_is_finished():
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = _chatml_fine_tune_of_a_base_model()
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    # A server not told to stop at <|im_end|> samples past it to max_tokens ("length").
    server = _VLLMServer([{"tokens": [40, im_end, 41, 42], "logprobs": [-0.1] * 4, "finish": "length"}])
    try:
        out = VLLMServerEngine(server.url, tok).generate(PROMPT, num_samples=1, sampling=GREEDY)
    finally:
        server.close()
    assert server.bodies[0]["stop_token_ids"] == [tok.eos_token_id, im_end]
    assert out.completion_ids[0].tolist() == [40, im_end] and out.truncated.tolist() == [False]


@pytest.mark.parametrize(
    ("template", "eos", "bos", "stops"),
    [
        # harmony closes the analysis channel with <|end|> and answers in the same turn
        ("gpt_oss_120b.jinja", "<|return|>", "<|startoftext|>", ["<|call|>", "<|return|>"]),
        ("functionary_medium_v3_1.jinja", "<|eot_id|>", "<|begin_of_text|>", ["<|eot_id|>", "<|eom_id|>"]),
        ("glm_4_6.jinja", "<|endoftext|>", None, ["<|user|>", "<|observation|>", "<|endoftext|>"]),
        ("qwq_32b.jinja", "<|im_end|>", None, ["<|im_end|>"]),
    ],
)
def test_generation_stops_at_turn_ends_never_inside_a_turn(template, eos, bos, stops):
    """Before: an export of gpt-oss wrote ``<|end|>`` into its generation config, so generation
    stopped after the analysis channel, before the answer."""
    from pathlib import Path

    from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template

    from lightning_agents.datamodules.conversations import turn_end_token_ids
    from lightning_agents.models import load_tokenizer

    text = (Path(__file__).resolve().parents[1] / "data" / "chat_templates" / template).read_text()
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), text, bos, eos, SPECIAL_WIDE)
    assert tok.convert_ids_to_tokens(turn_end_token_ids(tok)) == stops


# The two shapes of real templates where an end token is not where a turn ends, cut to what
# matters (the full templates are llama.cpp's GigaChat3-10B-A1.8B.jinja and
# CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja, not vendored: their licences are not ours
# to redistribute): GigaChat3 opens every call with its turn separator, Command R7B writes
# <|END_RESPONSE|> or <|END_ACTION|> and then its EOS <|END_OF_TURN_TOKEN|>.
_GIGACHAT3 = (
    "{% for m in messages %}{% if m.role == 'assistant' and m.tool_calls %}assistant<|role_sep|>\n"
    "{% for c in m.tool_calls %}<|message_sep|>\n\nfunction call<|role_sep|>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}{% endfor %}'
    "<|message_sep|>\n\n{% elif m.role == 'tool' %}function result<|role_sep|>\n{{ m.content }}<|message_sep|>\n\n"
    "{% else %}{{ m.role }}<|role_sep|>\n{{ m.content }}<|message_sep|>\n\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}assistant<|role_sep|>\n{% endif %}"
)
_COMMAND_R7B = (
    "{% for m in messages %}<|START_OF_TURN_TOKEN|>{% if m.role == 'assistant' %}<|CHATBOT_TOKEN|>"
    "{% if m.tool_calls %}<|START_ACTION|>{{ m.tool_calls | map(attribute='function') | list | tojson }}<|END_ACTION|>"
    "{% else %}<|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|>{% endif %}"
    "{% else %}<|USER_TOKEN|>{{ m.content }}{% endif %}<|END_OF_TURN_TOKEN|>{% endfor %}"
    "{% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}"
)


# Phi-3.5 closes the document after the last message as well (`<|end|>\n<|endoftext|>`); between
# turns <|end|> is followed by the next role, and it is where the model stops.
_PHI35 = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% else %}<|endoftext|>{% endif %}"
)


# Phi-4-mini's own template (guidance-ai/guidance guidance/chat.py @5413339, from its
# tokenizer_config.json) writes the EOS right after the last `<|end|>`, with no newline: the
# Command R7B rule (an EOS right after the turn's closing token ends the turn) made it a stop token
# and the last turn's end; it applies to the last turn only where the EOS follows turns between.
_PHI4_MINI = (
    "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)


@pytest.mark.parametrize(
    ("template", "eos", "stops"),
    [
        (_GIGACHAT3, "</s>", []),
        (_COMMAND_R7B, "<|END_OF_TURN_TOKEN|>", ["<|END_OF_TURN_TOKEN|>"]),
        (_PHI35, "<|endoftext|>", ["<|end|>"]),
        (_PHI4_MINI, "<|endoftext|>", ["<|end|>"]),
    ],
    ids=["gigachat3", "command_r7b", "phi35_document_end", "phi4_mini_document_end"],
)
def test_end_tokens_a_model_writes_before_its_turn_is_over_are_no_stops(template, eos, stops):
    """Before: GigaChat3's rollouts stopped at the <|message_sep|> that opens every call (0 calls
    parsed), and Command R7B's at <|END_ACTION|>, a token before the template's own turn end."""
    import re

    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.datamodules.conversations import template_layout, turn_end_token_ids
    from lightning_agents.models import load_tokenizer

    special = re.compile(r"<\|[A-Z_a-z]+\|>")
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), template, None, eos, special)
    assert template_layout(tok).end_tokens  # the labels still know where turns end
    assert tok.convert_ids_to_tokens(turn_end_token_ids(tok)) == stops


def test_a_template_the_probe_cannot_read_leaves_the_eos_and_config_stops(caplog):
    """Before: a dict of templates without a `default` one made `stop_token_ids` raise, which broke
    building an engine and exporting (the old export's safety net had gone)."""
    import logging

    _, tok = load_model_and_tokenizer("embedded:student")
    tok.chat_template = {"tool_use": tok.chat_template}

    class Config:
        eos_token_id = [7]

    with caplog.at_level(logging.WARNING, logger="lightning_agents.datamodules.conversations"):
        assert stop_token_ids(tok, Config()) == [tok.eos_token_id, 7]
    assert "end-of-turn tokens are not known" in caplog.text
