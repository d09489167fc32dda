"""The OpenAI-compatible backbone against two provider behaviours, on fake endpoints on 127.0.0.1
that answer with the providers' own bodies:

- Gemini's per-day quota: an HTTP 429 ``RESOURCE_EXHAUSTED`` whose ``google.rpc.QuotaFailure``
  names a ``...PerDay...`` quota stops the run (as OpenAI's ``insufficient_quota`` does), naming the
  quota; per-minute quotas, and bodies of any other shape, are retried as rate limits;
- a rejected ``system`` role (OpenAI's o1-mini and o1-preview, Gemma's chat template in vLLM): the
  error names the ``system_role`` option, which sends the system text as a ``developer`` message or
  at the start of the first user message.
"""

from __future__ import annotations

import re

import pytest
from fake_http import scripted_endpoints
from test_backbones_real_shapes import MSG, OK, _backbone

from lightning_agents.hflow import BackboneError, BackbonePool, ConfigError, OpenAIBackbone, Request
from lightning_agents.hflow.backbones import BackboneSpec, build_backbone


@pytest.fixture
def fake():
    with scripted_endpoints() as start:
        yield start


# ------------------------------------------------------------------- Gemini's quotas

# Gemini's 429 for a free-tier project whose requests of the day are spent, written after the bodies
# quoted in googleapis/python-genai#2044 (gemini-2.0-flash) and google-gemini/gemini-cli#8437: the
# QuotaFailure lists the per-day quota beside the per-minute ones, and a RetryInfo says to retry in
# 47 s, which would not lift it ("Requests per day (RPD) quotas reset at midnight Pacific time",
# ai.google.dev/gemini-api/docs/rate-limits).
GEMINI_DAILY = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [
                    {
                        "description": "Learn more about Gemini API quotas",
                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                    }
                ],
            },
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                        "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
                    },
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                        "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
                    },
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "47s"},
        ],
    }
}
# Gemini's 429 for the per-minute input-token quota (google-gemini/gemini-cli-action#36): a rate limit
GEMINI_PER_MINUTE = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
                        "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
                        "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"},
                        "quotaValue": "250000",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "21s"},
        ],
    }
}
# The older Generative Language endpoint names the quota in a google.rpc.ErrorInfo's metadata
# (quoted in xtekky/gpt4free#1700): a per-minute limit, retried
GOOGLE_ERRORINFO_PER_MINUTE = {
    "error": {
        "code": 429,
        "message": "Quota exceeded for quota metric 'Generate Content API requests per minute' and limit "
        "'GenerateContent request limit per minute for a region' of service 'generativelanguage.googleapis.com' "
        "for consumer 'project_number:440059914257'.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "RATE_LIMIT_EXCEEDED",
                "domain": "googleapis.com",
                "metadata": {
                    "quota_location": "us-east2",
                    "service": "generativelanguage.googleapis.com",
                    "consumer": "projects/440059914257",
                    "quota_limit_value": "60",
                    "quota_metric": "generativelanguage.googleapis.com/generate_content_requests",
                    "quota_limit": "GenerateContentRequestsPerMinutePerProjectPerRegion",
                },
            }
        ],
    }
}


def _errorinfo(quota_limit):
    """The ErrorInfo body above with another ``quota_limit`` (written here, not quoted)."""
    detail = {**GOOGLE_ERRORINFO_PER_MINUTE["error"]["details"][0]}
    detail["metadata"] = {**detail["metadata"], "quota_limit": quota_limit}
    return {"error": {**GOOGLE_ERRORINFO_PER_MINUTE["error"], "details": [detail]}}


@pytest.fixture
def short_waits(monkeypatch):
    """Caps the server's retry delay (47 s in the real body) so a retry comes at once."""
    monkeypatch.setattr(OpenAIBackbone, "MAX_RETRY_AFTER_S", 0.05)


@pytest.mark.parametrize(
    ("body", "quota"),
    [
        # Gemini's own endpoint and its OpenAI layer send a one-element list; a gateway the object
        ([GEMINI_DAILY], "GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
        (GEMINI_DAILY, "GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
        (
            _errorinfo("GenerateContentRequestsPerDayPerProjectPerRegion"),
            "GenerateContentRequestsPerDayPerProjectPerRegion",
        ),
    ],
    ids=["gemini-list", "gateway-object", "errorinfo"],
)
def test_a_429_for_a_spent_daily_quota_stops_the_run_naming_the_quota(fake, short_waits, body, quota):
    endpoint = fake(lambda _body, k: (429, body))
    backbone = _backbone(endpoint.url, max_retries=4, max_concurrency=1)
    with pytest.raises(BackboneError) as info:
        backbone.complete([Request(MSG)] * 3)
    message = str(info.value)
    assert quota in message and "resets daily" in message and "raise the quota or switch backbone" in message
    assert "'remote'" in message
    assert endpoint.hits == 1  # neither retried nor sent again by the rest of the batch


def test_a_spent_daily_quota_stops_every_worker_of_an_evaluation(fake, short_waits):
    # through the pool, as an evaluation calls it: the first 429 stops the batch, the rest unsent
    endpoint = fake(lambda _body, k: OK if k == 0 else (429, [GEMINI_DAILY]))
    pool = BackbonePool([_backbone(endpoint.url, max_retries=4, max_concurrency=2)])
    pool.complete("remote", [Request(MSG)])
    with pytest.raises(BackboneError, match="GenerateRequestsPerDayPerProjectPerModel-FreeTier"):
        pool.complete("remote", [Request(MSG)] * 8)
    assert endpoint.hits <= 1 + 2  # the answered call, then at most the requests already in flight


@pytest.mark.parametrize(
    "body",
    [[GEMINI_PER_MINUTE], GEMINI_PER_MINUTE, GOOGLE_ERRORINFO_PER_MINUTE],
    ids=["gemini-list", "gateway-object", "errorinfo"],
)
def test_a_429_for_a_per_minute_quota_is_retried(fake, short_waits, body):
    endpoint = fake(lambda _body, k: (429, body) if k == 0 else OK)
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert c.error is None and c.text == "The answer is 10." and endpoint.hits == 2


@pytest.mark.parametrize(
    "body",
    [
        [],
        [1, 2],
        [{"error": "GenerateRequestsPerDay"}],
        {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}},  # no details (python-genai#2065)
        {"error": {"details": "GenerateRequestsPerDayPerProjectPerModel"}},
        {"error": {"details": [None, "PerDay", {"violations": "GenerateRequestsPerDay"}]}},
        {"error": {"details": [{"violations": [None, "PerDay", {"quotaId": 7}, {"quotaId": None}]}]}},
        {"error": {"details": [{"metadata": ["PerDay"]}, {"metadata": {"quota_limit": 1}}]}},
        {"error": {"details": [{"retryDelay": "PerDays"}]}},
        "Too Many Requests",
    ],
)
def test_a_429_with_an_odd_body_is_retried_as_a_rate_limit(fake, short_waits, body):
    endpoint = fake(lambda _body, k: (429, body) if k == 0 else OK)
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert c.error is None and endpoint.hits == 2


# --------------------------------------------------------------------- system role

SYSTEM = "Answer with a number."
QUESTION = "Ava has 8 shells and gets 2 more. How many?"
WITH_SYSTEM = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def _o1_mini(body, k):
    """OpenAI's o1-mini and o1-preview: a system or developer message is refused, quoted in
    janhq/jan#4392, microsoft/agent-framework#1077 and CherryHQ/cherry-studio#4973:
    {"error": {"message": "Unsupported value: 'messages[0].role' does not support 'system' with this
    model.", "type": "invalid_request_error", "param": "messages[0].role", "code": "unsupported_value"}}
    (both roles are refused there: community.openai.com, "developer role not accepted for o1-mini")."""
    for i, m in enumerate(body["messages"]):
        if m["role"] in ("system", "developer"):
            error = {
                "message": f"Unsupported value: 'messages[{i}].role' does not support '{m['role']}' with this model.",
                "type": "invalid_request_error",
                "param": f"messages[{i}].role",
                "code": "unsupported_value",
            }
            return 400, {"error": error}
    return OK


# vLLM serving gemma-2b-it, whose chat template raises on a system role (vllm-project/vllm#2964,
# huggingface/chat-ui#1386, BerriAI/litellm#4377), answers HTTP 400 with an error at the top level
VLLM_NO_SYSTEM_ROLE = (
    400,
    {"object": "error", "message": "System role not supported", "type": "BadRequestError", "param": None, "code": 400},
)
# TGI raises the template's exception as a minijinja SyntaxError and answers InferError::TemplateError
# with HTTP 422 and error_type template_error (router/src/infer.rs, server.rs; the shape of
# text-generation-inference#1870's "Template error: template not found")
TGI_NO_SYSTEM_ROLE = (
    422,
    {"error": "Template error: syntax error: System role not supported", "error_type": "template_error"},
)


def _gemma(refusal):
    """A server whose chat template has no system role: ``refusal`` for a request holding one."""
    return lambda body, k: refusal if any(m["role"] == "system" for m in body["messages"]) else OK


def test_o1_mini_refusing_the_system_role_stops_the_run_naming_system_role(fake):
    endpoint = fake(_o1_mini)
    backbone = _backbone(endpoint.url, max_concurrency=1)
    with pytest.raises(BackboneError) as info:
        backbone.complete([Request(WITH_SYSTEM)] * 3)
    message = str(info.value)
    assert "messages[0].role" in message  # the server's reason, quoted
    assert "set `system_role: user` in the config of backbone 'remote'" in message
    assert "`system_role: developer`" in message  # for the o-series models that take it
    assert endpoint.hits == 1


def test_system_role_user_opens_the_first_user_message_with_the_system_text(fake):
    endpoint = fake(_o1_mini)
    (c,) = _backbone(endpoint.url, system_role="user").complete([Request(WITH_SYSTEM)])
    assert c.error is None and c.text == "The answer is 10."
    # a blank line between them, as Gemma's template joins them itself (first_user_prefix)
    assert endpoint.bodies[0]["messages"] == [{"role": "user", "content": f"{SYSTEM}\n\n{QUESTION}"}]


def test_system_role_developer_sends_a_developer_message_and_o1_mini_then_names_user(fake):
    # o1 (2024-12-17), o3 and o4-mini take the developer role in place of system
    accepts = fake(lambda body, k: OK)
    (c,) = _backbone(accepts.url, system_role="developer").complete([Request(WITH_SYSTEM)])
    assert c.error is None
    assert accepts.bodies[0]["messages"] == [
        {"role": "developer", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    # o1-mini refuses that too: the error names the one setting left
    refuses = fake(_o1_mini)
    with pytest.raises(BackboneError, match=re.escape("set `system_role: user`")) as info:
        _backbone(refuses.url, system_role="developer").complete([Request(WITH_SYSTEM)])
    assert "does not support 'developer'" in str(info.value) and "system_role: developer`" not in str(info.value)


@pytest.mark.parametrize("refusal", [VLLM_NO_SYSTEM_ROLE, TGI_NO_SYSTEM_ROLE], ids=["vllm", "tgi"])
def test_a_chat_template_without_a_system_role_stops_the_run_naming_system_role(fake, refusal):
    endpoint = fake(_gemma(refusal))
    backbone = _backbone(endpoint.url, max_concurrency=1)
    backbone.complete([Request(MSG)])  # no system message: answered
    with pytest.raises(BackboneError, match=re.escape("set `system_role: user`")) as info:
        backbone.complete([Request(WITH_SYSTEM)] * 3)
    assert "System role not supported" in str(info.value)
    assert endpoint.hits == 2  # stopped at the first refusal, the rest of the batch unsent
    # with the option set, the same server answers
    gemma = fake(_gemma(refusal))
    (c,) = _backbone(gemma.url, system_role="user").complete([Request(WITH_SYSTEM)])
    assert c.error is None and gemma.bodies[0]["messages"][0]["content"] == f"{SYSTEM}\n\n{QUESTION}"


def test_a_rejected_role_other_than_system_names_no_option(fake):
    # a 400 for another message's role is not the system role's: no option claims to fix it
    error = {
        "message": "Unsupported value: 'messages[1].role' does not support 'tool' with this model.",
        "type": "invalid_request_error",
        "param": "messages[1].role",
        "code": "unsupported_value",
    }
    endpoint = fake(lambda body, k: (400, {"error": error}))
    with pytest.raises(BackboneError, match="has no option to drop it") as info:
        _backbone(endpoint.url).complete([Request(WITH_SYSTEM)])
    assert "system_role" not in str(info.value)


@pytest.mark.parametrize(
    ("messages", "sent"),
    [
        # no system message: sent as it is
        (MSG, MSG),
        # the system text before content parts is a text part of its own
        (
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
            [{"role": "user", "content": [{"type": "text", "text": SYSTEM}, {"type": "text", "text": QUESTION}]}],
        ),
        # two system messages open the next user turn together; the history before it is kept
        (
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "system", "content": "A"},
                {"role": "system", "content": [{"type": "text", "text": "B"}]},
                {"role": "user", "content": QUESTION},
            ],
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": f"A\n\nB\n\n{QUESTION}"},
            ],
        ),
        # a system message with no user turn after it becomes one
        ([{"role": "system", "content": SYSTEM}], [{"role": "user", "content": SYSTEM}]),
    ],
    ids=["no-system", "content-parts", "mid-conversation", "system-only"],
)
def test_system_role_user_merges_every_system_message(fake, messages, sent):
    endpoint = fake(lambda body, k: OK)
    _backbone(endpoint.url, system_role="user").complete([Request(messages)])
    assert endpoint.bodies[0]["messages"] == sent


def test_system_role_is_checked_when_the_config_is_built():
    spec = {"name": "o1-mini", "kind": "openai", "model": "o1-mini", "base_url": "http://127.0.0.1:9/v1"}
    spec.update(input_price=1.1, output_price=4.4)
    assert build_backbone({**spec, "system_role": "user"}).system_role == "user"
    assert build_backbone(BackboneSpec(**spec)).system_role == "system"
    with pytest.raises(ConfigError, match="system_role must be system, developer or user, got 'assistant'"):
        build_backbone({**spec, "system_role": "assistant"})
