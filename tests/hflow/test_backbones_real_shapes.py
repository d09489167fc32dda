"""The OpenAI-compatible backbone against the reply shapes and error bodies of the servers users
point it at (vLLM, SGLang, llama.cpp, ollama, TGI, OpenAI's reasoning models, Azure OpenAI,
Gemini's OpenAI layer and gateways in front of it, OpenRouter), served by fake endpoints on
127.0.0.1. Each body below is written after the server's source or a reply quoted in its issue
tracker; the source of each is named where it is used.
"""

from __future__ import annotations

import json
import logging

import pytest
from fake_http import scripted_endpoints

from lightning_agents.hflow import BackboneError, BackbonePool, ConfigError, OpenAIBackbone, Request

MSG = [{"role": "user", "content": "Ava has 8 shells and gets 2 more. How many?"}]
LOGGER = "lightning_agents.hflow.backbones"


def chat(message, usage=None, finish="stop", **choice_extra):
    """A chat.completion body with one choice (``message`` merged over an assistant message)."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1733390000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, **message},
                "logprobs": None,
                "finish_reason": finish,
                **choice_extra,
            }
        ],
        "usage": usage or {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30},
    }


OK = (200, chat({"content": "The answer is 10."}))


@pytest.fixture
def fake():
    with scripted_endpoints() as start:
        yield start


def _backbone(url, **kw):
    args = dict(input_price=1.0, output_price=3.0, timeout_s=5.0, max_retries=2, backoff_s=0.01)
    args.update(kw)
    return OpenAIBackbone("remote", "m", url, **args)


def _warnings(caplog, text="empty answer"):
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# ---------------------------------------------------------------- reasoning beside the answer

# vLLM >= 0.10 sends `reasoning` and the older `reasoning_content` (entrypoints/openai/protocol.py
# ChatMessage); SGLang adds `matched_stop` and a top-level `usage.reasoning_tokens`; llama.cpp's
# server (--reasoning-format deepseek) sends `reasoning_content` and `timings`; ollama's OpenAI layer
# sends `reasoning` (gpt-oss, qwen3).
REASONING_REPLIES = {
    "vllm": chat(
        {"content": "The answer is 10.", "reasoning_content": "8 + 2 = 10", "reasoning": "8 + 2 = 10"},
        {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30, "prompt_tokens_details": None},
        stop_reason=None,
    ),
    "sglang": chat(
        {"content": "The answer is 10.", "reasoning_content": "8 + 2 = 10", "tool_calls": None},
        {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30, "reasoning_tokens": 5},
        matched_stop=151645,
    ),
    "llama.cpp": {
        **chat({"content": "The answer is 10.", "reasoning_content": "8 + 2 = 10"}),
        "system_fingerprint": "b8005-914dde72b",
        "timings": {"cache_n": 0, "prompt_n": 21, "prompt_ms": 250.4, "predicted_n": 9, "predicted_ms": 165.6},
    },
    "ollama": {
        **chat({"content": "The answer is 10.", "reasoning": "8 + 2 = 10"}),
        "system_fingerprint": "fp_ollama",
    },
}


@pytest.mark.parametrize("server", list(REASONING_REPLIES))
def test_the_answer_is_the_content_and_never_the_reasoning(fake, server):
    endpoint = fake(lambda body, k: (200, REASONING_REPLIES[server]))
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert (c.text, c.input_tokens, c.output_tokens, c.error) == ("The answer is 10.", 21, 9, None)


# ------------------------------------------------------------ replies the server cut off

# vLLM's and SGLang's finish_reason "abort" (vllm/v1/engine FINISH_REASON_STRINGS; a request aborted
# mid-generation, e.g. by pause_generation for a weight update, comes back with status 200, its
# partial text and its usage: slime's rollout client retries it); OpenRouter's normalized
# finish_reason "error" with the provider's error in the choice.
CUT_OFF = {
    "vllm-abort": chat(
        {"content": "The answer is"}, {"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24}, "abort"
    ),
    "openrouter-error": chat(
        {"content": "The ans"},
        {"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24},
        "error",
        native_finish_reason="error",
        error={"code": 502, "message": "Provider returned error"},
    ),
    # DeepSeek's API documents finish_reason "insufficient_system_resource": "the request is
    # interrupted due to insufficient resource of the inference system"
    "deepseek-insufficient-system-resource": chat(
        {"content": "The answer is"},
        {"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24},
        "insufficient_system_resource",
    ),
}


@pytest.mark.parametrize("shape", list(CUT_OFF))
def test_a_reply_the_server_cut_off_is_retried_and_its_tokens_booked(fake, shape):
    endpoint = fake(lambda body, k: (200, CUT_OFF[shape]) if k == 0 else OK)
    pool = BackbonePool([_backbone(endpoint.url)])
    (c,) = pool.complete("remote", [Request(MSG)])
    # the partial text is not the answer; the retry's is, and both replies are paid
    assert (c.text, c.error, c.input_tokens, c.output_tokens) == ("The answer is 10.", None, 42, 12)
    assert endpoint.hits == 2 and pool.ledger.summary()["total"]["output_tokens"] == 12


def test_a_cut_off_reply_without_usage_still_stops_the_run(fake):
    # its cost is unknown: that stops the run as for any reply without usage (before, the cut-off
    # check came first and the reply was retried with nothing booked)
    reply = {**CUT_OFF["vllm-abort"], "usage": None}
    endpoint = fake(lambda body, k: (200, reply))
    with pytest.raises(BackboneError, match="no token usage"):
        BackbonePool([_backbone(endpoint.url)]).complete("remote", [Request(MSG)])
    assert endpoint.hits == 1


def test_a_server_that_keeps_cutting_off_fails_the_call_not_the_run(fake):
    endpoint = fake(lambda body, k: (200, CUT_OFF["vllm-abort"]))
    pool = BackbonePool([_backbone(endpoint.url, max_retries=1)])
    (c,) = pool.complete("remote", [Request(MSG)])
    assert c.text == "" and "finish_reason 'abort'" in c.error and "gave up after 2 attempts" in c.error
    assert (c.input_tokens, c.output_tokens) == (42, 6) and pool.ledger.calls() == 1


# ------------------------------------------------------------------------ rate limits

# OpenAI's 429 when the account has no credit left (quoted in langchainjs#1929 and many others):
# no wait lifts it, unlike the `rate_limit_exceeded` 429
OPENAI_NO_QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}


def test_a_429_for_an_account_out_of_quota_stops_the_run_at_once(fake):
    endpoint = fake(lambda body, k: (429, OPENAI_NO_QUOTA))
    backbone = _backbone(endpoint.url, max_retries=4, max_concurrency=1)
    with pytest.raises(BackboneError, match="out of credit"):
        backbone.complete([Request(MSG)] * 3)
    assert endpoint.hits == 1  # neither retried nor sent again by the rest of the batch


# Gemini's OpenAI layer answers a rate limit with no retry-after header; the wait is a
# google.rpc.RetryInfo in the body, a one-element list (page-assist#406, atomic-agent#106,
# python-genai#1875); a gateway passes the same error on as a plain object.
GEMINI_429 = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.6s"},
        ],
    }
}


@pytest.mark.parametrize("body", [[GEMINI_429], GEMINI_429], ids=["gemini-list", "gateway-object"])
def test_a_gemini_429_waits_the_retry_delay_in_its_body(fake, body):
    endpoint = fake(lambda _body, k: (429, body) if k == 0 else OK)
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert c.error is None and c.text == "The answer is 10." and endpoint.hits == 2
    # the backoff alone (0.01 s) would have retried at once, inside the quota window
    assert endpoint.requests[1][1] - endpoint.requests[0][1] >= 0.55


# ------------------------------------------------------------------- reasoning tokens


# A gateway in front of Gemini (CLIProxyAPI#5733, any-llm#1290) maps only the answer's tokens to
# completion_tokens and the thinking to reasoning_tokens alone; Google bills both as output.
@pytest.mark.parametrize(
    ("usage", "output"),
    [
        ({"completion_tokens": 0, "total_tokens": 81, "completion_tokens_details": {"reasoning_tokens": 60}}, 60),
        ({"completion_tokens": 9, "total_tokens": 90, "completion_tokens_details": {"reasoning_tokens": 60}}, 69),
        ({"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 60}}, 69),  # no total
        # OpenAI's own shape: the reasoning is inside completion_tokens and is not added again
        ({"completion_tokens": 69, "total_tokens": 90, "completion_tokens_details": {"reasoning_tokens": 60}}, 69),
        ({"completion_tokens": 69, "completion_tokens_details": {"reasoning_tokens": 60}}, 69),
        ({"completion_tokens": 9, "total_tokens": 30, "completion_tokens_details": {"reasoning_tokens": None}}, 9),
        # xAI's own API (grok-3-mini, vercel/ai#12425): reasoning outside completion_tokens, in the total
        ({"completion_tokens": 1, "total_tokens": 408, "completion_tokens_details": {"reasoning_tokens": 386}}, 387),
    ],
    ids=["gateway-no-answer", "gateway", "gateway-no-total", "openai", "openai-no-total", "null", "xai"],
)
def test_reasoning_tokens_reported_beside_completion_tokens_are_billed_as_output(fake, usage, output):
    endpoint = fake(lambda body, k: (200, chat({"content": "The answer is 10."}, {"prompt_tokens": 21, **usage})))
    pool = BackbonePool([_backbone(endpoint.url)])
    (c,) = pool.complete("remote", [Request(MSG)])
    assert (c.error, c.input_tokens, c.output_tokens) == (None, 21, output)
    assert pool.ledger.total_cost() == pytest.approx((21 * 1.0 + output * 3.0) / 1e6)


# ---------------------------------------------------------------------- empty answers


@pytest.mark.parametrize(
    ("message", "finish", "usage", "warning"),
    [
        # OpenAI o-series / gpt-5: the reasoning is hidden, only its token count shows
        (
            {"content": "", "refusal": None, "annotations": []},
            "length",
            {"prompt_tokens": 21, "completion_tokens": 64, "completion_tokens_details": {"reasoning_tokens": 64}},
            "spent all 64 completion tokens reasoning",
        ),
        # Azure OpenAI / Gemini withholding the completion at status 200
        ({"content": None}, "content_filter", None, "content filter"),
        # vLLM's deepseek_r1 parser puts a reply with no </think> all in reasoning_content
        ({"content": None, "reasoning_content": "8 + 2 is 10, so"}, "stop", None, "all reasoning"),
    ],
    ids=["openai-hidden-reasoning", "content-filter", "reasoning-only"],
)
def test_an_empty_answer_says_why_once(fake, caplog, message, finish, usage, warning):
    endpoint = fake(lambda body, k: (200, chat(message, usage, finish)))
    backbone = _backbone(endpoint.url)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        outs = backbone.complete([Request(MSG)]) + backbone.complete([Request(MSG)])
    assert [(c.text, c.error) for c in outs] == [("", None)] * 2  # billed, scores 0, not retried
    warned = _warnings(caplog)
    assert len(warned) == 1 and warning in warned[0], warned


# ------------------------------------------------------------------- error bodies

# vLLM before 0.10 (and SGLang) send the error object at the top level, not under "error"
VLLM_OVERFLOW = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested 4600 tokens "
    "(4100 in the messages, 500 in the completion). Please reduce the length of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
# Azure OpenAI's prompt filter (learn.microsoft.com content-filter docs)
AZURE_FILTER = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {}},
    }
}
# Gemini's OpenAI layer: a one-element list
GEMINI_400 = [
    {"error": {"code": 400, "message": "Request contains an invalid argument.", "status": "INVALID_ARGUMENT"}}
]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (VLLM_OVERFLOW, "maximum context length is 4096 tokens"),
        (AZURE_FILTER, "content management policy"),
        (GEMINI_400, "Request contains an invalid argument."),
    ],
    ids=["vllm-overflow", "azure-content-filter", "gemini-list"],
)
def test_a_refused_request_costs_its_problem_and_quotes_the_server(fake, body, reason):
    endpoint = fake(lambda _body, k: OK if k == 0 else (400, body))
    backbone = _backbone(endpoint.url, max_consecutive_failures=2)
    backbone.complete([Request(MSG)])  # the endpoint has answered: refusals are the requests' fault
    outs = backbone.complete([Request(MSG)] * 3)
    assert all(c.error and reason in c.error and "HTTP 400" in c.error for c in outs)
    assert endpoint.hits == 4  # not retried, and the run goes on


# --------------------------------------------------------------------- tool calls


def test_tool_call_arguments_sent_as_an_object_become_the_json_string_openai_sends(fake):
    # TGI's Messages API (text-generation-inference#2136, langchain#27523) and llama.cpp's server for a
    # while (llama.cpp#20198) send `arguments` as an object; the agent's next request holds the call
    # in its history, where OpenAI-format servers want a string
    call = {"id": "0", "type": "function", "function": {"name": "add", "arguments": {"a": 8, "b": 2}}}
    endpoint = fake(lambda body, k: (200, chat({"content": None, "tool_calls": [call]}, finish="tool_calls")))
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert c.error is None and c.tool_calls[0]["function"]["arguments"] == '{"a": 8, "b": 2}'
    assert json.loads(c.tool_calls[0]["function"]["arguments"]) == {"a": 8, "b": 2}


def test_object_arguments_keep_their_text_and_replay_as_strings(fake, tmp_path):
    from lightning_agents.hflow.backbones import _call_row

    call = {"id": "0", "type": "function", "function": {"name": "weather", "arguments": {"city": "Zürich"}}}
    endpoint = fake(lambda body, k: (200, chat({"content": None, "tool_calls": [call]}, finish="tool_calls")))
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert c.tool_calls[0]["function"]["arguments"] == '{"city": "Zürich"}'  # not "Z\\u00fcrich"
    # a call log written before object arguments became strings replays the string too
    row = {
        "backbone": "remote",
        "role": "node",
        "workflow": "w",
        "generation": 0,
        "input_tokens": 21,
        "output_tokens": 9,
        "request": "digest",
        "answer": {"text": "", "tool_calls": [call], "truncated": False},
    }
    recorded = _call_row(json.dumps(row))[4]
    assert recorded.tool_calls[0]["function"]["arguments"] == '{"city": "Zürich"}'


# ------------------------------------------------------------------- priced usage


def test_openrouter_usage_cost_is_not_the_ledger_price(fake):
    # OpenRouter reports what it charged (`usage.cost`, credits); the ledger prices tokens at the
    # configured prices, the same way for every backbone (the difference is a policy question)
    usage = {
        "prompt_tokens": 21,
        "completion_tokens": 9,
        "total_tokens": 30,
        "cost": 0.5,
        "is_byok": False,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    reply = chat({"content": "The answer is 10.", "reasoning": None, "reasoning_details": []}, usage)
    pool = BackbonePool([_backbone(fake(lambda body, k: (200, reply)).url)])
    (c,) = pool.complete("remote", [Request(MSG)])
    assert (c.text, c.output_tokens) == ("The answer is 10.", 9)
    assert pool.ledger.total_cost() == pytest.approx((21 * 1.0 + 9 * 3.0) / 1e6)


# ---------------------------------------------------------------------- base URLs


def test_a_base_url_with_a_query_is_a_configuration_error():
    # Azure's deployment URLs carry ?api-version=..., which the client would extend into
    # ".../dep/?api-version=2024-10-21chat/completions"; Azure's v1 API needs none
    azure = "https://res.openai.azure.com/openai/deployments/gpt-4o-mini?api-version=2024-10-21"
    with pytest.raises(ConfigError, match="openai/v1"):
        OpenAIBackbone("azure", "gpt-4o-mini", azure, input_price=0.15, output_price=0.6)
    backbone = OpenAIBackbone("azure", "gpt-4o-mini", "https://res.openai.azure.com/openai/v1/", 0.15, 0.6)
    assert backbone.url == "https://res.openai.azure.com/openai/v1/chat/completions"
    # a fragment the client drops: no reason to refuse it
    OpenAIBackbone("local", "m", "http://127.0.0.1:8000/v1#primary", 0.0, 0.0)
