"""What the server interceptors (auth and errors, tracing, admission, drain) do alike to a gRPC method
handler: pass the infrastructure methods by, give a unary-response handler a new behaviour with the same
(de)serializers, build a handler that refuses the call, and keep each method's wrapped handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

# Health checks and reflection: never authenticated, traced, admitted or drained (probes and tooling must
# work without a token and past any limit).
INFRASTRUCTURE_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")

Behavior = Callable[[Any, Any], Any]

_FACTORIES = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)


def _same(deserializer: Any) -> Any:
    return deserializer


def rewrapped(
    handler: Any,
    wrap: Callable[[Behavior, bool], Behavior],
    *,
    deserializer: Callable[[Any], Any] = _same,
) -> Any:
    """``handler`` with its behaviour replaced by ``wrap(behaviour, streamed)`` (``streamed``: the requests
    come as a stream) and its request deserializer by ``deserializer(request_deserializer)``; None for a
    response-streaming handler (ragspine.v1 has none), which the interceptors pass by unchanged."""
    for kind, factory in _FACTORIES[:2]:
        behavior = getattr(handler, kind)
        if behavior is not None:
            return factory(
                wrap(behavior, kind == "stream_unary"),
                request_deserializer=deserializer(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
    return None


def refusal(handler: Any, code: grpc.StatusCode, message: str, *, parse: bool = True) -> Any:
    """A handler of ``handler``'s kind that ends every call with ``code`` and ``message``; with
    ``parse=False`` the request's bytes are handed over unparsed and dropped."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    for kind, factory in _FACTORIES:
        if getattr(handler, kind) is not None:
            return factory(
                refuse,
                request_deserializer=handler.request_deserializer if parse else None,
                response_serializer=handler.response_serializer,
            )
    return None


class PerMethodInterceptor(grpc.ServerInterceptor):
    """A server interceptor that wraps each method's handler once (``_wrapped``), not per call, and again
    when the registered handler or ``_variant()`` changes; infrastructure methods pass by unwrapped."""

    def __init__(self) -> None:
        # method -> (the registered handler, the variant it was wrapped under, the wrapped handler)
        self._cache: dict[str, tuple[Any, Any, Any]] = {}

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = continuation(details)
        method: str = details.method
        if handler is None or method.startswith(INFRASTRUCTURE_PREFIXES):
            return handler
        variant = self._variant()
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler and cached[1] is variant:
            return cached[2]
        wrapped = self._wrapped(handler, method)
        self._cache[method] = (handler, variant, wrapped)
        return wrapped

    def _variant(self) -> Any:
        """Anything besides the handler that the wrapping depends on (compared by identity)."""
        return None

    def _wrapped(self, handler: Any, method: str) -> Any:
        raise NotImplementedError
