"""StructuredService over a real loopback gRPC front: tri-state QueryMetric, the composite route, graph
queries, auth per library, bad input, RESTRICTED isolation; on SQLite and on PostgreSQL."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from openpyxl import Workbook

from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2, retrieval_pb2_grpc, structured_pb2, structured_pb2_grpc
from ragspine_services.front.server import build_front_parts, start_front
from ragspine_services.front.structured import STRUCTURED_SERVICE_NAME
from tests.service.helpers import free_port, health_status

FACTS_CSV = (
    "metric,entity,period,value,channel,sensitivity\n"
    "营收,香港,2025Q3,120.5,,\n"
    "营收,中国,2025Q3,80,,\n"
    "营收,中国,2025Q3,33,代理,\n"
    "营收,集团,2025Q2,999,,RESTRICTED\n"
).encode()
NARRATIVE = (
    "Revenue in Hong Kong fell in the second quarter because export tariffs rose.\n\n"
    "Analysts guess group revenue reached 777 million in 2025Q2, but no filing confirms it."
)
_LIBRARY_IDS = itertools.count()
FIN = (("authorization", "Bearer fin-token"),)
OTHER = (("authorization", "Bearer other-token"),)


class Stubs:
    def __init__(self, channel: grpc.Channel, port: int, lib: str) -> None:
        self.lib = lib
        self.facts = structured_pb2_grpc.StructuredServiceStub(channel)
        self.docs = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        self.port = port


@pytest.fixture(params=["sqlite", "postgresql"])
def front(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stubs]:
    # PostgreSQL keeps each library in a schema of its own, shared by every test of the session.
    lib = f"fin{next(_LIBRARY_IDS)}"
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps(
            {
                "fin-token": {"caller": "finance", "libraries": [lib]},
                "other-token": {"caller": "other", "libraries": ["ops"]},
            }
        )
    )
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgresql" else ""
    settings = Settings(
        data_dir=str(tmp_path / "data"),
        retrieval_mode="economy",
        embedding="none",
        auth_tokens_file=str(tokens),
        store_dsn=dsn,
    )
    parts = build_front_parts(settings)
    running = start_front(settings, parts, port=free_port())
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    stubs = Stubs(channel, running.port, lib)
    ingest = stubs.facts.IngestFacts(
        structured_pb2.IngestFactsRequest(library_id=lib, filename="q3.csv", content=FACTS_CSV),
        metadata=FIN,
        timeout=20,
    )
    assert not ingest.errors and ingest.facts_written == 4
    stubs.docs.Ingest(
        retrieval_pb2.IngestRequest(
            library=lib, documents=[retrieval_pb2.Document(doc_id="memo", title="Memo", text=NARRATIVE)]
        ),
        metadata=FIN,
        timeout=20,
    )
    try:
        yield stubs
    finally:
        channel.close()
        running.stop(0)
        parts.close()


def _lookup(metric: str, entity: str, period: str, channel: str = "") -> structured_pb2.MetricLookup:
    return structured_pb2.MetricLookup(metric=metric, entity=entity, period=period, channel=channel)


def _query(front: Stubs, lookup: structured_pb2.MetricLookup, metadata: Any = FIN) -> Any:
    return front.facts.QueryMetric(
        structured_pb2.QueryMetricRequest(library_id=front.lib, lookup=lookup), metadata=metadata, timeout=10
    )


def test_query_metric_tri_state_over_the_wire(front: Stubs) -> None:
    found = _query(front, _lookup("revenue", "hk", "2025年第三季度"))
    assert found.WhichOneof("result") == "found"
    assert found.found.fact.value == 120.5 and found.found.fact.source.locator == "q3.csv!A2"
    assert "120.5" in found.found.answer
    agency = _query(front, _lookup("营收", "china", "2025Q3", "agency"))
    assert agency.found.fact.value == 33.0 and agency.found.fact.channel == "AGENCY"
    missing = _query(front, _lookup("营收", "香港", "2024Q3"))
    assert missing.WhichOneof("result") == "not_found"
    assert missing.not_found.normalized.period == "2024Q3" and not any(
        c.isdigit() for c in missing.not_found.message
    )
    bad = _query(front, _lookup("ebitda", "香港", "2025Q3"))
    assert bad.WhichOneof("result") == "unrecognized_param" and bad.unrecognized_param.param == "metric"


def test_restricted_fact_never_crosses_the_wire(front: Stubs) -> None:
    restricted = _query(front, _lookup("营收", "集团", "2025Q2"))
    absent = _query(front, _lookup("营收", "集团", "2025Q1"))
    assert restricted.WhichOneof("result") == absent.WhichOneof("result") == "not_found"
    assert b"999" not in restricted.SerializeToString()
    graph = front.facts.GraphNeighbors(
        structured_pb2.GraphNeighborsRequest(library_id=front.lib, node_id="entity:ACME_GROUP", depth=3),
        metadata=FIN,
        timeout=10,
    )
    assert graph.nodes and b"999" not in graph.SerializeToString()


def test_composite_keeps_the_number_and_the_narrative_apart(front: Stubs) -> None:
    response = front.facts.CompositeQuery(
        structured_pb2.CompositeQueryRequest(
            library_id=front.lib, lookup=_lookup("revenue", "集团", "2025Q2"), question="group revenue 2025Q2"
        ),
        metadata=FIN,
        timeout=10,
    )
    # The narrative claims 777 and the RESTRICTED fact holds 999: the figure stays not_found.
    assert response.structured.WhichOneof("result") == "not_found"
    assert list(response.structured_sources) == []
    assert any("777" in p.text for p in response.narrative)
    assert all(p.doc_id == "memo" and p.source_locator for p in response.narrative)
    found = front.facts.CompositeQuery(
        structured_pb2.CompositeQueryRequest(
            library_id=front.lib,
            lookup=_lookup("revenue", "hk", "2025Q3"),
            question="why did revenue fall",
            top_k=1,
        ),
        metadata=FIN,
        timeout=10,
    )
    assert found.structured.found.fact.value == 120.5
    assert [(s.doc, s.locator) for s in found.structured_sources] == [("q3.csv", "q3.csv!A2")]
    assert len(found.narrative) == 1 and found.narrative[0].doc_id == "memo"


def test_graph_queries(front: Stubs) -> None:
    rollup = front.facts.GraphRollup(
        structured_pb2.GraphRollupRequest(
            library_id=front.lib, parent_entity="集团", metric="营收", period="2025Q3"
        ),
        metadata=FIN,
        timeout=10,
    )
    assert rollup.found and rollup.HasField("total") and rollup.total == 200.5
    refused = front.facts.GraphRollup(
        structured_pb2.GraphRollupRequest(
            library_id=front.lib, parent_entity="Globex", metric="营收", period="2025Q3"
        ),
        metadata=FIN,
        timeout=10,
    )
    assert refused.refused and not refused.HasField("total") and "GLOBEX" in refused.refusal_message
    compare = front.facts.GraphCompare(
        structured_pb2.GraphCompareRequest(
            library_id=front.lib,
            entities=["hk", "china", "集团"],
            metric="revenue",
            period="last quarter",
            reference_date="2025-11-02",
        ),
        metadata=FIN,
        timeout=10,
    )
    assert [(e.entity, e.found, e.fact.value) for e in compare.entries] == [
        ("ACME_HK", True, 120.5),
        ("ACME_CN", True, 80.0),
        ("ACME_GROUP", False, 0.0),
    ]
    neighbours = front.facts.GraphNeighbors(
        structured_pb2.GraphNeighborsRequest(
            library_id=front.lib,
            node_id="entity:ACME_HK",
            direction=structured_pb2.GRAPH_DIRECTION_IN,
            edge_type="of_entity",
        ),
        metadata=FIN,
        timeout=10,
    )
    assert [n.metadata["value"] for n in neighbours.nodes] == ["120.5"]
    trace = front.facts.GraphTrace(
        structured_pb2.GraphTraceRequest(
            library_id=front.lib, start=neighbours.nodes[0].id, edge_types=["cited_in"]
        ),
        metadata=FIN,
        timeout=10,
    )
    assert [n.id for n in trace.nodes] == ["doc:q3.csv"] and trace.edges[0].metadata[
        "source_locator"
    ] == "q3.csv!A2"


def _code(call: Callable[[], Any]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_auth_and_errors(front: Stubs) -> None:
    lookup = _lookup("revenue", "hk", "2025Q3")
    assert _code(lambda: _query(front, lookup, metadata=())) == grpc.StatusCode.UNAUTHENTICATED
    assert _code(lambda: _query(front, lookup, metadata=OTHER)) == grpc.StatusCode.PERMISSION_DENIED
    ingest_other = structured_pb2.IngestFactsRequest(
        library_id=front.lib, filename="x.csv", content=FACTS_CSV
    )
    assert _code(lambda: front.facts.IngestFacts(ingest_other, metadata=OTHER, timeout=5)) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    bad_requests: list[Callable[[], Any]] = [
        lambda: front.facts.IngestFacts(
            structured_pb2.IngestFactsRequest(library_id=front.lib, filename="x.txt", content=b"a"),
            metadata=FIN,
            timeout=5,
        ),
        lambda: front.facts.IngestFacts(
            structured_pb2.IngestFactsRequest(library_id=front.lib, filename="x.csv", content=b"colour\n"),
            metadata=FIN,
            timeout=5,
        ),
        lambda: front.facts.IngestFacts(
            structured_pb2.IngestFactsRequest(library_id="bad id!", filename="x.csv", content=FACTS_CSV),
            metadata=FIN,
            timeout=5,
        ),
        lambda: front.facts.GraphRollup(
            structured_pb2.GraphRollupRequest(
                library_id=front.lib, parent_entity="集团", metric="营收", period="someday"
            ),
            metadata=FIN,
            timeout=5,
        ),
        lambda: front.facts.GraphTrace(
            structured_pb2.GraphTraceRequest(library_id=front.lib, start="x", max_depth=99),
            metadata=FIN,
            timeout=5,
        ),
        lambda: front.facts.CompositeQuery(
            structured_pb2.CompositeQueryRequest(library_id=front.lib, lookup=lookup), metadata=FIN, timeout=5
        ),
    ]
    for call in bad_requests:
        assert _code(call) == grpc.StatusCode.INVALID_ARGUMENT
    missing_node = structured_pb2.GraphNeighborsRequest(library_id=front.lib, node_id="entity:NOPE")
    assert _code(lambda: front.facts.GraphNeighbors(missing_node, metadata=FIN, timeout=5)) == (
        grpc.StatusCode.NOT_FOUND
    )
    # A file with a bad row stores nothing and lists the row.
    partial = front.facts.IngestFacts(
        structured_pb2.IngestFactsRequest(
            library_id=front.lib,
            filename="y.csv",
            content=b"metric,entity,period,value\nrevenue,hk,2026Q1,1\nebitda,hk,2026Q1,2\n",
        ),
        metadata=FIN,
        timeout=5,
    )
    assert partial.facts_written == 0 and [e.locator for e in partial.errors] == ["y.csv!A3"]
    assert _query(front, _lookup("revenue", "hk", "2026Q1")).WhichOneof("result") == "not_found"


def test_xlsx_over_the_wire_and_health(front: Stubs) -> None:
    book = Workbook()
    book.active.title = "Board"
    for row in (["metric", "entity", "period", "value"], ["profit", "hk", "FY2024", 12]):
        book.active.append(row)
    buf = io.BytesIO()
    book.save(buf)
    report = front.facts.IngestFacts(
        structured_pb2.IngestFactsRequest(library_id=front.lib, filename="b.xlsx", content=buf.getvalue()),
        metadata=FIN,
        timeout=10,
    )
    assert report.facts_written == 1
    got = _query(front, _lookup("operating profit", "hk", "FY2024"))
    assert got.found.fact.source.locator == "Board!A2"
    assert health_status(f"127.0.0.1:{front.port}", STRUCTURED_SERVICE_NAME) == (
        health_pb2.HealthCheckResponse.SERVING
    )
