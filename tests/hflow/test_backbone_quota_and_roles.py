"""The OpenAI-compatible backbone against two provider behaviours, on fake endpoints on 127.0.0.1
that answer with the providers' own bodies:

- per-day quotas: an HTTP 429 ``RESOURCE_EXHAUSTED`` whose ``google.rpc.QuotaFailure`` names a
  ``...PerDay...`` quota (Gemini), or OpenRouter's ``free-models-per-day``, stops the run (as
  OpenAI's ``insufficient_quota`` does), naming the quota, also for the search's other workers
  queued on the backbone; per-minute quotas, and bodies of any other shape, are retried as rate
  limits;
- a rejected ``system`` role (OpenAI's o1-mini and o1-preview; Gemma 1 and 2's and Mixtral-v0.1's
  chat templates behind vLLM, TGI or SGLang): the error names the ``system_role`` option, which
  sends the system text as a ``developer`` message or at the start of the next user message, for
  both backbone kinds, and the call log's replay key follows what is sent.
"""

from __future__ import annotations

import copy
import json
import re
import threading

import pytest
from fake_http import scripted_endpoints
from test_backbones_real_shapes import MSG, OK, _backbone

from lightning_agents.hflow import BackboneError, BackbonePool, ConfigError, Ledger, OpenAIBackbone, Request
from lightning_agents.hflow.backbones import BackboneSpec, LocalHFBackbone, build_backbone, request_key


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


def test_a_spent_daily_quota_stops_the_rest_of_an_evaluation_batch(fake, short_waits):
    # through the pool, as one evaluation worker calls it: the first 429 stops the batch, the rest
    # unsent (several workers sharing the backbone: the test after this one)
    endpoint = fake(lambda _body, k: OK if k == 0 else (429, [GEMINI_DAILY]))
    pool = BackbonePool([_backbone(endpoint.url, max_retries=4, max_concurrency=2)])
    pool.complete("remote", [Request(MSG)])
    with pytest.raises(BackboneError, match="GenerateRequestsPerDayPerProjectPerModel-FreeTier"):
        pool.complete("remote", [Request(MSG)] * 8)
    assert endpoint.hits <= 1 + 2  # the answered call, then at most the requests already in flight


class _CountingSlots:
    """A backbone's concurrency semaphore that counts the calls that reached it (waiting or
    holding a slot) and says when ``expected`` have."""

    def __init__(self, slots, expected):
        self.slots, self.expected, self.entered = slots, expected, 0
        self.lock = threading.Lock()
        self.all_queued = threading.Event()

    def __enter__(self):
        with self.lock:
            self.entered += 1
            if self.entered >= self.expected:
                self.all_queued.set()
        return self.slots.__enter__()

    def __exit__(self, *exc):
        return self.slots.__exit__(*exc)


def test_a_stop_reaches_the_calls_of_other_workers_queued_for_a_slot(fake):
    # search.workers evaluation threads share one backbone, each completing a batch of its own:
    # 4 workers x 2 requests on max_concurrency 2, so 6 calls wait for a slot while 2 are in flight.
    # The server answers the two in flight with the per-day quota only once all 8 wait there; the
    # 6 queued calls must then fail unsent (before, each sent its request when it got the slot: 8)
    workers, batch, concurrency = 4, 2, 2
    slots = None

    def reply(_body, k):
        slots.all_queued.wait(10)
        return 429, [GEMINI_DAILY]

    endpoint = fake(reply)
    backbone = _backbone(endpoint.url, max_retries=4, max_concurrency=concurrency)
    slots = backbone._slots = _CountingSlots(backbone._slots, workers * batch)
    outcomes = []

    def worker():
        try:
            backbone.complete([Request(MSG, seed=i) for i in range(batch)])
            outcomes.append("answered")
        except BackboneError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert slots.entered == workers * batch  # every call reached the slot before the stop
    assert endpoint.hits == concurrency  # only the calls in flight at the first 429 were sent
    assert len(outcomes) == workers
    assert all("GenerateRequestsPerDayPerProjectPerModel-FreeTier" in o for o in outcomes)


def test_one_request_per_worker_queued_on_a_single_slot_is_not_sent_after_the_stop(fake):
    # max_concurrency 1 and each worker completing one request (complete() runs it in the caller's
    # thread): the three queued behind the first fail unsent (before, all 4 were sent)
    slots = None

    def reply(_body, k):
        slots.all_queued.wait(10)
        return 429, [GEMINI_DAILY]

    endpoint = fake(reply)
    backbone = _backbone(endpoint.url, max_retries=4, max_concurrency=1)
    slots = backbone._slots = _CountingSlots(backbone._slots, 4)
    stopped = []

    def worker():
        with pytest.raises(BackboneError, match="resets daily"):
            backbone.complete([Request(MSG)])
        stopped.append(True)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(stopped) == 4 and endpoint.hits == 1


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


def _zero_limit(body, quota_value="0"):
    """GEMINI_DAILY as Gemini answers for a model its free tier does not offer: the per-day quota's
    ``quotaValue`` is "0" and the message says "limit: 0" (quoted in continuedev/continue#10066:
    "Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests,
    limit: 0, model: gemini-2.0-flash")."""
    error = copy.deepcopy(body["error"])
    error["message"] += (
        " \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, "
        "limit: 0, model: gemini-2.0-flash\nPlease retry in 7.967587226s."
    )
    if quota_value is not None:
        error["details"][1]["violations"][0]["quotaValue"] = quota_value
    return {"error": error}


@pytest.mark.parametrize("quota_value", ["0", None], ids=["quotaValue", "message-only"])
def test_a_daily_quota_with_a_limit_of_0_is_named_as_not_on_this_tier(fake, short_waits, quota_value):
    endpoint = fake(lambda _body, k: (429, [_zero_limit(GEMINI_DAILY, quota_value)]))
    with pytest.raises(BackboneError) as info:
        _backbone(endpoint.url, max_retries=4).complete([Request(MSG)])
    message = str(info.value)
    assert "GenerateRequestsPerDayPerProjectPerModel-FreeTier" in message
    assert "has a limit of 0: the model is not available on this tier" in message
    assert "used up" not in message and endpoint.hits == 1
    # a per-day quota whose limit the body does not give may be either: the message says so
    spent = fake(lambda _body, k: (429, [GEMINI_DAILY]))
    with pytest.raises(BackboneError, match=re.escape("is used up (or not available on this tier)")):
        _backbone(spent.url, max_retries=4).complete([Request(MSG)])
    # the quota's own value wins over a "limit: 0" the message gives for another quota
    other = fake(lambda _body, k: (429, [_zero_limit(GEMINI_DAILY, "20")]))
    with pytest.raises(BackboneError, match=re.escape("is used up (or not available on this tier)")):
        _backbone(other.url, max_retries=4).complete([Request(MSG)])


# OpenRouter's 429 once an account's `:free` model requests of the day are spent, quoted in
# Gitlawb/openclaude#936 ("429 { "error": { "message": "Rate limit exceeded: free-models-per-day. Add
# 10 credits to unlock 1000 free model requests per day", "code": 429, "metadata": { "headers": {
# "X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0", ...); the reset, in milliseconds since the
# epoch, as another project quotes the same body ("X-RateLimit-Reset": "1761609600000",
# 2025-10-28 00:00 UTC). OpenRouter's docs: 50 `:free` requests a day, 1000 after 10 credits bought.
OPENROUTER_FREE_PER_DAY = {
    "error": {
        "message": "Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day",
        "code": 429,
        "metadata": {
            "headers": {"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1761609600000"}
        },
    }
}
# the same limit for an account with credit (Gitlawb/openclaude#1549), without the headers
OPENROUTER_HIGH_BALANCE = {
    "error": {
        "message": "Rate limit exceeded: free-models-per-day-high-balance.",
        "type": "rate_limit_error",
        "code": "429",
    }
}


@pytest.mark.parametrize(
    ("body", "name", "when"),
    [
        (OPENROUTER_FREE_PER_DAY, "(free-models-per-day)", "it resets at 2025-10-28 00:00 UTC"),
        (OPENROUTER_HIGH_BALANCE, "(free-models-per-day-high-balance)", "it resets daily"),
    ],
    ids=["free-models-per-day", "high-balance"],
)
def test_openrouters_spent_daily_free_model_limit_stops_the_run(fake, short_waits, body, name, when):
    # before: retried as a rate limit (3 attempts per request), every request of the run failing
    endpoint = fake(lambda _body, k: (429, body))
    with pytest.raises(BackboneError) as info:
        _backbone(endpoint.url, max_retries=4, max_concurrency=1).complete([Request(MSG)] * 3)
    message = str(info.value)
    assert f"OpenRouter's daily limit on free models {name} of backbone 'remote'" in message
    assert when in message and "add credit, wait for the reset or switch backbone" in message
    assert endpoint.hits == 1


def test_openrouters_per_minute_limit_is_still_retried(fake, short_waits):
    # OpenRouter's per-minute limit on free models, as a public agent log quotes it: a rate limit,
    # though its body has a reset time too
    headers = {"X-RateLimit-Limit": "16", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1774047180000"}
    body = {
        "error": {
            "message": "Rate limit exceeded: free-models-per-min. ",
            "code": 429,
            "metadata": {"headers": headers},
        }
    }
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
        # content parts: the system text and a blank line open the first text part (Gemma 3's
        # template trims each part and joins them with nothing between: a part of its own would
        # render "Answer with a number.Ava has ...")
        (
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
            [{"role": "user", "content": [{"type": "text", "text": f"{SYSTEM}\n\n{QUESTION}"}]}],
        ),
        # an image before the text: the first text part still gets it, the image part is kept
        (
            [
                {"role": "system", "content": SYSTEM},
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "Q"}],
                },
            ],
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "u"}},
                        {"type": "text", "text": f"{SYSTEM}\n\nQ"},
                    ],
                }
            ],
        ),
        # no text part at all: the system text becomes one, first
        (
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            ],
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": SYSTEM}, {"type": "image_url", "image_url": {"url": "u"}}],
                }
            ],
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
        # a system message in text parts: joined as every prompt's parts are (a newline), not glued
        (
            [
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
                },
                {"role": "user", "content": QUESTION},
            ],
            [{"role": "user", "content": f"Be brief.\nUse tools.\n\n{QUESTION}"}],
        ),
    ],
    ids=[
        "no-system",
        "content-parts",
        "image-then-text",
        "no-text-part",
        "mid-conversation",
        "system-only",
        "system-in-parts",
    ],
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


# ------------------------------------------------ system-role refusals other servers and templates send

# SGLang answers any exception of a request's preprocessing, the chat template's included, with
# HTTP 500 (OpenAIServingBase.handle_request: "Internal server error: {e}", InternalServerError)
SGLANG_NO_SYSTEM_ROLE = (
    500,
    {
        "object": "error",
        "message": "Internal server error: System role not supported",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    },
)
# Mixtral-8x7B-Instruct-v0.1's template takes only alternating user and assistant turns and raises
# this for a conversation that opens with a system message (the same raise_exception Gemma's uses)
ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."
VLLM_ALTERNATE = (400, {"object": "error", "message": ALTERNATE, "type": "BadRequestError", "param": None, "code": 400})
SGLANG_ALTERNATE = (500, {**SGLANG_NO_SYSTEM_ROLE[1], "message": f"Internal server error: {ALTERNATE}"})


def test_sglangs_http_500_for_a_template_without_a_system_role_names_system_role(fake):
    # before: retried as a server error (3 attempts a request) and stopped only after 16 calls in a
    # row failed, 48 requests later, never naming the option
    endpoint = fake(_gemma(SGLANG_NO_SYSTEM_ROLE))
    with pytest.raises(BackboneError) as info:
        _backbone(endpoint.url, max_concurrency=1).complete([Request(WITH_SYSTEM)] * 20)
    message = str(info.value)
    assert "System role not supported" in message and "every request would fail the same way" in message
    assert "set `system_role: user` in the config of backbone 'remote'" in message
    assert "(the system text then opens the next user message)" in message
    assert endpoint.hits == 1


def test_a_500_about_the_system_role_for_a_request_without_one_is_a_server_error(fake):
    # the text alone does not stop the run: without a system message the option cannot help
    endpoint = fake(lambda body, k: SGLANG_NO_SYSTEM_ROLE if k == 0 else OK)
    (c,) = _backbone(endpoint.url).complete([Request(MSG)])
    assert c.error is None and endpoint.hits == 2


@pytest.mark.parametrize("refusal", [VLLM_ALTERNATE, SGLANG_ALTERNATE], ids=["vllm-400", "sglang-500"])
def test_a_template_refusing_the_system_turn_as_unalternating_names_system_role(fake, refusal):
    def mixtral(body, k):
        roles = [m["role"] for m in body["messages"]]
        alternates = all(r == ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(roles))
        return OK if alternates else refusal

    endpoint = fake(mixtral)
    backbone = _backbone(endpoint.url, max_concurrency=1)
    # a request without a system message whose roles do not alternate is that request's fault
    (c,) = backbone.complete([Request(MSG * 2)])
    assert c.error is not None and ALTERNATE in c.error
    backbone.complete([Request(MSG)])  # answered
    sent = endpoint.hits
    with pytest.raises(BackboneError) as info:
        backbone.complete([Request(WITH_SYSTEM)] * 3)
    message = str(info.value)
    assert ALTERNATE in message
    assert "the system message this request holds is the likely cause" in message
    assert "set `system_role: user`" in message
    # stopped at the first refusal; before, refused one by one (400) or retried (500), never naming it
    assert endpoint.hits == sent + 1
    # with the option set, the same server answers
    merged = fake(mixtral)
    (c,) = _backbone(merged.url, system_role="user").complete([Request(WITH_SYSTEM)])
    assert c.error is None and merged.bodies[0]["messages"] == [{"role": "user", "content": f"{SYSTEM}\n\n{QUESTION}"}]


# ------------------------------------------------------------ the merge against Gemma 3's own

# Gemma 3's chat template (google/gemma-3-*-it tokenizer_config.json "chat_template", as quoted in
# the BFCL GemmaHandler docstring): a leading system message becomes `first_user_prefix`, its text
# and a blank line before the first user turn; content parts are trimmed and joined with nothing
GEMMA3 = json.loads(
    r'''"{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"'''
)
# vLLM's Gemma 3 template with pythonic tool calls (examples/tool_chat_template_gemma3_pythonic.jinja)
VLLM_GEMMA3 = "../data/tool_call_outputs/templates/vllm-gemma3-pythonic.jinja"


@pytest.fixture
def tokenizer(embedded_pool_factory):
    """The embedded student's tokenizer (loaded once per session): transformers' renderer."""
    return embedded_pool_factory().get("student")._tokenizer


def _template(which):
    if which == "gemma3":
        return GEMMA3
    from pathlib import Path

    return (Path(__file__).parent / VLLM_GEMMA3).read_text()


@pytest.mark.parametrize("which", ["gemma3", "vllm-gemma3-pythonic"])
@pytest.mark.parametrize(
    "user",
    [
        QUESTION,
        [{"type": "text", "text": QUESTION}],
        [{"type": "text", "text": "Ava has 8 shells."}, {"type": "text", "text": "How many?"}],
    ],
    ids=["string", "one-text-part", "two-text-parts"],
)
def test_system_role_user_renders_as_gemma_3s_template_merges_a_system_message(fake, tokenizer, which, user):
    # what system_role: user sends, rendered by transformers' apply_chat_template through Gemma 3's
    # template, is the prompt that template makes of [system, user] itself (before, a content-part
    # message rendered "Answer with a number.Ava has ...": the blank line lost)
    template = _template(which)
    conversation = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    endpoint = fake(lambda body, k: OK)
    _backbone(endpoint.url, system_role="user").complete([Request(conversation)])
    sent = endpoint.bodies[0]["messages"]

    def render(messages):
        return tokenizer.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=True
        )

    own = render(conversation)
    assert f"{SYSTEM}\n\n" in own
    assert render(sent) == own


# ------------------------------------------------------------------ the replay key

OFFLINE = "http://127.0.0.1:9/v1"  # nothing listens: a call that is not replayed fails


def _pool(url, log, **options):
    ledger = Ledger()
    ledger.log_calls(log)
    ledger.replay_log()
    return BackbonePool([_backbone(url, **options)], ledger)


def test_the_replay_key_of_a_request_with_default_options_is_unchanged():
    # calls.jsonl files written before the key followed what is sent must keep replaying: with the
    # default options the digest is the one the code before it computed (pinned here)
    backbone = OpenAIBackbone("remote", "m", OFFLINE, input_price=1.0, output_price=3.0)
    request = Request(WITH_SYSTEM, seed=1)
    assert backbone.wire_fields(request) == {}
    assert (
        request_key(request, backbone.describe(), backbone.wire_fields(request)) == "164192e9d5f958059d5f63cf08beffd6"
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    sampled = Request(WITH_SYSTEM, seed=1, temperature=0.7, max_tokens=32, tools=tools)
    assert (
        request_key(sampled, backbone.describe(), backbone.wire_fields(sampled)) == "e30f7f4fd8d2cbb81367345f4a2f234b"
    )


def test_an_old_call_log_is_replayed_with_the_default_options(tmp_path):
    log = tmp_path / "calls.jsonl"
    row = {
        "backbone": "remote",
        "role": "workflow",
        "workflow": "w",
        "generation": 0,
        "input_tokens": 20,
        "output_tokens": 6,
        "cached_tokens": 0,
        "request": "164192e9d5f958059d5f63cf08beffd6",  # as the code before this change logged it
        "answer": {"text": "10", "tool_calls": None, "truncated": False},
    }
    log.write_text(json.dumps(row) + "\n")
    pool = BackbonePool([OpenAIBackbone("remote", "m", OFFLINE, input_price=1.0, output_price=3.0, max_retries=0)])
    pool.ledger.log_calls(log)
    pool.ledger.replay_log()
    (c,) = pool.complete("remote", [Request(WITH_SYSTEM, seed=1)], workflow="w")
    assert c.replayed and c.text == "10" and c.input_tokens == 20


@pytest.mark.parametrize(
    "changed",
    [
        {"system_role": "user"},
        {"system_role": "developer"},
        {"send_temperature": False},
        {"send_seed": False},
        {"max_tokens_param": "max_completion_tokens"},
    ],
    ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()),
)
def test_a_resumed_run_whose_options_change_what_is_sent_asks_again(fake, tmp_path, changed):
    # a restart after system_role changed was served the answer logged for the request as it was
    # sent before (a system message), not as it is sent now (merged into the user message)
    endpoint = fake(lambda body, k: OK)
    log = tmp_path / "calls.jsonl"
    (c,) = _pool(endpoint.url, log).complete("remote", [Request(WITH_SYSTEM, seed=1)], workflow="w")
    assert not c.replayed and endpoint.hits == 1
    (c,) = _pool(endpoint.url, log, **changed).complete("remote", [Request(WITH_SYSTEM, seed=1)], workflow="w")
    assert not c.replayed and endpoint.hits == 2
    # a further restart with the same options is served what that one was sent
    (c,) = _pool(endpoint.url, log, **changed).complete("remote", [Request(WITH_SYSTEM, seed=1)], workflow="w")
    assert c.replayed and endpoint.hits == 2


def test_a_request_without_a_system_message_replays_across_a_system_role_change(fake, tmp_path):
    # its messages are sent alike whatever system_role says: the logged answer is still its answer
    endpoint = fake(lambda body, k: OK)
    log = tmp_path / "calls.jsonl"
    _pool(endpoint.url, log).complete("remote", [Request(MSG, seed=1)], workflow="w")
    (c,) = _pool(endpoint.url, log, system_role="user").complete("remote", [Request(MSG, seed=1)], workflow="w")
    assert c.replayed and endpoint.hits == 1


# ------------------------------------------------------------------ kind: hf

# Gemma 1 and 2's chat template (google/gemma-2-2b-it, gemma-7b-it): raises on a system message
GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)


def test_system_role_user_on_a_local_model_whose_template_has_no_system_role(embedded_pool_factory):
    # before: `kind: hf` took system_role and ignored it, so a local Gemma 2 raised at its template
    from jinja2.exceptions import TemplateError

    student = embedded_pool_factory().get("student")
    gemma_tokenizer = copy.deepcopy(student._tokenizer)
    gemma_tokenizer.chat_template = GEMMA2

    def local(system_role):
        return LocalHFBackbone(
            "local",
            input_price=0.0,
            output_price=0.0,
            model_object=student._model,
            tokenizer=gemma_tokenizer,
            system_role=system_role,
        )

    with pytest.raises(TemplateError, match="System role not supported"):
        local("system").complete([Request(WITH_SYSTEM, max_tokens=2)])
    backbone = local("user")
    engine = backbone._ensure_engine()
    rendered, render = [], engine.render
    engine.render = lambda prompt, tools=None: rendered.append(render(prompt, tools)) or rendered[-1]
    (c,) = backbone.complete([Request(WITH_SYSTEM, max_tokens=2)])
    assert c.error is None and c.output_tokens > 0
    merged = [{"role": "user", "content": f"{SYSTEM}\n\n{QUESTION}"}]
    expected = gemma_tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)
    assert rendered and set(rendered) == {expected}
    assert "<start_of_turn>user\nAnswer with a number.\n\nAva has" in expected


def test_system_role_reaches_a_local_backbone_from_the_config():
    spec = {"name": "local", "kind": "hf", "model": "embedded:student", "input_price": 0, "output_price": 0}
    assert build_backbone({**spec, "system_role": "user"}).system_role == "user"  # the model loads on first use
    assert build_backbone(spec).system_role == "system"
    with pytest.raises(ConfigError, match="system_role must be system, developer or user, got 'assistant'"):
        build_backbone({**spec, "system_role": "assistant"})


# ------------------------------------------------- Gemini's body passed on by a gateway as text

# LiteLLM's proxy in front of Gemini: its own error, whose message carries the repr of the upstream
# body's bytes, newlines escaped (the log line quoted in BerriAI/litellm#9035: "litellm.RateLimitError:
# litellm.RateLimitError: VertexAIException - b'{\n  "error": {\n    "code": 429, ... "quotaId":
# "GenerateRequestsPerDayPerProjectPerModel"\n ..."; the proxy's error fields as LiteLLM sends them)
_LITELLM_UPSTREAM = (
    'b\'{\\n  "error": {\\n    "code": 429,\\n    "message": "You exceeded your current quota. Please migrate '
    "to Gemini 2.5 Pro Preview (models/gemini-2.5-pro-preview-03-25) for higher quota limits. For more "
    'information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",\\n    "status": '
    '"RESOURCE_EXHAUSTED",\\n    "details": [\\n      {\\n        "@type": "type.googleapis.com/google.rpc.'
    'QuotaFailure",\\n        "violations": [\\n          {\\n            "quotaMetric": "generativelanguage.'
    'googleapis.com/generate_requests_per_model_per_day",\\n            "quotaId": '
    '"GenerateRequestsPerDayPerProjectPerModel"\\n          }\\n        ]\\n      }\\n    ]\\n  }\\n}\\n\''
)
LITELLM_DAILY = {
    "error": {
        "message": "litellm.RateLimitError: litellm.RateLimitError: VertexAIException - " + _LITELLM_UPSTREAM,
        "type": "throttling_error",
        "param": None,
        "code": "429",
    }
}
# A gateway that sends Google's body as the JSON text of its message, as continuedev/continue#9745
# quotes for gemini-3-pro ({"error":{"message":"{\n  \"error\": {\n    \"code\": 429, ...
# limit: 0, model: gemini-3-pro ... Please retry in 10.673410956s.", ... "details": [...]}}",
# "code":429,"status":"Too Many Requests"}}); the details here are GEMINI_DAILY's with the per-day
# quota's value 0, as that message's "limit: 0" says
_GOOGLE_ZERO = copy.deepcopy(GEMINI_DAILY)
_GOOGLE_ZERO["error"]["details"][1]["violations"][0]["quotaValue"] = "0"
_GOOGLE_ZERO["error"]["details"][1]["violations"][1]["quotaValue"] = "15"
GATEWAY_TEXT_ZERO = {
    "error": {"message": json.dumps(_GOOGLE_ZERO, indent=2) + "\n", "code": 429, "status": "Too Many Requests"}
}
# OpenRouter passes a provider's error on in metadata.raw, beside its own message
OPENROUTER_RAW_DAILY = {
    "error": {
        "message": "Provider returned error",
        "code": 429,
        "metadata": {"raw": json.dumps(GEMINI_DAILY), "provider_name": "Google AI Studio"},
    }
}


@pytest.mark.parametrize(
    ("body", "quota", "state"),
    [
        (LITELLM_DAILY, "GenerateRequestsPerDayPerProjectPerModel", "is used up"),
        (GATEWAY_TEXT_ZERO, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "has a limit of 0"),
        (OPENROUTER_RAW_DAILY, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "is used up"),
    ],
    ids=["litellm-bytes-repr", "json-text-message", "openrouter-metadata-raw"],
)
def test_a_daily_quota_in_a_body_a_gateway_passes_on_as_text_stops_the_run(fake, short_waits, body, quota, state):
    # before: none of these named a quota in a form the backbone read, so the run retried a spent
    # day's quota until max_retries, and every later problem did the same
    endpoint = fake(lambda _body, k: (429, body))
    with pytest.raises(BackboneError) as info:
        _backbone(endpoint.url, max_retries=4, max_concurrency=1).complete([Request(MSG)] * 3)
    message = str(info.value)
    assert quota in message and state in message and endpoint.hits == 1


def test_a_per_minute_quota_passed_on_as_text_is_retried_after_the_delay_it_names(fake, monkeypatch):
    # the same gateway shapes with only a per-minute quota: a rate limit, retried after the wait the
    # body names (RetryInfo in the text, or Gemini's "Please retry in ...s." in the message)
    from lightning_agents.hflow import backbones

    per_minute = copy.deepcopy(GEMINI_PER_MINUTE)
    text_retry = {"error": {"message": json.dumps(per_minute), "code": 429}}
    per_minute["error"]["details"].pop()  # no RetryInfo: only the message's own words
    per_minute["error"]["message"] += " Please retry in 21.5s."
    text_message = {"error": {"message": json.dumps(per_minute), "code": 429}}
    for body in (text_retry, text_message):
        endpoint = fake(lambda _body, k, body=body: (429, body) if k == 0 else OK)
        assert backbones._retry_delay(body["error"]) in (21.0, 21.5)
        monkeypatch.setattr(OpenAIBackbone, "MAX_RETRY_AFTER_S", 0.05)
        (c,) = _backbone(endpoint.url).complete([Request(MSG)])
        assert c.error is None and endpoint.hits == 2
