"""The tracing interceptors on real loopback servers, with the services' tracer (``common.lean_trace``)
sending to an in-memory sink (no global provider is installed).

Two gRPC servers, each with ``TracingServerInterceptor``: the first one's handler calls the second through
a channel wrapped by ``TracingClientInterceptor``, as the front calls the worker. One call must give one
trace whose parent chain runs second server → client span → first server → the caller's traceparent.
Reverse proof: a client interceptor that does not send ``traceparent`` must fail the same checker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc
import pytest

pytest.importorskip("opentelemetry.trace")
from opentelemetry.trace import SpanKind, StatusCode, get_current_span

from ragspine_services.common import tracing
from ragspine_services.common.lean_trace import LeanSpan, LeanTracerProvider
from ragspine_services.common.tracing import (
    TracedChannel,
    TracingClientInterceptor,
    TracingServerInterceptor,
    format_traceparent,
    parent_context,
)

CALLER_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CALLER_SPAN = 0xB7AD6B7169203331
CALLER_HEADER = f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"


def _identity(data: bytes) -> bytes:
    return data


def _server(
    tracer: Any, handlers: dict[str, Callable[[bytes, grpc.ServicerContext], bytes]]
) -> tuple[grpc.Server, str]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), interceptors=[TracingServerInterceptor(tracer)]
    )
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "test.Svc",
                {
                    name: grpc.unary_unary_rpc_method_handler(
                        fn, request_deserializer=_identity, response_serializer=_identity
                    )
                    for name, fn in handlers.items()
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class Sink:
    def __init__(self) -> None:
        self.spans: list[LeanSpan] = []

    def __call__(self, batch: Sequence[LeanSpan]) -> None:
        self.spans.extend(batch)


@pytest.fixture()
def spans() -> Iterator[tuple[Any, LeanTracerProvider, Sink]]:
    sink = Sink()
    provider = LeanTracerProvider(sink, schedule_s=0.05)
    yield provider.get_tracer("test"), provider, sink
    provider.shutdown()


def _finished(provider: LeanTracerProvider, sink: Sink) -> list[LeanSpan]:
    provider.force_flush()
    return list(sink.spans)


Wrap = Callable[[grpc.Channel], grpc.Channel]


def _intercepted(interceptor: grpc.UnaryUnaryClientInterceptor) -> Wrap:
    return lambda channel: grpc.intercept_channel(channel, interceptor)


# The two client sides: the interceptor through gRPC's machinery, and the channel wrapper the front uses.
CLIENTS = {
    "interceptor": lambda tracer: _intercepted(TracingClientInterceptor(tracer)),
    "traced_channel": lambda tracer: lambda channel: TracedChannel(channel, tracer),
}


def _run(spans: tuple[Any, LeanTracerProvider, Sink], wrap: Wrap) -> tuple[list[LeanSpan], list[Any]]:
    """Caller (with a traceparent) → server A → (client span) → server B, twice; returns the finished
    spans and what server B saw as its current span context."""
    tracer, provider, sink = spans
    seen: list[Any] = []

    def leaf(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append(get_current_span().get_span_context())
        return request

    leaf_server, leaf_address = _server(tracer, {"Leaf": leaf})
    channel = wrap(grpc.insecure_channel(leaf_address))
    call_leaf = channel.unary_unary(
        "/test.Svc/Leaf", request_serializer=_identity, response_deserializer=_identity
    )

    def front(request: bytes, context: grpc.ServicerContext) -> bytes:
        # The worker client calls with .future(); the blocking form must work as well.
        first = call_leaf.future(request, timeout=5).result()
        return bytes(call_leaf(first, timeout=5))

    front_server, front_address = _server(tracer, {"Front": front})
    try:
        with grpc.insecure_channel(front_address) as caller:
            call = caller.unary_unary(
                "/test.Svc/Front", request_serializer=_identity, response_deserializer=_identity
            )
            assert call(b"x", timeout=10, metadata=(("traceparent", CALLER_HEADER),)) == b"x"
    finally:
        channel.close()
        front_server.stop(0)
        leaf_server.stop(0)
    return _finished(provider, sink), seen


def check_one_trace(finished: list[LeanSpan]) -> None:
    """Every span is in the caller's trace and the parent chain of each leaf span reaches the caller."""
    by_id = {s.get_span_context().span_id: s for s in finished}
    leaves = [s for s in finished if s.name == "test.Svc/Leaf" and s.kind is SpanKind.SERVER]
    fronts = [s for s in finished if s.name == "test.Svc/Front" and s.kind is SpanKind.SERVER]
    clients = [s for s in finished if s.name == "test.Svc/Leaf" and s.kind is SpanKind.CLIENT]
    assert len(leaves) == 2 and len(fronts) == 1 and len(clients) == 2, [(s.name, s.kind) for s in finished]
    assert {s.get_span_context().trace_id for s in finished} == {CALLER_TRACE}
    assert fronts[0].parent is not None and fronts[0].parent.span_id == CALLER_SPAN
    for leaf in leaves:
        assert leaf.parent is not None and leaf.parent.is_remote
        client = by_id[leaf.parent.span_id]
        assert client.kind is SpanKind.CLIENT
        assert client.parent is not None and client.parent.span_id == fronts[0].get_span_context().span_id


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_one_call_is_one_trace_through_two_servers(
    spans: tuple[Any, LeanTracerProvider, Sink], client: str
) -> None:
    tracer = spans[0]
    finished, seen = _run(spans, CLIENTS[client](tracer))
    check_one_trace(finished)
    # The handler runs inside its span (stage spans nest there), and attributes name the RPC only.
    assert all(ctx.trace_id == CALLER_TRACE for ctx in seen)
    for span in finished:
        assert span.attributes == {
            "rpc.system": "grpc",
            "rpc.service": "test.Svc",
            "rpc.method": span.name.rpartition("/")[2],
            "rpc.grpc.status_code": 0,
        }


class _NoPropagation(TracingClientInterceptor):
    """Broken on purpose: starts the client span but sends the call without its traceparent."""

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        span = self._tracer.start_span(details.method.lstrip("/"), kind=SpanKind.CLIENT)
        call = continuation(details, request)
        call.add_done_callback(lambda _f: span.end())
        return call


def test_reverse_proof_a_client_that_drops_the_context_is_caught(
    spans: tuple[Any, LeanTracerProvider, Sink],
) -> None:
    tracer = spans[0]
    finished, _ = _run(spans, _intercepted(_NoPropagation(tracer)))
    with pytest.raises(AssertionError):
        check_one_trace(finished)


class _ChannelWithoutContext(TracedChannel):
    """Broken on purpose: the client spans are recorded but nothing is added to the call's metadata."""

    def context_metadata(self, span_context: Any) -> tuple[tuple[str, str], ...]:
        return ()


def test_reverse_proof_a_traced_channel_that_drops_the_context_is_caught(
    spans: tuple[Any, LeanTracerProvider, Sink],
) -> None:
    tracer = spans[0]
    finished, _ = _run(spans, lambda channel: _ChannelWithoutContext(channel, tracer))
    with pytest.raises(AssertionError):
        check_one_trace(finished)


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("form", ["blocking", "with_call", "future"])
def test_a_failed_call_marks_both_spans(
    spans: tuple[Any, LeanTracerProvider, Sink], client: str, form: str
) -> None:
    tracer, provider, sink = spans

    def refuse(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        raise AssertionError("unreachable")

    server, address = _server(tracer, {"Refuse": refuse})
    channel = CLIENTS[client](tracer)(grpc.insecure_channel(address))
    try:
        call = channel.unary_unary(
            "/test.Svc/Refuse", request_serializer=_identity, response_deserializer=_identity
        )
        with pytest.raises(grpc.RpcError):
            if form == "blocking":
                call(b"x", timeout=5)
            elif form == "with_call":
                call.with_call(b"x", timeout=5)
            else:
                call.future(b"x", timeout=5).result()
    finally:
        channel.close()
        server.stop(0)
    finished = _finished(provider, sink)
    assert {s.kind for s in finished} == {SpanKind.SERVER, SpanKind.CLIENT}
    for span in finished:
        assert span.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        f"ff-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01",  # version ff is invalid
        f"00-{0:032x}-{CALLER_SPAN:016x}-01",  # all-zero trace id
        f"00-{CALLER_TRACE:032x}-{0:016x}-01",  # all-zero span id
        f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01-extra",  # version 00 has exactly four fields
        f"00-0x{CALLER_TRACE:030x}-{CALLER_SPAN:016x}-01",  # not plain hex
        f"00-{CALLER_TRACE:031x}-{CALLER_SPAN:016x}-01",  # short trace id
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(header: str) -> None:
    assert parent_context([("traceparent", header)]) is None


def test_traceparent_round_trip_keeps_ids_flags_and_state() -> None:
    context = parent_context(
        [("other", "x"), ("traceparent", CALLER_HEADER.upper()), ("tracestate", "vendor=abc")]
    )
    span_context = get_current_span(context).get_span_context()
    assert (span_context.trace_id, span_context.span_id) == (CALLER_TRACE, CALLER_SPAN)
    assert span_context.is_remote and span_context.trace_flags.sampled
    assert span_context.trace_state.to_header() == "vendor=abc"
    assert format_traceparent(span_context) == CALLER_HEADER
    # A later version may append fields; the first four are read.
    assert parent_context([("traceparent", CALLER_HEADER.replace("00-", "01-", 1) + "-future")]) is not None


def test_nothing_is_installed_while_tracing_is_off() -> None:
    if tracing.tracing_enabled():
        pytest.skip("another test in this process configured tracing")
    assert tracing.server_interceptors() == []
    channel = grpc.insecure_channel("127.0.0.1:1")
    try:
        assert tracing.traced_channel(channel) is channel
    finally:
        channel.close()


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_an_unsampled_caller_is_followed_through_two_servers(
    spans: tuple[Any, LeanTracerProvider, Sink], client: str
) -> None:
    """A caller's unsampled traceparent travels front → worker (flags 00, same trace) and nothing is
    recorded on either server or the client in between."""
    tracer, provider, sink = spans
    seen: list[str] = []

    def inner(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append(dict(context.invocation_metadata())[tracing.TRACEPARENT])
        return request

    second, second_address = _server(tracer, {"Inner": inner})
    channel = CLIENTS[client](tracer)(grpc.insecure_channel(second_address))
    inner_call = channel.unary_unary(
        "/test.Svc/Inner", request_serializer=_identity, response_deserializer=_identity
    )

    def outer(request: bytes, context: grpc.ServicerContext) -> bytes:
        return bytes(inner_call(request, timeout=5))

    first, first_address = _server(tracer, {"Outer": outer})
    unsampled = f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-00"
    try:
        with grpc.insecure_channel(first_address) as caller:
            call = caller.unary_unary(
                "/test.Svc/Outer", request_serializer=_identity, response_deserializer=_identity
            )
            assert call(b"x", timeout=5, metadata=[(tracing.TRACEPARENT, unsampled)]) == b"x"
    finally:
        channel.close()
        first.stop(0)
        second.stop(0)
    (header,) = seen
    assert header.startswith(f"00-{CALLER_TRACE:032x}-") and header.endswith("-00")
    assert _finished(provider, sink) == []
