"""The OpenAI-compatible backbone against fake servers on 127.0.0.1 that answer in the wire shapes
real servers send (OpenAI, Mistral, ollama, TGI, nginx): rate limits with ``retry-after``, fields a
reasoning model rejects, content given as a list of parts, usage quirks, error bodies without an
``error.message``. A trace whose model call failed for good is never persisted (trace log, search
state), so a resumed run runs its problem again.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from fake_http import scripted_endpoints

from lightning_agents.hflow import (
    ArithmeticTask,
    BackboneError,
    BackbonePool,
    Node,
    OpenAIBackbone,
    Request,
    SearchConfig,
    Workflow,
    WorkflowExecutor,
)
from lightning_agents.hflow.evaluation import Evaluator
from lightning_agents.hflow.factory import build_search

MSG = [{"role": "user", "content": "Ava has 8 shells and gets 2 more. How many?"}]

# Bodies as the servers send them (see the endpoint audit's repro scripts).
OPENAI_429 = {
    "error": {
        "message": "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit "
        "200000, Used 199000, Requested 2000. Please try again in 1s.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
OPENAI_MAX_TOKENS = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
}
OPENAI_TEMPERATURE = {
    "error": {
        "message": "Unsupported value: 'temperature' does not support 0.0 with this model. Only the default (1) "
        "value is supported.",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "unsupported_value",
    }
}
OPENAI_SEED = {
    "error": {
        "message": "Unsupported parameter: 'seed' is not supported with this model.",
        "type": "invalid_request_error",
        "param": "seed",
        "code": "unsupported_parameter",
    }
}
LLAMACPP_503 = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
TGI_422 = {
    "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 "
    "`inputs` tokens and 500 `max_new_tokens`",
    "error_type": "validation",
}
NGINX_413 = (
    b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request "
    b"Entity Too Large</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n"
)
MAGISTRAL_CONTENT = [
    {"type": "thinking", "thinking": [{"type": "text", "text": "8 + 2 = 10"}]},
    {"type": "text", "text": "The answer is 10."},
]


def chat(content, usage=None, finish="stop"):
    """A chat.completion body (vLLM's usage shape unless ``usage`` is given)."""
    return {
        "id": "chatcmpl-8f1",
        "object": "chat.completion",
        "created": 1733390000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": usage or {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30},
    }


OK = (200, chat("The answer is 10."), {})


@pytest.fixture
def fake():
    with scripted_endpoints() as start:
        yield start


def _backbone(url, **kw):
    args = dict(input_price=1.0, output_price=3.0, timeout_s=5.0, max_retries=2, backoff_s=0.02)
    args.update(kw)
    return OpenAIBackbone("remote", "m", url, **args)


def _window(seconds, limited):
    """A reply that answers ``limited`` for ``seconds`` after the first request, then OK."""
    start = []

    def reply(body, k):
        if not start:
            start.append(time.monotonic())
        return limited if time.monotonic() - start[0] < seconds else OK

    return reply


# ------------------------------------------------------------------------ 1. retry-after


def test_a_429_with_retry_after_is_waited_out(fake):
    # OpenAI's TPM limit: 429 with `retry-after: 1` for a second. The backoff alone (0.02 + 0.04 s)
    # would give up long before the window ends.
    server = fake(_window(0.9, (429, OPENAI_429, {"retry-after": "1", "x-ratelimit-reset-tokens": "1s"})))
    backbone = _backbone(server.url)
    t0 = time.monotonic()
    (c,) = backbone.complete([Request(MSG)])
    assert c.error is None and c.text == "The answer is 10."
    assert server.hits == 2  # waited what the server asked, once
    assert server.requests[1][1] - server.requests[0][1] >= 0.95
    assert time.monotonic() - t0 < 3


def test_a_503_with_retry_after_ms_is_waited_out(fake):
    # llama.cpp loading a model behind a gateway that says how long, in milliseconds
    server = fake(_window(0.4, (503, LLAMACPP_503, {"retry-after-ms": "450"})))
    (c,) = _backbone(server.url, backoff_s=0.01).complete([Request(MSG)])
    assert c.error is None and c.text == "The answer is 10."
    assert server.hits == 2


def test_retry_after_is_capped_and_backoff_stays_the_floor(fake):
    server = fake(lambda body, k: (429, OPENAI_429, {"retry-after": "3600"}) if k < 2 else OK)
    backbone = _backbone(server.url, backoff_s=0.1)
    backbone.MAX_RETRY_AFTER_S = 0.2  # a day-long retry-after waits at most this
    t0 = time.monotonic()
    (c,) = backbone.complete([Request(MSG)])
    assert c.error is None and server.hits == 3
    assert 0.35 <= time.monotonic() - t0 < 1.5  # 0.2 (capped) + 0.2 (capped, backoff 0.2 equal)
    server2 = fake(lambda body, k: (429, OPENAI_429, {"retry-after": "0"}) if k < 1 else OK)
    t0 = time.monotonic()
    (c,) = _backbone(server2.url, backoff_s=0.3).complete([Request(MSG)])
    assert c.error is None and time.monotonic() - t0 >= 0.28  # `retry-after: 0` does not undercut the backoff


def test_a_call_whose_waits_would_pass_the_total_cap_fails_instead_of_retrying_early(fake):
    # The waiting budget spent, shortened waits sent the last retries back to back to a server that
    # had asked for 60 s each.
    server = fake(lambda body, k: (429, OPENAI_429, {"retry-after": "0.3"}))
    backbone = _backbone(server.url, max_retries=8, backoff_s=0.01)
    backbone.MAX_TOTAL_WAIT_S = 0.7  # room for two waits of 0.3 s, not a third
    t0 = time.monotonic()
    (c,) = backbone.complete([Request(MSG)])
    assert server.hits == 3 and "gave up after 3 attempts" in c.error
    gaps = [b[1] - a[1] for a, b in zip(server.requests, server.requests[1:])]
    assert all(gap >= 0.28 for gap in gaps) and time.monotonic() - t0 < 2


def test_retry_after_reads_milliseconds_seconds_and_http_dates():
    import email.utils
    from types import SimpleNamespace

    from lightning_agents.hflow.backbones import _retry_after

    def exc(**headers):
        return SimpleNamespace(response=SimpleNamespace(headers=headers))

    assert _retry_after(exc(**{"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert _retry_after(exc(**{"retry-after": "1.5"})) == 1.5
    assert 8 <= _retry_after(exc(**{"retry-after": email.utils.formatdate(time.time() + 10, usegmt=True)})) <= 10
    assert _retry_after(exc(**{"retry-after": "soon"})) is None and _retry_after(exc()) is None


def _arith_server(fake, broken):
    """Answers every arithmetic question right, except while ``broken(question)`` holds: then 429
    (a rate limit that outlasts the retries)."""
    task = ArithmeticTask("val", n=6)
    answers = {p["question"]: p["answer"] for p in task.problems}

    def reply(body, k):
        question = next((q for q in answers if q in json.dumps(body["messages"])), "")
        if broken(question):
            return 429, OPENAI_429, {}
        return 200, chat(f"The answer is {answers.get(question, '0')}."), {}

    return task, fake(reply)


def test_a_trace_whose_call_failed_is_cached_but_not_logged_and_runs_again_on_resume(fake, tmp_path):
    state = {"limited": True}
    task, server = _arith_server(fake, lambda q: state["limited"] and q in {p["question"] for p in task.problems[:3]})
    log = tmp_path / "traces.jsonl"
    workflow = Workflow([Node("g", "generate", backbone="remote")])

    def evaluator():
        backbone = _backbone(server.url, max_retries=0)
        return Evaluator(WorkflowExecutor(task, BackbonePool([backbone])), trace_log=log)

    first = evaluator()
    res = first.evaluate(workflow, task.problems)
    assert (res.accuracy, res.errors, res.new_runs) == (0.5, 3, 6)
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(logged) == 3 and not any(r["trace"]["errors"] for r in logged)  # only the good ones
    again = first.evaluate(workflow, task.problems)  # within the run the failed traces are reused
    assert (again.accuracy, again.new_runs) == (0.5, 0)

    # a log written by an older version holds failed traces too: they are not read back
    failed_trace = first.cache[(workflow.hash(), task.problems[0]["id"])]
    assert failed_trace["errors"] == 1
    with log.open("a") as f:
        f.write(json.dumps({"workflow": workflow.hash(), "problem": task.problems[0]["id"], "trace": failed_trace}))
        f.write("\n")
    state["limited"] = False  # the limit lifted; a resumed run reads the log back
    hits = server.hits
    resumed = evaluator()
    assert len(resumed.cache) == len(resumed.logged) == 3
    res = resumed.evaluate(workflow, task.problems)
    assert (res.accuracy, res.errors, res.new_runs) == (1.0, 0, 3)
    assert server.hits - hits == 3 and resumed.problem_runs == 3


def test_a_resumed_search_runs_the_failed_problems_again_and_counts_them_once(fake, tmp_path):
    state = {"limited": True}
    task, server = _arith_server(fake, lambda q: state["limited"] and q == task.problems[0]["question"])
    cfg = SearchConfig(population_size=2, offspring=2, max_nodes=2, eval_problems=6, rater="none", workers=1)

    def search():
        pool = BackbonePool([_backbone(server.url, max_retries=0)])
        return build_search(cfg, task, pool, output=tmp_path / "out")

    first = search()
    first.initialize()
    failed = {k for k, t in first.evaluator.cache.items() if t["errors"]}
    assert failed  # the rate-limited problem failed for every seed workflow that ran it
    saved = json.loads(json.dumps(first.state_dict()))
    assert not any(t["errors"] for _, _, t in saved["cache"])
    assert all(k not in failed for k in first.evaluator.logged)
    logged = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    assert not any(r["trace"]["errors"] for r in logged)

    # a state saved by an older version holds the failed traces: they are not restored either
    saved["cache"] += [[h, p, first.evaluator.cache[(h, p)]] for h, p in sorted(failed)]
    state["limited"] = False
    resumed = search()
    resumed.load_state_dict(saved)
    assert resumed.evaluator.problem_runs == saved["problem_runs"]  # nothing in the log is counted twice
    assert not failed & set(resumed.evaluator.cache)
    hits = server.hits
    new = 0
    for ind in resumed.population:
        new += resumed.evaluator.evaluate(ind.workflow, resumed.problems).new_runs
    rerun = {k for k in failed if k[0] in {i.hash for i in resumed.population}}
    assert new == len(rerun) > 0  # each failed problem of the population ran again, once
    assert resumed.evaluator.problem_runs == saved["problem_runs"] + len(rerun)
    assert server.hits > hits
    for ind in resumed.population:  # and is cached from then on
        assert resumed.evaluator.evaluate(ind.workflow, resumed.problems).new_runs == 0


# ------------------------------------------------------------ 2. fields a model rejects


def _reasoning_model(body, k):
    """OpenAI's o-series: rejects `max_tokens`, any temperature but 1 and (here) `seed`."""
    if "max_tokens" in body:
        return 400, OPENAI_MAX_TOKENS, {}
    if body.get("temperature", 1) != 1:
        return 400, OPENAI_TEMPERATURE, {}
    if "seed" in body:
        return 400, OPENAI_SEED, {}
    return OK


@pytest.mark.parametrize(
    ("options", "hint"),
    [
        ({}, "max_tokens_param: max_completion_tokens"),
        ({"max_tokens_param": "max_completion_tokens"}, "send_temperature: false"),
        ({"max_tokens_param": "max_completion_tokens", "send_temperature": False}, "send_seed: false"),
    ],
)
def test_a_rejected_request_field_stops_at_the_first_call_naming_the_option(fake, options, hint):
    server = fake(_reasoning_model)
    backbone = _backbone(server.url, **options)
    with pytest.raises(BackboneError, match=hint):
        backbone.complete([Request(MSG)])
    assert server.hits == 1  # not retried, and no later call is made to fail the same way


def test_the_fixed_config_works_on_the_reasoning_model(fake):
    server = fake(_reasoning_model)
    backbone = _backbone(server.url, max_tokens_param="max_completion_tokens", send_temperature=False, send_seed=False)
    (c,) = backbone.complete([Request(MSG)])
    assert c.error is None and c.text == "The answer is 10."


# ------------------------------------------------------------ 3. content as a list of parts


def test_content_parts_are_read_as_their_text_parts(fake):
    # Mistral Magistral -2507/-2509: content is [thinking chunk, text chunk]
    server = fake(lambda body, k: (200, chat(MAGISTRAL_CONTENT, {"prompt_tokens": 21, "completion_tokens": 59}), {}))
    (c,) = _backbone(server.url).complete([Request(MSG)])
    assert (c.text, c.input_tokens, c.output_tokens, c.error) == ("The answer is 10.", 21, 59, None)


@pytest.mark.parametrize("content", [{"text": "10"}, 42, [{"type": "text", "text": None}]])
def test_content_of_an_unexpected_shape_fails_the_call_not_the_run(fake, content):
    server = fake(lambda body, k: (200, chat(content), {}))
    backbone = _backbone(server.url, max_retries=1)
    task = ArithmeticTask("val", n=2)
    ev = Evaluator(WorkflowExecutor(task, BackbonePool([backbone])))
    res = ev.evaluate(Workflow([Node("g", "generate", backbone="remote")]), task.problems)
    assert (res.accuracy, res.errors) == (0.0, 2)
    assert server.hits == 4  # retried like a server error, then the call failed


# ------------------------------------------------------------ 8. ollama's cached prompt


def test_zero_prompt_tokens_warns_once_per_backbone(fake, caplog):
    usage = {"prompt_tokens": 0, "completion_tokens": 9, "total_tokens": 9}
    server = fake(lambda body, k: (200, chat("The answer is 10.", usage), {}))
    backbone = _backbone(server.url)
    with caplog.at_level(logging.WARNING, logger="lightning_agents.hflow.backbones"):
        outs = backbone.complete([Request(MSG)] * 3)
        backbone.complete([Request(MSG)])
    assert [(c.input_tokens, c.output_tokens, c.error) for c in outs] == [(0, 9, None)] * 3
    warnings = [r for r in caplog.records if "0 prompt tokens" in r.getMessage()]
    assert len(warnings) == 1 and "understates" in warnings[0].getMessage()


# ------------------------------------------------------------ 10. the server's own reason


@pytest.mark.parametrize(
    ("status", "payload", "reason"),
    [
        (422, TGI_422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096"),
        (413, NGINX_413, "413 Request Entity Too Large"),
    ],
)
def test_an_error_without_error_message_quotes_the_server(fake, status, payload, reason):
    server = fake(lambda body, k: (status, payload, {}))
    (c,) = _backbone(server.url).complete([Request(MSG)])
    assert c.error.startswith(f"remote: HTTP {status} from ") and reason in c.error
    assert server.hits == 1  # a bad request is not retried


# ------------------------------------------------------------ 11. billed malformed responses


def test_usage_of_a_retried_malformed_response_is_booked(fake):
    empty = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    empty["usage"] = {"prompt_tokens": 21, "completion_tokens": 0, "total_tokens": 21}
    server = fake(lambda body, k: (200, empty, {}) if k == 0 else OK)
    pool = BackbonePool([_backbone(server.url)])
    (c,) = pool.complete("remote", [Request(MSG)])
    assert (c.text, c.input_tokens, c.output_tokens) == ("The answer is 10.", 42, 9)
    assert pool.ledger.summary()["total"]["input_tokens"] == 42
    # and when every attempt is such a response, the failed call is still booked
    server2 = fake(lambda body, k: (200, empty, {}))
    pool2 = BackbonePool([_backbone(server2.url, max_retries=1)])
    (c,) = pool2.complete("remote", [Request(MSG)])
    assert c.error is not None and c.input_tokens == 42
    assert pool2.ledger.summary()["total"]["calls"] == 1
