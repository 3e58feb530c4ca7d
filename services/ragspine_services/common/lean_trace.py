"""A small OpenTelemetry tracer for the services: spans that cost a few microseconds, batched OTLP export.

It implements the ``opentelemetry-api`` interfaces (``TracerProvider``, ``Tracer``, ``Span``), so the
library's stage spans (``ragspine.tracing``) and the gRPC interceptors (``common.tracing``) use it through
the API like any SDK. What it keeps per span is what the services need: name, ids, parent, kind, start and
end time, the attribute mapping it was started with (shared, never copied; a later ``set_attribute``
copies it once), and a status. Sampling is parent-based over a trace-id ratio (a remote or local parent's
decision is followed; a root is sampled when the low 64 bits of its trace id fall under the ratio).

Ended spans go to a bounded queue; one background thread sends them in batches (at most every
``schedule_s`` seconds, sooner when a batch is full) as OTLP/gRPC ``ExportTraceServiceRequest`` messages,
so no export work runs on a request's thread. The request is written straight in protobuf wire format
(ids, times, names, the attribute lists encoded once per distinct set): the same message the generated
classes build, at a fraction of the export thread's CPU. A full queue drops spans (counted) instead of
blocking; a failed export is logged (once per minute at most) and dropped.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import random
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    get_current_span,
)

_LOG = logging.getLogger("ragspine_services.tracing")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_LOW_64 = (1 << 64) - 1
_getrandbits = random.getrandbits
_time_ns = time.time_ns

Sink = Callable[[Sequence["LeanSpan"]], None]
EXPORT_THREAD_NAME = "ragspine-span-export"


def _name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (first 15 bytes) at the OS level too, where Linux allows it, so
    ``top -H``, ``/proc/<pid>/task/*/comm`` and profilers can tell it apart; best effort, else nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode("ascii", "replace")[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        pass


class LeanSpan(trace.Span):
    """A recording span; ``end()`` hands it to the exporter's queue.

    Its ``SpanContext`` is built on first request (an outgoing call's ``traceparent``, a test), not at
    start: a child of a ``LeanSpan`` keeps that span as its parent and reads the ids directly, as does the
    exporter, so the spans inside one process build no ``SpanContext`` at all. ``parent`` still answers
    with the parent's ``SpanContext`` (remote or local) or None for a root."""

    __slots__ = (
        "_context",
        "_parent",
        "_record",
        "attributes",
        "end_ns",
        "kind",
        "name",
        "parent_span_id",
        "span_id",
        "start_ns",
        "status_code",
        "status_description",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        trace_state: TraceState | None,
        parent: LeanSpan | SpanContext | None,
        kind: SpanKind,
        attributes: Mapping[str, Any] | None,
        record: Callable[[LeanSpan], None],
        start_ns: int,
    ) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.trace_state = trace_state
        self._context: SpanContext | None = None
        self._parent = parent
        self.parent_span_id = parent.span_id if parent is not None else 0
        self.kind = kind
        self.attributes = attributes
        self._record = record
        self.start_ns = start_ns
        self.end_ns = 0
        self.status_code = StatusCode.UNSET
        self.status_description = ""

    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            context = self._context = SpanContext(
                self.trace_id, self.span_id, False, _SAMPLED, self.trace_state
            )
        return context

    @property
    def parent(self) -> SpanContext | None:
        """The parent's ``SpanContext`` (None for a root span)."""
        parent = self._parent
        return parent.get_span_context() if isinstance(parent, LeanSpan) else parent

    def is_recording(self) -> bool:
        return not self.end_ns

    def end(self, end_time: int | None = None) -> None:
        if self.end_ns:
            return
        self.end_ns = end_time or _time_ns()
        self._record(self)

    def set_attribute(self, key: str, value: Any) -> None:
        if not self.end_ns:
            # The starting mapping may be shared by many spans: copy on the first write.
            self.attributes = {**(self.attributes or {}), key: value}

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self.end_ns:
            self.attributes = {**(self.attributes or {}), **attributes}

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        """Events are not kept (none of the services' spans carries any)."""

    def update_name(self, name: str) -> None:
        if not self.end_ns:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_ns:
            return
        if isinstance(status, Status):
            self.status_code, self.status_description = status.status_code, status.description or ""
        else:
            self.status_code, self.status_description = status, description or ""

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Only the exception's type is kept, as the status: its message may quote a request."""
        self.set_status(StatusCode.ERROR, type(exception).__name__)


class LeanTracer(trace.Tracer):
    def __init__(self, ratio: float, record: Callable[[LeanSpan], None]) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"sample ratio {ratio} must be between 0 and 1")
        self._bound = round(ratio * (1 << 64))
        self._record = record

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        current = get_current_span(context)
        parent: LeanSpan | SpanContext | None
        if type(current) is LeanSpan:  # a local parent of this tracer: recording, hence sampled
            parent, trace_id, sampled, state = current, current.trace_id, True, current.trace_state
        elif (parent := current.get_span_context()) is not None and parent.is_valid:
            trace_id, sampled, state = parent.trace_id, parent.trace_flags & 1 == 1, parent.trace_state
        else:
            parent, state = None, None
            trace_id = _getrandbits(128) or 1
            sampled = (trace_id & _LOW_64) < self._bound
        span_id = _getrandbits(64) or 1
        if not sampled:
            return NonRecordingSpan(SpanContext(trace_id, span_id, False, _NOT_SAMPLED, state))
        start = start_time or _time_ns()
        return LeanSpan(name, trace_id, span_id, state, parent, kind, attributes, self._record, start)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> CurrentSpan:  # type: ignore[override]
        """A span made the current one for a ``with`` block (or, used as a decorator, for every call of
        the decorated function, coroutine functions included), as the API's ``Tracer`` declares: the
        arguments of :meth:`start_span`, then ``end_on_exit=True``."""
        given = _AS_CURRENT_SPAN.bind(self, *args, **kwargs)
        given.apply_defaults()
        options = given.arguments
        del options["self"]
        end_on_exit = options.pop("end_on_exit")
        mark_errors = options["record_exception"] or options["set_status_on_exception"]
        return CurrentSpan(functools.partial(self.start_span, **options), mark_errors, end_on_exit)


# start_span's parameters followed by end_on_exit: the API's start_as_current_span.
_AS_CURRENT_SPAN = inspect.signature(LeanTracer.start_span).replace(
    parameters=[
        *inspect.signature(LeanTracer.start_span).parameters.values(),
        inspect.Parameter(
            "end_on_exit", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=True, annotation="bool"
        ),
    ],
    return_annotation="CurrentSpan",
)
LeanTracer.start_as_current_span.__signature__ = _AS_CURRENT_SPAN  # type: ignore[attr-defined]


class CurrentSpan:
    """What ``LeanTracer.start_as_current_span`` returns: a context manager that starts the span on entry
    (``start()``) and makes it current, and on exit restores the previous context, marks the span failed
    (exception type only) if the block raised an ``Exception`` and ``mark_errors`` is set, and ends it
    (unless ``end_on_exit`` is false). As a decorator it does the same around every call of the function
    (for a coroutine function, around the whole awaited call)."""

    __slots__ = ("_end_on_exit", "_mark_errors", "_span", "_start", "_token")

    def __init__(self, start: Callable[[], trace.Span], mark_errors: bool, end_on_exit: bool) -> None:
        self._start = start
        self._mark_errors = mark_errors
        self._end_on_exit = end_on_exit
        self._span: trace.Span | None = None
        self._token: Any = None

    def _fresh(self) -> CurrentSpan:
        """A new, unentered manager with the same arguments (one per decorated call)."""
        return CurrentSpan(self._start, self._mark_errors, self._end_on_exit)

    def __enter__(self) -> trace.Span:
        if self._span is not None:
            raise RuntimeError("a start_as_current_span manager can be entered only once")
        span = self._span = self._start()
        self._token = context_api.attach(trace.set_span_in_context(span))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self._span
        assert span is not None, "__exit__ without __enter__"
        try:
            if exc is not None and isinstance(exc, Exception) and self._mark_errors:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        finally:
            context_api.detach(self._token)
            if self._end_on_exit:
                span.end()

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def traced_coroutine(*args: Any, **kwargs: Any) -> Any:
                with self._fresh():
                    return await func(*args, **kwargs)

            return traced_coroutine

        @functools.wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return func(*args, **kwargs)

        return traced


class BatchExporter:
    """Bounded queue of ended spans, sent by one background thread in batches through ``sink``.

    The defaults (every 2 s, or as soon as 2,048 spans wait) let the thread run rarely and send big
    batches: a batch costs the thread some tens of µs on top of its spans (the gRPC call), and every
    wake-up takes the GIL from the request threads once more."""

    def __init__(
        self, sink: Sink, *, schedule_s: float = 2.0, max_batch: int = 2048, max_queue: int = 8192
    ) -> None:
        if schedule_s <= 0 or max_batch < 1 or max_queue < max_batch:
            raise ValueError("schedule_s must be > 0, max_batch >= 1 and max_queue >= max_batch")
        self._sink = sink
        self._schedule_s = schedule_s
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._queue: collections.deque[LeanSpan] = collections.deque()
        self._wake = threading.Event()
        self._stop = False
        self._send_lock = threading.Lock()
        self._last_warning = 0.0
        self.dropped = 0
        self.exported = 0
        self._thread = threading.Thread(target=self._run, name=EXPORT_THREAD_NAME, daemon=True)
        self._thread.start()

    def record(self, span: LeanSpan) -> None:
        queue = self._queue
        if len(queue) >= self._max_queue:
            self.dropped += 1
            return
        queue.append(span)
        if len(queue) == self._max_batch:
            # Once, when a full batch is waiting (appends grow the queue one at a time, so it passes
            # through this length): setting the event on every later span would cost the request thread.
            self._wake.set()

    def _run(self) -> None:
        _name_os_thread(EXPORT_THREAD_NAME)
        while not self._stop:
            self._wake.wait(self._schedule_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Send everything queued now (on the calling thread)."""
        with self._send_lock:
            queue = self._queue
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), self._max_batch))]
                try:
                    self._sink(batch)
                    self.exported += len(batch)
                except Exception as exc:
                    now = time.monotonic()
                    if now - self._last_warning > 60:
                        self._last_warning = now
                        _LOG.warning(
                            "span export failed; spans dropped",
                            extra={"spans": len(batch), "error": type(exc).__name__},
                        )

    def shutdown(self, timeout_s: float = 5.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)
        self.flush()


class LeanTracerProvider(trace.TracerProvider):
    """One tracer (the same for every instrumentation name) over one ``BatchExporter``."""

    def __init__(self, sink: Sink, *, ratio: float = 1.0, schedule_s: float = 2.0) -> None:
        self.exporter = BatchExporter(sink, schedule_s=schedule_s)
        self._tracer = LeanTracer(ratio, self.exporter.record)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        return self._tracer

    def force_flush(self) -> None:
        self.exporter.flush()

    def shutdown(self) -> None:
        self.exporter.shutdown()


# ---------------------------------------------------------------------------------------- OTLP over gRPC
_pack_fixed64 = struct.Struct("<Q").pack
_Encoded = TypeVar("_Encoded")
_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative ``value``."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: ``tag`` (field number << 3 | 2) written as one byte (numbers < 16)."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _any_value(value: Any, common_pb2: Any) -> Any:
    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, str):
        return common_pb2.AnyValue(string_value=value)
    if isinstance(value, list | tuple):
        values = [_any_value(v, common_pb2) for v in value]
        return common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=values))
    return common_pb2.AnyValue(string_value=str(value))


def _per_attribute_set(
    cache: dict[Any, _Encoded], attributes: Mapping[str, Any], build: Callable[[Mapping[str, Any]], _Encoded]
) -> _Encoded:
    """``build(attributes)``, kept in ``cache`` per distinct set of (hashable) values; a set holding a list
    value is built every time, and a cache of 1,024 sets starts again empty."""
    try:
        key: Any = tuple(attributes.items())
        cached = cache.get(key)
    except TypeError:  # a list value: not cacheable
        return build(attributes)
    if cached is None:
        cached = build(attributes)
        if len(cache) >= 1024:
            cache.clear()
        cache[key] = cached
    return cached


class OtlpGrpcSink:
    """Sends batches to an OTLP/gRPC collector (``http://host:port`` plaintext, ``https://`` TLS) as one
    resource (``service.name``) and one scope (``ragspine``)."""

    def __init__(self, endpoint: str, service_name: str, *, timeout_s: float = 10.0) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2

        scheme, _, rest = endpoint.partition("://")
        if scheme not in ("http", "https") or not rest.strip("/"):
            raise ValueError(f"OTLP endpoint {endpoint!r} must be http://host:port or https://host:port")
        target = rest.split("/", 1)[0]
        if scheme == "https":
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials())
        else:
            self._channel = grpc.insecure_channel(target)
        self._stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)
        # The same method, sent as bytes this sink writes itself (no request serializer).
        self._export_raw = self._channel.unary_unary(
            _EXPORT_METHOD,
            request_serializer=None,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        self._timeout_s = timeout_s
        self._pb = (trace_service_pb2, common_pb2, trace_pb2)
        self._resource = resource_pb2.Resource(
            attributes=[
                common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=service_name))
            ]
        )
        self._scope = common_pb2.InstrumentationScope(name="ragspine")
        self._encoded: dict[Any, list[Any]] = {}
        # Wire-format pieces: ResourceSpans.resource (field 1) and ScopeSpans.scope (field 1).
        self._resource_field = _field(0x0A, self._resource.SerializeToString())
        self._scope_field = _field(0x0A, self._scope.SerializeToString())
        self._wire_attributes: dict[Any, bytes] = {}
        self._wire_names: dict[str, bytes] = {}
        self._last_trace_id = 0
        self._last_trace_field = b""

    def _attributes(self, attributes: Mapping[str, Any]) -> list[Any]:
        """The ``KeyValue`` list of ``attributes``, built once per distinct set of (hashable) values:
        the RPC spans of one method and most stage spans repeat theirs."""
        return _per_attribute_set(self._encoded, attributes, self._key_values)

    def _key_values(self, attributes: Mapping[str, Any]) -> list[Any]:
        common_pb2 = self._pb[1]
        return [common_pb2.KeyValue(key=k, value=_any_value(v, common_pb2)) for k, v in attributes.items()]

    def encode(self, batch: Sequence[LeanSpan]) -> Any:
        """The ``ExportTraceServiceRequest`` of ``batch``."""
        trace_service_pb2, _, trace_pb2 = self._pb
        Span = trace_pb2.Span
        spans = []
        for span in batch:
            context = span.get_span_context()
            message = Span(
                trace_id=context.trace_id.to_bytes(16, "big"),
                span_id=context.span_id.to_bytes(8, "big"),
                name=span.name,
                kind=span.kind.value + 1,  # OTLP numbers kinds from UNSPECIFIED = 0
                start_time_unix_nano=span.start_ns,
                end_time_unix_nano=span.end_ns,
                attributes=self._attributes(span.attributes) if span.attributes else None,
            )
            if span.parent_span_id:
                message.parent_span_id = span.parent_span_id.to_bytes(8, "big")
            if context.trace_state:
                message.trace_state = context.trace_state.to_header()
            if span.status_code is not StatusCode.UNSET:
                message.status.code = span.status_code.value
                message.status.message = span.status_description
            spans.append(message)
        return trace_service_pb2.ExportTraceServiceRequest(
            resource_spans=[
                trace_pb2.ResourceSpans(
                    resource=self._resource,
                    scope_spans=[trace_pb2.ScopeSpans(scope=self._scope, spans=spans)],
                )
            ]
        )

    def _attribute_fields(self, attributes: Mapping[str, Any]) -> bytes:
        """``Span.attributes`` (field 9, one entry per key) in wire format, once per distinct set."""
        return _per_attribute_set(self._wire_attributes, attributes, self._wire_key_values)

    def _wire_key_values(self, attributes: Mapping[str, Any]) -> bytes:
        return b"".join(_field(0x4A, kv.SerializeToString()) for kv in self._attributes(attributes))

    def _span_bytes(self, span: LeanSpan) -> bytes:
        """One ``Span`` message in wire format (fields in number order, defaults omitted as proto3 does)."""
        name = self._wire_names.get(span.name)
        if name is None:
            name = _field(0x2A, span.name.encode("utf-8"))  # 5: name
            if len(self._wire_names) < 1024:
                self._wire_names[span.name] = name
        trace_id = span.trace_id
        if trace_id != self._last_trace_id:  # the spans of one trace mostly come one after another
            self._last_trace_id = trace_id
            self._last_trace_field = b"\x0a\x10" + trace_id.to_bytes(16, "big")  # 1: trace_id
        parts = [self._last_trace_field, b"\x12\x08" + span.span_id.to_bytes(8, "big")]  # 2: span_id
        if span.trace_state:
            parts.append(_field(0x1A, span.trace_state.to_header().encode("utf-8")))  # 3: trace_state
        if span.parent_span_id:
            parts.append(b"\x22\x08" + span.parent_span_id.to_bytes(8, "big"))  # 4: parent_span_id
        parts.append(name)
        parts.append(b"\x30" + _varint(span.kind.value + 1))  # 6: kind (OTLP numbers from UNSPECIFIED = 0)
        if span.start_ns:
            parts.append(b"\x39" + _pack_fixed64(span.start_ns))  # 7: start_time_unix_nano
        if span.end_ns:
            parts.append(b"\x41" + _pack_fixed64(span.end_ns))  # 8: end_time_unix_nano
        if span.attributes:
            parts.append(self._attribute_fields(span.attributes))  # 9: attributes
        if span.status_code is not StatusCode.UNSET:
            status = b""
            if span.status_description:
                status = _field(0x12, span.status_description.encode("utf-8"))  # Status.message = 2
            if span.status_code.value:
                status += b"\x18" + _varint(span.status_code.value)  # Status.code = 3
            parts.append(_field(0x7A, status))  # 15: status
        return b"".join(parts)

    def serialize(self, batch: Sequence[LeanSpan]) -> bytes:
        """The ``ExportTraceServiceRequest`` of ``batch`` in protobuf wire format (the message ``encode``
        builds, written directly)."""
        span_field = _field
        spans = b"".join([span_field(0x12, self._span_bytes(span)) for span in batch])  # ScopeSpans.spans
        scope_spans = _field(0x12, self._scope_field + spans)  # ResourceSpans.scope_spans = 2
        return _field(0x0A, self._resource_field + scope_spans)  # ExportTraceServiceRequest.resource_spans

    def __call__(self, batch: Sequence[LeanSpan]) -> None:
        self._export_raw(self.serialize(batch), timeout=self._timeout_s)

    def close(self) -> None:
        self._channel.close()
