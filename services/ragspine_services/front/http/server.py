"""Run the HTTP application next to the gRPC server, in the same process (uvicorn on its own thread)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

_LOG = logging.getLogger("ragspine_services.http")


@dataclass
class HttpServer:
    """A started HTTP server; ``port`` is the bound port (useful with port 0)."""

    port: int
    _server: Any
    _thread: threading.Thread

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, finish in-flight requests (up to ``timeout_s``), join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout_s)
        close = getattr(self._server.config.app, "close", None)
        if close is not None:
            close()


def start_http(
    app: Any, *, host: str, port: int, tls_cert_file: str = "", tls_key_file: str = ""
) -> HttpServer:
    """Serve ``app`` on ``host:port`` (0 = any free port) from a background thread; returns once bound.
    HTTPS when both TLS files are given (the gRPC server's certificate and key)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: a response's header and body writes must not wait for the
    # client's delayed ACK (Nagle), which costs ~40 ms per request otherwise.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind the HTTP port {host}:{port}: {exc.strerror}") from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        # No X-Forwarded-* rewriting of the client address (nothing here reads it; it parsed the peer
        # address on every request) and no ``server: uvicorn`` header.
        proxy_headers=False,
        server_header=False,
        lifespan="off",
        timeout_keep_alive=30,
        ssl_certfile=tls_cert_file or None,
        ssl_keyfile=tls_key_file or None,
    )
    server = uvicorn.Server(config)

    def run() -> None:
        # ``serve`` installs no signal handlers off the main thread: SIGTERM stays with the gRPC server,
        # whose shutdown stops this one.
        try:
            asyncio.run(server.serve(sockets=[sock]))
        finally:
            sock.close()

    thread = threading.Thread(target=run, name="ragspine-http", daemon=True)
    thread.start()
    give_up = time.monotonic() + 10.0
    while not server.started and thread.is_alive() and time.monotonic() < give_up:
        time.sleep(0.01)
    if not server.started:
        server.should_exit = True
        raise RuntimeError(f"the HTTP server on {host}:{bound} did not start (see the log)")
    _LOG.info("http serving", extra={"port": bound})
    return HttpServer(bound, server, thread)
