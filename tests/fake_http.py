"""A stdlib JSON-over-HTTP server on 127.0.0.1 for the fake endpoints the tests talk to.

The tests' fake OpenAI-compatible and vLLM servers differ only in what they answer; reading the
JSON body, writing a JSON reply and running the server in a thread live here. (``tests/`` is on
``sys.path`` through its rootdir ``conftest.py``; there are no test packages.)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet request handler with JSON in and out; subclasses write ``do_POST`` / ``do_GET``."""

    def log_message(self, *args: Any) -> None:
        pass

    def read_json(self) -> Any:
        """The request body as JSON (``None`` for an empty body)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")

    def send_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        """Answer ``payload`` as JSON with status ``code`` (and extra ``headers``); a client that
        already hung up is ignored."""
        self.send_body(code, json.dumps(payload).encode(), "application/json", headers)

    def send_body(
        self, code: int, data: bytes, content_type: str = "text/html", headers: dict[str, str] | None = None
    ) -> None:
        """Answer raw ``data`` (a proxy's HTML page, say) with status ``code`` and extra ``headers``."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:
            pass  # the client gave up (a timeout test): nothing to answer


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """Start ``handler`` on a free port of 127.0.0.1 in a daemon thread; returns the server and its
    ``http://127.0.0.1:<port>/v1`` base URL (``server.shutdown()`` stops it)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"


class ScriptedEndpoint:
    """A fake OpenAI-compatible endpoint: ``reply(body, k)`` gives request ``k``'s ``(status,
    payload)`` or ``(status, payload, headers)``; ``headers(body, k)`` adds headers to every reply;
    a ``bytes`` payload is sent raw as HTML (a proxy's error page). Request bodies and arrival times
    are recorded."""

    def __init__(self, reply: Callable[[Any, int], tuple], headers: Callable[[Any, int], dict] | None = None):
        self.reply = reply
        self.headers = headers or (lambda body, k: {})
        self.requests: list[tuple[Any, float]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(JSONHandler):
            def do_POST(self):
                body = self.read_json()
                with outer.lock:
                    k = len(outer.requests)
                    outer.requests.append((body, time.monotonic()))
                status, payload, *extra = outer.reply(body, k)
                headers = {**outer.headers(body, k), **(extra[0] if extra else {})}
                if isinstance(payload, bytes):
                    self.send_body(status, payload, "text/html", headers)
                else:
                    self.send_json(status, payload, headers)

        self.httpd, self.url = serve(Handler)

    @property
    def bodies(self) -> list[Any]:
        """The request bodies, in arrival order."""
        return [body for body, _ in self.requests]

    @property
    def hits(self) -> int:
        return len(self.requests)


@contextmanager
def scripted_endpoints() -> Iterator[Callable[..., ScriptedEndpoint]]:
    """A factory of :class:`ScriptedEndpoint` (for a fixture); every server started through it is
    shut down on exit, without waiting (``serve_forever`` polls every 0.5 s)."""
    servers: list[ScriptedEndpoint] = []

    def start(reply, headers=None) -> ScriptedEndpoint:
        servers.append(ScriptedEndpoint(reply, headers))
        return servers[-1]

    yield start
    for s in servers:
        threading.Thread(target=s.httpd.shutdown, daemon=True).start()
