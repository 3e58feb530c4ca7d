"""Traces end to end: a real worker and a real front (separate processes) export over OTLP to a small
collector in the test; one Retrieve is one trace, front server span → worker client span → worker server
span. Off by default: without RAGSPINE_OTLP_ENDPOINT nothing is exported."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc
from ragspine_services.common.tracing import configure_tracing
from tests.service.helpers import free_port, sample_documents, spawn, wait_serving

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc")
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402


class Collector(trace_service.TraceServiceServicer):  # type: ignore[misc]
    """Receives OTLP trace exports and keeps (service, span name, kind, trace id, span id, parent id)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(
                            {
                                "service": service,
                                "name": span.name,
                                "kind": span.kind,
                                "trace": span.trace_id.hex(),
                                "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attributes": {a.key for a in span.attributes},
                            }
                        )
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture()
def collector() -> Iterator[tuple[Collector, int]]:
    sink = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield sink, port
    server.stop(0)


def _wait_for(sink: Collector, predicate: Any, timeout: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sink.lock:
            spans = list(sink.spans)
        if predicate(spans):
            return spans
        time.sleep(0.2)
    raise AssertionError(f"spans never arrived as expected: {[(s['service'], s['name']) for s in spans]}")


@pytest.mark.slow
def test_one_retrieve_is_one_trace_across_front_and_worker(
    tmp_path: Path, collector: tuple[Collector, int]
) -> None:
    sink, port = collector
    otlp = {"RAGSPINE_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "RAGSPINE_EMBEDDING": "onnx"}
    worker_port, front_port = free_port(), free_port()
    worker = spawn(["serve", "worker", "--port", str(worker_port)], otlp, tmp_path / "worker.log")
    front = None
    try:
        wait_serving(f"127.0.0.1:{worker_port}", timeout=120)
        front = spawn(
            [
                "serve",
                "front",
                "--port",
                str(front_port),
                "--data-dir",
                str(tmp_path / "data"),
                "--worker-address",
                f"127.0.0.1:{worker_port}",
            ],
            {**otlp, "RAGSPINE_RETRIEVAL_MODE": "hybrid"},
            tmp_path / "front.log",
        )
        wait_serving(f"127.0.0.1:{front_port}", timeout=120)
        with grpc.insecure_channel(f"127.0.0.1:{front_port}") as channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            stub.Ingest(retrieval_pb2.IngestRequest(library="t", documents=sample_documents()), timeout=120)
            # On a loaded machine the first query may find the worker still busy embedding the backlog
            # (a degraded answer makes no Embed call): ask until one answer used the worker. This test is
            # about traces, not relevance: min_relevance 0 turns the answer gate off, so an answer given
            # while vectors are still pending is not emptied.
            for _ in range(20):
                answer = stub.Retrieve(
                    retrieval_pb2.RetrieveRequest(
                        query="how long does the battery last",
                        libraries=["t"],
                        mode=retrieval_pb2.RETRIEVAL_MODE_HYBRID,
                        min_relevance=0.0,
                    ),
                    timeout=60,
                )
                if "embedding" not in answer.degraded:
                    break
                time.sleep(0.5)
        assert answer.snippets and "embedding" not in answer.degraded

        def complete(spans: list[dict[str, Any]]) -> bool:
            retrieve = [
                s for s in spans if s["service"] == "ragspine-front" and s["name"].endswith("/Retrieve")
            ]
            if not retrieve:
                return False
            trace = retrieve[-1]["trace"]
            worker = [s for s in spans if s["service"] == "ragspine-worker" and "Worker" in s["name"]]
            return any(s["trace"] == trace for s in worker)

        spans = _wait_for(sink, complete)
    finally:
        for proc in (front, worker):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
    server_span = [s for s in spans if s["service"] == "ragspine-front" and s["name"].endswith("/Retrieve")][
        -1
    ]
    in_trace = [s for s in spans if s["trace"] == server_span["trace"]]
    by_id = {s["id"]: s for s in in_trace}
    # The worker's model calls (health checks the front makes meanwhile may join the trace too).
    worker_server = [
        s for s in in_trace if s["service"] == "ragspine-worker" and "ModelWorkerService" in s["name"]
    ]
    assert worker_server, "the worker's spans must join the front's trace"
    for span in worker_server:
        # Parent chain: worker server span → front client span → ... → the front's Retrieve span.
        node = span
        while node["parent"] and node["parent"] in by_id:
            node = by_id[node["parent"]]
        assert node["id"] == server_span["id"]
    # One span per pipeline stage, inside the request's span.
    stages = {s["name"] for s in in_trace if s["name"].startswith("ragspine.")}
    assert {"ragspine.route", "ragspine.text", "ragspine.fusion", "ragspine.exit"} <= stages, stages
    client = by_id[worker_server[0]["parent"]]
    assert client["service"] == "ragspine-front" and "ModelWorkerService" in client["name"]
    # Spans carry no text: no attribute is named after the query or a document.
    assert not any("query" in key or "text" in key for s in in_trace for key in s["attributes"])


def test_tracing_is_off_without_an_endpoint() -> None:
    assert configure_tracing(Settings(), "ragspine-front") is False


def test_a_bad_endpoint_is_refused_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match=r"RAGSPINE_OTLP_ENDPOINT=.*http://"):
        configure_tracing(Settings(otlp_endpoint="collector:4317"), "ragspine-front")
