"""One server interceptor for both services: authenticate, map errors to status codes, time, log.

Servicers stay thin: they raise ``ValueError`` or a domain error from ``errors.py`` and this layer turns it
into the status from the one table there. A request whose bytes do not parse as its message type is
answered INVALID_ARGUMENT (after authentication), not gRPC's default INTERNAL: the deserializer is wrapped
so that a parse failure reaches the handler as a :class:`MalformedRequest` marker. Health checks and
reflection skip authentication so that probes and tooling work without a token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from ragspine_services.common import metrics
from ragspine_services.common.auth import Authenticator, reset_current_caller, set_current_caller
from ragspine_services.common.errors import status_for

_LOG = logging.getLogger("ragspine_services.rpc")
_UNAUTHENTICATED_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")


class MalformedRequest:
    """Stands in for a request message whose bytes did not parse (see :func:`tolerant_deserializer`)."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error

    def as_error(self, what: str) -> ValueError:
        return ValueError(
            f"{what} is not a valid protobuf message of this method's request type ({self.error})"
        )


def tolerant_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserialize`` that returns a :class:`MalformedRequest` instead of raising on bad bytes."""
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:
            return MalformedRequest(type(exc).__name__)

    return parse


def _checked_stream(requests: Iterator[Any]) -> Iterator[Any]:
    for i, request in enumerate(requests):
        if isinstance(request, MalformedRequest):
            raise request.as_error(f"stream message {i}")
        yield request


class ServiceInterceptor(grpc.ServerInterceptor):
    """Wraps every unary-response handler with auth, error mapping, latency metrics and a JSON log line."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._auth = authenticator
        # method -> (the registered handler, the deserializer wrapper used, its wrapped handler): built
        # once per method, not per call; built again if either is replaced (the fuzz tests' reverse proof
        # swaps the wrapper on a running server).
        self._cache: dict[str, tuple[Any, Any, Any]] = {}

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = continuation(details)
        method: str = details.method
        if handler is None or method.startswith(_UNAUTHENTICATED_PREFIXES):
            return handler
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler and cached[1] is tolerant_deserializer:
            return cached[2]
        wrapped = self._wrapped(handler, method)
        self._cache[method] = (handler, tolerant_deserializer, wrapped)
        return wrapped

    def _wrapped(self, handler: Any, method: str) -> Any:
        service, _, name = method.lstrip("/").rpartition("/")
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap(handler.unary_unary, service, name),
                request_deserializer=tolerant_deserializer(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap(handler.stream_unary, service, name, stream=True),
                request_deserializer=tolerant_deserializer(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler  # response-streaming methods: none in ragspine.v1 yet

    def _wrap(
        self, behavior: Callable[[Any, Any], Any], service: str, name: str, *, stream: bool = False
    ) -> Callable[[Any, Any], Any]:
        auth = self._auth
        latency: dict[grpc.StatusCode, Any] = {}  # this method's histogram child per status code

        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            token = None
            try:
                metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
                token = set_current_caller(auth.authenticate(metadata))
                if stream:
                    request = _checked_stream(request)
                elif isinstance(request, MalformedRequest):
                    raise request.as_error("the request")
                return behavior(request, context)
            except Exception as exc:
                already = context.code() if hasattr(context, "code") else None
                if already not in (None, grpc.StatusCode.OK):
                    code = already  # the servicer aborted with its own status
                    raise
                code, message = status_for(exc)
                if code is grpc.StatusCode.INTERNAL:
                    _LOG.exception("rpc failed", extra={"rpc": f"{service}/{name}"})
                else:
                    _LOG.info("rpc rejected", extra={"rpc": f"{service}/{name}", "code": code.name})
                context.abort(code, message)
            finally:
                if token is not None:
                    reset_current_caller(token)
                elapsed = time.perf_counter() - started
                child = latency.get(code)
                if child is None:
                    child = latency[code] = metrics.RPC_LATENCY.labels(service, name, code.name)
                child.observe(elapsed)
                if _LOG.isEnabledFor(logging.DEBUG):  # skip building the record on the hot path
                    _LOG.debug(
                        "rpc", extra={"rpc": f"{service}/{name}", "code": code.name, "ms": elapsed * 1e3}
                    )

        return handle
