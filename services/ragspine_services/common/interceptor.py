"""One server interceptor for both services: authenticate, map errors to status codes, time, log.

Servicers stay thin: they raise ``ValueError`` or a domain error from ``errors.py`` and this layer turns it
into the status from the one table there. The deserializer is wrapped (:func:`tolerant_deserializer`) so
that a request reaches the handler as its raw bytes (:class:`RawRequest`) and is parsed only after the
caller is authenticated: a caller without a valid token never costs a parse of a 30 MB message. A request
whose bytes do not parse as its message type is answered INVALID_ARGUMENT, not gRPC's default INTERNAL.
Callers without a token in open mode (``ANONYMOUS``) may run only ``large_calls_per_caller`` large
requests (over ``memory.LARGE_MESSAGE_BYTES``) at once per client address; more are RESOURCE_EXHAUSTED
before they are parsed. Every large message marks the heap for trimming (``memory.HeapTrimmer``). Health
checks and reflection skip authentication so that probes and tooling work without a token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from ragspine_services.common import metrics
from ragspine_services.common.auth import ANONYMOUS, Authenticator, reset_current_caller, set_current_caller
from ragspine_services.common.errors import OverloadedError, status_for
from ragspine_services.common.handlers import PerMethodInterceptor, rewrapped
from ragspine_services.common.memory import LARGE_MESSAGE_BYTES, HeapTrimmer, heap_trimmer

_LOG = logging.getLogger("ragspine_services.rpc")
DEFAULT_LARGE_CALLS_PER_CALLER = 2


class RawRequest:
    """A request message's bytes, parsed on demand (see :func:`tolerant_deserializer`)."""

    __slots__ = ("data", "deserialize")

    def __init__(self, data: bytes, deserialize: Callable[[bytes], Any]) -> None:
        self.data = data
        self.deserialize = deserialize

    @property
    def size(self) -> int:
        return len(self.data)

    def parse(self, what: str) -> Any:
        """The message; ``ValueError`` (INVALID_ARGUMENT) naming ``what`` when the bytes do not parse."""
        try:
            return self.deserialize(self.data)
        except Exception as exc:
            raise ValueError(
                f"{what} is not a valid protobuf message of this method's request type ({type(exc).__name__})"
            ) from None


def tolerant_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """A deserializer that parses nothing: it hands the handler a :class:`RawRequest`, which the
    interceptor parses once the caller is known (never raising inside gRPC, which would be INTERNAL)."""
    if deserialize is None:
        return None

    def hold(data: bytes) -> RawRequest:
        return RawRequest(data, deserialize)

    return hold


def _parsed(request: Any, what: str) -> Any:
    return request.parse(what) if isinstance(request, RawRequest) else request


def _checked_stream(requests: Iterator[Any], trimmer: HeapTrimmer) -> Iterator[Any]:
    for i, request in enumerate(requests):
        if isinstance(request, RawRequest):
            trimmer.note(request.size)
        yield _parsed(request, f"stream message {i}")


class LargeCallLimiter:
    """At most ``per_caller`` large requests at once per anonymous caller (keyed by client address)."""

    def __init__(self, per_caller: int, *, threshold_bytes: int = LARGE_MESSAGE_BYTES) -> None:
        if isinstance(per_caller, bool) or not isinstance(per_caller, int) or per_caller < 1:
            raise ValueError(f"large_calls_per_caller must be an integer >= 1, got {per_caller!r}")
        self.per_caller = per_caller
        self.threshold_bytes = threshold_bytes
        self._running: dict[str, int] = {}
        self._lock = threading.Lock()

    @staticmethod
    def address(peer: str) -> str:
        """The client host of a gRPC peer string (``ipv4:127.0.0.1:5555`` -> ``ipv4:127.0.0.1``)."""
        host, sep, port = peer.rpartition(":")
        return host if sep and port.isdigit() else peer

    def enter(self, key: str) -> None:
        with self._lock:
            running = self._running.get(key, 0)
            if running >= self.per_caller:
                raise OverloadedError(
                    f"{running} large requests (over {self.threshold_bytes // (1024 * 1024)} MiB) from this "
                    "client are already running; wait for one to finish or send smaller batches "
                    "(limit RAGSPINE_LARGE_CALLS_PER_CALLER, for callers without a token)"
                )
            self._running[key] = running + 1

    def leave(self, key: str) -> None:
        with self._lock:
            left = self._running.get(key, 1) - 1
            if left > 0:
                self._running[key] = left
            else:
                self._running.pop(key, None)


class ServiceInterceptor(PerMethodInterceptor):
    """Wraps every unary-response handler with auth, error mapping, latency metrics and a JSON log line."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        large_calls_per_caller: int = DEFAULT_LARGE_CALLS_PER_CALLER,
        trimmer: HeapTrimmer | None = None,
    ) -> None:
        super().__init__()
        self._auth = authenticator
        self._large = LargeCallLimiter(large_calls_per_caller)
        self._trimmer = trimmer or heap_trimmer()

    def _variant(self) -> Any:
        # A handler is wrapped again when the deserializer wrapper is replaced (the fuzz tests' reverse
        # proof swaps it on a running server).
        return tolerant_deserializer

    def _wrapped(self, handler: Any, method: str) -> Any:
        service, _, name = method.lstrip("/").rpartition("/")
        wrapped = rewrapped(
            handler,
            lambda behavior, stream: self._wrap(behavior, service, name, stream=stream),
            deserializer=tolerant_deserializer,
        )
        return handler if wrapped is None else wrapped  # response-streaming methods: none in ragspine.v1

    def _wrap(
        self, behavior: Callable[[Any, Any], Any], service: str, name: str, *, stream: bool = False
    ) -> Callable[[Any, Any], Any]:
        auth = self._auth
        large = self._large
        trimmer = self._trimmer
        latency: dict[grpc.StatusCode, Any] = {}  # this method's histogram child per status code

        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            token = None
            limited = ""  # the anonymous caller's key while a large request of it runs
            size = request.size if isinstance(request, RawRequest) else 0
            try:
                metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
                caller = auth.authenticate(metadata)  # before the request is parsed
                token = set_current_caller(caller)
                if stream:
                    request = _checked_stream(request, trimmer)
                else:
                    if size >= large.threshold_bytes and caller is ANONYMOUS:
                        key = large.address(context.peer())
                        large.enter(key)
                        limited = key
                    request = _parsed(request, "the request")
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
                if limited:
                    large.leave(limited)
                trimmer.note(size)
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
