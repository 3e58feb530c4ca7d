"""A real gRPC proxy that records every request's bytes on their way to an upstream server.

It forwards any unary-unary method (the model worker's RPCs are all unary) without knowing the
protobuf types: requests and responses travel as raw bytes, metadata (the service token) is passed on.
Tests put it between the front and the worker to see exactly what crosses the wire.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc


@dataclass
class Recorded:
    """What the proxy saw: (method, request bytes) per call, in arrival order."""

    calls: list[tuple[str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, payload: bytes) -> None:
        with self.lock:
            self.calls.append((method, payload))

    def methods(self) -> list[str]:
        with self.lock:
            return [m for m, _ in self.calls]

    def carried(self, phrase: str) -> list[str]:
        """The methods whose request bytes contain ``phrase`` (UTF-8)."""
        needle = phrase.encode("utf-8")
        with self.lock:
            return [m for m, payload in self.calls if needle in payload]


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, upstream: grpc.Channel, recorded: Recorded) -> None:
        self._upstream = upstream
        self._recorded = recorded

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if method in _SERVER_STREAMING:
            return grpc.unary_stream_rpc_method_handler(self._stream(method))
        forward = self._upstream.unary_unary(method)  # bytes in, bytes out

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._recorded.add(method, request)
            try:
                return forward(request, metadata=_metadata(context), timeout=_timeout(context))  # type: ignore[no-any-return]
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or "")
                raise  # unreachable: abort raises

        return grpc.unary_unary_rpc_method_handler(handle)

    def _stream(self, method: str) -> Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]:
        forward = self._upstream.unary_stream(method)

        def handle(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self._recorded.add(method, request)
            call = forward(request, metadata=_metadata(context), timeout=_timeout(context))
            context.add_callback(call.cancel)
            try:
                yield from call
            except grpc.RpcError as exc:
                if exc.code() is not grpc.StatusCode.CANCELLED:
                    context.abort(exc.code(), exc.details() or "")

        return handle


# The one server-streaming method a worker channel calls: client-side health checking.
_SERVER_STREAMING = frozenset({"/grpc.health.v1.Health/Watch"})


def _metadata(context: grpc.ServicerContext) -> list[tuple[str, str | bytes]]:
    return [(k, v) for k, v in context.invocation_metadata() if k not in ("user-agent",)]


def _timeout(context: grpc.ServicerContext) -> float | None:
    left = context.time_remaining()
    return None if left is None or left > 1e6 else left


@contextmanager
def spy_proxy(upstream_address: str) -> Iterator[tuple[str, Recorded]]:
    """Start a recording proxy to ``upstream_address``; yields (its address, what it recorded)."""
    recorded = Recorded()
    channel = grpc.insecure_channel(upstream_address)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((_Forward(channel, recorded),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", recorded
    finally:
        server.stop(0)
        channel.close()
