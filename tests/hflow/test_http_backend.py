"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 serving the tiny model."""

from __future__ import annotations

import threading
import time

import pytest
from fake_http import JSONHandler, serve

from lightning_agents.hflow import (
    ArithmeticTask,
    BackboneError,
    BackbonePool,
    ConfigError,
    Node,
    OpenAIBackbone,
    Request,
    Workflow,
    WorkflowExecutor,
)

# Status-200 answers that hold no chat completion, as real endpoints send them: a proxy's error page,
# a router's error body when the upstream provider failed, a body cut short.
_NOT_COMPLETIONS = {
    "html": b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    "error_body": b'{"error": {"message": "Provider returned error", "code": 502}}',
    "cut": b'{"choices": [{"message": {"role": "assistant", "content": "The answer',
}


class _Server:
    """A few lines of stdlib HTTP: /v1/chat/completions answered by the embedded student."""

    def __init__(self, engine):
        self.engine = engine
        self.lock = threading.Lock()
        self.mode = "ok"
        self.failures_left = 0
        self.hits = 0
        self.in_flight = 0
        self.max_in_flight = 0
        outer = self

        class Handler(JSONHandler):
            def do_POST(self):
                body = self.read_json()
                self.counted = True
                with outer.lock:
                    outer.hits += 1
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                    fail = outer.failures_left > 0
                    outer.failures_left -= 1 if fail else 0
                try:
                    if outer.mode == "slow":
                        time.sleep(1.0)
                    if outer.mode == "bad_request":
                        return self._send(400, {"error": {"message": "unknown model"}})
                    if fail or outer.mode == "error":
                        return self._send(500, {"error": {"message": "overloaded"}})
                    if outer.mode in _NOT_COMPLETIONS:
                        return self._send_raw(_NOT_COMPLETIONS[outer.mode])
                    if outer.mode == "concurrency":
                        time.sleep(0.2)
                    if self.path != "/v1/chat/completions":
                        return self._send(404, {"error": "not found"})
                    if self.headers.get("Authorization") != "Bearer sekret":
                        return self._send(401, {"error": "bad key"})
                    from lightning_agents.rollout.hf_engine import SamplingConfig

                    with outer.lock:
                        out = outer.engine.generate(
                            [body["messages"]],
                            sampling=SamplingConfig(max_new_tokens=body["max_tokens"], do_sample=False),
                        )
                    usage = {
                        "prompt_tokens": int(out.prompt_mask.sum()),
                        "completion_tokens": int(out.completion_mask.sum()),
                    }
                    payload = {"choices": [{"message": {"role": "assistant", "content": out.texts[0]}}]}
                    if outer.mode != "no_usage":
                        payload["usage"] = usage
                    self._send(200, payload)
                finally:
                    self._leave()

            def _leave(self):
                # Leave before answering: once the client reads the answer it may send its next
                # request, which must not be counted alongside this finished one.
                with outer.lock:
                    if self.counted:
                        self.counted = False
                        outer.in_flight -= 1

            def _send(self, code, payload):
                self._leave()
                self.send_json(code, payload)

            def _send_raw(self, body):
                self._leave()
                self.send_response(200)
                self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd, self.url = serve(Handler)


@pytest.fixture(scope="module")
def server():
    from lightning_agents.models import load_model_and_tokenizer
    from lightning_agents.rollout.hf_engine import HFGenerationEngine

    s = _Server(HFGenerationEngine(*load_model_and_tokenizer("embedded:student")))
    yield s
    s.httpd.shutdown()


@pytest.fixture(autouse=True)
def _reset(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sekret")
    deadline = time.monotonic() + 3
    while server.in_flight and time.monotonic() < deadline:  # requests a timed-out client left behind
        time.sleep(0.05)
    server.mode, server.failures_left, server.hits, server.max_in_flight = "ok", 0, 0, 0


def _backbone(server, **kw):
    args = dict(
        input_price=1.0, output_price=3.0, api_key_env="TEST_LLM_KEY", timeout_s=5.0, max_retries=2, backoff_s=0.05
    )
    args.update(kw)
    return OpenAIBackbone("remote", "tiny-student", server.url, **args)


def test_workflow_over_http_counts_tokens_and_cost(server):
    task = ArithmeticTask("val", n=6)
    pool = BackbonePool([_backbone(server)])
    traces = WorkflowExecutor(task, pool).run(Workflow([Node("p", "programmer", backbone="remote")]), task.problems)
    assert sum(t.score for t in traces) >= 5  # the served student writes programs that run
    total = pool.ledger.summary()["total"]
    assert total["calls"] == server.hits == 6
    assert total["input_tokens"] == sum(t.input_tokens for t in traces) > 0
    assert total["cost"] == pytest.approx((total["input_tokens"] * 1.0 + total["output_tokens"] * 3.0) / 1e6, rel=1e-12)


def test_retries_server_errors_with_backoff_then_succeeds(server):
    server.failures_left = 2
    b = _backbone(server, max_retries=2, backoff_s=0.1)
    start = time.monotonic()
    (c,) = b.complete(
        [Request([{"role": "user", "content": "Ava has 8 shells and gets 2 more. How many shells does Ava have now?"}])]
    )
    assert "10" in c.text and b.attempts == 3 and server.hits == 3
    assert time.monotonic() - start >= 0.1 + 0.2  # exponential: 0.1 then 0.2 seconds


def test_persistent_errors_fail_the_call_after_the_retries(server):
    server.mode = "error"
    b = _backbone(server, max_retries=2)
    (c,) = b.complete([Request([{"role": "user", "content": "hi"}])])
    assert c.error is not None and "HTTP 500" in c.error and "gave up after 3 attempts" in c.error
    assert server.hits == 3 and c.input_tokens == c.output_tokens == 0


@pytest.mark.parametrize("mode", list(_NOT_COMPLETIONS))
def test_a_status_200_without_a_completion_is_retried_then_costs_the_call_not_the_run(server, mode):
    server.mode = mode
    b = _backbone(server, max_retries=1)
    (c,) = b.complete([Request([{"role": "user", "content": "hi"}])])
    assert c.error is not None and "gave up after 2 attempts" in c.error and server.hits == 2
    assert ("Provider returned error" in c.error) == (mode == "error_body")
    server.mode = "ok"  # a transient fault: the next call goes through
    (c,) = b.complete([Request([{"role": "user", "content": "Ava has 8 shells and gets 2 more. How many?"}])])
    assert c.error is None and c.output_tokens > 0


def test_client_errors_are_not_retried(server):
    server.mode = "bad_request"
    b = _backbone(server, max_retries=3)
    (c,) = b.complete([Request([{"role": "user", "content": "hi"}])])
    assert "HTTP 400" in c.error and server.hits == 1


def test_wrong_key_stops_the_run(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "wrong")
    with pytest.raises(BackboneError, match="HTTP 401"):
        _backbone(server).complete([Request([{"role": "user", "content": "hi"}])])


def test_an_endpoint_that_is_down_stops_the_run(server):
    server.mode = "error"
    b = _backbone(server, max_retries=0, max_consecutive_failures=3)
    with pytest.raises(BackboneError, match="3 calls in a row"):
        for _ in range(3):
            b.complete([Request([{"role": "user", "content": "hi"}])])


def test_timeouts_are_retried_then_reported(server):
    server.mode = "slow"
    b = _backbone(server, timeout_s=0.2, max_retries=1, backoff_s=0.01)
    (c,) = b.complete([Request([{"role": "user", "content": "hi"}])])
    assert "timed out" in c.error and b.attempts == 2


def test_missing_usage_is_an_error_not_a_free_call(server):
    server.mode = "no_usage"
    with pytest.raises(BackboneError, match="no token usage"):
        _backbone(server).complete([Request([{"role": "user", "content": "hi"}])])


def test_concurrency_limit(server):
    server.mode = "concurrency"
    b = _backbone(server, max_concurrency=2)

    def batch(offset):
        b.complete(
            [
                Request([{"role": "user", "content": f"Ava has {i} shells and gets 2 more."}], max_tokens=4)
                for i in range(offset, offset + 3)
            ]
        )

    # Two callers at once: each one's thread pool alone would allow 2 + 2, the shared limit only 2.
    callers = [threading.Thread(target=batch, args=(k * 3,)) for k in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert server.hits == 6 and server.max_in_flight == 2


def test_missing_key_variable_is_a_configuration_error(server, monkeypatch):
    monkeypatch.delenv("TEST_LLM_KEY")
    with pytest.raises(ConfigError, match="TEST_LLM_KEY"):
        _backbone(server)
