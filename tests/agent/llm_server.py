"""A real OpenAI-compatible chat-completions server on loopback, scripted per test.

``ScriptedLLMServer`` answers ``POST /v1/chat/completions`` the way vLLM / Ollama / llama.cpp / OpenAI do,
records every request body, and can misbehave on purpose: ``mode="slow"`` sleeps ``delay_s`` first,
``"500"`` answers HTTP 500, ``"garbage"`` answers a body that is not JSON, ``"no_choices"`` a JSON body
without ``choices``. ``reply`` maps the request's messages to the assistant text (default: the offline
``deterministic_reply`` of the stage prompts).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from ragspine.agent.prompts import deterministic_reply


def default_reply(messages: list[dict[str, str]]) -> str:
    prompt = messages[-1]["content"]
    return deterministic_reply(prompt) or "ok"


class ScriptedLLMServer:
    def __init__(
        self,
        reply: Callable[[list[dict[str, str]]], str] = default_reply,
        *,
        mode: str = "ok",
        delay_s: float = 0.0,
    ) -> None:
        self.reply = reply
        self.mode = mode
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                payload = json.loads(body)
                with server._lock:
                    server.requests.append(payload)
                    server.headers.append(dict(self.headers))
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                if server.mode == "slow":
                    time.sleep(server.delay_s)
                if server.mode == "500":
                    self._send(500, b'{"error": "model crashed"}')
                    return
                if server.mode == "400":
                    self._send(400, b'{"error": "bad request"}')
                    return
                if server.mode == "garbage":
                    self._send(200, b"<html>definitely not json</html>")
                    return
                if server.mode == "no_choices":
                    self._send(200, json.dumps({"object": "chat.completion"}).encode())
                    return
                text = server.reply(payload["messages"])
                answer = {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": payload.get("model", ""),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                }
                self._send(200, json.dumps(answer, ensure_ascii=False).encode())

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (deadline)
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def prompts(self) -> list[str]:
        """Every message content the server was sent, in order."""
        with self._lock:
            return [m["content"] for r in self.requests for m in r["messages"]]

    def __enter__(self) -> ScriptedLLMServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
