"""OpenTelemetry tracing of both services (opt-in): OTLP export, a span per RPC, context front → worker.

``RAGSPINE_OTLP_ENDPOINT`` (``Settings.otlp_endpoint``) turns it on: ``http://collector:4317`` (plaintext
gRPC) or ``https://...`` (TLS); ``RAGSPINE_OTLP_SAMPLE_RATIO`` (default 1.0) traces that share of
requests. Every RPC a server handles becomes a server span (:class:`TracingServerInterceptor`), every call
the front makes to the worker a client span (:class:`TracedChannel`; :class:`TracingClientInterceptor` does
the same for a channel wrapped by ``grpc.intercept_channel``) whose context travels in
the call's metadata as a W3C ``traceparent``, so a worker's spans join the front's trace; the library's
pipeline stages (``ragspine.tracing.stage_span``) nest inside. Spans carry ids, counts and timings —
never document text or queries. Health checks and reflection are not traced. Off (the default), no
interceptor is installed and nothing is recorded.

The tracer and the interceptors are our own and kept lean for the per-request budget
(``common.lean_trace``): one span per call started with a precomputed attribute mapping per method (the
status code is set again only when a call fails), the parent read from one metadata entry, ended spans
queued for a background batch exporter (export never runs on the request's thread).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import grpc

from ragspine.settings import Settings
from ragspine_services.common.handlers import INFRASTRUCTURE_PREFIXES, PerMethodInterceptor, rewrapped

_LOG = logging.getLogger("ragspine_services.tracing")
_lock = threading.Lock()
_configured: dict[str, Any] = {}

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# version-traceid-spanid-flags; a later version may append fields after another dash.
_TRACEPARENT_RE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_GRPC_STATUS_CODE = "rpc.grpc.status_code"


def configure_tracing(settings: Settings, service_name: str, *, exporter: Any = None) -> bool:
    """Install a tracer provider (``common.lean_trace``) exporting to ``settings.otlp_endpoint`` (or to
    ``exporter``, a callable taking a batch of ended spans, for tests); servers and worker channels
    created from now on get the tracing interceptors. Returns True when tracing is on.

    Call before the servers and the worker channel are created; once per process (later calls are no-ops).
    Raises ``ValueError`` naming the setting and the extra when the endpoint is set but unusable."""
    endpoint = settings.otlp_endpoint.strip()
    if not endpoint and exporter is None:
        return False
    with _lock:
        if _configured:
            return True
        try:
            from opentelemetry import trace

            from ragspine_services.common.lean_trace import LeanTracerProvider, OtlpGrpcSink

            if exporter is None:
                import opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc  # noqa: F401
        except ModuleNotFoundError as exc:
            raise ValueError(
                f"RAGSPINE_OTLP_ENDPOINT is set but tracing is not installed ({exc.name}): "
                "pip install 'ragspine[tracing]', or unset RAGSPINE_OTLP_ENDPOINT"
            ) from None
        if exporter is None:
            if not endpoint.startswith(("http://", "https://")):
                raise ValueError(
                    f"RAGSPINE_OTLP_ENDPOINT={endpoint!r} must start with http:// (plaintext gRPC) "
                    "or https:// (TLS)"
                )
            exporter = OtlpGrpcSink(endpoint, service_name)
        ratio = settings.otlp_sample_ratio
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"RAGSPINE_OTLP_SAMPLE_RATIO={ratio} must be between 0 and 1")
        # A worker follows the front's decision (parent-based): a sampled request is traced end to end.
        provider = LeanTracerProvider(exporter, ratio=ratio)
        trace.set_tracer_provider(provider)
        _configured.update(
            provider=provider,
            sink=exporter,
            service=service_name,
            tracer=provider.get_tracer("ragspine_services"),
        )
        target = endpoint or "in-process exporter"
        _LOG.info("tracing on", extra={"endpoint": target, "service": service_name})
        return True


def tracing_enabled() -> bool:
    return bool(_configured)


def server_interceptors() -> list[grpc.ServerInterceptor]:
    """``[TracingServerInterceptor]`` when tracing is configured, else ``[]`` (nothing on the call path)."""
    tracer = _configured.get("tracer")
    return [TracingServerInterceptor(tracer)] if tracer is not None else []


def traced_channel(channel: grpc.Channel) -> grpc.Channel:
    """``channel`` with a client span per unary call (:class:`TracedChannel`) when tracing is configured,
    else ``channel`` itself."""
    tracer = _configured.get("tracer")
    if tracer is None:
        return channel
    return TracedChannel(channel, tracer)


def shutdown_tracing() -> None:
    """Flush and stop the exporter (called on shutdown so the last spans are not lost)."""
    with _lock:
        provider = _configured.get("provider")
        sink = _configured.get("sink")
    if provider is not None:
        provider.shutdown()
    close = getattr(sink, "close", None)
    if close is not None:
        close()


# ---------------------------------------------------------------------------------------- propagation
def format_traceparent(span_context: Any) -> str:
    """The W3C ``traceparent`` value of an OpenTelemetry ``SpanContext``."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


_OTEL: Any = None


def _otel() -> Any:
    """The OpenTelemetry API pieces ``parent_context`` uses, imported once (the API package is optional:
    nothing here imports it until tracing runs)."""
    global _OTEL
    if _OTEL is None:
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

        _OTEL = (
            trace.set_span_in_context,
            NonRecordingSpan,
            SpanContext,
            (TraceFlags(TraceFlags.DEFAULT), TraceFlags(TraceFlags.SAMPLED)),
            TraceState.from_header,
        )
    return _OTEL


def parent_context(metadata: Sequence[tuple[str, Any]]) -> Any:
    """The OpenTelemetry context whose current span is the remote parent named by a ``traceparent``
    entry of ``metadata``, or None (no entry, or a malformed / invalid one: the call starts a new trace)."""
    header = state = None
    for key, value in metadata:
        if key == TRACEPARENT:
            header = value
        elif key == TRACESTATE:
            state = value
    if not isinstance(header, str):
        return None
    match = _TRACEPARENT_RE.fullmatch(header.strip().lower())
    if match is None:
        return None
    version, trace_hex, span_hex, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    in_context, NonRecordingSpan, SpanContext, trace_flags, trace_state = _otel()
    span_context = SpanContext(
        trace_id,
        span_id,
        True,  # is_remote
        trace_flags[int(flags, 16) & 1],
        trace_state([state]) if isinstance(state, str) else None,
    )
    return in_context(NonRecordingSpan(span_context))


def _rpc_attributes(method: str, code: int = 0) -> dict[str, Any]:
    service, _, name = method.lstrip("/").rpartition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name, _GRPC_STATUS_CODE: code}


def _span_name(method: str) -> str:
    return method.lstrip("/")  # semantic conventions: "package.Service/Method"


def _end_failed(span: Any, code: grpc.StatusCode | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    if code is not None:
        span.set_attribute(_GRPC_STATUS_CODE, code.value[0])
    span.set_status(Status(StatusCode.ERROR, code.name if code is not None else "exception"))


# ---------------------------------------------------------------------------------------- server side
class TracingServerInterceptor(PerMethodInterceptor):
    """A SERVER span around every unary-response RPC, child of the caller's ``traceparent`` if any.

    The wrapped handler is built once per method (the handler below it is the same object for every call
    of a method) and the span's attributes are computed once per method."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        super().__init__()
        self._tracer = tracer
        self._attach, self._detach = otel_context.attach, otel_context.detach
        self._in_context = trace.set_span_in_context
        self._kind = SpanKind.SERVER

    def _wrapped(self, handler: Any, method: str) -> Any:
        wrapped = rewrapped(handler, lambda behavior, _stream: self._wrap(behavior, method))
        return handler if wrapped is None else wrapped

    def _wrap(self, behavior: Callable[[Any, Any], Any], method: str) -> Callable[[Any, Any], Any]:
        start_span, attach, detach, in_context = (
            self._tracer.start_span,
            self._attach,
            self._detach,
            (self._in_context),
        )
        name, kind, attributes = _span_name(method), self._kind, _rpc_attributes(method)

        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            span = start_span(
                name, context=parent_context(context.invocation_metadata()), kind=kind, attributes=attributes
            )
            token = attach(in_context(span))
            try:
                return behavior(request, context)
            except BaseException:
                code = context.code() if hasattr(context, "code") else None
                _end_failed(span, code if isinstance(code, grpc.StatusCode) else None)
                raise
            finally:
                detach(token)
                span.end()

        return handle


# ---------------------------------------------------------------------------------------- client side
class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Sequence[tuple[str, str | bytes]] | None
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class _ClientCallDetails(_CallDetails, grpc.ClientCallDetails):
    pass


class TracingClientInterceptor(grpc.UnaryUnaryClientInterceptor):
    """A CLIENT span around every unary call (blocking or future), its context sent as ``traceparent``."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace import SpanKind

        self._tracer = tracer
        self._kind = SpanKind.CLIENT
        self._attributes: dict[str, dict[str, Any]] = {}

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        method = details.method if isinstance(details.method, str) else details.method.decode()
        if method.startswith(INFRASTRUCTURE_PREFIXES):
            return continuation(details, request)
        attributes = self._attributes.get(method)
        if attributes is None:
            attributes = self._attributes[method] = _rpc_attributes(method)
        span = self._tracer.start_span(_span_name(method), kind=self._kind, attributes=attributes)
        span_context = span.get_span_context()
        metadata = list(details.metadata or ())
        metadata.append((TRACEPARENT, format_traceparent(span_context)))
        if span_context.trace_state:
            metadata.append((TRACESTATE, span_context.trace_state.to_header()))
        details = _ClientCallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )
        if not span.is_recording():
            # Not sampled: only the context travels (so the callee follows the decision); no span to end.
            return continuation(details, request)
        return _ended_when_done(span, lambda: continuation(details, request))


class TracedChannel(grpc.Channel):
    """``channel`` whose unary-unary calls (blocking, ``with_call`` or ``future``) each get a CLIENT span,
    its context sent as ``traceparent``: what :class:`TracingClientInterceptor` does through
    ``grpc.intercept_channel``, without gRPC's per-call interceptor machinery (call details, continuation
    and outcome objects: a no-op interceptor alone added 14 µs of the caller's CPU per call in one
    measurement, several times a span's cost). The span's name and
    attributes are fixed when the method's callable is made; other kinds of calls pass through."""

    def __init__(self, channel: grpc.Channel, tracer: Any) -> None:
        from opentelemetry.trace import SpanKind

        self._channel = channel
        self._tracer = tracer
        self._kind = SpanKind.CLIENT

    def context_metadata(self, span_context: Any) -> tuple[tuple[str, str], ...]:
        """The metadata entries that carry ``span_context`` to the callee."""
        parent = (TRACEPARENT, format_traceparent(span_context))
        if span_context.trace_state:
            return parent, (TRACESTATE, span_context.trace_state.to_header())
        return (parent,)

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        inner = self._channel.unary_unary(method, *args, **kwargs)
        name = method if isinstance(method, str) else bytes(method).decode()
        if name.startswith(INFRASTRUCTURE_PREFIXES):
            return inner
        return _TracedUnaryUnary(inner, self, _span_name(name), _rpc_attributes(name))

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.unary_stream(method, *args, **kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.stream_unary(method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.stream_stream(method, *args, **kwargs)

    def subscribe(self, callback: Callable[..., Any], try_to_connect: bool = False) -> None:
        self._channel.subscribe(callback, try_to_connect=try_to_connect)

    def unsubscribe(self, callback: Callable[..., Any]) -> None:
        self._channel.unsubscribe(callback)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> TracedChannel:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.close()


class _TracedUnaryUnary(grpc.UnaryUnaryMultiCallable):
    """One method's callable on a :class:`TracedChannel`."""

    def __init__(self, inner: Any, channel: TracedChannel, name: str, attributes: dict[str, Any]) -> None:
        self._inner = inner
        self._start_span = channel._tracer.start_span
        self._context_metadata = channel.context_metadata
        self._kind = channel._kind
        self._name = name
        self._attributes = attributes

    def _start(
        self,
        request: Any,
        timeout: float | None = None,
        metadata: Any = None,
        credentials: Any = None,
        wait_for_ready: bool | None = None,
        compression: Any = None,
    ) -> tuple[Any, tuple[Any, ...]]:
        """A new client span and the call's arguments (as gRPC's multi-callables take them), its context
        added to the metadata."""
        span = self._start_span(self._name, kind=self._kind, attributes=self._attributes)
        extra = self._context_metadata(span.get_span_context())
        metadata = tuple(metadata) + extra if metadata else extra
        return span, (request, timeout, metadata, credentials, wait_for_ready, compression)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._blocking(self._inner, *args, **kwargs)

    def with_call(self, *args: Any, **kwargs: Any) -> Any:
        return self._blocking(self._inner.with_call, *args, **kwargs)

    def _blocking(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call`` (the blocking call or ``with_call``) inside the client span, which ends with it."""
        span, arguments = self._start(*args, **kwargs)
        if not span.is_recording():
            return call(*arguments)
        try:
            return call(*arguments)
        except BaseException as exc:
            _end_failed(span, _code_of(exc))
            raise
        finally:
            span.end()

    def future(self, *args: Any, **kwargs: Any) -> Any:
        span, arguments = self._start(*args, **kwargs)
        if not span.is_recording():
            return self._inner.future(*arguments)
        return _ended_when_done(span, lambda: self._inner.future(*arguments))


def _ended_when_done(span: Any, start: Callable[[], Any]) -> Any:
    """``start()`` (a call that completes later: a gRPC future), with ``span`` ended when the call ends and
    marked failed when it ends with another status than OK (or when starting it raises)."""
    try:
        call = start()
    except BaseException:
        _end_failed(span, None)
        span.end()
        raise

    def done(future: Any) -> None:
        code = future.code()
        if code is not grpc.StatusCode.OK:
            _end_failed(span, code)
        span.end()

    call.add_done_callback(done)
    return call


def _code_of(exc: BaseException) -> grpc.StatusCode | None:
    """The status code of a failed call's ``RpcError`` (None for any other exception)."""
    code = getattr(exc, "code", None)
    if isinstance(exc, grpc.RpcError) and callable(code):
        value = code()
        return value if isinstance(value, grpc.StatusCode) else None
    return None
