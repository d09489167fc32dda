"""A fake ``vllm serve`` on 127.0.0.1 that answers in the exact shapes vLLM's OpenAI server uses,
faults included, for the server engine's tests.

Reply shapes follow vLLM's ``vllm/entrypoints/openai/completion/serving.py`` (commit 030ea52,
Apache-2.0): a choice per sample with ``index``, ``text``, ``finish_reason`` (``stop``, ``length``,
``abort``), ``stop_reason`` (``None`` at the EOS, the id of a ``stop_token_ids`` hit),
``prompt_logprobs``/``token_ids``/``prompt_token_ids`` (``None`` unless asked for), and ``logprobs``
with ``tokens`` spelled ``token_id:N`` (``return_tokens_as_token_ids``), ``token_logprobs``
clamped at -9999.0, ``top_logprobs`` (one dict a step for ``logprobs=0``) and ``text_offset``;
``usage`` counts the prompt once and every sample's tokens. Errors are vLLM's
``{"error": {"message", "type", "param", "code"}}`` bodies. ``GET /v1/models`` lists the model with
its ``max_model_len`` (vLLM's ``ModelCard``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from fake_http import JSONHandler, serve


def sample(tokens, logprobs=None, finish="stop", stop_reason=None, index=None) -> dict:
    """One sample the fake server returns: token ids, their log-probs (``None`` for -0.1 each),
    finish reason and vLLM's ``stop_reason``."""
    return {
        "tokens": list(tokens),
        "logprobs": [-0.1] * len(tokens) if logprobs is None else list(logprobs),
        "finish": finish,
        "stop_reason": stop_reason,
        "index": index,
    }


def completion_body(samples: list[dict], prompt_len: int, model: str = "policy") -> dict:
    """vLLM's non-streaming completions reply for ``samples`` of one prompt."""
    choices = []
    for i, s in enumerate(samples):
        lps = [max(v, -9999.0) if v is not None else None for v in s["logprobs"]]
        spelled = [f"token_id:{t}" for t in s["tokens"]]
        choices.append(
            {
                "index": i if s["index"] is None else s["index"],
                "text": "".join(f"<{t}>" for t in s["tokens"]),
                "logprobs": {
                    "text_offset": [4 * k for k in range(len(spelled))],
                    "token_logprobs": lps,
                    "tokens": spelled,
                    "top_logprobs": [{tok: lp} if lp is not None else None for tok, lp in zip(spelled, lps)],
                },
                "finish_reason": s["finish"],
                "stop_reason": s["stop_reason"],
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        )
    generated = sum(len(s["tokens"]) for s in samples)
    return {
        "id": "cmpl-0",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_len,
            "total_tokens": prompt_len + generated,
            "completion_tokens": generated,
            "prompt_tokens_details": None,
        },
        "system_fingerprint": None,
        "kv_transfer_params": None,
    }


def error_body(message: str, code: int = 400, kind: str = "BadRequestError") -> dict:
    """vLLM's error reply body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class FakeVLLMServer:
    """``reply(body, k)`` answers the k-th completions request (``body`` its JSON) with one of:
    a list of :func:`sample` dicts (a 200 reply), ``("status", code, payload[, headers])``,
    ``("sleep", seconds, then)`` (answer ``then`` after a delay), ``("drop",)`` (send half the
    reply, then close the connection) or ``("close",)`` (close without a reply). Requests are
    recorded as ``(path, body)``; a weight reload (``/collective_rpc``) takes ``reload_s`` seconds."""

    def __init__(
        self,
        reply: Callable[[Any, int], Any],
        max_model_len: int | None = 4096,
        root: str = "/v1",
        reload_s: float = 0.0,
    ):
        self.reply = reply
        self.reload_s = reload_s
        self.requests: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(JSONHandler):
            def do_GET(self):
                if self.path != f"{root}/models":
                    self.send_json(404, {"detail": "Not Found"})
                    return
                card = {"id": "policy", "object": "model", "created": 0, "owned_by": "vllm", "root": "policy"}
                if max_model_len is not None:
                    card["max_model_len"] = max_model_len
                self.send_json(200, {"object": "list", "data": [card]})

            def do_POST(self):
                body = self.read_json()
                with outer.lock:
                    outer.requests.append((self.path, body))
                    k = sum(1 for p, _ in outer.requests if p.endswith("/completions")) - 1
                if self.path == f"{root}/completions":
                    self.answer(outer.reply(body, k), body)
                elif self.path in ("/collective_rpc", "/reset_prefix_cache"):
                    if self.path == "/collective_rpc":
                        time.sleep(outer.reload_s)
                    self.send_json(200, {"results": [None]} if self.path == "/collective_rpc" else {})
                else:
                    self.send_json(404, {"detail": "Not Found"})

            def answer(self, action, body):
                if isinstance(action, list):
                    self.send_json(200, completion_body(action, len(body["prompt"])))
                elif action[0] == "status":
                    self.send_json(action[1], action[2], action[3] if len(action) > 3 else None)
                elif action[0] == "sleep":
                    time.sleep(action[1])
                    self.answer(action[2], body)
                elif action[0] == "drop":
                    data = json.dumps(completion_body([sample([1, 2, 3])], len(body["prompt"]))).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif action[0] == "close":
                    self.close_connection = True
                    self.connection.shutdown(2)

        self.httpd, self.url = serve(Handler)
        if root != "/v1":
            self.url = self.url.removesuffix("/v1") + root

    @property
    def completions(self) -> list[Any]:
        """Bodies of the completions requests, in arrival order."""
        return [b for p, b in self.requests if p.endswith("/completions")]

    def close(self) -> None:
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()


def slow_counter(tok, seconds):
    """A reply that takes ``seconds`` and counts the requests in flight (``state["peak"]``); with
    ``state["fail_first"]`` set, the first request is refused with a 400."""
    state = {"inflight": 0, "peak": 0}
    lock = threading.Lock()

    def reply(body, k):
        if k == 0 and state.get("fail_first"):
            time.sleep(0.1)
            return ("status", 400, error_body("temperature must be in [0, 2], got 3.0."))
        with lock:
            state["inflight"] += 1
            state["peak"] = max(state["peak"], state["inflight"])
        time.sleep(seconds)
        with lock:
            state["inflight"] -= 1
        return [sample([5, tok.eos_token_id])]

    return reply, state
