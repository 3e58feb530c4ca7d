"""The services' tracer (``common.lean_trace``): parent-based sampling, spans that keep no text of an
exception, a bounded queue that drops instead of blocking, export failures that never reach a request,
and the OTLP message a batch becomes."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto.trace.v1.trace_pb2")
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from ragspine_services.common.lean_trace import (
    EXPORT_THREAD_NAME,
    BatchExporter,
    LeanSpan,
    LeanTracerProvider,
    OtlpGrpcSink,
)


def _parent(sampled: bool) -> Any:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(remote))


class Sink:
    def __init__(self) -> None:
        self.batches: list[list[LeanSpan]] = []

    def __call__(self, batch: Sequence[LeanSpan]) -> None:
        self.batches.append(list(batch))

    @property
    def spans(self) -> list[LeanSpan]:
        return [s for b in self.batches for s in b]


@pytest.mark.parametrize(
    ("ratio", "parent", "recorded"),
    [
        (1.0, None, True),
        (0.0, None, False),
        (0.0, True, True),  # the caller sampled it: followed whatever the local ratio
        (1.0, False, False),  # the caller did not: not recorded here either
    ],
)
def test_sampling_follows_the_parent_else_the_ratio(
    ratio: float, parent: bool | None, recorded: bool
) -> None:
    sink = Sink()
    provider = LeanTracerProvider(sink, ratio=ratio)
    tracer = provider.get_tracer("t")
    span = tracer.start_span("x", context=None if parent is None else _parent(parent))
    assert span.is_recording() is recorded
    assert span.get_span_context().trace_flags.sampled is recorded
    if parent is not None:
        assert span.get_span_context().trace_id == 0xABC
    span.end()
    provider.shutdown()
    assert len(sink.spans) == int(recorded)


def test_the_ratio_samples_about_that_share_of_roots() -> None:
    sink = Sink()
    provider = LeanTracerProvider(sink, ratio=0.25)
    tracer = provider.get_tracer("t")
    kept = sum(tracer.start_span("x").is_recording() for _ in range(4000))
    provider.shutdown()
    assert 800 < kept < 1200


def test_current_span_nesting_and_an_exception_keeps_only_its_type() -> None:
    sink = Sink()
    provider = LeanTracerProvider(sink)
    tracer = provider.get_tracer("t")
    with pytest.raises(KeyError), tracer.start_as_current_span("outer") as outer:
        with tracer.start_as_current_span("inner", attributes={"n": 1}) as inner:
            assert trace.get_current_span() is inner
        raise KeyError("the secret query text")
    assert trace.get_current_span() is not outer
    provider.shutdown()
    by_name = {s.name: s for s in sink.spans}
    assert by_name["inner"].parent == by_name["outer"].get_span_context()
    assert by_name["outer"].status_code is StatusCode.ERROR
    assert by_name["outer"].status_description == "KeyError"
    assert by_name["inner"].status_code is StatusCode.UNSET


def test_a_local_child_reads_its_parent_without_building_span_contexts() -> None:
    sink = Sink()
    provider = LeanTracerProvider(sink)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("request") as request, tracer.start_as_current_span("stage") as stage:
        tracer.start_span("leaf").end()
    provider.shutdown()
    leaf = next(s for s in sink.spans if s.name == "leaf")
    assert isinstance(request, LeanSpan) and isinstance(stage, LeanSpan)
    # Nothing asked for a SpanContext so far: none was built, the ids were read from the spans.
    assert (request._context, stage._context, leaf._context) == (None, None, None)
    assert (leaf.trace_id, leaf.parent_span_id) == (request.trace_id, stage.span_id)
    assert stage.parent_span_id == request.span_id and request.parent_span_id == 0
    # The API's view is unchanged: parent and own contexts, sampled and local.
    assert leaf.parent == stage.get_span_context() and stage.parent == request.get_span_context()
    assert request.parent is None
    context = leaf.get_span_context()
    assert (context.trace_id, context.span_id) == (request.trace_id, leaf.span_id)
    assert context.trace_flags.sampled and not context.is_remote and context is leaf.get_span_context()


def test_a_shared_attribute_mapping_is_never_written_to() -> None:
    shared: dict[str, Any] = {"rpc.method": "Retrieve", "rpc.grpc.status_code": 0}
    provider = LeanTracerProvider(Sink())
    span = provider.get_tracer("t").start_span("x", attributes=shared)
    span.set_attribute("rpc.grpc.status_code", 5)
    assert shared["rpc.grpc.status_code"] == 0
    assert isinstance(span, LeanSpan)
    assert span.attributes == {"rpc.method": "Retrieve", "rpc.grpc.status_code": 5}
    provider.shutdown()


def test_a_full_queue_drops_spans_instead_of_blocking() -> None:
    release = threading.Event()

    def stuck(batch: Any) -> None:
        release.wait(10)

    exporter = BatchExporter(stuck, schedule_s=0.01, max_batch=2, max_queue=4)
    provider = LeanTracerProvider(Sink())
    tracer = provider.get_tracer("t")
    for _ in range(50):
        span = tracer.start_span("x")
        assert isinstance(span, LeanSpan)
        exporter.record(span)  # returns at once even though the sink is stuck
    assert exporter.dropped > 0
    release.set()
    exporter.shutdown()
    provider.shutdown()


def test_a_failing_sink_never_reaches_the_caller() -> None:
    calls: list[int] = []

    def failing(batch: Any) -> None:
        calls.append(len(batch))
        raise ConnectionError("collector down")

    provider = LeanTracerProvider(failing, schedule_s=0.01)
    tracer = provider.get_tracer("t")
    for _ in range(3):
        tracer.start_span("x").end()
    provider.force_flush()
    tracer.start_span("y").end()
    provider.shutdown()
    assert sum(calls) == 4 and provider.exporter.exported == 0


def test_a_batch_becomes_one_otlp_request() -> None:
    sink = Sink()
    provider = LeanTracerProvider(sink)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        child = tracer.start_span(
            "child", kind=SpanKind.CLIENT, attributes={"b": True, "i": 3, "f": 0.5, "s": "v", "l": [1, 2]}
        )
        child.set_status(StatusCode.ERROR, "UNAVAILABLE")
        child.end()
    provider.shutdown()
    otlp = OtlpGrpcSink("http://127.0.0.1:1", "ragspine-front")
    try:
        request = otlp.encode(sink.spans)
    finally:
        otlp.close()
    (resource_spans,) = request.resource_spans
    assert [(a.key, a.value.string_value) for a in resource_spans.resource.attributes] == [
        ("service.name", "ragspine-front")
    ]
    spans = {s.name: s for s in resource_spans.scope_spans[0].spans}
    context = parent.get_span_context()
    assert spans["parent"].kind == 2 and spans["child"].kind == 3  # OTLP SERVER, CLIENT
    assert spans["parent"].trace_id == context.trace_id.to_bytes(16, "big")
    assert spans["child"].parent_span_id == context.span_id.to_bytes(8, "big")
    assert spans["parent"].parent_span_id == b""
    assert spans["child"].status.code == 2 and spans["child"].status.message == "UNAVAILABLE"
    assert spans["child"].start_time_unix_nano <= spans["child"].end_time_unix_nano
    values = {a.key: a.value for a in spans["child"].attributes}
    assert values["b"].bool_value is True and values["i"].int_value == 3
    assert values["f"].double_value == 0.5 and values["s"].string_value == "v"
    assert [v.int_value for v in values["l"].array_value.values] == [1, 2]


@pytest.mark.parametrize("endpoint", ["collector:4317", "grpc://collector:4317", "http://"])
def test_a_bad_endpoint_is_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        OtlpGrpcSink(endpoint, "x")


def test_start_as_current_span_decorates_plain_and_coroutine_functions() -> None:
    import asyncio

    sink = Sink()
    provider = LeanTracerProvider(sink)
    tracer = provider.get_tracer("t")
    seen: list[Any] = []

    @tracer.start_as_current_span("plain", attributes={"n": 1})
    def plain(x: int) -> int:
        seen.append(trace.get_current_span())
        return x + 1

    @tracer.start_as_current_span("coro")
    async def coro() -> str:
        await asyncio.sleep(0.01)  # the span must cover the awaited body, not only the coroutine's creation
        seen.append(trace.get_current_span())
        raise ValueError("the secret query text")

    assert plain(1) == 2 and plain(2) == 3
    with pytest.raises(ValueError):
        asyncio.run(coro())
    provider.shutdown()
    spans = sink.spans
    assert [s.name for s in spans] == ["plain", "plain", "coro"]
    # One span per call, each current inside its call, with distinct ids.
    assert seen == spans and len({s.get_span_context().span_id for s in spans}) == 3
    assert spans[0].attributes == {"n": 1}
    coro_span = spans[2]
    assert coro_span.end_ns - coro_span.start_ns >= 10_000_000
    assert (coro_span.status_code, coro_span.status_description) == (StatusCode.ERROR, "ValueError")
    assert not trace.get_current_span().is_recording()


def test_a_manager_is_entered_once_and_end_on_exit_false_leaves_the_span_open() -> None:
    provider = LeanTracerProvider(Sink())
    tracer = provider.get_tracer("t")
    manager = tracer.start_as_current_span("x", end_on_exit=False)
    with manager as span:
        pass
    assert span.is_recording()  # not ended: the caller ends it
    with pytest.raises(RuntimeError, match="only once"), manager:
        pass
    span.end()
    provider.shutdown()


def _private_imports(source: str) -> list[str]:
    """Modules (or names) imported by ``source`` with a private component (``a._b``, ``from a import _b``)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [
            n for n in names if n.startswith("opentelemetry") and any(p.startswith("_") for p in n.split("."))
        ]
    return found


def test_the_tracer_uses_only_public_opentelemetry_api() -> None:
    import inspect

    from ragspine_services.common import lean_trace, tracing

    for module in (lean_trace, tracing):
        assert _private_imports(inspect.getsource(module)) == [], module.__name__
    # Reverse proof: the checker catches the import the tracer used to have.
    old = "from opentelemetry.util._decorator import _agnosticcontextmanager\n"
    assert _private_imports(old) == ["opentelemetry.util._decorator._agnosticcontextmanager"]


def _varied_spans() -> list[LeanSpan]:
    """Spans covering every field the wire encoder writes: root / child, remote parent with trace state,
    error and ok statuses, each attribute type (a list one is not cacheable), none, repeats, non-ASCII."""
    from opentelemetry.trace import TraceState

    sink = Sink()
    provider = LeanTracerProvider(sink)
    tracer = provider.get_tracer("t")
    shared: dict[str, Any] = {"rpc.system": "grpc", "rpc.method": "Retrieve", "rpc.grpc.status_code": 0}
    state = TraceState([("vendor", "opaque-1")])
    remote = SpanContext(
        0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF,
        0x8000000000000001,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=state,
    )
    with tracer.start_as_current_span("ragspine.v1.Svc/Retrieve", kind=SpanKind.SERVER, attributes=shared):
        for _ in range(3):
            tracer.start_span("ragspine.lexical", attributes=shared).end()
        failed = tracer.start_span("Embed ▸ grün", kind=SpanKind.CLIENT, attributes={"b": False, "l": [1, 2]})
        failed.set_status(StatusCode.ERROR, "UNAVAILABLE")
        failed.end()
        ok = tracer.start_span("ok", kind=SpanKind.PRODUCER, attributes={"f": -0.25, "i": -7, "s": ""})
        ok.set_status(StatusCode.OK)
        ok.end()
    tracer.start_span("remote child", context=trace.set_span_in_context(NonRecordingSpan(remote))).end()
    provider.shutdown()
    return sink.spans


def test_the_wire_encoder_writes_the_message_the_generated_classes_build() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    spans = _varied_spans()
    assert len(spans) == 7 and any(s.get_span_context().trace_state for s in spans)
    otlp = OtlpGrpcSink("http://127.0.0.1:1", "ragspine-front")
    try:
        expected = otlp.encode(spans)
        for _ in range(2):  # the second pass runs from the caches
            wire = otlp.serialize(spans)
            assert ExportTraceServiceRequest.FromString(wire) == expected
        assert ExportTraceServiceRequest.FromString(otlp.serialize(spans[:1])) == otlp.encode(spans[:1])
        # Spans of two traces interleaved (the trace id field is reused only for the same trace).
        mixed = [spans[-1], spans[0], spans[-1], spans[1], spans[2]]
        assert ExportTraceServiceRequest.FromString(otlp.serialize(mixed)) == otlp.encode(mixed)
        # Reverse proof: the comparison notices a change of one byte inside a span's end time.
        end = spans[0].end_ns.to_bytes(8, "little")
        assert wire.count(end) == 1
        broken = wire.replace(end, (spans[0].end_ns + 1).to_bytes(8, "little"))
        assert ExportTraceServiceRequest.FromString(broken) != expected
    finally:
        otlp.close()


def test_stage_span_nests_in_the_request_span_and_keeps_only_an_exception_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragspine import tracing as library_tracing

    sink = Sink()
    provider = LeanTracerProvider(sink)
    tracer = provider.get_tracer("t")
    monkeypatch.setattr(library_tracing, "_TRACER", tracer)
    with library_tracing.stage_span("lexical", libraries=2) as untraced:
        assert untraced is None  # no request span: nothing recorded
    with tracer.start_as_current_span("request") as request:
        with library_tracing.stage_span("lexical", libraries=2) as stage:
            assert trace.get_current_span() is stage
        with pytest.raises(KeyError), library_tracing.stage_span("dense"):
            raise KeyError("the secret query text")
        assert trace.get_current_span() is request
    provider.shutdown()
    by_name = {s.name: s for s in sink.spans}
    assert set(by_name) == {"request", "ragspine.lexical", "ragspine.dense"}
    assert by_name["ragspine.lexical"].parent == request.get_span_context()
    assert by_name["ragspine.lexical"].attributes == {"libraries": 2}
    assert (by_name["ragspine.dense"].status_code, by_name["ragspine.dense"].status_description) == (
        StatusCode.ERROR,
        "KeyError",
    )
    assert by_name["ragspine.dense"].end_ns and by_name["ragspine.lexical"].end_ns


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names from /proc")
def test_the_export_thread_is_named_at_the_os_level() -> None:
    provider = LeanTracerProvider(Sink(), schedule_s=0.01)
    try:
        thread = provider.exporter._thread
        comm = Path(f"/proc/self/task/{thread.native_id}/comm")
        deadline = time.monotonic() + 5
        while comm.read_text().strip() != EXPORT_THREAD_NAME[:15] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert comm.read_text().strip() == EXPORT_THREAD_NAME[:15]
        # Reverse proof: other threads keep the process's name.
        assert (
            Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()
            != comm.read_text().strip()
        )
    finally:
        provider.shutdown()


def test_a_full_batch_is_sent_without_waiting_for_the_schedule() -> None:
    sink = Sink()
    exporter = BatchExporter(sink, schedule_s=60.0, max_batch=8, max_queue=64)
    provider = LeanTracerProvider(Sink())
    tracer = provider.get_tracer("t")
    try:
        for round_ in range(2):  # the wake-up happens again for the next full batch
            for _ in range(8):
                span = tracer.start_span("x")
                assert isinstance(span, LeanSpan)
                exporter.record(span)
            deadline = time.monotonic() + 5
            while len(sink.spans) < 8 * (round_ + 1) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(sink.spans) == 8 * (round_ + 1)
        for _ in range(7):  # below a batch: waits for the schedule
            span = tracer.start_span("y")
            assert isinstance(span, LeanSpan)
            exporter.record(span)
        time.sleep(0.3)
        assert len(sink.spans) == 16
    finally:
        exporter.shutdown()
        provider.shutdown()
    assert len(sink.spans) == 23  # shutdown sends the rest
