"""A stdlib JSON-over-HTTP server on 127.0.0.1 for the fake endpoints the tests talk to.

The tests' fake OpenAI-compatible and vLLM servers differ only in what they answer; reading the
JSON body, writing a JSON reply and running the server in a thread live here. (``tests/`` is on
``sys.path`` through its rootdir ``conftest.py``; there are no test packages.)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet request handler with JSON in and out; subclasses write ``do_POST`` / ``do_GET``."""

    def log_message(self, *args: Any) -> None:
        pass

    def read_json(self) -> Any:
        """The request body as JSON (``None`` for an empty body)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")

    def send_json(self, code: int, payload: Any) -> None:
        """Answer ``payload`` as JSON with status ``code``; a client that already hung up is ignored."""
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
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
