"""A fake OpenAI-compatible HTTP server on 127.0.0.1 for the provider and embedding clients."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

# A reply is (status, body bytes); a handler maps the decoded JSON request to one.
Reply = tuple[int, bytes]


@dataclass
class FakeOpenAIServer:
    """Serves ``handler(path, request_json)``; ``delay_s`` stalls every reply (for timeout tests)."""

    url: str = ""
    handler: Callable[[str, Any], Reply] = lambda path, body: (404, b"{}")
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def reply_json(self, payload: Any, status: int = 200) -> None:
        """Answer every request with ``payload`` as JSON."""
        self.handler = lambda path, body: (status, json.dumps(payload).encode())


@pytest.fixture()
def fake_openai() -> Iterator[FakeOpenAIServer]:
    state = FakeOpenAIServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else None
            state.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
            if state.delay_s:
                time.sleep(state.delay_s)
            status, payload = state.handler(self.path, body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout tests)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
