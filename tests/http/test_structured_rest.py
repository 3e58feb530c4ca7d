"""REST for every StructuredService RPC against a live in-process front: each answer is the proto3 JSON
mapping (snake_case) of exactly what the same request gets over gRPC; same auth and error table."""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from ragspine_services._gen import structured_pb2, structured_pb2_grpc
from ragspine_services.front.http.structured import STRUCTURED_ROUTES
from tests.http.conftest import InProcess
from tests.http.helpers import ADMIN, OTHER, READER_A, call
from tests.structured.test_structured_grpc import FACTS_CSV

LIB = "lib-a"


def ingest_body(content: bytes = FACTS_CSV, library: str = LIB) -> dict[str, Any]:
    return {"library_id": library, "filename": "q3.csv", "content": base64.b64encode(content).decode()}


# path → (request message type, JSON body) for the read RPCs, after q3.csv is ingested into lib-a.
READS: dict[str, dict[str, Any]] = {
    "query_metric": {
        "library_id": LIB,
        "lookup": {"metric": "revenue", "entity": "hk", "period": "2025Q3"},
    },
    "composite_query": {
        "library_id": LIB,
        "lookup": {"metric": "营收", "entity": "china", "period": "2025Q3"},
        "question": "china revenue",
    },
    "graph_rollup": {"library_id": LIB, "parent_entity": "集团", "metric": "营收", "period": "2025Q3"},
    "graph_compare": {
        "library_id": LIB,
        "entities": ["hk", "china", "集团"],
        "metric": "revenue",
        "period": "2025Q3",
    },
    "graph_neighbors": {
        "library_id": LIB,
        "node_id": "entity:ACME_HK",
        "direction": "GRAPH_DIRECTION_IN",
        "edge_type": "of_entity",
    },
}


def grpc_json(front: InProcess, rpc: str, body: dict[str, Any]) -> dict[str, Any]:
    """The same request over gRPC, as the proto3 JSON mapping with snake_case names (timings dropped)."""
    route = next(r for r in STRUCTURED_ROUTES if r.rpc == rpc)
    request = json_format.ParseDict(body, route.request_type())
    with grpc.insecure_channel(front.grpc_address) as channel:
        stub = structured_pb2_grpc.StructuredServiceStub(channel)
        response = getattr(stub, rpc)(request, metadata=(("authorization", f"Bearer {ADMIN}"),), timeout=20)
    out = json_format.MessageToDict(response, preserving_proto_field_name=True)
    out.pop("timings", None)
    return out


def rest(front: InProcess, path: str, body: Any, token: str | None = ADMIN, **kw: Any) -> tuple[int, Any]:
    return call(front.base, "POST", f"/v1/structured/{path}", body, token=token, **kw)


def test_every_rpc_round_trips_as_the_proto_json_mapping(front: InProcess) -> None:
    status, ingested = rest(front, "ingest_facts", ingest_body())
    assert status == 200, ingested
    assert ingested["facts_written"] == 4 and ingested["rows_read"] == 4 and "errors" not in ingested
    assert ingested["source_doc_id"] == "q3.csv" and "sourceDocId" not in json.dumps(ingested)
    answers: dict[str, Any] = {}
    for path, body in READS.items():
        status, answer = rest(front, path, body)
        assert status == 200, (path, answer)
        answer.pop("timings", None)
        rpc = next(r.rpc for r in STRUCTURED_ROUTES if r.path.endswith("/" + path))
        assert answer == grpc_json(front, rpc, body), path
        answers[path] = answer
    found = answers["query_metric"]["found"]
    assert found["fact"]["value"] == 120.5 and found["fact"]["source"]["locator"] == "q3.csv!A2"
    assert answers["graph_rollup"]["total"] == 200.5
    [node] = answers["graph_neighbors"]["nodes"]
    trace_body = {"library_id": LIB, "start": node["id"], "edge_types": ["cited_in"]}
    status, trace = rest(front, "graph_trace", trace_body)
    assert status == 200 and [n["id"] for n in trace["nodes"]] == ["doc:q3.csv"]
    assert trace == grpc_json(front, "GraphTrace", trace_body)
    # Unchanged file: nothing new written; the same answer over gRPC.
    status, again = rest(front, "ingest_facts", ingest_body())
    assert status == 200 and again.get("facts_written", 0) == 0


def test_every_structured_rpc_has_a_route() -> None:
    service = structured_pb2.DESCRIPTOR.services_by_name["StructuredService"]
    assert {r.rpc for r in STRUCTURED_ROUTES} == {m.name for m in service.methods}
    for route in STRUCTURED_ROUTES:
        method = service.methods_by_name[route.rpc]
        assert route.request_type.DESCRIPTOR is method.input_type
        assert route.response_type.DESCRIPTOR is method.output_type


@pytest.mark.parametrize(
    ("token", "body", "status", "code", "message"),
    [
        (None, READS["query_metric"], 401, "UNAUTHENTICATED", "token"),
        ("not-a-token", READS["query_metric"], 401, "UNAUTHENTICATED", "token"),
        (OTHER, READS["query_metric"], 403, "PERMISSION_DENIED", "lib-a"),
        (ADMIN, {"library_id": LIB, "lookup": {"metric": 7}}, 400, "INVALID_ARGUMENT", "QueryMetricRequest"),
        (ADMIN, {"library_id": LIB, "colour": "red"}, 400, "INVALID_ARGUMENT", "colour"),
        (ADMIN, [1, 2], 400, "INVALID_ARGUMENT", "JSON object"),
    ],
)
def test_auth_and_bad_input_use_the_error_table(
    front: InProcess, token: str | None, body: Any, status: int, code: str, message: str
) -> None:
    got, answer = rest(front, "query_metric", body, token=token)
    assert (got, answer["code"]) == (status, code), answer
    assert message.lower() in answer["message"].lower()


def test_writes_need_the_write_scope_and_bad_files_write_nothing(front: InProcess) -> None:
    status, answer = rest(front, "ingest_facts", ingest_body(), token=READER_A)
    assert (status, answer["code"]) == (403, "PERMISSION_DENIED")
    status, answer = rest(front, "ingest_facts", {**ingest_body(), "filename": "x.txt"})
    assert (status, answer["code"]) == (400, "INVALID_ARGUMENT") and "x.txt" in answer["message"]
    status, answer = rest(front, "ingest_facts", {**ingest_body(), "content": "***"})
    assert (status, answer["code"]) == (400, "INVALID_ARGUMENT")
    # A file with a bad row: every error returned, nothing written (all rows or none).
    bad = FACTS_CSV + "营收,火星,2025Q3,1,,\n".encode()
    status, answer = rest(front, "ingest_facts", ingest_body(bad))
    assert status == 200 and answer.get("facts_written", 0) == 0 and answer["errors"]
    status, answer = rest(front, "query_metric", READS["query_metric"])
    assert status == 200 and "not_found" in answer


def test_a_front_without_the_structured_channel_serves_no_structured_routes() -> None:
    from starlette.routing import Route

    from ragspine_services.front.http import build_app
    from ragspine_services.front.servicer import RetrievalServicer

    app = build_app(RetrievalServicer(catalog=None))  # type: ignore[arg-type]
    paths = {r.path for r in app.routes if isinstance(r, Route)}
    assert not any(p.startswith("/v1/structured/") for p in paths)
