"""The OpenAI-compatible backbone when a real endpoint fails mid-run: an error that stops the run
(HTTP 401, a reply without usage) must not lose the answers of its batch the provider already
billed, nor send the rest of the batch to a server that refuses the key; a request the server
refuses (a context overflow, Azure's content filter) costs its problem, not the run.

The fault-injection runs behind these tests (``evolve`` against a fake endpoint for every failure
class, and ``kill -9`` at random moments) are in the endpoint-fault audit's scripts.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
import yaml
from fake_http import scripted_endpoints

from lightning_agents.hflow import BackboneError, BackbonePool, OpenAIBackbone, Request

USAGE = {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}
OK = (200, {"choices": [{"message": {"role": "assistant", "content": "The answer is 10."}}], "usage": USAGE})
KEY_401 = (
    401,
    {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}},
)
# DeepSeek's answer when the account runs dry mid-run (OpenRouter's is also a 402)
NO_CREDIT_402 = (
    402,
    {
        "error": {
            "message": "Insufficient Balance",
            "type": "unknown_error",
            "param": None,
            "code": "invalid_request_error",
        }
    },
)
NO_USAGE = (200, {"choices": [{"message": {"role": "assistant", "content": "The answer is 10."}}]})
CONTEXT_400 = (
    400,
    {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "9000 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
)
AZURE_FILTER_400 = (
    400,
    {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management "
            "policy. Please modify your prompt and retry.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation"},
        }
    },
)


@pytest.fixture
def endpoint():
    with scripted_endpoints() as start:
        yield start


def _pool(url, **kw):
    args = dict(input_price=1.0, output_price=3.0, timeout_s=5.0, max_retries=0, backoff_s=0.01)
    args.update(kw)
    return BackbonePool([OpenAIBackbone("remote", "m", url, **args)])


def _ask(text):
    return Request([{"role": "user", "content": text}])


# ------------------------------------------------------------------------ booking


def test_each_answer_is_logged_as_it_arrives_not_when_its_batch_ends(endpoint, tmp_path):
    # A kill -9 mid-batch must not lose the answers already received: the provider bills them, and
    # the resumed run books their repeat too. The slow request is answered only once the fast one
    # is in calls.jsonl (or after 2 s, when it never gets there before the batch ends).
    log = tmp_path / "calls.jsonl"
    logged_first = []

    def reply(body, k):
        if body["messages"][0]["content"] == "slow":
            deadline = time.monotonic() + 2.0
            while not (log.is_file() and log.read_text()) and time.monotonic() < deadline:
                time.sleep(0.01)
            logged_first.append(log.is_file() and len(log.read_text().splitlines()) == 1)
        return OK

    fake = endpoint(reply)
    pool = _pool(fake.url, max_concurrency=2)
    pool.ledger.log_calls(log)
    outs = pool.complete("remote", [_ask("slow"), _ask("fast")], workflow="w")
    assert [c.error for c in outs] == [None, None]
    assert logged_first == [True]
    assert len(log.read_text().splitlines()) == 2 and pool.ledger.calls() == 2


# ------------------------------------------------------------------------ an error that stops the run


@pytest.mark.parametrize("stop", [KEY_401, NO_USAGE], ids=["401", "no_usage"])
def test_answers_of_the_batch_paid_before_a_stop_are_booked(endpoint, stop):
    # Four requests in flight at once; one is answered with the stopping error while the other three
    # are still being generated. The three answers come back and are billed: the ledger books them.
    arrived = threading.Event()

    def reply(body, k):
        if k == 3:
            arrived.set()
        arrived.wait(2.0)
        if body["messages"][0]["content"] == "stop":
            return stop
        time.sleep(0.2)  # still generating when the stop comes back
        return OK

    fake = endpoint(reply)
    pool = _pool(fake.url, max_concurrency=4)
    with pytest.raises(BackboneError, match="HTTP 401|no token usage"):
        pool.complete("remote", [_ask("a"), _ask("stop"), _ask("b"), _ask("c")], workflow="w")
    assert fake.hits == 4
    booked = pool.ledger.summary()["total"]
    assert booked["calls"] == 3 and booked["input_tokens"] == 3 * 21 and booked["output_tokens"] == 3 * 9
    assert pool.ledger.total_cost() == pytest.approx(3 * (21 * 1.0 + 9 * 3.0) / 1e6)


def test_nothing_more_is_sent_after_a_401(endpoint):
    # The rest of the batch and every later call fail with the same error, unsent.
    fake = endpoint(lambda body, k: KEY_401)
    pool = _pool(fake.url, max_concurrency=1)
    with pytest.raises(BackboneError, match="HTTP 401.*Incorrect API key"):
        pool.complete("remote", [_ask(str(i)) for i in range(6)])
    with pytest.raises(BackboneError, match="HTTP 401.*Incorrect API key"):
        pool.complete("remote", [_ask("later")])
    assert fake.hits == 1 and pool.ledger.calls() == 0


def test_an_account_out_of_credit_stops_the_run_after_answers_were_paid(endpoint):
    # A 402 is no refusal of one request: every later one fails the same way. Counted as a refusal
    # after the first answer, it never reached max_consecutive_failures, and evolve finished with
    # exit 0 and a workflow of fitness 0 (review, session 34).
    fake = endpoint(lambda body, k: OK if k == 0 else NO_CREDIT_402)
    pool = _pool(fake.url, max_concurrency=1)
    pool.complete("remote", [_ask("first")])
    with pytest.raises(BackboneError, match="HTTP 402.*out of credit"):
        pool.complete("remote", [_ask(str(i)) for i in range(50)])
    assert fake.hits == 2


def test_a_stop_in_one_thread_stops_the_others_unsent(endpoint):
    # Two search workers on one backbone: worker 2's first call is still being answered when worker 1
    # is refused; that answer is booked, and worker 2 sends nothing after it.
    refused, arrived = threading.Event(), threading.Event()

    def reply(body, k):
        if body["messages"][0]["content"].startswith("w2"):
            arrived.set()
            refused.wait(2.0)
            return OK
        return KEY_401

    fake = endpoint(reply)
    pool = _pool(fake.url, max_concurrency=2)
    errors = []

    def worker(prefix, n):
        try:
            for i in range(n):
                pool.complete("remote", [_ask(f"{prefix}-{i}")])
        except BackboneError as exc:
            errors.append(str(exc))
            refused.set()

    threads = [threading.Thread(target=worker, args=("w2", 5)), threading.Thread(target=worker, args=("w1", 1))]
    threads[0].start()
    assert arrived.wait(2.0)
    threads[1].start()
    for t in threads:
        t.join()
    assert len(errors) == 2 and all("HTTP 401" in e for e in errors)
    assert fake.hits == 2  # worker 2's first call (answered, booked), none after it
    assert pool.ledger.calls() == 1


def test_a_call_waiting_to_retry_gives_up_when_another_stops_the_run(endpoint):
    # One call is rate limited and told to wait 3 s; the other is refused its key meanwhile. The
    # waiting call must not hold the batch (and the run's error) for its 3 s, nor retry after it.
    def limited(body):
        return body["messages"][0]["content"] == "limited"

    def reply(body, k):
        if limited(body):
            return (429, {"error": {"message": "Rate limit reached"}})
        time.sleep(0.2)  # refused after the other call started waiting
        return KEY_401

    fake = endpoint(reply, headers=lambda body, k: {"retry-after": "3"} if limited(body) else {})
    pool = _pool(fake.url, max_concurrency=2, max_retries=1)
    start = time.monotonic()
    with pytest.raises(BackboneError, match="HTTP 401"):
        pool.complete("remote", [_ask("limited"), _ask("key")])
    assert time.monotonic() - start < 2.5 and fake.hits == 2


@pytest.mark.parametrize(
    "status, hint",
    [
        (401, r"check backbone 'remote': the key in \$TEST_FAULT_KEY \(api_key_env\)"),
        (404, "check backbone 'remote': base_url .* and model 'm'"),
    ],
)
def test_a_401_or_404_names_the_setting_to_check(endpoint, monkeypatch, status, hint):
    monkeypatch.setenv("TEST_FAULT_KEY", "sk-wrong")
    fake = endpoint(lambda body, k: (status, {"error": {"message": "no", "type": "invalid_request_error"}}))
    with pytest.raises(BackboneError, match=f"HTTP {status} .* -- {hint}"):
        _pool(fake.url, api_key_env="TEST_FAULT_KEY").complete("remote", [_ask("a")])


# ------------------------------------------------------------------------ a request the server refuses


@pytest.mark.parametrize("refusal", [CONTEXT_400, AZURE_FILTER_400], ids=["context_length", "azure_content_filter"])
def test_a_refused_request_costs_its_problem_not_the_run(endpoint, refusal):
    # After the endpoint has answered, a run of refused requests (one workflow whose prompts are too
    # long, or trip the filter, on every problem) is the requests' fault: each fails alone.
    fake = endpoint(lambda body, k: OK if k == 0 else refusal)
    pool = _pool(fake.url, max_consecutive_failures=3)
    (first,) = pool.complete("remote", [_ask("short")])
    assert first.error is None
    outs = pool.complete("remote", [_ask(f"long {i}") for i in range(6)], workflow="long")
    assert all(c.error is not None and "HTTP 400" in c.error for c in outs)
    assert fake.hits == 7 and pool.ledger.calls() == 1  # refused requests are not billed
    # the endpoint still counts as down when calls fail for the endpoint's reasons
    fake.reply = lambda body, k: (503, {"error": {"message": "overloaded"}})
    with pytest.raises(BackboneError, match="3 calls in a row failed"):
        pool.complete("remote", [_ask(f"x {i}") for i in range(3)])


def test_a_backbone_that_refuses_every_request_from_the_start_still_stops(endpoint):
    # No answer yet: refusals in a row are a configuration error (every problem would fail), not bad luck.
    fake = endpoint(lambda body, k: CONTEXT_400)
    pool = _pool(fake.url, max_consecutive_failures=3, max_concurrency=1)
    with pytest.raises(BackboneError, match="3 calls in a row failed"):
        pool.complete("remote", [_ask(str(i)) for i in range(6)])
    assert fake.hits == 3


# ------------------------------------------------------------------------ evolve


def _evolve(tmp_path, url, name, **backbone):
    from lightning_agents.cli import cli_main

    spec = {"name": "remote", "model": "m", "kind": "openai", "base_url": url, "max_retries": 0}
    spec.update(input_price=1.0, output_price=3.0, **backbone)
    search = {"eval_problems": 4, "population_size": 3, "offspring": 2, "max_nodes": 2, "rater": "none"}
    config = {
        "backbones": [spec],
        "task": "embedded:arithmetic/val",
        "task_size": 6,
        "generations": 1,
        "search": {**search, "heldout_problems": 0, "workers": 1},
        "output": str(tmp_path / name),
        "progress": False,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    cli_main(["evolve", "--config", str(path)])
    return json.loads((tmp_path / name / "summary.json").read_text())


def test_evolve_runs_on_when_one_workflow_overflows_the_context(endpoint, tmp_path):
    # Prompts with a system message (every step but a plain `generate`) are too long for this
    # endpoint: those workflows fail on every problem and lose, the search goes on.
    def reply(body, k):
        return CONTEXT_400 if body["messages"][0]["role"] == "system" else OK

    fake = endpoint(reply)
    summary = _evolve(tmp_path, fake.url, "run", max_consecutive_failures=3)
    assert summary["failed_calls"] >= 3  # more refusals in a row than the limit
    # the best is a workflow the endpoint answers (its "10" is right on one problem); failed ones scored 0
    assert summary["best"]["accuracy"] > 0 and summary["generations"] == 1
    assert fake.hits > summary["failed_calls"]


# ------------------------------------------------------------------------ empty answers


def _reply(message, finish="stop", completion_tokens=9):
    usage = {"prompt_tokens": 21, "completion_tokens": completion_tokens}
    return (200, {"choices": [{"message": {"role": "assistant", **message}, "finish_reason": finish}], "usage": usage})


@pytest.mark.parametrize(
    "message, finish, warning",
    [
        (
            {"content": "", "reasoning_content": "Let me think. 8 plus"},
            "length",
            "spent all 48 completion tokens reasoning",
        ),
        ({"content": None, "reasoning": "Let me think. 8 plus"}, "length", "spent all 48 completion tokens reasoning"),
        ({"content": None, "refusal": "I can't help with that."}, "stop", "the model refused: \"I can't help"),
    ],
    ids=["reasoning_content", "openrouter_reasoning", "refusal"],
)
def test_an_empty_answer_is_billed_scores_nothing_and_says_why_once(endpoint, caplog, message, finish, warning):
    fake = endpoint(lambda body, k: _reply(message, finish, completion_tokens=48))
    pool = _pool(fake.url)
    with caplog.at_level("WARNING", logger="lightning_agents.hflow.backbones"):
        outs = pool.complete("remote", [_ask("a")]) + pool.complete("remote", [_ask("b")])
    assert [(c.text, c.error, c.output_tokens) for c in outs] == [("", None, 48)] * 2
    assert pool.ledger.calls() == 2
    warned = [r.getMessage() for r in caplog.records if "empty answer" in r.getMessage()]
    assert len(warned) == 1 and re.search(warning, warned[0]), warned


def test_an_answer_after_the_reasoning_is_read_and_not_warned_about(endpoint, caplog):
    # reasoning tokens are inside completion_tokens (priced once, as output); the answer is the content
    usage = {"prompt_tokens": 21, "completion_tokens": 49, "completion_tokens_details": {"reasoning_tokens": 40}}
    message = {"role": "assistant", "content": "The answer is 10.", "reasoning_content": "8 plus 2."}
    fake = endpoint(lambda body, k: (200, {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}))
    pool = _pool(fake.url)
    with caplog.at_level("WARNING", logger="lightning_agents.hflow.backbones"):
        (c,) = pool.complete("remote", [_ask("a")])
    assert c.text == "The answer is 10." and c.output_tokens == 49 and not caplog.records
    assert pool.ledger.total_cost() == pytest.approx((21 * 1.0 + 49 * 3.0) / 1e6)
